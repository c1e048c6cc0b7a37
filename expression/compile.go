package expression

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/parser"
)

// Defaults of [Limits], taken by a zero field.
const (
	// DefaultMaxLength is the default Limits.MaxLength, in bytes.
	DefaultMaxLength = 4096
	// DefaultMaxNodes is the default Limits.MaxNodes, in syntax nodes.
	DefaultMaxNodes = 1000
	// DefaultMaxCost is the default Limits.MaxCost, in CEL cost units;
	// an evaluation stopped at this limit has run for several milliseconds
	// (8ms for nested loops over a list, BenchmarkEvalToCostLimit).
	DefaultMaxCost = 100_000
)

// Limits bound an expression's size at compile time and its work per
// evaluation; rules read from a Kafka topic are untrusted data. A zero (or
// negative) field takes its default.
type Limits struct {
	// MaxLength is the longest source accepted, in bytes (default
	// DefaultMaxLength, 4096).
	MaxLength int
	// MaxNodes is the most syntax nodes accepted, counted after macro
	// expansion, so tags.map(t, t) counts more than its four names
	// (default DefaultMaxNodes, 1000).
	MaxNodes int
	// MaxCost bounds one evaluation in CEL cost units: about one per
	// operation, one per element of a list or map a function walks, and one
	// per ten bytes a string function reads or builds (default
	// DefaultMaxCost, 100000). Compile refuses an expression whose minimum
	// estimated cost exceeds it; an evaluation that reaches it stops with an
	// *EvalError.
	MaxCost uint64
}

func (l Limits) withDefaults() Limits {
	if l.MaxLength <= 0 {
		l.MaxLength = DefaultMaxLength
	}
	if l.MaxNodes <= 0 {
		l.MaxNodes = DefaultMaxNodes
	}
	if l.MaxCost == 0 {
		l.MaxCost = DefaultMaxCost
	}
	return l
}

// resultKind is the result an Option requires of an expression.
type resultKind int

const (
	anyResult resultKind = iota
	boolResult
	listResult
	mapResult
)

func (k resultKind) String() string {
	switch k {
	case boolResult:
		return "bool"
	case listResult:
		return "list"
	case mapResult:
		return "map"
	}
	return "any"
}

type options struct {
	limits Limits
	expect resultKind
}

// Option configures [Compile].
type Option func(*options)

// WithLimits sets the size and cost limits; zero fields of l take their
// defaults. Without it Compile uses the defaults of [Limits].
func WithLimits(l Limits) Option {
	return func(o *options) { o.limits = l }
}

// ExpectBool makes Compile refuse an expression whose result type is known
// not to be bool (amount + 1); one of unknown type (a bare field) is
// accepted and checked per evaluation. For filters, with [Program.EvalBool].
func ExpectBool() Option {
	return func(o *options) { o.expect = boolResult }
}

// ExpectList is [ExpectBool] for a list result, for flat_map selectors
// with [Program.EvalList].
func ExpectList() Option {
	return func(o *options) { o.expect = listResult }
}

// ExpectMap is [ExpectBool] for a map result, for projections; Eval
// returns a map[string]any.
func ExpectMap() Option {
	return func(o *options) { o.expect = mapResult }
}

// CompileError is an expression that did not compile: a syntax or type
// error, or a limit exceeded. Line and Column are 1-based within the
// expression text, Column counting characters (Unicode code points); they
// are 1:1 when the error concerns the whole expression (its length, node
// count, cost or result type). A caller holding the expression's position
// in a file (YAML) adds it to these.
type CompileError struct {
	Expr   string // the expression's source text
	Line   int    // 1-based line within Expr
	Column int    // 1-based column within the line, in characters
	Msg    string // the reason, lowercase
}

// Error returns `expression "<expr>": <line>:<column>: <msg>`, the
// expression shortened to 64 bytes.
func (e *CompileError) Error() string {
	return fmt.Sprintf("expression %q: %d:%d: %s", shorten(e.Expr), e.Line, e.Column, e.Msg)
}

