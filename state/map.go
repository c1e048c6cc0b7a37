package state

import (
	"fmt"
	"iter"
)

// MapEntry is one entry of a MapState, as yielded by MapState.Entries.
type MapEntry[K, V any] struct {
	Key   K
	Value V
}

// MapState holds a map per key, as Flink's MapState. User keys are equal
// when their serialized bytes are equal.
//
// Get returns the value of user key uk and true, or false when absent;
// Contains reports presence; both count as reads for TTL. Put stores v
// under uk; PutAll stores every pair of entries (e.g. maps.All(m)); Remove
// deletes uk (absent is fine); Clear removes every entry of the current key.
//
// Entries, Keys and Values iterate the current key's entries: in
// serialized-key byte order on Pebble, in no particular order on hashmap.
// The state may be modified while iterating; an entry put or removed during
// the iteration, other than the current one, may or may not be visited. An
// error is yielded as the last pair (zero, err). IsEmpty reports whether the
// key has no (visible) entry.
//
// With TTL each entry carries its own timestamp and expires on its own;
// every read that returns an entry (Get, Contains, iteration) refreshes it
// under OnReadAndWrite, and reads remove the expired entries they meet.
// Errors as ValueState.
type MapState[K, V any] interface {
	Get(uk K) (V, bool, error)
	Put(uk K, v V) error
	PutAll(entries iter.Seq2[K, V]) error
	Remove(uk K) error
	Contains(uk K) (bool, error)
	Entries() iter.Seq2[MapEntry[K, V], error]
	Keys() iter.Seq2[K, error]
	Values() iter.Seq2[V, error]
	IsEmpty() (bool, error)
	Clear() error
}

// ColdPutter is implemented by every MapState: PutCold is Put of an entry
// the caller does not expect to read soon (the rules operator's window
// slice that leaves the key's summary, read again only when it expires or
// a record out of order reaches it). On Pebble with the write cache the
// entry joins the cache at its eviction end, so such writes, one per
// record, do not evict the hot values read per record (Kafka Streams'
// ThreadCache has no such hint; it is the caller's knowledge of its access
// pattern); elsewhere, and for values the cache keeps decoded (a
// HeapSerializer), it is Put. What is stored is the same either way.
type ColdPutter[K, V any] interface {
	PutCold(uk K, v V) error
}

// GetMapState returns the MapState d describes, creating it on first use;
// errors as GetValueState. The stored serializer name is
// "<key serializer>/<value serializer>".
func GetMapState[K, V any](b KeyedStateBackend, d MapStateDescriptor[K, V]) (MapState[K, V], error) {
	spec := descriptorSpec{name: d.Name, kind: kindMap, ttl: d.TTL, nilSer: d.KeySerializer == nil || d.ValueSerializer == nil}
	if !spec.nilSer {
		spec.serializer = d.KeySerializer.Name() + "/" + d.ValueSerializer.Name()
	}
	h, err := register(b, spec, fmt.Sprintf("%T/%T", d.KeySerializer, d.ValueSerializer), func(c *stateCore) any {
		return newMapState(c, d.KeySerializer, d.ValueSerializer)
	})
	if err != nil {
		return nil, err
	}
	return typedHandle[*mapState[K, V]](h, d.Name)
}

// mapState implements MapState; key as in valueState.
//
// With a HeapSerializer, no TTL and the Pebble write cache, the handle of
// the current key (owner goroutine only) keeps values decoded in the cache
// (heap not nil; see HeapSerializer): Get, Contains, Put and Remove go
// through getObject and putObject with the Pebble key built in scratch.
// Bound handles and every other path use the serialized form, which the
// cache produces from a decoded value when asked. With another value
// serializer, no TTL and the write cache (cached true), Get, Contains,
// Put and Remove of the current key read and write the cache's serialized
// entry with the Pebble key and the written value built in the handle's
// buffers and the entry a read found handed to the write of the same user
// key after it, as valueState does.
type mapState[K, V any] struct {
	c    *stateCore
	kser Serializer[K]
	vser Serializer[V]
	key  *keyRef

	heap    HeapSerializer[V]
	ps      *pebbleStore
	codec   *objCodec
	scratch []byte
	blob    []byte    // Put's serialized value when cached (the cache copies it)
	known   [2]V      // the kept values getObj returned and Put stored last, for HeapSerializer.Copy
	hint    cacheHint // the cache entry getObject (or, cached, a read) found last
	cached  bool      // the serialized path through the write cache (see above)
}

