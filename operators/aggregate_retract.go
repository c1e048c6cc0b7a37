package operators

import (
	"bytes"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/kstreamd/kstreamd/runtime"
)

// This file holds what the aggregate operator does with a changelog: the
// retraction of a -U or -D record from the accumulators (Flink's
// GroupAggFunction with retract: sum and avg subtract, count decrements,
// min and max keep a value -> count multiset as Flink's
// MaxWithRetractAggFunction does, count_distinct a value -> count map) and
// the changelog it emits (+I for a key's first row, -U old then +U new per
// update, -D when retractions leave a key without rows).
//
// The multisets live in the aggregate's MapStates (AggregateStateName +
// "." + name): the user key is the value's JSON (min and max: the number as
// number.appendJSON writes it), the value its count as a decimal integer.
// An entry with an empty value counts 1: count_distinct over an
// append-only input writes no count, only the value's presence.

// aggMapStep is what one record does to the MapState of one map-backed
// aggregate (aggregator.maps[j]).
type aggMapStep struct {
	// key is the record's value as the map's user key.
	key string
	// before and after are the value's count before and after the record
	// (0: absent; a shared map's: the aggregates holding it).
	before, after int64
	// had and has are the aggregates of the map holding the value before
	// and after the record (bit b: a shared map's members[b], bit 0 the
	// aggregate of a map of its own); 0 for a record the map's
	// aggregates all filtered out. A shared map's changed says its entry
	// changed, counts are its per-aggregate counts after (nil: the entry
	// is a mask) (aggregate_distinct.go).
	had, has uint64
	changed  bool
	counts   []int64
	// rescan: a min or max whose extreme the record retracted for the last
	// time; extreme (ok false: none left) is the extreme of the other
	// values, recomputed from the multiset.
	rescan  bool
	extreme number
	ok      bool
}

// mapKey returns the MapState user key of aggregate specs[i] for the
// record's inputs in.
func (a *aggregator) mapKey(i int, in []aggInput) string {
	if a.specs[i].Fn == AggCountDistinct {
		return string(in[i].raw)
	}
	return string(in[i].num.appendJSON(nil))
}

// decodeCount reads a multiset count; an empty value (count_distinct over
// an append-only input, which stores presence only) or an unreadable one
// counts 1.
func decodeCount(v []byte) int64 {
	if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && n > 0 {
		return n
	}
	return 1
}

// mapStep returns the step of maps[j] for a record (retract: a -U or -D)
// whose value's entry was v (present: it was in the state); pass are the
// map's aggregates whose filter the record passed (passMask: 0 leaves the
// map as it is); cur are the key's accumulators before the record.
func (a *aggregator) mapStep(j int, in []aggInput, cur []aggAccumulator, v []byte, present bool, pass uint64, retract bool) aggMapStep {
	switch {
	case pass == 0:
		return aggMapStep{}
	case a.shared(j):
		return a.sharedStep(j, in, v, present, pass, retract)
	}
	i := a.maps[j]
	st := aggMapStep{key: a.mapKey(i, in)}
	if present {
		st.before, st.had = decodeCount(v), 1
	}
	if !retract {
		st.after, st.has = st.before+1, 1
		return st
	}
	if st.before == 0 {
		return st // a value never added (or expired): nothing to retract
	}
	st.after = st.before - 1
	if st.after > 0 {
		st.has = 1
	}
	if s := a.specs[i]; st.after == 0 && (s.Fn == AggMin || s.Fn == AggMax) {
		x := accAt(cur, i).Num
		st.rescan = !x.less(in[i].num) && !in[i].num.less(x) // the extreme itself
	}
	return st
}

// rescanExtreme sets st's extreme from the multiset's user keys, leaving
// out st.key (the value retracted, whose entry is removed after).
func (a *aggregator) rescanExtreme(j int, st *aggMapStep, keys []string) {
	fn := a.specs[a.maps[j]].Fn
	st.ok = false
	for _, k := range keys {
		if k == st.key {
			continue
		}
		n, ok := parseMultisetNumber(k)
		if !ok {
			continue
		}
		if !st.ok || (fn == AggMin && n.less(st.extreme)) || (fn == AggMax && st.extreme.less(n)) {
			st.extreme, st.ok = n, true
		}
	}
}

// mapWrite says how step st changes the entry of maps[j]: remove it, put
// value v, or nothing (put and remove false).
func (a *aggregator) mapWrite(j int, st aggMapStep) (v []byte, put, remove bool) {
	switch {
	case a.shared(j):
		return a.sharedWrite(st)
	case st.after == 0:
		return nil, false, st.before > 0
	case a.specs[a.maps[j]].Fn == AggCountDistinct && !a.changelog:
		// Append-only: presence only, as ever (TTL: refreshed by writes
		// under OnCreateAndWrite).
		return nil, st.before == 0 || a.putSeen(), false
	}
	return strconv.AppendInt(nil, st.after, 10), st.after != st.before || a.putSeen(), false
}

