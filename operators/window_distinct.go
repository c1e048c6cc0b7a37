package operators

import (
	"encoding/binary"
	"strings"

	"github.com/kstreamd/kstreamd/state"
)

// WindowDistinctStateName is the window operator's MapState of its
// count_distinct aggregates' values: per key, (window start, aggregate
// name, the value's JSON) to the number of the window's records with that
// value (a counted map, as the MapView of Flink's DISTINCT aggregates), so
// that a record costs one lookup and one write per count_distinct whatever
// the window holds. Part of the checkpoint format. A window stored before
// this state existed kept its values as a list in its accumulator ("seen");
// the operator moves such a list here when it first touches the window, so
// those checkpoints restore with the same results.
const WindowDistinctStateName = WindowStateName + ".distinct"

// windowDistinctState is the descriptor of WindowDistinctStateName: the
// map key is distinctKey's, the value the count as an unsigned varint.
func windowDistinctState() state.MapStateDescriptor[string, []byte] {
	return state.MapStateDescriptor[string, []byte]{
		Name: WindowDistinctStateName, KeySerializer: state.StringSerializer{}, ValueSerializer: state.BytesSerializer{},
	}
}

// distinctPrefix appends the map-key prefix of window start's values: the
// start as 8 big-endian bytes.
func distinctPrefix(dst []byte, start int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(start))
}

// distinctKey appends the map key of value (its JSON) of the aggregate
// name in the window starting at start: the prefix, the name's length as
// an unsigned varint, the name, the value.
func distinctKey(dst []byte, start int64, name string, value []byte) []byte {
	dst = distinctPrefix(dst, start)
	dst = binary.AppendUvarint(dst, uint64(len(name)))
	return append(append(dst, name...), value...)
}

// countDistinct adds one record of value to the counted map of
// count_distinct specs[i] in the window starting at start and reports
// whether the window had not held it.
func (w *Window) countDistinct(start int64, i int, value []byte) (bool, error) {
	w.keyBuf = distinctKey(w.keyBuf[:0], start, w.specs[i].Name, value)
	k := string(w.keyBuf)
	c, found, err := w.seen.Get(k)
	if err != nil {
		return false, err
	}
	var n uint64
	if found {
		n, _ = binary.Uvarint(c)
	}
	return !found, w.seen.Put(k, binary.AppendUvarint(nil, n+1))
}

// migrateSeen moves the Seen lists of a window stored in the layout before
// WindowDistinctStateName (the values in the accumulator) into the counted
// map, each with count 1 (that layout kept no counts; nothing reads them
// but a later merge), and empties them; accs is changed in place.
func (w *Window) migrateSeen(start int64, accs []aggAccumulator) error {
	for _, i := range w.distinct {
		if i >= len(accs) || len(accs[i].Seen) == 0 {
			continue
		}
		for _, v := range accs[i].Seen {
			k := string(distinctKey(nil, start, w.specs[i].Name, []byte(v)))
			if _, found, err := w.seen.Get(k); err != nil {
				return err
			} else if !found {
				if err := w.seen.Put(k, binary.AppendUvarint(nil, 1)); err != nil {
					return err
				}
			}
		}
		accs[i].Seen = nil
	}
	return nil
}

// dropDistinct removes the counted-map entries of the current key's
// window starting at start (the window is removed).
func (w *Window) dropDistinct(start int64) error {
	if w.seen == nil {
		return nil
	}
	prefix := string(distinctPrefix(nil, start))
	var drop []string
	for k, err := range w.seen.Keys() {
		if err != nil {
			return err
		}
		if strings.HasPrefix(k, prefix) {
			drop = append(drop, k)
		}
	}
	for _, k := range drop {
		if err := w.seen.Remove(k); err != nil {
			return err
		}
	}
	return nil
}

// mergeDistinct moves the counted-map entries of the current key's
// sessions starting at from into the session starting at into, adding
// counts of the same value, and sets the Distinct of accs (the merged
// session's accumulators, in place) to the number of values each
// count_distinct then holds.
func (w *Window) mergeDistinct(into int64, from []int64, accs []aggAccumulator) error {
	if w.seen == nil {
		return nil
	}
	prefixes := map[string]bool{}
	for _, s := range from {
		if s != into {
			prefixes[string(distinctPrefix(nil, s))] = true
		}
	}
	type entry struct {
		k string
		n uint64
	}
	var moved []entry
	for e, err := range w.seen.Entries() {
		if err != nil {
			return err
		}
		if prefixes[e.Key[:8]] {
			n, _ := binary.Uvarint(e.Value)
			moved = append(moved, entry{e.Key, n})
		}
	}
	into8 := string(distinctPrefix(nil, into))
	for _, m := range moved {
		if err := w.seen.Remove(m.k); err != nil {
			return err
		}
		k := into8 + m.k[8:]
		c, found, err := w.seen.Get(k)
		if err != nil {
			return err
		}
		n := m.n
		if found {
			old, _ := binary.Uvarint(c)
			n += old
		}
		if err := w.seen.Put(k, binary.AppendUvarint(nil, n)); err != nil {
			return err
		}
	}
	for _, i := range w.distinct {
		if i < len(accs) {
			accs[i].Distinct = 0
		}
	}
	for k, err := range w.seen.Keys() {
		if err != nil {
			return err
		}
		if !strings.HasPrefix(k, into8) {
			continue
		}
		rest := k[8:]
		l, n := binary.Uvarint([]byte(rest))
		if n <= 0 || uint64(len(rest)-n) < l {
			continue
		}
		name := rest[n : n+int(l)]
		for _, i := range w.distinct {
			if i < len(accs) && w.specs[i].Name == name && accs[i].Fn == AggCountDistinct {
				accs[i].Distinct++
			}
		}
	}
	return nil
}
