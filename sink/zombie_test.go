package sink

import (
	"context"
	"errors"
	"slices"
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

	cfg := recoverCfg(opts, "p-1", nil, 1, m, logger)
	cfg.FenceOnly = []string{"p-1-0-0", "p-1-0-1", "p-1-0-2"}
	if err := RecoverTransactions(ctx, cfg); err != nil {
		t.Fatalf("recovery: %v\n%s", err, logs.String())
	}
	owner := committer(opts, "p-1", 0, time.Minute, m, logger)
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
	var got []string
	for _, r := range testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), testTopic, 10*time.Second) {
		got = append(got, string(r.Value))
	}
	if !slices.Equal(got, []string{"n1"}) {
		t.Errorf("read_committed holds %q, want only the new owner's [n1]", got)
	}
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
