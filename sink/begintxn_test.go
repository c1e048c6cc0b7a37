package sink

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestFailedBeginTransactionFailsWithItsCauseAndRestartIsExact is the
// failure seen under heavy load ("sink: no open transaction (the last
// BeginTransaction failed)") at the sink level: the broker drops the
// connection of EndTxn requests more often than franz-go retries, so the
// commit of checkpoint 1 is retried with back-off (it commits) and its
// slot's producer is retired; with a pool of 2, the BeginTransaction after
// checkpoint 2's pre-commit finds no free slot (ErrPoolExhausted), the
// snapshot declines checkpoint 2, and the next write fails the subtask
// with ErrNoOpenTransaction wrapping that cause (errors.Is finds
// ErrPoolExhausted, and the message says a slot was retired), not a bare
// "no open transaction" that hides why. The restart from checkpoint 1 (its
// recovery fences the ids, which aborts checkpoint 2's transaction) and
// the replay of the records after it leave read_committed holding every
// record exactly once.
func TestFailedBeginTransactionFailsWithItsCauseAndRestartIsExact(t *testing.T) {
	c, opts := newClusterHandle(t)
	var drop atomic.Int32
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if drop.Add(-1) >= 0 {
			return nil, errors.New("test: connection dropped"), true
		}
		return nil, nil, false
	})
	opts = append(slices.Clip(opts), kgo.RequestRetries(1), kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }))
	m, _ := newMetrics(t)
	logger, logs := testLogger()
	ctx := context.Background()
	newSink := func() *connector.TwoPhaseCommitSink {
		s, _ := newKafkaSink("out", 0, NewKafkaTxnCommitter(KafkaTxnConfig{
			Name: "out", Topic: testTopic, TransactionalIDPrefix: "b", PoolSize: 2, TransactionTimeout: time.Minute,
			ClientOpts: opts, Metrics: m, Logger: logger,
		}), m, logger)
		return s
	}
	s := newSink()
	write := func(vs ...string) {
		t.Helper()
		for _, v := range vs {
			if err := s.ProcessRecord(ctx, 0, runtime.Record{Key: []byte(v), Value: []byte(v)}); err != nil {
				t.Fatalf("write %s: %v", v, err)
			}
		}
	}
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	write("a")
	fin, err := s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkpoint1 := snapshotCommittables(t, fin)
	write("b")
	drop.Store(6)
	if err := s.NotifyCheckpointComplete(ctx, 1); err != nil {
		t.Fatalf("commit of checkpoint 1 with dropped connections: %v\n%s", err, logs.String())
	}
	if n := drop.Load(); n >= 0 {
		t.Fatalf("%d drops left: the commit did not meet them", n+1)
	}
	if _, err := s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 2}); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("snapshot 2: %v, want ErrPoolExhausted (slot 0 retired, slot 1 pre-committed)", err)
	}
	err = s.ProcessRecord(ctx, 0, runtime.Record{Key: []byte("c"), Value: []byte("c")})
	if !errors.Is(err, ErrNoOpenTransaction) || !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), "1 retired") {
		t.Fatalf("write after the failed BeginTransaction: %v, want ErrNoOpenTransaction wrapping ErrPoolExhausted (1 retired)", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// The restart restores checkpoint 1 and replays what came after it.
	if err := RecoverTransactions(ctx, RecoverConfig{Name: "out", ClientOpts: opts, Committables: checkpoint1, TransactionalIDPrefix: "b",
		PoolSize: 2, Subtasks: 1, TransactionTimeout: time.Minute, Metrics: m, Logger: logger}); err != nil {
		t.Fatal(err)
	}
	s = newSink()
	defer s.Close()
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	write("b", "c")
	if _, err := s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 3}); err != nil {
		t.Fatal(err)
	}
	if err := s.NotifyCheckpointComplete(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if got, want := readAll(t, opts, kgo.ReadCommitted()), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("read_committed = %q, want %q exactly once each", got, want)
	}
	if ok, why := stableEqualsEnd(t, opts); !ok {
		t.Fatalf("an open transaction holds readers back: %s", why)
	}
}
