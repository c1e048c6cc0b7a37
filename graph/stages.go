package graph

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Stages is a graph cut at its key-group hash edges for cluster mode
// (docs/scale-out.md): every hash edge becomes a repartition topic with one
// partition per work unit, and each side of a cut is a stage. A unit is
// (stage, index): it runs its stage's Graph with the key groups
// keygroup.RangeFor(MaxParallelism, Units, index).
type Stages struct {
	Job string
	// Units is the number of units of every stage (the partition count of
	// every repartition topic).
	Units int
	// MaxParallelism is the graph's number of key groups.
	MaxParallelism int
	// Fingerprint identifies the planned graph and the unit count
	// (Fingerprint): daemons running one job compare it when they join.
	Fingerprint string
	// Stages are in topological order; stage 0 reads the job's input
	// topics.
	Stages []*Stage
	// Repartitions are the topics between stages, in stage order.
	Repartitions []Repartition
}

// Stage is the part of the job graph one unit runs.
type Stage struct {
	// Index is the stage's number, 0 for the stage of the input sources.
	Index int
	// Graph is what a unit of the stage runs: every vertex at parallelism
	// 1 (a unit is one subtask of its stage; units scale it out); a
	// repartition source (Source.Repartition) where the stage reads a
	// repartition topic, a repartition sink (Sink.Units > 0) where it
	// writes one; a broadcast source in every stage that has a consumer of
	// it.
	Graph *Graph
}

// Repartition is one repartition topic: the hash edge it replaces and the
// stages it connects. A stage whose first operator reads one input reads
// one repartition topic; one whose first operator is a two-input operator
// (Operator.Sides, Flink's KeyedCoProcessOperator) reads one topic per
// role, both partitioned by key group the same way.
type Repartition struct {
	// Topic is "<job>-<to stage>-repartition" (RepartitionTopic), or
	// "<job>-<to stage>-<role>-repartition" (RoleRepartitionTopic) for an
	// input of a two-input operator.
	Topic string
	// Vertex names the repartition sink (in stage From) and source (in
	// stage To) of the topic: RepartitionVertex(To), or
	// RoleRepartitionVertex(To, Role).
	Vertex string
	// Role is the input role of the two-input operator the topic feeds
	// (such as "left"), "" for a one-input operator; Input is that
	// operator's logical input the topic feeds (0 main, 1 second role).
	Role  string
	Input int
	// Partitions equals Stages.Units.
	Partitions int
	// Edge is the hash edge of the planned graph.
	Edge Edge
	// From and To are the writing and the reading stage.
	From, To int
}

// RepartitionTopic returns the repartition topic read by stage of job:
// "<job>-<stage>-repartition".
func RepartitionTopic(job string, stage int) string {
	return job + "-" + strconv.Itoa(stage) + "-repartition"
}

// RepartitionVertex returns the name of the repartition sink and source
// vertices of the topic read by stage: "repartition.<stage>". A dot never
// appears in a configured vertex name, so it cannot collide.
func RepartitionVertex(stage int) string { return "repartition." + strconv.Itoa(stage) }

// RoleRepartitionTopic returns the repartition topic of the input role
// (such as "left") of the two-input operator that starts stage of job:
// "<job>-<stage>-<role>-repartition".
func RoleRepartitionTopic(job string, stage int, role string) string {
	return job + "-" + strconv.Itoa(stage) + "-" + role + "-repartition"
}

// RoleRepartitionVertex returns the name of the repartition sink and
// source vertices of RoleRepartitionTopic: "repartition.<stage>.<role>".
func RoleRepartitionVertex(stage int, role string) string {
	return RepartitionVertex(stage) + "." + role
}

// edgeID identifies an edge of a graph without its key selector (a
// function, not comparable).
type edgeID struct {
	from, output, to string
	input            int
}

func idOf(e Edge) edgeID { return edgeID{e.From, e.Output, e.To, e.Input} }

