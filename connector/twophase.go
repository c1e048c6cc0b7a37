package connector

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

// Committer is the transactional system a TwoPhaseCommitSink writes to
// (Flink's TwoPhaseCommittingSink: its SinkWriter's prepareCommit and its
// Committer), with committables as the sink type's own bytes. Every method
// runs on the sink subtask's goroutine.
type Committer interface {
	// BeginTransaction opens the next transaction (an in-progress file).
	BeginTransaction(ctx context.Context) error
	// Write adds rec to the open transaction.
	Write(ctx context.Context, rec runtime.Record) error
	// PreCommit closes the open transaction for writes and makes it
	// durable but invisible (an in-progress file becomes pending) for
	// checkpoint checkpointID, and returns the bytes that let Commit, or
	// the type's SinkFactory.Recover in another process after a crash,
	// finish it. nil bytes: nothing to commit (an empty epoch); the
	// snapshot still holds an entry for it (every subtask of an
	// exactly-once sink holds one per checkpoint: the checkpoint's
	// required state), which Commit and Recover skip.
	PreCommit(ctx context.Context, checkpointID int64) ([]byte, error)
	// Commit makes a pre-committed transaction visible (publishes a
	// pending file). It must be idempotent: a restore may commit again
	// what was committed before a crash.
	Commit(ctx context.Context, checkpointID int64, committable []byte) error
	// AbortOpen discards the open transaction (never pre-committed).
	AbortOpen(ctx context.Context) error
	// Close releases the committer; pre-committed transactions stay for
	// the next start's Recover.
	Close() error
}

// SnapshotListener is implemented by a Committer that must know when the
// sink's snapshot for a checkpoint was taken: TwoPhaseCommitSink calls
// Snapshotted after PreCommit, before the next BeginTransaction (the Kafka
// committer reuses a transactional id whose transaction was committed once
// no newer snapshot refers to it).
type SnapshotListener interface {
	Snapshotted(checkpointID int64)
}

// CompletionListener is implemented by a Committer that must know when a
// checkpoint completed: TwoPhaseCommitSink calls CheckpointCompleted after
// it committed every pending transaction of that checkpoint or before (not
// when a commit failed).
type CompletionListener interface {
	CheckpointCompleted(checkpointID int64)
}

// TopicWriter is implemented by a Committer that can write a record to a
// topic other than its sink's into the open transaction (the Kafka
// committer of an exactly-once job's dead-letter writer).
type TopicWriter interface {
	WriteTo(ctx context.Context, topic string, rec runtime.Record) error
}

// TwoPhaseCommitSink is the sink operator driving a Committer (Flink's
// TwoPhaseCommitSinkFunction): records go into the open transaction; at a
// checkpoint barrier it is pre-committed and its committable kept in the
// subtask's snapshot (CommittablesState, in an envelope naming the sink
// type), and the next transaction opens; when the checkpoint completes it
// is committed. It is the one implementation of that bookkeeping: the
// file sink's committables and Kafka's (sink.KafkaCommitter: a
// sink.Committable as JSON) are encodings behind it. It implements
// runtime.Operator, runtime.Snapshotter, runtime.CheckpointListener,
// runtime.PendingCommitter, runtime.WatermarkHandler and
// runtime.IdleHandler (the last two handed to a committer that implements
// them, e.g. a repartition sink's markers; otherwise no-ops).
type TwoPhaseCommitSink struct {
	typ, name string
	subtask   int
	committer Committer
	logger    *slog.Logger
	pending   []pendingCommit // ascending checkpoint id
	finalWait bool
	format    Format // nil: records are written as they are
	topic     string
}

type pendingCommit struct {
	id   int64
	data []byte
}

// NewTwoPhaseCommitSink returns subtask subtask of the sink called name,
// of sink type typ, over committer.
func NewTwoPhaseCommitSink(typ, name string, subtask int, committer Committer, logger *slog.Logger) *TwoPhaseCommitSink {
	return &TwoPhaseCommitSink{typ: typ, name: name, subtask: subtask, committer: committer,
		logger: logger.With("sink", name, "subtask", subtask)}
}

// WithFormat makes the sink encode every record with f (the sink's format,
// SinkContext.Format; nil: none) for topic before the committer writes it,
// and returns the sink.
func (s *TwoPhaseCommitSink) WithFormat(f Format, topic string) *TwoPhaseCommitSink {
	s.format, s.topic = f, topic
	return s
}

// CopyValues implements runtime.ValueCopier: a sink with no format
// (records written as they are) copies the values its committer copies
// (a committer that is a runtime.ValueCopier and agreed); one with a
// format does not (the format's encoder could keep the value it gets).
func (s *TwoPhaseCommitSink) CopyValues() bool {
	if s.format != nil {
		return false
	}
	c, ok := s.committer.(runtime.ValueCopier)
	return ok && c.CopyValues()
}

// Open implements runtime.Operator: it opens the first transaction.
func (s *TwoPhaseCommitSink) Open(ctx context.Context) error {
	return s.committer.BeginTransaction(ctx)
}

// ProcessRecord implements runtime.Operator.
func (s *TwoPhaseCommitSink) ProcessRecord(ctx context.Context, _ int, rec runtime.Record) error {
	if s.format != nil {
		var err error
		if rec, err = s.encoded(ctx, rec); err != nil {
			return err
		}
	}
	return s.committer.Write(ctx, rec)
}

