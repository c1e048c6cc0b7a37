package operators

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// BackendOpener opens the keyed state backend of one subtask, restoring the
// given keyed snapshots (none for a fresh start); the operator calls it in
// Open and closes the backend in Close.
type BackendOpener func(restore []state.RestoreHandle) (state.KeyedStateBackend, error)

// Restore is what one subtask restores from a checkpoint or savepoint,
// already redistributed for the new parallelism (checkpoint.Redistribute*).
type Restore struct {
	// Keyed are the keyed snapshots overlapping the subtask's key groups.
	Keyed []state.RestoreHandle
	// Operator are the operator list states; non-nil marks a restore.
	Operator map[string]state.OperatorListSnapshot
	// Broadcast are the broadcast states of one old subtask.
	Broadcast map[string]json.RawMessage
}

// KeyedOperator drives a KeyedProcessFunction, a
// KeyedBroadcastProcessFunction, a KeyedCoProcessFunction or an
// AsyncKeyedProcessFunction on one subtask; it implements runtime.Operator
// and runtime.Snapshotter. Logical input 0 is the keyed input, input 1 the
// broadcast input (of a KeyedCoProcessFunction: the second keyed input).
type KeyedOperator struct {
	info      OpenContext
	open      BackendOpener
	restore   *Restore
	keyed     KeyedProcessFunction
	broadcast KeyedBroadcastProcessFunction
	co        KeyedCoProcessFunction
	out       *runtime.Output
	backend   state.KeyedStateBackend
	opStore   *state.OperatorStateStore
	coll      collector
	// timers is the timer service of a TimerFunction; nil otherwise.
	timers *timerService

	// Async state (NewAsyncKeyedProcessOperator): the function, the task's
	// mailbox and the controller made at Open.
	async     AsyncKeyedProcessFunction
	mailbox   *runtime.Mailbox
	asyncOpts []state.AsyncOpt
	aec       *state.AsyncExecutionController
	runAsync  func(any) error // o.runAsyncElement, made at Open
	asyncFree []*asyncElement // elements to reuse
	// bad are the task's bad-record handlers per input, for records an
	// async function fails with a *runtime.RecordError.
	bad []runtime.BadRecordHandler
	// cleaner drives the backend's background TTL cleanup (ttlcleanup.go).
	cleaner ttlCleaner
	// bundle is the batch clock of a LatencyBundleFunction with an
	// allow_latency (bundle.go); nil otherwise.
	bundle *bundleClock
}

// SetBadRecordHandlers implements runtime.BadRecordAware.
func (o *KeyedOperator) SetBadRecordHandlers(h []runtime.BadRecordHandler) { o.bad = h }

// NewKeyedBroadcastOperator returns the operator of one subtask running fn;
// info names the subtask (its Backend is filled in at Open). restore is nil
// for a fresh start.
func NewKeyedBroadcastOperator(info OpenContext, open BackendOpener, restore *Restore, fn KeyedBroadcastProcessFunction, out *runtime.Output) *KeyedOperator {
	return &KeyedOperator{info: info, open: open, restore: restore, broadcast: fn, out: out}
}

// NewKeyedProcessOperator returns the operator of one subtask running fn.
func NewKeyedProcessOperator(info OpenContext, open BackendOpener, restore *Restore, fn KeyedProcessFunction, out *runtime.Output) *KeyedOperator {
	return &KeyedOperator{info: info, open: open, restore: restore, keyed: fn, out: out}
}

// NewKeyedCoProcessOperator returns the operator of one subtask of a
// two-input type running fn: logical input 0 is the first role, 1 the
// second, both keyed (Flink's KeyedCoProcessOperator).
func NewKeyedCoProcessOperator(info OpenContext, open BackendOpener, restore *Restore, fn KeyedCoProcessFunction, out *runtime.Output) *KeyedOperator {
	return &KeyedOperator{info: info, open: open, restore: restore, co: fn, out: out}
}

func (o *KeyedOperator) function() any {
	switch {
	case o.co != nil:
		return o.co
	case o.broadcast != nil:
		return o.broadcast
	case o.async != nil:
		return o.async
	}
	return o.keyed
}

