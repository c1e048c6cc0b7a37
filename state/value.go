package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// ValueState holds one value per key, as Flink's ValueState.
//
// Value returns the current key's value and true, or the zero value and
// false when there is none (never written, cleared, or expired under
// NeverReturnExpired TTL). Update stores v for the current key; Clear
// removes it. Update of a nil v is Clear, as Flink's update(null) is
// clear(): a nil pointer, slice (a nil json.RawMessage or []byte among
// them), map, channel or function, or a nil interface value, when T is
// such a type. A non-nil empty slice or map, a JSON null
// (json.RawMessage("null")) and an interface holding a typed nil pointer
// are values like any other and stored. Value then returns false, as
// after Clear. All three fail with ErrNoCurrentKey before the first
// SetCurrentKey, with a *KeyGroupError for a key the backend does not own,
// with ErrClosed after Close, and with the serializer's or store's error.
type ValueState[T any] interface {
	Value() (T, bool, error)
	Update(v T) error
	Clear() error
}

// GetValueState returns the ValueState d describes, creating it on first
// use. Getting the same descriptor again returns the same handle. It fails
// with ErrStateConflict when the name was obtained with another state type,
// value type, serializer or TTL config in this session, and with a
// *StateMigrationError (errors.Is(err, ErrStateMigration)) when the stored
// state of that name is incompatible with d.
func GetValueState[T any](b KeyedStateBackend, d ValueStateDescriptor[T]) (ValueState[T], error) {
	spec := descriptorSpec{name: d.Name, kind: kindValue, ttl: d.TTL, nilSer: d.Serializer == nil}
	if d.Serializer != nil {
		spec.serializer = d.Serializer.Name()
	}
	h, err := register(b, spec, fmt.Sprintf("%T", d.Serializer), func(c *stateCore) any {
		return newValueState(c, d.Serializer)
	})
	if err != nil {
		return nil, err
	}
	return typedHandle[*valueState[T]](h, d.Name)
}

// register is backend.register behind a nil check of the interface.
func register(b KeyedStateBackend, spec descriptorSpec, serType string, build func(c *stateCore) any) (any, error) {
	if b == nil {
		return nil, errors.New("state: nil backend")
	}
	return b.core().register(spec, serType, build)
}

// typedHandle asserts a registered handle to the type the caller asks for;
// a mismatch means the same name was used with another value type.
func typedHandle[H any](h any, name string) (H, error) {
	t, ok := h.(H)
	if !ok {
		var zero H
		return zero, fmt.Errorf("state: state %q already obtained as %T, now requested as %T: %w", name, h, zero, ErrStateConflict)
	}
	return t, nil
}

// valueState implements ValueState. key is nil for a handle acting on the
// backend's current key, or the explicit key of a handle made by bind.
//
// With a HeapSerializer, no TTL and the Pebble write cache, the handle of
// the current key keeps its values decoded in the cache as mapState does
// (heap not nil): Value, Update and Clear go through getObject and
// putObject; bound handles use the serialized form. With another
// serializer, no TTL and the write cache, the handle of the current key
// reads and writes the cache's serialized value with the Pebble key kept
// in scratch across the calls of one current key and the entry a Value
// found handed to the Update after it (cached true): one cache lookup
// and no key or value allocation per read-modify-write.
type valueState[T any] struct {
	c   *stateCore
	ser Serializer[T]
	key *keyRef

	heap    HeapSerializer[T]
	ps      *pebbleStore
	codec   *objCodec
	scratch []byte
	blob    []byte    // Update's serialized value when cached (the cache copies it)
	seq     uint64    // the backend's keySeq scratch holds the current key's Pebble key for; 0: none
	known   [2]T      // the kept values Value returned and Update stored last, for HeapSerializer.Copy
	hint    cacheHint // the cache entry getObject (or, cached, Value) found last
	nilable bool      // T's zero value is nil: Update checks for nil
	cached  bool      // the serialized path through the write cache (see above)
}