// Compile compiles the CEL expression src once, for evaluation on many
// records by the returned Program. It returns a *CompileError for a syntax
// or type error, an expression over a limit of [Limits] (see [WithLimits]),
// a result type contradicting [ExpectBool], [ExpectList] or [ExpectMap], or
// a constant sub-expression that cannot be evaluated (1 / 0,
// 9223372036854775807 + 1), at that sub-expression's first character.
//
// Every identifier src uses that is not a reserved name (value, key,
// timestamp, headers) is declared as a field of the record, of dynamic type;
// whether a record has it is known only at evaluation.
func Compile(src string, opts ...Option) (*Program, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	lim := o.limits.withDefaults()
	whole := func(format string, args ...any) error {
		return &CompileError{Expr: src, Line: 1, Column: 1, Msg: fmt.Sprintf(format, args...)}
	}
	if len(src) > lim.MaxLength {
		return nil, whole("%d bytes, longer than the limit of %d", len(src), lim.MaxLength)
	}
	if !utf8.ValidString(src) {
		line, col := position(src, invalidUTF8(src))
		return nil, &CompileError{Expr: src, Line: line, Column: col, Msg: "invalid UTF-8"}
	}
	env, err := cel.NewEnv(
		cel.OptionalTypes(),
		ext.Strings(), // split, join, lowerAscii, upperAscii, trim, replace, substring, indexOf, format ...
		cel.ParserExpressionSizeLimit(lim.MaxLength),
		cel.ExpressionNodeLimit(lim.MaxNodes),
		cel.Variable(nameValue, cel.DynType),
		cel.Variable(nameKey, cel.DynType),
		cel.Variable(nameTimestamp, cel.IntType),
		cel.Variable(nameHeaders, cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable(nameTopic, cel.StringType),
	)
	if err != nil {
		return nil, fmt.Errorf("expression: environment: %w", err)
	}
	// The adapter CEL converts the record's values with: its own, knowing
	// a Doc's lazily read objects (docAdapter).
	if env, err = env.Extend(cel.CustomTypeAdapter(docAdapter{base: env.CELTypeAdapter()})); err != nil {
		return nil, fmt.Errorf("expression: environment: %w", err)
	}
	parsed, iss := env.Parse(src)
	if iss.Err() != nil {
		return nil, compileError(src, iss)
	}
	if fields := freeNames(parsed); len(fields) > 0 {
		if env, err = env.Extend(fields...); err != nil {
			return nil, fmt.Errorf("expression: environment: %w", err)
		}
	}
	checked, iss := env.Check(parsed)
	if iss.Err() != nil {
		return nil, compileError(src, iss)
	}
	if t := checked.OutputType(); !fits(t, o.expect) {
		return nil, whole("result is %s, want %s", t, o.expect)
	}
	est, err := env.EstimateCost(checked, unknownSizes{})
	if err != nil {
		return nil, whole("cost estimate: %v", err)
	}
	if est.Min > lim.MaxCost {
		return nil, whole("estimated cost of at least %d exceeds the limit of %d", est.Min, lim.MaxCost)
	}
	if err := constantError(env, src, checked, lim.MaxCost); err != nil {
		return nil, err
	}
	var popts []cel.ProgramOption
	if est.Max > lim.MaxCost {
		// Only an expression whose worst case is unbounded by the estimate
		// (it walks a list or a string of the record) pays for tracking.
		popts = append(popts, cel.CostLimit(lim.MaxCost), cel.CostTracking(concatCost{}))
	}
	prg, err := env.Program(checked, popts...)
	if err != nil {
		return nil, whole("%s", lowerFirst(err.Error()))
	}
	var d *direct
	if len(popts) == 0 {
		d = compileDirect(checked.NativeRep(), 0, 0)
	} else if b, err := env.EstimateCost(checked, boundedSizes{directStringBound}); err == nil && b.Max <= lim.MaxCost {
		// Cost-tracked, but within the limit whenever the record's
		// strings are short: direct on such records (compileDirect).
		d = compileDirect(checked.NativeRep(), directStringBound, lim.MaxCost-b.Max)
	}
	return &Program{
		direct:   d,
		src:      src,
		prg:      prg,
		ast:      checked,
		expect:   o.expect,
		limit:    lim.MaxCost,
		tracked:  len(popts) > 0,
		fastJSON: true,
		traced: sync.OnceValues(func() (cel.Program, error) {
			return env.Program(checked, cel.EvalOptions(cel.OptTrackState),
				cel.CostLimit(lim.MaxCost), cel.CostTracking(concatCost{}))
		}),
	}, nil
}

// constantError returns a *CompileError for a constant sub-expression of
// checked that cannot be evaluated (1 / 0, 9223372036854775807 + 1,
// int('x'), [1][2]): as it reads no part of the record, it would fail on
// every record. The sub-expressions that read nothing of the record (no
// identifier, no comprehension) are folded as CEL's constant folding
// optimizer does (cel.NewConstantFoldingOptimizer, which leaves a failing
// one in place for evaluation, silently): each largest one is evaluated
// once, and when it fails the error points at the innermost constant
// sub-expression that fails, at its first character. A constant one that
// evaluates, even if a part of it would fail alone (true || 1 / 0 == 1),
// is accepted: it never fails. A constant one in a ?: branch, an
// or/orValue argument or a comprehension's loop is not judged (see
// unconditional): whether it runs depends on the record.
// Sub-expressions are evaluated under the cost limit maxCost.
func constantError(env *cel.Env, src string, checked *cel.Ast, maxCost uint64) error {
	a := checked.NativeRep()
	constant := map[int64]bool{}
	var mark func(e celast.NavigableExpr) bool
	mark = func(e celast.NavigableExpr) bool {
		c := true
		switch e.Kind() {
		case celast.IdentKind, celast.ComprehensionKind, celast.UnspecifiedExprKind:
			c = false
		}
		for _, ch := range e.Children() {
			if !mark(ch) {
				c = false
			}
		}
		constant[e.ID()] = c
		return c
	}
	root := celast.NavigateAST(a)
	mark(root)
	eval := func(e celast.NavigableExpr) (string, error) {
		text, err := parser.Unparse(e, a.SourceInfo())
		if err != nil {
			return "", nil // not foldable here: left to evaluation
		}
		sub, iss := env.Compile(text)
		if iss.Err() != nil {
			return "", nil
		}
		prg, err := env.Program(sub, cel.CostLimit(maxCost))
		if err != nil {
			return "", nil
		}
		_, _, err = prg.Eval(cel.NoVars())
		return text, err
	}
	foldable := func(e celast.NavigableExpr) bool { return constant[e.ID()] && e.Kind() != celast.LiteralKind }
	var walk func(e celast.NavigableExpr) error
	walk = func(e celast.NavigableExpr) error {
		if !foldable(e) {
			for _, ch := range unconditional(e) {
				if err := walk(ch); err != nil {
					return err
				}
			}
			return nil
		}
		text, err := eval(e)
		if err == nil {
			return nil
		}
	innermost:
		for {
			for _, ch := range e.Children() {
				if !foldable(ch) {
					continue
				}
				if t, cerr := eval(ch); cerr != nil {
					e, text, err = ch, t, cerr
					continue innermost
				}
			}
			break
		}
		line, col := 1, 1
		if start, ok := startOffset(a.SourceInfo(), e); ok {
			if loc := a.SourceInfo().GetLocationByOffset(start); loc.Line() >= 1 && loc.Column() >= 0 {
				line, col = loc.Line(), loc.Column()+1
			}
		}
		return &CompileError{Expr: src, Line: line, Column: col,
			Msg: fmt.Sprintf("constant sub-expression %s cannot be evaluated: %v", shorten(text), err)}
	}
	return walk(root)
}

// unconditional returns the children of e in which a constant failure is
// judged: only the condition of c ? a : b (one branch runs, chosen by the
// record: x >= 0 ? x : int('negative') is how an expression dead-letters
// the records it picks), only the target of opt.or(o) and opt.orValue(v)
// (short-circuited), only the range and the accumulator's start of a
// comprehension (its loop runs once per element, not at all for an empty
// range), and every child of anything else. Both sides of && and || are
// judged, although CEL absorbs an error of one side when the other
// decides: a constant failure there (x > 0 && x < 9223372036854775807 + 1)
// is taken for a mistake (issue 22).
func unconditional(e celast.NavigableExpr) []celast.NavigableExpr {
	ch := e.Children()
	switch e.Kind() {
	case celast.CallKind:
		switch e.AsCall().FunctionName() {
		case operators.Conditional, "or", "orValue":
			return ch[:min(1, len(ch))]
		}
	case celast.ComprehensionKind:
		return ch[:min(2, len(ch))]
	}
	return ch
}

// startOffset returns the offset (in characters) of e's first character:
// the smallest start of its nodes (CEL places a call at its operator, so
// 1 / 0 at the /, an index at its [).
func startOffset(info *celast.SourceInfo, e celast.NavigableExpr) (int32, bool) {
	start, found := int32(0), false
	var visit func(e celast.NavigableExpr)
	visit = func(e celast.NavigableExpr) {
		if r, ok := info.GetOffsetRange(e.ID()); ok && (!found || r.Start < start) {
			start, found = r.Start, true
		}
		for _, ch := range e.Children() {
			visit(ch)
		}
	}
	visit(e)
	return start, found
}

// freeNames declares, as dynamically typed variables, the identifiers of
// parsed other than the reserved names. Comprehension variables are
// declared too; inside their comprehension they shadow the declaration.
func freeNames(parsed *cel.Ast) []cel.EnvOption {
	seen := map[string]bool{nameValue: true, nameKey: true, nameTimestamp: true, nameHeaders: true, nameTopic: true}
	var vars []cel.EnvOption
	celast.PreOrderVisit(parsed.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() != celast.IdentKind {
			return
		}
		if name := e.AsIdent(); !seen[name] {
			seen[name] = true
			vars = append(vars, cel.Variable(name, cel.DynType))
		}
	}))
	return vars
}

