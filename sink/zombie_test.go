package sink

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestZombieUnitCannotCommitOrWrite is the fencing chain a unit's
// producers keep (docs/scale-out.md, takeover; why a producer is kept per
// transactional id instead of one per epoch): a zombie unit holds a
// pre-committed transaction on id 0 and an open one on id 1; the new
// owner's recovery fences the unit's ids and its first transaction runs
// on id 0 again. The zombie's commit of the pre-committed one is lost
// (PRODUCER_FENCED), so is the commit of its open epoch, and
// read_committed sees the new owner's record only.
func TestZombieUnitCannotCommitOrWrite(t *testing.T) {
	opts := newCluster(t)
	m, _ := newMetrics(t)
	logger, logs := testLogger()
	ctx := context.Background()
	zombie := committer(opts, "p-1", 0, time.Minute, m, logger)
	defer zombie.Close()
	cz := writeAndPreCommit(t, zombie, 1, "z1", "z2")
	zombie.Snapshotted(1)
	if err := zombie.BeginTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	if err := zombie.Write(ctx, runtime.Record{Key: []byte("k"), Value: []byte("z3")}); err != nil {
		t.Fatal(err)
	}
	if err := zombie.k(0).Flush(ctx); err != nil { // z3 reached the broker before the takeover
		t.Fatal(err)
	}

	owner := takeOver(t, opts, "p-1", m, logger, logs)
	defer owner.Close()
	cn := writeAndPreCommit(t, owner, 1, "n1")
	if cn.TransactionalID != cz.TransactionalID {
		t.Fatalf("the new owner's first transaction runs on %s, want the zombie's %s", cn.TransactionalID, cz.TransactionalID)
	}

	var lost *LostOutputError
	if err := zombie.Commit(ctx, cz); !errors.As(err, &lost) {
		t.Errorf("the zombie's commit of its pre-committed transaction: %v, want a *LostOutputError", err)
	}
	// Its open epoch's records reached the broker before the fence, so
	// the pre-commit (a flush of nothing) succeeds; its commit cannot.
	if c2, err := zombie.PreCommit(ctx, 2); err == nil {
		if err := zombie.Commit(ctx, c2); !errors.As(err, &lost) {
			t.Errorf("the zombie's commit of its open epoch: %v, want a *LostOutputError", err)
		}
	}
	if err := owner.Commit(ctx, cn); err != nil {
		t.Fatalf("the new owner's commit: %v", err)
	}
	got := readAll(t, opts, kgo.ReadCommitted())
	if !slices.Equal(got, []string{"n1"}) {
		t.Errorf("read_committed holds %q, want only the new owner's [n1]", got)
	}
}

// takeOver is a unit's new owner taking over from a zombie: its recovery
// fences the ids of prefix's subtask 0 (FenceOnly, all 3 of the pool, as
// a cluster unit's recovery does) and it opens a committer of prefix's
// subtask 0, which the caller closes. The test fails, with logs, if the
// recovery fails.
func takeOver(t *testing.T, opts []kgo.Opt, prefix string, m *Metrics, logger *slog.Logger, logs *testkit.SyncBuffer) *KafkaTxnCommitter {
	t.Helper()
	cfg := recoverCfg(opts, prefix, nil, 1, m, logger)
	cfg.FenceOnly = []string{prefix + "-0-0", prefix + "-0-1", prefix + "-0-2"}
	if err := RecoverTransactions(context.Background(), cfg); err != nil {
		t.Fatalf("recovery: %v\n%s", err, logs.String())
	}
	return committer(opts, prefix, 0, time.Minute, m, logger)
}

// k returns the producer of the committer's open transaction (tests).
func (k *KafkaTxnCommitter) k(int) *kgo.Client { return k.open.cl }

