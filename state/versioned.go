package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
)

// VersionedValueStateDescriptor describes a VersionedValueState: a keyed
// value with its history by event time, as Kafka Streams' versioned
// key-value store (KIP-889, VersionedKeyValueStore) and the versioned table
// behind Flink's event-time temporal join.
type VersionedValueStateDescriptor[V any] struct {
	// Name is unique within the backend; required. The history is stored
	// as one ValueState of that name.
	Name string
	// Serializer encodes one version's value; required.
	Serializer Serializer[V]
	// HistoryRetention is how far behind the stream time (the caller's
	// `now`, for a table its watermark) versions are kept: a lookup as of
	// any time at or after now - HistoryRetention is exact, older history
	// is dropped, and a write older than that is refused (Kafka Streams'
	// historyRetention). > 0.
	HistoryRetention time.Duration
}

// Version is one version of a VersionedValueState's value: Value is valid
// from From (inclusive) until the From of the next version (exclusive);
// Deleted marks a tombstone, a time range without value.
type Version[V any] struct {
	From    time.Time
	Value   V
	Deleted bool
}

// VersionedValueState is the current key's value history by event time
// (Kafka Streams' versioned store, Flink's versioned table): Put and Delete
// add a version valid from a timestamp, Get answers the version valid at a
// time, and every write drops the history the retention no longer needs.
// It lives in one ValueState, so it is in checkpoints and restored and
// rescaled by key group like any keyed state, on either backend.
//
// Shape: per key the versions sorted by From, at most one per millisecond
// (a write at an existing From replaces it). After a write at stream time
// now, with cutoff = now - HistoryRetention, the history holds the versions
// newer than cutoff plus the one valid at cutoff, unless that is a
// tombstone (then nothing is valid at cutoff and it is dropped too); a key
// left with no version is cleared. Its size per key is therefore bounded by
// the writes of one retention period plus one. A key that is never written
// again keeps its last versions until Cleanup runs on it (an operator
// registers a timer for that, see operators.TableJoin).
//
// Time is in milliseconds (From.UnixMilli()); times are compared at that
// resolution. Not safe for concurrent use: it belongs to its subtask
// goroutine, like the backend.
//
// Byte format of the stored history (serializer "versions/<value
// serializer>"): a uvarint count, then per version in ascending From: the
// From in ms as a zig-zag varint, one flag byte (1 tombstone, 0 value), and
// for a value its uvarint length and the value serializer's bytes.
type VersionedValueState[V any] struct {
	st        ValueState[[]Version[V]]
	retention time.Duration
}

// ErrTooOld is returned (wrapped) by VersionedValueState.Put and Delete
// for a write whose time is older than the stream time minus the history
// retention: the history it would change is gone (Kafka Streams drops such
// a put).
var ErrTooOld = errors.New("state: version older than the history retention")

// GetVersionedValueState returns the VersionedValueState d describes (a
// ValueState named d.Name). It fails as GetValueState does, and when
// d.HistoryRetention <= 0 or d.Serializer is nil.
func GetVersionedValueState[V any](b KeyedStateBackend, d VersionedValueStateDescriptor[V]) (*VersionedValueState[V], error) {
	if d.HistoryRetention <= 0 {
		return nil, fmt.Errorf("state: versioned state %q: history retention %s, must be > 0", d.Name, d.HistoryRetention)
	}
	if d.Serializer == nil {
		return nil, fmt.Errorf("state: versioned state %q: nil serializer", d.Name)
	}
	st, err := GetValueState(b, ValueStateDescriptor[[]Version[V]]{Name: d.Name, Serializer: versionsSerializer[V]{d.Serializer}})
	if err != nil {
		return nil, err
	}
	return &VersionedValueState[V]{st: st, retention: d.HistoryRetention}, nil
}

// Put adds v as the current key's value valid from validFrom on, at stream
// time now, then drops the history older than now - HistoryRetention. A
// validFrom before that cutoff is refused with ErrTooOld and changes
// nothing.
func (s *VersionedValueState[V]) Put(v V, validFrom, now time.Time) error {
	return s.write(Version[V]{From: validFrom, Value: v}, now)
}

// Delete adds a tombstone valid from validFrom on (the key has no value
// from then until its next version), at stream time now, as Put does.
func (s *VersionedValueState[V]) Delete(validFrom, now time.Time) error {
	return s.write(Version[V]{From: validFrom, Deleted: true}, now)
}

func (s *VersionedValueState[V]) write(ver Version[V], now time.Time) error {
	cutoff := now.Add(-s.retention).UnixMilli()
	at := ver.From.UnixMilli()
	if at < cutoff {
		return fmt.Errorf("%w: version at %d ms, stream time %d ms, retention %s", ErrTooOld, at, now.UnixMilli(), s.retention)
	}
	vs, _, err := s.st.Value()
	if err != nil {
		return err
	}
	ver.From = time.UnixMilli(at)
	i, found := slices.BinarySearchFunc(vs, at, func(v Version[V], t int64) int { return cmpInt64(v.From.UnixMilli(), t) })
	if found {
		vs[i] = ver
	} else {
		vs = slices.Insert(vs, i, ver)
	}
	return s.store(prune(vs, cutoff))
}

