package operators

import (
	"fmt"
	"log/slog"
	"regexp"
	"slices"
)

// Traits say how an operator type sits in a job graph; the planner checks a
// pipeline against them.
type Traits struct {
	// Keyed types run on a keyed stream: the operator needs key_by, gets a
	// keyed state backend, and its function is a KeyedProcessFunction,
	// KeyedBroadcastProcessFunction or AsyncKeyedProcessFunction. A type
	// that is not keyed runs a ProcessFunction; it may still take key_by,
	// which then only routes (re-keys) its input.
	Keyed bool
	// Broadcast types read a second, broadcast input (every subtask gets
	// every record of it) and require one. A keyed broadcast type runs a
	// KeyedBroadcastProcessFunction, one that is not keyed a
	// BroadcastProcessFunction (Flink's broadcast on a non-keyed stream).
	Broadcast bool
	// BroadcastTable broadcast types need their broadcast input to be a
	// table source (sources[].table: true): a changelog of upserts and
	// deletes by key (global_table_join).
	BroadcastTable bool
	// AsyncState types have an asynchronous state version (async_state:
	// true): New then returns an AsyncKeyedProcessFunction.
	AsyncState bool
	// Changelog says how the type treats changelog streams (records whose
	// runtime.Record.Change is not only ChangeInsert, Flink's RowKind): the
	// planner refuses a changelog input into a type that does not accept
	// one, and derives whether each stream of a job is a changelog.
	Changelog ChangelogTraits
	// Inputs, when set, names the input roles of a two-input keyed type
	// (Flink's TwoInputStreamOperator / KeyedCoProcessFunction), such as
	// ["left", "right"]: the operator lists its inputs by role under
	// inputs: (each with its own key_by) instead of input and key_by, both
	// are hashed by key group, and logical input i carries the records of
	// role Inputs[i] (ProcessElement1 for the first, ProcessElement2 for
	// the second). New then returns a KeyedCoProcessFunction. Two
	// distinct non-empty roles; only for a keyed type without broadcast,
	// async state or router. The zero value: one input. (An array keeps
	// Traits comparable.)
	Inputs [2]string
	// EventTime types act on the event time of every input (joins on
	// record timestamps): the planner refuses an input whose records carry
	// processing time (ProcessingTimeOutput).
	EventTime bool
}

// TwoInput reports whether the type reads two inputs (Inputs is set).
func (t Traits) TwoInput() bool { return t.Inputs != [2]string{} }

// Roles returns the input roles of a two-input type in order, nil for a
// one-input type.
func (t Traits) Roles() []string {
	if !t.TwoInput() {
		return nil
	}
	return t.Inputs[:]
}

// ChangelogTraits say whether an operator type accepts and produces
// changelogs (Flink's ChangelogMode of a physical node: what it consumes
// and what it emits). The zero value is an append-only type: its input
// must be append-only (every record an insert), and so is its output.
type ChangelogTraits struct {
	// Accepts: the type's main input may be a changelog; the function
	// honours each record's Change (it retracts on -U and -D, as
	// aggregate does, or carries the kind through, as filter does).
	Accepts bool
	// Produces: the type's output is a changelog whatever its input (an
	// aggregate's running result: +I, then -U old and +U new per update).
	Produces bool
	// Forwards: the output is a changelog when the main input is one: the
	// type carries each input record's Change to the records it emits for
	// it (Flink's Calc: a filter passes -U and +U through, a map maps the
	// old and the new value alike). Implies Accepts, and Upsert: an upsert
	// changelog in is an upsert changelog out.
	Forwards bool
	// Upsert: the type's main input may also be an upsert changelog (a
	// table source, sources[].table: +U per upsert without the -U of the
	// row it replaces, -D per tombstone; Flink's ChangelogMode.upsert()),
	// which it materializes by key (changelog_normalize). Without it an
	// Accepts type needs a full changelog (every update a -U then a +U),
	// as a retracting aggregate does: the planner refuses an upsert input
	// and points to changelog_normalize.
	Upsert bool
	// UpdateAfterOnly: the type can emit its changelog without -U (Flink's
	// ChangelogMode with UpdateKind ONLY_UPDATE_AFTER: +I, +U and -D
	// only) when the planner finds that nothing reads the -U rows
	// (FactoryContext.UpdateAfterOnly), as an aggregate can: every
	// consumer of its output is an upsert sink, directly or through
	// operators that only forward the changelog (filter, map, flat_map).
	UpdateAfterOnly bool
	// Tables says, per role of a two-input type (Traits.Inputs), whether
	// that input is read as a table: it must then be a changelog (a table
	// source, upsert or full, which the type materializes by key, as
	// table_join's right input), and a role not marked must be
	// append-only. The zero value: both inputs append-only (interval_join,
	// window_join). (An array keeps Traits comparable.)
	Tables [2]bool
}