func newMapState[K, V any](c *stateCore, kser Serializer[K], vser Serializer[V]) *mapState[K, V] {
	s := &mapState[K, V]{c: c, kser: kser, vser: vser}
	ps, pebble := c.st.(*pebbleStore)
	if !pebble || ps.cache == nil || c.ttl != nil {
		return s
	}
	heap, ok := vser.(HeapSerializer[V])
	if !ok {
		s.ps, s.cached = ps, true
		return s
	}
	s.heap, s.ps, s.codec = heap, ps, heapCodec(heap)
	return s
}

// bind returns a handle acting on k; see valueState.bind. It uses the
// serialized form only (it may run on other goroutines).
func (s *mapState[K, V]) bind(k keyRef) *mapState[K, V] {
	return &mapState[K, V]{c: s.c, kser: s.kser, vser: s.vser, key: &k}
}

// objKey returns the Pebble key of user key uk under the current key, in
// s.scratch (valid until the next call).
func (s *mapState[K, V]) objKey(uk K) ([]byte, error) {
	k, err := s.c.stateKey(nil)
	if err != nil {
		return nil, err
	}
	b, err := s.kser.Append(appendStateKey(s.scratch[:0], k), uk)
	if err != nil {
		return nil, s.c.wrapErr("map key", err)
	}
	s.scratch = b
	return b, nil
}

// getObj is Get on the decoded path.
func (s *mapState[K, V]) getObj(uk K) (V, bool, error) {
	var zero V
	key, err := s.objKey(uk)
	if err != nil {
		return zero, false, err
	}
	obj, ok, err := s.ps.getObject(s.c.id, key, s.codec, &s.hint)
	if err != nil {
		return zero, false, s.c.wrapErr("get", err)
	}
	if !ok {
		return zero, false, nil
	}
	s.known[0] = *obj.(*V)
	return s.heap.View(s.known[0]), true, nil
}

// cachedGet is Get's read of the serialized path (cached): the payload of
// user key uk under the current key, a copy, with s.hint set to the
// cache's entry for a write of the same user key after it.
func (s *mapState[K, V]) cachedGet(uk K) ([]byte, bool, error) {
	key, err := s.objKey(uk)
	if err != nil {
		return nil, false, err
	}
	return s.ps.cachedGetHint(s.c.id, key, &s.hint)
}

// userKey returns the state address and the serialized user key.
func (s *mapState[K, V]) userKey(uk K) (stateKey, []byte, error) {
	k, err := s.c.stateKey(s.key)
	if err != nil {
		return k, nil, err
	}
	b, err := s.kser.Append(nil, uk)
	if err != nil {
		return k, nil, s.c.wrapErr("map key", err)
	}
	return k, b, nil
}

func (s *mapState[K, V]) Get(uk K) (V, bool, error) {
	if s.heap != nil && s.key == nil {
		return s.getObj(uk)
	}
	var zero V
	if s.cached && s.key == nil {
		payload, ok, err := s.cachedGet(uk)
		if err != nil || !ok {
			return zero, false, err
		}
		v, err := s.vser.Decode(payload)
		if err != nil {
			return zero, false, s.c.wrapErr("get", err)
		}
		return v, true, nil
	}
	k, ukb, err := s.userKey(uk)
	if err != nil {
		return zero, false, err
	}
	payload, ok, err := s.c.readEntry(k, ukb)
	if err != nil || !ok {
		return zero, false, err
	}
	v, err := s.vser.Decode(payload)
	if err != nil {
		return zero, false, s.c.wrapErr("get", err)
	}
	return v, true, nil
}

