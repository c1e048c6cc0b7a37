package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// SideOutputOperator is the writer of a SideOutput: a two-phase-commit
// sink the task drives besides its operator (connector.TwoPhaseCommitSink).
// Open runs after the task's operator opened, SnapshotState (the
// pre-commit) at every barrier before the barrier is forwarded,
// NotifyCheckpointComplete (the commit) and NotifyCheckpointAborted on the
// task goroutine, EndInput (aborting the open transaction) after the
// operator's EndInput, Close once with the task. ProcessRecord is not called
// by the task: whoever writes to the side output (a bad-record policy) does.
type SideOutputOperator interface {
	Operator
	Snapshotter
	CheckpointListener
	PendingCommitter
}

// SideOutput is a transactional output a task writes besides its main
// output and checkpoints with its own state: Flink's side output to a
// two-phase-commit sink, here the dead-letter writer of an exactly-once
// job's bad-record policies. Its snapshot (its pending committables) is
// acknowledged under ID, so the checkpoint holds it as an operator of its
// own, and the coordinator expects that acknowledgement from every task
// that reports the id (SideOutputOwner).
type SideOutput struct {
	// ID is the id its snapshots are acknowledged under.
	ID TaskID
	// Operator is the writer.
	Operator SideOutputOperator
}

// SideOutputOwner is implemented by a CheckpointTarget whose side outputs
// acknowledge snapshots under ids of their own; the checkpoint coordinator
// expects an acknowledgement of each checkpoint from each of them besides
// the target's own. Notifications reach the side outputs through their
// task, which reports a checkpoint complete (NotifyCheckpointCompleteThen)
// only once its side outputs committed too.
type SideOutputOwner interface {
	SideOutputIDs() []TaskID
}

// SideOutputs are a task's side outputs; the helpers below are what
// OperatorTask and the Kafka source do with them. The zero value has none.
type SideOutputs []SideOutput

// IDs returns the ids the side outputs acknowledge under.
func (s SideOutputs) IDs() []TaskID {
	out := make([]TaskID, len(s))
	for i, o := range s {
		out[i] = o.ID
	}
	return out
}

// Open opens every side output; it returns the first failure, naming it.
func (s SideOutputs) Open(ctx context.Context) error {
	for _, o := range s {
		if err := o.Operator.Open(ctx); err != nil {
			return fmt.Errorf("side output %s: open: %w", o.ID, err)
		}
	}
	return nil
}

// Snapshot pre-commits every side output for barrier b on the calling (the
// task's) goroutine and acknowledges each snapshot to resp under the side
// output's id, finishing it on another goroutine counted in wg; a failed
// snapshot is declined. resp nil: nothing is snapshotted (no checkpoints).
func (s SideOutputs) Snapshot(ctx context.Context, b *Barrier, resp CheckpointResponder, wg *sync.WaitGroup) {
	if resp == nil {
		return
	}
	for _, o := range s {
		f, err := o.Operator.SnapshotState(ctx, b)
		if err != nil {
			resp.Decline(o.ID, b.CheckpointID, fmt.Errorf("%s: snapshot: %w", o.ID, err))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			snap, err := f(ctx)
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					resp.Decline(o.ID, b.CheckpointID, fmt.Errorf("%s: snapshot: %w", o.ID, err))
				}
				return
			}
			resp.Acknowledge(o.ID, b.CheckpointID, snap)
		}()
	}
}

// Complete tells every side output that checkpoint id completed (they
// commit); it returns the first failure, naming the side output.
func (s SideOutputs) Complete(ctx context.Context, id int64) error {
	for _, o := range s {
		if err := o.Operator.NotifyCheckpointComplete(ctx, id); err != nil {
			return fmt.Errorf("side output %s: %w", o.ID, err)
		}
	}
	return nil
}

// Aborted tells every side output that checkpoint id was aborted.
func (s SideOutputs) Aborted(ctx context.Context, id int64) {
	for _, o := range s {
		o.Operator.NotifyCheckpointAborted(ctx, id)
	}
}

// PendingCommits reports whether a side output waits for the commit of a
// stop-with-savepoint checkpoint.
func (s SideOutputs) PendingCommits() bool {
	for _, o := range s {
		if o.Operator.PendingCommits() {
			return true
		}
	}
	return false
}

// EndInput ends every side output (its open transaction, which no
// checkpoint covers, is aborted); it returns the first failure.
func (s SideOutputs) EndInput(ctx context.Context) error {
	for _, o := range s {
		if err := o.Operator.EndInput(ctx); err != nil {
			return fmt.Errorf("side output %s: end of input: %w", o.ID, err)
		}
	}
	return nil
}

// Close closes every side output; it returns the first failure.
func (s SideOutputs) Close() error {
	var first error
	for _, o := range s {
		if err := o.Operator.Close(); err != nil && first == nil {
			first = fmt.Errorf("side output %s: close: %w", o.ID, err)
		}
	}
	return first
}
