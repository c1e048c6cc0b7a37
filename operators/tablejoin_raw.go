package operators

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"cel.dev/cel-go/common"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/parser"
	"github.com/tidwall/gjson"

	"github.com/kstreamd/kstreamd/expression"
)

// This file is the table join's raw select: the common select of a join,
// an object of fields copied from the two sides,
//
//	{"id": left.id, "amount": left.amount, "last": right == null ? null : right.amount}
//
// is written straight from the JSON bytes of the stream record and the
// kept row, without indexing the stream record (expression.Doc), building
// the expression's environment or evaluating it. It only ever writes the
// bytes EvalJSON writes (the map literal's keys sorted, each value as the
// expression package's direct evaluator writes the scalar it reads); on
// anything it is not sure of (a value that is not a plain integer, a
// plain ASCII string, true, false or null; a missing field; a record not
// known to be valid JSON, not an object, or holding a number DecodeJSON
// could refuse; a key with an escape; a row that is not an object) it
// gives up and the join evaluates select as before, whose result or error
// then counts. TestTableJoinRawSelectEqualsEval and
// FuzzTableJoinRawSelectEqualsEval compare the two. The other joins'
// output (joinOutput: interval_join, window_join, the regular join) uses
// it too, for both rows (joinOutput.rawValue;
// TestIntervalJoinRawSelectEqualsEval, FuzzIntervalJoinRawSelectEqualsEval),
// and with them the join's own fields: window_join's window_start and
// window_end, read from the extra fields it passes (Nexmark q8's
// {"id": left.person.id, "name": left.person.name, "starttime":
// window_start}; TestWindowJoinRawSelectEqualsEval,
// FuzzWindowJoinRawSelectEqualsEval).

// rawSelect is the raw form of a select: the output object's fields in
// key order, each a field of the stream record (left), of the row
// (right) or one of the join's own fields (extra: window_join's
// window_start and window_end).
type rawSelect struct {
	parts []rawPart
	// left are the distinct names of the stream record's fields read, in
	// the order rawPart.idx refers to them; right the row's; a name is a
	// top-level field or a path of fields through nested objects joined
	// by dots (left.person.id: "person.id"; fieldsJSON). extra are the
	// join's own fields read (identifiers of select: the caller gives up
	// when it has none of that name).
	left, right, extra []string
}

// rawPart is one field of a raw select's output.
type rawPart struct {
	prefix []byte // `{"key":` for the first field, `,"key":` after
	right  bool   // a field of the row, else of the stream record
	extra  bool   // one of the join's own fields (rawSelect.extra)
	idx    int    // the field's index in rawSelect.left, right or extra
	// orNull: right == null ? null : right.f, null when there is no row
	// (else a missing row gives up: select fails on it).
	orNull bool
}

// compileRawSelect returns the raw form of the select expression src, or
// nil when src is not a map literal whose keys are distinct plain ASCII
// string literals and whose values are each left.f, right.f or
// right == null ? null : right.f (also written null == right, or with !=
// and the branches swapped), f a plain ASCII name or a path of them
// (left.person.id), or an identifier other than left, right and the
// expression package's reserved names (value, key, timestamp, headers,
// topic): one of the join's own fields (rawSelect.extra).
func compileRawSelect(src string) *rawSelect {
	a, errs := parser.Parse(common.NewTextSource(src))
	if errs != nil && len(errs.GetErrors()) > 0 {
		return nil
	}
	root := a.Expr()
	if root.Kind() != celast.MapKind {
		return nil
	}
	type ent struct {
		key  string
		part rawPart
	}
	r := &rawSelect{}
	var ents []ent
	for _, e := range root.AsMap().Entries() {
		me := e.AsMapEntry()
		if me.IsOptional() || me.Key().Kind() != celast.LiteralKind {
			return nil
		}
		k, ok := me.Key().AsLiteral().(types.String)
		if !ok || !plainASCII(string(k)) {
			return nil
		}
		p, ok := r.part(me.Value())
		if !ok {
			return nil
		}
		ents = append(ents, ent{string(k), p})
	}
	if len(ents) == 0 {
		return nil
	}
	slices.SortFunc(ents, func(x, y ent) int { return strings.Compare(x.key, y.key) })
	for i, e := range ents {
		if i > 0 && ents[i-1].key == e.key {
			return nil // CEL refuses a repeated key at evaluation
		}
		sep := byte('{')
		if i > 0 {
			sep = ','
		}
		e.part.prefix = append(append(append([]byte{sep, '"'}, e.key...), '"'), ':')
		r.parts = append(r.parts, e.part)
	}
	return r
}