// TestFreshProducerFencesPreCommitted is why a unit keeps one producer per
// transactional id for as long as it runs instead of a new producer per
// checkpoint epoch: a new producer's InitProducerId bumps its id's epoch
// unconditionally (franz-go sends no producer id and epoch to check), so
// a zombie that opened a fresh producer for its next epoch on an id the
// new owner has just pre-committed a transaction on aborts that
// transaction: the owner's commit is lost although its checkpoint
// completed. With producers kept per id, the zombie's producer of that id
// is already fenced and cannot initialise again (TestZombieUnitCannotCommitOrWrite).
func TestFreshProducerFencesPreCommitted(t *testing.T) {
	opts := newCluster(t)
	m, _ := newMetrics(t)
	logger, _ := testLogger()
	ctx := context.Background()
	owner := committer(opts, "p-2", 0, time.Minute, m, logger)
	defer owner.Close()
	c := writeAndPreCommit(t, owner, 1, "n1")

	fresh, err := kgo.NewClient(append(opts[:len(opts):len(opts)], kgo.TransactionalID(c.TransactionalID), kgo.DefaultProduceTopic(testTopic))...)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if err := fresh.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := fresh.ProduceSync(ctx, &kgo.Record{Value: []byte("zombie")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var lost *LostOutputError
	if err := owner.Commit(ctx, c); !errors.As(err, &lost) {
		t.Fatalf("the owner's commit after a fresh producer of its id initialised: %v, want a *LostOutputError", err)
	}
	if err := fresh.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
}

// TestZombieNeverInitialisesAnIdAfterTheNewOwner is the path
// TestFreshProducerFencesPreCommitted warns of, through the committer: a
// zombie subtask (or unit) that, when it was replaced, had used only id 0
// of its pool rotates to id 1 and writes. Had it created id 1's producer
// then, that producer's InitProducerId would bump the epoch the new
// owner's recovery and producer took and abort the transaction the new
// owner pre-committed on id 1 for a checkpoint that completed: the
// owner's commit would be lost (and the zombie's record written under a
// valid epoch). Every id of the pool is initialised when the committer
// opens its first transaction, so the zombie's producer of id 1 is the
// one the new owner's recovery fenced: its write fails, the owner's
// commit succeeds and read_committed holds exactly the owner's records.
func TestZombieNeverInitialisesAnIdAfterTheNewOwner(t *testing.T) {
	opts := newCluster(t)
	m, _ := newMetrics(t)
	logger, logs := testLogger()
	ctx := context.Background()
	zombie := committer(opts, "p-3", 0, time.Minute, m, logger)
	defer zombie.Close()
	if err := zombie.BeginTransaction(ctx); err != nil { // an idle epoch on id 0
		t.Fatal(err)
	}

	owner := takeOver(t, opts, "p-3", m, logger, logs)
	defer owner.Close()
	c1 := writeAndPreCommit(t, owner, 1, "n1")
	owner.Snapshotted(1)
	if err := owner.BeginTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	if err := owner.Commit(ctx, c1); err != nil {
		t.Fatal(err)
	}
	owner.CheckpointCompleted(1)
	if err := owner.Write(ctx, runtime.Record{Key: []byte("k"), Value: []byte("n2")}); err != nil {
		t.Fatal(err)
	}
	c2, err := owner.PreCommit(ctx, 2) // checkpoint 2 completes; its commit is next
	if err != nil {
		t.Fatal(err)
	}
	if c2.TransactionalID != "p-3-0-1" {
		t.Fatalf("the owner's second transaction runs on %s, want p-3-0-1", c2.TransactionalID)
	}

	// The zombie wakes up: its barrier pre-commits the idle epoch on id 0
	// and its next epoch runs on id 1.
	if _, err := zombie.PreCommit(ctx, 7); err != nil {
		t.Fatal(err)
	}
	zombie.Snapshotted(7)
	if err := zombie.BeginTransaction(ctx); err == nil {
		if zombie.open.id != "p-3-0-1" {
			t.Fatalf("the zombie's next epoch runs on %s, want p-3-0-1", zombie.open.id)
		}
		if err := zombie.Write(ctx, runtime.Record{Key: []byte("k"), Value: []byte("zombie")}); err == nil {
			if _, err := zombie.PreCommit(ctx, 8); err == nil {
				t.Errorf("the zombie pre-committed a transaction on p-3-0-1 after the new owner's recovery fenced it")
			}
		}
	}

	if err := owner.Commit(ctx, c2); err != nil {
		t.Fatalf("the new owner's commit of checkpoint 2 after the zombie's write: %v", err)
	}
	got := readAll(t, opts, kgo.ReadCommitted()) // sorted
	if !slices.Equal(got, []string{"n1", "n2"}) {
		t.Errorf("read_committed holds %q, want exactly the new owner's [n1 n2]", got)
	}
}

// TestZombieRetiredSlotNeverReinitialises: a zombie that ignores lost
// output (IgnoreLost) meets the new owner's fence on id 0 when it commits
// its pre-committed transaction there. Had it replaced id 0's fenced
// producer by a new one when the slot came round again, that producer's
// InitProducerId would abort the transaction the new owner pre-committed
// on id 0 for a checkpoint that completed. The slot is retired instead;
// the zombie's next epoch runs on id 2, whose producer (initialised at
// its start) the new owner's recovery fenced, so its write fails, the
// owner's commit succeeds and read_committed holds only the owner's
// record.
func TestZombieRetiredSlotNeverReinitialises(t *testing.T) {
	opts := newCluster(t)
	m, _ := newMetrics(t)
	logger, logs := testLogger()
	ctx := context.Background()
	zombie := NewKafkaTxnCommitter(KafkaTxnConfig{
		Name: "out", Topic: testTopic, TransactionalIDPrefix: "p-4", PoolSize: 3, TransactionTimeout: time.Minute,
		IgnoreLost: true, ClientOpts: opts, Metrics: m, Logger: logger,
	})
	defer zombie.Close()
	cz := writeAndPreCommit(t, zombie, 1, "z1")
	zombie.Snapshotted(1)
	if err := zombie.BeginTransaction(ctx); err != nil { // an idle epoch on id 1
		t.Fatal(err)
	}

	owner := takeOver(t, opts, "p-4", m, logger, logs)
	defer owner.Close()
	cn := writeAndPreCommit(t, owner, 1, "n1") // checkpoint 1 completes; its commit is next
	if cn.TransactionalID != cz.TransactionalID {
		t.Fatalf("the owner's transaction runs on %s, want the zombie's %s", cn.TransactionalID, cz.TransactionalID)
	}

	if err := zombie.Commit(ctx, cz); err != nil { // fenced: lost, ignored
		t.Fatalf("the zombie's commit with IgnoreLost: %v", err)
	}
	if _, err := zombie.PreCommit(ctx, 2); err != nil {
		t.Fatal(err)
	}
	zombie.Snapshotted(2)
	zombie.CheckpointCompleted(2) // id 0's slot is free again
	if err := zombie.BeginTransaction(ctx); err == nil {
		id := zombie.open.id
		if id == cz.TransactionalID {
			t.Errorf("the zombie's next epoch runs on %s, whose producer was fenced", id)
		}
		if err := zombie.Write(ctx, runtime.Record{Key: []byte("k"), Value: []byte("zombie")}); err == nil {
			if _, err := zombie.PreCommit(ctx, 3); err == nil {
				t.Errorf("the zombie pre-committed a transaction on %s after the new owner's recovery fenced it", id)
			}
		}
	}

	if err := owner.Commit(ctx, cn); err != nil {
		t.Fatalf("the new owner's commit of checkpoint 1 after the zombie's write: %v", err)
	}
	got := readAll(t, opts, kgo.ReadCommitted())
	if !slices.Equal(got, []string{"n1"}) {
		t.Errorf("read_committed holds %q, want exactly the new owner's [n1]", got)
	}
}

// TestRetiredSlotsExhaustThePool: the committer creates and initialises
// every producer of its pool with its first transaction and none after
// it; retired slots take no transaction, and once no slot with a producer
// is free BeginTransaction fails with ErrPoolExhausted (the subtask fails
// and its restart's recovery initialises the ids again in order).
func TestRetiredSlotsExhaustThePool(t *testing.T) {
	opts := newCluster(t)
	m, _ := newMetrics(t)
	logger, _ := testLogger()
	ctx := context.Background()
	k := committer(opts, "p-5", 0, time.Minute, m, logger)
	defer k.Close()
	if err := k.BeginTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range k.slots {
		if s.cl == nil {
			t.Fatalf("slot %s has no producer after the first transaction opened", s.id)
		}
		if _, epoch, err := s.cl.ProducerID(ctx); err != nil || epoch < 0 {
			t.Fatalf("slot %s: producer epoch %d (%v), want one initialised", s.id, epoch, err)
		}
	}
	k.retire(k.slots[1], errors.New("test"))
	k.retire(k.slots[2], errors.New("test"))
	if _, err := k.PreCommit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	err := k.BeginTransaction(ctx)
	if !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), "2 retired") {
		t.Fatalf("BeginTransaction with slot 0 pre-committed and slots 1 and 2 retired: %v, want ErrPoolExhausted naming 2 retired", err)
	}
	if k.slots[1].cl != nil || k.slots[2].cl != nil {
		t.Fatal("a retired slot got a producer again")
	}
}