// Split cuts g at its hash edges into the stages of cluster mode with units
// units per stage (pure: no Kafka, no disk). A non-broadcast source is in
// stage 0; an operator whose main input is a hash edge starts a new stage
// (numbered in g's topological order), any other vertex is in its main
// input's stage. A two-input operator (Operator.Sides) starts a new stage
// too: each of its inputs is a hash edge (the planner keys both), and each
// becomes a repartition topic of its own (RoleRepartitionTopic), written by
// the stage of that input's vertex and read by the new stage's units, each
// unit the same partition (its key-group range) of both; the unit's
// operator task aligns barriers over both repartition sources and takes
// the minimum of their watermarks, as for any two inputs. It returns an
// error when units is not in [1, g.MaxParallelism], or when an input of a
// two-input operator is not a hash edge.
//
// The repartition source of a stage inherits the format and the bad-record
// policy (OnError, DeadLetterTopic; PolicySource names it) of the job
// source upstream of its hash edge: the source of the edge's records,
// found by following main inputs (Operator.ErrorSources[0]). Each vertex
// has one main input, so that is exactly one source, the one whose policy
// the stage's operators obey in a single-process run; a stage's operators
// name the repartition source of its main input as their main input's
// ErrorSources[0] (a two-input operator the one of its second role as
// ErrorSources[1]), so a record their expression fails on is failed,
// skipped or dead-lettered as the job's source says, as in a
// single-process run. Broadcast inputs keep their own source, copied into
// the stage. Without an upstream source (a hand-built graph) the policy is
// "fail" and the format DefaultFormat.
func Split(g *Graph, units int) (*Stages, error) {
	if units < 1 || units > g.MaxParallelism {
		return nil, fmt.Errorf("graph: %d units: must be in [1, %d] (the max parallelism)", units, g.MaxParallelism)
	}
	st := &Stages{Job: g.Job, Units: units, MaxParallelism: g.MaxParallelism, Fingerprint: Fingerprint(g, units)}
	stageOf := map[string]int{}
	mainEdge := map[string]Edge{}
	inEdges := map[string][]Edge{}
	for _, e := range g.Edges {
		if e.Input == 0 {
			mainEdge[e.To] = e
		}
		inEdges[e.To] = append(inEdges[e.To], e)
	}
	for _, s := range g.Sources {
		if !s.Broadcast {
			stageOf[s.Name] = 0
		}
	}
	next := 1
	for _, o := range g.Operators {
		e := mainEdge[o.Name]
		if len(o.Sides) > 0 {
			ins := slices.SortedFunc(slices.Values(inEdges[o.Name]), func(a, b Edge) int { return a.Input - b.Input })
			if len(ins) != len(o.Sides) {
				return nil, fmt.Errorf("graph: two-input operator %q has %d input edges, want %d (one per role)", o.Name, len(ins), len(o.Sides))
			}
			for _, in := range ins {
				if in.Kind != Hash || in.Input < 0 || in.Input >= len(o.Sides) {
					return nil, fmt.Errorf("graph: input %d of two-input operator %q is a %s edge; cluster mode needs a key-group hash edge per role", in.Input, o.Name, in.Kind)
				}
				role := o.Sides[in.Input].Role
				st.Repartitions = append(st.Repartitions, Repartition{
					Topic: RoleRepartitionTopic(g.Job, next, role), Vertex: RoleRepartitionVertex(next, role), Role: role, Input: in.Input,
					Partitions: units, Edge: in, From: stageOf[in.From], To: next,
				})
			}
			stageOf[o.Name] = next
			next++
			continue
		}
		if e.Kind == Hash {
			stageOf[o.Name] = next
			st.Repartitions = append(st.Repartitions, Repartition{
				Topic: RepartitionTopic(g.Job, next), Vertex: RepartitionVertex(next), Partitions: units, Edge: e, From: stageOf[e.From], To: next,
			})
			next++
			continue
		}
		stageOf[o.Name] = stageOf[e.From]
	}
	for _, s := range g.Sinks {
		stageOf[s.Name] = stageOf[s.Input]
	}
	// The repartition of each replaced hash edge, and of each stage its
	// repartition by logical input.
	byEdge := map[edgeID]Repartition{}
	inputs := map[int][]string{}
	for _, r := range st.Repartitions {
		byEdge[idOf(r.Edge)] = r
		if len(inputs[r.To]) <= r.Input {
			inputs[r.To] = append(inputs[r.To], make([]string, r.Input+1-len(inputs[r.To]))...)
		}
		inputs[r.To][r.Input] = r.Vertex
	}
	for i := range next {
		sg := &Graph{Job: g.Job, MaxParallelism: g.MaxParallelism, MaxParallelismSet: g.MaxParallelismSet, UIDs: g.UIDs, DisableChaining: g.DisableChaining}
		in := func(name string) bool { s, ok := stageOf[name]; return ok && s == i }
		for _, s := range g.Sources {
			if in(s.Name) || (s.Broadcast && feedsStage(g, s.Name, stageOf, i)) {
				c := *s
				c.Parallelism = 1
				sg.Sources = append(sg.Sources, &c)
			}
		}
		for _, r := range st.Repartitions {
			if r.To == i {
				rs := &Source{
					Name: r.Vertex, Topic: r.Topic, Parallelism: 1, StartFrom: "earliest",
					Format: DefaultFormat, OnError: "fail", Repartition: true, UpstreamStage: r.From, Changelog: true,
				}
				if up := lineageSource(g, r.Edge.From); up != nil {
					if up.Format != "" {
						rs.Format = up.Format
					}
					rs.OnError, rs.DeadLetterTopic, rs.PolicySource = up.OnError, up.DeadLetterTopic, up.Name
				}
				sg.Sources = append(sg.Sources, rs)
			}
		}
		for _, o := range g.Operators {
			if in(o.Name) {
				c := *o
				c.Parallelism = 1
				if r, ok := byEdge[idOf(mainEdge[o.Name])]; ok && mainEdge[o.Name].Kind == Hash {
					c.Input = r.Vertex
				}
				if i > 0 {
					// Its main input's records come from the stage's
					// repartition source, which carries their source's
					// policy; a two-input operator's second role's from
					// the repartition source of that role.
					c.ErrorSources[0] = inputs[i][0]
				}
				if len(o.Sides) > 0 {
					c.Sides = slices.Clone(o.Sides)
					for j := range c.Sides {
						c.Sides[j].Input = inputs[i][j]
					}
					c.ErrorSources[1] = inputs[i][1]
				}
				sg.Operators = append(sg.Operators, &c)
			}
		}
		for _, s := range g.Sinks {
			if in(s.Name) {
				c := *s
				c.Parallelism = 1
				sg.Sinks = append(sg.Sinks, &c)
			}
		}
		for _, r := range st.Repartitions {
			if r.From == i {
				sg.Sinks = append(sg.Sinks, &Sink{
					Name: r.Vertex, Input: r.Edge.From, Topic: r.Topic, Parallelism: 1,
					Delivery: DeliveryExactlyOnce, Units: units, TransactionalIDPrefix: "kstreamd-" + g.Job + "-" + r.Vertex, Changelog: ChangelogHeader,
				})
			}
		}
		for _, e := range g.Edges {
			r, crosses := byEdge[idOf(e)]
			switch {
			case e.Kind == Broadcast && in(e.To):
				sg.Edges = append(sg.Edges, e)
			case e.Kind == Hash && crosses && in(e.To):
				sg.Edges = append(sg.Edges, Edge{From: r.Vertex, To: e.To, Input: e.Input, Kind: Forward})
			case e.Kind == Hash && crosses && in(e.From):
				c := e
				c.To = r.Vertex
				c.Input = 0
				sg.Edges = append(sg.Edges, c) // the key selector sets the record key; the sink routes by its key group
			case in(e.To):
				c := e
				c.Kind = Forward // every vertex of a unit runs one subtask
				sg.Edges = append(sg.Edges, c)
			}
		}
		st.Stages = append(st.Stages, &Stage{Index: i, Graph: sg})
	}
	return st, nil
}

