package job

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/sink"
	"github.com/kstreamd/kstreamd/source"
)

// deadLetters builds the transactional dead-letter writers of a job and
// recovers their transactions (docs/scale-out.md, invariant 1: dead-letter
// writes are output transactions of the checkpoint like a sink's).
//
// A job is exactly-once for its dead letters when it is a cluster-mode unit
// or has an exactly-once sink. Then every task that applies an on_error:
// dead-letter policy (a source subtask, an operator subtask with such a
// source among its ErrorSources) writes its dead letters through its own
// connector.TwoPhaseCommitSink over a sink.KafkaTxnCommitter, a side output of
// the task (runtime.SideOutput): written into the open transaction,
// pre-committed at every barrier, checkpointed as subtask <i> of the
// operator source.DeadLetterVertex(<vertex>) (checkpoint.CommittablesState),
// committed when the checkpoint completes, and committed again
// idempotently by a restore. Its transactional ids are those of a sink
// with the prefix kstreamd-<job>-<vertex>.dead-letters: single-process
// <prefix>-<subtask>-<slot>, in a unit <prefix>-<stage>-<unit>-<slot>, of
// which a unit fences exactly its own.
type deadLetters struct {
	on      bool
	g       *graph.Graph
	sc      scope
	timeout time.Duration
	deps    Deps
	metrics *Metrics
	logger  *slog.Logger
	// parallelism is the number of writers per dead-letter vertex built so
	// far (for fencing).
	parallelism map[string]int
	// pool is the number of transactional ids of each writer: a sink's
	// default (sink.PoolSizeFor the job's tolerable checkpoint failures).
	pool int
}

// deadLetterWriters returns the job's dead-letter writer builder; its on
// says whether dead letters are transactional (a unit, or a job with an
// exactly-once sink). The transaction timeout is the largest of the job's
// exactly-once sinks (sink.DefaultTransactionTimeout when none sets one).
func (b *build) deadLetterWriters() *deadLetters {
	d := &deadLetters{g: b.g, sc: b.sc, deps: b.deps, metrics: b.m, logger: b.sc.logger.With("component", "dead-letters"),
		parallelism: map[string]int{}, pool: b.poolSize(0), on: b.sc.unit != nil, timeout: sink.DefaultTransactionTimeout}
	for _, sk := range b.g.Sinks {
		if sk.Delivery.ExactlyOnce() {
			d.on = true
			d.timeout = max(d.timeout, kafkaTxnTimeout(sk))
		}
	}
	return d
}

// prefix returns the transactional id prefix of vertex's dead-letter
// writer (a unit's: with its stage, see scope.txn) and the subtask index
// its ids carry.
func (d *deadLetters) prefix(vertex string, sub int) (string, int) {
	return d.sc.txn("kstreamd-"+d.g.Job+"-"+source.DeadLetterVertex(vertex), sub)
}

// writer returns the dead-letter writer of subtask sub of vertex. It
// refuses a graph that has a vertex of the writer's name.
func (d *deadLetters) writer(vertex string, sub int) (source.DeadLetterWriter, error) {
	name := source.DeadLetterVertex(vertex)
	if d.g.Vertex(name) {
		return nil, fmt.Errorf("job: vertex %q: its dead-letter writer is checkpointed as %q, which names another vertex of the job; rename that vertex", vertex, name)
	}
	if d.parallelism[name] == 0 {
		d.metrics.sink.Init(name)
	}
	d.parallelism[name] = max(d.parallelism[name], sub+1)
	prefix, txnSub := d.prefix(vertex, sub)
	logger := d.logger.With("vertex", vertex)
	return connector.NewTwoPhaseCommitSink(sink.CommittableType, name, sub, sink.NewKafkaCommitter(name, sink.NewKafkaTxnCommitter(sink.KafkaTxnConfig{
		Name: name, Subtask: txnSub, TransactionalIDPrefix: prefix, PoolSize: d.pool,
		TransactionTimeout: d.timeout, ClientOpts: d.deps.ClientOpts, Metrics: d.metrics.sink, Retries: d.metrics.kafka, Logger: logger,
	}), d.metrics.sink), logger), nil
}

// requiredStates adds, to the sinks' required states, the committables of
// every dead-letter writer built.
func (d *deadLetters) requiredStates(req map[string][]string) map[string][]string {
	for name := range d.parallelism {
		req[name] = []string{checkpoint.CommittablesState}
	}
	return req
}

// recover commits the committables the restored checkpoint holds for each
// dead-letter writer (built now or only in the checkpoint) and fences its
// transactional ids (a unit: exactly its own), before any task starts.
func (d *deadLetters) recover(ctx context.Context, rp restorePlan) error {
	meta := rp.meta
	names := map[string]int{}
	for name, p := range d.parallelism {
		names[name] = p
	}
	if meta != nil {
		for name := range meta.Operators {
			if strings.HasSuffix(name, source.DeadLetterSuffix) && !d.g.Vertex(name) {
				names[name] = max(names[name], 1)
			}
		}
	}
	checked := false
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range names {
			if !yield(n) {
				return
			}
		}
	}) {
		if !checked {
			if err := sink.CheckTransactionTimeout(ctx, d.deps.ClientOpts, name, d.timeout); err != nil {
				return err
			}
			checked = true
		}
		committables, oldP, err := rp.kafkaCommittables(name)
		if err != nil {
			return err
		}
		vertex := strings.TrimSuffix(name, source.DeadLetterSuffix)
		prefix, _ := d.prefix(vertex, 0)
		if err := sink.RecoverTransactions(ctx, sink.RecoverConfig{
			Name: name, ClientOpts: d.deps.ClientOpts, Committables: committables,
			TransactionalIDPrefix: prefix, PoolSize: d.pool, Subtasks: max(oldP, names[name]), FenceOnly: d.sc.fenceOnly(prefix, d.pool),
			TransactionTimeout: d.timeout, Metrics: d.metrics.sink, Logger: d.logger,
		}); err != nil {
			return fmt.Errorf("job: dead letters of %q: %w", vertex, err)
		}
	}
	return nil
}
