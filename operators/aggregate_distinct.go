package operators

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/state"
)

// This file holds count_distinct's filter (AggregateSpec.Filter, SQL's
// COUNT(DISTINCT x) FILTER (WHERE c)) and the MapState that count_distinct
// aggregates over the same of share when some of them are filtered
// (Flink's distinct aggregate sharing: one MapState per distinct field, a
// value's entry holding which of the aggregates counted it, as Flink's
// DistinctInfo with its filter args).
//
// A group is every count_distinct aggregate of the operator with the same
// of (the same expression text) when at least one of them has a filter,
// at most maxDistinctMembers of them (more start another group). Per
// record the group evaluates its of once, reads its value's entry once and
// writes it at most once, whatever the number of its aggregates: Nexmark
// q15 and q16 count the distinct bidders and auctions in all and in three
// price ranks, eight count_distinct aggregates over two fields, so two
// reads per bid instead of eight. A record on which every one of a
// group's filters is false touches no entry.
//
// The shared map is the group's first aggregate's (AggregateStateName +
// "." + its name); its entry for a value is distinctMembersSerializer's:
// a mask of the aggregates holding the value when the input is
// append-only, or each aggregate's count of the value over a changelog
// (retractions). An aggregate outside any group (every count_distinct of
// a config without filters, as all were before filters existed) keeps its
// own map in the format it always had (presence, or the count as a
// decimal integer over a changelog), so older checkpoints restore as they
// are; a group's map has its own serializer name, so a checkpoint whose
// map under that name was an ungrouped aggregate's (the config gained a
// filter) is refused with a *state.StateMigrationError instead of being
// misread.

// maxDistinctMembers bounds a group's aggregates: one bit each in the
// mask of a value's entry.
const maxDistinctMembers = 64

// distinctMembersSerializerName is the name of the shared maps' value
// serializer, part of the checkpoint format (its version).
const distinctMembersSerializerName = "count_distinct.members.v1"

// The first byte of a shared map's entry: the form of the rest.
const (
	// distinctMaskForm: a uvarint, the mask of the group's aggregates
	// holding the value (bit b: members[b]), each counting it once.
	distinctMaskForm = 'm'
	// distinctCountsForm: one uvarint per aggregate of the group, in
	// order, its count of the value (absent trailing counts are 0).
	distinctCountsForm = 'c'
)

// distinctMembersSerializer is the value serializer of a group's shared
// MapState (values' JSON to distinctMaskForm or distinctCountsForm bytes):
// bytes as they are, as state.BytesSerializer, under a name of its own.
type distinctMembersSerializer struct{ state.BytesSerializer }

// Name returns distinctMembersSerializerName.
func (distinctMembersSerializer) Name() string { return distinctMembersSerializerName }

// distinctGroup is one map of the aggregate operator (aggregator.maps[j])
// shared by several count_distinct aggregates; members are their indexes
// in specs, members[0] == maps[j].
type distinctGroup struct {
	members []int
}

// buildMaps sets a.maps, a.groups, a.slotOf and the filters: every
// count_distinct aggregate gets a map of its own unless it is in a group
// (see the file comment), every min and max over a changelog one of its
// own; maps are in the order of their first aggregate.
func (a *aggregator) buildMaps() {
	a.slotOf = make([]int32, len(a.specs))
	a.bitOf = make([]uint8, len(a.specs))
	a.filterOf = make([]int, len(a.specs))
	a.ofOf = make([]int, len(a.specs))
	filtered := map[string]bool{} // of texts some filtered count_distinct has
	for i, s := range a.specs {
		a.slotOf[i], a.filterOf[i], a.ofOf[i] = -1, -1, -1
		if s.Fn == AggCountDistinct && s.Filter.IsSet() {
			filtered[s.Of.String()] = true
		}
	}
	filterAt := map[string]int{}
	open := map[string]int{} // of text -> the map of its group taking members
	for i, s := range a.specs {
		if s.Filter.IsSet() {
			src := s.Filter.String()
			f, ok := filterAt[src]
			if !ok {
				f = len(a.filters)
				filterAt[src] = f
				a.filters = append(a.filters, s.Filter.Expression)
			}
			a.filterOf[i] = f
		}
		switch {
		case s.Fn == AggCountDistinct && filtered[s.Of.String()]:
			src := s.Of.String()
			if j, ok := open[src]; ok && len(a.groups[j].members) < maxDistinctMembers {
				g := &a.groups[j]
				a.slotOf[i], a.bitOf[i] = int32(j), uint8(len(g.members))
				a.ofOf[i] = g.members[0]
				g.members = append(g.members, i)
				continue
			}
			open[src] = len(a.maps)
			a.slotOf[i] = int32(len(a.maps))
			a.maps = append(a.maps, i)
			a.groups = append(a.groups, distinctGroup{members: []int{i}})
		case s.Fn == AggCountDistinct, a.changelog && (s.Fn == AggMin || s.Fn == AggMax):
			a.slotOf[i] = int32(len(a.maps))
			a.maps = append(a.maps, i)
			a.groups = append(a.groups, distinctGroup{})
		}
	}
	// A group of one filtered aggregate keeps the ungrouped layout: its
	// filter only skips records.
	for j := range a.groups {
		if len(a.groups[j].members) == 1 {
			a.groups[j].members = nil
		}
	}
}

