package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/runtime"
)

// txnSink is a chained two-phase-commit sink as the source hosts it: it
// logs every call in order (records by value, "snap:<id>" with the records
// pre-committed, "commit:<id>", "end", "close"), keeps the pre-committed
// epochs pending until their checkpoint completes, waits for them at a
// stop-with-savepoint (runtime.PendingCommitter), and fails the commit of
// checkpoint failAt.
type txnSink struct {
	mu      sync.Mutex
	log     []string
	open    int     // records since the last pre-commit
	pending []int64 // pre-committed checkpoints not yet committed
	final   bool
	failAt  int64
}

func (s *txnSink) add(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, e)
}

func (s *txnSink) events() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

func (s *txnSink) Open(context.Context) error { return nil }
func (s *txnSink) ProcessRecord(_ context.Context, _ int, rec runtime.Record) error {
	s.open++
	s.add(string(rec.Value))
	return nil
}
func (s *txnSink) EndInput(context.Context) error { s.add("end"); return nil }
func (s *txnSink) Close() error                   { s.add("close"); return nil }
func (s *txnSink) SnapshotState(_ context.Context, b *runtime.Barrier) (runtime.SnapshotFinisher, error) {
	s.add(fmt.Sprintf("snap:%d(%d)", b.CheckpointID, s.open))
	s.open = 0
	s.pending = append(s.pending, b.CheckpointID)
	s.final = s.final || b.StopAfter
	return func(context.Context) (runtime.TaskSnapshot, error) {
		return runtime.TaskSnapshot{State: []byte("{}")}, nil
	}, nil
}
func (s *txnSink) NotifyCheckpointComplete(_ context.Context, id int64) error {
	if id == s.failAt {
		return errors.New("commit failed")
	}
	n := 0
	for n < len(s.pending) && s.pending[n] <= id {
		s.add(fmt.Sprintf("commit:%d", s.pending[n]))
		n++
	}
	s.pending = s.pending[n:]
	return nil
}
func (s *txnSink) NotifyCheckpointAborted(context.Context, int64) {}
func (s *txnSink) PendingCommits() bool                           { return s.final && len(s.pending) > 0 }

// ackLog is a runtime.CheckpointResponder counting acknowledgements per
// task and checkpoint.
type ackLog struct {
	mu   sync.Mutex
	acks map[string]int
}

func (a *ackLog) Acknowledge(id runtime.TaskID, cp int64, _ runtime.TaskSnapshot) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.acks[fmt.Sprintf("%s@%d", id, cp)]++
}
func (a *ackLog) Decline(id runtime.TaskID, cp int64, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.acks[fmt.Sprintf("%s@%d declined", id, cp)]++
}
func (a *ackLog) AlignmentDuration(runtime.TaskID, int64, time.Duration) {}
func (a *ackLog) count(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.acks[key]
}

