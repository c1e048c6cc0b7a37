package state

import (
	"encoding/binary"
	"fmt"
	"iter"
)

// ListState holds a list of elements per key, as Flink's ListState.
//
// Get returns an iterator over the current key's elements, oldest first;
// it yields nothing for an empty list. The read happens when the iteration
// starts: the key and the list are taken then, and with TTL expired
// elements are dropped (yielded once more under ReturnExpiredIfNotCleanedUp)
// and the list is rewritten without them, with fresh timestamps under
// OnReadAndWrite. An error is yielded as the last pair (zero, err).
//
// Add appends v; AddAll appends vs in order (nothing for an empty vs). On
// Pebble both are a merge that never reads the list. Update replaces the
// list with vs (an empty vs clears it). Clear removes the list. With TTL
// every element carries its own timestamp and expires on its own. Errors as
// ValueState.
type ListState[T any] interface {
	Get() iter.Seq2[T, error]
	Add(v T) error
	AddAll(vs []T) error
	Update(vs []T) error
	Clear() error
}

// GetListState returns the ListState d describes, creating it on first use;
// errors as GetValueState.
func GetListState[T any](b KeyedStateBackend, d ListStateDescriptor[T]) (ListState[T], error) {
	spec := descriptorSpec{name: d.Name, kind: kindList, ttl: d.TTL, nilSer: d.Serializer == nil}
	if d.Serializer != nil {
		spec.serializer = d.Serializer.Name()
	}
	h, err := register(b, spec, fmt.Sprintf("%T", d.Serializer), func(c *stateCore) any {
		return &listState[T]{c: c, ser: d.Serializer}
	})
	if err != nil {
		return nil, err
	}
	return typedHandle[*listState[T]](h, d.Name)
}

// listState implements ListState; key as in valueState.
type listState[T any] struct {
	c   *stateCore
	ser Serializer[T]
	key *keyRef
}

// bind returns a handle acting on k; see valueState.bind.
func (s *listState[T]) bind(k keyRef) *listState[T] {
	return &listState[T]{c: s.c, ser: s.ser, key: &k}
}

func (s *listState[T]) Get() iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		k, err := s.c.stateKey(s.key)
		if err != nil {
			yield(zero, err)
			return
		}
		payloads, err := s.c.readList(k)
		if err != nil {
			yield(zero, err)
			return
		}
		for _, p := range payloads {
			v, err := s.ser.Decode(p)
			if err != nil {
				yield(zero, s.c.wrapErr("get", err))
				return
			}
			if !yield(v, nil) {
				return
			}
		}
	}
}

func (s *listState[T]) Add(v T) error {
	k, err := s.c.stateKey(s.key)
	if err != nil {
		return err
	}
	blob, err := s.appendElements(nil, []T{v})
	if err != nil {
		return err
	}
	return s.c.st.merge(k, blob)
}

func (s *listState[T]) AddAll(vs []T) error {
	k, err := s.c.stateKey(s.key)
	if err != nil || len(vs) == 0 {
		return err
	}
	blob, err := s.appendElements(nil, vs)
	if err != nil {
		return err
	}
	return s.c.st.merge(k, blob)
}

func (s *listState[T]) Update(vs []T) error {
	k, err := s.c.stateKey(s.key)
	if err != nil {
		return err
	}
	if len(vs) == 0 {
		return s.c.st.del(k)
	}
	blob, err := s.appendElements(nil, vs)
	if err != nil {
		return err
	}
	return s.c.st.set(k, blob)
}

func (s *listState[T]) Clear() error {
	k, err := s.c.stateKey(s.key)
	if err != nil {
		return err
	}
	return s.c.st.del(k)
}

// appendElements appends the stored form of vs to dst: per element a
// uvarint length, then (with TTL) the 8-byte timestamp and the serialized
// value.
func (s *listState[T]) appendElements(dst []byte, vs []T) ([]byte, error) {
	now := s.c.now()
	var scratch []byte
	for _, v := range vs {
		var err error
		scratch, err = s.ser.Append(s.c.stamp(scratch[:0], now), v)
		if err != nil {
			return nil, s.c.wrapErr("add", err)
		}
		dst = binary.AppendUvarint(dst, uint64(len(scratch)))
		dst = append(dst, scratch...)
	}
	return dst, nil
}

// forEachElement calls fn with each element of a stored list blob (without
// its length prefix), stopping at fn's first error.
func forEachElement(blob []byte, fn func(elem []byte) error) error {
	for len(blob) > 0 {
		n, w := binary.Uvarint(blob)
		if w <= 0 || uint64(len(blob)-w) < n {
			return fmt.Errorf("state: list element length prefix at %d bytes before the end: %w", len(blob), ErrCorrupt)
		}
		if err := fn(blob[w : w+int(n)]); err != nil {
			return err
		}
		blob = blob[w+int(n):]
	}
	return nil
}

// readList reads the current list and applies TTL; it returns the
// serialized payloads to yield, which alias the read blob.
func (c *stateCore) readList(k stateKey) ([][]byte, error) {
	blob, found, err := c.st.get(k)
	if err != nil || !found {
		return nil, err
	}
	var out [][]byte
	if c.ttl == nil {
		err := forEachElement(blob, func(e []byte) error { out = append(out, e); return nil })
		if err != nil {
			return nil, c.wrapErr("get", err)
		}
		return out, nil
	}
	now := c.now()
	var kept []byte
	changed := false
	err = forEachElement(blob, func(e []byte) error {
		payload, visible, act, err := c.check(e, now)
		if err != nil {
			return err
		}
		if visible {
			out = append(out, payload)
		}
		switch act {
		case ttlRemove:
			changed = true
			return nil
		case ttlRefresh:
			changed = true
		}
		kept = binary.AppendUvarint(kept, uint64(len(e)))
		kept = append(kept, e...)
		return nil
	})
	if err != nil {
		return nil, c.wrapErr("get", err)
	}
	if changed {
		if len(kept) == 0 {
			err = c.st.del(k)
		} else {
			err = c.st.set(k, kept)
		}
	}
	return out, err
}

// filterList returns a list blob without its elements expired at now, and
// whether any was dropped.
func (c *stateCore) filterList(blob []byte, now int64) ([]byte, bool, error) {
	var kept []byte
	changed := false
	err := forEachElement(blob, func(e []byte) error {
		ts, _, err := splitTimestamp(e)
		if err != nil {
			return err
		}
		if c.ttl.expired(ts, now) {
			changed = true
			return nil
		}
		kept = binary.AppendUvarint(kept, uint64(len(e)))
		kept = append(kept, e...)
		return nil
	})
	return kept, changed, err
}
