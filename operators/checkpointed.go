package operators

import (
	"encoding/json"
	"time"

	"github.com/kstreamd/kstreamd/state"
)

// CheckpointedFunction is implemented by functions with operator
// (non-keyed) state, as Flink's CheckpointedFunction: InitializeState runs
// once before the first record, after a restore with the redistributed
// state; SnapshotState runs on every checkpoint barrier, on the subtask
// goroutine, before the operator state store is copied into the checkpoint.
type CheckpointedFunction interface {
	InitializeState(ctx FunctionInitializationContext) error
	SnapshotState(ctx FunctionSnapshotContext) error
}

// FunctionInitializationContext is what InitializeState sees (Flink's
// FunctionInitializationContext).
type FunctionInitializationContext struct {
	// OperatorStateStore holds the operator list states (even-split and
	// union), with their restored entries after a restore.
	OperatorStateStore *state.OperatorStateStore
	// Backend is the keyed state backend of a keyed operator, nil otherwise.
	Backend state.KeyedStateBackend
}

// IsRestored reports whether the subtask was restored from a checkpoint or
// savepoint.
func (c FunctionInitializationContext) IsRestored() bool { return c.OperatorStateStore.IsRestored() }

// FunctionSnapshotContext is what SnapshotState sees (Flink's
// FunctionSnapshotContext).
type FunctionSnapshotContext struct {
	// CheckpointID is the checkpoint being taken.
	CheckpointID int64
	// Timestamp is when the checkpoint was triggered.
	Timestamp time.Time
}

// BroadcastStateful is implemented by a KeyedBroadcastProcessFunction (or
// BroadcastProcessFunction) whose
// broadcast state is checkpointed: every subtask snapshots its copy and a
// restored subtask gets one copy back (scale-up subtasks take old copies
// round-robin). Both run on the subtask goroutine.
type BroadcastStateful interface {
	// SnapshotBroadcastState returns each broadcast state by name as JSON.
	// The caller only reads the bytes and may keep them: a state that did
	// not change may come back as the same slice (ProcessOperator then
	// reuses its last encoding), so bytes once returned must never be
	// written to again.
	SnapshotBroadcastState() (map[string]json.RawMessage, error)
	// RestoreBroadcastState loads what SnapshotBroadcastState returned; it
	// runs after Open.
	RestoreBroadcastState(states map[string]json.RawMessage) error
}
