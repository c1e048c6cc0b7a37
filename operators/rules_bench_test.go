package operators

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// BenchmarkRulesEvaluator measures one routed copy through the rules
// operator's keyed stage on Pebble (write cache on), as
// `kstreamd bench --scenario rules-10` drives it: the bench's four rule
// kinds (max, sum, count, count_distinct; 744 h windows, limits that
// rarely alert), 10,000 keys, copies in time order, every key's summary
// written once before the timer starts (hot: read from the write cache).
// The copies are routed once, outside the timer; allocs/op and cpu-ns/op
// (getrusage) are per copy.
func BenchmarkRulesEvaluator(b *testing.B) { benchRulesEvaluator(b, "") }

// BenchmarkRulesEvaluatorSlice is BenchmarkRulesEvaluator with the rules'
// slice 1h (`kstreamd bench --scenario rules-10-slice-1h`): a key's
// copies share the slice of their hour (one per 3.6M copies here, the
// copies being 1 ms apart) instead of one slice each. Its cost per copy
// grows with -benchtime (the copies a slice holds): compare runs of one
// -benchtime.
func BenchmarkRulesEvaluatorSlice(b *testing.B) { benchRulesEvaluator(b, `,"slice":"1h"`) }

// benchRulesEvaluator is BenchmarkRulesEvaluator with slice (the JSON of
// the rules' slice field with its comma, or empty) in every rule.
func benchRulesEvaluator(b *testing.B, slice string) {
	const nkeys = 10000
	ctx := context.Background()
	cfg := RulesConfig{RuleTime: RuleTimeProcessing, Operator: "fraud"}
	router := NewRulesRouter(cfg)
	if err := router.Open(OpenContext{Operator: "fraud.route"}); err != nil {
		b.Fatal(err)
	}
	if err := router.InitializeState(FunctionInitializationContext{OperatorStateStore: state.NewOperatorStateStore(nil)}); err != nil {
		b.Fatal(err)
	}
	rules := []string{
		`{"id":"large-amount-0","filter":"amount % 4 == 0","group_by":["key"],"aggregate":{"fn":"max","of":"amount"},"window":"744h"` + slice + `,"alert_when":"> 985"}`,
		`{"id":"big-spender-1","filter":"amount % 4 == 1","group_by":["key"],"aggregate":{"fn":"sum","of":"amount"},"window":"744h"` + slice + `,"alert_when":"> 100000000"}`,
		`{"id":"busy-key-2","filter":"amount % 4 == 2","group_by":["key"],"aggregate":{"fn":"count"},"window":"744h"` + slice + `,"alert_when":"> 100000000"}`,
		`{"id":"many-shapes-3","filter":"amount % 4 == 3","group_by":["key"],"aggregate":{"fn":"count_distinct","of":"shape"},"window":"744h"` + slice + `,"alert_when":"> 4"}`,
	}
	fn := NewRulesEvaluator(cfg)
	ch := runtime.NewChannel(1 << 16)
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
	op := NewKeyedBroadcastOperator(OpenContext{Operator: "fraud", Subtask: 0, Parallelism: 1}, opener(state.KindPebble, b.TempDir()), nil, fn, out)
	op.SetMailbox(runtime.NewMailbox())
	if err := op.Open(ctx); err != nil {
		b.Fatal(err)
	}
	defer op.Close()
	for i, r := range rules {
		rec := runtime.Record{Value: []byte(r), Origin: runtime.Origin{Topic: "rules", Offset: int64(i)}}
		if err := router.ProcessBroadcastElement(ctx, rec, &sliceCollector{}); err != nil {
			b.Fatal(err)
		}
		if err := op.ProcessRecord(ctx, 1, rec); err != nil {
			b.Fatal(err)
		}
	}
	// Routed copies: per key one of each rule, then the next round of the
	// keys later in time; rounds repeat with later timestamps.
	const rounds = 4
	var copies []runtime.Record
	c := &sliceCollector{}
	shapes := []string{"circle", "square", "triangle"}
	for r := range rounds {
		for k := range nkeys {
			for fnIdx := range 4 {
				amount := 4*((7*r+k)%250) + fnIdx // rule fnIdx's filter
				v := fmt.Appendf(nil, `{"key":"k%05d","amount":%d,"shape":%q}`, k, amount, shapes[(r+k)%3])
				c.recs = c.recs[:0]
				if err := router.ProcessElement(ctx, runtime.Record{Key: fmt.Appendf(nil, "k%05d", k), Value: v, Format: runtime.FormatJSON}, c); err != nil {
					b.Fatal(err)
				}
				copies = append(copies, c.recs...)
			}
		}
	}
	if len(copies) != rounds*nkeys*4 {
		b.Fatalf("%d routed copies, want %d", len(copies), rounds*nkeys*4)
	}
	drain := func() {
		for len(ch) > 0 {
			<-ch
		}
	}
	base := time.UnixMilli(1_700_000_000_000)
	step := 0
	process := func() {
		rec := copies[step%len(copies)]
		rec.Timestamp = base.Add(time.Duration(step) * time.Millisecond)
		if err := op.ProcessRecord(ctx, 0, rec); err != nil {
			b.Fatal(err)
		}
		step++
		if step%1024 == 0 {
			drain()
		}
	}
	for range nkeys * 4 { // every key's summary written once
		process()
	}
	b.ReportAllocs()
	cpu, n := processCPU(), 0
	for b.Loop() {
		process()
		n++
	}
	// CPU per copy (the process's, Pebble's goroutines included):
	// steadier than sec/op on a loaded machine.
	b.ReportMetric(float64(processCPU()-cpu)/float64(n), "cpu-ns/op")
	drain()
}

