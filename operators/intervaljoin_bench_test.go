package operators

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// BenchmarkIntervalJoinHotKey measures an interval join (inner, bounds
// [-5ms, +5ms]) whose one key holds 20,000 left rows (one per ms, ~100
// bytes each) in a steady state: per op one left record at the next ms, a
// right record every 100th op (pairing with 11 left rows), and a watermark
// that fires the cleanup timer of the oldest left row, so 20,000 rows stay
// buffered. With the rows of a key in one list every op decoded and
// rewrote all of them; by time it reads only the buckets it needs.
func BenchmarkIntervalJoinHotKey(b *testing.B) {
	const buffered = 20_000
	for _, backend := range backends {
		b.Run(backend, func(b *testing.B) {
			ctx := context.Background()
			ch := runtime.NewChannel(1 << 16)
			out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
			j := NewIntervalJoin(IntervalJoinParams{Lower: -5 * time.Millisecond, Upper: 5 * time.Millisecond})
			op := NewKeyedCoProcessOperator(OpenContext{Operator: "j", Parallelism: 1}, opener(backend, b.TempDir()), nil, j, out)
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
			key := []byte("auction-1")
			send := func(side int, ts int64) {
				v := fmt.Appendf(nil, `{"auction":1,"bidder":%d,"price":%d,"channel":"Google","url":"https://www.nexmark.com/x/y/z","ts":%d}`, ts%977, ts%10007, ts)
				if err := op.ProcessRecord(ctx, side, runtime.Record{Key: key, Value: v, Timestamp: time.UnixMilli(ts)}); err != nil {
					b.Fatal(err)
				}
			}
			step := func(ts int64) {
				send(0, ts)
				if ts%100 == 0 {
					send(1, ts)
				}
				if ts > buffered {
					// The left row at ts - buffered reaches the end of its interval.
					if err := op.ProcessWatermark(ctx, time.UnixMilli(ts-buffered+5)); err != nil {
						b.Fatal(err)
					}
				}
			}
			ts := int64(1)
			for ; ts <= buffered; ts++ {
				step(ts)
				if ts%1000 == 0 {
					drain()
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				step(ts)
				ts++
				if i%1000 == 0 {
					drain()
				}
			}
			b.StopTimer()
			if n := j.BufferedRows(); n < buffered || n > buffered+buffered/50 {
				b.Fatalf("%d rows buffered, want about %d", n, buffered)
			}
		})
	}
}

// BenchmarkIntervalJoinManyKeys measures the interval join (inner, bounds
// [-20ms, +20ms], as the interval-join bench scenario) over 10,000 keys
// with few rows each: per op one record of a pseudo-random key and side
// at the next ms, and every 100th op a watermark 100 ms behind, so a key
// holds a row or two and most records pair with nothing or one row.
func BenchmarkIntervalJoinManyKeys(b *testing.B) {
	benchIntervalJoinKeys(b, IntervalJoinParams{Lower: -20 * time.Millisecond, Upper: 20 * time.Millisecond},
		50_000, 100, 100*time.Millisecond, func(i int) (int, runtime.Record) {
			h := uint64(i) * 0x9E3779B97F4A7C15
			ts := int64(1_000 + i)
			return int(h>>60) & 1, runtime.Record{Key: fmt.Appendf(nil, "key-%05d", (h>>20)%10_000), Timestamp: time.UnixMilli(ts),
				Value: fmt.Appendf(nil, `{"id":%d,"amount":%d,"ts":%d}`, i, h%1000, ts)}
		})
}

// BenchmarkIntervalJoinScenario measures the interval join as the
// interval-join bench scenario runs it: inner, bounds [-20ms, +20ms],
// select {"l": left.id, "r": right.id}, 10,000 keys, 1,000 records per ms
// of event time (100 per key per second, even ids left and odd right),
// a watermark 1 ms behind the newest record after every 1,000 records.
// A key then holds about two rows per side and a record makes about one
// pair. Per op one record.
func BenchmarkIntervalJoinScenario(b *testing.B) {
	sel, err := CompileExpression(`{"l": left.id, "r": right.id}`)
	if err != nil {
		b.Fatal(err)
	}
	benchIntervalJoinKeys(b, IntervalJoinParams{Lower: -20 * time.Millisecond, Upper: 20 * time.Millisecond, Select: sel},
		200_000, 1000, time.Millisecond, func(i int) (int, runtime.Record) {
			h := uint64(i) * 0x9E3779B97F4A7C15
			ts := int64(1_000 + i/1000)
			return i & 1, runtime.Record{Key: fmt.Appendf(nil, "k%06d", (h>>20)%10_000), Timestamp: time.UnixMilli(ts),
				Value: fmt.Appendf(nil, `{"id":%d,"key":"k%06d","shape":"CIRCLE","amount":%d,"note":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`, i, (h>>20)%10_000, h%1000)}
		})
}

// benchIntervalJoinKeys runs an interval join of params on every backend:
// record i (and its input, 0 left or 1 right) from record, after every
// wmEvery records a watermark lag behind the last record's timestamp and
// the output drained. The first warm records are sent before the timer
// starts; per op one record.
func benchIntervalJoinKeys(b *testing.B, params IntervalJoinParams, warm, wmEvery int, lag time.Duration, record func(i int) (int, runtime.Record)) {
	for _, backend := range backends {
		b.Run(backend, func(b *testing.B) {
			ctx := context.Background()
			ch := runtime.NewChannel(1 << 16)
			out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
			j := NewIntervalJoin(params)
			op := NewKeyedCoProcessOperator(OpenContext{Operator: "j", Parallelism: 1}, opener(backend, b.TempDir()), nil, j, out)
			op.SetMailbox(runtime.NewMailbox())
			if err := op.Open(ctx); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = op.Close() }()
			step := func(i int) {
				side, rec := record(i)
				if err := op.ProcessRecord(ctx, side, rec); err != nil {
					b.Fatal(err)
				}
				if i%wmEvery == wmEvery-1 {
					if err := op.ProcessWatermark(ctx, rec.Timestamp.Add(-lag)); err != nil {
						b.Fatal(err)
					}
					for len(ch) > 0 {
						<-ch
					}
				}
			}
			for i := range warm {
				step(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for i := range b.N {
				step(warm + i)
			}
			b.StopTimer()
			// CPU per op (the process's, Pebble's goroutines included):
			// steadier than ns/op on a loaded machine.
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU returns the user and system CPU time the process used so
// far, ns.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
