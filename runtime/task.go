package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Task is one subtask: a goroutine the Job starts and waits for.
type Task interface {
	// Name returns "<operator>[<subtask>]", used in logs and errors.
	Name() string
	// Run runs the subtask until its input ends, it fails, or ctx ends. Its
	// errors start with the task name.
	// Sources also watch stop: when it is closed they stop reading, emit
	// end-of-input downstream and return nil. Other tasks ignore stop: they
	// finish when every input channel delivered end-of-input. Run returns
	// nil after a clean finish and ctx.Err() (or its own error) otherwise.
	Run(ctx context.Context, stop <-chan struct{}) error
}

// Operator is the logic of a non-source subtask driven by an OperatorTask
// (Flink's StreamOperator). Every method runs on the subtask goroutine.
// Operators may also implement Snapshotter and CheckpointListener.
type Operator interface {
	// Open prepares the operator (opens or restores state) before the first
	// record.
	Open(ctx context.Context) error
	// ProcessRecord handles one record of logical input input (0 = main,
	// 1 = broadcast side). An error fails the job.
	ProcessRecord(ctx context.Context, input int, rec Record) error
	// EndInput is called once every input channel delivered end-of-input,
	// before end-of-input is forwarded: finish in-flight work and flush.
	EndInput(ctx context.Context) error
	// Close releases the operator's resources (closes state). It is called
	// exactly once after Open succeeded, whether the task succeeded or not.
	Close() error
}

// OperatorTask runs an Operator over an InputGate on one goroutine (Flink's
// StreamTask with its mailbox loop). It aligns checkpoint barriers: a
// channel that delivered barrier n is blocked until every channel did; then
// the operator snapshots, the barrier is forwarded, the channels are
// unblocked, and the snapshot's files are written on another goroutine while
// records flow again.
type OperatorTask struct {
	// validJSON holds the ValidJSON mark of the record being processed
	// when it was sent with one (Record.receiveDecoded).
	validJSON DecodedSlot
	id        TaskID
	name      string
	gate      *InputGate
	op        Operator
	out       *Output
	mailbox   *Mailbox
	inputs    int
	recIn     interface{ Inc() }
	bootstrp  int
	responder CheckpointResponder
	// badByInput handles *RecordError failures per logical input.
	badByInput []BadRecordHandler
	// sides are the task's transactional side outputs (the dead-letter
	// writer), checkpointed with it under ids of their own.
	sides SideOutputs
	// chain are the operators chained after op, in the order their
	// upstream operators come (OperatorTaskConfig.Chain).
	chain Chain
	// valve combines the channels' watermarks; wmGauge exports the last
	// watermark forwarded (may be nil).
	valve   *StatusWatermarkValve
	wmGauge *WatermarkGauge
	// bvalve combines the broadcast channels' watermarks for an operator
	// that is a BroadcastWatermarkHandler wanting them (nil otherwise):
	// bwm is the broadcast time last handed to it, outWM the watermark
	// last forwarded, idleHeld an all-idle status of the main input not
	// forwarded yet because the broadcast time was behind.
	bvalve   *StatusWatermarkValve
	bhandler BroadcastWatermarkHandler
	bwm      time.Time
	outWM    time.Time
	idleHeld bool

	// Only the subtask goroutine touches these.
	aligning   *Barrier
	arrived    map[int]bool
	alignStart time.Time
	mailErr    error
	snapshots  sync.WaitGroup // asynchronous snapshot parts in flight
	// runCtx is Run's ctx, for the checkpoint notifications that run as
	// mail on the subtask goroutine (only while Run runs): a commit
	// blocked on the broker ends when the job is cancelled.
	runCtx context.Context

	// times is the subtask's meter of idle, back-pressured and busy time
	// (OperatorTaskConfig.IOTimes); may be nil.
	times *IOTimes

	// mailWakes counts the times the loop woke for mail rather than input;
	// read by tests from other goroutines.
	mailWakes atomic.Int64
}

