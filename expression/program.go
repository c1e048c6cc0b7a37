package expression

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"
)

// Program is a compiled expression. It is immutable and safe for
// concurrent use by several goroutines.
type Program struct {
	src     string
	prg     cel.Program
	ast     *cel.Ast
	expect  resultKind
	limit   uint64
	tracked bool // evaluation counts cost against limit
	// fastJSON lets EvalJSON write a map literal's result directly (off
	// only to test it against the general path).
	fastJSON bool
	// direct evaluates the expression without CEL's interpreter when it
	// can (direct.go); nil when the expression is not of that form, its
	// cost is tracked, or (in tests) to compare with the general path.
	direct *direct

	// traced evaluates with every sub-expression's value kept, to explain
	// a "no such overload" error; built on first need.
	traced func() (cel.Program, error)
}

// Source returns the expression text the Program was compiled from.
func (p *Program) Source() string { return p.src }

// EvalError is an evaluation that failed on one record: a missing field,
// an operator applied to the wrong types ("12" > 100), an integer
// overflow, a result of the wrong kind, or the cost limit exceeded. Line
// and Column (1-based, in characters) locate the failing sub-expression
// when CEL reports it, and are 0 otherwise.
type EvalError struct {
	Expr   string // the expression's source text
	Line   int    // 1-based line of the failing sub-expression, or 0
	Column int    // 1-based column, in characters, or 0
	Err    error  // the reason
}

// Error returns `expression "<expr>": [<line>:<column>: ]<reason>`, the
// expression shortened to 64 bytes.
func (e *EvalError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("expression %q: %d:%d: %v", shorten(e.Expr), e.Line, e.Column, e.Err)
	}
	return fmt.Sprintf("expression %q: %v", shorten(e.Expr), e.Err)
}

// Unwrap returns the reason.
func (e *EvalError) Unwrap() error { return e.Err }

// Eval evaluates the expression on the record of env (nil is an empty
// record) and returns its result as Go values: bool, int64, uint64,
// float64, string, []byte, nil (null), []any, map[string]any,
// time.Time (a CEL timestamp) or time.Duration. An optional result is its
// value, or nil when absent. Lists and maps of the record itself are
// returned as they are, not copied. A failure is an *EvalError.
func (p *Program) Eval(env *Env) (any, error) {
	if p.direct != nil && p.expect == anyResult && env != nil {
		if v, ok := p.direct.value(env); ok {
			return v, nil
		}
	}
	out, err := p.eval(env)
	if err != nil {
		return nil, err
	}
	return p.result(out)
}

// EvalInt64 evaluates the expression on the record of env as Eval does,
// for a caller that expects an int result (a timestamp in milliseconds):
// when the result is an int (Eval's int64) it is i, with isInt true and v
// nil, without the allocation that boxing it in Eval's any costs (the
// direct evaluator's result is returned as it is); otherwise isInt is
// false and v and err are Eval's result and error.
func (p *Program) EvalInt64(env *Env) (i int64, isInt bool, v any, err error) {
	if d := p.direct; d != nil && d.root != nil && p.expect == anyResult && env != nil {
		r := d.eval(env)
		if r.k == dInt {
			return r.i, true, nil, nil
		}
		if v, ok := d.native(env, r); ok {
			return 0, false, v, nil
		}
	}
	out, err := p.eval(env)
	if err != nil {
		return 0, false, nil, err
	}
	if v, err = p.result(out); err != nil {
		return 0, false, nil, err
	}
	if x, ok := v.(int64); ok {
		return x, true, nil, nil
	}
	return 0, false, v, nil
}

// result converts the CEL result out to Eval's Go values.
func (p *Program) result(out ref.Val) (any, error) {
	v, err := native(out)
	if err != nil {
		return nil, p.fail(err)
	}
	if p.expect == mapResult {
		if _, ok := v.(map[string]any); !ok {
			return nil, p.fail(fmt.Errorf("result is %s, want map", TypeName(v)))
		}
	}
	return v, nil
}

