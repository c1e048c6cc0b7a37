package connector

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/runtime"
)

// SourceFactory declares one source type (Flink's
// DynamicTableSourceFactory with its Source): its name, doc, params
// schema, how it plans and restores its splits, and its constructor.
//
// Splits are the source's unit of work and of checkpointed position (a
// Kafka partition and its offset, Flink's SourceSplit). The type owns
// their bytes: its subtasks write them into the operator list state
// SplitsState (even split, so a restore at another parallelism deals them
// out again) and Restore decodes them.
type SourceFactory struct {
	// Type is the name sources[].type uses: lowercase, snake_case.
	Type string
	// Doc is one line for the source reference.
	Doc string
	// Params returns a pointer to a new params struct holding the
	// defaults, decoded strictly from sources[].params as operator params
	// are. Nil: the type takes no params: mapping. (The kafka type's
	// settings are the source's own fields: topic, start_from, ...)
	Params func() any
	// Formats says the type decodes values with sources[].format.
	Formats bool
	// Chains says the type's subtasks host the operators chained to the
	// source (Flink's source chaining; graph.Graph.Chained): every task New
	// returns is a runtime.ChainHost. Without it the source hands its
	// records to the next operator's task through a channel.
	Chains bool
	// SplitsState names the operator list state the type's subtasks keep
	// their splits in (even split).
	SplitsState string
	// Prepare, if not nil, runs once per source at every (re)start before
	// any subtask is made (Kafka: discover the partitions of the topic,
	// retrying while the brokers cannot be reached, until ctx ends). What
	// it returns is SourceContext.Prepared and RestoreContext.Prepared.
	Prepare func(ctx context.Context, pc PrepareContext) (any, error)
	// Restore, if not nil, turns the restored split entries into each new
	// subtask's restore (SourceContext.Restored; one entry per subtask).
	// It is called at every start, with nil Shares when the checkpoint
	// does not hold the source. Nil: every subtask starts fresh (Restored
	// nil).
	Restore func(rc RestoreContext) ([]any, error)
	// New returns one subtask of the source.
	New func(ctx SourceContext) (runtime.SourceTask, error)
}

// PrepareContext is what SourceFactory.Prepare gets.
type PrepareContext struct {
	// Source is the planned source (its settings and decoded Params).
	Source *graph.Source
	// Resources are the job's shared resources.
	Resources *Resources
	// Logger is scoped to the source.
	Logger *slog.Logger
}

// RestoreContext is what SourceFactory.Restore gets.
type RestoreContext struct {
	// Source is the planned source; Prepared what Prepare returned.
	Source   *graph.Source
	Prepared any
	// Shares holds, per new subtask (len = Source.Parallelism), the
	// entries of SplitsState the even-split redistribution of the
	// checkpoint's subtask states gave it, as the old subtasks wrote them;
	// nil when the checkpoint does not hold the source (a fresh start).
	Shares [][][]byte
	// Resources are the job's shared resources.
	Resources *Resources
}

// SourceContext is what SourceFactory.New gets for one subtask.
type SourceContext struct {
	// Source is the planned source: name, parallelism, on_error,
	// watermarks, timestamp, decoded Params and format.
	Source *graph.Source
	// Subtask is the subtask index in [0, Parallelism).
	Subtask, Parallelism int
	// Prepared is what SourceFactory.Prepare returned (nil without one).
	Prepared any
	// Restored is this subtask's entry of what SourceFactory.Restore
	// returned; nil for a fresh start.
	Restored any
	// Format decodes each record's value (sources[].format); nil when
	// the type takes no format.
	Format Format
	// Output receives the records and watermarks.
	Output *runtime.Output
	// Responder receives checkpoint acknowledgements: the subtask's
	// snapshot holds SplitsState.
	Responder runtime.CheckpointResponder
	// OnCaughtUp, if not nil, is called once when the subtask read up to
	// where its input stood at start (a broadcast source's bootstrap).
	OnCaughtUp func()
	// BadRecords applies the source's on_error policy to a record Format
	// or a downstream key selector refuses.
	BadRecords runtime.BadRecordHandler
	// RecordsIn counts records read; Watermark exports the subtask's
	// watermark. Either may be nil.
	RecordsIn prometheus.Counter
	Watermark *runtime.WatermarkGauge
	// Resources are the job's shared resources.
	Resources *Resources
	// Logger is scoped to the source.
	Logger *slog.Logger
}
