package expression

import (
	"math"
	"slices"
	"strconv"
	"strings"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
)

// This file is the direct evaluator: the expressions most pipelines are
// made of (a filter such as amount < 500 or event_type == 2, a map literal
// {"id": id, "price": double(bid.price * 908) / 1000.0} of field
// selections, literals, arithmetic, comparisons, && || ! and ?:) are
// evaluated on the record without CEL's interpreter, and a map literal's
// JSON written without CEL building its map. It only ever gives the result
// CEL gives: on anything else (a missing field, an object or list where a
// scalar is read, operands of different types, an overflow, a division by
// zero, NaN, a non-bool condition) it gives up and the Program evaluates
// the expression with CEL, whose result or error then counts (so errors,
// their messages and positions are CEL's). FuzzDirectEqualsCEL compares
// the two paths.

// dkind is the kind of a direct value; dFail means "give up".
type dkind uint8

const (
	dFail dkind = iota
	dNull
	dBool
	dInt
	dDouble
	dString
)

// dval is a scalar the direct evaluator computes: the CEL value of kind k
// (null, bool b, int i, double f, string s), held without allocating.
type dval struct {
	k dkind
	b bool
	// plain: s is written in JSON as it is between quotes (ASCII without
	// '"', '\\' or control characters: a record's string field read as
	// its JSON bytes, docField.rawScalar, a string literal, or a string
	// made of such strings' bytes, isPlainText); false when not known.
	plain bool
	// scale > 0 on a double f: f is the double nearest to i / 10^scale,
	// |i| < 10^15, whose shortest text is that quotient's decimal
	// (ddecimal); i is unused on a double otherwise.
	scale uint8
	i     int64
	f     float64
	s     string
}

// dnode is one node of a direct program.
type dnode interface {
	eval(a *activation) dval
}

// directMap is a map literal with string keys, distinct, in sorted order,
// each with its JSON prefix ("key": written once at compile time).
type directMap struct {
	prefix [][]byte // `"key":`, with a leading ',' after the first
	vals   []dnode
}

// direct is the direct form of a Program: root, or for a map literal m.
type direct struct {
	root  dnode
	m     *directMap
	adds  []*darith // the + nodes, while compileDirect checks their cost
	slots int       // repeated subexpressions (dmemo): the Env memo's size
}

// compileDirect returns the direct form of the checked AST x, or nil when
// x holds anything the direct evaluator does not take. bound is 0 for a
// program without cost tracking; for a cost-tracked one it is the length
// in bytes up to which every string the program reads from the record
// keeps its worst-case cost within the limit (Compile checked that with
// CEL's estimate, boundedSizes): the direct form then gives up on a longer
// string, so that CEL's cost limit still decides those records. slack is
// the limit less that estimate (unused when bound is 0). CEL's estimate
// leaves out what concatCost charges a string +: the direct form
// concatenates strings into a result of at most bound bytes (giving up on
// a longer one) only when every + charged that much, 1 + bound/10 units,
// still fits in slack; otherwise it gives up on every string +.
func compileDirect(a *celast.AST, bound int, slack uint64) *direct {
	d := compileDirectNodes(a, bound)
	if d == nil || bound == 0 {
		return d
	}
	if uint64(len(d.adds))*(1+uint64(bound)/10) > slack {
		for _, n := range d.adds {
			n.noConcat = true
		}
	}
	d.adds = nil
	return d
}

