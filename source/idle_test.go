package source

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// ackRecorder is a runtime.CheckpointResponder that records the ids of the
// checkpoints acknowledged, in order.
type ackRecorder struct {
	mu  sync.Mutex
	ids []int64
}

func (a *ackRecorder) Acknowledge(_ runtime.TaskID, id int64, _ runtime.TaskSnapshot) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids = append(a.ids, id)
}
func (a *ackRecorder) Decline(runtime.TaskID, int64, error)                   {}
func (a *ackRecorder) AlignmentDuration(runtime.TaskID, int64, time.Duration) {}

func (a *ackRecorder) acked() []int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.ids)
}

// idleSource is a running source subtask over an empty topic of an
// in-process kfake broker.
type idleSource struct {
	src      *KafkaSource
	acks     *ackRecorder
	barriers chan int64 // ids of the barriers the source emitted
	stop     func() error
}

// startIdleSource runs a source subtask over the empty one-partition topic
// "items"; prepare, if not nil, adjusts the subtask before it runs.
func startIdleSource(t *testing.T, prepare func(*KafkaSource)) *idleSource {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "items"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	ch := runtime.NewChannel(16)
	is := &idleSource{acks: &ackRecorder{}, barriers: make(chan int64, 1024)}
	is.src = New(Config{
		Name: "src", Topic: "items", Partitions: 1, Subtask: 0, Parallelism: 1,
		DiscoveryInterval: time.Second,
		ClientOpts:        []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)},
		Output:            runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{})),
		Responder:         is.acks,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if prepare != nil {
		prepare(is.src)
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for el := range ch {
			switch el.Kind {
			case runtime.KindBarrier:
				is.barriers <- el.Barrier.CheckpointID
			case runtime.KindEndOfInput:
				return
			}
		}
	}()
	stop := make(chan struct{})
	ran := make(chan error, 1)
	go func() { ran <- is.src.Run(context.Background(), stop) }()
	is.stop = sync.OnceValue(func() error {
		close(stop)
		err := <-ran
		<-drained
		return err
	})
	t.Cleanup(func() { _ = is.stop() })
	return is
}

// waitAcked waits until checkpoints 1..n were acknowledged and checks they
// were, in order.
func (is *idleSource) waitAcked(t *testing.T, n int64) {
	t.Helper()
	if !testkit.Poll(10*time.Second, func() bool { return len(is.acks.acked()) >= int(n) }) {
		t.Fatalf("acknowledged %v, want checkpoints 1..%d", is.acks.acked(), n)
	}
	want := make([]int64, n)
	for i := range want {
		want[i] = int64(i) + 1
	}
	if got := is.acks.acked(); !slices.Equal(got, want) {
		t.Fatalf("acknowledged %v, want %v", got, want)
	}
}

// TestIdleSourceWakesBoundedTimes triggers a checkpoint every 100 ms for 5 s
// on a source reading an empty topic: each trigger may end one poll and each
// 500 ms poll bound another, so the subtask wakes at most about 60 times (50
// seen: every trigger ends a poll before its bound). It used to wake about a
// million times (a consumed mailbox signal was re-posted by every poll and
// never cleared: a busy loop).
func TestIdleSourceWakesBoundedTimes(t *testing.T) {
	is := startIdleSource(t, nil)
	is.src.TriggerCheckpoint(&runtime.Barrier{CheckpointID: 1})
	is.waitAcked(t, 1) // the poll loop runs
	before := is.src.wakes.Load()

	const period, span, pollBound = 100 * time.Millisecond, 5 * time.Second, 500 * time.Millisecond
	tick := time.NewTicker(period)
	defer tick.Stop()
	end := time.After(span)
	n := int64(1)
loop:
	for {
		select {
		case <-tick.C:
			n++
			is.src.TriggerCheckpoint(&runtime.Barrier{CheckpointID: n})
		case <-end:
			break loop
		}
	}
	is.waitAcked(t, n)
	wakes := is.src.wakes.Load() - before
	triggers := n - 1
	bound := 2*triggers + 2*int64(span/pollBound) + 10
	t.Logf("%d checkpoint triggers in %v: the source woke %d times (bound %d)", triggers, span, wakes, bound)
	if wakes > bound {
		t.Errorf("an idle source woke %d times for %d checkpoint triggers in %v, want at most %d", wakes, triggers, span, bound)
	}
	if err := is.stop(); err != nil {
		t.Fatalf("Run = %v, want nil after stop", err)
	}
	var emitted []int64
	for len(is.barriers) > 0 {
		emitted = append(emitted, <-is.barriers)
	}
	if len(emitted) != int(n) || emitted[0] != 1 || emitted[n-1] != n || !slices.IsSorted(emitted) {
		t.Errorf("emitted barriers %v, want 1..%d in order", emitted, n)
	}
}

// TestCheckpointTriggerInterruptsPoll makes a poll wait for an hour: the
// checkpoints triggered meanwhile are still taken, each ending the poll it
// arrives in (one wake-up per trigger), so the mailbox cancels the poll.
func TestCheckpointTriggerInterruptsPoll(t *testing.T) {
	caughtUp := make(chan struct{})
	is := startIdleSource(t, func(s *KafkaSource) {
		s.pollBound = time.Hour
		s.cfg.OnCaughtUp = func() { close(caughtUp) }
	})
	// The start and end offset lookups answer through the mailbox and may
	// end a poll each: count the polls from when both are in.
	select {
	case <-caughtUp:
	case <-time.After(30 * time.Second):
		t.Fatal("the source did not catch up with the end offsets seen at start")
	}
	base := is.src.wakes.Load()
	for id := int64(1); id <= 3; id++ {
		is.src.TriggerCheckpoint(&runtime.Barrier{CheckpointID: id})
		is.waitAcked(t, id)
		if got := <-is.barriers; got != id {
			t.Fatalf("emitted barrier %d, want %d", got, id)
		}
	}
	if err := is.stop(); err != nil {
		t.Fatalf("Run = %v, want nil after stop", err)
	}
	// The first poll starts before or after the first trigger; every later
	// one starts after a trigger ended the previous one, and stop ends the
	// last.
	// One poll started after each trigger; one more when the lookups came
	// in between polls.
	if got := is.src.wakes.Load() - base; got < 3 || got > 4 {
		t.Errorf("the source polled %d times for 3 triggers, want 3 or 4", got)
	}
}