// OperatorTaskConfig configures NewOperatorTask.
type OperatorTaskConfig struct {
	// ID names the subtask.
	ID TaskID
	// Gate holds the subtask's input channels.
	Gate *InputGate
	// Operator is the logic.
	Operator Operator
	// Output receives what the operator emits and the forwarded control
	// elements; nil for a sink.
	Output *Output
	// Mailbox runs actions other goroutines post for this subtask; nil
	// makes a new one.
	Mailbox *Mailbox
	// BootstrapInput, when >= 0, is a logical input (a broadcast side) that
	// must be caught up before any other input is read: every other input
	// stays blocked until every channel of BootstrapInput delivered
	// KindCaughtUp or end-of-input. -1 disables the bootstrap.
	BootstrapInput int
	// RecordsIn is incremented per record received; may be nil.
	RecordsIn interface{ Inc() }
	// Responder receives checkpoint acknowledgements; nil when the job
	// takes no checkpoints (barriers are then forwarded without snapshots).
	Responder CheckpointResponder
	// BadRecords receives the records the operator (or a key selector of
	// its output) failed with a *RecordError, per logical input (index =
	// input); a missing or nil entry makes such an error fail the task.
	BadRecords []BadRecordHandler
	// Watermark receives the task's input watermark each time it advances;
	// may be nil.
	Watermark *WatermarkGauge
	// SideOutputs are transactional outputs the task checkpoints besides
	// its operator (the dead-letter writer its BadRecords write to): each
	// is pre-committed at every aligned barrier, acknowledged under its
	// own id, committed when the checkpoint completes, and its open
	// transaction aborted at end of input. See SideOutput.
	SideOutputs []SideOutput
	// Chain are the operators chained after Operator in this task
	// (Flink's OperatorChain), each already added to its upstream
	// operator's Output with Output.AddChained, upstream before
	// downstream. The task opens, closes and notifies them with its own
	// operator and expects their snapshots under their own ids
	// (SideOutputIDs). Chained operators read one input.
	Chain Chain
	// IOTimes, if not nil, meters the subtask's idle, back-pressured and
	// busy time (a sink, which has no Output); nil means Output's
	// (Output.IOTimes). The chained operators' outputs are made to count
	// their back-pressure in it too.
	IOTimes *IOTimes
}

// NewOperatorTask returns a task from cfg.
func NewOperatorTask(cfg OperatorTaskConfig) *OperatorTask {
	mb := cfg.Mailbox
	if mb == nil {
		mb = NewMailbox()
	}
	t := &OperatorTask{id: cfg.ID, name: cfg.ID.String(), gate: cfg.Gate, op: cfg.Operator, out: cfg.Output, mailbox: mb,
		recIn: cfg.RecordsIn, bootstrp: cfg.BootstrapInput, responder: cfg.Responder, badByInput: cfg.BadRecords, sides: cfg.SideOutputs,
		chain: cfg.Chain, times: cfg.IOTimes}
	if t.times == nil && t.out != nil {
		t.times = t.out.IOTimes()
	}
	t.chain.Bind(t.responder, &t.snapshots, mb, t.times)
	for i := 0; i < cfg.Gate.NumChannels(); i++ {
		t.inputs = max(t.inputs, cfg.Gate.Channel(i).Input+1)
	}
	if ba, ok := cfg.Operator.(BadRecordAware); ok {
		ba.SetBadRecordHandlers(cfg.BadRecords)
	}
	if ma, ok := cfg.Operator.(MailboxAware); ok {
		ma.SetMailbox(mb)
	}
	// The broadcast (bootstrap) input does not hold event time back.
	ignored := make([]bool, cfg.Gate.NumChannels())
	for i := range ignored {
		ignored[i] = cfg.BootstrapInput >= 0 && cfg.Gate.Channel(i).Input == cfg.BootstrapInput
	}
	t.valve = NewStatusWatermarkValve(cfg.Gate.NumChannels(), ignored)
	t.wmGauge = cfg.Watermark
	if h, ok := cfg.Operator.(BroadcastWatermarkHandler); ok && cfg.BootstrapInput >= 0 && h.BroadcastWatermarks() {
		main := make([]bool, len(ignored))
		for i, b := range ignored {
			main[i] = !b
		}
		t.bvalve, t.bhandler, t.bwm, t.outWM = NewStatusWatermarkValve(len(main), main), h, MinWatermark, MinWatermark
	}
	return t
}

// Name implements Task.
func (t *OperatorTask) Name() string { return t.name }