// AcceptsChangelog reports whether the type's main input may be a
// changelog (Accepts or Forwards).
func (t Traits) AcceptsChangelog() bool { return t.Changelog.Accepts || t.Changelog.Forwards }

// AcceptsUpsert reports whether the type's main input may be an upsert
// changelog (ChangelogTraits.Upsert or Forwards).
func (t Traits) AcceptsUpsert() bool { return t.Changelog.Upsert || t.Changelog.Forwards }

// ProducesChangelog reports whether the type's output is a changelog when
// its main input is one (in) or not.
func (t Traits) ProducesChangelog(in bool) bool {
	return t.Changelog.Produces || (in && t.Changelog.Forwards)
}

// ChangelogOutputParams is implemented by a params struct whose operator
// emits a changelog or not depending on its params (dedup: keep last
// does, keep first does not); the planner then asks it instead of
// Traits.Changelog.Produces, which says the type may.
type ChangelogOutputParams interface {
	ProducesChangelog() bool
}

// UpsertRolesParams is implemented by the params struct of a two-input
// type that accepts changelogs (join): UpsertRoles names the roles whose
// input it reads as an upsert stream keyed by the join key (one row per
// key, each +U replacing it), which the planner then lets read an upsert
// changelog such as a table source.
type UpsertRolesParams interface {
	UpsertRoles() []string
}

// ChangelogInputChecker is implemented by a params struct whose operator,
// as configured, cannot take every changelog input its type accepts (the
// aggregate functions first and last cannot retract): the planner calls
// CheckChangelogInput when the operator's main input is a changelog, and
// each report (a field path relative to params, as for ParamsChecker, and
// a lowercase message) refuses the config.
type ChangelogInputChecker interface {
	CheckChangelogInput(report func(field, msg string))
}

// AsyncStateChecker is implemented by a params struct some of whose
// settings the type's async state version does not support (the
// aggregate's mini_batch): the validator calls CheckAsyncState when the
// operator sets async_state: true, and each report (a field path relative
// to params, as for ParamsChecker, and a lowercase message) refuses the
// config.
type AsyncStateChecker interface {
	CheckAsyncState(report func(field, msg string))
}

