package operators

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// BenchmarkWindowJoin measures a tumbling 2 s window join (inner) in the
// shape of Nexmark q5's: per op one left record (~60 bytes) of one of 4
// keys, at 1 ms steps of event time, so each key's window collects 500
// left rows; one right record per key and window; the watermark at each
// window's end fires the window's timers, which emit the 500 pairs of each
// key (2 s x 1 op per ms / 4 keys). ns/op is the cost per left record, its share of the timer's read
// and emission included. With a window's rows in one list per key the
// record read and rewrote the list (cost growing with the rows already
// there); appended, it writes its row only. rows=8 is the other end
// (Nexmark q8: few rows per key and window, here 250 keys). No checkpoint
// is taken, so the Pebble write cache never flushes.
func BenchmarkWindowJoin(b *testing.B) {
	for _, shape := range []struct {
		name string
		keys int
	}{{"rows=500", 4}, {"rows=8", 250}} {
		for _, backend := range backends {
			b.Run(shape.name+"/"+backend, func(b *testing.B) {
				ctx := context.Background()
				ch := runtime.NewChannel(1 << 16)
				out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
				out.AddSideWriter(LateOutput, runtime.NewWriter([]runtime.Channel{runtime.NewChannel(16)}, runtime.ForwardPartitioner{}))
				j := NewWindowJoin(WindowJoinParams{Kind: Tumbling, Size: 2 * time.Second, Join: JoinInner})
				op := NewKeyedCoProcessOperator(OpenContext{Operator: "wj", Parallelism: 1}, opener(backend, b.TempDir()), nil, j, out)
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
				keys := make([][]byte, shape.keys)
				for k := range keys {
					keys[k] = fmt.Appendf(nil, "%d", 1_000_000+k)
				}
				step := func(i int) {
					ts := int64(i) // 1 ms per op, the keys round robin
					k := keys[i%len(keys)]
					v := fmt.Appendf(nil, `{"auction":%d,"num":%d,"window":%d}`, i, i%97, ts/2000)
					if err := op.ProcessRecord(ctx, 0, runtime.Record{Key: k, Value: v, Timestamp: time.UnixMilli(ts)}); err != nil {
						b.Fatal(err)
					}
					if ts%2000 < int64(len(keys)) { // the window's right row of this key
						if err := op.ProcessRecord(ctx, 1, runtime.Record{Key: k, Value: fmt.Appendf(nil, `{"maxn":%d}`, ts%97), Timestamp: time.UnixMilli(ts)}); err != nil {
							b.Fatal(err)
						}
					}
					if ts%2000 == 1999 {
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
			})
		}
	}
}
