package operators

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// BenchmarkAggregateNexmarkQ17 is the aggregate of Nexmark q17
// (configs/nexmark/q17.yaml: nine aggregates per auction and day, a row
// emitted per bid, -U and +U) on Pebble with the write cache, over bids of
// 2,000 auctions of one day, the output drained as a task's channel is:
// the operator's cost per bid, without Kafka and the map after it.
func BenchmarkAggregateNexmarkQ17(b *testing.B) {
	compiled := func(_ *testing.B, src string) Expression {
		e, err := CompileExpression(src)
		if err != nil {
			b.Fatal(err)
		}
		return e
	}
	t := b
	p := AggregateParams{Emit: EmitEveryUpdate, Aggregates: []AggregateSpec{
		{Name: "auction", Fn: AggFirst, Of: compiled(t, "bid.auction")},
		{Name: "day", Fn: AggFirst, Of: compiled(t, "string(timestamp(bid.dateTime / 1000)).substring(0, 10)")},
		{Name: "total_bids", Fn: AggCount},
		{Name: "rank1_bids", Fn: AggSum, Of: compiled(t, "bid.price < 10000 ? 1 : 0")},
		{Name: "rank2_bids", Fn: AggSum, Of: compiled(t, "bid.price >= 10000 && bid.price < 1000000 ? 1 : 0")},
		{Name: "rank3_bids", Fn: AggSum, Of: compiled(t, "bid.price >= 1000000 ? 1 : 0")},
		{Name: "min_price", Fn: AggMin, Of: compiled(t, "bid.price")},
		{Name: "max_price", Fn: AggMax, Of: compiled(t, "bid.price")},
		{Name: "sum_price", Fn: AggSum, Of: compiled(t, "bid.price")},
	}}
	rng := rand.New(rand.NewPCG(17, 1))
	recs := make([]runtime.Record, 4096)
	for i := range recs {
		auction := 1000 + rng.IntN(2000)
		v := fmt.Sprintf(`{"event_type":2,"person":null,"auction":null,"bid":{"auction":%d,"bidder":%d,"price":%d,"channel":"Google","url":"https://www.nexmark.com/abc/def/item.htm?query=1","dateTime":%d,"extra":"xyzxyzxyz"}}`,
			auction, 2000+rng.IntN(5000), rng.IntN(2_000_000), 1_700_000_000_000+int64(i)*100)
		recs[i] = runtime.Record{Key: fmt.Appendf(nil, "%d|2023-11-14", auction), Value: []byte(v)}
	}
	ch := runtime.NewChannel(1024)
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
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := op.ProcessRecord(ctx, 0, recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
		if i%256 == 255 {
			drain()
		}
	}
	b.StopTimer()
	drain()
}

// BenchmarkAggregateNexmarkQ16 is the aggregate of Nexmark q16
// (configs/nexmark/q16.yaml: fifteen aggregates per channel and day, eight
// of them count_distinct over bidders and auctions, the three ranks' with
// a filter, so that the four over each field share one MapState) on Pebble
// with the write cache, over bids of one day: half of
// them to 4 hot channels, half to 2,000 others, bidders of 100,000 and
// auctions of 50,000, so that most count_distinct values are new to their
// key. A checkpoint every 16,384 bids flushes the write cache into Pebble
// as the job's checkpoints do. The output is drained as a task's channel
// is: the operator's cost per bid, without Kafka and the map after it;
// cpu-ns/op is the process's CPU per bid (getrusage).
func BenchmarkAggregateNexmarkQ16(b *testing.B) { benchmarkAggregateNexmarkQ16(b, true) }

// BenchmarkAggregateNexmarkQ16Sentinel is BenchmarkAggregateNexmarkQ16
// with the ranks' count_distinct written as before filters existed (of
// `c ? x : -1`, each its own MapState): the ungrouped path.
func BenchmarkAggregateNexmarkQ16Sentinel(b *testing.B) { benchmarkAggregateNexmarkQ16(b, false) }