// EvalJSON evaluates the expression on the record of env as Eval does and
// appends its result's JSON to dst as AppendJSON does: the same bytes as
// AppendJSON(dst, Eval(env)) and the same errors (FuzzEvalJSONEqualsEval),
// for an operator that only writes the result (map's value). A result
// built by a map literal ({"id": id, ...}) is written from CEL's values
// directly, without converting it to Go values first; then v is nil and
// roundTrips false. Otherwise v is Eval's result and roundTrips is
// AppendJSON's. A failure of the evaluation, or a result of the wrong
// kind, is an *EvalError, as in Eval; a result JSON cannot hold is
// AppendJSON's error (dst is then returned as it was).
func (p *Program) EvalJSON(dst []byte, env *Env) (out []byte, v any, roundTrips bool, err error) {
	if p.direct != nil && env != nil {
		if p.direct.m != nil && p.fastJSON {
			if b, ok := p.direct.appendJSON(dst, env); ok {
				return b, nil, false, nil
			}
		} else if p.expect == anyResult {
			if v, ok := p.direct.value(env); ok {
				out, roundTrips, err = AppendJSON(dst, v)
				return out, v, roundTrips, err
			}
		}
	}
	res, err := p.eval(env)
	if err != nil {
		return dst, nil, false, err
	}
	if m, ok := res.Value().(map[ref.Val]ref.Val); ok && p.fastJSON {
		if _, isMapper := res.(traits.Mapper); isMapper {
			e := jsonAppender{buf: dst}
			if e.refMap(m) {
				return e.buf, nil, false, nil
			}
		}
	}
	if v, err = p.result(res); err != nil {
		return dst, nil, false, err
	}
	out, roundTrips, err = AppendJSON(dst, v)
	return out, v, roundTrips, err
}

// EvalBool evaluates a boolean expression, typically a filter, on the
// record of env. A result other than a bool is an *EvalError, as is any
// failure of Eval.
func (p *Program) EvalBool(env *Env) (bool, error) {
	if p.direct != nil && env != nil {
		if b, ok := p.direct.bool(env); ok {
			return b, nil
		}
	}
	out, err := p.eval(env)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, p.fail(fmt.Errorf("result is %s, want bool", celKind(out)))
	}
	return bool(b), nil
}

// EvalList evaluates a list expression, typically a flat_map selector, on
// the record of env and returns its elements as Eval's Go values. A result
// other than a list is an *EvalError, as is any failure of Eval.
func (p *Program) EvalList(env *Env) ([]any, error) {
	v, err := p.Eval(env)
	if err != nil {
		return nil, err
	}
	l, ok := v.([]any)
	if !ok {
		return nil, p.fail(fmt.Errorf("result is %s, want list", TypeName(v)))
	}
	return l, nil
}

func (p *Program) eval(env *Env) (ref.Val, error) {
	if env == nil {
		env = new(Env)
	}
	out, _, err := p.prg.Eval((*activation)(env))
	if err != nil {
		return nil, p.evalError(env, err)
	}
	if o, ok := out.(*types.Optional); ok {
		if !o.HasValue() {
			return types.NullValue, nil
		}
		out = o.GetValue()
	}
	return out, nil
}

func (p *Program) fail(err error) *EvalError {
	return &EvalError{Expr: p.src, Err: err}
}

// evalError converts an error of CEL's evaluation on env, locating it
// when CEL names the failing node and naming the operand types of a
// "no such overload" error.
func (p *Program) evalError(env *Env, err error) *EvalError {
	var cancelled interpreter.EvalCancelledError
	if errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded {
		return p.fail(fmt.Errorf("evaluation cost exceeds the limit of %d", p.limit))
	}
	e := p.fail(err)
	var celErr *types.Err
	if !errors.As(err, &celErr) || celErr.NodeID() == 0 {
		return e
	}
	id := celErr.NodeID()
	if loc := p.ast.NativeRep().SourceInfo().GetStartLocation(id); loc.Line() > 0 {
		e.Line, e.Column = loc.Line(), loc.Column()+1
	}
	if strings.HasPrefix(celErr.Error(), "no such overload") {
		if msg := p.explainOverload(env, id); msg != "" {
			e.Err = errors.New(msg)
		}
	}
	return e
}

