package operators

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// heldRecorder is an operator chained after the aggregate: it records
// every element it sees, in order, as elementsText renders them (plus
// "idle" for an idle status).
type heldRecorder struct{ got []string }

func (r *heldRecorder) Open(context.Context) error { return nil }
func (r *heldRecorder) Close() error               { return nil }
func (r *heldRecorder) ProcessRecord(_ context.Context, _ int, rec runtime.Record) error {
	r.got = append(r.got, rec.Change.String()+" "+string(rec.Value))
	return nil
}
func (r *heldRecorder) ProcessWatermark(_ context.Context, wm time.Time) error {
	r.got = append(r.got, fmt.Sprintf("wm %d", wm.UnixMilli()))
	return nil
}
func (r *heldRecorder) ProcessIdle(context.Context) error {
	r.got = append(r.got, "idle")
	return nil
}
func (r *heldRecorder) EndInput(context.Context) error {
	r.got = append(r.got, "end-of-input")
	return nil
}

// passOperator emits every record it gets to out (a stateless head the
// aggregate is chained after).
type passOperator struct{ out *runtime.Output }

func (p *passOperator) Open(context.Context) error     { return nil }
func (p *passOperator) Close() error                   { return nil }
func (p *passOperator) EndInput(context.Context) error { return nil }
func (p *passOperator) ProcessRecord(ctx context.Context, _ int, rec runtime.Record) error {
	return p.out.Emit(ctx, rec)
}

// TestAggregateMiniBatchHeldWatermarkInTask drives the aggregate with
// allow_latency (1h: only size, barriers, idle and end of input end a
// batch here) in a real OperatorTask with two input channels (at the
// task's head, and chained after a pass-through head), its rows going to
// a channel and to a chained operator after it. The input is
// handed over one element at a time (unbuffered channels), so the task
// sees it in this order:
//
//	ch0 +I k1, ch0 wm 5, ch1 wm 3 (valve 3: held), ch1 +I k2, ch1 wm 6
//	(valve 5: held), barrier 1 on both (the batch ends before the
//	snapshot: rows, wm 5, then the barrier), ch0 wm 7 (valve 6, no batch:
//	forwarded at once), ch0 +I k1, ch1 idle (valve 7: held), ch0 idle
//	(all idle: rows, wm 7, then idle), ch1 +I k3 (active again), ch1 wm 9
//	(held), end of input on both (rows, wm 9, end of input).
//
// Downstream and the chained operator must both see exactly that: every
// watermark once, increasing, after the rows of the records before it,
// before the barrier and the idle status that ended its batch; nothing
// held is lost at end of input. On both backends.
func TestAggregateMiniBatchHeldWatermarkInTask(t *testing.T) {
	want := []string{
		`+I {"key":"k1","n":1}`, `+I {"key":"k2","n":1}`, "wm 5", "barrier",
		"wm 6",
		`-U {"key":"k1","n":1}`, `+U {"key":"k1","n":2}`, "wm 7", "idle",
		`+I {"key":"k3","n":1}`, "wm 9", "end-of-input",
	}
	for _, tc := range []struct {
		kind    string
		chained bool
	}{{state.KindHashmap, false}, {state.KindPebble, false}, {state.KindHashmap, true}, {state.KindPebble, true}} {
		t.Run(fmt.Sprintf("%s/chained=%t", tc.kind, tc.chained), func(t *testing.T) {
			kind := tc.kind
			ctx := context.Background()
			ch0, ch1 := make(runtime.Channel), make(runtime.Channel)
			down := runtime.NewChannel(256)
			out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{down}, runtime.ForwardPartitioner{}))
			rec := &heldRecorder{}
			after := &runtime.ChainedOperator{ID: runtime.TaskID{Operator: "after"}, Operator: rec}
			out.AddChained(after)
			f := NewAggregate(AggregateParams{Aggregates: []AggregateSpec{{Name: "n", Fn: AggCount}},
				MiniBatch: &MiniBatchParams{Size: 1000, AllowLatency: time.Hour}}, false)
			op := NewKeyedProcessOperator(OpenContext{Operator: "agg", Parallelism: 1}, opener(kind, t.TempDir()), nil, f, out)
			cfg := runtime.OperatorTaskConfig{
				ID:       runtime.TaskID{Operator: "agg"},
				Gate:     runtime.NewInputGate([]runtime.InputChannel{{Ch: ch0}, {Ch: ch1}}),
				Operator: op, Output: out, BootstrapInput: -1,
				Chain: runtime.Chain{after},
			}
			if tc.chained { // the aggregate chained after a pass-through head
				headOut := runtime.NewOutput(nil)
				agg := &runtime.ChainedOperator{ID: runtime.TaskID{Operator: "agg"}, Operator: op, Output: out}
				headOut.AddChained(agg)
				cfg.ID, cfg.Operator, cfg.Output = runtime.TaskID{Operator: "head"}, &passOperator{out: headOut}, headOut
				cfg.Chain = runtime.Chain{agg, after}
			}
			task := runtime.NewOperatorTask(cfg)
			done := make(chan error, 1)
			go func() { done <- task.Run(ctx, nil) }()
			wm := func(ms int64) runtime.Element {
				return runtime.Element{Kind: runtime.KindWatermark, Watermark: time.UnixMilli(ms)}
			}
			record := func(k string) runtime.Element {
				return runtime.Element{Kind: runtime.KindRecord, Record: changed(runtime.ChangeInsert, k, 1, "u")}
			}
			idle := runtime.Element{Kind: runtime.KindWatermark, Idle: true}
			barrier := runtime.Element{Kind: runtime.KindBarrier, Barrier: &runtime.Barrier{CheckpointID: 1, Dir: t.TempDir()}}
			eoi := runtime.Element{Kind: runtime.KindEndOfInput}
			for _, step := range []struct {
				ch runtime.Channel
				el runtime.Element
			}{
				{ch0, record("k1")}, {ch0, wm(5)}, {ch1, wm(3)}, {ch1, record("k2")}, {ch1, wm(6)},
				{ch0, barrier}, {ch1, barrier},
				{ch0, wm(7)}, {ch0, record("k1")}, {ch1, idle}, {ch0, idle},
				{ch1, record("k3")}, {ch1, wm(9)},
				{ch0, eoi}, {ch1, eoi},
			} {
				select {
				case step.ch <- step.el:
				case err := <-done:
					t.Fatalf("task ended before its input: %v", err)
				}
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if got := drainElements(down); !slices.Equal(got, want) {
				t.Errorf("downstream got\n%q\nwant\n%q", got, want)
			}
			if !slices.Equal(rec.got, wantChained(want)) {
				t.Errorf("chained operator got\n%q\nwant\n%q", rec.got, wantChained(want))
			}
		})
	}
}