// parseNumber reads a number written by number.appendJSON: an integer
// (math/big past int64) or a double.
func parseMultisetNumber(s string) (number, bool) {
	if strings.ContainsAny(s, ".eE") {
		f, err := strconv.ParseFloat(s, 64)
		return number{Float: f, IsFloat: true}, err == nil && !math.IsInf(f, 0)
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return number{Int: i}, true
	}
	z, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return number{}, false
	}
	return bigNumber(z), true
}

// neg returns -n (exact for integers: -MinInt64 is a math/big integer).
func (n number) neg() number {
	switch {
	case n.IsFloat:
		return number{Float: -n.Float, IsFloat: true}
	case n.Big == nil && n.Int != math.MinInt64:
		return number{Int: -n.Int}
	}
	z := n.bigInt()
	return bigNumber(z.Neg(z))
}

// apply returns the accumulators after one record with its map steps:
// accumulate for an insert or +U, retract for a -U or -D; either may
// change cur in place.
func (a *aggregator) apply(cur []aggAccumulator, in []aggInput, steps []aggMapStep, retract bool) []aggAccumulator {
	if retract {
		return a.retract(cur, in, steps)
	}
	return a.accumulate(cur, in, a.distinctIsNew(steps))
}

// retract returns the accumulators after retracting one record's inputs in
// from cur: sum and avg subtract, every aggregate's record count
// decrements, min and max take the extreme a rescan found, count_distinct
// drops a value whose count reached 0. first and last keep their value
// (the planner refuses them over a changelog input). It retracts in place
// when cur has one accumulator per aggregate.
func (a *aggregator) retract(cur []aggAccumulator, in []aggInput, steps []aggMapStep) []aggAccumulator {
	step := make(map[int]aggMapStep, len(steps))
	for j, i := range a.maps {
		step[i] = steps[j]
	}
	next := a.rowOf(cur)
	for i, s := range a.specs {
		acc := next[i]
		if acc.Fn != s.Fn || acc.Records == 0 {
			next[i] = aggAccumulator{Fn: s.Fn} // nothing to retract from
			continue
		}
		switch s.Fn {
		case AggSum, AggAvg:
			acc.Num = acc.Num.add(in[i].num.neg())
		case AggMin, AggMax:
			if st := step[i]; st.rescan && st.ok {
				acc.Num = st.extreme
			}
		case AggCountDistinct:
			if a.distinctGone(i, steps) {
				acc.Distinct--
			}
		}
		acc.Records--
		next[i] = acc
	}
	return next
}

// empty reports whether accs hold no row any more: every aggregate's
// record count is 0 (retractions took back every record).
func (a *aggregator) empty(accs []aggAccumulator) bool {
	for i := range a.specs {
		if accAt(accs, i).Records > 0 {
			return false
		}
	}
	return true
}

// deletes reports whether a record empties its key: a retraction (found:
// the key had accumulators) after which none holds a row. The key's state
// is then cleared and a -D emitted.
func (a *aggregator) deletes(found, retract bool, next []aggAccumulator) bool {
	return found && retract && a.empty(next)
}

// emitsOld reports whether a record of a key with accumulators (found)
// needs the key's old row rendered before the fold: for its -U, its -D
// (retract: the record may delete the key) or emit on_change's
// comparison. With updateAfterOnly and emit every_update an insertion
// emits the new row alone, so the old one is not rendered.
func (a *aggregator) emitsOld(found, retract bool) bool {
	return found && (retract || !a.updateAfterOnly || a.emit == EmitOnChange)
}

// emitChanges emits the changelog of one record rec of a key whose
// accumulators went from those of row prev (output's, with its room for
// another row; nil when emitsOld said it is not needed; found: there were
// some) to next: +I of a new key; -D of the old row when the record
// deleted the key (deletes); else -U of the old row then +U of the new,
// with emit on_change only when the row changed (the +U alone with
// updateAfterOnly).
func (a *aggregator) emitChanges(rec runtime.Record, prev []byte, found, retract bool, next []aggAccumulator, out Collector) error {
	switch {
	case !found || prev == nil:
		c := runtime.ChangeUpdateAfter
		if !found {
			c = runtime.ChangeInsert
		}
		return out.Collect(a.row(rec, a.appendOutput(make([]byte, 0, a.rowLen+len(rec.Key)+8), rec.Key, next), c))
	case a.deletes(found, retract, next):
		return out.Collect(a.row(rec, prev, runtime.ChangeDelete))
	}
	// The new row goes in prev's spare room (a new buffer when it does not
	// fit); the old one is capped at its length, so that nobody appending
	// to it writes over the new one.
	before := prev[:len(prev):len(prev)]
	after := a.appendOutput(prev[len(prev):], rec.Key, next)
	if a.emit == EmitOnChange && bytes.Equal(before, after) {
		return nil
	}
	if !a.updateAfterOnly {
		if err := out.Collect(a.row(rec, before, runtime.ChangeUpdateBefore)); err != nil {
			return err
		}
	}
	return out.Collect(a.row(rec, after, runtime.ChangeUpdateAfter))
}
