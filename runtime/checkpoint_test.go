package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// alignOp is an Operator and Snapshotter that records the records it
// processed and, per snapshot, which records the snapshot covers.
type alignOp struct {
	mu         sync.Mutex
	seen       []string
	snapshots  []snapshotAt
	failSync   error // SnapshotState fails
	failFinish error // the finisher fails
}

type snapshotAt struct {
	id   int64
	seen []string // sorted
}

func (o *alignOp) Open(context.Context) error { return nil }
func (o *alignOp) ProcessRecord(_ context.Context, _ int, rec Record) error {
	o.mu.Lock()
	o.seen = append(o.seen, string(rec.Value))
	o.mu.Unlock()
	return nil
}
func (o *alignOp) EndInput(context.Context) error { return nil }
func (o *alignOp) Close() error                   { return nil }

func (o *alignOp) SnapshotState(_ context.Context, b *Barrier) (SnapshotFinisher, error) {
	if o.failSync != nil {
		return nil, o.failSync
	}
	o.mu.Lock()
	seen := slices.Sorted(slices.Values(o.seen))
	o.snapshots = append(o.snapshots, snapshotAt{id: b.CheckpointID, seen: seen})
	o.mu.Unlock()
	return func(context.Context) (TaskSnapshot, error) {
		if o.failFinish != nil {
			return TaskSnapshot{}, o.failFinish
		}
		return TaskSnapshot{Bytes: int64(len(seen))}, nil
	}, nil
}

func (o *alignOp) state() ([]string, []snapshotAt) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.seen), slices.Clone(o.snapshots)
}

// fakeResponder records the answers of a task.
type fakeResponder struct {
	mu        sync.Mutex
	acks      []string // "id:bytes"
	declines  []string // "id:error"
	alignment []int64
}

func (r *fakeResponder) Acknowledge(_ TaskID, id int64, s TaskSnapshot) {
	r.mu.Lock()
	r.acks = append(r.acks, fmt.Sprintf("%d:%d", id, s.Bytes))
	r.mu.Unlock()
}

func (r *fakeResponder) Decline(_ TaskID, id int64, err error) {
	r.mu.Lock()
	r.declines = append(r.declines, fmt.Sprintf("%d:%v", id, err))
	r.mu.Unlock()
}

func (r *fakeResponder) AlignmentDuration(_ TaskID, id int64, _ time.Duration) {
	r.mu.Lock()
	r.alignment = append(r.alignment, id)
	r.mu.Unlock()
}

func barrier(id int64) Element {
	return Element{Kind: KindBarrier, Barrier: &Barrier{CheckpointID: id}}
}
func endOfInput() Element       { return Element{Kind: KindEndOfInput} }
func recordEl(v string) Element { return rec(v) }
func sendBounded(t *testing.T, ch Channel, i int, el Element) {
	t.Helper()
	select {
	case ch <- el:
	case <-time.After(10 * time.Second):
		t.Fatalf("channel %d did not take %v within 10 s (blocked?)", i, el.Kind)
	}
}

// forwarded drains the downstream channel: "barrier <n>", "record <v>" or
// the kind.
func forwarded(ch Channel) []string {
	var out []string
	for {
		select {
		case el := <-ch:
			switch el.Kind {
			case KindBarrier:
				out = append(out, fmt.Sprintf("barrier %d", el.Barrier.CheckpointID))
			case KindRecord:
				out = append(out, "record "+string(el.Record.Value))
			default:
				out = append(out, el.Kind.String())
			}
		default:
			return out
		}
	}
}

// alignTask starts an OperatorTask over chans and returns a function that
// waits for Run's result.
func alignTask(t *testing.T, op Operator, resp CheckpointResponder, down Channel, chans ...Channel) func() error {
	t.Helper()
	var in []InputChannel
	for _, c := range chans {
		in = append(in, InputChannel{Ch: c})
	}
	task := NewOperatorTask(OperatorTaskConfig{ID: TaskID{"op", 0}, Gate: NewInputGate(in), Operator: op,
		Output: NewOutput(nil, NewWriter([]Channel{down}, ForwardPartitioner{})), BootstrapInput: -1, Responder: resp})
	done := make(chan error, 1)
	go func() { done <- task.Run(context.Background(), nil) }()
	return func() error {
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("task did not finish within 10 s")
			return nil
		}
	}
}