func newValueState[T any](c *stateCore, ser Serializer[T]) *valueState[T] {
	s := &valueState[T]{c: c, ser: ser, nilable: nilableType[T]()}
	ps, pebble := c.st.(*pebbleStore)
	if !pebble || ps.cache == nil || c.ttl != nil {
		return s
	}
	heap, ok := ser.(HeapSerializer[T])
	if !ok {
		s.ps, s.cached = ps, true
		return s
	}
	s.heap, s.ps, s.codec = heap, ps, heapCodec(heap)
	return s
}

// heapCodec is the write cache's objCodec for the values of heap: every
// obj is a *T (a pointer, so passing one as an any allocates nothing).
func heapCodec[T any](heap HeapSerializer[T]) *objCodec {
	c := &objCodec{
		encode: func(dst []byte, obj any) ([]byte, error) { return heap.AppendKept(dst, *obj.(*T)) },
		decode: func(b []byte) (any, error) {
			v, err := heap.Decode(b)
			if err != nil {
				return nil, err
			}
			return &v, nil
		},
		size:  func(obj any) int { return heap.Size(*obj.(*T)) },
		store: func(dst, src any) { *dst.(*T) = *src.(*T) },
		box: func(src any) any {
			p := new(T)
			*p = *src.(*T)
			return p
		},
	}
	if r, ok := heap.(HeapResizer[T]); ok {
		c.resize = func(old any, oldSize int, obj any) int { return r.Resize(*old.(*T), oldSize, *obj.(*T)) }
	}
	return c
}

// objKey returns the Pebble key of the current key's value, in s.scratch
// (valid until the next call).
// The Update after a Value of the same key reuses it.
func (s *valueState[T]) objKey() ([]byte, error) {
	if b := s.c.b; s.seq != 0 && s.seq == b.keySeq && !b.closed {
		return s.scratch, nil
	}
	k, err := s.c.stateKey(nil)
	if err != nil {
		return nil, err
	}
	s.scratch = appendStateKey(s.scratch[:0], k)
	s.seq = s.c.b.keySeq
	return s.scratch, nil
}

// bind returns a handle acting on k rather than on the current key. With a
// backend whose ConcurrentReads is true, Value on the bound handle may run
// on another goroutine (async state); writes stay on the owner's goroutine.
func (s *valueState[T]) bind(k keyRef) *valueState[T] {
	return &valueState[T]{c: s.c, ser: s.ser, key: &k}
}

func (s *valueState[T]) Value() (T, bool, error) {
	if s.heap != nil && s.key == nil {
		var zero T
		key, err := s.objKey()
		if err != nil {
			return zero, false, err
		}
		obj, ok, err := s.ps.getObject(s.c.id, key, s.codec, &s.hint)
		if err != nil {
			return zero, false, s.c.wrapErr("value", err)
		}
		if !ok {
			return zero, false, nil
		}
		s.known[0] = *obj.(*T)
		return s.heap.View(s.known[0]), true, nil
	}
	if s.cached && s.key == nil {
		var zero T
		key, err := s.objKey()
		if err != nil {
			return zero, false, err
		}
		blob, ok, err := s.ps.cachedGetHint(s.c.id, key, &s.hint)
		if err != nil || !ok {
			return zero, false, err
		}
		v, err := s.ser.Decode(blob)
		if err != nil {
			return zero, false, s.c.wrapErr("value", err)
		}
		return v, true, nil
	}
	return readDecoded(s.c, s.key, s.ser, "value")
}

func (s *valueState[T]) Update(v T) error {
	if s.nilable && isNil(v) {
		return s.Clear() // Flink: update(null) is clear()
	}
	if s.heap != nil && s.key == nil {
		key, err := s.objKey()
		if err != nil {
			return err
		}
		kept, err := s.heap.Copy(v, s.known[:])
		if err != nil {
			return s.c.wrapErr("update", err)
		}
		s.known[1] = kept
		return s.ps.putObject(s.c.id, key, &s.known[1], s.codec, s.hint)
	}
	if s.cached && s.key == nil {
		key, err := s.objKey()
		if err != nil {
			return err
		}
		blob, err := s.ser.Append(s.blob[:0], v)
		if err != nil {
			return s.c.wrapErr("update", err)
		}
		s.blob = blob
		return s.ps.cachedWriteHint(s.c.id, key, blob, true, s.hint)
	}
	k, err := s.c.stateKey(s.key)
	if err != nil {
		return err
	}
	blob, err := s.ser.Append(s.c.stamp(nil, s.c.now()), v)
	if err != nil {
		return s.c.wrapErr("update", err)
	}
	return s.c.st.set(k, blob)
}

