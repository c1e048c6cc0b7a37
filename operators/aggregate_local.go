package operators

import "github.com/kstreamd/kstreamd/state"

// This file holds the mini-batch's table of a key's count_distinct map
// entries (aggLocal): while FinishBundle folds one key's records of a
// batch, every entry of a count_distinct MapState (a shared map's mask or
// counts, an ungrouped map's presence or count) is read from the state at
// most once, kept in the table as the records change it, and written back
// (Put, or Remove when no aggregate holds the value any more) once when
// the key's records are folded. Within a batch the same bidders and
// auctions come again and again (Nexmark q15: one key per day, 50,000
// bids per batch), so the reads and writes of the state per bid become
// reads and writes of the table; the entries the state holds after the
// key's fold are exactly those the record-by-record reads and writes
// leave, and each record's map step sees the entry as it was after the
// records before it, so masks, counts and retractions are the same.
//
// A Clear of a key's maps (a retraction emptied the key, or state_ttl
// clears an expired key's values) drops the table's entries of the maps
// cleared, changes and all, after the state's Clear. The multisets of min
// and max over a changelog are not kept in the table: a retraction of a
// min or max may scan the map's keys in the state. Flink's
// MiniBatchGroupAggFunction keeps its accumulators per key in the same
// way (its distinct MapViews are read through the state backend).

// aggLocal is the table of aggLocal's file comment for the current key of
// a mini-batch: the entries of the maps it keeps (index by map and user
// key), in the order they were first read.
type aggLocal struct {
	// on: a key's fold is under way (FinishBundle); off, fold reads and
	// writes the state itself.
	on bool
	// keeps[j] says map j is kept (a count_distinct's).
	keeps []bool
	index []map[string]int32
	ents  []aggLocalEntry
}

// aggLocalEntry is one map entry of the table: its value v (present: the
// map holds it), whether the state held it when it was read (stored), and
// whether it changed since (dirty: it is written back; a value added and
// taken back within the batch, never stored, is not).
type aggLocalEntry struct {
	j       int32 // -1: dropped by a Clear
	key     string
	v       []byte
	present bool
	stored  bool
	dirty   bool
}

// init sets which of a's maps the table keeps: the count_distinct ones.
func (l *aggLocal) init(a *aggregator) {
	l.keeps = make([]bool, len(a.maps))
	l.index = make([]map[string]int32, len(a.maps))
	for j, i := range a.maps {
		if a.specs[i].Fn == AggCountDistinct {
			l.keeps[j] = true
			l.index[j] = map[string]int32{}
		}
	}
	l.ents = l.ents[:0]
	l.on = false
}

// begin starts the table of a key, empty.
func (l *aggLocal) begin() {
	for _, m := range l.index {
		clear(m)
	}
	clear(l.ents)
	l.ents = l.ents[:0]
	l.on = true
}

// kept reports whether the table is on and keeps map j.
func (l *aggLocal) kept(j int) bool { return l.on && j < len(l.keeps) && l.keeps[j] }

// get returns the entry of user key k of map j in the table (at: its
// index; -1 when the table has none).
func (l *aggLocal) get(j int, k string) (at int32, v []byte, present bool) {
	at, ok := l.index[j][k]
	if !ok {
		return -1, nil, false
	}
	e := &l.ents[at]
	return at, e.v, e.present
}

// add puts the entry of user key k of map j as read from the state (v,
// present) in the table and returns its index.
func (l *aggLocal) add(j int, k string, v []byte, present bool) int32 {
	at := int32(len(l.ents))
	l.ents = append(l.ents, aggLocalEntry{j: int32(j), key: k, v: v, present: present, stored: present})
	l.index[j][k] = at
	return at
}

// set changes entry at: its value v (present), or removed (present
// false); it is written back at the key's end.
func (l *aggLocal) set(at int32, v []byte, present bool) {
	e := &l.ents[at]
	e.v, e.present, e.dirty = v, present, true
}

// cleared drops the entries of map j (the state's map was cleared).
func (l *aggLocal) cleared(j int) {
	if !l.kept(j) {
		return
	}
	for at := range l.ents {
		if l.ents[at].j == int32(j) {
			l.ents[at] = aggLocalEntry{j: -1}
		}
	}
	clear(l.index[j])
}

// flush writes the changed entries back to the maps sets of the current
// key, in the order they were first read, and turns the table off.
func (l *aggLocal) flush(sets []state.MapState[string, []byte]) error {
	l.on = false
	for at := range l.ents {
		e := &l.ents[at]
		if e.j < 0 || !e.dirty || (!e.present && !e.stored) {
			continue
		}
		var err error
		if e.present {
			err = sets[e.j].Put(e.key, e.v)
		} else {
			err = sets[e.j].Remove(e.key)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
