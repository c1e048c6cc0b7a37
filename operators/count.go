package operators

import (
	"context"
	"encoding/json"
	"fmt"

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
// count reaches 2 it emits the average and clears the state. Input: JSON
// objects with a numeric "value"; a record without one is skipped. Output:
// {"key": <key>, "average": <float>} with the record key.
type CountWindowAverage struct {
	sum state.ValueState[CountAndSum]
}

// CountAndSum is CountWindowAverage's state: Flink's Tuple2<count, sum>.
type CountAndSum struct {
	Count int64   `json:"count"`
	Sum   float64 `json:"sum"`
}

// CountWindowAverageState describes CountWindowAverage's keyed state.
var CountWindowAverageState = state.ValueStateDescriptor[CountAndSum]{
	Name:       "average",
	Serializer: state.JSONSerializer[CountAndSum]{},
}

// Open implements KeyedProcessFunction.
func (c *CountWindowAverage) Open(ctx OpenContext) error {
	s, err := state.GetValueState(ctx.Backend, CountWindowAverageState)
	c.sum = s
	return err
}

// ProcessElement implements KeyedProcessFunction.
func (c *CountWindowAverage) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	var in struct {
		Value *float64 `json:"value"`
	}
	if json.Unmarshal(rec.Value, &in) != nil || in.Value == nil {
		return nil
	}
	cur, _, err := c.sum.Value()
	if err != nil {
		return err
	}
	cur.Count++
	cur.Sum += *in.Value
	if cur.Count < 2 {
		return c.sum.Update(cur)
	}
	if err := c.sum.Clear(); err != nil {
		return err
	}
	return out.Collect(runtime.Record{Key: rec.Key, Value: keyedJSON(rec.Key, "average", cur.Sum/float64(cur.Count)), Timestamp: rec.Timestamp})
}

// KeyedCount counts records per key in a ValueState[int64] and emits the
// new count with every record: {"key": <key>, "count": <n>}.
type KeyedCount struct {
	count state.ValueState[int64]
}

// KeyedCountState describes KeyedCount's keyed state.
var KeyedCountState = state.ValueStateDescriptor[int64]{Name: "count", Serializer: state.Int64Serializer{}}

// Open implements KeyedProcessFunction.
func (k *KeyedCount) Open(ctx OpenContext) error {
	s, err := state.GetValueState(ctx.Backend, KeyedCountState)
	k.count = s
	return err
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
	return out.Collect(runtime.Record{Key: rec.Key, Value: keyedJSON(rec.Key, "count", n), Timestamp: rec.Timestamp})
}

// keyedJSON renders {"key": <key as string>, field: value}.
func keyedJSON(key []byte, field string, value any) []byte {
	v, err := json.Marshal(map[string]any{"key": string(key), field: value})
	if err != nil {
		return []byte(fmt.Sprintf(`{"key":%q}`, key))
	}
	return v
}