// Open implements runtime.Operator: it opens (restoring) the state backend,
// the async execution controller of an async function, the function, its
// operator state and its broadcast state. When it fails after the backend
// opened it closes what it opened (the task calls Close only after a
// successful Open).
func (o *KeyedOperator) Open(ctx context.Context) (err error) {
	o.coll = collector{ctx: ctx, out: o.out}
	var r Restore
	if o.restore != nil {
		r = *o.restore
	}
	if o.async != nil && o.mailbox == nil {
		return fmt.Errorf("operators: %s[%d]: async state needs the task's mailbox", o.info.Operator, o.info.Subtask)
	}
	b, err := o.open(r.Keyed)
	if err != nil {
		return err
	}
	o.backend = b
	o.info.Backend = b
	defer func() {
		if err != nil {
			_ = o.Close()
			o.backend, o.aec = nil, nil
		}
	}()
	if err = o.newTimers(); err != nil {
		return err
	}
	o.cleaner = ttlCleaner{}
	state.NotifyCleanup(b, o.startCleanup)
	switch {
	case o.co != nil:
		err = o.co.Open(o.info)
	case o.broadcast != nil:
		err = o.broadcast.Open(o.info)
	case o.async != nil:
		if o.aec, err = state.NewAsyncExecutionController(b, o.mailbox, o.asyncOpts...); err != nil {
			return err
		}
		o.runAsync = o.runAsyncElement
		err = o.async.Open(AsyncOpenContext{OpenContext: o.info, AEC: o.aec})
	default:
		err = o.keyed.Open(o.info)
	}
	if err != nil {
		return err
	}
	o.openBundleClock(ctx)
	o.opStore = state.NewOperatorStateStore(r.Operator)
	if cf, ok := o.function().(CheckpointedFunction); ok {
		if err := cf.InitializeState(FunctionInitializationContext{OperatorStateStore: o.opStore, Backend: b}); err != nil {
			return err
		}
	}
	if bs, ok := o.function().(BroadcastStateful); ok && r.Broadcast != nil {
		if err := bs.RestoreBroadcastState(r.Broadcast); err != nil {
			return err
		}
	}
	return nil
}

// ProcessRecord implements runtime.Operator.
func (o *KeyedOperator) ProcessRecord(ctx context.Context, input int, rec runtime.Record) error {
	o.coll = collector{ctx: ctx, out: o.out}
	switch {
	case input == 0 && o.async != nil:
		var e *asyncElement
		if n := len(o.asyncFree); n > 0 {
			e = o.asyncFree[n-1]
			o.asyncFree = o.asyncFree[:n-1]
		} else {
			e = &asyncElement{}
		}
		e.ctx, e.rec = ctx, rec
		return o.aec.ProcessArg(ctx, rec.Key, o.runAsync, e)
	case o.co != nil && (input == 0 || input == 1):
		o.backend.SetCurrentKey(rec.Key)
		o.backend.SetRecordTimestamp(rec.Timestamp)
		if input == 0 {
			return o.co.ProcessElement1(ctx, rec, &o.coll)
		}
		return o.co.ProcessElement2(ctx, rec, &o.coll)
	case input == 0:
		o.backend.SetCurrentKey(rec.Key)
		o.backend.SetRecordTimestamp(rec.Timestamp)
		if o.broadcast != nil {
			return o.broadcast.ProcessElement(ctx, rec, &o.coll)
		}
		if o.bundle != nil {
			before := o.bundle.fn.BundleRecords()
			return o.bundleRecordDone(ctx, before, o.keyed.ProcessElement(ctx, rec, &o.coll))
		}
		return o.keyed.ProcessElement(ctx, rec, &o.coll)
	case input == 1 && o.broadcast != nil:
		if o.timers != nil {
			o.timers.noKey = true
			defer func() { o.timers.noKey = false }()
		}
		return o.broadcast.ProcessBroadcastElement(ctx, rec, &o.coll)
	}
	return fmt.Errorf("operators: %s[%d]: record on unknown input %d", o.info.Operator, o.info.Subtask, input)
}

// asyncElement is a record handed to the async execution controller, with
// the context of its ProcessRecord call; reused once the record's
// ProcessElement ran.
type asyncElement struct {
	ctx context.Context
	rec runtime.Record
}

// runAsyncElement is the code of a record of an async function (the
// controller's ProcessArg runs it with an *asyncElement, on the subtask
// goroutine): ProcessElement, and the bad-record handler for a
// *runtime.RecordError it returns.
func (o *KeyedOperator) runAsyncElement(arg any) error {
	e := arg.(*asyncElement)
	ctx, rec := e.ctx, e.rec
	*e = asyncElement{}
	o.asyncFree = append(o.asyncFree, e)
	err := o.async.ProcessElement(ctx, rec, &o.coll)
	var re *runtime.RecordError
	if errors.As(err, &re) && len(o.bad) > 0 && o.bad[0] != nil {
		return o.bad[0].HandleBadRecord(ctx, rec, re)
	}
	return err
}

