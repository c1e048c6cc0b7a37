package operators

import (
	"context"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// Collector emits records downstream (Flink's Collector). Collect blocks
// while downstream is back-pressured and fails only when the job is being
// cancelled.
type Collector interface {
	Collect(rec runtime.Record) error
}

// ValueLender is implemented by the Collector a function gets: LendsValues
// reports whether the function may write the Value of a record it
// collected again once Collect returned (everything downstream copies it;
// see runtime.Output.LendsValues), so one buffer serves every output
// instead of a new one each. Ask during processing (the first record),
// not in Open; the answer holds for the run. Not for CollectSide.
type ValueLender interface {
	LendsValues() bool
}

// SideCollector is implemented by the Collector a function gets: it emits
// to one of the type's side outputs (Factory.SideOutputs; Flink's
// ctx.output(outputTag, value)). A side output no vertex reads drops the
// record; SideOutputReader tells whether one does.
type SideCollector interface {
	CollectSide(output string, rec runtime.Record) error
}

// OpenContext is what a function sees when it opens: its subtask and the
// keyed state backend it registers its state with.
type OpenContext struct {
	// Operator is the operator's configured name.
	Operator string
	// Subtask is the subtask index in [0, Parallelism).
	Subtask int
	// Parallelism is the operator's parallelism.
	Parallelism int
	// Backend is the subtask's keyed state backend; state handles obtained
	// from it act on the current key.
	Backend state.KeyedStateBackend
	// Timers is the subtask's timer service when the function implements
	// TimerFunction (synchronous keyed functions only); nil otherwise.
	Timers TimerService
}

// TimerService returns ctx.Timers (Flink's ctx.timerService()).
func (c OpenContext) TimerService() TimerService { return c.Timers }

// KeyedBroadcastProcessFunction processes a keyed stream together with a
// broadcast stream (Flink's KeyedBroadcastProcessFunction). The function owns
// its broadcast state: ProcessBroadcastElement may change it, ProcessElement
// must only read it (through broadcast.ReadOnlyState). Every method runs on
// the subtask goroutine.
type KeyedBroadcastProcessFunction interface {
	// Open registers keyed and broadcast state before the first record.
	Open(ctx OpenContext) error
	// ProcessElement handles a record of the keyed input; the backend's
	// current key is rec.Key.
	ProcessElement(ctx context.Context, rec runtime.Record, out Collector) error
	// ProcessBroadcastElement handles a record of the broadcast input; no
	// key is current.
	ProcessBroadcastElement(ctx context.Context, rec runtime.Record, out Collector) error
}

// KeyedProcessFunction processes a keyed stream (Flink's
// KeyedProcessFunction). Every method runs on the subtask goroutine.
type KeyedProcessFunction interface {
	// Open registers keyed state before the first record.
	Open(ctx OpenContext) error
	// ProcessElement handles one record; the backend's current key is rec.Key.
	ProcessElement(ctx context.Context, rec runtime.Record, out Collector) error
}

// BundleFunction is implemented by a keyed function that buffers records
// in memory across ProcessElement calls (the aggregate's mini_batch;
// Flink's mini-batch bundle operators, AbstractMapBundleOperator, whose
// finishBundle runs on a size trigger, in prepareSnapshotPreBarrier, before
// a watermark and at the end of input). FinishBundle processes and emits
// everything buffered, making whatever keys it needs current; afterwards
// nothing is buffered. The KeyedOperator calls it on the subtask goroutine
// before it snapshots for a checkpoint barrier (so the buffer is never
// part of a checkpoint and the rows precede the barrier), before it
// handles a watermark (the rows precede the watermark), and at end of
// input. Not for async functions.
type BundleFunction interface {
	FinishBundle(ctx context.Context, out Collector) error
}

// LatencyBundleFunction is implemented by a BundleFunction whose batch
// also ends on processing time and which holds watermarks to the end of
// its batch (the aggregate's mini_batch with allow_latency; Flink's
// table.exec.mini-batch.allow-latency, whose MiniBatchAssigner forwards
// watermarks only at mini-batch boundaries). When AllowLatency (asked once,
// at Open) is above 0 the KeyedOperator ends a batch once its first record
// is that old by the wall clock (a wake-up posted to the task's mailbox,
// so also while no record arrives), and a watermark arriving while
// BundleRecords is above 0 is held (runtime.ErrWatermarkHeld: no timers
// fire, the TTL clock stays, nothing is forwarded) until the batch ends,
// at size, at allow_latency, before a checkpoint barrier's snapshot,
// before an idle status and at end of input; then the latest held
// watermark is handled and forwarded after the batch's rows.
type LatencyBundleFunction interface {
	BundleFunction
	// AllowLatency is the longest a batch's first record waits; 0: no
	// processing-time bound, and every watermark ends the batch.
	AllowLatency() time.Duration
	// BundleRecords returns the records buffered (0: no batch is open).
	BundleRecords() int
}

// BroadcastProcessFunction processes a stream that is not keyed together
// with a broadcast stream (Flink's BroadcastProcessFunction): the routing
// stage of a dynamically keyed type (Factory.Router). It has no keyed state;
// its broadcast state is checkpointed when it implements BroadcastStateful.
// Every method runs on the subtask goroutine.
type BroadcastProcessFunction interface {
	ProcessFunction
	// ProcessBroadcastElement handles a record of the broadcast input.
	ProcessBroadcastElement(ctx context.Context, rec runtime.Record, out Collector) error
}

// BroadcastWatermarkFunction is implemented by a BroadcastProcessFunction
// that acts on its broadcast input's event time (the rules routing stage
// with rule_time: event). When BroadcastWatermarks returns true (asked once,
// before Open), ProcessBroadcastWatermark runs on the subtask goroutine each
// time the broadcast input's watermark changes: runtime.MaxWatermark while
// every broadcast channel is idle or finished, back to the last watermark
// when one is active again. What it collects precedes the watermark the
// task forwards, the minimum of both inputs' (runtime.BroadcastWatermarkHandler).
type BroadcastWatermarkFunction interface {
	BroadcastWatermarks() bool
	ProcessBroadcastWatermark(ctx context.Context, wm time.Time, out Collector) error
}

// KeyedCoProcessFunction processes two keyed streams connected by key
// (Flink's KeyedCoProcessFunction): a type with two input roles
// (Traits.Inputs) runs one. Records of both inputs are hashed by key group
// with their own key_by, so records of equal keys of either input reach the
// same subtask and share its keyed state; the subtask's watermark is the
// minimum of both inputs', checkpoint barriers align over both. A function
// that also implements TimerFunction gets timers (OnTimer, with the
// timer's key current). Every method runs on the subtask goroutine; an
// error that is a *runtime.RecordError makes the record meet the on_error
// policy of its own input's source.
type KeyedCoProcessFunction interface {
	// Open registers keyed state (and finds its timer service) before the
	// first record.
	Open(ctx OpenContext) error
	// ProcessElement1 handles a record of the first role (logical input
	// 0); the backend's current key is rec.Key.
	ProcessElement1(ctx context.Context, rec runtime.Record, out Collector) error
	// ProcessElement2 handles a record of the second role (logical input
	// 1); the backend's current key is rec.Key.
	ProcessElement2(ctx context.Context, rec runtime.Record, out Collector) error
}
