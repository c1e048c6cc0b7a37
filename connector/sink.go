package connector

import (
	"context"
	"log/slog"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// SinkFactory declares one sink type (Flink's DynamicTableSinkFactory with
// its Sink): its name, doc, params schema, the deliveries it supports, how
// it recovers its committables, and its constructor.
type SinkFactory struct {
	// Type is the name sinks[].type uses: lowercase, snake_case.
	Type string
	// Doc is one line for the sink reference.
	Doc string
	// Params returns a pointer to a new params struct holding the
	// defaults, decoded strictly from sinks[].params as operator params
	// are. Nil: the type takes no params: mapping. (The kafka type's
	// settings are the sink's own fields: topic, pool_size, ...)
	Params func() any
	// Deliveries are the sinks[].delivery values the type supports;
	// graph.DefaultDelivery must be among them for a sink that names none.
	Deliveries []graph.Delivery
	// Formats says the type encodes values with sinks[].format.
	Formats bool
	// Fields are the sink-level settings among KafkaSinkFields the type
	// reads (the kafka type: all of them; a custom type that names its
	// output after a topic: "topic"). A sink of the type that sets one
	// it does not read is refused at validation, at the field's
	// FILE:LINE:COL, instead of the setting being silently ignored.
	// Nil: none (settings go in params).
	Fields []string
	// Recover, if not nil, runs before any subtask of an exactly-once
	// sink starts (Flink's Committer at restore): it commits (or
	// publishes, or discards) what the restored checkpoint pre-committed,
	// exactly as the checkpoint says, and aborts what a previous run left
	// open. It runs at every start, with no committables for a fresh one.
	// Required for a type supporting exactly-once.
	Recover func(ctx context.Context, rc RecoverContext) error
	// New returns one subtask of the sink: a runtime.Operator, which for
	// exactly-once is usually a TwoPhaseCommitSink (or implements
	// runtime.Snapshotter and runtime.CheckpointListener itself, keeping
	// its committables with CommittablesTaskState).
	New func(ctx SinkContext) (runtime.Operator, error)
}

// KafkaSinkFields are the sink-level settings (sinks[] keys besides name,
// type, input, params, format, format_params, delivery and parallelism)
// that belong to the kafka sink type: SinkFactory.Fields chooses among
// them.
func KafkaSinkFields() []string {
	return []string{"topic", "transactional_id_prefix", "transaction_timeout", "pool_size", "ignore_lost_transactions", "buffer_threshold", "changelog"}
}

// Reads reports whether the type reads the sink-level setting field (one
// of KafkaSinkFields).
func (f *SinkFactory) Reads(field string) bool { return slices.Contains(f.Fields, field) }

// Supports reports whether the type supports delivery d ("" is
// graph.DefaultDelivery).
func (f *SinkFactory) Supports(d graph.Delivery) bool {
	if d == "" {
		d = graph.DefaultDelivery
	}
	return slices.Contains(f.Deliveries, d)
}

// RecoverContext is what SinkFactory.Recover gets.
type RecoverContext struct {
	// Job is the job's name (graph.Graph.Job).
	Job string
	// Sink is the planned sink (its settings and decoded Params).
	Sink *graph.Sink
	// UID is the sink's uid (graph.Graph.UID: its name unless it sets
	// one): what names the sink's resources outside the job that must
	// outlive a rename (transaction ids), as the checkpoint keys its state
	// by it. "" means the name.
	UID string
	// Committables are the bytes of every committable the restored
	// checkpoint holds for the sink, from every old subtask, in subtask
	// order (EncodeCommittable's data; for a checkpoint of metadata
	// version 1 or 2, a Kafka committable's JSON); nil for a fresh start.
	// An entry may be nil: an empty epoch's (TwoPhaseCommitSink), to skip.
	Committables [][]byte
	// OldParallelism is the sink's parallelism in the checkpoint (0 for a
	// fresh start); Parallelism its parallelism now.
	OldParallelism, Parallelism int
	// Resources are the job's shared resources.
	Resources *Resources
	// Logger is scoped to the sink.
	Logger *slog.Logger
}

// SinkContext is what SinkFactory.New gets for one subtask.
type SinkContext struct {
	// Job is the job's name (graph.Graph.Job).
	Job string
	// Sink is the planned sink: name, parallelism, delivery, decoded
	// Params and format.
	Sink *graph.Sink
	// UID is the sink's uid, as RecoverContext.UID.
	UID string
	// Subtask is the subtask index in [0, Parallelism).
	Subtask, Parallelism int
	// Format encodes each record before it is written (sinks[].format);
	// nil when the sink names none (values are written as they are) or
	// the type takes no format. The type applies it (a
	// TwoPhaseCommitSink: WithFormat).
	Format Format
	// Restored is this subtask's share of the sink's operator list states
	// in the restored checkpoint (redistributed), other than its
	// committables (which Recover got); nil for a fresh start.
	Restored map[string]state.OperatorListSnapshot
	// RecordsOut counts records written; may be nil.
	RecordsOut prometheus.Counter
	// Resources are the job's shared resources.
	Resources *Resources
	// Logger is scoped to the sink.
	Logger *slog.Logger
}