// ID implements CheckpointTarget.
func (t *OperatorTask) ID() TaskID { return t.id }

// Mailbox returns the subtask's mailbox.
func (t *OperatorTask) Mailbox() *Mailbox { return t.mailbox }

// SideOutputIDs implements SideOutputOwner: the ids of the task's side
// outputs, then of each chained operator and its side outputs, all of
// which acknowledge snapshots of their own.
func (t *OperatorTask) SideOutputIDs() []TaskID {
	return append(t.sides.IDs(), t.chain.IDs()...)
}

// listens reports whether a checkpoint notification has anyone to reach
// besides the operator's listener (side outputs, chained operators).
func (t *OperatorTask) listens() bool {
	return len(t.sides) > 0 || t.chain.Listens()
}

// NotifyCheckpointComplete implements CheckpointTarget: the operator's
// listener, then the side outputs, commit on the subtask goroutine.
func (t *OperatorTask) NotifyCheckpointComplete(id int64) {
	l, ok := t.op.(CheckpointListener)
	if !ok && !t.listens() {
		return
	}
	t.mailbox.Execute(func() {
		if err := t.complete(l, id); err != nil && t.mailErr == nil {
			t.mailErr = fmt.Errorf("%s: checkpoint %d complete: %w", t.name, id, err)
		}
	})
}

// complete runs the operator's listener (l, may be nil) and the side
// outputs' for checkpoint id.
func (t *OperatorTask) complete(l CheckpointListener, id int64) error {
	if l != nil {
		if err := l.NotifyCheckpointComplete(t.runCtx, id); err != nil {
			return err
		}
	}
	if err := t.sides.Complete(t.runCtx, id); err != nil {
		return err
	}
	return t.chain.Complete(t.runCtx, id)
}

// NotifyCheckpointCompleteThen is NotifyCheckpointComplete, then calls done
// on the subtask goroutine once the operator's listener and every side
// output's returned without error (at once when there is none): a
// cluster-mode unit applies retention and purges its input only after its
// sinks and dead-letter writers committed. done is never called when a
// listener fails or the task ends before it ran.
func (t *OperatorTask) NotifyCheckpointCompleteThen(id int64, done func()) {
	l, ok := t.op.(CheckpointListener)
	if !ok && !t.listens() {
		done()
		return
	}
	t.mailbox.Execute(func() {
		if err := t.complete(l, id); err != nil {
			if t.mailErr == nil {
				t.mailErr = fmt.Errorf("%s: checkpoint %d complete: %w", t.name, id, err)
			}
			return
		}
		done()
	})
}

// NotifyCheckpointAborted implements CheckpointTarget.
func (t *OperatorTask) NotifyCheckpointAborted(id int64) {
	l, ok := t.op.(CheckpointListener)
	if !ok && !t.listens() {
		return
	}
	t.mailbox.Execute(func() {
		if l != nil {
			l.NotifyCheckpointAborted(t.runCtx, id)
		}
		t.sides.Aborted(t.runCtx, id)
		t.chain.Aborted(t.runCtx, id)
	})
}

