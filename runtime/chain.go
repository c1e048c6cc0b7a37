package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ChainedOperator is an operator chained to the operator before it in the
// same task (Flink's OperatorChain with ChainingStrategy.ALWAYS): the
// upstream operator's Output hands each record it emits straight to
// ProcessRecord on the same goroutine, with no channel, no batch and no
// copy between them, and every control element it forwards (watermark,
// idle status, barrier, end of input) reaches the chained operator the same
// way, after the records emitted before it.
//
// A chained operator keeps everything an operator of its own task has: its
// TaskID (its snapshots are acknowledged, and its state restored, under
// it, so a checkpoint taken with chaining on restores with it off and the
// other way round), its records-in counter and watermark gauge, its Output
// (records out, its own channels, side outputs and further chained
// operators), its bad-record policy for its input and its transactional
// side outputs. Add one to an Output with Output.AddChained and to the task
// that runs the chain with OperatorTaskConfig.Chain.
type ChainedOperator struct {
	// ID names the chained operator's subtask; its snapshots are
	// acknowledged under it.
	ID TaskID
	// Operator is the logic; it reads one input (0).
	Operator Operator
	// Output receives what Operator emits and the control elements; nil
	// for a chained sink, which emits nothing.
	Output *Output
	// RecordsIn is incremented per record received; may be nil.
	RecordsIn interface{ Inc() }
	// BadRecords receives the records Operator failed with a
	// *RecordError; nil makes such an error fail the task.
	BadRecords BadRecordHandler
	// Watermark receives the operator's input watermark each time it
	// advances; may be nil.
	Watermark *WatermarkGauge
	// SideOutputs are the operator's transactional side outputs (its
	// dead-letter writer), checkpointed with it; see
	// OperatorTaskConfig.SideOutputs.
	SideOutputs SideOutputs

	// Set by the task hosting the chain (Chain.Bind).
	name      string
	responder CheckpointResponder
	snapshots *sync.WaitGroup
}

// chainedError marks the failure of a chained operator that its own
// bad-record policy did not absorb: the task fails with it, and the
// operators upstream in the chain must not take it for a bad record of
// their own (it may wrap a *RecordError).
type chainedError struct{ err error }

func (e *chainedError) Error() string { return e.err.Error() }
func (e *chainedError) Unwrap() error { return e.err }

// processRecord hands rec to the operator; a *RecordError goes to the
// operator's bad-record policy. Any error returned is a *chainedError
// naming the operator.
func (c *ChainedOperator) processRecord(ctx context.Context, rec Record) error {
	if c.RecordsIn != nil {
		c.RecordsIn.Inc()
	}
	err := c.Operator.ProcessRecord(ctx, 0, rec)
	if err == nil {
		return nil
	}
	var ce *chainedError
	if errors.As(err, &ce) {
		return err // failed further down the chain, already named
	}
	var re *RecordError
	if errors.As(err, &re) && c.BadRecords != nil {
		if err = c.BadRecords.HandleBadRecord(ctx, rec, re); err == nil {
			return nil
		}
	}
	return &chainedError{fmt.Errorf("%s: %w", c.name, err)}
}

// control handles a control element the upstream operator forwards, as
// OperatorTask does for its own operator, then forwards it on c.Output.
func (c *ChainedOperator) control(ctx context.Context, el Element) error {
	switch el.Kind {
	case KindWatermark:
		if el.Idle {
			if h, ok := c.Operator.(IdleHandler); ok {
				if err := h.ProcessIdle(ctx); err != nil {
					return &chainedError{fmt.Errorf("%s: idle: %w", c.name, err)}
				}
			}
			return c.forward(ctx, el)
		}
		if h, ok := c.Operator.(WatermarkHandler); ok {
			if err := h.ProcessWatermark(ctx, el.Watermark); err != nil {
				if err == ErrWatermarkHeld { // the operator forwards it at its batch's end
					c.Watermark.Set(el.Watermark)
					return nil
				}
				return c.wrap("watermark", err)
			}
		}
		c.Watermark.Set(el.Watermark)
	case KindBarrier:
		return c.barrier(ctx, el.Barrier)
	case KindEndOfInput:
		if err := c.Operator.EndInput(ctx); err != nil {
			return c.wrap("end of input", err)
		}
		if err := c.SideOutputs.EndInput(ctx); err != nil {
			return &chainedError{fmt.Errorf("%s: %w", c.name, err)}
		}
	}
	return c.forward(ctx, el)
}