// TestZombieCommitOfRestoredTransaction is a zombie whose pre-committed
// transaction the new owner restored and committed: the old owner of a
// unit pre-committed checkpoint 1's transaction and paused before its
// commit; the new owner's recovery committed that committable and fenced
// the unit's ids; then the old owner resumes and commits. The broker
// answers PRODUCER_FENCED, but nothing was lost (read_committed holds the
// records): the commit must not report a *LostOutputError (which
// suppresses restarts, or with IgnoreLost is counted as lost and lets the
// zombie run on) but an error wrapping ErrFenced, which counts nothing as
// lost.
func TestZombieCommitOfRestoredTransaction(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		t.Run(map[bool]string{false: "fail", true: "ignore_lost"}[ignore], func(t *testing.T) {
			opts := newCluster(t)
			m, reg := newMetrics(t)
			logger, logs := testLogger()
			ctx := context.Background()
			zombie := committer(opts, "p-3", 0, time.Minute, m, logger)
			zombie.cfg.IgnoreLost = ignore
			defer zombie.Close()
			cz := writeAndPreCommit(t, zombie, 1, "z1", "z2")

			cfg := recoverCfg(opts, "p-3", []Committable{cz}, 1, m, logger)
			cfg.FenceOnly = []string{"p-3-0-0", "p-3-0-1", "p-3-0-2"}
			if err := RecoverTransactions(ctx, cfg); err != nil {
				t.Fatalf("recovery: %v\n%s", err, logs.String())
			}

			err := zombie.Commit(ctx, cz)
			if le, ok := errors.AsType[*LostOutputError](err); ok {
				t.Errorf("the zombie's commit of a transaction the new owner committed reports lost output: %v", le)
			}
			if !errors.Is(err, ErrFenced) {
				t.Errorf("the zombie's commit: %v, want an error wrapping ErrFenced", err)
			}
			if got := counter(t, reg, "lost"); got != 0 {
				t.Errorf("lost transactions = %v, want 0\n%s", got, logs.String())
			}
			if got := counter(t, reg, "committed"); got != 1 {
				t.Errorf("committed transactions = %v, want 1 (the new owner's recovery)", got)
			}
			if got, want := readAll(t, opts, kgo.ReadCommitted()), []string{"z1", "z2"}; !slices.Equal(got, want) {
				t.Errorf("read_committed = %q, want %q", got, want)
			}
			// The fenced producer is given up: its slot takes no further
			// transaction.
			if zombie.slots[0].cl != nil {
				t.Errorf("the fenced slot %s keeps its producer", zombie.slots[0].id)
			}
		})
	}
}
