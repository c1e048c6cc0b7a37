// Package graph is the job graph as data: what the planner
// (pipeline.Plan) makes of a config and what the job package builds into
// running tasks. A graph has vertices (sources, operators, sinks, each with
// its parallelism and what it needs to run) and edges (forward, rebalance,
// key-group hash with its key selector, broadcast), after Flink's
// JobGraph/StreamGraph. It holds no Kafka client, no file and no goroutine:
// planner tests compare graphs as values.
package graph

import (
	"fmt"
	"strings"
	"time"

	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/runtime"
)

// Graph is a planned job.
type Graph struct {
	// Job is the job's name: it names checkpoint and state directories,
	// the monitoring group and default transactional ids.
	Job string
	// MaxParallelism is the number of key groups (Flink's max
	// parallelism); MaxParallelismSet says the config set it explicitly (a
	// restore then refuses another number; otherwise the checkpoint's
	// number is kept).
	MaxParallelism    int
	MaxParallelismSet bool
	// Sources, Operators and Sinks are the vertices; Operators are in
	// topological order (every operator after its inputs).
	Sources   []*Source
	Operators []*Operator
	Sinks     []*Sink
	// Edges connect vertices by name, in the order the job wires them.
	Edges []Edge
	// UIDs maps the name of each vertex whose uid differs from its name
	// to its uid (sources[].uid, operators[].uid, sinks[].uid; a rules
	// operator's routing stage gets its operator's uid with the routing
	// suffix): the uid identifies the vertex's state in checkpoints, as
	// Flink's operator uid does, so a vertex renamed with its uid kept
	// keeps its state. Nil when every uid is the name. Read it with UID.
	UIDs map[string]string
	// Sections are the job-level config sections connectors and formats
	// share, by name (e.g. "schema_registry"), as the pipeline decoded
	// them (connector.FormatContext.Sections); nil when none is set.
	Sections map[string]any
	// DisableChaining turns operator chaining off for the whole job
	// (job.chaining: false; Flink's pipeline.operator-chaining: false):
	// every operator runs in a task of its own. See Chained.
	DisableChaining bool
}

// TopicDesc describes the topics s reads for status and plans: Topic, or
// Topics joined by commas, or "pattern:" and TopicPattern.
func (s *Source) TopicDesc() string {
	switch {
	case s.TopicPattern != "":
		return "pattern:" + s.TopicPattern
	case s.Topics != nil:
		return strings.Join(s.Topics, ",")
	}
	return s.Topic
}

// Source reads records: Kafka topics for the default type, kafka (Topic,
// or Topics, or the topics TopicPattern matches).
type Source struct {
	Name, Topic string
	// Topics, when not nil, are the topics read instead of Topic;
	// TopicPattern, when not empty, a regular expression of the topics
	// read instead (matched in full, new matching topics discovered at
	// run time). Both are for the kafka type only.
	Topics       []string
	TopicPattern string
	// Type is the registered source type (connector.Registry); "" means
	// kafka. Params is its decoded params struct (sources[].params), nil
	// for kafka and for a type that takes none.
	Type   string
	Params any
	// FormatParams is the format's decoded params struct
	// (sources[].format_params); nil when the format takes none.
	FormatParams any
	// Parallelism is the number of source subtasks, >= 1.
	Parallelism int
	// StartFrom is "earliest" or "latest".
	StartFrom string
	// Format is how values are decoded; "" means DefaultFormat.
	Format Format
	// OnError is "fail", "skip" or "dead-letter"; DeadLetterTopic is set
	// for dead-letter.
	OnError, DeadLetterTopic string
	// MaxRecordBytes bounds a value's size; 0 means no limit.
	MaxRecordBytes int
	// DiscoveryInterval is the partition discovery period; 0 off.
	DiscoveryInterval time.Duration
	// Changelog says the source reads its topic as a header-mode changelog
	// (ChangelogHeader: each record's kind from its kstreamd-change
	// header); every repartition source does.
	Changelog bool
	// UpsertChangelog, with Changelog, says that changelog is an upsert
	// changelog (ChangelogUpsertHeader: sources[].changelog:
	// upsert_header); without it a record marked as an upsert changelog's
	// (runtime.ChangelogModeHeader) fails the source.
	UpsertChangelog bool
	// Broadcast says the source feeds a broadcast edge: null values pass
	// (they delete rules) and checkpoints wait until it caught up.
	Broadcast bool
	// Table reads the topic as a table (source.Config.Table): upserts by
	// key as runtime.ChangeUpdateAfter, tombstones as runtime.ChangeDelete.
	Table bool
	// Check, if not nil, validates each record at the source (the
	// broadcast consumer's Factory.CheckBroadcast).
	Check func(key, value []byte) error
	// Timestamp, if not nil, makes the event-time assigner of one subtask
	// (a sources[].timestamp expression); nil: the Kafka timestamp.
	Timestamp func() func(*runtime.Record) (time.Time, error)
	// OutOfOrderness and Idleness configure the watermarks (0: none, never
	// idle).
	OutOfOrderness, Idleness time.Duration
	// AlignmentGroup, AlignmentMaxDrift and AlignmentUpdateInterval are
	// the source's watermark alignment (source.WatermarkAlignment): its
	// subtasks and those of the other sources of the same group pause a
	// partition running more than AlignmentMaxDrift ahead of the group's
	// least watermark. AlignmentMaxDrift 0: off. A reading policy, not
	// part of the job's fingerprint.
	AlignmentGroup                             string
	AlignmentMaxDrift, AlignmentUpdateInterval time.Duration
	// MaxAhead, if > 0, bounds how far ahead of the wall clock a record's
	// event time may be; a record further ahead is a bad record
	// (source.Config.MaxAhead). 0: off.
	MaxAhead time.Duration
	// Repartition marks the source of a cluster-mode stage that reads a
	// repartition topic (Split): a unit reads only its own partition, the
	// one of its key groups, read_committed, and turns markers into
	// watermarks (docs/scale-out.md).
	Repartition bool
	// UpstreamStage is, for a repartition source, the stage that writes
	// its topic: the markers come from that stage's units
	// "<UpstreamStage>/<0..units-1>" (runtime.MarkerUnit).
	UpstreamStage int
	// PolicySource is, for a repartition source, the job source upstream
	// of its hash edge whose bad-record policy (OnError, DeadLetterTopic)
	// it inherited (Split): its policy's metrics and fail errors name that
	// source. "" for a job source (they name the source itself).
	PolicySource string
}