// compileDirectNodes is compileDirect before its check of the cost of
// string concatenation: the direct form and its + nodes (direct.adds).
func compileDirectNodes(a *celast.AST, bound int) *direct {
	refs := a.ReferenceMap()
	c := &dcompiler{refs: refs, bound: bound, keys: map[int64]string{}, count: map[string]int{}, shared: map[string]*memoShared{}}
	root := a.Expr()
	c.countShared(root)
	if root.Kind() == celast.MapKind {
		m := root.AsMap()
		type ent struct {
			key string
			val dnode
		}
		var ents []ent
		for _, e := range m.Entries() {
			me := e.AsMapEntry()
			if me.IsOptional() || me.Key().Kind() != celast.LiteralKind {
				return nil
			}
			k, ok := me.Key().AsLiteral().(types.String)
			if !ok {
				return nil
			}
			v := c.node(me.Value())
			if v == nil {
				return nil
			}
			ents = append(ents, ent{string(k), v})
		}
		slices.SortFunc(ents, func(x, y ent) int { return strings.Compare(x.key, y.key) })
		dm := &directMap{}
		for i, e := range ents {
			if i > 0 && ents[i-1].key == e.key {
				return nil // CEL refuses a repeated key at evaluation
			}
			w := jsonAppender{}
			if i > 0 {
				w.buf = append(w.buf, ',')
			}
			w.string(e.key)
			w.buf = append(w.buf, ':')
			dm.prefix = append(dm.prefix, w.buf)
			dm.vals = append(dm.vals, e.val)
		}
		return &direct{m: dm, adds: c.adds, slots: c.slots}
	}
	if n := c.node(root); n != nil {
		return &direct{root: n, adds: c.adds, slots: c.slots}
	}
	return nil
}

// dcompiler compiles the nodes of one program: refs are the checker's
// references, bound compileDirect's.
type dcompiler struct {
	refs  map[int64]*celast.ReferenceInfo
	bound int
	adds  []*darith // every + compiled, once per occurrence

	// The repeated subexpressions (directmemo.go): each expression's
	// exprKey by id ("" for none), the number of occurrences of each
	// key, the node compiled for a key occurring more than once (nil
	// when it has no direct form), and the dmemo slots given out.
	keys   map[int64]string
	count  map[string]int
	shared map[string]*memoShared
	slots  int
}

// compile compiles x (its operands through node), or returns nil.
func (dc *dcompiler) compile(x celast.Expr) dnode {
	refs := dc.refs
	switch x.Kind() {
	case celast.LiteralKind:
		switch v := x.AsLiteral().(type) {
		case types.Int:
			return dconst{dval{k: dInt, i: int64(v)}}
		case types.Double:
			return dconst{dval{k: dDouble, f: float64(v)}}
		case types.String:
			return dconst{dval{k: dString, s: string(v), plain: isPlainText(string(v))}}
		case types.Bool:
			return dconst{dval{k: dBool, b: bool(v)}}
		case types.Null:
			return dconst{dval{k: dNull}}
		}
		return nil
	case celast.IdentKind, celast.SelectKind:
		path, ok := selectPath(x, refs)
		if !ok {
			return nil
		}
		r := path[0]
		reserved := r == nameValue || r == nameKey || r == nameTimestamp || r == nameHeaders || r == nameTopic
		return &dpath{root: r, fields: path[1:], bound: dc.bound, field: !reserved}
	case celast.CallKind:
		c := x.AsCall()
		if r := refs[x.ID()]; r != nil && r.Value != nil {
			return nil
		}
		if n, handled := dc.timeCall(c); handled {
			return n
		}
		if n, handled := dc.stringCall(c); handled {
			return n
		}
		if c.IsMemberFunction() {
			return nil
		}
		args := make([]dnode, len(c.Args()))
		for i, arg := range c.Args() {
			if args[i] = dc.node(arg); args[i] == nil {
				return nil
			}
		}
		fn := c.FunctionName()
		switch {
		case fn == operators.Conditional && len(args) == 3:
			return &dcond{args[0], args[1], args[2]}
		case fn == operators.LogicalAnd && len(args) == 2:
			return &dlogic{args[0], args[1], false}
		case fn == operators.LogicalOr && len(args) == 2:
			return &dlogic{args[0], args[1], true}
		case fn == operators.LogicalNot && len(args) == 1:
			return &dnot{args[0]}
		case fn == operators.Negate && len(args) == 1:
			return &dneg{args[0]}
		case fn == "double" && len(args) == 1:
			return &ddouble{args[0]}
		case len(args) == 2:
			switch fn {
			case operators.Equals, operators.NotEquals:
				if n := nullTest(c.Args(), args, fn == operators.NotEquals); n != nil {
					return n
				}
				if n := lowerTest(args, fn == operators.NotEquals); n != nil {
					return n
				}
				return newDcmp(fn, args[0], args[1])
			case operators.Less, operators.LessEquals,
				operators.Greater, operators.GreaterEquals:
				return newDcmp(fn, args[0], args[1])
			case operators.Add, operators.Subtract, operators.Multiply, operators.Divide, operators.Modulo:
				if n := decimalQuotient(fn, args); n != nil {
					return n
				}
				n := &darith{op: dopOf(fn), dbinary: newDbinary(args[0], args[1]), bound: dc.bound}
				if fn == operators.Add {
					dc.adds = append(dc.adds, n)
				}
				return n
			}
		}
	}
	return nil
}