func (s *mapState[K, V]) Contains(uk K) (bool, error) {
	if s.heap != nil && s.key == nil {
		key, err := s.objKey(uk)
		if err != nil {
			return false, err
		}
		_, ok, err := s.ps.getObject(s.c.id, key, s.codec, &s.hint)
		if err != nil {
			return false, s.c.wrapErr("get", err)
		}
		return ok, nil
	}
	if s.cached && s.key == nil {
		_, ok, err := s.cachedGet(uk)
		return ok, err
	}
	k, ukb, err := s.userKey(uk)
	if err != nil {
		return false, err
	}
	_, ok, err := s.c.readEntry(k, ukb)
	return ok, err
}

func (s *mapState[K, V]) Put(uk K, v V) error {
	if s.heap != nil && s.key == nil {
		key, err := s.objKey(uk)
		if err != nil {
			return err
		}
		kept, err := s.heap.Copy(v, s.known[:])
		if err != nil {
			return s.c.wrapErr("put", err)
		}
		s.known[1] = kept
		return s.ps.putObject(s.c.id, key, &s.known[1], s.codec, s.hint)
	}
	if s.cached && s.key == nil {
		key, err := s.objKey(uk)
		if err != nil {
			return err
		}
		blob, err := s.vser.Append(s.blob[:0], v)
		if err != nil {
			return s.c.wrapErr("put", err)
		}
		s.blob = blob
		return s.ps.cachedWriteHint(s.c.id, key, blob, true, s.hint)
	}
	k, ukb, err := s.userKey(uk)
	if err != nil {
		return err
	}
	blob, err := s.vser.Append(s.c.stamp(nil, s.c.now()), v)
	if err != nil {
		return s.c.wrapErr("put", err)
	}
	return s.c.st.setEntry(k, ukb, blob)
}

// PutCold implements ColdPutter.
func (s *mapState[K, V]) PutCold(uk K, v V) error {
	ps, ok := s.c.st.(*pebbleStore)
	if !ok || s.heap != nil {
		return s.Put(uk, v)
	}
	k, ukb, err := s.userKey(uk)
	if err != nil {
		return err
	}
	blob, err := s.vser.Append(s.c.stamp(nil, s.c.now()), v)
	if err != nil {
		return s.c.wrapErr("put", err)
	}
	return ps.setColdEntry(k, ukb, blob)
}

// MapAppender is implemented by every MapState whose values are lists
// encoded by a ConcatSerializer: AppendValue adds the elements of v after
// those stored under user key uk without reading them (on Pebble a Merge
// of v's bytes, as ListState.Add; on hashmap the bytes appended in place),
// so a list grown one element at a time costs O(1) state work per element
// instead of a read and a rewrite of the whole list (Flink's
// MapState<K, List<V>> has no such write; RocksDB's merge operator is what
// its ListState.add uses). A later Get returns the concatenation. It
// refuses (an error) a state with TTL, whose per-value timestamp a
// concatenation would break, and a value serializer that is not a
// ConcatSerializer.
type MapAppender[K, V any] interface {
	AppendValue(uk K, v V) error
}

// MapAbsentHinter is implemented by every MapState: HintAbsent tells the
// state that user key uk of the current key holds no value, which the
// caller knows from its own bookkeeping (the window join: a window's
// timer that was not registered yet means neither side has rows in that
// window), so that on Pebble with the write cache the entry's later reads
// and appends (MapAppender) are served from the cache instead of a Pebble
// Get and Merge (Flink has no such hint: RocksDB's merge operator never
// reads, and its reads always reach RocksDB). It changes no value: on
// hashmap, without the write cache, for a bound handle or a state with
// TTL it does nothing. The caller must be right: hinting a user key that
// holds a value makes reads miss it and appends overwrite it until the
// cache evicts the hint.
type MapAbsentHinter[K any] interface {
	HintAbsent(uk K) error
}

// HintAbsent implements MapAbsentHinter.
func (s *mapState[K, V]) HintAbsent(uk K) error {
	ps, ok := s.c.st.(*pebbleStore)
	if !ok || ps.cache == nil || s.key != nil || s.c.ttl != nil {
		return nil
	}
	k, ukb, err := s.userKey(uk)
	if err != nil {
		return err
	}
	return ps.hintAbsentEntry(k, ukb)
}

