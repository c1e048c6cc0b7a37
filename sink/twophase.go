package sink

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// Committable is a pre-committed transaction: everything needed to commit
// it later, possibly from another process after a crash (Flink's
// KafkaCommittable). It is stored in the sink's operator state.
type Committable struct {
	// TransactionalID is the Kafka transactional id the transaction runs under.
	TransactionalID string `json:"transactional_id"`
	// ProducerID and Epoch identify the transaction: the producer id and
	// epoch it was written with, recorded at pre-commit time (the broker
	// bumps the epoch when a transaction ends under KIP-890).
	ProducerID int64 `json:"producer_id"`
	Epoch      int16 `json:"epoch"`
	// CheckpointID is the checkpoint whose barrier closed the transaction.
	CheckpointID int64 `json:"checkpoint_id"`
	// Records is the number of records in the transaction, markers of a
	// repartition sink included; 0 means there is nothing to commit (an
	// empty epoch).
	Records int64 `json:"records"`
	// Topic, Partition and Offset locate one record of the transaction
	// (the first the broker acknowledged). When a restore finds the
	// transaction already ended (the broker answers EndTxn with
	// PRODUCER_FENCED or INVALID_TXN_STATE both for a transaction an
	// earlier restore of the same checkpoint committed and for one the
	// broker aborted), the transaction's end marker after this offset
	// tells which. Empty Topic: unknown (committables of older versions).
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition,omitempty"`
	Offset    int64  `json:"offset,omitempty"`
}

// CommittablesState is the name of the sink's operator list state (even
// split): checkpoint.CommittablesState, each entry an envelope of sink type
// CommittableType holding one Committable as JSON
// (checkpoint.EncodeCommittable). Checkpoints of metadata versions 1 and 2
// hold the bare JSON under checkpoint.LegacyKafkaCommittables.
const CommittablesState = checkpoint.CommittablesState

// CommittableType is the sink type a Kafka committable's envelope names:
// the kafka sink type's (and a dead-letter writer's).
const CommittableType = checkpoint.LegacyCommittableSink

// DecodeCommittables returns the Kafka committables among cs (envelopes of
// CommittableType; checkpoint.DecodeCommittables), refusing one of another
// sink type or one that does not decode; name names the sink in errors.
func DecodeCommittables(name string, cs []checkpoint.Committable) ([]Committable, error) {
	out := make([]Committable, 0, len(cs))
	for _, c := range cs {
		if c.Sink != CommittableType {
			return nil, fmt.Errorf("sink %s: the checkpoint holds a committable of sink type %q, this sink is of type %q", name, c.Sink, CommittableType)
		}
		var k Committable
		if err := json.Unmarshal(c.Data, &k); err != nil {
			return nil, fmt.Errorf("sink %s: committable %s: %w", name, c.Data, err)
		}
		out = append(out, k)
	}
	return out, nil
}

// TwoPhaseCommitter is the transactional system a TwoPhaseCommitSink writes
// to, in the spirit of Flink's TwoPhaseCommitSinkFunction: records are
// written into the open transaction; on a checkpoint barrier it is
// pre-committed (flushed, closed for writes) and handed to the checkpoint as
// a Committable, and the next transaction opens; when the checkpoint
// completes it is committed. Every method runs on the sink subtask's
// goroutine.
type TwoPhaseCommitter interface {
	// BeginTransaction opens the next transaction.
	BeginTransaction(ctx context.Context) error
	// Write adds rec to the open transaction.
	Write(ctx context.Context, rec runtime.Record) error
	// PreCommit flushes the open transaction and returns its committable;
	// no record is written into it afterwards.
	PreCommit(ctx context.Context, checkpointID int64) (Committable, error)
	// Commit commits a pre-committed transaction. Committing one that was
	// already committed succeeds. A transaction that can no longer be
	// committed returns a *LostOutputError.
	Commit(ctx context.Context, c Committable) error
	// AbortOpen aborts the open transaction (never pre-committed).
	AbortOpen(ctx context.Context) error
	// Snapshotted tells the committer the sink's snapshot for checkpoint id
	// was taken: transactions committed before it are no longer in any
	// newer snapshot.
	Snapshotted(id int64)
	// CheckpointCompleted tells the committer checkpoint id completed: a
	// transactional id whose transaction was committed before a snapshot
	// now completed can be reused, as no checkpoint to restore refers to it.
	CheckpointCompleted(id int64)
	// Close releases the committer; open transactions are left to the
	// broker's timeout or the next start's fencing.
	Close() error
}

// TwoPhaseCommitSink is the sink operator driving a TwoPhaseCommitter; it
// implements runtime.Operator, runtime.Snapshotter,
// runtime.CheckpointListener and runtime.PendingCommitter.
type TwoPhaseCommitSink struct {
	name      string
	subtask   int
	committer TwoPhaseCommitter
	logger    *slog.Logger
	metrics   *Metrics

	pending   []Committable // pre-committed, not yet committed, ascending checkpoint id
	finalWait bool          // a stop-with-savepoint barrier was taken: wait for its commit
	markers   *markerState  // nil unless EnableMarkers
}

// NewTwoPhaseCommitSink returns the sink subtask over committer.
func NewTwoPhaseCommitSink(name string, subtask int, committer TwoPhaseCommitter, metrics *Metrics, logger *slog.Logger) *TwoPhaseCommitSink {
	return &TwoPhaseCommitSink{name: name, subtask: subtask, committer: committer, metrics: metrics,
		logger: logger.With("sink", name, "subtask", subtask)}
}

// Open implements runtime.Operator: it opens the first transaction.
func (s *TwoPhaseCommitSink) Open(ctx context.Context) error {
	return s.committer.BeginTransaction(ctx)
}