// shared reports whether map j is a group's (distinctMembersSerializer's
// entries).
func (a *aggregator) shared(j int) bool { return len(a.groups[j].members) > 0 }

// evalFilters evaluates each distinct filter expression once on env into
// a.passes; a filter that fails or is not a bool is an eval_error. A bool
// comes from Program.EvalBool, which takes the direct evaluator (a
// filter compiles expecting a bool, which Program.Eval's direct path
// does not take: CEL's interpreter was a fifth of Nexmark q15's CPU); on
// any failure the filter is evaluated again with Eval, whose error (or
// non-bool result) makes the record's error as it always did (a program
// is a function of the record: the second evaluation fails the same way).
func (a *aggregator) evalFilters(env *expression.Env) error {
	if len(a.filters) == 0 {
		return nil
	}
	if len(a.passes) != len(a.filters) {
		a.passes = make([]bool, len(a.filters))
	}
	for f, e := range a.filters {
		if b, err := e.Program().EvalBool(env); err == nil {
			a.passes[f] = b
			continue
		}
		v, err := e.Program().Eval(env)
		if err != nil {
			return EvalRecordError(err)
		}
		b, ok := v.(bool)
		if !ok {
			return resultError(e, "aggregate filter", "needs a bool, got "+expression.TypeName(v))
		}
		a.passes[f] = b
	}
	return nil
}

// passMask returns the aggregates of map j that count the record of
// inputs in (bit b: the group's members[b]; an ungrouped map's aggregate
// is bit 0): those without a filter or whose filter is true.
func (a *aggregator) passMask(j int, in []aggInput) uint64 {
	if !a.shared(j) {
		if a.filteredOut(a.maps[j], in) {
			return 0
		}
		return 1
	}
	var m uint64
	for b, i := range a.groups[j].members {
		if !a.filteredOut(i, in) {
			m |= 1 << b
		}
	}
	return m
}

// filteredOut reports whether aggregate specs[i] has a filter that was
// false on the record of inputs in (inputsInto then left its raw nil; a
// value's JSON is never empty).
func (a *aggregator) filteredOut(i int, in []aggInput) bool {
	return i < len(a.filterOf) && a.filterOf[i] >= 0 && in[i].raw == nil
}

// slotKey returns the user key of map j for the record of inputs in (its
// map step's key).
func (a *aggregator) slotKey(j int, in []aggInput) string {
	if a.shared(j) {
		return a.sharedKey(j, in)
	}
	return a.mapKey(a.maps[j], in)
}

// sharedKey returns the user key of a group's map j for the record of
// inputs in: the of's JSON, which every member whose filter passed holds
// (pass is not 0).
func (a *aggregator) sharedKey(j int, in []aggInput) string {
	for _, i := range a.groups[j].members {
		if in[i].raw != nil {
			return string(in[i].raw)
		}
	}
	return ""
}

// decodeMembers reads a shared map's entry: the mask of the aggregates
// holding the value, and (distinctCountsForm) their counts; an unreadable
// entry counts 1 for the first aggregate, as decodeCount counts 1.
func decodeMembers(v []byte, n int) (mask uint64, counts []int64) {
	if len(v) > 1 && v[0] == distinctMaskForm {
		if m, k := binary.Uvarint(v[1:]); k > 0 {
			return m, nil
		}
	}
	if len(v) > 0 && v[0] == distinctCountsForm {
		counts = make([]int64, n)
		rest := v[1:]
		for b := 0; b < n && len(rest) > 0; b++ {
			c, k := binary.Uvarint(rest)
			if k <= 0 {
				break
			}
			rest = rest[k:]
			counts[b] = int64(c)
			if c > 0 {
				mask |= 1 << b
			}
		}
		if mask != 0 {
			return mask, counts
		}
	}
	return 1, nil
}