// lineageSource returns the job source the records of vertex name come
// from, following main inputs (Operator.ErrorSources[0]); nil when there is
// none.
func lineageSource(g *Graph, name string) *Source {
	for _, o := range g.Operators {
		if o.Name == name {
			name = o.ErrorSources[0]
		}
	}
	for _, s := range g.Sources {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// feedsStage reports whether broadcast source name feeds an operator of
// stage i.
func feedsStage(g *Graph, name string, stageOf map[string]int, i int) bool {
	for _, e := range g.Edges {
		if e.From == name && e.Kind == Broadcast && stageOf[e.To] == i {
			return true
		}
	}
	return false
}

// Fingerprint returns the hex SHA-256 of the canonical text of g and the
// unit count: vertices with their types, parallelism-independent settings
// and params as JSON, edges with their key selector text, and the max
// parallelism. Two daemons with equal fingerprints run the same job; a
// change of any operator, edge, key, param or of units changes it.
// Parallelism is left out: in cluster mode units, not subtasks, scale.
func Fingerprint(g *Graph, units int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s max_parallelism=%d units=%d\n", g.Job, g.MaxParallelism, units)
	for _, s := range g.Sources {
		fmt.Fprintf(&b, "source %s topic=%s format=%s start=%s broadcast=%v out_of_orderness=%s idleness=%s",
			s.Name, s.Topic, s.Format, s.StartFrom, s.Broadcast, s.OutOfOrderness, s.Idleness)
		if s.Table {
			b.WriteString(" table") // only when set: older jobs keep their fingerprint
		}
		b.WriteString("\n")
	}
	for _, o := range g.Operators {
		params, _ := json.Marshal(o.Params)
		fmt.Fprintf(&b, "operator %s type=%s async=%v params=%s\n", o.Name, o.Type, o.AsyncState, params)
	}
	for _, s := range g.Sinks {
		fmt.Fprintf(&b, "sink %s topic=%s delivery=%s\n", s.Name, s.Topic, s.Delivery)
	}
	edges := make([]string, 0, len(g.Edges))
	for _, e := range g.Edges {
		k := e
		if k.Kind == Rebalance {
			k.Kind = Forward // parallelism-dependent
		}
		edges = append(edges, k.String())
	}
	slices.Sort(edges)
	b.WriteString(strings.Join(edges, "\n"))
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

// String renders the stages for tests: each stage's graph after a
// "stage <i>" line, then the repartition topics.
func (s *Stages) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "units=%d\n", s.Units)
	for _, st := range s.Stages {
		fmt.Fprintf(&b, "stage %d\n", st.Index)
		for _, src := range st.Graph.Sources {
			r := ""
			if src.Repartition {
				r = " repartition"
			}
			fmt.Fprintf(&b, "  source %s topic=%s%s\n", src.Name, src.Topic, r)
		}
		for _, o := range st.Graph.Operators {
			fmt.Fprintf(&b, "  operator %s type=%s input=%s\n", o.Name, o.Type, o.Input)
		}
		for _, sk := range st.Graph.Sinks {
			r := ""
			if sk.Units > 0 {
				r = fmt.Sprintf(" units=%d", sk.Units)
			}
			fmt.Fprintf(&b, "  sink %s topic=%s%s\n", sk.Name, sk.Topic, r)
		}
		for _, e := range st.Graph.Edges {
			fmt.Fprintf(&b, "  %s\n", e)
		}
	}
	for _, r := range s.Repartitions {
		fmt.Fprintf(&b, "repartition %s partitions=%d %d->%d (%s)\n", r.Topic, r.Partitions, r.From, r.To, r.Edge)
	}
	return b.String()
}