// Get returns the current key's value valid at asOf: the value of the
// version with the greatest From at or before asOf, false when there is
// none or it is a tombstone. Exact for any asOf at or after the cutoff of
// the last write; older history may have been dropped (then false, or the
// oldest version kept when it is valid from before asOf).
func (s *VersionedValueState[V]) Get(asOf time.Time) (V, bool, error) {
	var zero V
	vs, _, err := s.st.Value()
	if err != nil {
		return zero, false, err
	}
	v, ok := versionAt(vs, asOf.UnixMilli())
	if !ok || v.Deleted {
		return zero, false, nil
	}
	return v.Value, true, nil
}

// Latest returns the current key's newest value, false when it has none or
// its newest version is a tombstone (Kafka Streams' get(key)).
func (s *VersionedValueState[V]) Latest() (V, bool, error) {
	var zero V
	vs, _, err := s.st.Value()
	if err != nil || len(vs) == 0 || vs[len(vs)-1].Deleted {
		return zero, false, err
	}
	return vs[len(vs)-1].Value, true, nil
}

// Versions returns the current key's history, oldest first (a copy).
func (s *VersionedValueState[V]) Versions() ([]Version[V], error) {
	vs, _, err := s.st.Value()
	return vs, err
}

// Cleanup drops the current key's history older than now -
// HistoryRetention, as a write does, and returns the From of the oldest
// version still to be dropped by a later Cleanup (the From of the second
// oldest kept version plus the retention: when the stream time reaches it,
// the oldest is superseded), false when nothing further can expire: the
// time an operator sets its cleanup timer to.
func (s *VersionedValueState[V]) Cleanup(now time.Time) (next time.Time, ok bool, err error) {
	vs, _, err := s.st.Value()
	if err != nil || len(vs) == 0 {
		return time.Time{}, false, err
	}
	n := len(vs)
	vs = prune(vs, now.Add(-s.retention).UnixMilli())
	if len(vs) != n {
		if err := s.store(vs); err != nil {
			return time.Time{}, false, err
		}
	}
	next, ok = NextExpiry(vs, s.retention)
	return next, ok, nil
}

// NextExpiry returns the stream time at which history vs (oldest first, as
// Versions returns it) next loses a version to retention: the From of its
// second version plus retention, or of its only version plus retention when
// that is a tombstone; false when it is empty or holds one value, which
// never expires.
func NextExpiry[V any](vs []Version[V], retention time.Duration) (time.Time, bool) {
	switch {
	case len(vs) >= 2:
		return vs[1].From.Add(retention), true
	case len(vs) == 1 && vs[0].Deleted:
		return vs[0].From.Add(retention), true
	}
	return time.Time{}, false
}

func (s *VersionedValueState[V]) store(vs []Version[V]) error {
	if len(vs) == 0 {
		return s.st.Clear()
	}
	return s.st.Update(vs)
}

// prune drops from vs (sorted by From) what no lookup at or after cutoff
// (ms) needs: every version before the one valid at cutoff, and that one
// too when it is a tombstone.
func prune[V any](vs []Version[V], cutoff int64) []Version[V] {
	i := -1 // the version valid at cutoff
	for j := range vs {
		if vs[j].From.UnixMilli() > cutoff {
			break
		}
		i = j
	}
	if i < 0 {
		return vs
	}
	if vs[i].Deleted {
		i++
	}
	return vs[i:]
}

// versionAt returns the version of vs valid at t (ms).
func versionAt[V any](vs []Version[V], t int64) (Version[V], bool) {
	i, found := slices.BinarySearchFunc(vs, t, func(v Version[V], t int64) int { return cmpInt64(v.From.UnixMilli(), t) })
	if !found {
		i--
	}
	if i < 0 {
		return Version[V]{}, false
	}
	return vs[i], true
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// versionsSerializer encodes a history (VersionedValueState's byte format).
type versionsSerializer[V any] struct{ value Serializer[V] }

func (s versionsSerializer[V]) Name() string { return "versions/" + s.value.Name() }

func (s versionsSerializer[V]) Append(dst []byte, vs []Version[V]) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(vs)))
	var buf []byte
	for _, v := range vs {
		dst = binary.AppendVarint(dst, v.From.UnixMilli())
		if v.Deleted {
			dst = append(dst, 1)
			continue
		}
		dst = append(dst, 0)
		var err error
		if buf, err = s.value.Append(buf[:0], v.Value); err != nil {
			return dst, err
		}
		dst = binary.AppendUvarint(dst, uint64(len(buf)))
		dst = append(dst, buf...)
	}
	return dst, nil
}

func (s versionsSerializer[V]) Decode(b []byte) ([]Version[V], error) {
	corrupt := func(what string) error { return fmt.Errorf("state: versions: %s: %w", what, ErrCorrupt) }
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, corrupt("bad count")
	}
	b = b[k:]
	vs := make([]Version[V], 0, n)
	for range n {
		from, k := binary.Varint(b)
		if k <= 0 || len(b) < k+1 {
			return nil, corrupt("bad version time")
		}
		flag := b[k]
		b = b[k+1:]
		switch flag {
		case 1:
			vs = append(vs, Version[V]{From: time.UnixMilli(from), Deleted: true})
			continue
		case 0:
		default:
			return nil, corrupt("bad flag")
		}
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, corrupt("bad value length")
		}
		v, err := s.value.Decode(b[k : k+int(l)])
		if err != nil {
			return nil, err
		}
		b = b[k+int(l):]
		vs = append(vs, Version[V]{From: time.UnixMilli(from), Value: v})
	}
	if len(b) != 0 {
		return nil, corrupt("trailing bytes")
	}
	return vs, nil
}