// wantChained is want without the barrier (the chained operator is no
// Snapshotter: it does not record barriers).
func wantChained(want []string) []string {
	return slices.DeleteFunc(slices.Clone(want), func(s string) bool { return s == "barrier" })
}

// drainElements renders what is in ch (elementText) until it is empty.
func drainElements(ch runtime.Channel) []string {
	var got []string
	for {
		select {
		case el := <-ch:
			got = append(got, elementText(el)...)
			continue
		default:
		}
		return got
	}
}

// elementText renders el: rows as "<change> <value>" (a batch record by
// record), watermarks as "wm <ms>", an idle status as "idle", others by
// kind.
func elementText(el runtime.Element) []string {
	switch el.Kind {
	case runtime.KindRecord:
		return []string{el.Record.Change.String() + " " + string(el.Record.Value)}
	case runtime.KindRecords:
		var got []string
		for _, r := range el.Batch.Records {
			got = append(got, r.Change.String()+" "+string(r.Value))
		}
		return got
	case runtime.KindWatermark:
		if el.Idle {
			return []string{"idle"}
		}
		return []string{fmt.Sprintf("wm %d", el.Watermark.UnixMilli())}
	}
	return []string{el.Kind.String()}
}

// TestAggregateMiniBatchWakeUpInTask: in a running OperatorTask whose
// input has gone quiet (blocked in the gate), the allow_latency wake-up
// (1ms) posted to the task's mailbox ends the batch: the row and then the
// held watermark reach the downstream channel with no further input (the
// task flushes its output before it blocks again). Then end of input.
func TestAggregateMiniBatchWakeUpInTask(t *testing.T) {
	ctx := context.Background()
	in, down := runtime.NewChannel(8), runtime.NewChannel(64)
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{down}, runtime.ForwardPartitioner{}))
	f := NewAggregate(AggregateParams{Aggregates: []AggregateSpec{{Name: "n", Fn: AggCount}},
		MiniBatch: &MiniBatchParams{Size: 1000, AllowLatency: time.Millisecond}}, false)
	op := NewKeyedProcessOperator(OpenContext{Operator: "agg", Parallelism: 1}, opener(state.KindHashmap, t.TempDir()), nil, f, out)
	task := runtime.NewOperatorTask(runtime.OperatorTaskConfig{
		ID: runtime.TaskID{Operator: "agg"}, Gate: runtime.NewInputGate([]runtime.InputChannel{{Ch: in}}),
		Operator: op, Output: out, BootstrapInput: -1,
	})
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx, nil) }()
	in <- runtime.Element{Kind: runtime.KindRecord, Record: changed(runtime.ChangeInsert, "k1", 1, "u")}
	in <- runtime.Element{Kind: runtime.KindWatermark, Watermark: time.UnixMilli(5)}
	var got []string
	for !slices.Contains(got, "wm 5") {
		select {
		case el := <-down:
			got = append(got, elementText(el)...)
		case err := <-done:
			t.Fatalf("task ended with no end of input: %v", err)
		case <-time.After(time.Minute): // a guard, not a timing check: 1ms is due long before
			t.Fatalf("no wake-up: downstream got %q", got)
		}
	}
	in <- runtime.Element{Kind: runtime.KindEndOfInput}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got = append(got, drainElements(down)...)
	if want := []string{`+I {"key":"k1","n":1}`, "wm 5", "end-of-input"}; !slices.Equal(got, want) {
		t.Fatalf("downstream got %q, want %q", got, want)
	}
}

