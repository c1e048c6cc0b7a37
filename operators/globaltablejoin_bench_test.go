package operators

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// BenchmarkGlobalTableJoinNexmarkQ13 measures global_table_join as
// configs/nexmark/q13.yaml runs it: the side input's 10,000 rows
// {"key": i, "value": "i"} keyed "i", then per op one bid event of the
// bench's Nexmark shape (about 300 bytes, marked valid JSON by its
// source as it reaches the join) looked up by string(bid.auction % 10000)
// and joined by q13's select; every bid finds its row. cpu-ns/op is the
// process's CPU time per bid (getrusage: the garbage collector's too).
func BenchmarkGlobalTableJoinNexmarkQ13(b *testing.B) {
	ctx := context.Background()
	key, err := CompileExpression(`string(bid.auction % 10000)`)
	if err != nil {
		b.Fatal(err)
	}
	sel, err := CompileExpression(`{"auction": left.bid.auction, "bidder": left.bid.bidder, "price": left.bid.price, "dateTime": left.bid.dateTime, "value": right.value}`)
	if err != nil {
		b.Fatal(err)
	}
	j := NewGlobalTableJoin(&GlobalTableJoinParams{Key: key, Join: TableJoinInner, Select: sel})
	for i := range 10_000 {
		k := strconv.Itoa(i)
		r := runtime.Record{Key: []byte(k), Value: fmt.Appendf(nil, `{"key":%d,"value":"%d"}`, i, i), Change: runtime.ChangeInsert}
		if err := j.ProcessBroadcastElement(ctx, r, nil); err != nil {
			b.Fatal(err)
		}
	}
	recs := nexmarkQ13Bids(4096)
	out := &countCollector{}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := range b.N {
		rec := recs[i%len(recs)]
		rec.SetDecoded(runtime.ValidJSON{})
		if err := j.ProcessElement(ctx, rec, out); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	if out.n != b.N {
		b.Fatalf("%d outputs for %d bids", out.n, b.N)
	}
}

// nexmarkQ13Bids returns n bid events as the bench's Nexmark generator
// writes them (internal/bench, NexmarkEvent.AppendJSON): auctions from
// 1000 up, half of them on a hot auction, with a channel, a url and an
// extra of about 100 bytes.
func nexmarkQ13Bids(n int) []runtime.Record {
	rng := rand.New(rand.NewPCG(13, 19))
	recs := make([]runtime.Record, n)
	extra := strings.Repeat("abcdefghij", 10)
	for i := range recs {
		auction := 1000 + rng.Int64N(60_000)
		if rng.IntN(2) == 0 {
			auction = 1000 + int64(i/100)
		}
		ts := int64(1_700_000_000_000 + i*100)
		v := fmt.Appendf(nil, `{"event_type":2,"bid":{"auction":%d,"bidder":%d,"price":%d,"channel":"channel-%d","url":"https://www.nexmark.com/abcd/efgh/item.htm?query=1&channel_id=%d","dateTime":%d,"extra":"%s"}}`,
			auction, 1000+rng.Int64N(20_000), 100+rng.Int64N(10_000_000), i%10_000, rng.Int32(), ts, extra[:80+rng.IntN(20)])
		recs[i] = runtime.Record{Key: nil, Value: v, Timestamp: time.UnixMilli(ts)}
	}
	return recs
}