// selectPath returns the identifier and field names of an identifier or a
// chain of field selections (bid.price: [bid price]); false for anything
// else (a presence test, a select on a call, a name the checker resolved
// to a constant or a qualified name).
func selectPath(x celast.Expr, refs map[int64]*celast.ReferenceInfo) ([]string, bool) {
	switch x.Kind() {
	case celast.IdentKind:
		r := refs[x.ID()]
		if r == nil || r.Value != nil || r.Name != x.AsIdent() {
			return nil, false
		}
		return []string{x.AsIdent()}, true
	case celast.SelectKind:
		if refs[x.ID()] != nil {
			return nil, false
		}
		s := x.AsSelect()
		if s.IsTestOnly() {
			return nil, false
		}
		p, ok := selectPath(s.Operand(), refs)
		if !ok {
			return nil, false
		}
		return append(p, s.FieldName()), true
	}
	return nil, false
}

type dconst struct{ v dval }

func (c dconst) eval(*activation) dval { return c.v }

// dpath reads an identifier and selects fields of it, as CEL's attribute
// does, for a scalar result.
// A scalar field of a Doc or of one of its objects is read from its JSON
// as a dval (Doc.scalarField), not as the boxed CEL value a field read
// makes.
type dpath struct {
	root   string
	fields []string
	bound  int  // > 0: give up on a string longer than bound bytes
	field  bool // root is a field of the record, not a reserved name
}

func (p *dpath) eval(a *activation) dval {
	if len(p.fields) == 0 && p.field && a.pending {
		if r, found, ok := a.doc.scalarField(p.root); ok {
			if !found {
				return dval{} // CEL's missing-field error
			}
			return p.bounded(r)
		}
	}
	if len(p.fields) == 1 && p.field && a.pending {
		if r, ok := a.doc.subScalarField(p.root, p.fields[0]); ok {
			return p.bounded(r)
		}
	}
	n := len(p.fields)
	if n == 0 {
		v, _ := a.ResolveName(p.root)
		return p.bounded(scalar(v))
	}
	parent, ok := p.walk(a, n-1)
	if !ok {
		return dval{}
	}
	if o, ok := parent.(*docObject); ok {
		return p.bounded(o.scalarField(p.fields[n-1]))
	}
	v, found := fieldOf(parent, p.fields[n-1])
	if !found {
		return dval{}
	}
	return p.bounded(scalar(v))
}

// bounded is r, or a failed dval for a string longer than p.bound.
func (p *dpath) bounded(r dval) dval {
	if p.bound > 0 && r.k == dString && len(r.s) > p.bound {
		return dval{}
	}
	return r
}

// scalarField is Doc.field for the direct evaluator: the field's value as
// a dval (failed when it is an object or an array), read from the JSON
// without boxing it when it was not decoded yet (and then not kept);
// found and ok as Doc.field's (ok false also when the field's JSON does
// not decode: the caller reads it through Doc.field, which knows what to
// do then).
func (d *Doc) scalarField(name string) (v dval, found, ok bool) {
	d.look()
	if d.state < 0 {
		return dval{}, false, false
	}
	for i := len(d.fields) - 1; i >= 0; i-- {
		f := &d.fields[i]
		if f.name != name {
			continue
		}
		if f.done {
			return scalar(f.value), true, true
		}
		v, ok := f.rawScalar(d.str)
		return v, ok, ok
	}
	return dval{}, false, true
}