// part compiles one value of the map literal.
func (r *rawSelect) part(x celast.Expr) (rawPart, bool) {
	if side, f, ok := sideField(x); ok {
		return r.field(side, f, false), true
	}
	if x.Kind() == celast.IdentKind && rawExtraName(x.AsIdent()) {
		i := slices.Index(r.extra, x.AsIdent())
		if i < 0 {
			i = len(r.extra)
			r.extra = append(r.extra, x.AsIdent())
		}
		return rawPart{extra: true, idx: i}, true
	}
	if x.Kind() != celast.CallKind || x.AsCall().FunctionName() != operators.Conditional {
		return rawPart{}, false
	}
	args := x.AsCall().Args()
	c := args[0]
	if c.Kind() != celast.CallKind || len(c.AsCall().Args()) != 2 {
		return rawPart{}, false
	}
	var whenNull, otherwise celast.Expr
	switch c.AsCall().FunctionName() {
	case operators.Equals:
		whenNull, otherwise = args[1], args[2]
	case operators.NotEquals:
		whenNull, otherwise = args[2], args[1]
	default:
		return rawPart{}, false
	}
	ca := c.AsCall().Args()
	if !(isIdent(ca[0], JoinRight) && isNull(ca[1])) && !(isNull(ca[0]) && isIdent(ca[1], JoinRight)) {
		return rawPart{}, false
	}
	side, f, ok := sideField(otherwise)
	if !ok || side != JoinRight || !isNull(whenNull) {
		return rawPart{}, false
	}
	return r.field(JoinRight, f, true), true
}

// field is the part reading field f of side.
func (r *rawSelect) field(side, f string, orNull bool) rawPart {
	names := &r.left
	if side == JoinRight {
		names = &r.right
	}
	i := slices.Index(*names, f)
	if i < 0 {
		i = len(*names)
		*names = append(*names, f)
	}
	return rawPart{right: side == JoinRight, idx: i, orNull: orNull}
}

// rawExtraName reports whether the identifier name can be one of the
// join's own fields: not left or right, not a name the expression
// package resolves itself, a plain ASCII name.
func rawExtraName(name string) bool {
	switch name {
	case JoinLeft, JoinRight, "value", "key", "timestamp", "headers", "topic":
		return false
	}
	return plainASCII(name) && !strings.Contains(name, ".")
}

// sideField reports whether x is left.f or right.f, or a path of field
// selections below them (left.a.b; no has() test), and returns the side
// and f, plain ASCII names without dots, joined by dots for a path.
func sideField(x celast.Expr) (side, f string, ok bool) {
	var path []string
	for x.Kind() == celast.SelectKind {
		s := x.AsSelect()
		if s.IsTestOnly() || !plainASCII(s.FieldName()) || strings.Contains(s.FieldName(), ".") {
			return "", "", false
		}
		path = append(path, s.FieldName())
		x = s.Operand()
	}
	if len(path) == 0 {
		return "", "", false
	}
	slices.Reverse(path)
	for _, side := range []string{JoinLeft, JoinRight} {
		if isIdent(x, side) {
			return side, strings.Join(path, "."), true
		}
	}
	return "", "", false
}

func isIdent(x celast.Expr, name string) bool {
	return x.Kind() == celast.IdentKind && x.AsIdent() == name
}

func isNull(x celast.Expr) bool {
	if x.Kind() != celast.LiteralKind {
		return false
	}
	_, ok := x.AsLiteral().(types.Null)
	return ok
}

