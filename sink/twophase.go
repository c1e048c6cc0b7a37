package sink

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
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

// TwoPhaseCommitter is the transactional system a two-phase-commit sink
// writes to (through KafkaCommitter), in the spirit of Flink's
// TwoPhaseCommitSinkFunction: records are
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

// KafkaCommitter is a TwoPhaseCommitter (Kafka transactions with typed
// Committables) as the generic two-phase-commit sink drives it
// (connector.TwoPhaseCommitSink, Flink's TwoPhaseCommitSinkFunction, which
// keeps the pending committables, snapshots them and commits them when
// their checkpoint completes): its committables are the bytes of one
// Committable as JSON, which the sink stores in envelopes of sink type
// CommittableType. It implements connector.Committer (and the abilities the
// generic sink finds by type assertion: Snapshotted and
// CheckpointCompleted, WriteTo, ProcessWatermark and ProcessIdle) without
// importing it. Besides the translation it writes a repartition sink's
// markers into the open transaction (EnableMarkers) and observes each
// non-empty commit's latency. Every method runs on the sink subtask's
// goroutine.
type KafkaCommitter struct {
	name    string
	k       TwoPhaseCommitter
	metrics *Metrics     // nil: no commit latency
	markers *markerState // nil unless EnableMarkers
}

// NewKafkaCommitter returns k as the committer of the sink called name;
// metrics may be nil.
func NewKafkaCommitter(name string, k TwoPhaseCommitter, metrics *Metrics) *KafkaCommitter {
	return &KafkaCommitter{name: name, k: k, metrics: metrics}
}

// BeginTransaction opens the next transaction.
func (c *KafkaCommitter) BeginTransaction(ctx context.Context) error {
	return c.k.BeginTransaction(ctx)
}

// CopyValues implements runtime.ValueCopier: a committer without markers
// copies values when its TwoPhaseCommitter does (KafkaTxnCommitter).
func (c *KafkaCommitter) CopyValues() bool {
	if c.markers != nil {
		return false
	}
	v, ok := c.k.(runtime.ValueCopier)
	return ok && v.CopyValues()
}

// Write adds rec to the open transaction. With markers, a record after the
// idle status is preceded by an active marker.
func (c *KafkaCommitter) Write(ctx context.Context, rec runtime.Record) error {
	if c.markers != nil {
		if err := c.markers.activate(ctx); err != nil {
			return err
		}
	}
	return c.k.Write(ctx, rec)
}

// PreCommit writes, with markers, the watermark the interval held back,
// then pre-commits the open transaction and returns its Committable as
// JSON (never nil: an empty epoch is a Committable with no records, which
// Commit and RecoverTransactions settle without a broker round trip).
func (c *KafkaCommitter) PreCommit(ctx context.Context, checkpointID int64) ([]byte, error) {
	if c.markers != nil {
		if err := c.markers.barrier(ctx); err != nil {
			return nil, err
		}
	}
	kc, err := c.k.PreCommit(ctx, checkpointID)
	if err != nil {
		return nil, err
	}
	return json.Marshal(kc)
}

// Commit commits the pre-committed transaction committable (a Committable
// as JSON). A transaction that can no longer be committed returns a
// *LostOutputError (see TwoPhaseCommitter.Commit).
func (c *KafkaCommitter) Commit(ctx context.Context, _ int64, committable []byte) error {
	var kc Committable
	if err := json.Unmarshal(committable, &kc); err != nil {
		return fmt.Errorf("sink %s: committable %s: %w", c.name, committable, err)
	}
	start := time.Now()
	if err := c.k.Commit(ctx, kc); err != nil {
		return err
	}
	if c.metrics != nil && kc.Records > 0 {
		c.metrics.commitLatency.Observe(time.Since(start).Seconds())
	}
	return nil
}

// AbortOpen aborts the open transaction (never pre-committed).
func (c *KafkaCommitter) AbortOpen(ctx context.Context) error { return c.k.AbortOpen(ctx) }

// Snapshotted tells the Kafka committer the sink's snapshot for checkpoint
// id was taken (TwoPhaseCommitter.Snapshotted); the generic sink calls it
// after the pre-commit, before the next transaction opens.
func (c *KafkaCommitter) Snapshotted(id int64) { c.k.Snapshotted(id) }

// CheckpointCompleted tells the Kafka committer checkpoint id completed and
// every transaction of it or before was committed.
func (c *KafkaCommitter) CheckpointCompleted(id int64) { c.k.CheckpointCompleted(id) }

// Close releases the committer; open transactions are left to the broker's
// timeout or the next start's fencing.
func (c *KafkaCommitter) Close() error { return c.k.Close() }

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
func (c *KafkaCommitter) WriteTo(ctx context.Context, topic string, rec runtime.Record) error {
	tw, ok := c.k.(TopicWriter)
	if !ok {
		return fmt.Errorf("sink %s: its committer %T cannot write to another topic (%q)", c.name, c.k, topic)
	}
	return tw.WriteTo(ctx, topic, rec)
}

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