// benchmarkAggregateNexmarkQ16 runs BenchmarkAggregateNexmarkQ16, the
// ranks' count_distinct with filters (shared maps) or with sentinels.
func benchmarkAggregateNexmarkQ16(b *testing.B, filters bool) {
	compiled := func(src string) Expression {
		e, err := CompileExpression(src)
		if err != nil {
			b.Fatal(err)
		}
		return e
	}
	specs := []AggregateSpec{
		{Name: "channel", Fn: AggFirst, Of: compiled("bid.channel")},
		{Name: "day", Fn: AggFirst, Of: compiled("string(timestamp(bid.dateTime / 1000)).substring(0, 10)")},
		{Name: "last_time", Fn: AggMax, Of: compiled("bid.dateTime")},
		{Name: "total_bids", Fn: AggCount},
		{Name: "rank1_bids", Fn: AggSum, Of: compiled("bid.price < 10000 ? 1 : 0")},
		{Name: "rank2_bids", Fn: AggSum, Of: compiled("bid.price >= 10000 && bid.price < 1000000 ? 1 : 0")},
		{Name: "rank3_bids", Fn: AggSum, Of: compiled("bid.price >= 1000000 ? 1 : 0")},
	}
	for _, of := range []string{"bidder", "auction"} {
		if filters {
			specs = append(specs,
				AggregateSpec{Name: "total_" + of, Fn: AggCountDistinct, Of: compiled("bid." + of)})
			for r, c := range []string{"bid.price < 10000", "bid.price >= 10000 && bid.price < 1000000", "bid.price >= 1000000"} {
				var f BoolExpression
				if err := f.UnmarshalText([]byte(c)); err != nil {
					b.Fatal(err)
				}
				specs = append(specs, AggregateSpec{Name: fmt.Sprintf("rank%d_%s", r+1, of), Fn: AggCountDistinct, Of: compiled("bid." + of), Filter: f})
			}
			continue
		}
		specs = append(specs,
			AggregateSpec{Name: "total_" + of, Fn: AggCountDistinct, Of: compiled("bid." + of)},
			AggregateSpec{Name: "rank1_" + of, Fn: AggCountDistinct, Of: compiled("bid.price < 10000 ? bid." + of + " : -1")},
			AggregateSpec{Name: "rank2_" + of, Fn: AggCountDistinct, Of: compiled("bid.price >= 10000 && bid.price < 1000000 ? bid." + of + " : -1")},
			AggregateSpec{Name: "rank3_" + of, Fn: AggCountDistinct, Of: compiled("bid.price >= 1000000 ? bid." + of + " : -1")})
	}
	p := AggregateParams{Emit: EmitEveryUpdate, Aggregates: specs}
	rng := rand.New(rand.NewPCG(16, 1))
	recs := make([]runtime.Record, 1<<16)
	for i := range recs {
		channel := []string{"Google", "Facebook", "Baidu", "Apple"}[rng.IntN(4)]
		if rng.IntN(2) == 0 {
			channel = fmt.Sprint("channel-", rng.IntN(2000))
		}
		v := fmt.Sprintf(`{"event_type":2,"person":null,"auction":null,"bid":{"auction":%d,"bidder":%d,"price":%d,"channel":%q,"url":"https://www.nexmark.com/abc/def/item.htm?query=1","dateTime":%d,"extra":"xyzxyzxyz"}}`,
			1000+rng.IntN(50_000), 2000+rng.IntN(100_000), rng.IntN(2_000_000), channel, 1_700_000_000_000+int64(i)*100)
		recs[i] = runtime.Record{Key: []byte(channel + "|2023-11-14"), Value: []byte(v)}
	}
	ch := runtime.NewChannel(1024)
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
	chk := int64(0)
	b.ReportAllocs()
	b.ResetTimer()
	start := processCPU()
	for i := range b.N {
		if err := op.ProcessRecord(ctx, 0, recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
		if i%256 == 255 {
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

// BenchmarkAggregateNexmarkQ15 is the aggregate of Nexmark q15
// (configs/nexmark/q15.yaml: thirteen aggregates per day, eight of them
// count_distinct over bidders and auctions, the ranks' with a filter, so
// that the four over each field share one MapState) with mini_batch
// {size: 50000} on Pebble with the write cache, over bids of one day:
// three in four from 100 hot bidders (the rest from 100,000), one in two
// to 100 hot auctions (the rest to 50,000), as Nexmark's hot bidders and
// auctions make them repeat within a batch. A checkpoint every 16,384
// bids ends the batch and flushes the write cache into Pebble as the
// job's checkpoints do. The output is drained as a task's channel is;
// cpu-ns/op is the process's CPU per bid (getrusage).
func BenchmarkAggregateNexmarkQ15(b *testing.B) {
	compiled := func(src string) Expression {
		e, err := CompileExpression(src)
		if err != nil {
			b.Fatal(err)
		}
		return e
	}
	specs := []AggregateSpec{
		{Name: "day", Fn: AggFirst, Of: compiled("string(timestamp(bid.dateTime / 1000)).substring(0, 10)")},
		{Name: "total_bids", Fn: AggCount},
		{Name: "rank1_bids", Fn: AggSum, Of: compiled("bid.price < 10000 ? 1 : 0")},
		{Name: "rank2_bids", Fn: AggSum, Of: compiled("bid.price >= 10000 && bid.price < 1000000 ? 1 : 0")},
		{Name: "rank3_bids", Fn: AggSum, Of: compiled("bid.price >= 1000000 ? 1 : 0")},
	}
	for _, of := range []string{"bidders", "auctions"} {
		field := "bid." + of[:len(of)-1]
		specs = append(specs, AggregateSpec{Name: "total_" + of, Fn: AggCountDistinct, Of: compiled(field)})
		for r, c := range []string{"bid.price < 10000", "bid.price >= 10000 && bid.price < 1000000", "bid.price >= 1000000"} {
			var f BoolExpression
			if err := f.UnmarshalText([]byte(c)); err != nil {
				b.Fatal(err)
			}
			specs = append(specs, AggregateSpec{Name: fmt.Sprintf("rank%d_%s", r+1, of), Fn: AggCountDistinct, Of: compiled(field), Filter: f})
		}
	}
	p := AggregateParams{Emit: EmitEveryUpdate, Aggregates: specs, MiniBatch: &MiniBatchParams{Size: 50000}}
	rng := rand.New(rand.NewPCG(15, 1))
	recs := make([]runtime.Record, 1<<16)
	for i := range recs {
		bidder, auction := 2000+rng.IntN(100), 1000+rng.IntN(100)
		if rng.IntN(4) == 0 {
			bidder = 2000 + rng.IntN(100_000)
		}
		if rng.IntN(2) == 0 {
			auction = 1000 + rng.IntN(50_000)
		}
		v := fmt.Sprintf(`{"event_type":2,"person":null,"auction":null,"bid":{"auction":%d,"bidder":%d,"price":%d,"channel":"Google","url":"https://www.nexmark.com/abc/def/item.htm?query=1","dateTime":%d,"extra":"xyzxyzxyz"}}`,
			auction, bidder, rng.IntN(2_000_000), 1_700_000_000_000+int64(i)*100)
		recs[i] = runtime.Record{Key: []byte("2023-11-14"), Value: []byte(v)}
	}
	ch := runtime.NewChannel(1024)
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
	chk := int64(0)
	b.ReportAllocs()
	b.ResetTimer()
	start := processCPU()
	for i := range b.N {
		if err := op.ProcessRecord(ctx, 0, recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
		if i%256 == 255 {
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
			drain()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
	drain()
}