// encodeMembers writes a shared map's entry: distinctCountsForm when
// counts is set, else distinctMaskForm of mask.
func encodeMembers(mask uint64, counts []int64) []byte {
	if counts == nil {
		return binary.AppendUvarint([]byte{distinctMaskForm}, mask)
	}
	b := make([]byte, 1, 1+len(counts))
	b[0] = distinctCountsForm
	for _, c := range counts {
		b = binary.AppendUvarint(b, uint64(c))
	}
	return b
}

// sharedStep returns the step of a group's map j for a record (pass: its
// aggregates counting the record, not 0; retract: a -U or -D) whose
// value's entry was v (present: it was in the state). An insertion adds
// the value to every passing aggregate; a retraction takes one count of
// it from every passing aggregate holding it. Over an append-only input
// the entry is a mask (each aggregate holds a value once), over a
// changelog (or when the stored entry has counts) per-aggregate counts.
func (a *aggregator) sharedStep(j int, in []aggInput, v []byte, present bool, pass uint64, retract bool) aggMapStep {
	n := len(a.groups[j].members)
	st := aggMapStep{key: a.sharedKey(j, in)}
	var counts []int64
	if present {
		st.had, counts = decodeMembers(v, n)
	}
	if counts == nil && a.changelog {
		counts = make([]int64, n)
		for b := range n {
			counts[b] = int64(st.had >> b & 1)
		}
	}
	st.has = st.had
	switch {
	case counts == nil && !retract:
		st.has |= pass
		st.changed = st.has != st.had
	case counts == nil: // a retraction over an append-only input: as for a changelog's
		st.has &^= pass
		st.changed = st.has != st.had
	default:
		for b := range n {
			if pass>>b&1 == 0 {
				continue
			}
			switch {
			case !retract:
				counts[b]++
			case counts[b] > 0:
				counts[b]--
			default:
				continue // a value this aggregate never counted (or expired): nothing to retract
			}
			st.changed = true
			if counts[b] > 0 {
				st.has |= 1 << b
			} else {
				st.has &^= 1 << b
			}
		}
		st.counts = counts
	}
	st.before, st.after = int64(bits.OnesCount64(st.had)), int64(bits.OnesCount64(st.has))
	return st
}

// sharedWrite says how step st changes the entry of a group's map: remove
// it (no aggregate holds the value any more), put value v (it changed, or
// TTL refreshes on writes), or nothing.
func (a *aggregator) sharedWrite(st aggMapStep) (v []byte, put, remove bool) {
	if st.has == 0 {
		return nil, false, st.had != 0
	}
	if !st.changed && !a.putSeen() {
		return nil, false, false
	}
	return encodeMembers(st.has, st.counts), true, false
}

// distinctIsNew returns the isNew of accumulate for a record's map steps
// (an insertion): per count_distinct aggregate, in the order of
// a.distinct, whether the record's value is new to it.
func (a *aggregator) distinctIsNew(steps []aggMapStep) []bool {
	isNew := make([]bool, len(a.distinct))
	for d, i := range a.distinct {
		st := &steps[a.slotOf[i]]
		isNew[d] = (st.has&^st.had)>>a.bitOf[i]&1 != 0
	}
	return isNew
}

// distinctGone reports whether a retraction's map step of the map of
// count_distinct aggregate specs[i] took its value's last count.
func (a *aggregator) distinctGone(i int, steps []aggMapStep) bool {
	st := &steps[a.slotOf[i]]
	return (st.had&^st.has)>>a.bitOf[i]&1 != 0
}

// checkDistinctFilter reports a filter on an aggregate that is not a
// count_distinct (only count_distinct takes one).
func checkDistinctFilter(i int, s AggregateSpec, report func(field, msg string)) {
	if s.Filter.IsSet() && s.Fn != AggCountDistinct {
		report(fmt.Sprintf("aggregates[%d].filter", i), "only count_distinct takes a filter (got fn "+string(s.Fn)+"); for a filtered count or sum, sum an expression such as 'c ? 1 : 0'")
	}
}
