package expression

import (
	"strconv"
	"strings"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
)

// This file is the direct evaluator's common subexpressions: a
// subexpression a program holds more than once (Nexmark q22's
// bid.url and size(bid.url.split('/')), q14's bid.dateTime / 3600000 %
// 24, q21's bid.channel) is compiled to one node, computed at its first
// use in an evaluation and read again at the others (dmemo), as CEL's
// interpreter would compute it each time with the same result: every
// direct node is a function of the record alone (no side effect, no
// state kept between evaluations), so computing it once changes no
// result and no error (a give-up is remembered as well). The results are
// kept in the Env (Env.memo), not in the program, which goroutines share.

// dmemoState is an Env's memo: the results of the repeated
// subexpressions of the evaluation numbered gen (an entry of another
// generation is not computed yet); gen only grows.
type dmemoState struct {
	gen     uint64
	entries []dmemoEntry
}

// dmemoEntry is one repeated subexpression's result in an Env: v,
// computed in the evaluation numbered gen.
type dmemoEntry struct {
	gen uint64
	v   dval
}

// dmemo is a repeated subexpression n, whose result an evaluation keeps
// in its Env's memo at slot.
type dmemo struct {
	slot int
	n    dnode
}

func (m *dmemo) eval(a *activation) dval {
	s := a.memo
	if s == nil || m.slot >= len(s.entries) {
		return m.n.eval(a) // an evaluation not begun by direct.eval
	}
	e := &s.entries[m.slot]
	if e.gen == s.gen {
		return e.v
	}
	v := m.n.eval(a)
	// The entries are not regrown while a program evaluates, so e
	// still points into them.
	e.gen, e.v = s.gen, v
	return v
}

// unmemo returns the node n stands for: n itself, or the node a dmemo
// keeps the result of (for a compiler that looks at the kind of node its
// operand compiled to).
func unmemo(n dnode) dnode {
	if m, ok := n.(*dmemo); ok {
		return m.n
	}
	return n
}

// begin starts an evaluation of a program with slots repeated
// subexpressions on a: a new generation, so that no result of an earlier
// evaluation (of this program or another, on this record or an earlier
// one) is read, and a memo of at least slots entries.
func (a *activation) begin(slots int) {
	if slots > 0 {
		a.beginMemo(slots)
	}
}

// beginMemo is begin for a program with repeated subexpressions, out of
// begin's line, so that begin, inlined into every direct evaluation, is
// one test for a program without them (with the memo's allocations
// inlined there, filter-map's chain, which has none, took 40-60 ns longer
// per record: BenchmarkChain).
//
//go:noinline
func (a *activation) beginMemo(slots int) {
	if a.memo == nil {
		a.memo = new(dmemoState)
	}
	s := a.memo
	s.gen++
	if len(s.entries) < slots {
		s.entries = make([]dmemoEntry, slots) // every gen 0, below s.gen
	}
}

// memoShared is a repeated subexpression's compiled node and the +
// nodes compiled in it (counted again at every occurrence: CEL charges
// each occurrence's concatenation, compileDirect).
type memoShared struct {
	m    *dmemo
	adds []*darith
}

// countShared counts, in dc.count by exprKey, the subexpressions of x
// (x included) that the direct compiler may compile to a node of their
// own, keeping each one's key in dc.keys by expression id.
func (dc *dcompiler) countShared(x celast.Expr) {
	k, ok := dc.key(x)
	if ok && x.Kind() != celast.LiteralKind {
		dc.count[k]++
	}
	switch x.Kind() {
	case celast.SelectKind:
		dc.countShared(x.AsSelect().Operand())
	case celast.CallKind:
		c := x.AsCall()
		if c.IsMemberFunction() {
			dc.countShared(c.Target())
		}
		for _, arg := range c.Args() {
			dc.countShared(arg)
		}
	case celast.ListKind:
		for _, e := range x.AsList().Elements() {
			dc.countShared(e)
		}
	case celast.MapKind:
		for _, e := range x.AsMap().Entries() {
			me := e.AsMapEntry()
			dc.countShared(me.Key())
			dc.countShared(me.Value())
		}
	}
}