// rightJSON returns the JSON of the fields r reads of the row raw (in
// r.right's order), as leftJSON returns the stream record's, or false;
// the row need not be valid JSON (one that gjson does not find valid is
// left to select: DecodeJSON may still decode it). The slices are raw's
// bytes or, for integers, of one buffer of their own.
func (r *rawSelect) rightJSON(raw []byte, text bool) ([][]byte, bool) {
	if text || !gjson.ValidBytes(raw) {
		return nil, false
	}
	vals, _, ok := fieldsJSON(raw, r.right, make([][]byte, len(r.right)), nil)
	if !ok {
		return nil, false
	}
	return vals, true
}

// leftJSON is fieldsJSON of the stream record's value raw (known valid
// JSON) for the fields r reads of it, into vals and num.
func (r *rawSelect) leftJSON(raw []byte, vals [][]byte, num []byte) ([][]byte, []byte, bool) {
	return fieldsJSON(raw, r.left, vals[:len(r.left)], num)
}

// fieldsJSON sets vals[i] to the JSON of the top-level field names[i] of
// the valid JSON value raw (the last one of a repeated name, as
// DecodeJSON's map keeps it), or of the field at the path names[i]
// ("a.b": field b of the object in field a, each the last of its name;
// objectField), as the direct evaluator writes the value select reads
// there; vals' bytes are raw's or, for an integer not written as
// strconv.AppendInt writes it (-0, leading zeros), its value appended to
// num. False when raw is not an object, a field is missing (or an object
// on a path is not an object or holds a key with an escape) or is not
// a plain integer (at most 18 digits), a string of printable ASCII
// without escapes, true, false or null, or raw holds anything that could
// make select see it otherwise than its bytes say (a key with an escape;
// a number with an exponent or a run of more than 300 digits, which
// DecodeJSON could refuse: the expression package's safeNumber rule;
// more than 64 levels of nesting).
func fieldsJSON(raw []byte, names []string, vals [][]byte, num []byte) ([][]byte, []byte, bool) {
	clear(vals)
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return vals, num, false
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		i = len(raw)
	}
	for i < len(raw) {
		if raw[i] != '"' {
			return vals, num, false
		}
		end := bytes.IndexByte(raw[i+1:], '"')
		if end < 0 {
			return vals, num, false
		}
		key := raw[i+1 : i+1+end]
		if bytes.IndexByte(key, '\\') >= 0 {
			return vals, num, false
		}
		i = skipSpace(raw, i+end+2)
		if i >= len(raw) || raw[i] != ':' {
			return vals, num, false
		}
		i = skipSpace(raw, i+1)
		to := skipRawValue(raw, i)
		if to < 0 {
			return vals, num, false
		}
		for n, name := range names {
			if head, _, _ := strings.Cut(name, "."); string(key) == head {
				vals[n] = raw[i:to]
			}
		}
		i = skipSpace(raw, to)
		if i >= len(raw) {
			return vals, num, false
		}
		if raw[i] == '}' {
			break
		}
		if raw[i] != ',' {
			return vals, num, false
		}
		i = skipSpace(raw, i+1)
	}
	num = num[:0]
	for n, v := range vals {
		for _, rest, path := strings.Cut(names[n], "."); path && v != nil; {
			var f string
			f, rest, path = strings.Cut(rest, ".")
			v = objectField(v, f)
		}
		if v == nil {
			return vals, num, false
		}
		vals[n] = v
		switch c := v[0]; {
		case c == '"':
			for _, b := range v[1 : len(v)-1] {
				if b < 0x20 || b > 0x7e || b == '\\' {
					return vals, num, false
				}
			}
		case c == 't' || c == 'f' || c == 'n':
		case c == '{' || c == '[':
			return vals, num, false
		default:
			x, ok := plainInteger(v)
			if !ok {
				return vals, num, false
			}
			if canonicalInteger(v) {
				continue // what AppendInt writes: raw's bytes themselves
			}
			from := len(num)
			num = strconv.AppendInt(num, x, 10)
			vals[n] = num[from:len(num):len(num)]
		}
	}
	return vals, num, true
}