// TestAggregateMiniBatchWakeUpAfterClose: a wake-up posted to the mailbox
// before the operator closed runs after Close (the task's last mail) and
// does nothing: no panic, no failure, nothing emitted.
func TestAggregateMiniBatchWakeUpAfterClose(t *testing.T) {
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
			if err := op.ProcessRecord(ctx, 0, changed(runtime.ChangeInsert, "k1", 1, "u")); err != nil {
				t.Fatal(err)
			}
			if err := op.ProcessWatermark(ctx, time.UnixMilli(5)); err != runtime.ErrWatermarkHeld {
				t.Fatalf("ProcessWatermark = %v, want ErrWatermarkHeld", err)
			}
			select {
			case <-mb.Ready():
			case <-time.After(time.Minute): // a guard, not a timing check
				t.Fatal("no allow_latency wake-up in the mailbox")
			}
			if err := op.Close(); err != nil {
				t.Fatal(err)
			}
			if n := mb.TryYieldAll(); n != 1 {
				t.Fatalf("ran %d mails, want the wake-up", n)
			}
			if err := mb.Err(); err != nil {
				t.Fatalf("the wake-up after Close failed the task: %v", err)
			}
			if got := drainElements(ch); len(got) != 0 {
				t.Fatalf("the wake-up after Close emitted %q", got)
			}
		})
	}
}

// TestAggregateMiniBatchWakeUpObservesCancel: the allow_latency wake-up
// ends the batch with the task's context (the one Open got), not a
// background one: when the job is cancelled while the downstream channel
// is full (back-pressure, its reader gone), the wake-up's rows and held
// watermark give up with the cancellation and fail the task, instead of
// blocking the subtask goroutine forever (the task could then never
// close). On 51f097e the mail blocked in the watermark's send.
func TestAggregateMiniBatchWakeUpObservesCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mb := runtime.NewMailbox()
	ch := runtime.NewChannel(1)
	ch <- runtime.Element{Kind: runtime.KindEndOfInput} // full: nobody reads
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
	f := NewAggregate(AggregateParams{Aggregates: []AggregateSpec{{Name: "n", Fn: AggCount}},
		MiniBatch: &MiniBatchParams{Size: 1000, AllowLatency: time.Millisecond}}, false)
	op := NewKeyedProcessOperator(OpenContext{Operator: "op", Parallelism: 1}, opener(state.KindHashmap, t.TempDir()), nil, f, out)
	op.SetMailbox(mb)
	if err := op.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if err := op.ProcessRecord(ctx, 0, changed(runtime.ChangeInsert, "k1", 1, "u")); err != nil {
		t.Fatal(err)
	}
	if err := op.ProcessWatermark(ctx, time.UnixMilli(5)); err != runtime.ErrWatermarkHeld {
		t.Fatalf("ProcessWatermark = %v, want ErrWatermarkHeld", err)
	}
	select {
	case <-mb.Ready():
	case <-time.After(time.Minute): // a guard, not a timing check
		t.Fatal("no allow_latency wake-up in the mailbox")
	}
	cancel()
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		mb.TryYieldAll()
	}()
	select {
	case <-ran:
	case <-time.After(time.Minute): // a guard against the hang this test is about
		t.Fatal("the wake-up blocked on the full channel after the job was cancelled")
	}
	if err := mb.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("mailbox failure %v, want the cancellation", err)
	}
}
