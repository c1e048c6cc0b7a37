package operators

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// CountWindowAverageType and KeyedCountType are the pipeline names of the
// built-in keyed operators below.
const (
	CountWindowAverageType = "count_window_average"
	KeyedCountType         = "keyed_count"
)

// CountWindowAverage is Flink's CountWindowAverage example (the
// documentation's ValueState example): per key it keeps the count and the
// running sum of the records' "value" field in one ValueState; when the
// count reaches 2 it emits the average and clears the state. As in Flink's
// example (Tuple2<Long, Long>) values are integers and the average is the
// integer quotient sum/count: (1,3),(1,5),(1,7),(1,4),(1,2) emit (1,4) and
// (1,5). Input: JSON objects with an integer "value"; a record without one
// (missing, not a number, not an integer) fails with a *runtime.RecordError
// (reason invalid) and meets its source's on_error policy. Output:
// {"key": <key>, "average": <integer>} with the record key and timestamp.
type CountWindowAverage struct {
	sum state.ValueState[CountAndSum]
}

// CountAndSum is CountWindowAverage's state: Flink's Tuple2<count, sum>.
type CountAndSum struct {
	Count int64 `json:"count"`
	Sum   int64 `json:"sum"`
}

// CountWindowAverageState describes CountWindowAverage's keyed state.
var CountWindowAverageState = state.ValueStateDescriptor[CountAndSum]{
	Name:       "average",
	Serializer: state.JSONSerializer[CountAndSum]{},
}

// countWindowAverageFactory registers CountWindowAverageType.
func countWindowAverageFactory() Factory {
	return Factory{
		Type:   CountWindowAverageType,
		Doc:    "Flink's CountWindowAverage: per key, the integer average of every two integer \"value\" fields.",
		Traits: Traits{Keyed: true, AsyncState: true},
		State:  []string{CountWindowAverageState.Name},
		New: func(ctx FactoryContext) (any, error) {
			if ctx.AsyncState {
				return &AsyncCountWindowAverage{}, nil
			}
			return &CountWindowAverage{}, nil
		},
	}
}

// keyedCountFactory registers KeyedCountType.
func keyedCountFactory() Factory {
	return Factory{
		Type:   KeyedCountType,
		Doc:    "Counts records per key and emits {\"key\", \"count\"} with every record.",
		Traits: Traits{Keyed: true, AsyncState: true},
		State:  []string{KeyedCountState.Name},
		New: func(ctx FactoryContext) (any, error) {
			if ctx.AsyncState {
				return &AsyncKeyedCount{}, nil
			}
			return &KeyedCount{}, nil
		},
	}
}

// Open implements KeyedProcessFunction.
func (c *CountWindowAverage) Open(ctx OpenContext) error {
	s, err := state.GetValueState(ctx.Backend, CountWindowAverageState)
	c.sum = s
	return err
}

// ProcessElement implements KeyedProcessFunction.
func (c *CountWindowAverage) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	v, err := averageInput(rec)
	if err != nil {
		return err
	}
	cur, _, err := c.sum.Value()
	if err != nil {
		return err
	}
	cur.Count++
	cur.Sum += v
	if cur.Count < 2 {
		return c.sum.Update(cur)
	}
	if err := c.sum.Clear(); err != nil {
		return err
	}
	return out.Collect(averageRecord(rec, cur))
}

// AsyncCountWindowAverage is CountWindowAverage through the async state API
// (Flink's State V2 version of the example): the same state, input and
// output, as chained StateFutures. It is the count_window_average operator
// with async_state: true.
type AsyncCountWindowAverage struct {
	sum state.AsyncValueState[CountAndSum]
}

// Open implements AsyncKeyedProcessFunction.
func (c *AsyncCountWindowAverage) Open(ctx AsyncOpenContext) error {
	s, err := state.GetAsyncValueState(ctx.AEC, CountWindowAverageState)
	c.sum = s
	return err
}

// ProcessElement implements AsyncKeyedProcessFunction: read the count and
// sum, then either update them or, at count 2, clear them and emit the
// average.
func (c *AsyncCountWindowAverage) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	v, err := averageInput(rec)
	if err != nil {
		return err
	}
	// The continuations keep only the key and timestamp the output needs,
	// not the whole record (which would then move to the heap on every
	// call).
	key, ts := rec.Key, rec.Timestamp
	state.ThenCompose(c.sum.AsyncValue(), func(cur state.Optional[CountAndSum]) (state.StateFuture[state.Void], error) {
		acc := cur.Value
		acc.Count++
		acc.Sum += v
		if acc.Count < 2 {
			return c.sum.AsyncUpdate(acc), nil
		}
		return c.sum.AsyncClear().ThenAccept(func(state.Void) error {
			return out.Collect(averageRecord(runtime.Record{Key: key, Timestamp: ts}, acc))
		}), nil
	})
	return nil // failures of the chain reach the controller, which fails the task
}

// averageInput returns the record's integer "value" field, or a
// *runtime.RecordError (reason invalid) when the record is not a JSON object
// with one.
func averageInput(rec runtime.Record) (int64, error) {
	var in struct {
		Value *int64 `json:"value"`
	}
	if json.Unmarshal(rec.Value, &in) != nil || in.Value == nil {
		return 0, &runtime.RecordError{Reason: runtime.ReasonInvalid, Detail: CountWindowAverageType + `: "value" must be an integer`}
	}
	return *in.Value, nil
}