// fits reports whether a result of static type t may satisfy want.
func fits(t *types.Type, want resultKind) bool {
	switch t.Kind() {
	case types.DynKind, types.AnyKind, types.ErrorKind:
		return true
	}
	switch want {
	case boolResult:
		return t.Kind() == types.BoolKind
	case listResult:
		return t.Kind() == types.ListKind
	case mapResult:
		return t.Kind() == types.MapKind
	}
	return true
}

// unknownSizes leaves every size to CEL's estimate: a record's lists and
// strings may be of any length.
type unknownSizes struct{}

func (unknownSizes) EstimateSize(cost.AstNode) *cost.SizeEstimate { return nil }

func (unknownSizes) EstimateCallCost(_, overload string, _ *cost.AstNode, _ []cost.AstNode) *cost.CallEstimate {
	return timestampTextEstimate(overload)
}

// directStringBound is the length in bytes up to which the direct form of
// a cost-tracked program reads the record's strings (compileDirect).
const directStringBound = 4096

// boundedSizes is unknownSizes with every value read from the record (a
// variable or a path of fields from one: the nodes CEL gives a Path) at
// most n long: CEL's estimate then
// bounds the cost of an evaluation on records whose values are that short.
type boundedSizes struct{ n uint64 }

func (b boundedSizes) EstimateSize(e cost.AstNode) *cost.SizeEstimate {
	if len(e.Path()) > 0 {
		return &cost.SizeEstimate{Min: 0, Max: b.n}
	}
	return nil
}