// ConcatSerializer marks a Serializer of lists whose encoding of the
// concatenation of two lists is the concatenation of their encodings
// (each element framed on its own, no count or header): what MapAppender
// needs.
type ConcatSerializer interface {
	Concatenates()
}

// AppendValue implements MapAppender.
func (s *mapState[K, V]) AppendValue(uk K, v V) error {
	if s.c.ttl != nil {
		return s.c.wrapErr("append", fmt.Errorf("AppendValue on a state with TTL"))
	}
	if _, ok := s.vser.(ConcatSerializer); !ok {
		return s.c.wrapErr("append", fmt.Errorf("AppendValue with serializer %T, not a ConcatSerializer", s.vser))
	}
	k, ukb, err := s.userKey(uk)
	if err != nil {
		return err
	}
	blob, err := s.vser.Append(nil, v)
	if err != nil {
		return s.c.wrapErr("append", err)
	}
	return s.c.st.mergeEntry(k, ukb, blob)
}

func (s *mapState[K, V]) PutAll(entries iter.Seq2[K, V]) error {
	if entries == nil {
		return nil
	}
	for uk, v := range entries {
		if err := s.Put(uk, v); err != nil {
			return err
		}
	}
	return nil
}

func (s *mapState[K, V]) Remove(uk K) error {
	if s.heap != nil && s.key == nil {
		key, err := s.objKey(uk)
		if err != nil {
			return err
		}
		return s.ps.removeObject(s.c.id, key, s.hint)
	}
	if s.cached && s.key == nil {
		key, err := s.objKey(uk)
		if err != nil {
			return err
		}
		return s.ps.cachedWriteHint(s.c.id, key, nil, false, s.hint)
	}
	k, ukb, err := s.userKey(uk)
	if err != nil {
		return err
	}
	return s.c.st.delEntry(k, ukb)
}

func (s *mapState[K, V]) Clear() error {
	k, err := s.c.stateKey(s.key)
	if err != nil {
		return err
	}
	return s.c.st.clearEntries(k)
}

func (s *mapState[K, V]) IsEmpty() (bool, error) {
	k, err := s.c.stateKey(s.key)
	if err != nil {
		return false, err
	}
	empty := true
	err = s.c.scanMap(k, func(_, _ []byte) (bool, error) {
		empty = false
		return false, nil
	})
	return empty, err
}

func (s *mapState[K, V]) Entries() iter.Seq2[MapEntry[K, V], error] {
	return func(yield func(MapEntry[K, V], error) bool) {
		s.iterate(func(uk, payload []byte) (bool, error) {
			key, err := s.kser.Decode(uk)
			if err != nil {
				return false, s.c.wrapErr("entries", err)
			}
			v, err := s.vser.Decode(payload)
			if err != nil {
				return false, s.c.wrapErr("entries", err)
			}
			return yield(MapEntry[K, V]{Key: key, Value: v}, nil), nil
		}, func(err error) { yield(MapEntry[K, V]{}, err) })
	}
}

func (s *mapState[K, V]) Keys() iter.Seq2[K, error] {
	return func(yield func(K, error) bool) {
		var zero K
		s.iterate(func(uk, _ []byte) (bool, error) {
			key, err := s.kser.Decode(uk)
			if err != nil {
				return false, s.c.wrapErr("keys", err)
			}
			return yield(key, nil), nil
		}, func(err error) { yield(zero, err) })
	}
}

func (s *mapState[K, V]) Values() iter.Seq2[V, error] {
	return func(yield func(V, error) bool) {
		var zero V
		s.iterate(func(_, payload []byte) (bool, error) {
			v, err := s.vser.Decode(payload)
			if err != nil {
				return false, s.c.wrapErr("values", err)
			}
			return yield(v, nil), nil
		}, func(err error) { yield(zero, err) })
	}
}

