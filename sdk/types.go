package sdk

import (
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/runtime"
)

// The names an operator author needs, so that one import of sdk (plus
// package state for keyed state) mostly suffices. Each is an alias of the
// type in the package that defines it: a value of one is a value of the
// other, and that package's documentation is the reference.

// Operator types and their registration (operators.Factory and friends).
type (
	// Factory declares one operator type: its name (operators[].type), a
	// one-line doc, its Traits, its params schema (Params returns a pointer
	// to a params struct holding the defaults, decoded strictly from the
	// operator's params: mapping by its yaml tags) and its constructor New.
	// Register it with (*Registry).Register (operators.Factory).
	Factory = operators.Factory
	// Traits say whether a type is keyed (needs key_by, gets keyed state),
	// takes a broadcast input, has an async state version, or reads two
	// keyed inputs by role (Inputs: a pipeline then lists inputs:
	// {<role>: {from, key_by}}) (operators.Traits).
	Traits = operators.Traits
	// FactoryContext is what Factory.New gets for one subtask: operator
	// name, subtask index and parallelism, the decoded params, whether
	// async_state is on, and a scoped logger (operators.FactoryContext).
	FactoryContext = operators.FactoryContext
	// ParamsChecker is implemented by a params struct with rules beyond
	// types; each problem it reports is a config error at the field's
	// FILE:LINE:COL (operators.ParamsChecker).
	ParamsChecker = operators.ParamsChecker
)

// The function interfaces Factory.New returns one of, and what they see.
type (
	// ProcessFunction processes a stream that is not keyed, record by
	// record (Flink's ProcessFunction; operators.ProcessFunction).
	ProcessFunction = operators.ProcessFunction
	// KeyedProcessFunction processes a keyed stream with keyed state
	// (Flink's KeyedProcessFunction; operators.KeyedProcessFunction).
	KeyedProcessFunction = operators.KeyedProcessFunction
	// KeyedBroadcastProcessFunction processes a keyed stream together with
	// a broadcast stream (Flink's KeyedBroadcastProcessFunction;
	// operators.KeyedBroadcastProcessFunction).
	KeyedBroadcastProcessFunction = operators.KeyedBroadcastProcessFunction
	// KeyedCoProcessFunction processes two keyed streams connected by key
	// (Flink's KeyedCoProcessFunction): the function of a type whose
	// Traits.Inputs names two roles; ProcessElement1 gets the first role's
	// records, ProcessElement2 the second's, both with their key current in
	// the shared keyed state and timers (operators.KeyedCoProcessFunction).
	KeyedCoProcessFunction = operators.KeyedCoProcessFunction
	// AsyncKeyedProcessFunction processes a keyed stream through async
	// state, chaining state futures (Flink's State V2;
	// operators.AsyncKeyedProcessFunction).
	AsyncKeyedProcessFunction = operators.AsyncKeyedProcessFunction
	// OpenContext is what a function sees when it opens: its subtask and
	// the keyed state backend (nil for a ProcessFunction) it gets its state
	// from (operators.OpenContext).
	OpenContext = operators.OpenContext
	// AsyncOpenContext is OpenContext plus the subtask's
	// AsyncExecutionController, from which an AsyncKeyedProcessFunction
	// gets async state handles (operators.AsyncOpenContext).
	AsyncOpenContext = operators.AsyncOpenContext
	// Collector emits records downstream; Collect blocks under back
	// pressure (Flink's Collector; operators.Collector).
	Collector = operators.Collector
	// CheckpointedFunction is implemented by a function with operator
	// (non-keyed) state (Flink's CheckpointedFunction;
	// operators.CheckpointedFunction).
	CheckpointedFunction = operators.CheckpointedFunction
	// FunctionInitializationContext is what
	// CheckpointedFunction.InitializeState sees: the operator state store,
	// restored after a restore (operators.FunctionInitializationContext).
	FunctionInitializationContext = operators.FunctionInitializationContext
	// FunctionSnapshotContext is what CheckpointedFunction.SnapshotState
	// sees: the checkpoint id and when it was triggered
	// (operators.FunctionSnapshotContext).
	FunctionSnapshotContext = operators.FunctionSnapshotContext
	// BroadcastStateful is implemented by a KeyedBroadcastProcessFunction
	// whose broadcast state is checkpointed (operators.BroadcastStateful).
	BroadcastStateful = operators.BroadcastStateful
	// TimerService registers and deletes the current key's event- and
	// processing-time timers (Flink's TimerService); a function
	// implementing TimerFunction finds it with OpenContext.TimerService()
	// (operators.TimerService).
	TimerService = operators.TimerService
	// TimerFunction is the optional OnTimer(ctx, timestamp, TimerContext,
	// out) of a keyed function with timers (operators.TimerFunction).
	TimerFunction = operators.TimerFunction
	// TimerContext holds the key and time domain of a firing timer
	// (operators.TimerContext).
	TimerContext = operators.TimerContext
	// TimeDomain is EventTime or ProcessingTime (operators.TimeDomain).
	TimeDomain = operators.TimeDomain
)