// BenchmarkRulesEvaluatorNewKeys measures one routed copy to a key that
// holds no state yet, the common case of `kstreamd bench --scenario
// rules-100` (a million keys at about one copy each): the bench's count
// rule, every copy's group new, Pebble with the write cache on. The copies
// are routed in chunks outside the timer; allocs/op is per copy.
func BenchmarkRulesEvaluatorNewKeys(b *testing.B) {
	ctx := context.Background()
	cfg := RulesConfig{RuleTime: RuleTimeProcessing, Operator: "fraud"}
	router := NewRulesRouter(cfg)
	if err := router.Open(OpenContext{Operator: "fraud.route"}); err != nil {
		b.Fatal(err)
	}
	if err := router.InitializeState(FunctionInitializationContext{OperatorStateStore: state.NewOperatorStateStore(nil)}); err != nil {
		b.Fatal(err)
	}
	fn := NewRulesEvaluator(cfg)
	ch := runtime.NewChannel(1 << 16)
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
	op := NewKeyedBroadcastOperator(OpenContext{Operator: "fraud", Subtask: 0, Parallelism: 1}, opener(state.KindPebble, b.TempDir()), nil, fn, out)
	op.SetMailbox(runtime.NewMailbox())
	if err := op.Open(ctx); err != nil {
		b.Fatal(err)
	}
	defer op.Close()
	rule := runtime.Record{Value: []byte(`{"id":"busy-key-2","group_by":["key"],"aggregate":{"fn":"count"},"window":"744h","alert_when":"> 6"}`),
		Origin: runtime.Origin{Topic: "rules"}}
	if err := router.ProcessBroadcastElement(ctx, rule, &sliceCollector{}); err != nil {
		b.Fatal(err)
	}
	if err := op.ProcessRecord(ctx, 1, rule); err != nil {
		b.Fatal(err)
	}
	const chunk = 4096
	c := &sliceCollector{}
	next := 0
	route := func() {
		c.recs = c.recs[:0]
		for range chunk {
			k := fmt.Appendf(nil, "k%08d", next)
			v := fmt.Appendf(nil, `{"key":"k%08d","amount":%d,"shape":"circle"}`, next, next%1000)
			if err := router.ProcessElement(ctx, runtime.Record{Key: k, Value: v, Format: runtime.FormatJSON}, c); err != nil {
				b.Fatal(err)
			}
			next++
		}
	}
	base := time.UnixMilli(1_700_000_000_000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%chunk == 0 {
			b.StopTimer()
			route()
			for len(ch) > 0 {
				<-ch
			}
			b.StartTimer()
		}
		rec := c.recs[i%chunk]
		rec.Timestamp = base.Add(time.Duration(i) * time.Millisecond)
		if err := op.ProcessRecord(ctx, 0, rec); err != nil {
			b.Fatal(err)
		}
	}
}