// TestKafkaSourceHostedChainCommits runs a Kafka source hosting a chained
// two-phase-commit sink (runtime.ChainHost) over two partitions and
// asserts the sink's exactly-once protocol from the host: the barrier
// pre-commits exactly the records emitted before it, source and sink both
// acknowledge, the commit runs only once the checkpoint completed and
// before its done callback; a failed commit fails the subtask without its
// done callback; and a stop-with-savepoint commits the savepoint's epoch
// before the end of input, emitting no record after the barrier.
func TestKafkaSourceHostedChainCommits(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	opts := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("in"), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			r := &kgo.Record{Partition: int32(i % 2), Value: fmt.Appendf(nil, `"r%d"`, i)}
			if err := prod.ProduceSync(context.Background(), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	start := func(sink *txnSink, acks *ackLog) (*KafkaSource, chan struct{}, chan error) {
		out := runtime.NewOutput(nil)
		c := &runtime.ChainedOperator{ID: runtime.TaskID{Operator: "out", Subtask: 0}, Operator: sink}
		out.AddChained(c)
		src := New(Config{
			Name: "in", Topic: "in", Partitions: 2, Subtask: 0, Parallelism: 1,
			ClientOpts: opts, Responder: acks, Format: FormatJSON, Output: out,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		src.HostChain(runtime.Chain{c})
		stop := make(chan struct{})
		done := make(chan error, 1)
		go func() { done <- src.Run(context.Background(), stop) }()
		return src, stop, done
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	records := func(log []string) int {
		n := 0
		for _, e := range log {
			if strings.HasPrefix(e, `"r`) {
				n++
			}
		}
		return n
	}

	sink, acks := &txnSink{failAt: 2}, &ackLog{acks: map[string]int{}}
	src, _, done := start(sink, acks)
	produce(0, 10)
	waitFor("10 records", func() bool { return records(sink.events()) == 10 })
	src.TriggerCheckpoint(&runtime.Barrier{CheckpointID: 1})
	waitFor("both acknowledgements of checkpoint 1", func() bool { return acks.count("in[0]@1") == 1 && acks.count("out[0]@1") == 1 })
	if log := sink.events(); log[len(log)-1] != "snap:1(10)" || slices.Contains(log, "commit:1") {
		t.Fatalf("after barrier 1 the sink logged %q; want the 10 records pre-committed, nothing committed", log)
	}
	produce(10, 15)
	waitFor("15 records", func() bool { return records(sink.events()) == 15 })
	committed := make(chan struct{})
	src.NotifyCheckpointCompleteThen(1, func() {
		if !slices.Contains(sink.events(), "commit:1") {
			t.Error("done of checkpoint 1 ran before the chained sink committed it")
		}
		close(committed)
	})
	select {
	case <-committed:
	case <-time.After(time.Minute):
		t.Fatal("checkpoint 1's done never ran")
	}
	src.TriggerCheckpoint(&runtime.Barrier{CheckpointID: 2})
	waitFor("the sink's acknowledgement of checkpoint 2", func() bool { return acks.count("out[0]@2") == 1 })
	src.NotifyCheckpointCompleteThen(2, func() { t.Error("done of checkpoint 2 ran although its commit failed") })
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "commit failed") {
			t.Fatalf("Run returned %v after the chained sink's commit failed; want that failure", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the subtask went on after the chained sink's commit failed")
	}
	if log := sink.events(); !slices.Contains(log, "snap:2(5)") || slices.Contains(log, "commit:2") || log[len(log)-1] != "close" {
		t.Fatalf("sink log %q: want 5 records pre-committed at 2, never committed, then closed", log)
	}

	// Stop-with-savepoint: the savepoint's epoch is committed before the
	// end of input, and the subtask waits for it.
	sink, acks = &txnSink{}, &ackLog{acks: map[string]int{}}
	src, _, done = start(sink, acks)
	waitFor("15 records again", func() bool { return records(sink.events()) == 15 })
	src.TriggerCheckpoint(&runtime.Barrier{CheckpointID: 7, Savepoint: true, StopAfter: true})
	waitFor("the sink's acknowledgement of the savepoint", func() bool { return acks.count("out[0]@7") == 1 })
	produce(15, 20) // after the barrier: never emitted
	select {
	case err := <-done:
		t.Fatalf("Run returned %v before the savepoint's epoch was committed", err)
	case <-time.After(200 * time.Millisecond):
	}
	src.NotifyCheckpointComplete(7)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after the stop-with-savepoint: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the subtask did not finish after the savepoint completed")
	}
	want := []string{"snap:7(15)", "commit:7", "end", "close"}
	if log := sink.events(); records(log) != 15 || !slices.Equal(log[len(log)-4:], want) {
		t.Fatalf("sink log %q: want 15 records, then %q", log, want)
	}
}

// failingTimerOp is a chained operator that, like a keyed operator's timer
// or a mini-batch wake-up, reports a failure through the task's mailbox
// (runtime.MailboxAware, Mailbox.Fail) from an action it posts when it
// sees record failAt.
type failingTimerOp struct {
	txnSink
	mailbox *runtime.Mailbox
	failAt  string
}

func (o *failingTimerOp) SetMailbox(m *runtime.Mailbox) { o.mailbox = m }
func (o *failingTimerOp) ProcessRecord(ctx context.Context, in int, rec runtime.Record) error {
	if string(rec.Value) == o.failAt {
		m := o.mailbox
		m.Execute(func() { m.Fail(errors.New("timer callback failed")) })
	}
	return o.txnSink.ProcessRecord(ctx, in, rec)
}

// TestKafkaSourceHostedChainMailFailure: a failure a chained operator
// reports through the mailbox (Mailbox.Fail) fails the source subtask
// hosting the chain, with that error, as it fails an OperatorTask; before,
// KafkaSource never read Mailbox.Err, so the subtask went on as if the
// timer had fired.
func TestKafkaSourceHostedChainMailFailure(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	opts := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("in"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := range 5 {
		if err := prod.ProduceSync(context.Background(), &kgo.Record{Value: fmt.Appendf(nil, `"r%d"`, i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	op := &failingTimerOp{failAt: `"r2"`}
	out := runtime.NewOutput(nil)
	c := &runtime.ChainedOperator{ID: runtime.TaskID{Operator: "timer", Subtask: 0}, Operator: op}
	out.AddChained(c)
	src := New(Config{
		Name: "in", Topic: "in", Partitions: 1, Subtask: 0, Parallelism: 1,
		ClientOpts: opts, Responder: &ackLog{acks: map[string]int{}}, Format: FormatJSON, Output: out,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	src.HostChain(runtime.Chain{c})
	if op.mailbox != src.Mailbox() {
		t.Fatal("the hosted chain's operator was not given the source's mailbox")
	}
	done := make(chan error, 1)
	go func() { done <- src.Run(context.Background(), make(chan struct{})) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "source in: timer callback failed") {
			t.Fatalf("Run returned %v; want the chained operator's mailbox failure, named by the source", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the source subtask went on for 20 s after its chained operator reported a failure through the mailbox")
	}
	if log := op.events(); log[len(log)-1] != "close" {
		t.Fatalf("operator log %q: want the chain closed after the failure", log)
	}
}