// The time domains of timers, and the error of a timer registered on the
// broadcast side.
const (
	EventTime      = operators.EventTime
	ProcessingTime = operators.ProcessingTime
)

// ErrNoTimerKey is returned by TimerService calls from
// ProcessBroadcastElement, where no key is current (operators.ErrNoTimerKey).
var ErrNoTimerKey = operators.ErrNoTimerKey

// Records and bad records.
type (
	// Record is one stream element: Key (the serialized key on a keyed
	// stream: the key_by value's characters for a JSON string, its JSON
	// text for a number), Value (JSON for json-format sources), Timestamp
	// (event time) and Headers (runtime.Record).
	Record = runtime.Record
	// Header is one Kafka record header (runtime.Header).
	Header = runtime.Header
	// RecordError is what a function returns (wrapped or not) for a record
	// it cannot process because of its content: the record then meets its
	// source's on_error policy (fail, skip counted in
	// kstreamd_source_records_skipped_total{reason}, or dead-letter with a
	// kstreamd.error header "<reason>: <detail>") and the next record
	// follows. Any other error fails the job (runtime.RecordError).
	RecordError = runtime.RecordError
)

// Bad-record reasons for RecordError.Reason a custom operator uses; the
// others are in runtime.Reasons. Reason is the bounded value of a metric
// label: put what varies in Detail.
const (
	// ReasonInvalid: the record's content is refused by the operator (a
	// field missing or of the wrong type).
	ReasonInvalid = runtime.ReasonInvalid
	// ReasonEvalError: an expression failed on the record at run time.
	ReasonEvalError = runtime.ReasonEvalError
	// ReasonMalformedJSON: a value that should be JSON is not.
	ReasonMalformedJSON = runtime.ReasonMalformedJSON
	// ReasonNotObject: a JSON object was expected.
	ReasonNotObject = runtime.ReasonNotObject
)

// Changelogs: what an operator type declares about them and what a record
// carries (see the README's Changelogs section).
type (
	// ChangelogTraits say whether a type accepts a changelog input
	// (retracting -U and -D records, or passing the kind through) and
	// whether it emits one; Traits.Changelog holds them
	// (operators.ChangelogTraits).
	ChangelogTraits = operators.ChangelogTraits
	// ChangeKind is a record's change kind, Record.Change: insert (the
	// zero value), update-before, update-after or delete (Flink's RowKind;
	// runtime.ChangeKind).
	ChangeKind = runtime.ChangeKind
)

// The change kinds (runtime.ChangeInsert and friends).
const (
	ChangeInsert       = runtime.ChangeInsert
	ChangeUpdateBefore = runtime.ChangeUpdateBefore
	ChangeUpdateAfter  = runtime.ChangeUpdateAfter
	ChangeDelete       = runtime.ChangeDelete
)