// explainOverload re-evaluates on env keeping every sub-expression's value
// and describes the call at node id by its operand types, such as
// "no operator > for string and int"; "" when it cannot.
func (p *Program) explainOverload(env *Env, id int64) string {
	matches := celast.MatchDescendants(celast.NavigateAST(p.ast.NativeRep()), func(e celast.NavigableExpr) bool {
		return e.ID() == id
	})
	if len(matches) != 1 || matches[0].Kind() != celast.CallKind {
		return ""
	}
	call := matches[0].AsCall()
	prg, err := p.traced()
	if err != nil {
		return ""
	}
	// env has been evaluated already, so its lazy key and headers are
	// built: the second run sees the same record.
	_, det, _ := prg.Eval((*activation)(env))
	if det == nil || det.State() == nil {
		return ""
	}
	var operands []celast.Expr
	if call.IsMemberFunction() {
		operands = append(operands, call.Target())
	}
	operands = append(operands, call.Args()...)
	names := make([]string, len(operands))
	for i, a := range operands {
		v, ok := det.State().Value(a.ID())
		if !ok || v == nil {
			return ""
		}
		names[i] = v.Type().TypeName()
	}
	fn := call.FunctionName()
	if sym, ok := operators.FindReverse(fn); ok && sym != "" {
		switch len(names) {
		case 1:
			return fmt.Sprintf("no operator %s for %s", sym, names[0])
		case 2:
			return fmt.Sprintf("no operator %s for %s and %s", sym, names[0], names[1])
		}
	}
	return fmt.Sprintf("no function %s(%s)", fn, strings.Join(names, ", "))
}

// native converts a CEL result to Go values (see Program.Eval).
func native(v ref.Val) (any, error) {
	switch x := v.(type) {
	case types.Bool:
		return bool(x), nil
	case types.Int:
		return int64(x), nil
	case types.Uint:
		return uint64(x), nil
	case types.Double:
		return float64(x), nil
	case types.String:
		return string(x), nil
	case types.Bytes:
		return []byte(x), nil
	case types.Null:
		return nil, nil
	case types.Timestamp:
		return x.Time, nil
	case types.Duration:
		return x.Duration, nil
	case *types.Optional:
		if !x.HasValue() {
			return nil, nil
		}
		return native(x.GetValue())
	}
	// Lists and maps of the record are wrapped Go values: return them.
	switch g := v.Value().(type) {
	case []any:
		return g, nil
	case map[string]any:
		return g, nil
	}
	switch x := v.(type) {
	case traits.Lister:
		n, ok := x.Size().(types.Int)
		if !ok {
			return nil, fmt.Errorf("list of unknown size")
		}
		out := make([]any, 0, int(n))
		for it := x.Iterator(); it.HasNext() == types.True; {
			e, err := native(it.Next())
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	case traits.Mapper:
		out := make(map[string]any)
		for it := x.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, fmt.Errorf("map key %v is %s, want string", k, k.Type().TypeName())
			}
			e, err := native(x.Get(k))
			if err != nil {
				return nil, err
			}
			out[string(ks)] = e
		}
		return out, nil
	}
	return nil, fmt.Errorf("result of type %s has no JSON form", v.Type().TypeName())
}

// TypeName names the CEL type of a Go value an evaluation returned ("null",
// "bool", "int", "uint", "double", "string", "bytes", "list", "map",
// "timestamp", "duration", else its Go type), for messages.
func TypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case int64:
		return "int"
	case uint64:
		return "uint"
	case float64:
		return "double"
	case string:
		return "string"
	case []byte:
		return "bytes"
	case []any:
		return "list"
	case map[string]any:
		return "map"
	case time.Time:
		return "timestamp"
	case time.Duration:
		return "duration"
	}
	return fmt.Sprintf("%T", v)
}

// celKind names the type of a CEL result as TypeName does.
func celKind(v ref.Val) string {
	if g, err := native(v); err == nil {
		return TypeName(g)
	}
	return v.Type().TypeName()
}
