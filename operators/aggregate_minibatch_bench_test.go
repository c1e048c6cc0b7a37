package operators

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// BenchmarkAggregateMiniBatchWatermarks is the aggregate of Nexmark q17
// (as BenchmarkAggregateNexmarkQ17) with mini_batch {size: 50000} on
// Pebble, over bids of 2,000 auctions with a watermark after every 64
// bids (as the source sends one per fetch), in two modes: end_batch
// (allow_latency 0: every watermark ends the batch, as before
// allow_latency existed) and held (allow_latency 1h: watermarks wait for
// the batch's end at size; no mailbox, so the wake-up never comes). The
// cost per bid, the output drained as a task's channel is; cpu-ns/op is
// the process's CPU time per bid (getrusage, Pebble's goroutines too),
// which load distorts less than ns/op.
func BenchmarkAggregateMiniBatchWatermarks(b *testing.B) {
	expr := func(src string) Expression {
		e, err := CompileExpression(src)
		if err != nil {
			b.Fatal(err)
		}
		return e
	}
	specs := []AggregateSpec{
		{Name: "auction", Fn: AggFirst, Of: expr("bid.auction")},
		{Name: "day", Fn: AggFirst, Of: expr("string(timestamp(bid.dateTime / 1000)).substring(0, 10)")},
		{Name: "total_bids", Fn: AggCount},
		{Name: "rank1_bids", Fn: AggSum, Of: expr("bid.price < 10000 ? 1 : 0")},
		{Name: "rank2_bids", Fn: AggSum, Of: expr("bid.price >= 10000 && bid.price < 1000000 ? 1 : 0")},
		{Name: "rank3_bids", Fn: AggSum, Of: expr("bid.price >= 1000000 ? 1 : 0")},
		{Name: "min_price", Fn: AggMin, Of: expr("bid.price")},
		{Name: "max_price", Fn: AggMax, Of: expr("bid.price")},
		{Name: "sum_price", Fn: AggSum, Of: expr("bid.price")},
	}
	rng := rand.New(rand.NewPCG(17, 1))
	recs := make([]runtime.Record, 4096)
	for i := range recs {
		auction := 1000 + rng.IntN(2000)
		v := fmt.Sprintf(`{"event_type":2,"person":null,"auction":null,"bid":{"auction":%d,"bidder":%d,"price":%d,"channel":"Google","url":"https://www.nexmark.com/abc/def/item.htm?query=1","dateTime":%d,"extra":"xyzxyzxyz"}}`,
			auction, 2000+rng.IntN(5000), rng.IntN(2_000_000), 1_700_000_000_000+int64(i)*100)
		recs[i] = runtime.Record{Key: fmt.Appendf(nil, "%d|2023-11-14", auction), Value: []byte(v)}
	}
	for _, mode := range []struct {
		name    string
		latency time.Duration
	}{{"end_batch", 0}, {"held", time.Hour}} {
		b.Run("watermarks="+mode.name, func(b *testing.B) {
			p := AggregateParams{Emit: EmitEveryUpdate, Aggregates: specs, MiniBatch: &MiniBatchParams{Size: 50000, AllowLatency: mode.latency}}
			ch := runtime.NewChannel(1 << 16)
			out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
			op := NewKeyedProcessOperator(OpenContext{Operator: "op", Parallelism: 1}, opener(state.KindPebble, b.TempDir()), nil, NewAggregate(p, false), out)
			ctx := context.Background()
			if err := op.Open(ctx); err != nil {
				b.Fatal(err)
			}
			defer op.Close()
			drain := func() {
				for {
					select {
					case <-ch:
					default:
						return
					}
				}
			}
			wm := time.UnixMilli(0)
			cpu := func() time.Duration {
				var ru syscall.Rusage
				if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
					b.Fatal(err)
				}
				return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := cpu()
			for i := range b.N {
				if err := op.ProcessRecord(ctx, 0, recs[i%len(recs)]); err != nil {
					b.Fatal(err)
				}
				if i%64 == 63 {
					wm = wm.Add(time.Millisecond)
					if err := op.ProcessWatermark(ctx, wm); err != nil && err != runtime.ErrWatermarkHeld {
						b.Fatal(err)
					}
					drain()
				}
			}
			b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
			b.StopTimer()
			drain()
		})
	}
}
