package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

func rec(v string) Element { return Element{Kind: KindRecord, Record: Record{Value: []byte(v)}} }

// recorder is an Operator that records what it saw.
type recorder struct {
	seen    []string
	ended   bool
	closed  bool
	failOn  string
	onInput func(input int, rec Record)
}

func (r *recorder) Open(context.Context) error { return nil }
func (r *recorder) ProcessRecord(_ context.Context, input int, rec Record) error {
	if string(rec.Value) == r.failOn {
		return errors.New("boom")
	}
	r.seen = append(r.seen, fmt.Sprintf("%d:%s", input, rec.Value))
	return nil
}
func (r *recorder) EndInput(context.Context) error { r.ended = true; return nil }
func (r *recorder) Close() error                   { r.closed = true; return nil }

func TestOperatorTaskBootstrapHoldsKeyedInput(t *testing.T) {
	keyed, bc := NewChannel(8), NewChannel(8)
	keyed <- rec("a")
	keyed <- rec("b")
	bc <- rec("rule1")
	bc <- rec("rule2")
	bc <- Element{Kind: KindCaughtUp}
	bc <- rec("rule3")
	keyed <- Element{Kind: KindEndOfInput}
	bc <- Element{Kind: KindEndOfInput}
	downstream := NewChannel(8)
	op := &recorder{}
	task := NewOperatorTask(OperatorTaskConfig{
		ID: TaskID{"op", 0}, Gate: NewInputGate([]InputChannel{{Ch: keyed, Input: 0}, {Ch: bc, Input: 1}}),
		Operator: op, Output: NewOutput(nil, NewWriter([]Channel{downstream}, ForwardPartitioner{})), BootstrapInput: 1,
	})
	if err := task.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	// Both rules before the caught-up marker come before any keyed record.
	if got := op.seen[:2]; !slices.Equal(got, []string{"1:rule1", "1:rule2"}) {
		t.Fatalf("first records = %q, want the two bootstrap rules", got)
	}
	if got := len(op.seen); got != 5 {
		t.Fatalf("saw %d records, want 5: %q", got, op.seen)
	}
	if !op.ended || !op.closed {
		t.Fatalf("ended=%v closed=%v, want both", op.ended, op.closed)
	}
	if el := <-downstream; el.Kind != KindEndOfInput {
		t.Fatalf("forwarded %v, want end-of-input", el.Kind)
	}
}

func TestOperatorTaskFailureClosesOperator(t *testing.T) {
	in := NewChannel(4)
	in <- rec("x")
	op := &recorder{failOn: "x"}
	task := NewOperatorTask(OperatorTaskConfig{ID: TaskID{"op", 3}, Gate: NewInputGate([]InputChannel{{Ch: in}}), Operator: op, BootstrapInput: -1})
	err := task.Run(context.Background(), nil)
	if err == nil || err.Error() != "op[3]: boom" {
		t.Fatalf("err = %v, want op[3]: boom", err)
	}
	if !op.closed {
		t.Fatal("operator not closed after failure")
	}
}

