package state

import "fmt"

// stateKind is the type of a keyed state; its string is stored in the
// state's metadata.
type stateKind string

const (
	kindValue       stateKind = "value"
	kindList        stateKind = "list"
	kindMap         stateKind = "map"
	kindReducing    stateKind = "reducing"
	kindAggregating stateKind = "aggregating"
)

// ValueStateDescriptor describes a ValueState, as Flink's
// ValueStateDescriptor: a name unique within the backend, the value
// serializer and optional TTL.
type ValueStateDescriptor[T any] struct {
	Name       string          // unique within the backend; required
	Serializer Serializer[T]   // required
	TTL        *StateTtlConfig // nil: no TTL
}

// ListStateDescriptor describes a ListState, as Flink's ListStateDescriptor.
// Serializer encodes one element; with TTL each element expires on its own.
type ListStateDescriptor[T any] struct {
	Name       string          // unique within the backend; required
	Serializer Serializer[T]   // element serializer; required
	TTL        *StateTtlConfig // nil: no TTL
}

// MapStateDescriptor describes a MapState, as Flink's MapStateDescriptor.
// Two user keys are the same entry when their serialized bytes are equal;
// with TTL each entry expires on its own.
type MapStateDescriptor[K, V any] struct {
	Name            string          // unique within the backend; required
	KeySerializer   Serializer[K]   // user-key serializer; required
	ValueSerializer Serializer[V]   // required
	TTL             *StateTtlConfig // nil: no TTL
}

// ReduceFunc combines the stored value a with a newly added value b, as
// Flink's ReduceFunction.reduce(value1, value2). It should be associative.
// An error fails the Add that called it and leaves the state unchanged.
type ReduceFunc[T any] func(a, b T) (T, error)

// ReducingStateDescriptor describes a ReducingState, as Flink's
// ReducingStateDescriptor.
type ReducingStateDescriptor[T any] struct {
	Name       string          // unique within the backend; required
	Reduce     ReduceFunc[T]   // required
	Serializer Serializer[T]   // required
	TTL        *StateTtlConfig // nil: no TTL
}

// AggregateFunction folds inputs of type IN into an accumulator of type ACC
// and derives a result of type OUT, as Flink's AggregateFunction. Add may
// modify and return acc. Implementations may also implement
// AccumulatorMerger to merge two accumulators (used by merging windows; the
// keyed AggregatingState itself never merges).
type AggregateFunction[IN, ACC, OUT any] interface {
	CreateAccumulator() ACC
	Add(value IN, acc ACC) ACC
	GetResult(acc ACC) OUT
}

// AccumulatorMerger is the optional Merge of Flink's AggregateFunction:
// combine two accumulators into one.
type AccumulatorMerger[ACC any] interface {
	Merge(a, b ACC) ACC
}

// AggregatingStateDescriptor describes an AggregatingState, as Flink's
// AggregatingStateDescriptor. The stored value is the accumulator.
type AggregatingStateDescriptor[IN, ACC, OUT any] struct {
	Name          string                          // unique within the backend; required
	Aggregate     AggregateFunction[IN, ACC, OUT] // required
	AccSerializer Serializer[ACC]                 // accumulator serializer; required
	TTL           *StateTtlConfig                 // nil: no TTL
}

// descriptorSpec is what every descriptor contributes to registration.
type descriptorSpec struct {
	name        string
	kind        stateKind
	serializer  string // "value serializer" or "key serializer/value serializer"
	typeName    string // Go types, to refuse the same name with another type
	ttl         *StateTtlConfig
	missingFunc bool
	nilSer      bool
}

func (s descriptorSpec) validate() error {
	var problems []string
	if s.name == "" {
		problems = append(problems, "empty name")
	}
	if s.nilSer {
		problems = append(problems, "nil serializer")
	}
	if s.missingFunc {
		problems = append(problems, fmt.Sprintf("nil %s function", map[stateKind]string{kindReducing: "reduce", kindAggregating: "aggregate"}[s.kind]))
	}
	if s.ttl != nil {
		if err := s.ttl.Validate(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	return joinProblems(fmt.Sprintf("state: %s state descriptor %q", s.kind, s.name), problems)
}