// encoded returns rec encoded by the sink's format. It takes and returns
// the record by value so that only a record that is encoded moves to the
// heap (the Format is an interface: the pointer it gets escapes), not
// every record the sink writes.
//
//go:noinline
func (s *TwoPhaseCommitSink) encoded(ctx context.Context, rec runtime.Record) (runtime.Record, error) {
	if err := s.format.Encode(ctx, s.topic, &rec); err != nil {
		return rec, fmt.Errorf("sink %s[%d]: encode: %w", s.name, s.subtask, err)
	}
	return rec, nil
}

// SnapshotState implements runtime.Snapshotter: pre-commit the open
// transaction, keep its committable, open the next one, and store every
// pending committable in the snapshot.
func (s *TwoPhaseCommitSink) SnapshotState(ctx context.Context, b *runtime.Barrier) (runtime.SnapshotFinisher, error) {
	data, err := s.committer.PreCommit(ctx, b.CheckpointID)
	if err != nil {
		return nil, err
	}
	s.pending = append(s.pending, pendingCommit{id: b.CheckpointID, data: data})
	if l, ok := s.committer.(SnapshotListener); ok {
		l.Snapshotted(b.CheckpointID)
	}
	if err := s.committer.BeginTransaction(ctx); err != nil {
		return nil, err
	}
	if b.StopAfter {
		s.finalWait = true
	}
	raw, err := CommittablesTaskState(s.typ, s.pendingData())
	if err != nil {
		return nil, err
	}
	return func(context.Context) (runtime.TaskSnapshot, error) { return runtime.TaskSnapshot{State: raw}, nil }, nil
}

func (s *TwoPhaseCommitSink) pendingData() [][]byte {
	out := make([][]byte, len(s.pending))
	for i, p := range s.pending {
		out[i] = p.data
	}
	return out
}

// NotifyCheckpointComplete implements runtime.CheckpointListener: it
// commits every pending transaction of checkpoint id or before, in order,
// then tells a CompletionListener committer. A commit's error is returned
// wrapped (errors.As finds the committer's type, e.g. one that suppresses
// restarts); its transaction and the later ones stay pending.
func (s *TwoPhaseCommitSink) NotifyCheckpointComplete(ctx context.Context, id int64) error {
	n := 0
	for ; n < len(s.pending) && s.pending[n].id <= id; n++ {
		if s.pending[n].data == nil {
			continue // an empty epoch
		}
		if err := s.committer.Commit(ctx, s.pending[n].id, s.pending[n].data); err != nil {
			s.pending = s.pending[n:]
			return fmt.Errorf("sink %s[%d]: commit of checkpoint %d: %w", s.name, s.subtask, s.pending[0].id, err)
		}
	}
	s.pending = s.pending[n:]
	if l, ok := s.committer.(CompletionListener); ok {
		l.CheckpointCompleted(id)
	}
	return nil
}

// WriteTo writes rec to topic in the open transaction (a dead-letter
// writer: the side output of a task's bad-record policies,
// runtime.SideOutput), committed with the checkpoint whose barrier follows
// it. It returns an error when the committer is no TopicWriter.
func (s *TwoPhaseCommitSink) WriteTo(ctx context.Context, topic string, rec runtime.Record) error {
	tw, ok := s.committer.(TopicWriter)
	if !ok {
		return fmt.Errorf("sink %s: its committer %T cannot write to another topic (%q)", s.name, s.committer, topic)
	}
	return tw.WriteTo(ctx, topic, rec)
}

// ProcessWatermark implements runtime.WatermarkHandler: it hands wm to a
// committer that is a runtime.WatermarkHandler, else does nothing.
func (s *TwoPhaseCommitSink) ProcessWatermark(ctx context.Context, wm time.Time) error {
	if h, ok := s.committer.(runtime.WatermarkHandler); ok {
		return h.ProcessWatermark(ctx, wm)
	}
	return nil
}

// ProcessIdle implements runtime.IdleHandler: it tells a committer that is
// a runtime.IdleHandler, else does nothing.
func (s *TwoPhaseCommitSink) ProcessIdle(ctx context.Context) error {
	if h, ok := s.committer.(runtime.IdleHandler); ok {
		return h.ProcessIdle(ctx)
	}
	return nil
}

// NotifyCheckpointAborted implements runtime.CheckpointListener: pending
// transactions stay pending for the next completed checkpoint.
func (s *TwoPhaseCommitSink) NotifyCheckpointAborted(context.Context, int64) {}

// PendingCommits implements runtime.PendingCommitter.
func (s *TwoPhaseCommitSink) PendingCommits() bool { return s.finalWait && len(s.pending) > 0 }

// EndInput implements runtime.Operator: the open transaction holds records
// no checkpoint covers, so it is discarded.
func (s *TwoPhaseCommitSink) EndInput(ctx context.Context) error {
	if len(s.pending) > 0 {
		s.logger.Info("stopping with pre-committed transactions; the next start commits them if their checkpoint completed", "pending", len(s.pending))
	}
	return s.committer.AbortOpen(ctx)
}

// Close implements runtime.Operator.
func (s *TwoPhaseCommitSink) Close() error { return s.committer.Close() }

// CommittablesTaskState returns the task state (checkpoint.TaskState as
// JSON) of a sink subtask of type typ holding committables, each wrapped
// in its envelope under checkpoint.CommittablesState. A sink that is no
// TwoPhaseCommitSink but keeps committables writes its snapshot with it,
// so that a restore hands them to its type's Recover.
func CommittablesTaskState(typ string, committables [][]byte) (json.RawMessage, error) {
	entries := make([][]byte, 0, len(committables))
	for _, c := range committables {
		e, err := checkpoint.EncodeCommittable(typ, c)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	return json.Marshal(checkpoint.TaskState{Operator: map[string]state.OperatorListSnapshot{
		checkpoint.CommittablesState: {Mode: state.ModeSplit, Entries: entries},
	}})
}
