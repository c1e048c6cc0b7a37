package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// TaskID names one subtask: the operator's configured name and the subtask
// index in [0, parallelism).
type TaskID struct {
	Operator string
	Subtask  int
}

// String formats the id as operator[subtask].
func (id TaskID) String() string { return fmt.Sprintf("%s[%d]", id.Operator, id.Subtask) }

// TaskSnapshot is what a subtask hands the checkpoint coordinator for one
// checkpoint: its state description, opaque to the runtime (JSON written into
// the checkpoint metadata by the checkpoint package), and the bytes of files
// the subtask wrote for it.
type TaskSnapshot struct {
	// State describes the subtask's state; nil for a stateless subtask.
	State json.RawMessage
	// Bytes is the size of the files the snapshot wrote, in bytes (shared
	// files it uploaded included, shared files it only references excluded).
	Bytes int64
	// SharedFiles are the files under Barrier.SharedDir the snapshot refers
	// to, as paths relative to SharedDir; the checkpoint storage deletes a
	// shared file once no retained checkpoint refers to it.
	SharedFiles []string
}

// SnapshotFinisher completes a snapshot off the subtask goroutine (Flink's
// asynchronous snapshot part): it writes the frozen view's files while the
// subtask goes on processing.
type SnapshotFinisher func(ctx context.Context) (TaskSnapshot, error)

// Snapshotter is implemented by operators with state to checkpoint (Flink's
// StreamOperator.snapshotState). SnapshotState runs on the subtask goroutine
// once barrier b is aligned, before the barrier is forwarded: it must freeze a
// consistent view of the state (a Pebble checkpoint, a copy) quickly and
// return the finisher that writes it. A sink flushes (pre-commits) here.
type Snapshotter interface {
	SnapshotState(ctx context.Context, b *Barrier) (SnapshotFinisher, error)
}

// CheckpointListener is implemented by operators that act when a checkpoint
// completes or is aborted (Flink's CheckpointListener): sinks commit,
// sources commit offsets for monitoring. Both run on the subtask goroutine.
// An error from NotifyCheckpointComplete fails the job.
type CheckpointListener interface {
	NotifyCheckpointComplete(ctx context.Context, checkpointID int64) error
	NotifyCheckpointAborted(ctx context.Context, checkpointID int64)
}

// CheckpointResponder receives the subtasks' answers to a checkpoint; the
// checkpoint coordinator implements it. Its methods may be called from any
// goroutine and must not block for long.
type CheckpointResponder interface {
	// Acknowledge reports that task finished its snapshot of checkpoint id.
	Acknowledge(task TaskID, checkpointID int64, snap TaskSnapshot)
	// Decline reports that task could not snapshot checkpoint id.
	Decline(task TaskID, checkpointID int64, err error)
	// AlignmentDuration reports how long task waited for barrier alignment.
	AlignmentDuration(task TaskID, checkpointID int64, d time.Duration)
}

// CheckpointTarget is a subtask the coordinator talks to: every task gets
// completion notices; sources also get triggers.
type CheckpointTarget interface {
	Task
	// ID returns the subtask's id.
	ID() TaskID
	// NotifyCheckpointComplete hands the completion of checkpoint id to the
	// subtask goroutine (through its mailbox); it never blocks.
	NotifyCheckpointComplete(checkpointID int64)
	// NotifyCheckpointAborted hands the abort of checkpoint id to the
	// subtask goroutine; it never blocks.
	NotifyCheckpointAborted(checkpointID int64)
}

// SourceTask is a source subtask the coordinator triggers checkpoints on.
type SourceTask interface {
	CheckpointTarget
	// TriggerCheckpoint asks the source to snapshot its position and emit
	// barrier b after the records emitted so far; it never blocks (the
	// source acts on its own goroutine) and answers through the responder.
	TriggerCheckpoint(b *Barrier)
}

// PendingCommitter is implemented by sinks that must see a checkpoint's
// completion before their subtask finishes (a stop-with-savepoint's
// transaction). After end of input the task keeps running its mailbox,
// for at most FinalCommitTimeout, while PendingCommits reports true.
type PendingCommitter interface {
	PendingCommits() bool
}

// FinalCommitTimeout bounds how long a finished subtask waits for pending
// commits (see PendingCommitter).
const FinalCommitTimeout = time.Minute