// ProcessRecord implements runtime.Operator. With markers, a record after
// the idle status is preceded by an active marker.
func (s *TwoPhaseCommitSink) ProcessRecord(ctx context.Context, _ int, rec runtime.Record) error {
	if s.markers != nil {
		if err := s.markers.activate(ctx); err != nil {
			return err
		}
	}
	return s.committer.Write(ctx, rec)
}

// TopicWriter is implemented by a TwoPhaseCommitter that can write a
// record to a topic other than its own into the open transaction
// (KafkaTxnCommitter): the dead-letter writer of an exactly-once job
// writes the bad records of each source to that source's dead-letter topic.
type TopicWriter interface {
	WriteTo(ctx context.Context, topic string, rec runtime.Record) error
}

// WriteTo writes rec to topic in the open transaction: the writes of a
// dead-letter writer (the side output of a task's bad-record policies,
// runtime.SideOutput), committed with the checkpoint whose barrier follows
// them. It returns an error when the committer is no TopicWriter.
func (s *TwoPhaseCommitSink) WriteTo(ctx context.Context, topic string, rec runtime.Record) error {
	tw, ok := s.committer.(TopicWriter)
	if !ok {
		return fmt.Errorf("sink %s: its committer %T cannot write to another topic (%q)", s.name, s.committer, topic)
	}
	return tw.WriteTo(ctx, topic, rec)
}

// SnapshotState implements runtime.Snapshotter: pre-commit the open
// transaction, keep its committable, open the next one, and store every
// pending committable in the checkpoint.
func (s *TwoPhaseCommitSink) SnapshotState(ctx context.Context, b *runtime.Barrier) (runtime.SnapshotFinisher, error) {
	if s.markers != nil {
		if err := s.markers.barrier(ctx); err != nil {
			return nil, err
		}
	}
	c, err := s.committer.PreCommit(ctx, b.CheckpointID)
	if err != nil {
		return nil, err
	}
	s.pending = append(s.pending, c)
	s.committer.Snapshotted(b.CheckpointID)
	if err := s.committer.BeginTransaction(ctx); err != nil {
		return nil, err
	}
	if b.StopAfter {
		s.finalWait = true
	}
	entries := make([][]byte, 0, len(s.pending))
	for _, p := range s.pending {
		data, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		e, err := checkpoint.EncodeCommittable(CommittableType, data)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	raw, err := json.Marshal(checkpoint.TaskState{Operator: map[string]state.OperatorListSnapshot{
		CommittablesState: {Mode: state.ModeSplit, Entries: entries},
	}})
	if err != nil {
		return nil, err
	}
	return func(context.Context) (runtime.TaskSnapshot, error) {
		return runtime.TaskSnapshot{State: raw}, nil
	}, nil
}

// NotifyCheckpointComplete implements runtime.CheckpointListener: it commits
// every pending transaction of checkpoint id or before, in order. A lost
// transaction fails the job (see LostOutputError) unless the committer was
// told to ignore it.
func (s *TwoPhaseCommitSink) NotifyCheckpointComplete(ctx context.Context, id int64) error {
	n := 0
	for ; n < len(s.pending) && s.pending[n].CheckpointID <= id; n++ {
		start := time.Now()
		if err := s.committer.Commit(ctx, s.pending[n]); err != nil {
			s.pending = s.pending[n:]
			return err
		}
		if s.metrics != nil && s.pending[n].Records > 0 {
			s.metrics.commitLatency.Observe(time.Since(start).Seconds())
		}
	}
	s.pending = s.pending[n:]
	s.committer.CheckpointCompleted(id)
	return nil
}

// NotifyCheckpointAborted implements runtime.CheckpointListener: pending
// transactions stay pending and are committed with the next completed
// checkpoint.
func (s *TwoPhaseCommitSink) NotifyCheckpointAborted(context.Context, int64) {}

// PendingCommits implements runtime.PendingCommitter: after a
// stop-with-savepoint barrier the subtask waits for the savepoint's commit
// before it finishes.
func (s *TwoPhaseCommitSink) PendingCommits() bool { return s.finalWait && len(s.pending) > 0 }

// EndInput implements runtime.Operator: the open transaction holds records
// no checkpoint covers (they are read again after a restart), so it is
// aborted. Pre-committed transactions stay open for the next start to
// commit or fence.
func (s *TwoPhaseCommitSink) EndInput(ctx context.Context) error {
	if len(s.pending) > 0 {
		s.logger.Info("stopping with pre-committed transactions; the next start commits them if their checkpoint completed", "pending", len(s.pending))
	}
	return s.committer.AbortOpen(ctx)
}

// Close implements runtime.Operator.
func (s *TwoPhaseCommitSink) Close() error { return s.committer.Close() }

// LostOutputError reports a pre-committed transaction that can no longer be
// committed (the broker aborted it after its timeout, or it was fenced):
// its records are lost to read_committed readers.
type LostOutputError struct {
	TransactionalID string
	CheckpointID    int64
	Records         int64
	Err             error
}

// Error names the transactional id and checkpoint.
func (e *LostOutputError) Error() string {
	return fmt.Sprintf("sink: lost output: transaction %s of checkpoint %d (%d records) can no longer be committed: %v; set ignore_lost_transactions to continue without it",
		e.TransactionalID, e.CheckpointID, e.Records, e.Err)
}

// Unwrap returns the broker's error.
func (e *LostOutputError) Unwrap() error { return e.Err }

// SuppressRestarts reports true: a restart restores the same checkpoint and
// meets the same transaction, so the job fails whatever its restart
// strategy (Flink's SuppressRestartsException).
func (e *LostOutputError) SuppressRestarts() bool { return true }
