package sink

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstreamd/kstreamd/internal/kafkaretry"
)

// TestCommitRetriesTransientErrors: the broker drops the connection of the
// first EndTxn requests (as a broker that went away does), more often than
// franz-go retries by itself; the commit is retried with the recorded
// producer id and epoch until it succeeds, each retry counted and logged,
// the output is committed once, and the slot's producer, whose state
// franz-go no longer knows, is retired (no new producer: its
// InitProducerId could abort a new owner's transaction on the id) while
// the other slots carry on.
func TestCommitRetriesTransientErrors(t *testing.T) {
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
	reg := prometheus.NewRegistry()
	retries, err := kafkaretry.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	logger, logs := testLogger()
	ctx := context.Background()
	k := NewKafkaTxnCommitter(KafkaTxnConfig{
		Name: "out", Topic: testTopic, TransactionalIDPrefix: "p", PoolSize: 3, TransactionTimeout: time.Minute,
		ClientOpts: opts, Metrics: m, Retries: retries, Logger: logger,
	})
	defer k.Close()

	c1 := writeAndPreCommit(t, k, 1, "a", "b")
	drop.Store(6)
	if err := k.Commit(ctx, c1); err != nil {
		t.Fatalf("commit with dropped connections: %v\n%s", err, logs.String())
	}
	if n := drop.Load(); n >= 0 {
		t.Fatalf("%d drops left: the commit did not meet them", n+1)
	}
	if n := strings.Count(logs.String(), "commit failed; retrying"); n != 1 {
		t.Errorf("%d \"commit failed; retrying\" lines, want 1:\n%s", n, logs.String())
	}
	if got := retryCount(t, reg, "commit"); got < 1 {
		t.Errorf("kstreamd_kafka_retries_total{operation=commit} = %v, want >= 1", got)
	}
	k.Snapshotted(2)
	k.CheckpointCompleted(2)
	for id := int64(2); id <= 4; id++ {
		c := writeAndPreCommit(t, k, id, "v"+string(rune('0'+id)))
		if c.TransactionalID == c1.TransactionalID {
			t.Fatalf("transaction %d runs on the retired %s", id, c.TransactionalID)
		}
		if err := k.Commit(ctx, c); err != nil {
			t.Fatalf("commit %d on %s: %v", id, c.TransactionalID, err)
		}
		k.Snapshotted(id + 10)
		k.CheckpointCompleted(id + 10)
	}
	if got, want := readAll(t, opts, kgo.ReadCommitted()), []string{"a", "b", "v2", "v3", "v4"}; !slices.Equal(got, want) {
		t.Fatalf("read_committed = %q, want %q", got, want)
	}
	if ok, why := stableEqualsEnd(t, opts); !ok {
		t.Fatalf("an open transaction holds readers back: %s", why)
	}
}

// retryCount returns kstreamd_kafka_retries_total{operation}.
func retryCount(t *testing.T, reg *prometheus.Registry, op string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if f.GetName() == "kstreamd_kafka_retries_total" && m.GetLabel()[0].GetValue() == op {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestCommitRefusedAfterItWentThrough is the single-process side of a
// commit the broker refuses although it is committed: an earlier attempt
// of the commit went through (here a raw EndTxn with the recorded producer
// id and epoch, as a retry's) and the live producer's EndTxn is answered
// with an error classify takes for a lost transaction. Answered
// INVALID_TXN_STATE it is success (counted committed); answered
// INVALID_PRODUCER_EPOCH or PRODUCER_FENCED (the id's epoch moved past the
// producer's: another producer initialised it) it is an error wrapping
// ErrFenced; never a *LostOutputError or a lost count, and read_committed
// holds the records once. The slot's producer is retired either way.
func TestCommitRefusedAfterItWentThrough(t *testing.T) {
	for _, tc := range []struct {
		answer error
		fenced bool
	}{{kerr.InvalidTxnState, false}, {kerr.InvalidProducerEpoch, true}, {kerr.ProducerFenced, true}} {
		t.Run(tc.answer.(*kerr.Error).Message, func(t *testing.T) {
			c, opts := newClusterHandle(t)
			m, reg := newMetrics(t)
			logger, logs := testLogger()
			ctx := context.Background()
			k := committer(opts, "p", 0, time.Minute, m, logger)
			defer k.Close()
			c1 := writeAndPreCommit(t, k, 1, "a", "b")
			if err := CommitRecovered(ctx, opts, c1); err != nil {
				t.Fatal(err)
			}
			code := tc.answer.(*kerr.Error).Code
			c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
				resp := req.(*kmsg.EndTxnRequest).ResponseKind().(*kmsg.EndTxnResponse)
				resp.ErrorCode = code
				return resp, nil, true
			})
			err := k.Commit(ctx, c1)
			if le, ok := errors.AsType[*LostOutputError](err); ok {
				t.Fatalf("commit refused with %v after it went through reports lost output: %v", tc.answer, le)
			}
			if tc.fenced && !errors.Is(err, ErrFenced) {
				t.Errorf("commit: %v, want an error wrapping ErrFenced", err)
			}
			if !tc.fenced && err != nil {
				t.Errorf("commit: %v, want success", err)
			}
			if got := counter(t, reg, "lost"); got != 0 {
				t.Errorf("lost transactions = %v, want 0\n%s", got, logs.String())
			}
			if got, want := counter(t, reg, "committed"), map[bool]float64{false: 1, true: 0}[tc.fenced]; got != want {
				t.Errorf("committed transactions = %v, want %v", got, want)
			}
			if got, want := readAll(t, opts, kgo.ReadCommitted()), []string{"a", "b"}; !slices.Equal(got, want) {
				t.Errorf("read_committed = %q, want %q", got, want)
			}
			if k.slots[0].cl != nil {
				t.Errorf("slot %s keeps the producer the broker refused", k.slots[0].id)
			}
		})
	}
}
