package operators

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// elementsText renders what an operator emitted: rows as "<change>
// <value>", watermarks as "wm <ms>".
func elementsText(ch runtime.Channel) []string {
	var got []string
	for {
		select {
		case el := <-ch:
			switch el.Kind {
			case runtime.KindRecord:
				got = append(got, el.Record.Change.String()+" "+string(el.Record.Value))
			case runtime.KindWatermark:
				got = append(got, fmt.Sprintf("wm %d", el.Watermark.UnixMilli()))
			default:
				got = append(got, el.Kind.String())
			}
			continue
		default:
		}
		return got
	}
}

// TestAggregateMiniBatchAllowLatencyMailbox: with allow_latency a batch
// ends with no further input, from the task's mailbox: a record is
// buffered and a watermark arriving after it is held (ErrWatermarkHeld,
// nothing emitted); once the wake-up posted to the mailbox, running the
// mail emits the key's row and then the held watermark. The next batch
// arms a wake-up again. An idle status ends the batch too (its row and
// held watermark precede the idle status), and so does end of input. On
// both backends.
func TestAggregateMiniBatchAllowLatencyMailbox(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			mb := runtime.NewMailbox()
			ch := runtime.NewChannel(64)
			out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
			f := NewAggregate(AggregateParams{Aggregates: []AggregateSpec{{Name: "n", Fn: AggCount}},
				MiniBatch: &MiniBatchParams{Size: 1000, AllowLatency: time.Millisecond}}, false)
			op := NewKeyedProcessOperator(OpenContext{Operator: "op", Parallelism: 1}, opener(kind, t.TempDir()), nil, f, out)
			op.SetMailbox(mb)
			if err := op.Open(ctx); err != nil {
				t.Fatal(err)
			}
			defer op.Close()
			wait := func() {
				t.Helper()
				select {
				case <-mb.Ready():
				case <-time.After(time.Minute): // a guard, not a timing check: 1ms is due long before
					t.Fatal("no allow_latency wake-up in the mailbox")
				}
				mb.TryYieldAll()
				if err := mb.Err(); err != nil {
					t.Fatal(err)
				}
			}
			expect := func(want ...string) {
				t.Helper()
				if got := elementsText(ch); !slices.Equal(got, want) {
					t.Fatalf("emitted %q, want %q", got, want)
				}
			}
			record := func(k string) {
				t.Helper()
				if err := op.ProcessRecord(ctx, 0, changed(runtime.ChangeInsert, k, 1, "u")); err != nil {
					t.Fatal(err)
				}
			}
			watermark := func(ms int64, want error) {
				t.Helper()
				if err := op.ProcessWatermark(ctx, time.UnixMilli(ms)); err != want {
					t.Fatalf("ProcessWatermark(%d) = %v, want %v", ms, err, want)
				}
			}
			record("k1")
			watermark(5, runtime.ErrWatermarkHeld)
			record("k2")
			watermark(7, runtime.ErrWatermarkHeld)
			expect()
			wait()
			expect(`+I {"key":"k1","n":1}`, `+I {"key":"k2","n":1}`, "wm 7")
			watermark(8, nil) // no batch open: handled at once, the task forwards it
			expect()

			record("k1")
			wait()
			expect(`-U {"key":"k1","n":1}`, `+U {"key":"k1","n":2}`)

			record("k2")
			watermark(9, runtime.ErrWatermarkHeld)
			if err := op.ProcessIdle(ctx); err != nil {
				t.Fatal(err)
			}
			expect(`-U {"key":"k2","n":1}`, `+U {"key":"k2","n":2}`, "wm 9")

			record("k3")
			watermark(10, runtime.ErrWatermarkHeld)
			if err := op.EndInput(ctx); err != nil {
				t.Fatal(err)
			}
			expect(`+I {"key":"k3","n":1}`, "wm 10")
			if f.BundleRecords() != 0 || op.bundle.holding {
				t.Fatalf("after end of input: %d records buffered, holding %t", f.BundleRecords(), op.bundle.holding)
			}
		})
	}
}

// TestAggregateMiniBatchMaxBytes: a batch ends once its buffered inputs
// reach max_bytes, whatever its size: with last over a 3,000-byte field
// and max_bytes 10,000, the fourth record ends the batch (three hold
// about 9,300 bytes), and its keys' rows come out then, not before.
func TestAggregateMiniBatchMaxBytes(t *testing.T) {
	ctx := context.Background()
	ch := runtime.NewChannel(64)
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
	f := NewAggregate(AggregateParams{Aggregates: []AggregateSpec{{Name: "n", Fn: AggCount}, {Name: "u", Fn: AggLast, Of: compiled(t, "user")}},
		MiniBatch: &MiniBatchParams{Size: 1000, MaxBytes: 10_000}}, false)
	op := NewKeyedProcessOperator(OpenContext{Operator: "op", Parallelism: 1}, opener(state.KindHashmap, t.TempDir()), nil, f, out)
	if err := op.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	big := strings.Repeat("x", 3000)
	for i := range 4 {
		if n := len(elementsText(ch)); n > 0 {
			t.Fatalf("%d rows emitted after %d records (%d bytes buffered)", n, i, f.batch.bytes)
		}
		if err := op.ProcessRecord(ctx, 0, changed(runtime.ChangeInsert, fmt.Sprintf("k%d", i%2), 1, big)); err != nil {
			t.Fatal(err)
		}
	}
	if got := elementsText(ch); len(got) != 2 || f.BundleRecords() != 0 {
		t.Fatalf("after 4 records of %d bytes: emitted %d rows, %d records buffered; want 2 rows (k0, k1), none buffered", len(big), len(got), f.BundleRecords())
	}
}