// Run implements Task: open, loop over the gate and the mailbox until every
// channel ended, EndInput, forward end-of-input, close.
func (t *OperatorTask) Run(ctx context.Context, _ <-chan struct{}) (err error) {
	t.runCtx = ctx
	t.times.Start()
	defer t.times.Stop()
	if err := t.op.Open(ctx); err != nil {
		return fmt.Errorf("%s: open: %w", t.name, err)
	}
	defer func() {
		t.snapshots.Wait()
		if cerr := t.op.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("%s: close: %w", t.name, cerr)
		}
		if cerr := t.sides.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("%s: %w", t.name, cerr)
		}
	}()
	if err := t.sides.Open(ctx); err != nil {
		return fmt.Errorf("%s: %w", t.name, err)
	}
	opened := 0
	defer func() {
		// The chained operators close before the head, once no snapshot
		// is being written.
		t.snapshots.Wait()
		if cerr := t.chain.Close(opened); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if opened, err = t.chain.Open(ctx); err != nil {
		return err
	}
	pending := t.startBootstrap()
	for !t.gate.Finished() {
		if err := t.runPendingMail(); err != nil { // mail.go
			return err
		}
		el, ch, ok := t.gate.TryNext()
		if !ok {
			// Nothing to read: hand the output's batches on before
			// blocking, so that no receiver waits for records held here.
			if t.out != nil {
				if err := t.out.Flush(ctx); err != nil {
					return err
				}
			}
			var err error
			t.times.BeginIdle()
			el, ch, ok, err = t.gate.Next(ctx, t.mailbox.Ready())
			t.times.EndIdle()
			if err != nil {
				return err
			}
		}
		if !ok {
			// Ready woke the gate: run the mail. TryYieldAll takes the signal
			// back, so an idle task blocks in Next until the next post.
			t.mailWakes.Add(1)
			t.mailbox.TryYieldAll()
			if t.mailErr == nil {
				if err := t.mailbox.Err(); err != nil {
					t.mailErr = fmt.Errorf("%s: %w", t.name, err)
				}
			}
			if t.mailErr != nil {
				return t.mailErr
			}
			continue
		}
		input := t.gate.Channel(ch).Input
		switch el.Kind {
		case KindRecord:
			if err := t.record(ctx, ch, input, el.Record); err != nil {
				return err
			}
		case KindRecords:
			for _, rec := range el.Batch.Records {
				if err := t.record(ctx, ch, input, rec); err != nil {
					return err
				}
			}
			el.Batch.Release()
		case KindWatermark:
			if t.bvalve != nil && input == t.bootstrp {
				if el.Idle {
					t.bvalve.Idle(ch)
				} else {
					t.bvalve.Watermark(ch, el.Watermark)
				}
				if err := t.broadcastTimeChanged(ctx); err != nil {
					return err
				}
				continue
			}
			if err := t.onWatermark(ctx, ch, el); err != nil {
				return err
			}
		case KindBarrier:
			if err := t.onBarrier(ctx, ch, el.Barrier); err != nil {
				return err
			}
		case KindCaughtUp, KindEndOfInput:
			if el.Kind == KindEndOfInput {
				if wm, ok := t.valve.Finish(ch); ok {
					if err := t.advanceWatermark(ctx, wm); err != nil {
						return err
					}
				}
				if t.bvalve != nil && input == t.bootstrp {
					t.bvalve.Finish(ch)
					if err := t.broadcastTimeChanged(ctx); err != nil {
						return err
					}
				}
			}
			if input == t.bootstrp && pending[ch] {
				delete(pending, ch)
				if len(pending) == 0 {
					t.gate.UnblockAll(BlockBootstrap)
				}
			}
			if el.Kind == KindEndOfInput && t.aligning != nil {
				if err := t.maybeAligned(ctx); err != nil {
					return err
				}
			}
		}
	}
	t.mailbox.TryYieldAll()
	if err := t.awaitPendingCommits(ctx); err != nil {
		return err
	}
	if t.mailErr != nil {
		return t.mailErr
	}
	if err := t.op.EndInput(ctx); err != nil {
		return fmt.Errorf("%s: end of input: %w", t.name, err)
	}
	if err := t.sides.EndInput(ctx); err != nil {
		return fmt.Errorf("%s: %w", t.name, err)
	}
	if t.out != nil {
		return t.out.Broadcast(ctx, Element{Kind: KindEndOfInput})
	}
	return nil
}