// TestBarrierAlignmentBlocksChannels: channels a and c hold records behind
// barrier 1 in their buffers from the start; b is unbuffered, so each send
// on it returns only once the task took the element. a and c must stay
// blocked after their barrier until b's barrier arrived: the snapshot
// covers exactly the records before the barrier on every channel, it is
// taken once, and the barrier is forwarded once.
func TestBarrierAlignmentBlocksChannels(t *testing.T) {
	a, c, b, down := NewChannel(8), NewChannel(8), make(Channel), NewChannel(16)
	for _, el := range []Element{recordEl("a1"), barrier(1), recordEl("a2"), endOfInput()} {
		a <- el
	}
	for _, el := range []Element{recordEl("c1"), barrier(1), recordEl("c2"), endOfInput()} {
		c <- el
	}
	op, resp := &alignOp{}, &fakeResponder{}
	wait := alignTask(t, op, resp, down, a, b, c)
	// If a or c were read while aligning, a2 and c2 (always ready in their
	// buffers) would be taken before the task waits on b again.
	for _, el := range []Element{recordEl("b1"), recordEl("b2"), barrier(1), recordEl("b3"), endOfInput()} {
		sendBounded(t, b, 1, el)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	seen, snaps := op.state()
	want := []snapshotAt{{id: 1, seen: []string{"a1", "b1", "b2", "c1"}}}
	if !slices.EqualFunc(snaps, want, eqSnap) {
		t.Fatalf("snapshots = %v, want %v", snaps, want)
	}
	if got := slices.Sorted(slices.Values(seen)); !slices.Equal(got, []string{"a1", "a2", "b1", "b2", "b3", "c1", "c2"}) {
		t.Fatalf("processed %q", seen)
	}
	if got := forwarded(down); !slices.Equal(got, []string{"barrier 1", "end-of-input"}) {
		t.Fatalf("forwarded %q", got)
	}
	if !slices.Equal(resp.acks, []string{"1:4"}) || len(resp.declines) != 0 || !slices.Equal(resp.alignment, []int64{1}) {
		t.Fatalf("acks %q declines %q alignment %v", resp.acks, resp.declines, resp.alignment)
	}
}

func eqSnap(a, b snapshotAt) bool { return a.id == b.id && slices.Equal(a.seen, b.seen) }

// TestBarrierAlignmentScripts sends scripted elements on unbuffered
// channels, in order: each send returns once the task took the element, and
// the task handles an element completely before it reads the next, so the
// order of events is fixed.
func TestBarrierAlignmentScripts(t *testing.T) {
	type step struct {
		ch int
		el Element
	}
	for _, tc := range []struct {
		name         string
		channels     int
		script       []step
		failSync     error
		failFinish   error
		wantSnaps    []snapshotAt
		wantAcks     []string
		wantDeclines []string
		wantForward  []string
	}{
		{
			name: "aligned over two channels", channels: 2,
			script:    []step{{0, recordEl("a1")}, {0, barrier(1)}, {1, recordEl("b1")}, {1, barrier(1)}, {0, recordEl("a2")}, {0, endOfInput()}, {1, endOfInput()}},
			wantSnaps: []snapshotAt{{1, []string{"a1", "b1"}}}, wantAcks: []string{"1:2"},
			wantForward: []string{"barrier 1", "end-of-input"},
		},
		{
			name: "two checkpoints in a row", channels: 2,
			script: []step{{0, barrier(1)}, {1, barrier(1)}, {1, recordEl("b1")}, {1, barrier(2)}, {0, recordEl("a1")}, {0, barrier(2)},
				{0, endOfInput()}, {1, endOfInput()}},
			wantSnaps: []snapshotAt{{1, nil}, {2, []string{"a1", "b1"}}}, wantAcks: []string{"1:0", "2:2"},
			wantForward: []string{"barrier 1", "barrier 2", "end-of-input"},
		},
		{
			// Barrier 1 never reaches b (aborted upstream); barrier 2 on b
			// overtakes it: 1 is declined and 2 aligned.
			name: "newer barrier overtakes an unaligned one", channels: 2,
			script:    []step{{0, recordEl("a1")}, {0, barrier(1)}, {1, barrier(2)}, {0, recordEl("a2")}, {0, barrier(2)}, {1, endOfInput()}, {0, endOfInput()}},
			wantSnaps: []snapshotAt{{2, []string{"a1", "a2"}}}, wantAcks: []string{"2:2"},
			wantDeclines: []string{"1:op[0]: overtaken by checkpoint 2"},
			wantForward:  []string{"barrier 2", "end-of-input"},
		},
		{
			name: "stale barrier dropped", channels: 2,
			script:    []step{{0, barrier(2)}, {1, barrier(1)}, {1, recordEl("b1")}, {1, barrier(2)}, {0, endOfInput()}, {1, endOfInput()}},
			wantSnaps: []snapshotAt{{2, []string{"b1"}}}, wantAcks: []string{"2:1"},
			wantForward: []string{"barrier 2", "end-of-input"},
		},
		{
			name: "end of input completes the alignment", channels: 3,
			script:    []step{{0, recordEl("a1")}, {0, barrier(1)}, {1, barrier(1)}, {2, recordEl("c1")}, {2, endOfInput()}, {0, endOfInput()}, {1, endOfInput()}},
			wantSnaps: []snapshotAt{{1, []string{"a1", "c1"}}}, wantAcks: []string{"1:2"},
			wantForward: []string{"barrier 1", "end-of-input"},
		},
		{
			name: "finished channel does not hold the alignment", channels: 2,
			script:    []step{{1, endOfInput()}, {0, recordEl("a1")}, {0, barrier(1)}, {0, endOfInput()}},
			wantSnaps: []snapshotAt{{1, []string{"a1"}}}, wantAcks: []string{"1:1"},
			wantForward: []string{"barrier 1", "end-of-input"},
		},
		{
			name: "snapshot failure declines and still forwards", channels: 1, failSync: errors.New("boom"),
			script:       []step{{0, barrier(1)}, {0, endOfInput()}},
			wantDeclines: []string{"1:op[0]: snapshot: boom"},
			wantForward:  []string{"barrier 1", "end-of-input"},
		},
		{
			name: "finisher failure declines", channels: 1, failFinish: errors.New("disk full"),
			script:       []step{{0, barrier(1)}, {0, endOfInput()}},
			wantSnaps:    []snapshotAt{{1, nil}},
			wantDeclines: []string{"1:op[0]: snapshot: disk full"},
			wantForward:  []string{"barrier 1", "end-of-input"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chans := make([]Channel, tc.channels)
			for i := range chans {
				chans[i] = make(Channel)
			}
			down := NewChannel(16)
			op, resp := &alignOp{failSync: tc.failSync, failFinish: tc.failFinish}, &fakeResponder{}
			wait := alignTask(t, op, resp, down, chans...)
			for _, s := range tc.script {
				sendBounded(t, chans[s.ch], s.ch, s.el)
			}
			if err := wait(); err != nil {
				t.Fatal(err)
			}
			_, snaps := op.state()
			if !slices.EqualFunc(snaps, tc.wantSnaps, eqSnap) {
				t.Fatalf("snapshots = %v, want %v", snaps, tc.wantSnaps)
			}
			// Each checkpoint's asynchronous part acknowledges on its own
			// goroutine (Flink's AsyncCheckpointRunnable): checkpoints 1 and 2
			// may be acknowledged in either order; the coordinator keys acks by id.
			slices.Sort(resp.acks)
			if !slices.Equal(resp.acks, tc.wantAcks) || !slices.Equal(resp.declines, tc.wantDeclines) {
				t.Fatalf("acks %q declines %q, want %q and %q", resp.acks, resp.declines, tc.wantAcks, tc.wantDeclines)
			}
			if got := forwarded(down); !slices.Equal(got, tc.wantForward) {
				t.Fatalf("forwarded %q, want %q", got, tc.wantForward)
			}
		})
	}
}

// blockingListener is an operator whose NotifyCheckpointComplete blocks
// until its ctx ends (a commit waiting on a broker that does not answer)
// and returns ctx's error.
type blockingListener struct {
	recorder
	entered chan struct{}
}

func (b *blockingListener) NotifyCheckpointComplete(ctx context.Context, _ int64) error {
	close(b.entered)
	<-ctx.Done()
	return ctx.Err()
}
func (b *blockingListener) NotifyCheckpointAborted(context.Context, int64) {}

// TestCheckpointNotificationHonoursCancellation: a checkpoint-complete
// notification (the sink's commit) runs with the task's ctx, so cancelling
// the job ends a commit that blocks, and Run returns the commit's error.
func TestCheckpointNotificationHonoursCancellation(t *testing.T) {
	in := NewChannel(1)
	op := &blockingListener{entered: make(chan struct{})}
	task := NewOperatorTask(OperatorTaskConfig{ID: TaskID{"op", 0}, Gate: NewInputGate([]InputChannel{{Ch: in}}), Operator: op, BootstrapInput: -1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx, nil) }()
	task.NotifyCheckpointComplete(7)
	select {
	case <-op.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the notification did not run within 10 s")
	}
	cancel()
	select {
	case err := <-done:
		if want := "op[0]: checkpoint 7 complete: context canceled"; err == nil || err.Error() != want || !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want %q", err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled job's commit still blocks Run after 10 s")
	}
}