// Operator runs one registered operator type.
type Operator struct {
	Name string
	// Type is the registered type name and Factory its registry entry.
	Type    string
	Factory *operators.Factory
	// Params is the decoded params struct; nil when the type takes none.
	Params any
	// Parallelism is the number of subtasks, >= 1.
	Parallelism int
	// AsyncState runs the type's async state version.
	AsyncState bool
	// KeyBy is the key_by text ("" when the operator is not keyed by its
	// input edge); the edge carries its selector.
	KeyBy string
	// Input is the main input's vertex name; Broadcast the broadcast
	// input's ("" for none).
	Input, Broadcast string
	// ChangelogInput says the main input is a changelog (the planner
	// derived it from the changelog traits upstream); the factory gets it
	// as FactoryContext.ChangelogInput.
	ChangelogInput bool
	// UpdateAfterOnly says the operator emits its changelog without -U
	// rows (the planner found that only upsert sinks read it, which drop
	// them: Flink's ONLY_UPDATE_AFTER); the factory gets it as
	// FactoryContext.UpdateAfterOnly.
	UpdateAfterOnly bool
	// ErrorSources name, per logical input (0 main, 1 broadcast or second
	// role), the source whose on_error policy a bad record met here obeys:
	// the source the input's records come from.
	ErrorSources [2]string
	// Sides are the inputs of a two-input operator
	// (operators.Traits.Inputs), in the type's role order: logical input i
	// reads Sides[i] over a hash edge keyed by its own key_by. Input and
	// KeyBy repeat Sides[0]'s. Nil for a one-input operator.
	Sides []Side
	// DisableChaining keeps the operator out of any chain (operators[].chain:
	// false; Flink's disableChaining): it runs in a task of its own, with
	// channels to and from its neighbours. See Graph.Chained.
	DisableChaining bool
}

// Side is one input of a two-input operator: its role (such as "left"),
// the vertex it reads (with a side output, "<operator>.<output>") and its
// key_by text.
type Side struct {
	Role, Input, KeyBy string
}

// Keyed reports whether the operator runs on a keyed stream (keyed state).
func (o *Operator) Keyed() bool { return o.Factory.Traits.Keyed }

// Sink writes one stream: to a Kafka topic for the default type, kafka.
type Sink struct {
	Name, Input, Topic string
	// Type is the registered sink type (connector.Registry); "" means
	// kafka. Params is its decoded params struct (sinks[].params), nil
	// for kafka and for a type that takes none.
	Type   string
	Params any
	// Format encodes each record's value before it is written
	// (sinks[].format); "" writes values as they are. FormatParams is
	// the format's decoded params struct (nil when it takes none).
	Format       Format
	FormatParams any
	// Parallelism is the number of sink subtasks, >= 1.
	Parallelism int
	// Delivery is the sink's guarantee; "" means DefaultDelivery.
	Delivery Delivery
	// TransactionalIDPrefix is the prefix of an exactly-once sink's ids
	// (already defaulted); TransactionTimeout and PoolSize as configured
	// (0: the sink's default).
	TransactionalIDPrefix string
	TransactionTimeout    time.Duration
	PoolSize              int
	// IgnoreLostTransactions and BufferThreshold as in the config.
	IgnoreLostTransactions bool
	BufferThreshold        int
	// Changelog is how a changelog is written; "" means
	// DefaultChangelogMode. A repartition sink writes ChangelogHeader; a
	// sinks[].changelog: header sink whose input is an upsert changelog
	// (a table's) is planned as ChangelogUpsertHeader.
	Changelog ChangelogMode
	// Units > 0 marks the repartition sink of a cluster-mode stage
	// (Split): a record whose key is in key group kg goes to partition
	// keygroup.OperatorIndex(kg, max parallelism, Units), the unit owning
	// kg.
	Units int
}

