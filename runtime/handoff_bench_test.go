package runtime

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// BenchmarkHandOff: a writer on one goroutine feeding an OperatorTask on
// another (a source to its sink), per record, with and without batching,
// and with and without the IOTimes meters of both sides (the job always
// sets them: the cost of measuring busy, back-pressured and idle time).
func BenchmarkHandOff(b *testing.B) {
	for _, metered := range []bool{false, true} {
		for _, batch := range []int{0, RecordBatchSize} {
			b.Run(fmt.Sprintf("batch=%d/metered=%v", batch, metered), func(b *testing.B) { benchHandOff(b, batch, metered) })
		}
	}
}

// benchHandOff is one BenchmarkHandOff case: records in batches of batch
// (0: one element each), both sides metered or not.
func benchHandOff(b *testing.B, batch int, metered bool) {
	ch := NewChannel(0)
	w := NewWriter([]Channel{ch}, ForwardPartitioner{}).WithBatching(batch)
	var sinkTimes *IOTimes
	if metered {
		out := NewOutput(nil)
		out.AddWriter(w)
		out.SetIOTimes(NewIOTimes(nil, nil))
		sinkTimes = NewIOTimes(nil, nil)
	}
	var n atomic.Int64
	task := NewOperatorTask(OperatorTaskConfig{ID: TaskID{"op", 0}, Gate: NewInputGate([]InputChannel{{Ch: ch}}),
		Operator: countOp{&n}, BootstrapInput: -1, IOTimes: sinkTimes})
	done := make(chan error, 1)
	ctx := context.Background()
	go func() { done <- task.Run(ctx, nil) }()
	rec := Record{Key: []byte("key"), Value: []byte(`{"k":1}`)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := w.Emit(ctx, rec); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 { // a source flushes after each poll of up to 1000 records
			if err := w.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := w.Broadcast(ctx, Element{Kind: KindEndOfInput}); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	if n.Load() != int64(b.N) {
		b.Fatalf("processed %d of %d", n.Load(), b.N)
	}
}
