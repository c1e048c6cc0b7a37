package operators

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	krt "github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// aggregateUpdateCost feeds n bids of one auction (a key with
// accumulators kept decoded in Pebble's write cache) to q17's aggregate
// (configs/nexmark/q17.yaml: nine aggregates, two of them first) built
// through the factory, sync, with FactoryContext.UpdateAfterOnly as the
// planner sets it for q17's upsert sink, and returns the allocations and
// the bytes allocated per bid after the key's first, and the rows emitted.
func aggregateUpdateCost(t *testing.T, n int) (allocs, bytes float64, rows []krt.Record) {
	t.Helper()
	p := &AggregateParams{Emit: EmitEveryUpdate, Aggregates: []AggregateSpec{
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
	fn, err := aggregateFactory().New(FactoryContext{Operator: "daily", Params: p, UpdateAfterOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ch := krt.NewChannel(n + 2)
	out := krt.NewOutput(nil, krt.NewWriter([]krt.Channel{ch}, krt.ForwardPartitioner{}))
	op := NewKeyedProcessOperator(OpenContext{Operator: "daily", Parallelism: 1}, opener(state.KindPebble, t.TempDir()), nil, fn.(*Aggregate), out)
	ctx := context.Background()
	if err := op.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	recs := make([]krt.Record, n+1)
	for i := range recs {
		recs[i] = krt.Record{Key: []byte("1000|2023-11-14"), Value: fmt.Appendf(nil,
			`{"event_type":2,"bid":{"auction":1000,"bidder":%d,"price":%d,"channel":"Google","dateTime":%d,"extra":""}}`,
			2000+i, (i*7919)%2_000_000, 1_700_000_000_000+int64(i)*100)}
	}
	if err := op.ProcessRecord(ctx, 0, recs[0]); err != nil { // the key's first: +I
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, r := range recs[1:] {
		if err := op.ProcessRecord(ctx, 0, r); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	for range n + 1 {
		select {
		case e := <-ch:
			rows = append(rows, e.Record)
		default:
		}
	}
	return float64(after.Mallocs-before.Mallocs) / float64(n), float64(after.TotalAlloc-before.TotalAlloc) / float64(n), rows
}

// TestAggregateUpdateAllocs: an update of a key whose accumulators the
// write cache keeps decoded copies the key's row once (View's copy, which
// the aggregate folds into and hands to Update, which keeps it: 9
// accumulators of 120 bytes), not twice, and with updateAfterOnly renders
// only the new row (no old row for a -U nobody reads) into a buffer the
// size of one row, and ProcessElement's result no longer moves to the
// heap (a return inside a range-over-func loop did that). On 9358909 it
// took 15 allocations and 2,976 bytes per bid; now 13 and 1,592. The rows are exact: +I, then one +U per bid
// with every aggregate. Without the race detector (which allocates for
// itself).
func TestAggregateUpdateAllocs(t *testing.T) {
	const n = 400
	allocs, bytes, rows := aggregateUpdateCost(t, n)
	t.Logf("%.2f allocations, %.0f bytes per bid", allocs, bytes)
	if !raceEnabled && (allocs > 13.5 || bytes > 1900) {
		t.Errorf("%.2f allocations and %.0f bytes per bid, want at most 13 and 1,900", allocs, bytes)
	}
	if len(rows) != n+1 {
		t.Fatalf("%d rows, want %d", len(rows), n+1)
	}
	if rows[0].Change != krt.ChangeInsert {
		t.Errorf("first row %v, want +I", rows[0].Change)
	}
	sum, lo, hi := int64(0), int64(1<<62), int64(-1)
	ranks := [3]int{}
	for i := range n + 1 {
		price := int64((i * 7919) % 2_000_000)
		sum += price
		lo, hi = min(lo, price), max(hi, price)
		switch {
		case price < 10000:
			ranks[0]++
		case price < 1000000:
			ranks[1]++
		default:
			ranks[2]++
		}
		if i == 0 {
			continue
		}
		want := fmt.Sprintf(`{"key":"1000|2023-11-14","auction":1000,"day":"2023-11-14","total_bids":%d,"rank1_bids":%d,"rank2_bids":%d,"rank3_bids":%d,"min_price":%d,"max_price":%d,"sum_price":%d}`,
			i+1, ranks[0], ranks[1], ranks[2], lo, hi, sum)
		if r := rows[i]; r.Change != krt.ChangeUpdateAfter || string(r.Value) != want {
			t.Fatalf("row %d: %v %s\nwant +U %s", i, r.Change, r.Value, want)
		}
	}
}