func TestInputGateBlockedChannelIsNotRead(t *testing.T) {
	a, b := NewChannel(4), NewChannel(4)
	a <- rec("a1")
	b <- rec("b1")
	g := NewInputGate([]InputChannel{{Ch: a}, {Ch: b}})
	g.Block(0, BlockAlignment)
	el, ch, ok, err := g.Next(context.Background(), nil)
	if err != nil || !ok || ch != 1 || string(el.Record.Value) != "b1" {
		t.Fatalf("Next = %q from %d (ok %v, err %v), want b1 from 1", el.Record.Value, ch, ok, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, _, _, err := g.Next(ctx, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with only a blocked channel ready = %v, want deadline", err)
	}
	g.Unblock(0, BlockAlignment)
	if el, ch, _, _ := g.Next(context.Background(), nil); ch != 0 || string(el.Record.Value) != "a1" {
		t.Fatalf("after unblock got %q from %d", el.Record.Value, ch)
	}
	a <- Element{Kind: KindEndOfInput}
	b <- Element{Kind: KindEndOfInput}
	for !g.Finished() {
		if _, _, ok, err := g.Next(context.Background(), nil); err != nil || !ok {
			t.Fatalf("Next = ok %v err %v", ok, err)
		}
	}
}

func TestInputGateWake(t *testing.T) {
	g := NewInputGate([]InputChannel{{Ch: NewChannel(1)}})
	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	if _, _, ok, err := g.Next(context.Background(), wake); ok || err != nil {
		t.Fatalf("woken Next = ok %v err %v, want ok false, nil", ok, err)
	}
}

func TestKeyGroupPartitionerMatchesKeyGroupRanges(t *testing.T) {
	const maxP, p = 128, 3
	part := KeyGroupPartitioner{MaxParallelism: maxP}
	for i := 0; i < 1000; i++ {
		key := []byte(fmt.Sprintf("key-%d", i))
		sub := part.Select(&Record{Key: key}, p)
		if kg := keygroup.Assign(key, maxP); !keygroup.RangeFor(maxP, p, sub).Contains(kg) {
			t.Fatalf("key %q (key group %d) routed to subtask %d owning %v", key, kg, sub, keygroup.RangeFor(maxP, p, sub))
		}
	}
}

func TestWriterBroadcastsControlAndRebalances(t *testing.T) {
	chans := []Channel{NewChannel(8), NewChannel(8), NewChannel(8)}
	w := NewWriter(chans, &RebalancePartitioner{})
	ctx := context.Background()
	for i := 0; i < 6; i++ {
		if err := w.Emit(ctx, Record{Value: []byte{byte('0' + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Broadcast(ctx, Element{Kind: KindBarrier, Barrier: &Barrier{CheckpointID: 7}}); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chans {
		if len(ch) != 3 {
			t.Fatalf("channel %d holds %d elements, want 2 records + barrier", i, len(ch))
		}
		<-ch
		<-ch
		if el := <-ch; el.Kind != KindBarrier || el.Barrier.CheckpointID != 7 {
			t.Fatalf("channel %d last element %v %d, want barrier 7", i, el.Kind, el.Barrier.CheckpointID)
		}
	}
}

func TestWriterBlocksWhenFull(t *testing.T) {
	ch := NewChannel(1)
	w := NewWriter([]Channel{ch}, ForwardPartitioner{})
	if err := w.Emit(context.Background(), Record{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := w.Emit(ctx, Record{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Emit into a full channel = %v, want it to block until the deadline", err)
	}
	if len(ch) != 1 {
		t.Fatalf("channel holds %d, want 1: nothing dropped, nothing extra", len(ch))
	}
}

func TestMailboxRunsActionsInOrderOnTheCaller(t *testing.T) {
	m := NewMailbox()
	var got []int
	done := make(chan struct{})
	go func() {
		for i := 0; i < 3; i++ {
			m.Execute(func() { got = append(got, i) })
		}
		close(done)
	}()
	<-done
	for len(got) < 3 {
		if err := m.Yield(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("ran %v, want [0 1 2]", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Yield(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Yield on empty mailbox with ended ctx = %v", err)
	}
}

// TestMailboxReadyIsQuietOnceTheActionsRan checks that Ready is signalled
// while actions are pending and not after they ran, whichever way they ran:
// a stale signal would wake an idle subtask again and again.
func TestMailboxReadyIsQuietOnceTheActionsRan(t *testing.T) {
	m := NewMailbox()
	signalled := func() bool { return len(m.Ready()) == 1 }
	if signalled() {
		t.Fatal("a new mailbox is signalled")
	}
	ran := 0
	for i := 0; i < 3; i++ {
		m.Execute(func() { ran++ })
	}
	if !signalled() {
		t.Fatal("3 actions pending, Ready not signalled")
	}
	if n := m.TryYieldAll(); n != 3 || ran != 3 {
		t.Fatalf("TryYieldAll ran %d (counted %d), want 3", n, ran)
	}
	if signalled() {
		t.Fatal("Ready still signalled after TryYieldAll ran every action")
	}
	// The task loop's way: take the signal, then run the mail.
	m.Execute(func() { ran++ })
	<-m.Ready()
	m.Execute(func() { ran++ }) // posted after the signal was taken
	if n := m.TryYieldAll(); n != 2 || ran != 5 {
		t.Fatalf("TryYieldAll ran %d (counted %d), want 2", n, ran)
	}
	if signalled() {
		t.Fatal("Ready signalled after the actions posted around a wake-up ran")
	}
	m.Execute(func() { ran++ })
	if err := m.Yield(context.Background()); err != nil || ran != 6 {
		t.Fatalf("Yield = %v (counted %d), want nil and 6", err, ran)
	}
	if signalled() {
		t.Fatal("Ready still signalled after Yield ran the only action")
	}
	if n := m.TryYieldAll(); n != 0 {
		t.Fatalf("TryYieldAll on an empty mailbox ran %d", n)
	}
}

// TestMailboxInterruptible checks that an Interruptible context is cancelled
// by the next post, at once when mail is pending, not by a post after its
// release, and not by mail that already ran.
func TestMailboxInterruptible(t *testing.T) {
	m := NewMailbox()
	ctx, release := m.Interruptible(context.Background())
	if ctx.Err() != nil {
		t.Fatalf("fresh context on an empty mailbox: %v", ctx.Err())
	}
	m.Execute(func() {})
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("after a post, ctx.Err() = %v, want context.Canceled", ctx.Err())
	}
	release()
	// Mail pending: cancelled from the start.
	ctx, release = m.Interruptible(context.Background())
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("with mail pending, ctx.Err() = %v, want context.Canceled", ctx.Err())
	}
	release()
	if n := m.TryYieldAll(); n != 1 {
		t.Fatalf("TryYieldAll ran %d, want 1", n)
	}
	// Mail ran: a new context waits again, and a post after release is no
	// concern of it.
	ctx, release = m.Interruptible(context.Background())
	if ctx.Err() != nil {
		t.Fatalf("after the mail ran, a new context is done: %v", ctx.Err())
	}
	release()
	next, releaseNext := m.Interruptible(context.Background())
	defer releaseNext()
	release() // a second release must not detach the newer context
	m.Execute(func() {})
	if !errors.Is(next.Err(), context.Canceled) {
		t.Fatalf("newer context after a post: %v, want context.Canceled", next.Err())
	}
	// The parent's end reaches it too.
	parent, cancel := context.WithCancel(context.Background())
	m.TryYieldAll()
	ctx, release = m.Interruptible(parent)
	defer release()
	cancel()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("after the parent ended, ctx.Err() = %v", ctx.Err())
	}
}

// TestIdleOperatorTaskWakesOncePerPost posts actions to a task whose input
// stays silent: it wakes at most once per post and not at all in between.
func TestIdleOperatorTaskWakesOncePerPost(t *testing.T) {
	in := NewChannel(1)
	task := NewOperatorTask(OperatorTaskConfig{ID: TaskID{"op", 0}, Gate: NewInputGate([]InputChannel{{Ch: in}}), Operator: &recorder{}, BootstrapInput: -1})
	done := make(chan error, 1)
	go func() { done <- task.Run(context.Background(), nil) }()
	var ran atomic.Int64
	const posts = 20
	for i := int64(1); i <= posts; i++ {
		task.Mailbox().Execute(func() { ran.Add(1) })
		for ran.Load() < i {
			time.Sleep(time.Millisecond)
		}
	}
	woke := task.mailWakes.Load()
	if woke < 1 || woke > posts {
		t.Fatalf("the task woke %d times for %d posts, want 1..%d", woke, posts, posts)
	}
	time.Sleep(200 * time.Millisecond)
	if got := task.mailWakes.Load(); got != woke {
		t.Fatalf("an idle task woke %d more times with no mail", got-woke)
	}
	in <- Element{Kind: KindEndOfInput}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// fakeSource emits n records then waits for stop.
type fakeSource struct {
	out *Output
	n   int
}

func (s *fakeSource) Name() string { return "src[0]" }
func (s *fakeSource) Run(ctx context.Context, stop <-chan struct{}) error {
	for i := 0; i < s.n; i++ {
		if err := s.out.Emit(ctx, Record{Value: []byte("r")}); err != nil {
			return err
		}
	}
	select {
	case <-stop:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.out.Broadcast(ctx, Element{Kind: KindEndOfInput})
}

type countOp struct{ n *atomic.Int64 }

func (c countOp) Open(context.Context) error                       { return nil }
func (c countOp) ProcessRecord(context.Context, int, Record) error { c.n.Add(1); return nil }
func (c countOp) EndInput(context.Context) error                   { return nil }
func (c countOp) Close() error                                     { return nil }

func TestJobSoftStopDrainsEveryRecord(t *testing.T) {
	ch := NewChannel(2) // smaller than the record count: back-pressure, not loss
	src := &fakeSource{out: NewOutput(nil, NewWriter([]Channel{ch}, ForwardPartitioner{})), n: 100}
	var n atomic.Int64
	task := NewOperatorTask(OperatorTaskConfig{ID: TaskID{"op", 0}, Gate: NewInputGate([]InputChannel{{Ch: ch}}), Operator: countOp{&n}, BootstrapInput: -1})
	job := NewJob(slog.New(slog.NewTextHandler(io.Discard, nil)), time.Second, []Task{src}, []Task{task})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for n.Load() < 100 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if err := job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := n.Load(); got != 100 {
		t.Fatalf("processed %d records, want 100", got)
	}
}

func TestJobFailureCancelsEveryTask(t *testing.T) {
	ch := NewChannel(2)
	src := &fakeSource{out: NewOutput(nil, NewWriter([]Channel{ch}, ForwardPartitioner{})), n: 1}
	op := &recorder{failOn: "r"}
	task := NewOperatorTask(OperatorTaskConfig{ID: TaskID{"op", 0}, Gate: NewInputGate([]InputChannel{{Ch: ch}}), Operator: op, BootstrapInput: -1})
	job := NewJob(slog.New(slog.NewTextHandler(io.Discard, nil)), time.Second, []Task{src}, []Task{task})
	err := job.Run(context.Background())
	if err == nil || err.Error() != "op[0]: boom" {
		t.Fatalf("Run = %v, want the operator's failure", err)
	}
}

type stuck struct{}

func (stuck) Name() string { return "stuck[0]" }
func (stuck) Run(ctx context.Context, _ <-chan struct{}) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestJobDrainTimeout(t *testing.T) {
	job := NewJob(slog.New(slog.NewTextHandler(io.Discard, nil)), 20*time.Millisecond, nil, []Task{stuck{}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := job.Run(ctx); !errors.Is(err, ErrDrainTimeout) {
		t.Fatalf("Run = %v, want ErrDrainTimeout", err)
	}
}

// refuseKey is a KeySelector refusing every record (missing_key).
type refuseKey struct{}

func (refuseKey) SelectKey(*Record) ([]byte, error) {
	return nil, &RecordError{Reason: ReasonMissingKey}
}

// TestOutputRefusalKeepsOtherWriters: a writer whose key selector refuses a
// record does not keep it from the writers after it; Emit returns the
// refusal.
func TestOutputRefusalKeepsOtherWriters(t *testing.T) {
	keyed, plain := NewChannel(4), NewChannel(4)
	out := NewOutput(nil,
		NewWriter([]Channel{keyed}, ForwardPartitioner{}).WithKeySelector(refuseKey{}),
		NewWriter([]Channel{plain}, ForwardPartitioner{}))
	err := out.Emit(context.Background(), Record{Value: []byte(`{"nok":1}`)})
	var re *RecordError
	if !errors.As(err, &re) || re.Reason != ReasonMissingKey {
		t.Fatalf("Emit = %v, want the missing_key refusal", err)
	}
	if len(keyed) != 0 || len(plain) != 1 {
		t.Fatalf("keyed branch got %d, plain branch %d; want 0 and 1", len(keyed), len(plain))
	}
	if el := <-plain; string(el.Record.Value) != `{"nok":1}` {
		t.Fatalf("plain branch got %q", el.Record.Value)
	}
}

// prefixKey is a KeySelector keying a record by the first 3 bytes of its
// value.
type prefixKey struct{}

func (prefixKey) SelectKey(rec *Record) ([]byte, error) { return rec.Value[:3], nil }

// lastChannel is a Partitioner other than the built-in ones: it picks the
// last channel.
type lastChannel struct{}

func (lastChannel) Select(_ *Record, n int) int { return n - 1 }

// TestWriterEmitDoesNotAllocate: Writer.Emit hands a record to its channel
// without a heap allocation, with every built-in partitioner, a key
// selector and a partitioner of another type (they see the writer's
// scratch copy, cleared afterwards so it keeps no record's bytes alive).
// Before, the record escaped to the heap through the interface calls: one
// allocation per record and edge.
func TestWriterEmitDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	key, value := []byte("k"), []byte(`abc{"x":1}`)
	for _, tc := range []struct {
		name    string
		w       *Writer
		wantKey string
		wantCh  int
	}{
		{"forward", NewWriter([]Channel{NewChannel(1)}, ForwardPartitioner{}), "k", 0},
		{"rebalance", NewWriter([]Channel{NewChannel(1)}, &RebalancePartitioner{}), "k", 0},
		{"key-group", NewWriter([]Channel{NewChannel(1), NewChannel(1)}, KeyGroupPartitioner{MaxParallelism: 128}),
			"k", keygroup.SubtaskForKey([]byte("k"), 128, 2)},
		{"key-selector-and-custom-partitioner", NewWriter([]Channel{NewChannel(1), NewChannel(1), NewChannel(1)}, lastChannel{}).WithKeySelector(prefixKey{}),
			"abc", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got Element
			allocs := testing.AllocsPerRun(100, func() {
				if err := tc.w.Emit(ctx, Record{Key: key, Value: value}); err != nil {
					t.Fatal(err)
				}
				got = <-tc.w.channels[tc.wantCh]
			})
			if allocs != 0 {
				t.Fatalf("Emit allocates %v times per record, want 0", allocs)
			}
			if got.Kind != KindRecord || string(got.Record.Key) != tc.wantKey || string(got.Record.Value) != string(value) {
				t.Fatalf("channel %d got %v key %q value %q, want record key %q value %q", tc.wantCh, got.Kind, got.Record.Key, got.Record.Value, tc.wantKey, value)
			}
			if tc.w.scratch.Key != nil || tc.w.scratch.Value != nil {
				t.Fatalf("scratch still holds key %q value %q after Emit", tc.w.scratch.Key, tc.w.scratch.Value)
			}
		})
	}
}