// Factory declares one operator type (an entry of the operator registry,
// after benthos' ConfigSpec and Environment): its name, its one-line doc,
// its traits, its params schema and its constructor. Params are decoded
// strictly from the operator's params: mapping by the pipeline (unknown
// fields, wrong types and bad values are config errors with FILE:LINE:COL).
type Factory struct {
	// Type is the name operators[].type uses: lowercase, snake_case.
	Type string
	// Doc is one line for the operator reference.
	Doc string
	// Traits place the type in the graph.
	Traits Traits
	// Params returns a pointer to a new params struct holding the defaults;
	// its fields are decoded from params: by their yaml tags (strings,
	// numbers, booleans, durations, lists, maps with string keys, nested
	// structs, and any type implementing encoding.TextUnmarshaler, such as
	// Expression).
	// When the struct implements ParamsChecker its CheckParams reports
	// every further problem. Nil: the type takes no params (a params:
	// mapping is refused).
	Params func() any
	// State names the state the type declares (documentation: keyed state
	// ids derive from these names, so they must stay stable across
	// versions for restores to find their state).
	State []string
	// SideOutputs are the names of the type's side outputs (Flink's
	// OutputTag): another operator or a sink reads side output s of
	// operator op with input: op.s. Records the function passes to
	// SideCollector.CollectSide(s, rec) go there.
	SideOutputs []string
	// CheckBroadcast, if not nil, validates each record of the broadcast
	// input at its source (a rule that does not decode meets the source's
	// on_error policy with reason invalid and never reaches state).
	CheckBroadcast func(key, value []byte) error
	// NewCheckBroadcast, if not nil, is CheckBroadcast for an operator's
	// decoded params (limits a param sets); the planner prefers it. When
	// several operators read one broadcast source, the first planned sets
	// the check.
	NewCheckBroadcast func(params any) func(key, value []byte) error
	// Router, if not nil, keys the type's input dynamically (Flink's
	// dynamic fraud-detection pattern, "dynamic partitioning"): the
	// planner expands the operator into two vertices, a routing stage
	// "<operator>.route" running Router's function (a
	// BroadcastProcessFunction: not keyed, same broadcast input) at its
	// input's parallelism, and the operator itself, which reads the
	// routing stage's output over a key-group hash edge keyed by each
	// record's key (the key the routing stage set). Such a type takes no
	// key_by. Router's own Router must be nil.
	Router *Factory
	// New returns the function of one subtask: a ProcessFunction for a type
	// that is not keyed; for a keyed type a KeyedProcessFunction or, with
	// Traits.Broadcast, a KeyedBroadcastProcessFunction; with
	// ctx.AsyncState an AsyncKeyedProcessFunction. It is called once per
	// subtask, at every (re)start of the job.
	New func(ctx FactoryContext) (any, error)
}

// FactoryContext is what Factory.New gets for one subtask.
type FactoryContext struct {
	// Operator is the operator's configured name.
	Operator string
	// Subtask is the subtask index in [0, Parallelism).
	Subtask, Parallelism int
	// Params is the decoded params struct (what Factory.Params returned,
	// filled in and checked); nil when the type takes none.
	Params any
	// AsyncState says the operator runs with async_state: true.
	AsyncState bool
	// Metrics are the built-in operators' metrics.
	Metrics *Metrics
	// Logger is scoped to the operator and subtask.
	Logger *slog.Logger
	// ChangelogInput says the operator's main input is a changelog (the
	// planner derived it from the types upstream; graph.Operator has the
	// same flag): an aggregate then keeps what it needs to retract, such
	// as min's and max's value multisets.
	ChangelogInput bool
	// UpdateAfterOnly says the operator's changelog output may leave out
	// the -U rows (the planner set it, for a type with
	// ChangelogTraits.UpdateAfterOnly, because every reader of the output
	// is an upsert sink that would drop them; graph.Operator has the same
	// flag).
	UpdateAfterOnly bool
	// SourceSubtask returns the subtask of the job's source reading topic
	// that reads partition at this start (after a restore at another
	// parallelism: the subtask the restored split went to), false when no
	// source reads it (partitions added later: source.AssignPartition);
	// may be nil.
	SourceSubtask func(topic string, partition int32) (int, bool)
}

// ParamsChecker is implemented by a params struct with rules beyond types.
// CheckParams calls report once per problem with the field's path relative
// to params (as "aggregates[1].of"; "" for the mapping as a whole) and a
// lowercase message naming the offending value.
type ParamsChecker interface {
	CheckParams(report func(field, msg string))
}

// ProcessingTimeOutput is implemented by a params struct whose operator,
// as configured, stamps its output with processing time rather than event
// time (window with time: processing): an operator of a type with
// Traits.EventTime refuses such an input.
type ProcessingTimeOutput interface {
	ProcessingTimeOutput() bool
}

// BroadcastTimeParams is implemented by a params struct whose operator, as
// configured, holds records on its broadcast input's event time (rules
// with rule_time: event): the pipeline then requires the broadcast source
// to set watermark.idleness, or a quiet broadcast topic would hold every
// record forever.
type BroadcastTimeParams interface {
	UsesBroadcastTime() bool
}

// Registry holds the operator types a job may name. It is built by the
// program (cmd/kstreamd registers the built-ins; an SDK user adds their
// own) and handed down: there is no global registry. Not safe for
// concurrent Register; lookups are safe once registration is done.
type Registry struct {
	types map[string]*Factory
	order []string
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{types: map[string]*Factory{}} }