// orderedListener records its commits into log and fails checkpoint 3.
type orderedListener struct {
	recorder
	mu  *sync.Mutex
	log *[]string
}

func (o *orderedListener) NotifyCheckpointComplete(_ context.Context, id int64) error {
	o.mu.Lock()
	*o.log = append(*o.log, fmt.Sprintf("commit %d", id))
	o.mu.Unlock()
	if id == 3 {
		return errors.New("commit refused")
	}
	return nil
}
func (o *orderedListener) NotifyCheckpointAborted(context.Context, int64) {}

// TestNotifyCheckpointCompleteThen: done runs after the listener returned,
// on success only; an operator without a listener calls done at once.
func TestNotifyCheckpointCompleteThen(t *testing.T) {
	var mu sync.Mutex
	var log []string
	note := func(s string) func() {
		return func() { mu.Lock(); log = append(log, s); mu.Unlock() }
	}
	in := NewChannel(1)
	task := NewOperatorTask(OperatorTaskConfig{ID: TaskID{"op", 0}, Gate: NewInputGate([]InputChannel{{Ch: in}}),
		Operator: &orderedListener{mu: &mu, log: &log}, BootstrapInput: -1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx, nil) }()
	task.NotifyCheckpointCompleteThen(1, note("done 1"))
	task.NotifyCheckpointCompleteThen(2, note("done 2"))
	task.NotifyCheckpointCompleteThen(3, note("done 3"))
	select {
	case err := <-done:
		if want := "op[0]: checkpoint 3 complete: commit refused"; err == nil || err.Error() != want {
			t.Fatalf("Run = %v, want %q", err, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the failed commit did not end Run")
	}
	mu.Lock()
	got := slices.Clone(log)
	mu.Unlock()
	if want := []string{"commit 1", "done 1", "commit 2", "done 2", "commit 3"}; !slices.Equal(got, want) {
		t.Errorf("order %q, want %q", got, want)
	}
	plain := NewOperatorTask(OperatorTaskConfig{ID: TaskID{"op", 1}, Gate: NewInputGate([]InputChannel{{Ch: NewChannel(1)}}), Operator: &recorder{}, BootstrapInput: -1})
	called := false
	plain.NotifyCheckpointCompleteThen(1, func() { called = true })
	if !called {
		t.Error("an operator without a listener: done not called at once")
	}
}
