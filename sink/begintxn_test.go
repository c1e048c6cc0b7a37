package sink

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
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

// TestFailedCheckpointsInARowAndThePool: every checkpoint that fails after
// the last completed one keeps its pre-committed transaction, and its
// transactional id, until a later checkpoint completes. Checkpoint 1
// completes, checkpoints 2, 3 and 4 fail (their snapshots are taken, as
// under load when they time out, but they never complete), and the
// snapshot of checkpoint 5 pre-commits the fourth pending transaction.
// With pool_size 5 (the default) the BeginTransaction after it finds no
// free id: checkpoint 5 is declined although it could have completed, and
// the next write fails the subtask with the cause, although
// checkpoints.tolerable_failures (default 3) tolerates three failed
// checkpoints in a row. With pool_size 6 (tolerable_failures + 3)
// checkpoint 5 completes, commits the transactions of checkpoints 2 to 5,
// and read_committed holds every record exactly once.
func TestFailedCheckpointsInARowAndThePool(t *testing.T) {
	for _, tc := range []struct {
		pool      int
		exhausted bool
	}{{5, true}, {6, false}} {
		t.Run("pool"+itoa(int64(tc.pool)), func(t *testing.T) {
			opts := newCluster(t)
			m, _ := newMetrics(t)
			logger, _ := testLogger()
			ctx := context.Background()
			s, _ := newKafkaSink("out", 0, NewKafkaTxnCommitter(KafkaTxnConfig{
				Name: "out", Topic: testTopic, TransactionalIDPrefix: "f", PoolSize: tc.pool, TransactionTimeout: time.Minute,
				ClientOpts: opts, Metrics: m, Logger: logger,
			}), m, logger)
			defer s.Close()
			write := func(v string) error {
				return s.ProcessRecord(ctx, 0, runtime.Record{Key: []byte(v), Value: []byte(v)})
			}
			if err := s.Open(ctx); err != nil {
				t.Fatal(err)
			}
			var want []string
			for id := int64(1); id <= 4; id++ {
				v := "v" + itoa(id)
				if err := write(v); err != nil {
					t.Fatal(err)
				}
				want = append(want, v)
				if _, err := s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: id}); err != nil {
					t.Fatalf("snapshot %d: %v", id, err)
				}
				if id == 1 {
					if err := s.NotifyCheckpointComplete(ctx, 1); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := write("v5"); err != nil {
				t.Fatal(err)
			}
			want = append(want, "v5")
			_, err := s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 5})
			if tc.exhausted {
				if !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), "4 pre-committed") {
					t.Fatalf("snapshot 5 after 3 failed checkpoints, pool 5: %v, want ErrPoolExhausted naming 4 pre-committed", err)
				}
				if err := write("v6"); !errors.Is(err, ErrNoOpenTransaction) || !errors.Is(err, ErrPoolExhausted) {
					t.Fatalf("write after the failed BeginTransaction: %v, want ErrNoOpenTransaction wrapping ErrPoolExhausted", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("snapshot 5 after 3 failed checkpoints, pool %d: %v", tc.pool, err)
			}
			if err := s.NotifyCheckpointComplete(ctx, 5); err != nil {
				t.Fatal(err)
			}
			if err := write("v6"); err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, opts, kgo.ReadCommitted()); !slices.Equal(got, want) {
				t.Fatalf("read_committed = %q, want %q", got, want)
			}
		})
	}
}

// TestTransientTransactionErrors: the broker answers the first requests
// that initialise the transactional ids (InitProducerId, at the sink's
// first BeginTransaction) with COORDINATOR_LOAD_IN_PROGRESS, or the first
// Produce requests of a transaction (which, with transactions v2,
// KIP-890, also add the partition to the transaction: franz-go sends no
// AddPartitionsToTxn to this broker) with REQUEST_TIMED_OUT, fewer times
// than franz-go retries a request: the retries absorb them, and read_committed holds
// every record exactly once with no transaction left open.
func TestTransientTransactionErrors(t *testing.T) {
	for _, key := range []kmsg.Key{kmsg.InitProducerID, kmsg.Produce} {
		t.Run(key.Name(), func(t *testing.T) {
			c, opts := newClusterHandle(t)
			var drop, seen atomic.Int32
			drop.Store(3)
			c.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				seen.Add(1)
				if drop.Add(-1) < 0 {
					return nil, nil, false
				}
				if key == kmsg.InitProducerID {
					resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
					resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
					return resp, nil, true
				}
				preq := req.(*kmsg.ProduceRequest)
				resp := preq.ResponseKind().(*kmsg.ProduceResponse)
				for _, rt := range preq.Topics {
					st := kmsg.NewProduceResponseTopic()
					st.Topic, st.TopicID = rt.Topic, rt.TopicID
					for _, rp := range rt.Partitions {
						sp := kmsg.NewProduceResponseTopicPartition()
						sp.Partition, sp.ErrorCode = rp.Partition, kerr.RequestTimedOut.Code
						st.Partitions = append(st.Partitions, sp)
					}
					resp.Topics = append(resp.Topics, st)
				}
				return resp, nil, true
			})
			opts = append(slices.Clip(opts), kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }))
			m, _ := newMetrics(t)
			logger, _ := testLogger()
			ctx := context.Background()
			s, _ := newKafkaSink("out", 0, NewKafkaTxnCommitter(KafkaTxnConfig{
				Name: "out", Topic: testTopic, TransactionalIDPrefix: "t", PoolSize: 3, TransactionTimeout: time.Minute,
				ClientOpts: opts, Metrics: m, Logger: logger,
			}), m, logger)
			defer s.Close()
			if err := s.Open(ctx); err != nil {
				t.Fatal(err)
			}
			var want []string
			for id := int64(1); id <= 3; id++ {
				for i := range 4 {
					v := "v" + itoa(id) + "-" + itoa(int64(i))
					if err := s.ProcessRecord(ctx, 0, runtime.Record{Key: []byte(v), Value: []byte(v)}); err != nil {
						t.Fatal(err)
					}
					want = append(want, v)
				}
				if _, err := s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: id}); err != nil {
					t.Fatalf("snapshot %d: %v", id, err)
				}
				if err := s.NotifyCheckpointComplete(ctx, id); err != nil {
					t.Fatalf("commit %d: %v", id, err)
				}
			}
			if n := drop.Load(); n >= 0 {
				t.Fatalf("%d drops left (%d %s requests): the sink did not meet them", n+1, seen.Load(), key.Name())
			}
			slices.Sort(want)
			if got := readAll(t, opts, kgo.ReadCommitted()); !slices.Equal(got, want) {
				t.Fatalf("read_committed = %q, want %q", got, want)
			}
			if ok, why := stableEqualsEnd(t, opts); !ok {
				t.Fatalf("an open transaction holds readers back: %s", why)
			}
		})
	}
}
