package expression

import (
	"strings"
	"unicode/utf8"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
)

// This file is the direct evaluator's string functions (those of CEL's
// standard library and cel-go's ext.Strings the Nexmark queries q14, q21
// and q22 use): s.startsWith(t), s.endsWith(t), s.contains(t),
// s.lowerAscii(), s.substring(i), s.replace(a, b), size(s) and s.size(),
// s.split(t)[i] and size(s.split(t)) (a split's pieces are not built: the
// i-th is found in s, their number counted), x in [string literals], and
// dyn(x). Each computes exactly what CEL's function does (the same
// strings package call, or the same result without building CEL's rune
// slices) and gives up where CEL fails or where this code would have to
// follow CEL through a corner: a non-string operand, invalid UTF-8 for
// the functions CEL reads as runes (lowerAscii, substring), an index out
// of range, an empty separator.

// stringCall compiles c when it is one of the calls above: handled is
// true when c is of such a function (n is then nil when an operand is not
// of the direct form), false for any other call.
func (dc *dcompiler) stringCall(c celast.CallExpr) (n dnode, handled bool) {
	fn, args := c.FunctionName(), c.Args()
	if c.IsMemberFunction() {
		switch {
		case (fn == "startsWith" || fn == "endsWith" || fn == "contains") && len(args) == 1,
			fn == "lowerAscii" && len(args) == 0,
			fn == "substring" && len(args) == 1,
			fn == "replace" && len(args) == 2,
			fn == "size" && len(args) == 0:
		default:
			return nil, false
		}
		t := dc.node(c.Target())
		if t == nil {
			return nil, true
		}
		ops := make([]dnode, len(args))
		for i, a := range args {
			if ops[i] = dc.node(a); ops[i] == nil {
				return nil, true
			}
		}
		switch fn {
		case "startsWith", "endsWith", "contains":
			return &dstrpred{fn: fn, s: t, t: ops[0]}, true
		case "lowerAscii":
			return &dlower{t}, true
		case "substring":
			return &dsubstr{t, ops[0]}, true
		case "replace":
			return &dreplace{t, ops[0], ops[1]}, true
		}
		return sizeOf(t), true
	}
	switch {
	case fn == "dyn" && len(args) == 1:
		return dc.node(args[0]), true
	case fn == "size" && len(args) == 1:
		if s, sep, ok := dc.split(args[0]); ok {
			if s == nil {
				return nil, true
			}
			return &dsplitSize{s, sep}, true
		}
		x := dc.node(args[0])
		if x == nil {
			return nil, true
		}
		return sizeOf(x), true
	case fn == operators.Index && len(args) == 2:
		s, sep, ok := dc.split(args[0])
		if !ok || s == nil {
			return nil, true
		}
		i := dc.node(args[1])
		if i == nil {
			return nil, true
		}
		return &dsplitIndex{s, sep, i}, true
	case fn == operators.In && len(args) == 2:
		if args[1].Kind() != celast.ListKind {
			return nil, true
		}
		l := args[1].AsList()
		if len(l.OptionalIndices()) > 0 {
			return nil, true
		}
		var set []string
		for _, e := range l.Elements() {
			if e.Kind() != celast.LiteralKind {
				return nil, true
			}
			s, ok := e.AsLiteral().(types.String)
			if !ok {
				return nil, true
			}
			set = append(set, string(s))
		}
		x := dc.node(args[0])
		if x == nil {
			return nil, true
		}
		if l, ok := unmemo(x).(*dlower); ok {
			return &dlowerIn{l.s, set}, true
		}
		return &din{x, set}, true
	}
	return nil, false
}

// split returns the compiled receiver and separator of x when x is a call
// s.split(sep) (ok true; s nil when an operand is not of the direct form).
func (dc *dcompiler) split(x celast.Expr) (s, sep dnode, ok bool) {
	if x.Kind() != celast.CallKind {
		return nil, nil, false
	}
	c := x.AsCall()
	if !c.IsMemberFunction() || c.FunctionName() != "split" || len(c.Args()) != 1 {
		return nil, nil, false
	}
	if r := dc.refs[x.ID()]; r != nil && r.Value != nil {
		return nil, nil, true
	}
	s, sep = dc.node(c.Target()), dc.node(c.Args()[0])
	if s == nil || sep == nil {
		return nil, nil, true
	}
	return s, sep, true
}

// strings2 evaluates two string operands x then y; ok false when either is
// not a string.
func strings2(a *activation, x, y dnode) (xs, ys string, ok bool) {
	xv, yv, ok := evalSameKind(a, x, y)
	if !ok || xv.k != dString {
		return "", "", false
	}
	return xv.s, yv.s, true
}