// EdgeKind says how records cross an edge (Flink's StreamPartitioner).
type EdgeKind string

// Edge kinds.
const (
	// Forward: subtask i to subtask i (equal parallelism).
	Forward EdgeKind = "forward"
	// Rebalance: round-robin over the downstream subtasks.
	Rebalance EdgeKind = "rebalance"
	// Hash: by the key group of the key Key selects (keyBy).
	Hash EdgeKind = "hash"
	// Broadcast: every record to every downstream subtask.
	Broadcast EdgeKind = "broadcast"
)

// Edge is one input of a vertex.
type Edge struct {
	From, To string
	// Output is the side output of From the edge reads ("" for the main
	// output), e.g. "late" for an input named "<operator>.late".
	Output string
	// Input is the downstream logical input: 0 main, 1 broadcast.
	Input int
	Kind  EdgeKind
	// Key selects the key of a Hash edge; KeyBy is its text.
	Key   runtime.KeySelector
	KeyBy string
}

// String renders the edge as "from -hash(key)-> to[input]".
func (e Edge) String() string {
	k := string(e.Kind)
	if e.Kind == Hash {
		k += "(" + e.KeyBy + ")"
	}
	from := e.From
	if e.Output != "" {
		from += "." + e.Output
	}
	s := fmt.Sprintf("%s -%s-> %s", from, k, e.To)
	if e.Input != 0 {
		s += fmt.Sprintf("[%d]", e.Input)
	}
	return s
}

// String renders the graph one vertex or edge per line, for tests and
// debugging: "source items p=2", "operator matcher shape_pair_matcher p=2",
// "sink out p=2", then the edges.
func (g *Graph) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s max_parallelism=%d\n", g.Job, g.MaxParallelism)
	for _, s := range g.Sources {
		fmt.Fprintf(&b, "source %s topic=%s p=%d\n", s.Name, s.TopicDesc(), s.Parallelism)
	}
	for _, o := range g.Operators {
		fmt.Fprintf(&b, "operator %s type=%s p=%d\n", o.Name, o.Type, o.Parallelism)
	}
	for _, s := range g.Sinks {
		fmt.Fprintf(&b, "sink %s topic=%s p=%d\n", s.Name, s.Topic, s.Parallelism)
	}
	for _, e := range g.Edges {
		fmt.Fprintln(&b, e.String())
	}
	return b.String()
}

// Parallelism returns the parallelism of the vertex called name, 0 if none.
func (g *Graph) Parallelism(name string) int {
	for _, s := range g.Sources {
		if s.Name == name {
			return s.Parallelism
		}
	}
	for _, o := range g.Operators {
		if o.Name == name {
			return o.Parallelism
		}
	}
	for _, s := range g.Sinks {
		if s.Name == name {
			return s.Parallelism
		}
	}
	return 0
}

// UID returns the uid of the vertex called name: its entry in UIDs, else
// name itself (also for a name that is no vertex, such as a dead-letter
// writer's).
func (g *Graph) UID(name string) string {
	if u, ok := g.UIDs[name]; ok {
		return u
	}
	return name
}

// Chained reports whether edge e is chained: its downstream vertex runs
// in the task of its upstream one, which hands it each record on the same
// goroutine, with no channel between them (Flink's OperatorChain;
// StreamingJobGraphGenerator.isChainable). That is when chaining is on for
// the job, e is a forward edge (equal parallelism) from the main output of
// an operator or a source to the main input of an operator or a sink, the
// downstream vertex reads no other edge (one input, no broadcast side), a
// downstream operator runs no async state (its ProcessRecord may run the
// task's mailbox), and neither operator disables chaining. A broadcast
// source is never chained; a source is chained only when its type hosts
// chained operators (connector.SourceFactory.Chains, which the job checks
// besides this).
func (g *Graph) Chained(e Edge) bool {
	if g.DisableChaining || e.Kind != Forward || e.Output != "" || e.Input != 0 {
		return false
	}
	fromP, toP := 0, 0
	for _, s := range g.Sources {
		if s.Name == e.From {
			if s.Broadcast {
				return false
			}
			fromP = s.Parallelism
		}
	}
	for _, o := range g.Operators {
		switch o.Name {
		case e.From:
			if o.DisableChaining {
				return false
			}
			fromP = o.Parallelism
		case e.To:
			if o.DisableChaining || o.AsyncState || o.Broadcast != "" || o.Sides != nil {
				return false
			}
			toP = o.Parallelism
		}
	}
	for _, s := range g.Sinks {
		if s.Name == e.To {
			toP = s.Parallelism
		}
	}
	if fromP == 0 || fromP != toP {
		return false
	}
	in := 0
	for _, x := range g.Edges {
		if x.To == e.To {
			in++
		}
	}
	return in == 1
}

// Vertex reports whether a vertex is called name.
func (g *Graph) Vertex(name string) bool { return g.Parallelism(name) > 0 }