func (s *valueState[T]) Clear() error {
	if s.heap != nil && s.key == nil {
		key, err := s.objKey()
		if err != nil {
			return err
		}
		return s.ps.removeObject(s.c.id, key, s.hint)
	}
	if s.cached && s.key == nil {
		key, err := s.objKey()
		if err != nil {
			return err
		}
		return s.ps.cachedWriteHint(s.c.id, key, nil, false, s.hint)
	}
	k, err := s.c.stateKey(s.key)
	if err != nil {
		return err
	}
	return s.c.st.del(k)
}

// readValue reads the blob of a value, reducing or aggregating state and
// applies TTL: it removes an expired blob (returning it only under
// ReturnExpiredIfNotCleanedUp) and, under OnReadAndWrite, rewrites a
// returned one with a fresh timestamp. The payload is the serialized value.
// readDecoded reads the blob of the bound key (or the current key) and
// decodes it with ser; found is false when there is none (or it expired).
// op names the operation in a decode error. Value, Reducing and
// Aggregating state share it.
func readDecoded[T any](c *stateCore, key *keyRef, ser Serializer[T], op string) (v T, found bool, err error) {
	k, err := c.stateKey(key)
	if err != nil {
		return v, false, err
	}
	payload, ok, err := c.readValue(k)
	if err != nil || !ok {
		return v, false, err
	}
	if v, err = ser.Decode(payload); err != nil {
		var zero T
		return zero, false, c.wrapErr(op, err)
	}
	return v, true, nil
}

func (c *stateCore) readValue(k stateKey) ([]byte, bool, error) {
	blob, found, err := c.st.get(k)
	if err != nil || !found {
		return nil, false, err
	}
	return c.visibleValue(k, blob)
}

// visibleValue is readValue's TTL step for the blob read under k.
func (c *stateCore) visibleValue(k stateKey, blob []byte) ([]byte, bool, error) {
	payload, visible, act, err := c.check(blob, c.now())
	if err != nil {
		return nil, false, c.wrapErr("read", err)
	}
	switch act {
	case ttlRemove:
		err = c.st.del(k)
	case ttlRefresh:
		err = c.st.set(k, blob)
	}
	if err != nil || !visible {
		return nil, false, err
	}
	return payload, true, nil
}

// readUnexpired reads the payload of a value-like blob for an update
// (reducing and aggregating Add): an expired blob counts as absent whatever
// the visibility, as in Flink's TtlReduceFunction. It writes nothing.
func (c *stateCore) readUnexpired(k stateKey, now int64) ([]byte, bool, error) {
	blob, found, err := c.st.get(k)
	if err != nil || !found {
		return nil, false, err
	}
	if c.ttl == nil {
		return blob, true, nil
	}
	ts, payload, err := splitTimestamp(blob)
	if err != nil {
		return nil, false, c.wrapErr("read", err)
	}
	if c.ttl.expired(ts, now) {
		return nil, false, nil
	}
	return payload, true, nil
}

// nilableType reports whether T's zero value is nil: a pointer, slice, map,
// channel, function or interface type.
func nilableType[T any]() bool {
	switch reflect.TypeFor[T]().Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return true
	}
	return false
}

// isNil reports whether v, of a type nilableType accepts, is nil; an
// interface value is nil only when it holds nothing (not a typed nil).
func isNil[T any](v T) bool {
	switch p := any(&v).(type) { // the common types without reflect
	case *[]byte:
		return *p == nil
	case *json.RawMessage:
		return *p == nil
	case *any:
		return *p == nil
	}
	return reflect.ValueOf(&v).Elem().IsNil()
}
