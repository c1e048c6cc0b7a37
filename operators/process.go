package operators

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unsafe"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// ProcessFunction processes a stream that is not keyed, record by record
// (Flink's ProcessFunction): filter, map, flat_map. It has no keyed state;
// it may keep operator state by also implementing CheckpointedFunction.
// Every method runs on the subtask goroutine. ProcessElement returns a
// *runtime.RecordError (wrapped or not) for a record it cannot process
// because of its content: that record meets its source's on_error policy
// and the next record follows; any other error fails the task.
type ProcessFunction interface {
	// Open prepares the function before the first record; ctx.Backend is
	// nil.
	Open(ctx OpenContext) error
	// ProcessElement handles one record.
	ProcessElement(ctx context.Context, rec runtime.Record, out Collector) error
}

// ProcessOperator drives a ProcessFunction (or a BroadcastProcessFunction,
// whose logical input 1 is the broadcast input) on one subtask; it implements
// runtime.Operator and runtime.Snapshotter (operator state only).
type ProcessOperator struct {
	info    OpenContext
	restore *Restore
	fn      ProcessFunction
	out     *runtime.Output
	opStore *state.OperatorStateStore
	coll    collector
	// snap is the last snapshot's encoded TaskState when it held no
	// operator state, and snapBroadcast the broadcast states it encoded
	// (the function's returned map): while the function returns the same
	// bytes for every state (GlobalTableJoin's unchanged table), the next
	// snapshot returns snap as is instead of marshalling (and so
	// re-compacting) the broadcast JSON again. nil when stale: a record on
	// the broadcast input and a restore drop it.
	snap          []byte
	snapBroadcast map[string]json.RawMessage
}

// NewProcessOperator returns the operator of one subtask running fn;
// restore is nil for a fresh start.
func NewProcessOperator(info OpenContext, restore *Restore, fn ProcessFunction, out *runtime.Output) *ProcessOperator {
	return &ProcessOperator{info: info, restore: restore, fn: fn, out: out}
}

// Open implements runtime.Operator: it opens the function, then hands a
// CheckpointedFunction its (restored) operator state.
func (o *ProcessOperator) Open(ctx context.Context) error {
	o.coll = collector{ctx: ctx, out: o.out}
	if err := o.fn.Open(o.info); err != nil {
		return err
	}
	var r Restore
	if o.restore != nil {
		r = *o.restore
	}
	o.opStore = state.NewOperatorStateStore(r.Operator)
	if cf, ok := o.fn.(CheckpointedFunction); ok {
		if err := cf.InitializeState(FunctionInitializationContext{OperatorStateStore: o.opStore}); err != nil {
			return err
		}
	}
	if bs, ok := o.fn.(BroadcastStateful); ok && r.Broadcast != nil {
		o.dropSnapshot()
		return bs.RestoreBroadcastState(r.Broadcast)
	}
	return nil
}

// ProcessRecord implements runtime.Operator.
func (o *ProcessOperator) ProcessRecord(ctx context.Context, input int, rec runtime.Record) error {
	if bf, ok := o.fn.(BroadcastProcessFunction); ok && input == 1 {
		o.dropSnapshot()
		o.coll.ctx = ctx
		return bf.ProcessBroadcastElement(ctx, rec, &o.coll)
	}
	if input != 0 {
		return fmt.Errorf("operators: %s[%d]: record on unknown input %d", o.info.Operator, o.info.Subtask, input)
	}
	o.coll.ctx = ctx
	return o.fn.ProcessElement(ctx, rec, &o.coll)
}

// SnapshotState implements runtime.Snapshotter: the function's
// SnapshotState, then a copy of the operator state and the broadcast
// states, as a JSON checkpoint.TaskState. When there is no operator state
// and the function returned the very bytes of the last snapshot for every
// broadcast state (BroadcastStateful's contract: returned bytes are never
// changed afterwards), it returns the last snapshot's bytes again, which
// are those json.Marshal would give.
func (o *ProcessOperator) SnapshotState(_ context.Context, b *runtime.Barrier) (runtime.SnapshotFinisher, error) {
	if cf, ok := o.fn.(CheckpointedFunction); ok {
		if err := cf.SnapshotState(FunctionSnapshotContext{CheckpointID: b.CheckpointID, Timestamp: b.Timestamp}); err != nil {
			return nil, err
		}
	}
	var ts checkpoint.TaskState
	if ops := o.opStore.Snapshot(); len(ops) > 0 {
		ts.Operator = ops
	}
	if bs, ok := o.fn.(BroadcastStateful); ok {
		m, err := bs.SnapshotBroadcastState()
		if err != nil {
			return nil, err
		}
		ts.Broadcast = m
	}
	if ts.Operator == nil && o.snap != nil && sameBroadcast(o.snapBroadcast, ts.Broadcast) {
		raw := o.snap
		return func(context.Context) (runtime.TaskSnapshot, error) {
			return runtime.TaskSnapshot{State: raw, Bytes: int64(len(raw))}, nil
		}, nil
	}
	raw, err := json.Marshal(ts)
	if err != nil {
		return nil, err
	}
	o.dropSnapshot()
	if ts.Operator == nil && len(ts.Broadcast) > 0 {
		o.snap, o.snapBroadcast = raw, ts.Broadcast
	}
	return func(context.Context) (runtime.TaskSnapshot, error) {
		return runtime.TaskSnapshot{State: raw, Bytes: int64(len(raw))}, nil
	}, nil
}

// dropSnapshot forgets the cached snapshot (see ProcessOperator.snap).
func (o *ProcessOperator) dropSnapshot() { o.snap, o.snapBroadcast = nil, nil }

// sameBroadcast reports whether b holds, by name, the very byte slices of a
// (same start and length), so that their encodings are the same.
func sameBroadcast(a, b map[string]json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for name, x := range a {
		y, ok := b[name]
		if !ok || len(x) != len(y) || unsafe.SliceData(x) != unsafe.SliceData(y) {
			return false
		}
	}
	return true
}

// BroadcastWatermarks implements runtime.BroadcastWatermarkHandler: true
// when the function is a BroadcastWatermarkFunction that wants them.
func (o *ProcessOperator) BroadcastWatermarks() bool {
	f, ok := o.fn.(BroadcastWatermarkFunction)
	return ok && f.BroadcastWatermarks()
}

// ProcessBroadcastWatermark implements runtime.BroadcastWatermarkHandler.
func (o *ProcessOperator) ProcessBroadcastWatermark(ctx context.Context, wm time.Time) error {
	f, ok := o.fn.(BroadcastWatermarkFunction)
	if !ok {
		return nil
	}
	o.coll.ctx = ctx
	return f.ProcessBroadcastWatermark(ctx, wm, &o.coll)
}

// EndInput implements runtime.Operator.
func (o *ProcessOperator) EndInput(context.Context) error { return nil }

// Close implements runtime.Operator.
func (o *ProcessOperator) Close() error { return nil }