// subScalarField is the direct evaluator's read of root.name, a field of
// the top-level field root's object value, from the fields the Doc's
// index listed of it (Doc.sub), without making root's docObject (the
// ~500 bytes Doc.field would allocate for it per record): the value as
// docObject.scalarField gives it (failed when the object lacks name, or
// when the record lacks root). ok is false when the Doc is not read field
// by field or root is not an object indexed with it: the caller then
// reads root as any other value.
func (d *Doc) subScalarField(root, name string) (v dval, ok bool) {
	d.look()
	if d.state < 0 {
		return dval{}, false
	}
	for i := len(d.fields) - 1; i >= 0; i-- {
		f := &d.fields[i]
		if f.name != root {
			continue
		}
		if f.done {
			if o, isObj := f.value.(*docObject); isObj {
				return o.scalarField(name), true
			}
			return dval{}, false
		}
		if !f.subOK {
			return dval{}, false
		}
		sub := d.sub[f.sub0:f.sub1]
		for j := len(sub) - 1; j >= 0; j-- {
			if sf := &sub[j]; sf.name == name {
				v, _ := sf.rawScalar(d.str)
				return v, true
			}
		}
		return dval{}, true
	}
	return dval{}, true // no field root: CEL's missing-field error
}

// rawScalar is rawScalar of the field's JSON in str, for a field not
// decoded yet. A string of plain ASCII without escapes (jsonString
// returns its bytes between the quotes) is marked plain on the first
// read, read again without looking at its bytes, and written to JSON as
// it is (dval.plain).
func (f *docField) rawScalar(str string) (dval, bool) {
	raw := str[f.from:f.to]
	if c := raw[0]; c != '"' {
		if c == '-' || (c >= '0' && c <= '9') {
			// Most fields read are integers: rawScalar's own first
			// step for them, without its call.
			if n, ok := plainInt(raw); ok {
				return dval{k: dInt, i: n}, true
			}
		}
		return rawScalar(raw)
	}
	inner := raw[1 : len(raw)-1]
	if !f.plain {
		for i := 0; i < len(inner); i++ {
			if c := inner[i]; c == '\\' || c >= 0x80 {
				return rawScalar(raw)
			}
		}
		f.plain = true
	}
	return dval{k: dString, s: inner, plain: true}, true
}

// scalarField is FindStringKey for the direct evaluator: the field's
// value as a dval, failed when the object lacks it, when it is an object
// or an array, or when it does not decode (where FindStringKey gives CEL
// an error value).
func (o *docObject) scalarField(name string) dval {
	if !o.indexed {
		o.index()
	}
	if o.err != nil {
		return dval{}
	}
	for i := len(o.fields) - 1; i >= 0; i-- {
		f := &o.fields[i]
		if f.name != name {
			continue
		}
		if f.done {
			return scalar(f.value)
		}
		v, _ := f.rawScalar(o.str)
		return v
	}
	return dval{}
}

// rawScalar is lazyValue's value of the JSON value raw as a dval: ok
// false when lazyValue fails on raw, a failed dval (ok true) when raw is
// an object or an array.
func rawScalar(raw string) (dval, bool) {
	switch raw[0] {
	case '{', '[':
		return dval{}, true
	case '"':
		s, err := jsonString(raw)
		return dval{k: dString, s: s}, err == nil
	case 't':
		return dval{k: dBool, b: true}, true
	case 'f':
		return dval{k: dBool}, true
	case 'n':
		return dval{k: dNull}, true
	}
	if n, ok := plainInt(raw); ok {
		return dval{k: dInt, i: n}, true
	}
	switch n, _ := number(raw); n := n.(type) {
	case int64:
		return dval{k: dInt, i: n}, true
	case float64:
		return dval{k: dDouble, f: n}, true
	}
	return dval{}, false
}

// fieldFinder is an object value whose field reads give what its decoded
// map's would (a join's lazily read side, operators' lazyObject): CEL's
// string-key select asks it first, as it asks a docObject.
type fieldFinder interface {
	FindStringKey(name string) (any, bool)
}

// raw returns the value p selects as the activation gives it; false when
// a field is missing or is selected of something other than an object.
func (p *dpath) raw(a *activation) (any, bool) {
	return p.walk(a, len(p.fields))
}

// walk returns the value of p's root with its first n fields selected;
// false as raw's.
func (p *dpath) walk(a *activation, n int) (any, bool) {
	v, _ := a.ResolveName(p.root)
	for _, f := range p.fields[:n] {
		var found bool
		if v, found = fieldOf(v, f); !found {
			return nil, false
		}
	}
	return v, true
}