// objectField returns the bytes of the value of field name in the JSON
// object obj (valid, its numbers and depth checked by skipRawValue; the
// last of a repeated name), or nil when obj is not an object, has no
// such field or holds a key with an escape.
func objectField(obj []byte, name string) []byte {
	if len(obj) == 0 || obj[0] != '{' {
		return nil
	}
	var v []byte
	i := skipSpace(obj, 1)
	if i < len(obj) && obj[i] == '}' {
		return nil
	}
	for i < len(obj) && obj[i] == '"' {
		end := bytes.IndexByte(obj[i+1:], '"')
		if end < 0 {
			return nil
		}
		key := obj[i+1 : i+1+end]
		if bytes.IndexByte(key, '\\') >= 0 {
			return nil
		}
		i = skipSpace(obj, i+end+2)
		if i >= len(obj) || obj[i] != ':' {
			return nil
		}
		i = skipSpace(obj, i+1)
		to := skipRawValue(obj, i)
		if to < 0 {
			return nil
		}
		if string(key) == name {
			v = obj[i:to]
		}
		i = skipSpace(obj, to)
		if i >= len(obj) {
			return nil
		}
		if obj[i] == '}' {
			return v
		}
		if obj[i] != ',' {
			return nil
		}
		i = skipSpace(obj, i+1)
	}
	return nil
}

// write writes the select's result into slab (a value larger than a
// quarter of a block gets its own allocation) and returns it, capacity
// its length: the output object of the fields left and right (as
// leftJSON and rightJSON give them, in r.left's and r.right's order) and
// extra (the join's own fields, in r.extra's order; the caller gives up
// when r.extra is not empty and it has none); hasRight false writes null
// for each field of the row (the parts are then all orNull or of the
// left side: the caller checks).
func (r *rawSelect) write(slab *outputSlab, left, right, extra [][]byte, hasRight bool) []byte {
	n := 1
	for _, p := range r.parts {
		n += len(p.prefix)
		switch {
		case p.extra:
			n += len(extra[p.idx])
		case !p.right:
			n += len(left[p.idx])
		case hasRight:
			n += len(right[p.idx])
		default:
			n += len("null")
		}
	}
	var b []byte
	if n > outputSlabBytes/4 {
		b = make([]byte, 0, n)
	} else {
		b = slab.reserve(n)
	}
	for _, p := range r.parts {
		b = append(b, p.prefix...)
		switch {
		case p.extra:
			b = append(b, extra[p.idx]...)
		case !p.right:
			b = append(b, left[p.idx]...)
		case hasRight:
			b = append(b, right[p.idx]...)
		default:
			b = append(b, "null"...)
		}
	}
	b = append(b, '}')
	if n <= outputSlabBytes/4 {
		slab.commit(n)
	}
	return b[:n:n]
}

// rightNeeded reports whether a select needs the row: a part reads a
// field of it without testing it for null first (select fails on a
// missing row).
func (r *rawSelect) rightNeeded() bool {
	for _, p := range r.parts {
		if p.right && !p.orNull {
			return true
		}
	}
	return false
}

// canonicalInteger reports whether the plain integer b (plainInteger
// accepts it) is written as strconv.AppendInt writes its value: no
// leading zero but in "0", not "-0".
func canonicalInteger(b []byte) bool {
	d := b
	if d[0] == '-' {
		d = d[1:]
	}
	return d[0] != '0' || (len(d) == 1 && len(b) == 1)
}

// plainInteger returns the value of the JSON number b when it is an
// integer of at most 18 digits (which fits int64; what the direct
// evaluator reads as an int and writes with strconv.AppendInt).
func plainInteger(b []byte) (int64, bool) {
	s := b
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if b[0] == '-' {
		n = -n
	}
	return n, true
}

// rawMaxDepth is the deepest nesting leftJSON takes.
const rawMaxDepth = 64

// skipRawValue returns the index just past the JSON value at b[i] (valid
// JSON), or -1 when it does not end within b, nests deeper than
// rawMaxDepth or holds a number that is not safe (an exponent, a run of
// more than 300 digits): expression.SkipSafeJSONValue over b's bytes.
func skipRawValue(b []byte, i int) int {
	if len(b) == 0 {
		return -1
	}
	return expression.SkipSafeJSONValue(unsafe.String(&b[0], len(b)), i, rawMaxDepth)
}
