package state

import "fmt"

// ReducingState folds every added value into one with a ReduceFunc, as
// Flink's ReducingState.
//
// Add combines v with the current key's value (Reduce(stored, v)), or stores
// v when there is none; with TTL an expired stored value counts as none and
// the result gets a fresh timestamp. Get returns the folded value and true,
// or false when there is none. Clear removes it. Errors are those of
// ValueState, plus the reduce function's.
type ReducingState[T any] interface {
	Add(v T) error
	Get() (T, bool, error)
	Clear() error
}

// GetReducingState returns the ReducingState d describes, creating it on
// first use; errors as GetValueState.
func GetReducingState[T any](b KeyedStateBackend, d ReducingStateDescriptor[T]) (ReducingState[T], error) {
	spec := descriptorSpec{name: d.Name, kind: kindReducing, ttl: d.TTL, nilSer: d.Serializer == nil, missingFunc: d.Reduce == nil}
	if d.Serializer != nil {
		spec.serializer = d.Serializer.Name()
	}
	h, err := register(b, spec, fmt.Sprintf("%T", d.Serializer), func(c *stateCore) any {
		return &reducingState[T]{c: c, ser: d.Serializer, reduce: d.Reduce}
	})
	if err != nil {
		return nil, err
	}
	return typedHandle[*reducingState[T]](h, d.Name)
}

// reducingState implements ReducingState; key as in valueState.
type reducingState[T any] struct {
	c      *stateCore
	ser    Serializer[T]
	reduce ReduceFunc[T]
	key    *keyRef
}

// bind returns a handle acting on k; see valueState.bind.
func (s *reducingState[T]) bind(k keyRef) *reducingState[T] {
	return &reducingState[T]{c: s.c, ser: s.ser, reduce: s.reduce, key: &k}
}

func (s *reducingState[T]) Add(v T) error {
	k, err := s.c.stateKey(s.key)
	if err != nil {
		return err
	}
	now := s.c.now()
	payload, ok, err := s.c.readUnexpired(k, now)
	if err != nil {
		return err
	}
	if ok {
		cur, err := s.ser.Decode(payload)
		if err != nil {
			return s.c.wrapErr("add", err)
		}
		if v, err = s.reduce(cur, v); err != nil {
			return s.c.wrapErr("reduce", err)
		}
	}
	blob, err := s.ser.Append(s.c.stamp(nil, now), v)
	if err != nil {
		return s.c.wrapErr("add", err)
	}
	return s.c.st.set(k, blob)
}

func (s *reducingState[T]) Get() (T, bool, error) {
	return readDecoded(s.c, s.key, s.ser, "get")
}

func (s *reducingState[T]) Clear() error {
	k, err := s.c.stateKey(s.key)
	if err != nil {
		return err
	}
	return s.c.st.del(k)
}