// forward hands control element el on to c's Output (a chained sink has
// none).
func (c *ChainedOperator) forward(ctx context.Context, el Element) error {
	if c.Output == nil {
		return nil
	}
	return c.Output.Broadcast(ctx, el)
}

// wrap names a failure of c in what (an error of a chained operator
// further down is passed on as it is).
func (c *ChainedOperator) wrap(what string, err error) error {
	var ce *chainedError
	if errors.As(err, &ce) {
		return err
	}
	return &chainedError{fmt.Errorf("%s: %s: %w", c.name, what, err)}
}

// barrier snapshots the operator and its side outputs for b (the records
// before b all went through it: the chain runs on one goroutine), forwards
// b, then finishes the snapshot on another goroutine, as
// OperatorTask.maybeAligned does for the head of the chain.
func (c *ChainedOperator) barrier(ctx context.Context, b *Barrier) error {
	var finish SnapshotFinisher
	if s, ok := c.Operator.(Snapshotter); ok {
		f, err := s.SnapshotState(ctx, b)
		if err != nil {
			if c.responder != nil {
				c.responder.Decline(c.ID, b.CheckpointID, fmt.Errorf("%s: snapshot: %w", c.name, err))
			}
		} else {
			finish = f
		}
	} else if c.responder != nil {
		c.responder.Acknowledge(c.ID, b.CheckpointID, TaskSnapshot{})
	}
	c.SideOutputs.Snapshot(ctx, b, c.responder, c.snapshots)
	if err := c.forward(ctx, Element{Kind: KindBarrier, Barrier: b}); err != nil {
		return err
	}
	if finish != nil {
		c.snapshots.Add(1)
		go func() {
			defer c.snapshots.Done()
			snap, err := finish(ctx)
			if c.responder == nil {
				return
			}
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					c.responder.Decline(c.ID, b.CheckpointID, fmt.Errorf("%s: snapshot: %w", c.name, err))
				}
				return
			}
			c.responder.Acknowledge(c.ID, b.CheckpointID, snap)
		}()
	}
	return nil
}