// dstrpred is s.startsWith(t), s.endsWith(t) or s.contains(t) (CEL's
// strings.HasPrefix, HasSuffix, Contains).
type dstrpred struct {
	fn   string
	s, t dnode
}

func (n *dstrpred) eval(a *activation) dval {
	s, t, ok := strings2(a, n.s, n.t)
	if !ok {
		return dval{}
	}
	var b bool
	switch n.fn {
	case "startsWith":
		b = strings.HasPrefix(s, t)
	case "endsWith":
		b = strings.HasSuffix(s, t)
	default:
		b = strings.Contains(s, t)
	}
	return dval{k: dBool, b: b}
}

// dlower is s.lowerAscii(): ext.Strings lowers each rune up to 0x7f of
// []rune(s), which on valid UTF-8 is lowering the bytes A-Z (a string
// without them is returned as it is).
type dlower struct{ s dnode }

func (n *dlower) eval(a *activation) dval {
	v := n.s.eval(a)
	if v.k != dString || !validUTF8(v) {
		return dval{}
	}
	i := 0
	for i < len(v.s) && (v.s[i] < 'A' || v.s[i] > 'Z') {
		i++
	}
	if i == len(v.s) {
		return v
	}
	b := []byte(v.s)
	for ; i < len(b); i++ {
		if c := b[i]; c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return dval{k: dString, s: string(b), plain: v.plain}
}

// dsubstr is s.substring(i): the runes of valid UTF-8 s from the i-th on
// (an index outside 0..runes is CEL's error: given up).
type dsubstr struct{ s, i dnode }

func (n *dsubstr) eval(a *activation) dval {
	v := n.s.eval(a)
	if v.k != dString {
		return dval{}
	}
	i := n.i.eval(a)
	if i.k != dInt || i.i < 0 || !validUTF8(v) {
		return dval{}
	}
	runes := int64(0)
	for off := range v.s {
		if runes == i.i {
			return dval{k: dString, s: v.s[off:], plain: v.plain}
		}
		runes++
	}
	if runes == i.i {
		return dval{k: dString}
	}
	return dval{}
}

// dreplace is s.replace(old, new): strings.ReplaceAll, as ext.Strings.
type dreplace struct{ s, old, new dnode }

func (n *dreplace) eval(a *activation) dval {
	s, old, nv, count, ok := n.operands(a)
	if !ok {
		return dval{}
	}
	if count == 0 && old != "" {
		return s // ReplaceAll returns s as it is
	}
	return dval{k: dString, s: strings.ReplaceAll(s.s, old, nv.s), plain: s.plain && nv.plain}
}

// operands evaluates s, old and new as dreplace does, giving up (ok
// false) where it does: an operand not a string, or a result longer than
// directStringBound, which is left to CEL, whose cost tracking decides
// it (replacing "" inserts new at every rune boundary, so a bounded
// input could otherwise grow len(s) x len(new)). count is the number of
// old in s (strings.Count; "" counts rune boundaries).
func (n *dreplace) operands(a *activation) (s dval, old string, new dval, count int, ok bool) {
	s, ov, ok := evalSameKind(a, n.s, n.old)
	if !ok || s.k != dString {
		return dval{}, "", dval{}, 0, false
	}
	nv := n.new.eval(a)
	if nv.k != dString {
		return dval{}, "", dval{}, 0, false
	}
	count = strings.Count(s.s, ov.s)
	if len(nv.s) > len(ov.s) && len(s.s)+count*(len(nv.s)-len(ov.s)) > directStringBound {
		return dval{}, "", dval{}, 0, false
	}
	return s, ov.s, nv, count, true
}

// sizeOf is the node of size(x) for x compiled: dsizeReplace when x is a
// replace, dsize otherwise.
func sizeOf(x dnode) dnode {
	if r, ok := unmemo(x).(*dreplace); ok {
		return &dsizeReplace{r}
	}
	return &dsize{x}
}

// dsize is size(s) of a string: the length of []rune(s), which counts an
// invalid byte as one rune as utf8.RuneCountInString does.
type dsize struct{ s dnode }

func (n *dsize) eval(a *activation) dval {
	v := n.s.eval(a)
	if v.k != dString {
		return dval{}
	}
	return dval{k: dInt, i: runeCount(v)}
}

// dsizeReplace is size(s.replace(old, new)) (Nexmark q14's count of a
// character, size(extra) - size(extra.replace('c', ”))): where s, old
// and new are valid UTF-8, every match of old in s starts and ends at a
// rune boundary, so the result has runes(s) + count x (runes(new) -
// runes(old)) runes, counted without building it; otherwise (an invalid
// byte beside a removed match may join a rune) the size of dreplace's
// result. It gives up where dreplace does.
type dsizeReplace struct{ r *dreplace }

func (n *dsizeReplace) eval(a *activation) dval {
	s, old, nv, count, ok := n.r.operands(a)
	if !ok {
		return dval{}
	}
	if !validUTF8(s) || !utf8.ValidString(old) || !validUTF8(nv) {
		return dval{k: dInt, i: int64(utf8.RuneCountInString(strings.ReplaceAll(s.s, old, nv.s)))}
	}
	oldRunes := int64(utf8.RuneCountInString(old))
	return dval{k: dInt, i: runeCount(s) + int64(count)*(runeCount(nv)-oldRunes)}
}

// validUTF8 reports whether v's string is valid UTF-8 (at once for a
// plain one: ASCII).
func validUTF8(v dval) bool { return v.plain || utf8.ValidString(v.s) }

// runeCount is utf8.RuneCountInString of v's string (its length for a
// plain one: ASCII).
func runeCount(v dval) int64 {
	if v.plain {
		return int64(len(v.s))
	}
	return int64(utf8.RuneCountInString(v.s))
}

// dsplitSize is size(s.split(sep)): strings.Split's number of pieces for
// a non-empty sep.
type dsplitSize struct{ s, sep dnode }

func (n *dsplitSize) eval(a *activation) dval {
	s, sep, ok := strings2(a, n.s, n.sep)
	if !ok || sep == "" {
		return dval{}
	}
	return dval{k: dInt, i: int64(strings.Count(s, sep)) + 1}
}

// dsplitIndex is s.split(sep)[i]: strings.Split's i-th piece for a
// non-empty sep, found without building the others (an index out of
// range is CEL's error: given up).
type dsplitIndex struct{ s, sep, i dnode }

func (n *dsplitIndex) eval(a *activation) dval {
	sv, sepv, ok := evalSameKind(a, n.s, n.sep)
	if !ok || sv.k != dString || sepv.s == "" {
		return dval{}
	}
	s, sep := sv.s, sepv.s
	iv := n.i.eval(a)
	if iv.k != dInt || iv.i < 0 {
		return dval{}
	}
	for i := iv.i; i > 0; i-- {
		j := strings.Index(s, sep)
		if j < 0 {
			return dval{}
		}
		s = s[j+len(sep):]
	}
	if j := strings.Index(s, sep); j >= 0 {
		s = s[:j]
	}
	return dval{k: dString, s: s, plain: sv.plain}
}

// dlowerEq is s.lowerAscii() == lit, or != (ne), for a string literal
// lit: dlower's result compared with lit byte for byte without building
// it (lowering A-Z keeps every byte's place); it gives up where dlower
// does (s not a string, or not valid UTF-8).
type dlowerEq struct {
	s   dnode
	lit string
	ne  bool
}

func (n *dlowerEq) eval(a *activation) dval {
	v := n.s.eval(a)
	if v.k != dString || !validUTF8(v) {
		return dval{}
	}
	return dval{k: dBool, b: lowerEquals(v.s, n.lit) != n.ne}
}

// lowerEquals reports whether s with A-Z lowered equals t.
func lowerEquals(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != t[i] {
			return false
		}
	}
	return true
}