// fieldOf selects field f of v as CEL's string-key select does: of a
// docObject, a map or a fieldFinder; false when v has no field f or is
// none of those.
func fieldOf(v any, f string) (any, bool) {
	switch o := v.(type) {
	case *docObject:
		return o.FindStringKey(f)
	case map[string]any:
		x, found := o[f]
		return x, found
	case fieldFinder:
		return o.FindStringKey(f)
	}
	return nil, false
}

// dnull is x == null, or x != null (ne), for x an identifier or a field
// selection (path): true or false by whether x is null, also when x is an
// object (never null: CEL's equality of values of different types is
// false), so that right == null ? ... : right.f of a join's select stays
// direct; any other x is left to dcmp's rules (a scalar of another kind:
// CEL decides).
type dnull struct {
	path *dpath
	ne   bool
}

// nullTest returns the dnull of == or != (ne) with args, the call's
// arguments and their direct nodes, when one of them is the null literal
// and the other a path; nil otherwise.
func nullTest(x []celast.Expr, args []dnode, ne bool) dnode {
	for i, j := range []int{1, 0} {
		if c, ok := args[j].(dconst); !ok || c.v.k != dNull || x[j].Kind() != celast.LiteralKind {
			continue
		}
		if p, ok := unmemo(args[i]).(*dpath); ok {
			return &dnull{path: p, ne: ne}
		}
	}
	return nil
}

func (n *dnull) eval(a *activation) dval {
	v, ok := n.path.raw(a)
	if !ok {
		return dval{}
	}
	switch v.(type) {
	case map[string]any, *docObject, fieldFinder:
		return dval{k: dBool, b: n.ne}
	}
	if s := scalar(v); s.k == dNull {
		return dval{k: dBool, b: !n.ne}
	}
	return dval{}
}

// scalar is the direct value of v, a field's value or a reserved name's
// as the activation gives it, when CEL sees it as a scalar.
func scalar(v any) dval {
	switch x := v.(type) {
	case types.Int:
		return dval{k: dInt, i: int64(x)}
	case types.Double:
		return dval{k: dDouble, f: float64(x)}
	case types.String:
		return dval{k: dString, s: string(x)}
	case types.Bool:
		return dval{k: dBool, b: bool(x)}
	case types.Null:
		return dval{k: dNull}
	case nil:
		return dval{k: dNull}
	case int64:
		return dval{k: dInt, i: x}
	case float64:
		return dval{k: dDouble, f: x}
	case string:
		return dval{k: dString, s: x}
	case bool:
		return dval{k: dBool, b: x}
	}
	return dval{}
}

// dcond is c ? t : f.
type dcond struct{ c, t, f dnode }

func (n *dcond) eval(a *activation) dval {
	c := n.c.eval(a)
	if c.k != dBool {
		return dval{}
	}
	if c.b {
		return n.t.eval(a)
	}
	return n.f.eval(a)
}

// dlogic is l && r (or false) or l || r (or true): a left operand equal to
// the absorbing value decides (CEL's result whatever r is, errors
// included); otherwise the result is r when it is a bool.
type dlogic struct {
	l, r dnode
	or   bool
}

func (n *dlogic) eval(a *activation) dval {
	l := n.l.eval(a)
	if l.k != dBool {
		return dval{}
	}
	if l.b == n.or {
		return l
	}
	r := n.r.eval(a)
	if r.k != dBool {
		return dval{}
	}
	return r
}

type dnot struct{ x dnode }

func (n *dnot) eval(a *activation) dval {
	v := n.x.eval(a)
	if v.k != dBool {
		return dval{}
	}
	return dval{k: dBool, b: !v.b}
}

type dneg struct{ x dnode }

func (n *dneg) eval(a *activation) dval {
	v := n.x.eval(a)
	switch {
	case v.k == dInt && v.i != math.MinInt64:
		return dval{k: dInt, i: -v.i}
	case v.k == dDouble:
		return dval{k: dDouble, f: -v.f}
	}
	return dval{}
}

// ddouble is double(x) of an int or a double.
type ddouble struct{ x dnode }

func (n *ddouble) eval(a *activation) dval {
	v := n.x.eval(a)
	switch v.k {
	case dInt:
		return dval{k: dDouble, f: float64(v.i)}
	case dDouble:
		return v
	}
	return dval{}
}