// key returns exprKey of x, computed once per expression id.
func (dc *dcompiler) key(x celast.Expr) (string, bool) {
	if k, ok := dc.keys[x.ID()]; ok {
		return k, k != ""
	}
	k, ok := dc.exprKey(x)
	if !ok {
		k = ""
	}
	dc.keys[x.ID()] = k
	return k, ok
}

// exprKey is a text two subexpressions of one checked program share
// exactly when they are the same expression: the same literal (kind and
// value), identifier (as the checker resolved it), field selection or
// presence test of the same operand, or call of the same function
// (member or global) on the same operands, which the checker resolved to
// the same overload since their types are the same. false for anything
// else (a comprehension, a map or struct literal, a list with optional
// elements), which is never shared.
func (dc *dcompiler) exprKey(x celast.Expr) (string, bool) {
	var b strings.Builder
	switch x.Kind() {
	case celast.LiteralKind:
		switch v := x.AsLiteral().(type) {
		case types.Int:
			return "i" + strconv.FormatInt(int64(v), 10), true
		case types.Uint:
			return "u" + strconv.FormatUint(uint64(v), 10), true
		case types.Double:
			return "d" + strconv.FormatFloat(float64(v), 'g', -1, 64), true
		case types.String:
			return "s" + strconv.Quote(string(v)), true
		case types.Bool:
			return "b" + strconv.FormatBool(bool(v)), true
		case types.Null:
			return "null", true
		}
		return "", false
	case celast.IdentKind:
		r := dc.refs[x.ID()]
		if r != nil && r.Value != nil {
			return "", false
		}
		name := x.AsIdent()
		if r != nil {
			name = r.Name
		}
		return "n" + strconv.Quote(name), true
	case celast.SelectKind:
		if r := dc.refs[x.ID()]; r != nil {
			return "", false // a qualified name or constant the checker resolved
		}
		s := x.AsSelect()
		op, ok := dc.key(s.Operand())
		if !ok {
			return "", false
		}
		b.WriteString("(")
		b.WriteString(op)
		if s.IsTestOnly() {
			b.WriteString(")?")
		} else {
			b.WriteString(").")
		}
		b.WriteString(strconv.Quote(s.FieldName()))
		return b.String(), true
	case celast.CallKind:
		if r := dc.refs[x.ID()]; r != nil && r.Value != nil {
			return "", false
		}
		c := x.AsCall()
		b.WriteString("c")
		b.WriteString(strconv.Quote(c.FunctionName()))
		b.WriteString("(")
		if c.IsMemberFunction() {
			t, ok := dc.key(c.Target())
			if !ok {
				return "", false
			}
			b.WriteString(t)
			b.WriteString(";")
		}
		for i, arg := range c.Args() {
			k, ok := dc.key(arg)
			if !ok {
				return "", false
			}
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(k)
		}
		b.WriteString(")")
		return b.String(), true
	case celast.ListKind:
		l := x.AsList()
		if len(l.OptionalIndices()) > 0 {
			return "", false
		}
		b.WriteString("[")
		for i, e := range l.Elements() {
			k, ok := dc.key(e)
			if !ok {
				return "", false
			}
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(k)
		}
		b.WriteString("]")
		return b.String(), true
	}
	return "", false
}

// node compiles x, or returns nil: a subexpression the program holds
// more than once (countShared) is compiled once, as a dmemo that every
// occurrence shares.
func (dc *dcompiler) node(x celast.Expr) dnode {
	k, ok := dc.key(x)
	if !ok || dc.count[k] < 2 || x.Kind() == celast.LiteralKind {
		return dc.compile(x)
	}
	if s, done := dc.shared[k]; done {
		if s == nil {
			return nil
		}
		dc.adds = append(dc.adds, s.adds...)
		return s.m
	}
	from := len(dc.adds)
	n := dc.compile(x)
	if n == nil {
		dc.shared[k] = nil
		return nil
	}
	s := &memoShared{m: &dmemo{slot: dc.slots, n: n}, adds: dc.adds[from:len(dc.adds):len(dc.adds)]}
	dc.slots++
	dc.shared[k] = s
	return s.m
}
