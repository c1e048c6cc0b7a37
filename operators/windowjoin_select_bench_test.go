package operators

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// BenchmarkWindowJoinSelect measures window_join in Nexmark q8's shape
// with its select: a tumbling 10 s inner join of persons (left) and
// sellers' auctions (right), each person its own key with one auction of
// the seller in the person's window, and q8's select
// {"id": left.person.id, "name": left.person.name, "starttime":
// window_start}, which reads nested fields and the window's start (the
// raw select writes it; before, window_join always evaluated select).
// Per op one person and one auction (~190 and ~230 bytes as the bench's
// generator writes them), at 1 ms steps; the watermark every 1,000 ops
// fires the due windows' timers, each emitting its key's pair. ns/op is
// the cost per pair: both appends, the timer and the output.
func BenchmarkWindowJoinSelect(b *testing.B) {
	for _, backend := range backends {
		b.Run(backend, func(b *testing.B) {
			ctx := context.Background()
			ch := runtime.NewChannel(1 << 16)
			out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
			out.AddSideWriter(LateOutput, runtime.NewWriter([]runtime.Channel{runtime.NewChannel(16)}, runtime.ForwardPartitioner{}))
			sel, err := CompileExpression(`{"id": left.person.id, "name": left.person.name, "starttime": window_start}`)
			if err != nil {
				b.Fatal(err)
			}
			j := NewWindowJoin(WindowJoinParams{Kind: Tumbling, Size: 10 * time.Second, Join: JoinInner, Select: sel})
			op := NewKeyedCoProcessOperator(OpenContext{Operator: "wj", Parallelism: 1}, opener(backend, b.TempDir()), nil, j, out)
			op.SetMailbox(runtime.NewMailbox())
			if err := op.Open(ctx); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = op.Close() }()
			outputs := 0
			drain := func() {
				for {
					select {
					case <-ch:
						outputs++
					default:
						return
					}
				}
			}
			step := func(i int) {
				ts := int64(i)
				id := 1000 + i
				key := fmt.Appendf(nil, "%d", id) // fresh buffers, as a source's records
				person := fmt.Appendf(nil, `{"event_type":0,"person":{"id":%d,"name":"Walter Shultz","emailAddress":"wshultz@example.com","creditCard":"1234 5678 9012 3456","city":"Boise","state":"ID","dateTime":%d,"extra":"xxxxxxxxxxxxxxxx"}}`, id, ts)
				auction := fmt.Appendf(nil, `{"event_type":1,"auction":{"id":%d,"itemName":"item","description":"desc","initialBid":100,"reserve":200,"dateTime":%d,"expires":%d,"seller":%d,"category":10,"extra":"xxxxxxxxxxxxxxxx"}}`, 5000+i, ts, ts+10000, id)
				rec := runtime.Record{Key: key, Value: person, Timestamp: time.UnixMilli(ts)}
				rec.SetDecoded(runtime.ValidJSON{})
				if err := op.ProcessRecord(ctx, 0, rec); err != nil {
					b.Fatal(err)
				}
				rec = runtime.Record{Key: key, Value: auction, Timestamp: time.UnixMilli(ts)}
				rec.SetDecoded(runtime.ValidJSON{})
				if err := op.ProcessRecord(ctx, 1, rec); err != nil {
					b.Fatal(err)
				}
				if ts%1000 == 999 {
					if err := op.ProcessWatermark(ctx, time.UnixMilli(ts)); err != nil {
						b.Fatal(err)
					}
					drain()
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				step(i)
			}
			b.StopTimer()
			drain()
			if b.N >= 20_000 && outputs == 0 {
				b.Fatal("no output")
			}
		})
	}
}