// complete runs the chained operator's checkpoint listener and its side
// outputs' for checkpoint id.
func (c *ChainedOperator) complete(ctx context.Context, id int64) error {
	if l, ok := c.Operator.(CheckpointListener); ok {
		if err := l.NotifyCheckpointComplete(ctx, id); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	if err := c.SideOutputs.Complete(ctx, id); err != nil {
		return fmt.Errorf("%s: %w", c.name, err)
	}
	return nil
}

// aborted tells the chained operator and its side outputs that checkpoint
// id was aborted.
func (c *ChainedOperator) aborted(ctx context.Context, id int64) {
	if l, ok := c.Operator.(CheckpointListener); ok {
		l.NotifyCheckpointAborted(ctx, id)
	}
	c.SideOutputs.Aborted(ctx, id)
}

// listens reports whether c needs checkpoint notifications.
func (c *ChainedOperator) listens() bool {
	_, ok := c.Operator.(CheckpointListener)
	return ok || len(c.SideOutputs) > 0
}

// pendingCommits reports whether c waits for the commit of a
// stop-with-savepoint checkpoint.
func (c *ChainedOperator) pendingCommits() bool {
	pc, ok := c.Operator.(PendingCommitter)
	return (ok && pc.PendingCommits()) || c.SideOutputs.PendingCommits()
}

// Chain are the operators chained after the head of one task (an
// operator or a source; Flink's OperatorChain), upstream before
// downstream, each already added to its upstream's Output with
// Output.AddChained. The task hosting the chain binds it (Bind), opens it
// before its first record and closes it after its last (Open, Close),
// hands it checkpoint notifications on its own goroutine (Complete,
// Aborted), waits for its pending commits at a stop-with-savepoint
// (PendingCommits), and names its members to the checkpoint coordinator
// as ids acknowledging snapshots of their own (IDs). OperatorTask hosts
// one through OperatorTaskConfig.Chain; a source task may host one too
// (the kafka source type does: source.Config.Chain).
type Chain []*ChainedOperator

// Bind makes the chain part of a task: snapshots are acknowledged to
// responder (nil: the job takes no checkpoints), their asynchronous parts
// counted in snapshots (the task waits for it before closing),
// operators that post work to the task (MailboxAware) use mailbox, and
// the chained operators' outputs count their back-pressure in the host's
// meter times (nil: none; one goroutine, one meter).
func (ch Chain) Bind(responder CheckpointResponder, snapshots *sync.WaitGroup, mailbox *Mailbox, times *IOTimes) {
	for _, c := range ch {
		c.name, c.responder, c.snapshots = c.ID.String(), responder, snapshots
		if c.Output != nil && times != nil {
			// One goroutine, one meter: the chained operator's time
			// counters count the host task's time.
			times.Adopt(c.Output.IOTimes())
			c.Output.SetIOTimes(times)
		}
		if ba, ok := c.Operator.(BadRecordAware); ok {
			ba.SetBadRecordHandlers([]BadRecordHandler{c.BadRecords})
		}
		if ma, ok := c.Operator.(MailboxAware); ok {
			ma.SetMailbox(mailbox)
		}
	}
}

// Open opens each chained operator and its side outputs, upstream first.
// It returns how many operators it opened, which Close must be given
// (also when Open failed: the operators opened before the failure close).
func (ch Chain) Open(ctx context.Context) (int, error) {
	for i, c := range ch {
		if err := c.Operator.Open(ctx); err != nil {
			return i, fmt.Errorf("%s: open: %w", c.ID, err)
		}
		if err := c.SideOutputs.Open(ctx); err != nil {
			return i + 1, fmt.Errorf("%s: %w", c.ID, err)
		}
	}
	return len(ch), nil
}

// Close closes the first opened operators of the chain (what Open
// returned) and their side outputs, downstream first, and returns the
// first error. The caller waits for the snapshots in flight first.
func (ch Chain) Close(opened int) error {
	var first error
	for i := opened - 1; i >= 0; i-- {
		c := ch[i]
		if err := c.Operator.Close(); err != nil && first == nil {
			first = fmt.Errorf("%s: close: %w", c.ID, err)
		}
		if err := c.SideOutputs.Close(); err != nil && first == nil {
			first = fmt.Errorf("%s: %w", c.ID, err)
		}
	}
	return first
}

// Complete runs each chained operator's checkpoint listener and its side
// outputs' for checkpoint id, upstream first, stopping at the first
// error. Call it on the task's goroutine.
func (ch Chain) Complete(ctx context.Context, id int64) error {
	for _, c := range ch {
		if err := c.complete(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// Aborted tells every chained operator and its side outputs that
// checkpoint id was aborted. Call it on the task's goroutine.
func (ch Chain) Aborted(ctx context.Context, id int64) {
	for _, c := range ch {
		c.aborted(ctx, id)
	}
}

// Listens reports whether a member of the chain needs checkpoint
// notifications (a CheckpointListener or side outputs).
func (ch Chain) Listens() bool {
	for _, c := range ch {
		if c.listens() {
			return true
		}
	}
	return false
}

// PendingCommits reports whether a member of the chain waits for the
// commit of a stop-with-savepoint checkpoint (see PendingCommitter).
func (ch Chain) PendingCommits() bool {
	for _, c := range ch {
		if c.pendingCommits() {
			return true
		}
	}
	return false
}

// IDs returns the ids of every chained operator and of its side outputs,
// all of which acknowledge snapshots of their own (for
// SideOutputOwner.SideOutputIDs).
func (ch Chain) IDs() []TaskID {
	var ids []TaskID
	for _, c := range ch {
		ids = append(ids, c.ID)
		ids = append(ids, c.SideOutputs.IDs()...)
	}
	return ids
}

// ChainFailure reports whether err is the failure of a chained operator
// that its own bad-record policy did not absorb (Output.Emit returns it):
// it fails the task, and the emitting operator or source must not take it
// for a bad record of its own even when it wraps a *RecordError.
func ChainFailure(err error) bool {
	var ce *chainedError
	return errors.As(err, &ce)
}

// ChainHost is a source task that can run the operators chained to it
// (Flink chains a source with the forward operators after it): the job
// adds the chain's first operators to the source's Output with
// Output.AddChained, then calls HostChain once before Run. The host binds
// the chain (Chain.Bind) to its responder, snapshot wait group and
// mailbox, opens and closes it, passes checkpoint notifications to it on
// its goroutine, waits for its pending commits at a stop-with-savepoint,
// names its ids in SideOutputIDs, and never takes a ChainFailure for a bad
// record of its own.
type ChainHost interface {
	HostChain(Chain)
	// Mailbox returns the mailbox the task runs its actions from, which
	// the hosted chain's operators post to (MailboxAware) and a state
	// query reads through.
	Mailbox() *Mailbox
}
