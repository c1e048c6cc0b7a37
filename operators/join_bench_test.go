package operators

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// BenchmarkRegularJoinNexmarkQ4 measures the regular join in the shape of
// Nexmark q4's (and q20's): the left side one auction row (~300 bytes of
// JSON) per key, the right side the auction's bids (~200 bytes each),
// kept without state_ttl; per op one bid, half of them for the hot auction
// (the newest multiple of 100 of the auctions, so about 800 bids of one key
// before it moves on), the others for one of the last 100 auctions, and an
// auction every 15 bids. Each bid emits its pair with the auction. ns/op is
// the cost per bid on Pebble, the write cache flushed (a checkpoint's
// synchronous part) every 10,000 bids as the bench's 1 s checkpoints do.
func BenchmarkRegularJoinNexmarkQ4(b *testing.B) {
	ctx := context.Background()
	ch := runtime.NewChannel(1 << 16)
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
	var sel Expression
	if err := sel.UnmarshalText([]byte(`{"open": right.bid.dateTime >= left.auction.dateTime && right.bid.dateTime <= left.auction.expires, "id": left.auction.id, "category": left.auction.category, "price": right.bid.price}`)); err != nil {
		b.Fatal(err)
	}
	j := NewRegularJoin(JoinParams{Join: JoinInner, Select: sel})
	op := NewKeyedCoProcessOperator(OpenContext{Operator: "join", Parallelism: 1}, opener(state.KindPebble, b.TempDir()), nil, j, out)
	op.SetMailbox(runtime.NewMailbox())
	if err := op.Open(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = op.Close() }()
	drain := func() {
		for {
			select {
			case <-ch:
			default:
				return
			}
		}
	}
	chkDir := b.TempDir()
	const first = 1000
	auctions := int64(first)
	addAuction := func(ts int64) {
		id := auctions
		auctions++
		v := fmt.Appendf(nil, `{"event_type":1,"person":null,"auction":{"id":%d,"itemName":"gqkwzfolmbvpzqlnmejx","description":"ouyrsjwthcktqqmfxkzrkbmaxerqvvbdyxqnwmeghglgspkgygmuvhxlvpnljzfdeqvhslabyafpo","initialBid":%d,"reserve":%d,"dateTime":%d,"expires":%d,"seller":%d,"category":%d,"extra":"bnqgimxqzbfvdyfdxzjgmyhcfzlwcdnoaqqdhyzyffesfmtahwlwl"},"bid":null}`,
			id, 100+id%977, 300+id%977, ts, ts+20_000, 1000+id%313, 10+id%5)
		if err := op.ProcessRecord(ctx, 0, runtime.Record{Key: fmt.Appendf(nil, "%d", id), Value: v, Timestamp: time.UnixMilli(ts)}); err != nil {
			b.Fatal(err)
		}
	}
	for range 100 {
		addAuction(0)
	}
	step := func(i int) {
		ts := int64(i)
		if i%15 == 0 {
			addAuction(ts)
		}
		id := auctions - 1 - int64(i*7919%100)
		if i%2 == 0 {
			id = (auctions-1-first)/100*100 + first
		}
		v := fmt.Appendf(nil, `{"event_type":2,"person":null,"auction":null,"bid":{"auction":%d,"bidder":%d,"price":%d,"channel":"Google","url":"https://www.nexmark.com/xrvt/ucz/item.htm?query=1","dateTime":%d,"extra":"zkqgklrdffxvnyxgmhjhsbqdjglyqktcvbn%d"}}`,
			id, 2000+i%991, 100+i%10007, ts, i)
		if err := op.ProcessRecord(ctx, 1, runtime.Record{Key: fmt.Appendf(nil, "%d", id), Value: v, Timestamp: time.UnixMilli(ts)}); err != nil {
			b.Fatal(err)
		}
		if i%10_000 == 9_999 {
			finish, err := op.SnapshotState(ctx, &runtime.Barrier{CheckpointID: int64(i/10_000 + 1), Dir: chkDir})
			if err == nil {
				_, err = finish(ctx)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if i%1024 == 0 {
			drain()
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := processCPU()
	for i := range b.N {
		step(i)
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
	drain()
}