func (b boundedSizes) EstimateCallCost(_, overload string, _ *cost.AstNode, args []cost.AstNode) *cost.CallEstimate {
	if e := timestampTextEstimate(overload); e != nil {
		return e
	}
	return b.stringConversion(overload, args)
}

// maxScalarText is the longest text CEL's string() makes of an int, a
// uint, a double, a bool or a duration: "-9223372036854775808" is 20 bytes,
// a double's shortest form at most 24 ("-2.2250738585072014e-308"), a
// duration's seconds with 9 decimals and an "s" at most 32.
const maxScalarText = 32

// stringConversion is the estimate of string(x) on records whose strings
// are at most b.n long, nil to leave it to CEL: the conversions of a
// scalar (cost 1, as CEL's tracker charges every conversion) make at most
// maxScalarText bytes; string of a string or of bytes makes at most x's
// size, known when x is read from the record (b.n), has a size CEL
// computed, or is an arithmetic operation other than + (never a string
// or bytes: that overload cannot apply). CEL alone leaves the result of
// a conversion of a dynamically typed x unbounded (x may be a string of
// any length), so string(a - a % 10) + '@' would have no direct form
// (Nexmark q8's dedup key).
func (b boundedSizes) stringConversion(overload string, args []cost.AstNode) *cost.CallEstimate {
	switch overload {
	case overloads.IntToString, overloads.UintToString, overloads.DoubleToString,
		overloads.BoolToString, overloads.DurationToString:
		return &cost.CallEstimate{CostEstimate: cost.FixedCostEstimate(1), ResultSize: &cost.SizeEstimate{Min: 0, Max: maxScalarText}}
	case overloads.StringToString, overloads.BytesToString:
		if len(args) != 1 {
			return nil
		}
		sz := b.operandSize(args[0])
		if sz == nil {
			return nil
		}
		// bytes to string: CEL charges a traversal, 0.1 a byte.
		return &cost.CallEstimate{CostEstimate: cost.CostEstimate{Min: 1, Max: 1 + sz.Max/10}, ResultSize: &cost.SizeEstimate{Min: 0, Max: sz.Max}}
	}
	return nil
}