// averageRecord is CountWindowAverage's output for the window acc closed:
// the integer average, as Flink's Long division.
func averageRecord(rec runtime.Record, acc CountAndSum) runtime.Record {
	return runtime.Record{Key: rec.Key, Value: keyedJSON(rec.Key, "average", acc.Sum/acc.Count), Timestamp: rec.Timestamp}
}

// KeyedCount counts records per key in a ValueState[int64] and emits the
// new count with every record: {"key": <key>, "count": <n>}.
type KeyedCount struct {
	count state.ValueState[int64]
	desc  *state.ValueStateDescriptor[int64] // nil: KeyedCountState (tests slow the serializer)
}

// KeyedCountState describes KeyedCount's keyed state.
var KeyedCountState = state.ValueStateDescriptor[int64]{Name: "count", Serializer: state.Int64Serializer{}}

// Open implements KeyedProcessFunction.
func (k *KeyedCount) Open(ctx OpenContext) error {
	s, err := state.GetValueState(ctx.Backend, countDescriptor(k.desc))
	k.count = s
	return err
}

func countDescriptor(d *state.ValueStateDescriptor[int64]) state.ValueStateDescriptor[int64] {
	if d == nil {
		return KeyedCountState
	}
	return *d
}

// ProcessElement implements KeyedProcessFunction.
func (k *KeyedCount) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	n, _, err := k.count.Value()
	if err != nil {
		return err
	}
	n++
	if err := k.count.Update(n); err != nil {
		return err
	}
	return out.Collect(countRecord(rec, n))
}

// AsyncKeyedCount is KeyedCount through the async state API: the same
// state and output. It is the keyed_count operator with async_state: true.
type AsyncKeyedCount struct {
	count state.AsyncValueState[int64]
	desc  *state.ValueStateDescriptor[int64] // nil: KeyedCountState
	free  []*countStep                       // continuations to reuse (subtask goroutine only)
}

// countStep is the continuation of one record's read: what the output
// needs, and its accept method as a func value made once, so a record costs
// no closure. A step is taken from AsyncKeyedCount.free by ProcessElement
// and given back by accept, which runs once, after which nothing refers to
// the step; if the read fails accept never runs and the step is simply not
// reused.
type countStep struct {
	k   *AsyncKeyedCount
	key []byte
	ts  time.Time
	out Collector
	fn  func(state.Optional[int64]) error // s.accept
}

// accept writes the incremented count and emits it. It copies out and
// clears the step, and gives it back, before doing anything else.
func (s *countStep) accept(cur state.Optional[int64]) error {
	k, key, ts, out := s.k, s.key, s.ts, s.out
	s.key, s.out = nil, nil
	k.free = append(k.free, s)
	n := cur.Value + 1
	k.count.AsyncUpdate(n)
	return out.Collect(countRecord(runtime.Record{Key: key, Timestamp: ts}, n))
}

// Open implements AsyncKeyedProcessFunction.
func (k *AsyncKeyedCount) Open(ctx AsyncOpenContext) error {
	s, err := state.GetAsyncValueState(ctx.AEC, countDescriptor(k.desc))
	k.count = s
	return err
}

// ProcessElement implements AsyncKeyedProcessFunction: read the count,
// then write it incremented and emit it. The update's future is not
// chained: its failure reaches the controller all the same, and within the
// read's continuation the update runs at once, before the emit (the
// record's read is done), as in KeyedCount.
func (k *AsyncKeyedCount) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	var s *countStep
	if n := len(k.free); n > 0 {
		s = k.free[n-1]
		k.free[n-1] = nil
		k.free = k.free[:n-1]
	} else {
		s = &countStep{k: k}
		s.fn = s.accept
	}
	s.key, s.ts, s.out = rec.Key, rec.Timestamp, out
	k.count.AsyncValue().ThenAccept(s.fn)
	return nil // failures of the chain reach the controller, which fails the task
}

// countRecord is KeyedCount's output for count n.
func countRecord(rec runtime.Record, n int64) runtime.Record {
	return runtime.Record{Key: rec.Key, Value: keyedJSON(rec.Key, "count", n), Timestamp: rec.Timestamp}
}

// keyedJSON renders {field: value, "key": <key as string>} as json.Marshal
// renders the map (keys sorted; field sorts before "key"): value an
// integer, field a plain ASCII name.
func keyedJSON(key []byte, field string, value int64) []byte {
	b := make([]byte, 0, len(field)+len(key)+32)
	b = append(b, '{', '"')
	b = append(b, field...)
	b = append(b, '"', ':')
	b = strconv.AppendInt(b, value, 10)
	b = append(b, `,"key":`...)
	return append(appendJSONString(b, key), '}')
}

// appendJSONString appends s as a JSON string exactly as json.Marshal of
// string(s) writes it (HTML characters and invalid UTF-8 escaped): plain
// printable ASCII as it is, anything else through json.Marshal.
func appendJSONString(b, s []byte) []byte {
	for _, c := range s {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(string(s)) // a string: cannot fail
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