// dlowerIn is s.lowerAscii() in [string literals] (Nexmark q21's
// channel test): dlowerEq's comparison with each, giving up where dlower
// does.
type dlowerIn struct {
	s   dnode
	set []string
}

func (n *dlowerIn) eval(a *activation) dval {
	v := n.s.eval(a)
	if v.k != dString || !validUTF8(v) {
		return dval{}
	}
	for _, t := range n.set {
		if lowerEquals(v.s, t) {
			return dval{k: dBool, b: true}
		}
	}
	return dval{k: dBool}
}

// din is x in [string literals] for a string x.
type din struct {
	x   dnode
	set []string
}

func (n *din) eval(a *activation) dval {
	v := n.x.eval(a)
	if v.k != dString {
		return dval{}
	}
	for _, s := range n.set {
		if s == v.s {
			return dval{k: dBool, b: true}
		}
	}
	return dval{k: dBool}
}

// lowerTest returns the dlowerEq of == or != (ne) with args, the call's
// direct operands, when one is s.lowerAscii() and the other a string
// constant; nil otherwise.
func lowerTest(args []dnode, ne bool) dnode {
	for i, j := range []int{1, 0} {
		c, ok := args[j].(dconst)
		if !ok || c.v.k != dString {
			continue
		}
		if l, ok := unmemo(args[i]).(*dlower); ok {
			return &dlowerEq{s: l.s, lit: c.v.s, ne: ne}
		}
	}
	return nil
}

// isPlainText reports whether s is written in JSON as it is between
// quotes (dval.plain): printable ASCII without '"' and '\\' (what
// jsonAppender.string writes unchanged).
func isPlainText(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
