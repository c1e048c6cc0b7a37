package operators

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// timerFn registers, per record, an event-time timer at its timestamp plus
// 10s (or deletes it when the value is "delete", or registers a
// processing-time timer 50ms ahead when it is "proc"), counts the key's
// records in a ValueState, and on a timer emits "<key>@<ms> <domain>
// n=<count>" and clears the count.
type timerFn struct {
	ts    TimerService
	n     state.ValueState[int64]
	proc  time.Time
	onBrd error
}

func (f *timerFn) Open(ctx OpenContext) error {
	f.ts = ctx.TimerService()
	if f.ts == nil {
		return errors.New("no timer service")
	}
	var err error
	f.n, err = state.GetValueState(ctx.Backend, state.ValueStateDescriptor[int64]{Name: "n", Serializer: state.Int64Serializer{}})
	return err
}

func (f *timerFn) ProcessElement(_ context.Context, rec runtime.Record, _ Collector) error {
	at := rec.Timestamp.Add(10 * time.Second)
	switch string(rec.Value) {
	case "delete":
		return f.ts.DeleteEventTimeTimer(at)
	case "proc":
		f.proc = f.ts.CurrentProcessingTime().Add(50 * time.Millisecond)
		if err := f.ts.RegisterProcessingTimeTimer(f.proc); err != nil {
			return err
		}
	default:
		if err := f.ts.RegisterEventTimeTimer(at); err != nil {
			return err
		}
	}
	n, _, err := f.n.Value()
	if err != nil {
		return err
	}
	return f.n.Update(n + 1)
}

func (f *timerFn) ProcessBroadcastElement(context.Context, runtime.Record, Collector) error {
	f.onBrd = f.ts.RegisterEventTimeTimer(time.UnixMilli(1))
	return nil
}

func (f *timerFn) OnTimer(_ context.Context, ts time.Time, tc TimerContext, out Collector) error {
	n, _, err := f.n.Value()
	if err != nil {
		return err
	}
	if err := f.n.Clear(); err != nil {
		return err
	}
	return out.Collect(runtime.Record{Key: tc.Key, Value: fmt.Appendf(nil, "%s@%d %s n=%d", tc.Key, ts.UnixMilli(), tc.Domain, n), Timestamp: ts})
}

func at(key string, ms int64, v string) runtime.Record {
	return runtime.Record{Key: []byte(key), Value: []byte(v), Timestamp: time.UnixMilli(ms)}
}

// TestEventTimeTimers: timers fire once the watermark reaches them, in
// time order, once per key and time however often registered, not when
// deleted; they survive a snapshot and restore; none fires early; no state
// is left after the last.
func TestEventTimeTimers(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind, t.TempDir(), nil, &timerFn{}, 64)
			h.process(at("k1", 1000, "x"), at("k2", 2000, "x"), at("k1", 1000, "x"), at("k3", 5000, "x"), at("k4", 7000, "x"), at("k4", 7000, "delete"))
			wm := func(h *harness, ms int64) []string {
				t.Helper()
				if err := h.op.ProcessWatermark(h.ctx, time.UnixMilli(ms)); err != nil {
					t.Fatal(err)
				}
				return values(h.emitted())
			}
			if got := wm(h, 10_999); len(got) != 0 {
				t.Fatalf("watermark 10999 fired %v", got)
			}
			want := []string{"k1@11000 event_time n=2", "k2@12000 event_time n=1"}
			if got := wm(h, 12_000); !reflect.DeepEqual(got, want) {
				t.Fatalf("watermark 12000 fired %q, want %q", got, want)
			}
			r := snapshotRestore(t, h)
			h2 := newHarness(t, kind, t.TempDir(), r, &timerFn{}, 64)
			if got := wm(h2, 14_999); len(got) != 0 {
				t.Fatalf("restored: watermark 14999 fired %v", got)
			}
			want = []string{"k3@15000 event_time n=1"}
			if got := wm(h2, 20_000); !reflect.DeepEqual(got, want) {
				t.Fatalf("restored: watermark 20000 fired %q, want %q (k4's timer was deleted)", got, want)
			}
			// k4's count is still there (its timer was deleted); clear it.
			n, err := state.EntryCount(h2.op.backend)
			if err != nil || n != 1 {
				t.Fatalf("entries after the timers: %d (%v), want 1 (k4's count)", n, err)
			}
			h2.finish()
		})
	}
}

// TestProcessingTimeTimerOnIdleStream: a processing-time timer fires
// through the mailbox with no record after the one that registered it.
func TestProcessingTimeTimerOnIdleStream(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h := &harness{t: t, mb: runtime.NewMailbox(), ch: runtime.NewChannel(8), ctx: context.Background()}
			out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{h.ch}, runtime.ForwardPartitioner{}))
			fn := &timerFn{}
			h.op = NewKeyedProcessOperator(OpenContext{Operator: "op", Parallelism: 1}, opener(kind, t.TempDir()), nil, fn, out)
			h.op.SetMailbox(h.mb)
			if err := h.op.Open(h.ctx); err != nil {
				t.Fatal(err)
			}
			h.process(at("idle", 0, "proc"))
			ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
			defer cancel()
			if err := h.mb.Yield(ctx); err != nil { // blocks until the timer posts
				t.Fatalf("no processing-time timer fired: %v", err)
			}
			want := []string{fmt.Sprintf("idle@%d processing_time n=1", fn.proc.UnixMilli())}
			if got := values(h.finish()); !reflect.DeepEqual(got, want) {
				t.Fatalf("fired %q, want %q", got, want)
			}
			if now := time.Now(); now.Before(fn.proc.Truncate(time.Millisecond)) { // timers have ms resolution
				t.Fatalf("fired at %v, before its time %v", now, fn.proc)
			}
		})
	}
}

// TestTimersRefusedOnBroadcastSide: ProcessBroadcastElement gets
// ErrNoTimerKey; the keyed side of the same function registers timers.
func TestTimersRefusedOnBroadcastSide(t *testing.T) {
	ch := runtime.NewChannel(8)
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
	fn := &timerFn{}
	op := NewKeyedBroadcastOperator(OpenContext{Operator: "op", Parallelism: 1}, opener(state.KindHashmap, ""), nil, fn, out)
	ctx := context.Background()
	if err := op.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if err := op.ProcessRecord(ctx, 0, at("k", 0, "x")); err != nil {
		t.Fatal(err)
	}
	if err := op.ProcessRecord(ctx, 1, at("", 0, "rule")); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(fn.onBrd, ErrNoTimerKey) {
		t.Fatalf("broadcast side registered a timer: %v, want ErrNoTimerKey", fn.onBrd)
	}
	if err := op.ProcessWatermark(ctx, time.UnixMilli(10_000)); err != nil {
		t.Fatal(err)
	}
	if el := <-ch; string(el.Record.Value) != "k@10000 event_time n=1" {
		t.Fatalf("keyed side timer fired %q", el.Record.Value)
	}
}
