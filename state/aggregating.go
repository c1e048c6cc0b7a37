package state

import "fmt"

// AggregatingState folds added inputs into an accumulator with an
// AggregateFunction and returns its result, as Flink's AggregatingState.
//
// Add folds v into the current key's accumulator (a fresh
// CreateAccumulator when there is none; with TTL an expired accumulator
// counts as none and the result gets a fresh timestamp). Get returns
// GetResult of the accumulator and true, or false when there is none.
// Clear removes the accumulator. Errors are those of ValueState.
type AggregatingState[IN, OUT any] interface {
	Add(v IN) error
	Get() (OUT, bool, error)
	Clear() error
}

// GetAggregatingState returns the AggregatingState d describes, creating it
// on first use; errors as GetValueState. The accumulator type ACC is part of
// the state's identity; the returned handle hides it.
func GetAggregatingState[IN, ACC, OUT any](b KeyedStateBackend, d AggregatingStateDescriptor[IN, ACC, OUT]) (AggregatingState[IN, OUT], error) {
	spec := descriptorSpec{name: d.Name, kind: kindAggregating, ttl: d.TTL, nilSer: d.AccSerializer == nil, missingFunc: d.Aggregate == nil}
	if d.AccSerializer != nil {
		spec.serializer = d.AccSerializer.Name()
	}
	h, err := register(b, spec, fmt.Sprintf("%T", d.AccSerializer), func(c *stateCore) any {
		return &aggregatingState[IN, ACC, OUT]{c: c, ser: d.AccSerializer, agg: d.Aggregate}
	})
	if err != nil {
		return nil, err
	}
	return typedHandle[*aggregatingState[IN, ACC, OUT]](h, d.Name)
}

// aggregatingState implements AggregatingState; key as in valueState.
type aggregatingState[IN, ACC, OUT any] struct {
	c   *stateCore
	ser Serializer[ACC]
	agg AggregateFunction[IN, ACC, OUT]
	key *keyRef
}

// bind returns a handle acting on k; see valueState.bind.
func (s *aggregatingState[IN, ACC, OUT]) bind(k keyRef) *aggregatingState[IN, ACC, OUT] {
	return &aggregatingState[IN, ACC, OUT]{c: s.c, ser: s.ser, agg: s.agg, key: &k}
}

func (s *aggregatingState[IN, ACC, OUT]) Add(v IN) error {
	k, err := s.c.stateKey(s.key)
	if err != nil {
		return err
	}
	now := s.c.now()
	payload, ok, err := s.c.readUnexpired(k, now)
	if err != nil {
		return err
	}
	var acc ACC
	if ok {
		if acc, err = s.ser.Decode(payload); err != nil {
			return s.c.wrapErr("add", err)
		}
	} else {
		acc = s.agg.CreateAccumulator()
	}
	acc = s.agg.Add(v, acc)
	blob, err := s.ser.Append(s.c.stamp(nil, now), acc)
	if err != nil {
		return s.c.wrapErr("add", err)
	}
	return s.c.st.set(k, blob)
}

func (s *aggregatingState[IN, ACC, OUT]) Get() (OUT, bool, error) {
	acc, ok, err := readDecoded(s.c, s.key, s.ser, "get")
	if err != nil || !ok {
		var zero OUT
		return zero, false, err
	}
	return s.agg.GetResult(acc), true, nil
}

func (s *aggregatingState[IN, ACC, OUT]) Clear() error {
	k, err := s.c.stateKey(s.key)
	if err != nil {
		return err
	}
	return s.c.st.del(k)
}
