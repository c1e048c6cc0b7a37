package runtime

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// values returns the values of a KindRecords element's batch, or of a
// KindRecord element, as strings.
func values(t *testing.T, el Element) []string {
	t.Helper()
	switch el.Kind {
	case KindRecord:
		return []string{string(el.Record.Value)}
	case KindRecords:
		var vs []string
		for _, r := range el.Batch.Records {
			vs = append(vs, string(r.Value))
		}
		return vs
	}
	t.Fatalf("element %v, want records", el.Kind)
	return nil
}

// TestBatchingWriterSendsFullBatchesBeforeControl: a batching writer sends a
// channel's records once it holds the batch size, the rest before the next
// control element on that channel and on Flush, in emit order; a Flush with
// nothing held sends nothing.
func TestBatchingWriterSendsFullBatchesBeforeControl(t *testing.T) {
	chans := []Channel{NewChannel(8), NewChannel(8)}
	w := NewWriter(chans, &RebalancePartitioner{}).WithBatching(4)
	ctx := context.Background()
	for i := range 10 {
		if err := w.Emit(ctx, Record{Value: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i, ch := range chans {
		if len(ch) != 1 {
			t.Fatalf("channel %d holds %d elements after 5 records, want 1 (a full batch of 4)", i, len(ch))
		}
	}
	if err := w.Broadcast(ctx, Element{Kind: KindBarrier, Barrier: &Barrier{CheckpointID: 3}}); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"0", "2", "4", "6"}, {"8"}, {"1", "3", "5", "7"}, {"9"}}
	for i, ch := range chans {
		if len(ch) != 3 {
			t.Fatalf("channel %d holds %d elements, want 2 batches + barrier", i, len(ch))
		}
		for _, vs := range want[2*i : 2*i+2] {
			el := <-ch
			if got := values(t, el); el.Kind != KindRecords || !slices.Equal(got, vs) {
				t.Fatalf("channel %d: %v %q, want a batch %q", i, el.Kind, got, vs)
			}
			el.Batch.Release()
		}
		if el := <-ch; el.Kind != KindBarrier || el.Barrier.CheckpointID != 3 {
			t.Fatalf("channel %d: %v after the batches, want barrier 3", i, el.Kind)
		}
	}
	if err := w.Emit(ctx, Record{Value: []byte("10")}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(chans[0]) != 1 || len(chans[1]) != 0 {
		t.Fatalf("after one record and two flushes: %d and %d elements, want 1 and 0", len(chans[0]), len(chans[1]))
	}
	if got := values(t, <-chans[0]); !slices.Equal(got, []string{"10"}) {
		t.Fatalf("flushed %q, want [10]", got)
	}
}

// TestBatchingBroadcastRecords: a broadcast record goes into every
// channel's batch.
func TestBatchingBroadcastRecords(t *testing.T) {
	chans := []Channel{NewChannel(2), NewChannel(2)}
	w := NewWriter(chans, BroadcastPartitioner{}).WithBatching(2)
	ctx := context.Background()
	for _, v := range []string{"a", "b"} {
		if err := w.Emit(ctx, Record{Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	for i, ch := range chans {
		if got := values(t, <-ch); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("channel %d got %q, want [a b]", i, got)
		}
	}
}

// forwarder is an Operator that emits every record it gets to out.
type forwarder struct{ out *Output }

func (f forwarder) Open(context.Context) error { return nil }
func (f forwarder) ProcessRecord(ctx context.Context, _ int, rec Record) error {
	return f.out.Emit(ctx, rec)
}
func (forwarder) EndInput(context.Context) error { return nil }
func (forwarder) Close() error                   { return nil }

// TestOperatorTaskFlushesBeforeBlocking: a task reads batches and single
// records in order, and sends what its batching output holds once its input
// is empty, without waiting for a control element: a downstream task gets
// the records while the upstream is idle (the input stays open here).
func TestOperatorTaskFlushesBeforeBlocking(t *testing.T) {
	in, down := NewChannel(8), NewChannel(8)
	up := NewWriter([]Channel{in}, ForwardPartitioner{}).WithBatching(2)
	ctx := context.Background()
	for _, v := range []string{"a", "b", "c"} {
		if err := up.Emit(ctx, Record{Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := up.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	in <- rec("d")
	out := NewOutput(nil, NewWriter([]Channel{down}, ForwardPartitioner{}).WithBatching(64))
	task := NewOperatorTask(OperatorTaskConfig{ID: TaskID{"op", 0}, Gate: NewInputGate([]InputChannel{{Ch: in}}),
		Operator: forwarder{out}, Output: out, BootstrapInput: -1})
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx, nil) }()
	select {
	case el := <-down:
		if got := values(t, el); el.Kind != KindRecords || !slices.Equal(got, []string{"a", "b", "c", "d"}) {
			t.Fatalf("downstream got %v %q, want one batch [a b c d]", el.Kind, got)
		}
	case err := <-done:
		t.Fatalf("task ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the idle task still holds its output's records")
	}
	in <- Element{Kind: KindEndOfInput}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if el := <-down; el.Kind != KindEndOfInput {
		t.Fatalf("then %v, want end-of-input", el.Kind)
	}
}

func TestChangeKindString(t *testing.T) {
	for k, want := range map[ChangeKind]string{ChangeInsert: "+I", ChangeUpdateBefore: "-U", ChangeUpdateAfter: "+U", ChangeDelete: "-D", ChangeKind(9): "change(9)"} {
		if got := k.String(); got != want {
			t.Errorf("%d: %q, want %q", k, got, want)
		}
	}
	if ChangeInsert.Retracts() || ChangeUpdateAfter.Retracts() || !ChangeUpdateBefore.Retracts() || !ChangeDelete.Retracts() {
		t.Error("Retracts: want true for -U and -D only")
	}
	var r Record
	if r.Change != ChangeInsert {
		t.Error("zero Record is not an insert")
	}
}

func TestParseChangeKind(t *testing.T) {
	for _, c := range []ChangeKind{ChangeInsert, ChangeUpdateBefore, ChangeUpdateAfter, ChangeDelete} {
		if got, ok := ParseChangeKind(c.String()); !ok || got != c {
			t.Errorf("%s: %v %v", c, got, ok)
		}
	}
	for _, s := range []string{"", "+i", "I", "-X", "change(9)"} {
		if _, ok := ParseChangeKind(s); ok {
			t.Errorf("%q parsed", s)
		}
	}
}