// evalSameKind evaluates a binary node's operands ln then rn: ok false
// with l the failed operand when ln fails, with the zero (failed) dval when
// rn fails or the kinds differ (the caller then returns l: CEL decides).
func evalSameKind(a *activation, ln, rn dnode) (l, r dval, ok bool) {
	l = ln.eval(a)
	if l.k == dFail {
		return l, l, false
	}
	r = rn.eval(a)
	if r.k != l.k {
		return dval{}, dval{}, false
	}
	return l, r, true
}

// dop is the operator of a dcmp or a darith, decided at compile time
// (not compared as CEL's function name on every evaluation).
type dop uint8

const (
	dopEq dop = iota
	dopNe
	dopLt
	dopLe
	dopGt
	dopGe
	dopAdd
	dopSub
	dopMul
	dopDiv
	dopMod
)

// dopOf returns the dop of CEL's function name fn, one of the comparisons
// and arithmetic operators compile gives dcmp and darith.
func dopOf(fn string) dop {
	switch fn {
	case operators.Equals:
		return dopEq
	case operators.NotEquals:
		return dopNe
	case operators.Less:
		return dopLt
	case operators.LessEquals:
		return dopLe
	case operators.Greater:
		return dopGt
	case operators.GreaterEquals:
		return dopGe
	case operators.Add:
		return dopAdd
	case operators.Subtract:
		return dopSub
	case operators.Multiply:
		return dopMul
	case operators.Divide:
		return dopDiv
	}
	return dopMod
}

// dbinary is the two operands of a dcmp or a darith. A constant right
// operand (id % 2 == 0, amount < 500) is held as its value, rc, and not
// evaluated as a node.
type dbinary struct {
	l, r   dnode
	rc     dval
	rconst bool
}

// newDbinary returns the operands l and r.
func newDbinary(l, r dnode) dbinary {
	b := dbinary{l: l, r: r}
	if c, ok := r.(dconst); ok {
		b.rc, b.rconst = c.v, true
	}
	return b
}

// operands is evalSameKind of the operands.
func (b *dbinary) operands(a *activation) (l, r dval, ok bool) {
	if !b.rconst {
		return evalSameKind(a, b.l, b.r)
	}
	l = b.l.eval(a)
	if l.k == dFail {
		return l, l, false
	}
	if b.rc.k != l.k {
		return dval{}, dval{}, false
	}
	return l, b.rc, true
}

// dcmp compares operands of one type: ints, doubles (not NaN), strings
// (byte order, as CEL), and bools or nulls for == and !=.
type dcmp struct {
	op dop
	dbinary
}

// newDcmp returns the comparison fn (CEL's function name) of l and r.
func newDcmp(fn string, l, r dnode) *dcmp {
	return &dcmp{op: dopOf(fn), dbinary: newDbinary(l, r)}
}

func (n *dcmp) eval(a *activation) dval {
	l, r, ok := n.operands(a)
	if !ok {
		return l
	}
	c := 0
	switch l.k {
	case dInt:
		c = cmpOrdered(l.i, r.i)
	case dDouble:
		if math.IsNaN(l.f) || math.IsNaN(r.f) {
			return dval{}
		}
		c = cmpOrdered(l.f, r.f)
	case dString:
		c = strings.Compare(l.s, r.s)
	case dBool, dNull:
		if n.op != dopEq && n.op != dopNe {
			return dval{}
		}
		if l.b != r.b {
			c = 1
		}
	default:
		return dval{}
	}
	var b bool
	switch n.op {
	case dopEq:
		b = c == 0
	case dopNe:
		b = c != 0
	case dopLt:
		b = c < 0
	case dopLe:
		b = c <= 0
	case dopGt:
		b = c > 0
	case dopGe:
		b = c >= 0
	}
	return dval{k: dBool, b: b}
}

func cmpOrdered[T int64 | float64](x, y T) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// darith is + - * / % of two ints (giving up on overflow and on a zero
// divisor, where CEL fails) or + - * / of two doubles (IEEE, as CEL).
type darith struct {
	op dop
	dbinary
	bound    int  // give up on a string + longer than this (0: no bound)
	noConcat bool // give up on every string + (compileDirect)
}

