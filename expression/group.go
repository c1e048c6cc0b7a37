package expression

import celast "cel.dev/cel-go/common/ast"

// This file is the direct evaluator's common subexpressions across the
// programs of one operator: an operator that evaluates several programs
// on every record (the aggregate's inputs and filters: Nexmark q17's
// bid.price < 10000 ? 1 : 0, bid.price >= 10000 && bid.price < 1000000 ?
// 1 : 0, bid.price >= 1000000 ? 1 : 0 and bid.price) groups them
// (Grouped), and a subexpression the group holds more than once, in one
// program or in several, is computed once per record and read again
// wherever it occurs, as directmemo.go does within one program. The
// results are kept in the Env's memo, which then belongs to the group
// (dmemoState.group) until the Env is Reset for another record or a
// program outside the group begins a memo of its own: a member finding
// the memo another's begins it anew, so members of one group may be
// evaluated in any order and mixed with other programs on one Env, and a
// result never outlives its record.

// dgroup is the memo slots of a group of programs (Grouped): the number
// of repeated subexpressions its members' direct forms share. Its
// address is the group's identity in an Env's memo.
type dgroup struct {
	slots int
}

// Grouped returns programs equal to ps (the same source, results and
// errors, each one's Eval, EvalBool, EvalInt64 and EvalJSON as the
// original's) for an operator that evaluates them one after another on
// every record, through one Env per record: a subexpression that occurs
// more than once in the group (a field read by several programs) is
// evaluated once per record and its result shared (see the file's
// comment). A program that takes no part (nil, one without a direct
// form, or one whose cost is tracked, whose direct form gives up on
// long strings and must not share nodes with one that does not) is
// returned as it is; so is every program when fewer than two take part.
// The programs returned are new: ps are not changed, and remain safe for
// use by others.
func Grouped(ps []*Program) []*Program {
	out := make([]*Program, len(ps))
	copy(out, ps)
	var members []int
	for i, p := range ps {
		if p != nil && p.direct != nil && !p.tracked {
			members = append(members, i)
		}
	}
	if len(members) < 2 {
		return out
	}
	g := &dgroup{}
	dc := &dcompiler{count: map[string]int{}, shared: map[string]*memoShared{}}
	keys := make([]map[int64]string, len(members))
	roots := make([]celast.Expr, len(members))
	across := false // a subexpression occurs in two programs
	for m, i := range members {
		a := ps[i].ast.NativeRep()
		keys[m] = map[int64]string{}
		roots[m] = a.Expr()
		own := &dcompiler{refs: a.ReferenceMap(), keys: keys[m], count: map[string]int{}}
		own.countShared(roots[m])
		for k, n := range own.count {
			across = across || dc.count[k] > 0
			dc.count[k] += n
		}
	}
	if !across {
		return out // nothing to share beyond what each program shares within itself
	}
	for m, i := range members {
		a := ps[i].ast.NativeRep()
		dc.refs, dc.keys, dc.adds = a.ReferenceMap(), keys[m], nil
		d := dc.compileRoot(roots[m])
		if d == nil {
			continue // the same nodes compiled on their own: cannot happen, but then the program stays as it was
		}
		d.group = g
		q := *ps[i]
		q.direct = d
		out[i] = &q
	}
	g.slots = dc.slots
	return out
}

// beginGroup starts an evaluation of a member of group g on a: the memo
// is begun anew (a new generation, at least g's slots) unless it already
// holds g's results of the record a is the Env of.
func (a *activation) beginGroup(g *dgroup) {
	if s := a.memo; s != nil && s.group == g {
		return
	}
	a.beginMemo(g.slots)
	a.memo.group = g
}