// operandSize bounds the length of a string or bytes operand x on records
// whose strings are at most b.n long; nil when it is not known.
func (b boundedSizes) operandSize(x cost.AstNode) *cost.SizeEstimate {
	if sz := x.ComputedSize(); sz != nil && sz.Max < math.MaxUint64 {
		return sz
	}
	if len(x.Path()) > 0 {
		return &cost.SizeEstimate{Min: 0, Max: b.n}
	}
	if e := x.Expr(); e != nil && e.Kind() == celast.CallKind {
		switch e.AsCall().FunctionName() {
		case operators.Subtract, operators.Multiply, operators.Divide, operators.Modulo, operators.Negate:
			// A number, a timestamp or a duration: never a string or bytes.
			return &cost.SizeEstimate{Min: 0, Max: 0}
		}
	}
	return nil
}

// concatCost charges + on strings and bytes by the length of its result,
// one unit per ten bytes as CEL charges a string + of known static type.
// CEL charges a + of dynamically typed operands (a field) one unit
// whatever it builds, so s + s + ... + s on a large string field would
// copy quadratically within the cost limit.
type concatCost struct{}

func (concatCost) CallCost(function, _ string, _ []ref.Val, result ref.Val) *uint64 {
	if function != operators.Add {
		return nil
	}
	var n int
	switch r := result.(type) {
	case types.String:
		n = len(r)
	case types.Bytes:
		n = len(r)
	default:
		return nil
	}
	c := 1 + uint64(n)/10
	return &c
}

// compileError converts the first of CEL's issues.
func compileError(src string, iss *cel.Issues) error {
	errs := iss.Errors()
	if len(errs) == 0 {
		return &CompileError{Expr: src, Line: 1, Column: 1, Msg: lowerFirst(iss.Err().Error())}
	}
	first := errs[0]
	line, col := first.Location.Line(), first.Location.Column()+1
	if line < 1 || col < 1 {
		line, col = 1, 1
	}
	msg := lowerFirst(first.Message)
	if n := len(errs) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more errors)", n)
	}
	return &CompileError{Expr: src, Line: line, Column: col, Msg: msg}
}

// lowerFirst lowercases CEL's capitalised messages ("Syntax error: ...").
func lowerFirst(s string) string {
	if strings.HasPrefix(s, "Syntax error") {
		return "syntax error" + s[len("Syntax error"):]
	}
	if strings.HasPrefix(s, "ERROR: ") {
		return s[len("ERROR: "):]
	}
	return s
}

// invalidUTF8 returns the byte offset of the first invalid UTF-8 in s.
func invalidUTF8(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return i
			}
		}
	}
	return len(s)
}

// position returns the 1-based line and column (in characters) of byte
// offset off in s.
func position(s string, off int) (line, col int) {
	line, col = 1, 1
	for _, r := range s[:off] {
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// shorten cuts s to at most 64 bytes, at a character boundary, for messages.
func shorten(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
