package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// These tests run the sink against an in-process kfake broker. kfake is more
// lenient than Kafka in places (InitProducerId aborts an open transaction
// inline instead of answering CONCURRENT_TRANSACTIONS, the resource "" of
// DescribeConfigs answers every broker config); the sink's code paths for
// Kafka's answers are covered by retryTxn and the per-broker describe.

const testTopic = "out"

func newCluster(t *testing.T, opts ...kfake.Opt) []kgo.Opt {
	t.Helper()
	_, cl := newClusterHandle(t, opts...)
	return cl
}

func newClusterHandle(t *testing.T, opts ...kfake.Opt) (*kfake.Cluster, []kgo.Opt) {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(3, testTopic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
}

func testLogger() (*slog.Logger, *testkit.SyncBuffer) {
	var buf testkit.SyncBuffer
	return slog.New(slog.NewTextHandler(&buf, nil)), &buf
}

func newMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// counter returns kstreamd_sink_transactions_total{result} (0 when absent).
func counter(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "kstreamd_sink_transactions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func committer(opts []kgo.Opt, prefix string, subtask int, timeout time.Duration, m *Metrics, logger *slog.Logger) *KafkaTxnCommitter {
	return NewKafkaTxnCommitter(KafkaTxnConfig{
		Name: "out", Subtask: subtask, Topic: testTopic, TransactionalIDPrefix: prefix, PoolSize: 3,
		TransactionTimeout: timeout, ClientOpts: opts, Metrics: m, Logger: logger,
	})
}

// writeAndPreCommit opens a transaction, writes values (keys k0, k1, ...)
// and pre-commits it for checkpoint id.
func writeAndPreCommit(t *testing.T, k *KafkaTxnCommitter, id int64, values ...string) Committable {
	t.Helper()
	ctx := context.Background()
	if err := k.BeginTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	for i, v := range values {
		if err := k.Write(ctx, runtime.Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte(v), Timestamp: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := k.PreCommit(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// readAll reads topic to its end offsets with isolation level iso and
// returns the values sorted.
func readAll(t *testing.T, opts []kgo.Opt, iso kgo.IsolationLevel) []string {
	t.Helper()
	var out []string
	for _, r := range testkit.ReadTopicWith(t, opts, iso, testTopic, 10*time.Second) {
		out = append(out, string(r.Value))
	}
	slices.Sort(out)
	return out
}

// stableEqualsEnd reports whether every partition's last stable offset
// equals its high watermark: no open transaction holds read_committed
// readers back.
func stableEqualsEnd(t *testing.T, opts []kgo.Opt) (bool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	lso, err := adm.ListCommittedOffsets(ctx, testTopic)
	if err != nil {
		t.Fatal(err)
	}
	hwm, err := adm.ListEndOffsets(ctx, testTopic)
	if err != nil {
		t.Fatal(err)
	}
	ok := true
	var sb strings.Builder
	hwm.Each(func(o kadm.ListedOffset) {
		l, _ := lso.Lookup(o.Topic, o.Partition)
		fmt.Fprintf(&sb, "p%d lso=%d hwm=%d; ", o.Partition, l.Offset, o.Offset)
		if l.Offset != o.Offset {
			ok = false
		}
	})
	return ok, sb.String()
}

// waitTimedOut waits until the broker has aborted transaction id (it is no
// longer ongoing), as kfake does once its timeout passed.
func waitTimedOut(t *testing.T, opts []kgo.Opt, id string) {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var state string
	if !testkit.Poll(30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ds, err := adm.DescribeTransactions(ctx, id)
		if err != nil {
			return false
		}
		state = ds[id].State
		return state != "Ongoing"
	}) {
		t.Fatalf("transaction %s still %q 30s later: the broker did not abort it after its timeout", id, state)
	}
}

func recoverCfg(opts []kgo.Opt, prefix string, cs []Committable, subtasks int, m *Metrics, logger *slog.Logger) RecoverConfig {
	return RecoverConfig{Name: "out", ClientOpts: opts, Committables: cs, TransactionalIDPrefix: prefix, PoolSize: 3,
		Subtasks: subtasks, TransactionTimeout: time.Minute, Metrics: m, Logger: logger}
}

// TestRecoverCommitsOnceAndAgain is "crash after a pre-commit, restore
// twice from the same checkpoint" at the sink level: the first recovery
// commits the open transaction and fences the ids; the second one meets
// PRODUCER_FENCED (the id moved on) and must recognise the transaction as
// committed from its COMMIT marker, not report it lost.
func TestRecoverCommitsOnceAndAgain(t *testing.T) {
	opts := newCluster(t)
	m, reg := newMetrics(t)
	logger, logs := testLogger()
	k := committer(opts, "p", 0, time.Minute, m, logger)
	c := writeAndPreCommit(t, k, 7, "a", "b", "c")
	k.Close() // crash: the transaction stays open
	if c.Records != 3 || c.Topic != testTopic || c.ProducerID < 0 || c.CheckpointID != 7 || c.TransactionalID != "p-0-0" {
		t.Fatalf("committable %+v: want 3 records of p-0-0, checkpoint 7, located in %q", c, testTopic)
	}
	if got := readAll(t, opts, kgo.ReadCommitted()); len(got) != 0 {
		t.Fatalf("read_committed before recovery = %q, want nothing", got)
	}
	ctx := context.Background()
	for i := 1; i <= 2; i++ {
		if err := RecoverTransactions(ctx, recoverCfg(opts, "p", []Committable{c}, 1, m, logger)); err != nil {
			t.Fatalf("recovery %d: %v\n%s", i, err, logs.String())
		}
		if got, want := readAll(t, opts, kgo.ReadCommitted()), []string{"a", "b", "c"}; !slices.Equal(got, want) {
			t.Fatalf("read_committed after recovery %d = %q, want %q", i, got, want)
		}
		if ok, s := stableEqualsEnd(t, opts); !ok {
			t.Fatalf("after recovery %d: last stable offset below high watermark: %s", i, s)
		}
	}
	if n := strings.Count(logs.String(), `msg="committed restored transaction"`); n != 1 {
		t.Errorf("%d \"committed restored transaction\" lines, want 1:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), `msg="restored transaction was already committed"`); n != 1 {
		t.Errorf("%d \"already committed\" lines, want 1:\n%s", n, logs.String())
	}
	if got := counter(t, reg, "lost"); got != 0 {
		t.Errorf("lost transactions = %v, want 0", got)
	}
	if got := counter(t, reg, "committed"); got != 1 {
		t.Errorf("committed transactions = %v, want 1", got)
	}
	// A committable that does not locate its records (written before
	// Topic, Partition and Offset existed) cannot be told apart from a lost
	// one: it is reported as lost, never dropped silently.
	old := c
	old.Topic, old.Partition, old.Offset = "", 0, 0
	err := RecoverTransactions(ctx, recoverCfg(opts, "p", []Committable{old}, 1, m, logger))
	if le, ok := errors.AsType[*LostOutputError](err); !ok || !strings.Contains(le.Error(), "does not locate a record") {
		t.Fatalf("recovery of a committable without location: %v, want a lost-output error saying so", err)
	}
}

// TestRecoverRepeatedCommitBeforeFence is a restore after the live commit
// went through but before a later checkpoint completed: the raw EndTxn is a
// repeated commit the broker accepts (KIP-890 retry at epoch+1).
func TestRecoverRepeatedCommitBeforeFence(t *testing.T) {
	opts := newCluster(t)
	m, reg := newMetrics(t)
	logger, logs := testLogger()
	k := committer(opts, "p", 0, time.Minute, m, logger)
	c := writeAndPreCommit(t, k, 3, "x", "y")
	if err := k.Commit(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	k.Close()
	if err := RecoverTransactions(context.Background(), recoverCfg(opts, "p", []Committable{c}, 1, m, logger)); err != nil {
		t.Fatalf("recovery: %v\n%s", err, logs.String())
	}
	if got, want := readAll(t, opts, kgo.ReadCommitted()), []string{"x", "y"}; !slices.Equal(got, want) {
		t.Fatalf("read_committed = %q, want %q", got, want)
	}
	if got := counter(t, reg, "lost"); got != 0 {
		t.Errorf("lost transactions = %v, want 0", got)
	}
}

// TestRecoverTimedOutTransaction: the broker aborted the pre-committed
// transaction after its timeout; the restore reports lost output naming the
// transactional id and the checkpoint, or with IgnoreLost counts it and
// goes on.
func TestRecoverTimedOutTransaction(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		t.Run(fmt.Sprintf("ignore=%v", ignore), func(t *testing.T) {
			opts := newCluster(t)
			m, reg := newMetrics(t)
			logger, logs := testLogger()
			k := committer(opts, "p", 1, time.Second, m, logger)
			c := writeAndPreCommit(t, k, 12, "lost-1", "lost-2")
			k.Close()
			waitTimedOut(t, opts, c.TransactionalID) // kfake aborts it after the 1 s timeout
			cfg := recoverCfg(opts, "p", []Committable{c}, 2, m, logger)
			cfg.IgnoreLost = ignore
			err := RecoverTransactions(context.Background(), cfg)
			if ignore {
				if err != nil {
					t.Fatalf("recovery with IgnoreLost: %v", err)
				}
				if !strings.Contains(logs.String(), "lost output ignored") || !strings.Contains(logs.String(), "transactional_id=p-1-0") {
					t.Errorf("no \"lost output ignored\" log naming p-1-0:\n%s", logs.String())
				}
			} else {
				var le *LostOutputError
				if !errors.As(err, &le) {
					t.Fatalf("recovery error %v, want a *LostOutputError", err)
				}
				if le.TransactionalID != "p-1-0" || le.CheckpointID != 12 || le.Records != 2 {
					t.Errorf("lost output %+v, want p-1-0, checkpoint 12, 2 records", le)
				}
				for _, s := range []string{"p-1-0", "checkpoint 12", "ignore_lost_transactions", "ABORT marker"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q lacks %q", err, s)
					}
				}
			}
			if got := counter(t, reg, "lost"); got != 1 {
				t.Errorf("lost transactions = %v, want 1", got)
			}
			if got := readAll(t, opts, kgo.ReadCommitted()); len(got) != 0 {
				t.Errorf("read_committed = %q, want nothing", got)
			}
			if got := readAll(t, opts, kgo.ReadUncommitted()); len(got) != 2 {
				t.Errorf("read_uncommitted = %q, want the 2 aborted records", got)
			}
		})
	}
}

// TestRecoverFencesLingeringTransactions: open transactions on ids of the
// sink that the restored checkpoint does not carry are aborted: ids inside
// the fenced range (subtask 1 of 2) and outside it (subtask 4, slot 2 of a
// run with a larger parallelism that crashed before any checkpoint); an
// ongoing transaction of another prefix is left alone.
func TestRecoverFencesLingeringTransactions(t *testing.T) {
	opts := newCluster(t)
	m, reg := newMetrics(t)
	logger, logs := testLogger()
	ctx := context.Background()

	k1 := committer(opts, "p", 1, time.Minute, m, logger)
	writeAndPreCommit(t, k1, 5, "in-range")
	k1.Close()
	// Subtask 4's third slot: take two slots first.
	k4 := committer(opts, "p", 4, time.Minute, m, logger)
	for i := int64(1); i <= 2; i++ {
		c := writeAndPreCommit(t, k4, i, fmt.Sprintf("committed-%d", i))
		if err := k4.Commit(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	c3 := writeAndPreCommit(t, k4, 3, "out-of-range")
	k4.Close()
	if c3.TransactionalID != "p-4-2" {
		t.Fatalf("third transaction on %s, want p-4-2", c3.TransactionalID)
	}
	other := committer(opts, "q", 0, time.Minute, m, logger)
	oc := writeAndPreCommit(t, other, 1, "other-job")
	defer other.Close()

	if err := RecoverTransactions(ctx, recoverCfg(opts, "p", nil, 2, m, logger)); err != nil {
		t.Fatalf("recovery: %v\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "transactional_id=p-4-2") {
		t.Errorf("no log line fencing p-4-2:\n%s", logs.String())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ds, err := kadm.NewClient(cl).DescribeTransactions(ctx, "p-1-0", "p-4-2", "q-0-0")
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"p-1-0": false, "p-4-2": false, "q-0-0": true} {
		if got := ds[id].State == "Ongoing"; got != want {
			t.Errorf("transaction %s state %q, want ongoing=%v", id, ds[id].State, want)
		}
	}
	// Finish the other job's transaction, then nothing holds readers back.
	if err := other.Commit(ctx, oc); err != nil {
		t.Fatal(err)
	}
	if ok, s := stableEqualsEnd(t, opts); !ok {
		t.Fatalf("last stable offset below high watermark: %s", s)
	}
	if got, want := readAll(t, opts, kgo.ReadCommitted()), []string{"committed-1", "committed-2", "other-job"}; !slices.Equal(got, want) {
		t.Fatalf("read_committed = %q, want %q", got, want)
	}
	if got := counter(t, reg, "lost"); got != 0 {
		t.Errorf("lost = %v, want 0", got)
	}
}

// TestCommitLostIgnoredRetiresProducer: a live commit that fails because
// the broker aborted the transaction (timeout) is lost; with IgnoreLost the
// slot's fenced producer is retired, not replaced (a new producer's
// InitProducerId could abort a new owner's transaction on the id,
// TestZombieRetiredSlotNeverReinitialises), and the other slots carry on.
func TestCommitLostIgnoredRetiresProducer(t *testing.T) {
	opts := newCluster(t)
	m, reg := newMetrics(t)
	logger, logs := testLogger()
	ctx := context.Background()
	k := NewKafkaTxnCommitter(KafkaTxnConfig{
		// 4 s: long enough that v2..v4 below commit inside it on a loaded
		// CI machine (1 s lost v2 there), short enough to wait out for c1.
		Name: "out", Topic: testTopic, TransactionalIDPrefix: "p", PoolSize: 3, TransactionTimeout: 4 * time.Second,
		IgnoreLost: true, ClientOpts: opts, Metrics: m, Logger: logger,
	})
	defer k.Close()
	c1 := writeAndPreCommit(t, k, 1, "timed-out")
	waitTimedOut(t, opts, c1.TransactionalID)
	if err := k.Commit(ctx, c1); err != nil {
		t.Fatalf("commit of a timed-out transaction with IgnoreLost: %v", err)
	}
	if got := counter(t, reg, "lost"); got != 1 {
		t.Fatalf("lost = %v, want 1\n%s", got, logs.String())
	}
	k.Snapshotted(2)
	k.CheckpointCompleted(2) // slot 0 is free again
	if !strings.Contains(logs.String(), "transactional producer retired") {
		t.Errorf("no retirement logged:\n%s", logs.String())
	}
	// Slots 1 and 2 take the transactions; slot 0 never again.
	for id := int64(2); id <= 4; id++ {
		c := writeAndPreCommit(t, k, id, fmt.Sprintf("v%d", id))
		if c.TransactionalID == c1.TransactionalID {
			t.Fatalf("transaction %d runs on the retired %s", id, c.TransactionalID)
		}
		if err := k.Commit(ctx, c); err != nil {
			t.Fatalf("commit %d on %s: %v", id, c.TransactionalID, err)
		}
		k.Snapshotted(id + 10)
		k.CheckpointCompleted(id + 10)
	}
	if got, want := readAll(t, opts, kgo.ReadCommitted()), []string{"v2", "v3", "v4"}; !slices.Equal(got, want) {
		t.Fatalf("read_committed = %q, want %q", got, want)
	}
}

// TestEmptyEpochs: transactions without records pre-commit as empty
// committables and commit without a broker round trip, count nothing as
// committed or aborted, and restore as nothing to do.
func TestEmptyEpochs(t *testing.T) {
	opts := newCluster(t)
	m, reg := newMetrics(t)
	logger, _ := testLogger()
	ctx := context.Background()
	k := committer(opts, "p", 0, time.Minute, m, logger)
	defer k.Close()
	s, _ := newKafkaSink("out", 0, k, m, logger)
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 8; id++ { // more epochs than the pool has ids
		fin, err := s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: id})
		if err != nil {
			t.Fatalf("snapshot %d: %v", id, err)
		}
		snap, err := fin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ts checkpoint.TaskState
		if err := json.Unmarshal(snap.State, &ts); err != nil {
			t.Fatal(err)
		}
		envs, err := checkpoint.DecodeCommittables(ts)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := DecodeCommittables("s", envs)
		if err != nil || len(cs) != 1 {
			t.Fatalf("committables %v, %v; want one", cs, err)
		}
		for _, c := range cs {
			if c.Records != 0 {
				t.Fatalf("empty epoch %d: committable %+v has records", id, c)
			}
			// Restoring it is a no-op.
			if err := CommitRecovered(ctx, opts, c); err != nil {
				t.Fatalf("restore empty committable: %v", err)
			}
		}
		if err := s.NotifyCheckpointComplete(ctx, id); err != nil {
			t.Fatalf("commit %d: %v", id, err)
		}
		if s.PendingCommits() {
			t.Fatalf("pending commits after checkpoint %d", id)
		}
	}
	for _, r := range []string{"committed", "aborted", "lost"} {
		if got := counter(t, reg, r); got != 0 {
			t.Errorf("%s transactions = %v, want 0", r, got)
		}
	}
	if err := s.EndInput(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, reg, "aborted"); got != 0 {
		t.Errorf("aborted after EndInput = %v, want 0", got)
	}
	if ok, st := stableEqualsEnd(t, opts); !ok {
		t.Fatalf("last stable offset below high watermark: %s", st)
	}
}

// TestCheckTransactionTimeout reads transaction.max.timeout.ms per broker.
// Kafka answers a DescribeConfigs of the broker resource "" with the
// cluster-wide dynamic defaults only, never a static config such as
// transaction.max.timeout.ms; kfake answers every config there, so the
// cluster is made to answer as Kafka does.
func TestCheckTransactionTimeout(t *testing.T) {
	c, opts := newClusterHandle(t, kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "60000"}))
	c.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp, ok := testkit.DescribeConfigsAsKafka(req)
		return resp, nil, ok
	})
	ctx := context.Background()
	err := CheckTransactionTimeout(ctx, opts, "out", 2*time.Minute)
	if !errors.Is(err, ErrTransactionTimeout) {
		t.Fatalf("2m against a 60000 ms maximum: %v, want ErrTransactionTimeout", err)
	}
	for _, s := range []string{"2m0s", "1m0s", "transaction.max.timeout.ms"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
	if err := CheckTransactionTimeout(ctx, opts, "out", time.Minute); err != nil {
		t.Fatalf("1m against a 60000 ms maximum: %v", err)
	}
	// And the producer the check protects: a timeout above the maximum is
	// refused by the broker.
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := fence(ctx, cl, "p-0-0", 2*time.Minute); !errors.Is(err, kerr.InvalidTransactionTimeout) {
		t.Fatalf("InitProducerId with 2m: %v, want INVALID_TRANSACTION_TIMEOUT", err)
	}
}

// TestBufferingSinkRestoresBuffer: records buffered below the threshold go
// into the snapshot; a new subtask restored from it writes them when the
// next checkpoint completes (none lost), while the crashed one never wrote
// them.
func TestBufferingSinkRestoresBuffer(t *testing.T) {
	opts := newCluster(t)
	logger, _ := testLogger()
	ctx := context.Background()
	newSink := func(restored map[string]state.OperatorListSnapshot) *BufferingSink {
		return NewBufferingSink(New(Config{Name: "out", Topic: testTopic, ClientOpts: opts, Logger: logger}), 100, restored)
	}
	b := newSink(nil)
	if err := b.Open(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"r0", "r1", "r2", "r3", "r4"}
	for i, v := range want {
		if err := b.ProcessRecord(ctx, 0, runtime.Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	fin, err := b.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := fin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.Close() // crash before the checkpoint's completion flushed the buffer
	if got := readAll(t, opts, kgo.ReadUncommitted()); len(got) != 0 {
		t.Fatalf("topic holds %q before the restore, want nothing", got)
	}
	var ts checkpoint.TaskState
	if err := json.Unmarshal(snap.State, &ts); err != nil {
		t.Fatal(err)
	}
	if n := len(ts.Operator[BufferedState].Entries); n != len(want) {
		t.Fatalf("snapshot holds %d buffered records, want %d", n, len(want))
	}
	r := newSink(map[string]state.OperatorListSnapshot{BufferedState: ts.Operator[BufferedState]})
	if err := r.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Len() != len(want) {
		t.Fatalf("restored buffer holds %d records, want %d", r.Len(), len(want))
	}
	if err := r.NotifyCheckpointComplete(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, opts, kgo.ReadCommitted()); !slices.Equal(got, want) {
		t.Fatalf("after restore and checkpoint completion: %q, want %q", got, want)
	}
}

// TestRecoverFencesChangedPrefix: the previous run wrote under prefix "old"
// (a pre-committed transaction in the checkpoint and the next epoch's open
// one on another slot); the restore runs with prefix "new". The
// committable is committed, every id of both prefixes is fenced, the open
// transaction of "old" is aborted and counted, and read_committed readers
// are not held back: the last stable offset equals the high watermark
// right after the recovery, not after the old transaction's timeout.
func TestRecoverFencesChangedPrefix(t *testing.T) {
	opts := newCluster(t)
	logger, logs := testLogger()
	ctx := context.Background()

	old := committer(opts, "old", 0, time.Minute, nil, logger)
	c := writeAndPreCommit(t, old, 4, "pre-committed")
	if err := old.BeginTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	if err := old.Write(ctx, runtime.Record{Key: []byte("k"), Value: []byte("open"), Timestamp: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if old.open.id != "old-0-1" {
		t.Fatalf("open transaction on %s, want old-0-1", old.open.id)
	}
	if err := old.open.cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	old.Close() // crash: the open transaction lingers
	if ok, _ := stableEqualsEnd(t, opts); ok {
		t.Fatal("precondition: the open transactions should hold the last stable offset back")
	}

	m, reg := newMetrics(t)
	m.Init("out")
	if err := RecoverTransactions(ctx, recoverCfg(opts, "new", []Committable{c}, 1, m, logger)); err != nil {
		t.Fatalf("recovery: %v\n%s", err, logs.String())
	}
	if ok, s := stableEqualsEnd(t, opts); !ok {
		t.Fatalf("last stable offset below high watermark after recovery: %s", s)
	}
	if got, want := readAll(t, opts, kgo.ReadCommitted()), []string{"pre-committed"}; !slices.Equal(got, want) {
		t.Fatalf("read_committed = %q, want %q", got, want)
	}
	// Prefixes new and old, 1 subtask, pool 3: 6 ids fenced; one of them
	// (old-0-1) held an open transaction.
	for result, want := range map[string]float64{"committed": 1, "fenced": 6, "aborted": 1, "lost": 0} {
		if got := counter(t, reg, result); got != want {
			t.Errorf("transactions{result=%q} = %v, want %v", result, got, want)
		}
	}
	if !strings.Contains(logs.String(), "transactional_id=old-0-1") || !strings.Contains(logs.String(), `prefixes="[new old]"`) {
		t.Errorf("log does not name the aborted transaction old-0-1 and both prefixes:\n%s", logs.String())
	}
}

func TestKnownIDs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   RecoverConfig
		want  transactionalIDs
		first string
		n     int
	}{
		{"config only", RecoverConfig{TransactionalIDPrefix: "p", Subtasks: 2, PoolSize: 2},
			transactionalIDs{prefixes: []string{"p"}, subtasks: 2, pool: 2}, "p-0-0", 4},
		{"old prefixes sorted, committables widen the range", RecoverConfig{TransactionalIDPrefix: "p", Subtasks: 1, PoolSize: 2,
			Committables: []Committable{{TransactionalID: "z-x-0-4"}, {TransactionalID: "p-2-0"}, {TransactionalID: "a-0-1"}, {TransactionalID: "z-x-0-0"}, {TransactionalID: "junk"}}},
			transactionalIDs{prefixes: []string{"p", "a", "z-x"}, subtasks: 3, pool: 5}, "p-0-0", 45},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := knownIDs(tc.cfg)
			if !slices.Equal(got.prefixes, tc.want.prefixes) || got.subtasks != tc.want.subtasks || got.pool != tc.want.pool {
				t.Fatalf("knownIDs = %+v, want %+v", got, tc.want)
			}
			if ids := got.ids(); len(ids) != tc.n || ids[0] != tc.first {
				t.Fatalf("ids = %d starting %q, want %d starting %q", len(ids), ids[0], tc.n, tc.first)
			}
		})
	}
}

// TestRecoverFenceOnlyCountsAborts: a cluster-mode unit's recovery fences
// only its own ids (FenceOnly); each of them that held an open
// transaction of the unit's previous owner counts as aborted, the others
// as fenced only: 2 fenced, 1 aborted, and the open transaction is gone.
func TestRecoverFenceOnlyCountsAborts(t *testing.T) {
	opts := newCluster(t)
	m, reg := newMetrics(t)
	logger, logs := testLogger()
	ctx := context.Background()
	prev := committer(opts, "p-1", 0, time.Minute, m, logger)
	writeAndPreCommit(t, prev, 5, "the previous owner's epoch")
	prev.Close()
	cfg := recoverCfg(opts, "p-1", nil, 1, m, logger)
	cfg.FenceOnly = []string{"p-1-0-0", "p-1-0-1"}
	if err := RecoverTransactions(ctx, cfg); err != nil {
		t.Fatalf("recovery: %v\n%s", err, logs.String())
	}
	for r, want := range map[string]float64{"fenced": 2, "aborted": 1, "committed": 0} {
		if got := counter(t, reg, r); got != want {
			t.Errorf("%s transactions = %v, want %v", r, got, want)
		}
	}
	if ok, s := stableEqualsEnd(t, opts); !ok {
		t.Fatalf("last stable offset below high watermark: %s", s)
	}
	if !strings.Contains(logs.String(), "transactional_id=p-1-0-0") {
		t.Errorf("no log line naming the aborted transaction:\n%s", logs.String())
	}
}
