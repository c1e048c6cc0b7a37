package runtime

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// eventLog is an operator (and a side output's writer) that logs, in order,
// what the task asked of it.
type eventLog struct {
	name   string
	mu     *sync.Mutex
	events *[]string
}

func (e eventLog) log(format string, args ...any) {
	e.mu.Lock()
	*e.events = append(*e.events, e.name+" "+fmt.Sprintf(format, args...))
	e.mu.Unlock()
}

func (e eventLog) Open(context.Context) error { e.log("open"); return nil }
func (e eventLog) ProcessRecord(_ context.Context, _ int, rec Record) error {
	e.log("record %s", rec.Value)
	return nil
}
func (e eventLog) EndInput(context.Context) error { e.log("end"); return nil }
func (e eventLog) Close() error                   { e.log("close"); return nil }
func (e eventLog) SnapshotState(_ context.Context, b *Barrier) (SnapshotFinisher, error) {
	e.log("snapshot %d", b.CheckpointID)
	return func(context.Context) (TaskSnapshot, error) { return TaskSnapshot{Bytes: 1}, nil }, nil
}
func (e eventLog) NotifyCheckpointComplete(_ context.Context, id int64) error {
	e.log("complete %d", id)
	return nil
}
func (e eventLog) NotifyCheckpointAborted(_ context.Context, id int64) { e.log("aborted %d", id) }
func (e eventLog) PendingCommits() bool                                { return false }

// idResponder records the ids acknowledgements come under.
type idResponder struct {
	mu   sync.Mutex
	acks []string
}

func (r *idResponder) Acknowledge(t TaskID, id int64, _ TaskSnapshot) {
	r.mu.Lock()
	r.acks = append(r.acks, fmt.Sprintf("%s:%d", t, id))
	r.mu.Unlock()
}
func (r *idResponder) Decline(TaskID, int64, error)                   {}
func (r *idResponder) AlignmentDuration(TaskID, int64, time.Duration) {}

// TestSideOutputTakesPartInCheckpoints: a task's side output is opened
// after the operator, pre-committed (snapshotted) at the barrier right
// after the operator and before the records after the barrier, its snapshot
// acknowledged under its own id, told of the completion after the operator
// (NotifyCheckpointCompleteThen's done runs after both), ended after the
// operator's end of input and closed after it; the task reports its id.
// The completion notice of checkpoint 1, posted before barrier 2 with
// records queued, runs before barrier 2's snapshots: before the first
// record, as the loop runs pending mail before each input element
// (runPendingMail, Flink's mailbox loop).
func TestSideOutputTakesPartInCheckpoints(t *testing.T) {
	var mu sync.Mutex
	var events []string
	op, side := eventLog{"op", &mu, &events}, eventLog{"side", &mu, &events}
	in := NewChannel(16)
	resp := &idResponder{}
	task := NewOperatorTask(OperatorTaskConfig{ID: TaskID{"op", 0}, Gate: NewInputGate([]InputChannel{{Ch: in}}), Operator: op,
		BootstrapInput: -1, Responder: resp, SideOutputs: []SideOutput{{ID: TaskID{"op.side", 0}, Operator: side}}})
	if got := task.SideOutputIDs(); !slices.Equal(got, []TaskID{{"op.side", 0}}) {
		t.Fatalf("SideOutputIDs = %v", got)
	}
	for _, el := range []Element{rec("a"), rec("b"), barrier(2), rec("c"), endOfInput()} {
		in <- el
	}
	done := make(chan struct{})
	task.NotifyCheckpointCompleteThen(1, func() { close(done) })
	if err := task.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	<-done
	want := []string{"op open", "side open", "op complete 1", "side complete 1", "op record a", "op record b",
		"op snapshot 2", "side snapshot 2", "op record c", "op end", "side end", "op close", "side close"}
	if !slices.Equal(events, want) {
		t.Errorf("events\n%q\nwant\n%q", events, want)
	}
	slices.Sort(resp.acks)
	if want := []string{"op.side[0]:2", "op[0]:2"}; !slices.Equal(resp.acks, want) {
		t.Errorf("acknowledgements %v, want %v", resp.acks, want)
	}
}

// countInc counts Inc calls.
type countInc struct{ n int }

func (c *countInc) Inc() { c.n++ }

// TestOutputHasSideWriters: a side output with no writer has none
// (EmitSide drops and does not count the record); with one, EmitSide
// delivers the record and counts it.
func TestOutputHasSideWriters(t *testing.T) {
	ctx := context.Background()
	var c countInc
	o := NewOutput(&c)
	if o.HasSideWriters("late") {
		t.Fatal("HasSideWriters(late) with no side writer")
	}
	if err := o.EmitSide(ctx, "late", Record{Value: []byte("x")}); err != nil || c.n != 0 {
		t.Fatalf("EmitSide without a writer: err %v, counted %d; want nil, 0", err, c.n)
	}
	ch := NewChannel(4)
	o.AddSideWriter("late", NewWriter([]Channel{ch}, ForwardPartitioner{}))
	if !o.HasSideWriters("late") || o.HasSideWriters("other") {
		t.Fatalf("HasSideWriters: late %v other %v, want true false", o.HasSideWriters("late"), o.HasSideWriters("other"))
	}
	if err := o.EmitSide(ctx, "late", Record{Value: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	if el := <-ch; string(el.Record.Value) != "y" || c.n != 1 {
		t.Fatalf("side writer got %q, counted %d; want y, 1", el.Record.Value, c.n)
	}
}