func (n *darith) eval(a *activation) dval {
	l, r, ok := n.operands(a)
	if !ok {
		return l
	}
	switch l.k {
	case dInt:
		x, y := l.i, r.i
		var z int64
		switch n.op {
		case dopAdd:
			z = x + y
			if (z > x) != (y > 0) {
				return dval{}
			}
		case dopSub:
			z = x - y
			if (z < x) != (y > 0) {
				return dval{}
			}
		case dopMul:
			if x == 0 || y == 0 {
				return dval{k: dInt}
			}
			z = x * y
			if (x == -1 && y == math.MinInt64) || (y == -1 && x == math.MinInt64) || z/y != x {
				return dval{}
			}
		case dopDiv:
			if y == 0 || (x == math.MinInt64 && y == -1) {
				return dval{}
			}
			z = x / y
		case dopMod:
			if y == 0 || (x == math.MinInt64 && y == -1) {
				return dval{}
			}
			z = x % y
		}
		return dval{k: dInt, i: z}
	case dDouble:
		x, y := l.f, r.f
		switch n.op {
		case dopAdd:
			return dval{k: dDouble, f: x + y}
		case dopSub:
			return dval{k: dDouble, f: x - y}
		case dopMul:
			return dval{k: dDouble, f: x * y}
		case dopDiv:
			return dval{k: dDouble, f: x / y}
		}
	case dString:
		// A cost-tracked program's longer result is left to CEL, whose
		// cost tracking (concatCost) decides it.
		if n.op == dopAdd && !n.noConcat && (n.bound == 0 || len(l.s)+len(r.s) <= n.bound) {
			return dval{k: dString, s: l.s + r.s, plain: l.plain && r.plain}
		}
	}
	return dval{}
}

// eval evaluates a scalar program (root) directly on env.
func (d *direct) eval(env *Env) dval {
	a := (*activation)(env)
	a.begin(d.slots)
	return d.root.eval(a)
}

// bool evaluates a boolean program directly; ok false to give up.
func (d *direct) bool(env *Env) (b, ok bool) {
	if d.root == nil {
		return false, false
	}
	v := d.eval(env)
	return v.b, v.k == dBool
}

// value evaluates a scalar program directly as Eval's Go value; ok false
// to give up.
func (d *direct) value(env *Env) (any, bool) {
	if d.root == nil {
		return nil, false
	}
	return d.native(env, d.eval(env))
}

// native returns v, a result of the program on env, as Eval's Go value;
// ok false for dFail (give up).
func (d *direct) native(env *Env, v dval) (any, bool) {
	switch v.k {
	case dNull:
		return nil, true
	case dBool:
		return v.b, true
	case dInt:
		return v.i, true
	case dDouble:
		return v.f, true
	case dString:
		if env.doc != nil && env.doc.lent {
			// v.s may be a slice of the record's bytes (Doc.lent).
			return strings.Clone(v.s), true
		}
		return v.s, true
	}
	return nil, false
}

// appendJSON appends the JSON of a map literal program (as the general
// path writes CEL's map: keys sorted) to dst; ok false to give up (dst's
// contents beyond its length may then have been written).
func (d *direct) appendJSON(dst []byte, env *Env) ([]byte, bool) {
	if d.m == nil {
		return dst, false
	}
	a := (*activation)(env)
	a.begin(d.slots)
	e := jsonAppender{buf: append(dst, '{')}
	for i, n := range d.m.vals {
		e.buf = append(e.buf, d.m.prefix[i]...)
		v := n.eval(a)
		switch v.k {
		case dNull:
			e.buf = append(e.buf, "null"...)
		case dBool:
			if v.b {
				e.buf = append(e.buf, "true"...)
			} else {
				e.buf = append(e.buf, "false"...)
			}
		case dInt:
			e.buf = strconv.AppendInt(e.buf, v.i, 10)
		case dDouble:
			if v.scale > 0 {
				e.buf = appendDecimal(e.buf, v.i, v.scale)
			} else if !e.float(v.f) {
				return dst, false
			}
		case dString:
			if v.plain {
				e.buf = append(append(append(e.buf, '"'), v.s...), '"')
			} else {
				e.string(v.s)
			}
		default:
			return dst, false
		}
	}
	return append(e.buf, '}'), true
}