// roleRE is what an input role of a two-input type looks like: it is a
// YAML key (operators[].inputs.<role>) and, in cluster mode, part of the
// name of the role's repartition topic (graph.RoleRepartitionTopic).
var roleRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Register adds f. It fails when f.Type is empty or already registered, when
// New is nil, or when the traits contradict each other (an async type that
// is not keyed, a broadcast table without broadcast), or a two-input type's
// roles are not two distinct names of lower-case letters, digits and '_'.
func (r *Registry) Register(f Factory) error {
	switch {
	case f.Type == "":
		return fmt.Errorf("operators: register: empty type name")
	case f.New == nil:
		return fmt.Errorf("operators: register %q: New is nil", f.Type)
	case f.Traits.AsyncState && !f.Traits.Keyed:
		return fmt.Errorf("operators: register %q: async state needs a keyed type", f.Type)
	case f.Traits.BroadcastTable && !f.Traits.Broadcast:
		return fmt.Errorf("operators: register %q: a broadcast table needs a broadcast type", f.Type)
	case f.Traits.Inputs != [2]string{} && (f.Traits.Inputs[0] == "" || f.Traits.Inputs[1] == "" || f.Traits.Inputs[0] == f.Traits.Inputs[1]):
		return fmt.Errorf("operators: register %q: a two-input type names exactly two distinct roles, got %q", f.Type, f.Traits.Inputs)
	case f.Traits.TwoInput() && (!roleRE.MatchString(f.Traits.Inputs[0]) || !roleRE.MatchString(f.Traits.Inputs[1])):
		return fmt.Errorf("operators: register %q: input roles are lower-case letters, digits and '_', starting with a letter (a YAML key under inputs, and part of a repartition topic name in cluster mode), got %q", f.Type, f.Traits.Inputs)
	case !f.Traits.TwoInput() && f.Traits.Changelog.Tables != [2]bool{}:
		return fmt.Errorf("operators: register %q: Changelog.Tables marks roles of a two-input type only", f.Type)
	case f.Traits.TwoInput() && (!f.Traits.Keyed || f.Traits.Broadcast || f.Traits.AsyncState || f.Router != nil):
		return fmt.Errorf("operators: register %q: a two-input type must be keyed, without broadcast, async state or router", f.Type)
	case f.Router != nil && (!f.Traits.Keyed || f.Router.New == nil || f.Router.Router != nil || f.Router.Traits.Keyed):
		return fmt.Errorf("operators: register %q: a router needs a keyed type and a non-keyed router with New and no router of its own", f.Type)
	}
	if _, dup := r.types[f.Type]; dup {
		return fmt.Errorf("operators: register %q: type already registered", f.Type)
	}
	r.types[f.Type] = &f
	r.order = append(r.order, f.Type)
	return nil
}

// Lookup returns the factory of type typ.
func (r *Registry) Lookup(typ string) (*Factory, bool) {
	f, ok := r.types[typ]
	return f, ok
}

// Types returns every registered type name, sorted.
func (r *Registry) Types() []string {
	out := slices.Clone(r.order)
	slices.Sort(out)
	return out
}

// Builtins returns the factories of the built-in operator types; a new
// built-in is one file in this package plus one line here.
func Builtins() []Factory {
	return []Factory{
		shapePairMatcherFactory(),
		countWindowAverageFactory(),
		keyedCountFactory(),
		aggregateFactory(),
		windowFactory(),
		dedupFactory(),
		topNFactory(),
		rulesFactory(),
		filterFactory(),
		mapFactory(),
		flatMapFactory(),
		globalTableJoinFactory(),
		intervalJoinFactory(),
		tableJoinFactory(),
		changelogNormalizeFactory(),
		windowJoinFactory(),
		joinFactory(),
	}
}

// NewBuiltinRegistry returns a registry holding Builtins.
func NewBuiltinRegistry() *Registry {
	r := NewRegistry()
	for _, f := range Builtins() {
		if err := r.Register(f); err != nil {
			panic(err) // the built-ins are fixed: a clash is a programming error caught by every test
		}
	}
	return r
}