// record processes one record of channel ch (of logical input input).
func (t *OperatorTask) record(ctx context.Context, ch, input int, rec Record) error {
	if t.recIn != nil {
		t.recIn.Inc()
	}
	t.valve.Active(ch)
	rec.receiveDecoded(&t.validJSON) // checked JSON before the channel: not checked again
	if t.bvalve != nil && input == t.bootstrp {
		t.bvalve.Active(ch)
		if err := t.broadcastTimeChanged(ctx); err != nil {
			return err
		}
	}
	if err := t.op.ProcessRecord(ctx, input, rec); err != nil {
		var ce *chainedError
		if errors.As(err, &ce) {
			return ce.err // a chained operator failed; it names itself
		}
		if err := t.badRecord(ctx, input, rec, err); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	return nil
}

// onWatermark feeds a watermark or idle status of channel ch to the valve
// and acts on what it says.
func (t *OperatorTask) onWatermark(ctx context.Context, ch int, el Element) error {
	if !el.Idle {
		if wm, ok := t.valve.Watermark(ch, el.Watermark); ok {
			return t.advanceWatermark(ctx, wm)
		}
		return nil
	}
	wm, advanced, allIdle := t.valve.Idle(ch)
	if advanced {
		if err := t.advanceWatermark(ctx, wm); err != nil {
			return err
		}
	}
	if allIdle && t.bvalve != nil && t.bwm.Before(t.valve.Current()) {
		// The broadcast input still holds time back: going idle now would
		// let receivers pass records this operator has yet to emit.
		t.idleHeld = true
		return nil
	}
	if allIdle {
		return t.forwardIdle(ctx)
	}
	return nil
}

// forwardIdle hands the idle status to an IdleHandler operator, then
// forwards it.
func (t *OperatorTask) forwardIdle(ctx context.Context) error {
	if h, ok := t.op.(IdleHandler); ok {
		if err := h.ProcessIdle(ctx); err != nil {
			return fmt.Errorf("%s: idle: %w", t.name, err)
		}
	}
	if t.out != nil {
		return t.out.Broadcast(ctx, Element{Kind: KindWatermark, Idle: true})
	}
	return nil
}

// broadcastTimeChanged hands the broadcast input's time to the
// BroadcastWatermarkHandler when it changed, then forwards the combined
// watermark (and a held-back idle status) if that advanced it.
func (t *OperatorTask) broadcastTimeChanged(ctx context.Context) error {
	bt := MaxWatermark
	if t.bvalve.anyActive() {
		bt = t.bvalve.Current()
	}
	if bt.Equal(t.bwm) {
		return nil
	}
	t.bwm = bt
	if err := t.bhandler.ProcessBroadcastWatermark(ctx, bt); err != nil {
		return fmt.Errorf("%s: broadcast watermark: %w", t.name, err)
	}
	if err := t.advanceWatermark(ctx, t.valve.Current()); err != nil {
		return err
	}
	if t.idleHeld && !t.bwm.Before(t.valve.Current()) {
		t.idleHeld = false
		if !t.valve.anyActive() {
			return t.forwardIdle(ctx)
		}
	}
	return nil
}

// advanceWatermark hands the new input watermark wm to the operator (timers
// fire), then forwards it.
func (t *OperatorTask) advanceWatermark(ctx context.Context, wm time.Time) error {
	if t.bvalve != nil {
		// A two-input operator on broadcast time forwards the minimum.
		if t.bwm.Before(wm) {
			wm = t.bwm
		}
		if !wm.After(t.outWM) {
			return nil
		}
		t.outWM = wm
	}
	if h, ok := t.op.(WatermarkHandler); ok {
		if err := h.ProcessWatermark(ctx, wm); err != nil {
			if err == ErrWatermarkHeld { // the operator forwards it at its batch's end
				t.wmGauge.Set(wm)
				return nil
			}
			return fmt.Errorf("%s: watermark: %w", t.name, err)
		}
	}
	t.wmGauge.Set(wm)
	if t.out != nil {
		return t.out.Broadcast(ctx, Element{Kind: KindWatermark, Watermark: wm})
	}
	return nil
}

// badRecord hands a record that failed with a *RecordError to the
// handler of its input; it returns err itself for any other failure or when
// the input has no handler, and the handler's verdict otherwise.
func (t *OperatorTask) badRecord(ctx context.Context, input int, rec Record, err error) error {
	var re *RecordError
	if !errors.As(err, &re) || input >= len(t.badByInput) || t.badByInput[input] == nil {
		return err
	}
	return t.badByInput[input].HandleBadRecord(ctx, rec, re)
}

// onBarrier handles barrier b from channel ch: a newer barrier starts (or
// replaces) the alignment, an older one is stale and dropped.
func (t *OperatorTask) onBarrier(ctx context.Context, ch int, b *Barrier) error {
	switch {
	case t.aligning == nil || b.CheckpointID > t.aligning.CheckpointID:
		if t.aligning != nil {
			// A newer checkpoint overtook one that never aligned here (it was
			// aborted upstream): give the old one up.
			t.gate.UnblockAll(BlockAlignment)
			if t.responder != nil {
				t.responder.Decline(t.id, t.aligning.CheckpointID, fmt.Errorf("%s: overtaken by checkpoint %d", t.name, b.CheckpointID))
			}
		}
		t.aligning, t.arrived, t.alignStart = b, map[int]bool{}, time.Now()
	case b.CheckpointID < t.aligning.CheckpointID:
		return nil
	}
	t.arrived[ch] = true
	t.gate.Block(ch, BlockAlignment)
	return t.maybeAligned(ctx)
}

// maybeAligned completes the alignment once every channel that is not
// finished delivered the barrier.
func (t *OperatorTask) maybeAligned(ctx context.Context) error {
	for i := 0; i < t.gate.NumChannels(); i++ {
		if !t.arrived[i] && !t.gate.IsFinished(i) {
			return nil
		}
	}
	b := t.aligning
	t.aligning, t.arrived = nil, nil
	if t.responder != nil {
		t.responder.AlignmentDuration(t.id, b.CheckpointID, time.Since(t.alignStart))
	}
	// The mail posted so far runs first (the loop runs mail before each
	// element, runPendingMail, but more may have come while this one was
	// handled): the completion notices of earlier checkpoints; a
	// two-phase-commit writer commits them
	// before it pre-commits this one (else its pool of transactional ids
	// runs out while commits wait behind records).
	t.mailbox.TryYieldAll()
	if t.mailErr == nil {
		if err := t.mailbox.Err(); err != nil {
			t.mailErr = fmt.Errorf("%s: %w", t.name, err)
		}
	}
	if t.mailErr != nil {
		return t.mailErr
	}
	var finish SnapshotFinisher
	if s, ok := t.op.(Snapshotter); ok {
		f, err := s.SnapshotState(ctx, b)
		if err != nil {
			if t.responder != nil {
				t.responder.Decline(t.id, b.CheckpointID, fmt.Errorf("%s: snapshot: %w", t.name, err))
			}
		} else {
			finish = f
		}
	} else if t.responder != nil {
		t.responder.Acknowledge(t.id, b.CheckpointID, TaskSnapshot{})
	}
	// The side outputs hold exactly what the records before the barrier
	// wrote to them: pre-committed here, before the barrier goes on.
	t.sides.Snapshot(ctx, b, t.responder, &t.snapshots)
	if t.out != nil {
		if err := t.out.Broadcast(ctx, Element{Kind: KindBarrier, Barrier: b}); err != nil {
			return err
		}
	}
	t.gate.UnblockAll(BlockAlignment)
	if finish != nil {
		t.snapshots.Add(1)
		go func() {
			defer t.snapshots.Done()
			snap, err := finish(ctx)
			if t.responder == nil {
				return
			}
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					t.responder.Decline(t.id, b.CheckpointID, fmt.Errorf("%s: snapshot: %w", t.name, err))
				}
				return
			}
			t.responder.Acknowledge(t.id, b.CheckpointID, snap)
		}()
	}
	return nil
}