// MapRange iterates the entries of s's current key whose user keys lie
// between from and to inclusive, in the order of their serialized bytes,
// which for an order-preserving key serializer (Int64Serializer, string
// keys) is the keys' order, on both backends; bounds compare as serialized
// bytes, so from after to yields nothing. Only the entries in range are
// decoded: on Pebble the read seeks to from (cost one seek plus the
// entries in range), on hashmap every user key of the current key is
// compared with the bounds (no value is read or decoded). It is the range
// read Flink's IntervalJoinOperator would want from MapState<Long, List>
// (which iterates every entry instead). Writes and TTL as for Entries. An
// error, including a MapState not made by GetMapState, is yielded as the
// last pair (zero, err).
func MapRange[K, V any](s MapState[K, V], from, to K) iter.Seq2[MapEntry[K, V], error] {
	return func(yield func(MapEntry[K, V], error) bool) {
		ms, ok := s.(*mapState[K, V])
		if !ok {
			yield(MapEntry[K, V]{}, fmt.Errorf("state: MapRange over %T: not a backend map state", s))
			return
		}
		fail := func(err error) { yield(MapEntry[K, V]{}, err) }
		k, err := ms.c.stateKey(ms.key)
		if err != nil {
			fail(err)
			return
		}
		lo, err := ms.kser.Append(nil, from)
		if err != nil {
			fail(ms.c.wrapErr("map key", err))
			return
		}
		hi, err := ms.kser.Append(nil, to)
		if err != nil {
			fail(ms.c.wrapErr("map key", err))
			return
		}
		err = ms.c.scanMapWith(k, func(fn func(uk, v []byte) (bool, error)) error {
			return ms.c.st.scanRange(k, lo, hi, fn)
		}, func(uk, payload []byte) (bool, error) {
			key, err := ms.kser.Decode(uk)
			if err != nil {
				return false, ms.c.wrapErr("range", err)
			}
			v, err := ms.vser.Decode(payload)
			if err != nil {
				return false, ms.c.wrapErr("range", err)
			}
			return yield(MapEntry[K, V]{Key: key, Value: v}, nil), nil
		})
		if err != nil {
			fail(err)
		}
	}
}

// iterate runs fn over the visible entries of the current key and passes a
// failure to fail; fn returning false (the consumer stopped) ends it quietly.
func (s *mapState[K, V]) iterate(fn func(uk, payload []byte) (bool, error), fail func(error)) {
	k, err := s.c.stateKey(s.key)
	if err == nil {
		err = s.c.scanMap(k, fn)
	}
	if err != nil {
		fail(err)
	}
}

// readEntry reads one map entry and applies TTL as readValue does.
func (c *stateCore) readEntry(k stateKey, uk []byte) ([]byte, bool, error) {
	blob, found, err := c.st.getEntry(k, uk)
	if err != nil || !found {
		return nil, false, err
	}
	payload, visible, act, err := c.check(blob, c.now())
	if err != nil {
		return nil, false, c.wrapErr("read", err)
	}
	switch act {
	case ttlRemove:
		err = c.st.delEntry(k, uk)
	case ttlRefresh:
		err = c.st.setEntry(k, uk, blob)
	}
	if err != nil || !visible {
		return nil, false, err
	}
	return payload, true, nil
}

// scanMap calls fn with the serialized key and payload of each visible entry
// of a map under k, applying TTL to each as readEntry does, until fn
// returns false or an error.
func (c *stateCore) scanMap(k stateKey, fn func(uk, payload []byte) (bool, error)) error {
	return c.scanMapWith(k, func(fn func(uk, v []byte) (bool, error)) error { return c.st.scanEntries(k, fn) }, fn)
}

// scanMapWith is scanMap over the entries scan visits (all of the key's,
// or a range of them).
func (c *stateCore) scanMapWith(k stateKey, scan func(fn func(uk, v []byte) (bool, error)) error, fn func(uk, payload []byte) (bool, error)) error {
	if c.ttl == nil {
		return scan(fn)
	}
	now := c.now()
	return scan(func(uk, v []byte) (bool, error) {
		if c.ttl.updateOnRead {
			v = append([]byte(nil), v...) // check restamps in place; v belongs to the store
		}
		payload, visible, act, err := c.check(v, now)
		if err != nil {
			return false, c.wrapErr("read", err)
		}
		switch act {
		case ttlRemove:
			err = c.st.delEntry(k, uk)
		case ttlRefresh:
			err = c.st.setEntry(k, uk, v)
		}
		if err != nil || !visible {
			return err == nil, err
		}
		return fn(uk, payload)
	})
}
