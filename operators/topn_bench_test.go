package operators

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// BenchmarkTopNNexmarkQ19 measures top_n as configs/nexmark/q19.yaml runs
// it (n 10 by price desc, rank_field rank_number) on Pebble with the write
// cache: per op one bid of the bench's Nexmark shape as q19's map hands
// it on (the bid object, its url with '&', marked valid JSON), keyed by
// its auction: half to a hot auction that moves every 2,000 bids, the
// others to one of the 100 newest auctions. A checkpoint every 16,384
// bids flushes the write cache into Pebble as the job's checkpoints do.
// The output is drained as a task's channel is. cpu-ns/op is the
// process's CPU per bid (getrusage).
func BenchmarkTopNNexmarkQ19(b *testing.B) {
	by, err := CompileExpression("price")
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(19, 10))
	recs := make([]runtime.Record, 1<<16)
	for i := range recs {
		auction := 1000 + int64(i/2000)*2000
		if rng.IntN(2) == 0 {
			auction = 1000 + int64(i/30) - rng.Int64N(100)
		}
		ts := int64(1_700_000_000_000 + i*100)
		v := fmt.Appendf(nil, `{"auction":%d,"bidder":%d,"price":%d,"channel":"channel-%d","url":"https://www.nexmark.com/abcd/efgh/item.htm?query=1&channel_id=%d","dateTime":%d,"extra":"%s"}`,
			auction, 1000+rng.Int64N(20_000), 100+rng.Int64N(10_000_000), i%10_000, rng.Int32(), ts, "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"[:60+rng.IntN(18)])
		recs[i] = runtime.Record{Key: fmt.Appendf(nil, "%d", auction), Value: v, Timestamp: time.UnixMilli(ts)}
	}
	ch := runtime.NewChannel(1024)
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
	op := NewKeyedProcessOperator(OpenContext{Operator: "top", Parallelism: 1}, opener(state.KindPebble, b.TempDir()), nil,
		NewTopN(TopNParams{N: 10, By: by, Order: TopNDesc, RankField: "rank_number"}), out)
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
	chk := int64(0)
	b.ReportAllocs()
	b.ResetTimer()
	start := processCPU()
	for i := range b.N {
		rec := recs[i%len(recs)]
		rec.SetDecoded(runtime.ValidJSON{})
		if err := op.ProcessRecord(ctx, 0, rec); err != nil {
			b.Fatal(err)
		}
		if i%64 == 63 {
			drain()
		}
		if i%16384 == 16383 {
			chk++
			finish, err := op.SnapshotState(ctx, &runtime.Barrier{CheckpointID: chk, Dir: b.TempDir()})
			if err == nil {
				_, err = finish(ctx)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
	drain()
}