// startBootstrap blocks every input but the bootstrap input and returns the
// bootstrap channels still to catch up.
func (t *OperatorTask) startBootstrap() map[int]bool {
	pending := map[int]bool{}
	if t.bootstrp < 0 {
		return pending
	}
	for i := 0; i < t.gate.NumChannels(); i++ {
		if t.gate.Channel(i).Input == t.bootstrp {
			pending[i] = true
		}
	}
	if len(pending) > 0 {
		for in := 0; in < t.inputs; in++ {
			if in != t.bootstrp {
				t.gate.BlockInput(in, BlockBootstrap)
			}
		}
	}
	return pending
}

// awaitPendingCommits runs the mailbox while the operator waits for a
// checkpoint's completion (stop-with-savepoint), for at most
// FinalCommitTimeout.
func (t *OperatorTask) awaitPendingCommits(ctx context.Context) error {
	pc, _ := t.op.(PendingCommitter)
	pending := func() bool {
		return (pc != nil && pc.PendingCommits()) || t.sides.PendingCommits() || t.chain.PendingCommits()
	}
	if !pending() {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, FinalCommitTimeout)
	defer cancel()
	for pending() && t.mailErr == nil {
		if err := t.mailbox.Yield(wctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%s: the final checkpoint did not complete within %v", t.name, FinalCommitTimeout)
		}
	}
	return nil
}