// SnapshotState implements runtime.Snapshotter: on the subtask goroutine it
// ends a BundleFunction's batch (its rows precede the barrier), drains the
// async execution controller of an async function (the snapshot then
// holds the effects of exactly the records before the barrier), runs the
// function's SnapshotState, copies operator and broadcast state and
// freezes the keyed state (Pebble: flush and checkpoint; hashmap: an
// in-memory copy, see state.SnapshotKeyed); the returned finisher writes the
// keyed state's files under the barrier's task directory (and shared
// directory, when incremental) and describes everything as a
// checkpoint.TaskState.
func (o *KeyedOperator) SnapshotState(ctx context.Context, b *runtime.Barrier) (runtime.SnapshotFinisher, error) {
	if err := o.endBundle(ctx); err != nil {
		// The batch is gone (part of it folded and emitted, the rest
		// dropped): declining the checkpoint alone would let the task go
		// on and a later checkpoint commit state without the dropped
		// records. The task fails, as Flink's prepareSnapshotPreBarrier
		// failing fails it; it restores the last checkpoint, which holds
		// no batch. The task checks the mailbox before its next snapshot.
		if o.mailbox != nil {
			o.mailbox.Fail(err)
			o.mailbox.Execute(func() {}) // wakes the task loop, which then fails
		}
		return nil, err
	}
	if o.aec != nil {
		if err := o.aec.Drain(ctx); err != nil {
			return nil, err
		}
		if err := o.cleanupStep(); err != nil { // nothing in flight now
			return nil, err
		}
	}
	r := o.backend.KeyGroupRange()
	ts := checkpoint.TaskState{KeyGroups: &r}
	if cf, ok := o.function().(CheckpointedFunction); ok {
		if err := cf.SnapshotState(FunctionSnapshotContext{CheckpointID: b.CheckpointID, Timestamp: b.Timestamp}); err != nil {
			return nil, err
		}
	}
	if ops := o.opStore.Snapshot(); len(ops) > 0 {
		ts.Operator = ops
	}
	if bs, ok := o.function().(BroadcastStateful); ok {
		m, err := bs.SnapshotBroadcastState()
		if err != nil {
			return nil, err
		}
		ts.Broadcast = m
	}
	write, err := state.SnapshotKeyed(o.backend, state.SnapshotTarget{
		Dir: b.Dir, TaskPath: path.Join(o.info.Operator, strconv.Itoa(o.info.Subtask)), SharedDir: b.SharedDir, NoSync: b.Staging,
	})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (runtime.TaskSnapshot, error) {
		ks, err := write(ctx)
		if err != nil {
			return runtime.TaskSnapshot{}, err
		}
		ts.Keyed = ks.Handle
		raw, err := json.Marshal(ts)
		if err != nil {
			return runtime.TaskSnapshot{}, err
		}
		return runtime.TaskSnapshot{State: raw, Bytes: ks.Bytes + int64(len(raw)), SharedFiles: ks.SharedFiles}, nil
	}, nil
}

// EndInput implements runtime.Operator: it ends a BundleFunction's batch
// and drains the async execution controller of an async function (the
// synchronous functions have nothing else in flight).
func (o *KeyedOperator) EndInput(ctx context.Context) error {
	if err := o.endBundle(ctx); err != nil {
		return err
	}
	if o.aec == nil {
		return nil
	}
	return o.aec.Drain(ctx)
}

// Close implements runtime.Operator: it closes the async execution
// controller (stopping and waiting for its read workers), then the state
// backend.
func (o *KeyedOperator) Close() error {
	o.stopCleanup()
	o.bundle.stop()
	o.bundle = nil // a wake-up already posted finds no batch clock
	if o.timers != nil {
		o.timers.stop()
	}
	if o.aec != nil {
		_ = o.aec.Close() // always nil
	}
	if o.backend == nil {
		return nil
	}
	return o.backend.Close()
}

// finishBundle runs a BundleFunction's FinishBundle (nothing for other
// functions).
func (o *KeyedOperator) finishBundle(ctx context.Context) error {
	bf, ok := o.function().(BundleFunction)
	if !ok || o.backend == nil {
		return nil
	}
	o.coll = collector{ctx: ctx, out: o.out}
	if err := bf.FinishBundle(ctx, &o.coll); err != nil {
		return fmt.Errorf("operators: %s[%d]: mini-batch: %w", o.info.Operator, o.info.Subtask, err)
	}
	return nil
}

type collector struct {
	ctx context.Context
	out *runtime.Output
}

// CollectSide implements SideCollector.
func (c *collector) CollectSide(output string, rec runtime.Record) error {
	if c.out == nil {
		return nil
	}
	return c.out.EmitSide(c.ctx, output, rec)
}

// SideOutputRead implements SideOutputReader.
func (c *collector) SideOutputRead(output string) bool {
	return c.out != nil && c.out.HasSideWriters(output)
}

// LendsValues implements ValueLender: runtime.Output.LendsValues.
func (c *collector) LendsValues() bool {
	return c.out != nil && c.out.LendsValues()
}

func (c *collector) Collect(rec runtime.Record) error {
	if c.out == nil {
		return nil
	}
	return c.out.Emit(c.ctx, rec)
}
