package pipeline

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/srformat"
)

// Plan turns the config into a job graph (graph.Graph): a pure function of
// the config and its operator registry, with no Kafka and no disk. It runs
// every check Validate runs, so a config Plan refuses is refused by
// `kstreamd validate` too, with the same FILE:LINE:COL messages; on failure
// the error is a ConfigErrors.
//
// Parallelism: a source runs parallelism (default job.parallelism) subtasks;
// an operator with key_by job.parallelism unless set, one without key_by its
// input's parallelism; a sink its input's. Edges: an operator with key_by
// reads its input over a key-group hash edge (the key selected on the
// upstream side); without key_by over a forward edge when the parallelism
// is equal, else a rebalance edge; a broadcast input over a broadcast edge;
// a sink over a forward or rebalance edge likewise.
func (c *Config) Plan() (*graph.Graph, error) {
	if errs := c.validate(); len(errs) > 0 {
		errs.sort()
		return nil, errs
	}
	return c.buildGraph(), nil
}

// keySelector returns the runtime.KeySelector of a key_by text: a field
// path, or an expression over the record (operators.NewKeySelector), or an
// error naming the expression and why it does not compile.
func (c *Config) keySelector(keyBy string) (runtime.KeySelector, error) {
	sel, err := operators.NewKeySelector(keyBy)
	if err != nil {
		return nil, fmt.Errorf("neither a field path (identifiers joined by dots, such as user.id) nor an expression: %w", err)
	}
	return sel, nil
}

// decodeParams decodes op's params: mapping strictly into the params
// struct of its type, runs the type's CheckParams, and keeps the result for
// buildGraph.
func (c *Config) decodeParams(v *validator, path string, op *OperatorConfig, f *operators.Factory) {
	if pv, ok := c.decodeNode(v, path+".params", &op.Params, "operator type "+op.Type, f.Params); ok {
		if c.params == nil {
			c.params = map[string]any{}
		}
		c.params[op.Name] = pv
	}
}

// decodeNode decodes the mapping n at path strictly into a new params
// struct of newParams and runs its CheckParams (operators.ParamsChecker).
// what names the type in messages ("operator type filter"). With
// newParams nil a set mapping is refused. It returns the struct (nil for
// none) and whether it decoded without errors.
func (c *Config) decodeNode(v *validator, ppath string, n *yaml.Node, what string, newParams func() any) (any, bool) {
	set := n.Kind != 0 && n.ShortTag() != "!!null"
	if newParams == nil {
		if set {
			v.errorf(ppath, "%s takes no params", what)
			return nil, false
		}
		return nil, true
	}
	pv := newParams()
	if set {
		o := c.src
		if o == nil {
			o = &origin{keys: map[string]position{}, vals: map[string]position{}, bad: map[string]bool{}}
		}
		d := &decoder{o: o}
		d.decode(n, reflect.ValueOf(pv).Elem(), ppath)
		if d.tooLarge != nil {
			d.errs = append(d.errs, d.tooLarge)
		}
		if len(d.errs) > 0 {
			v.errs = append(v.errs, d.errs...)
			if d.valueErrs || d.tooLarge != nil {
				return nil, false
			}
			// Only keys were wrong (unknown, repeated): every field
			// written decoded, so its checks still run and every
			// problem is reported at once.
			checkParams(v, ppath, pv)
			return nil, false
		}
	}
	checkParams(v, ppath, pv)
	return pv, true
}

// checkParams runs pv's CheckParams (operators.ParamsChecker), if it has
// one, reporting at ppath.
func checkParams(v *validator, ppath string, pv any) {
	if pc, isChecker := pv.(operators.ParamsChecker); isChecker {
		pc.CheckParams(func(field, msg string) {
			switch {
			case field == "":
				v.errorf(ppath, "%s", msg)
			case strings.HasPrefix(field, "["):
				v.errorf(ppath+field, "%s", msg)
			default:
				v.errorf(ppath+"."+field, "%s", msg)
			}
		})
	}
}

// validateGraph checks what spans several operators: cycles, and a
// broadcast source that is also read as a main input.
func (c *Config) validateGraph(v *validator, stages map[string]stage) {
	reported := map[string]bool{}
	for i := range c.Operators {
		start := &c.Operators[i]
		path := []string{start.Name}
		cur := start
		for range len(c.Operators) {
			next, ok := c.OperatorByName(c.inputVertex(c.mainInput(cur)))
			if !ok || next == cur {
				break
			}
			path = append(path, next.Name)
			if next.Name == start.Name {
				cycle := false
				for _, n := range path {
					cycle = cycle || reported[n]
				}
				if !cycle {
					v.errorf(fmt.Sprintf("operators[%d].input", i), "cycle: %s", strings.Join(path, " -> "))
				}
				for _, n := range path {
					reported[n] = true
				}
				break
			}
			cur = next
		}
	}
	for i := range c.Operators {
		op := &c.Operators[i]
		if op.Broadcast == "" {
			continue
		}
		for j := range c.Operators {
			if j != i && slices.Contains(c.opInputs(&c.Operators[j]), op.Broadcast) {
				v.errorf(fmt.Sprintf("operators[%d].input", j), "%q is the broadcast input of operators[%d] (%q); a broadcast source cannot also be a main input", op.Broadcast, i, op.Name)
			}
		}
	}
	c.validateTwoInputGraph(v)
	_ = stages
}

// lineageSource returns the source the records of vertex name come from,
// following main inputs.
func (c *Config) lineageSource(name string) string {
	for range len(c.Operators) + 1 {
		if _, ok := c.SourceByName(name); ok {
			return name
		}
		op, ok := c.OperatorByName(name)
		if !ok {
			return ""
		}
		name = c.inputVertex(c.mainInput(op))
	}
	return ""
}

// buildGraph builds the graph of a validated config.
func (c *Config) buildGraph() *graph.Graph {
	reg := c.registry()
	g := &graph.Graph{Job: c.Job.Name, MaxParallelism: c.MaxParallelism(), MaxParallelismSet: c.Job.MaxParallelism != 0,
		DisableChaining: !c.Job.ChainingOn()}
	if c.UsesSchemaRegistry() {
		g.Sections = map[string]any{srformat.SectionName: c.SchemaRegistry.RegistryConfig(c.SchemaRegistryURLs(), nil)}
	}
	setUID := func(name, uid string) {
		if uid != "" && uid != name {
			if g.UIDs == nil {
				g.UIDs = map[string]string{}
			}
			g.UIDs[name] = uid
		}
	}
	srcs := map[string]*graph.Source{}
	for i := range c.Sources {
		s := &c.Sources[i]
		setUID(s.Name, s.UID)
		gs := &graph.Source{
			Name: s.Name, Type: s.Type, Params: c.connParams[s.Name], FormatParams: c.connParams[s.Name+formatParamsSuffix], Topic: s.Topic, Topics: s.Topics, TopicPattern: s.TopicPattern, Parallelism: c.SourceParallelism(s), StartFrom: string(s.StartFrom),
			Format: s.Format, OnError: string(s.OnError), DeadLetterTopic: s.DeadLetterTopic,
			MaxRecordBytes: s.MaxRecordBytes, DiscoveryInterval: s.PartitionDiscoveryInterval,
			OutOfOrderness: s.Watermark.OutOfOrderness, Idleness: s.Watermark.Idleness,
			MaxAhead: s.Timestamp.MaxAhead, Changelog: s.Changelog != "", UpsertChangelog: s.Changelog == graph.ChangelogUpsertHeader, Table: s.Table,
		}
		if a := s.WatermarkAlignment; a != nil {
			gs.AlignmentGroup, gs.AlignmentMaxDrift, gs.AlignmentUpdateInterval = cmp.Or(a.Group, s.Name), a.MaxDrift, a.UpdateInterval
		}
		if e, unit := s.Timestamp.Expression, s.Timestamp.Unit; e.IsSet() {
			gs.Timestamp = func() func(*runtime.Record) (time.Time, error) { return operators.NewTimestampAssigner(e, unit) }
		}
		srcs[s.Name] = gs
		g.Sources = append(g.Sources, gs)
	}
	// Operators in topological order: each after its main input.
	placed := map[string]bool{}
	var place func(op *OperatorConfig)
	place = func(op *OperatorConfig) {
		if placed[op.Name] {
			return
		}
		placed[op.Name] = true
		for _, name := range c.opInputs(op) {
			if in, ok := c.OperatorByName(c.inputVertex(name)); ok {
				place(in)
			}
		}
		f, _ := reg.Lookup(op.Type)
		broadcastEdge := func(to string) {
			g.Edges = append(g.Edges, graph.Edge{From: op.Broadcast, To: to, Input: 1, Kind: graph.Broadcast})
			if bs := srcs[op.Broadcast]; bs != nil {
				bs.Broadcast = true
				if bs.Check == nil {
					bs.Check = f.CheckBroadcast
					if f.NewCheckBroadcast != nil {
						bs.Check = f.NewCheckBroadcast(c.params[op.Name])
					}
				}
			}
		}
		setUID(op.Name, op.UID)
		o := &graph.Operator{
			Name: op.Name, Type: op.Type, Factory: f, Params: c.params[op.Name],
			Parallelism: c.OperatorParallelism(op), AsyncState: op.AsyncState, KeyBy: op.KeyBy,
			Input: c.inputVertex(op.Input), Broadcast: op.Broadcast,
			DisableChaining: op.Chain != nil && !*op.Chain,
		}
		kind, _ := c.changelogStream(op.Input)
		o.ChangelogInput = kind != appendOnly
		o.UpdateAfterOnly = f.Traits.Changelog.UpdateAfterOnly && c.upsertSinksOnly(op.Name, len(c.Operators)+1)
		o.ErrorSources[0] = c.lineageSource(c.inputVertex(op.Input))
		o.ErrorSources[1] = op.Broadcast
		if f.Traits.TwoInput() {
			g.Operators = append(g.Operators, o)
			g.Edges = append(g.Edges, c.twoInputOperator(o, op, f)...)
			return
		}
		if f.Router != nil {
			// Dynamic keying: the routing stage at the input's parallelism,
			// with the same broadcast input, then the operator over a hash
			// edge keyed by the key the routing stage set.
			route := &graph.Operator{
				Name: op.Name + operators.RulesRouteSuffix, Type: f.Router.Type, Factory: f.Router, Params: c.params[op.Name],
				Parallelism: c.OperatorParallelism(&OperatorConfig{Input: op.Input}),
				Input:       c.inputVertex(op.Input), Broadcast: op.Broadcast, ErrorSources: o.ErrorSources, DisableChaining: o.DisableChaining,
			}
			if op.UID != "" {
				setUID(route.Name, op.UID+operators.RulesRouteSuffix)
			}
			g.Operators = append(g.Operators, route)
			g.Edges = append(g.Edges, c.edge(op.Input, route.Name, "", route.Parallelism))
			broadcastEdge(route.Name)
			o.Input, o.KeyBy = route.Name, "key"
			g.Operators = append(g.Operators, o)
			g.Edges = append(g.Edges, graph.Edge{From: route.Name, To: op.Name, Kind: graph.Hash, Key: operators.RecordKeySelector{}, KeyBy: "key"})
			broadcastEdge(op.Name)
			return
		}
		g.Operators = append(g.Operators, o)
		g.Edges = append(g.Edges, c.edge(op.Input, op.Name, op.KeyBy, o.Parallelism))
		if op.Broadcast != "" {
			broadcastEdge(op.Name)
		}
	}
	for i := range c.Operators {
		place(&c.Operators[i])
	}
	for i := range c.Sinks {
		s := &c.Sinks[i]
		setUID(s.Name, s.UID)
		gs := &graph.Sink{
			Name: s.Name, Type: s.Type, Params: c.connParams[s.Name], Format: s.Format, FormatParams: c.connParams[s.Name+formatParamsSuffix],
			Input: c.inputVertex(s.Input), Topic: s.Topic, Parallelism: c.SinkParallelism(s), Delivery: s.Delivery,
			TransactionalIDPrefix: c.TransactionalIDPrefix(s), TransactionTimeout: s.TransactionTimeout, PoolSize: s.PoolSize,
			IgnoreLostTransactions: s.IgnoreLostTransactions, BufferThreshold: s.BufferThreshold, Changelog: s.Changelog,
		}
		if gs.Changelog == "" {
			gs.Changelog = graph.DefaultChangelogMode
		}
		if kind, _ := c.changelogStream(s.Input); gs.Changelog == graph.ChangelogHeader && kind == upsertChangelog {
			// a table's upserts: marked, so that a changelog: header
			// reader (a full changelog) refuses them
			gs.Changelog = graph.ChangelogUpsertHeader
		}
		g.Sinks = append(g.Sinks, gs)
		g.Edges = append(g.Edges, c.edge(s.Input, s.Name, "", gs.Parallelism))
	}
	return g
}

// edge returns the main-input edge from vertex from to vertex to of
// parallelism p.
func (c *Config) edge(input, to, keyBy string, p int) graph.Edge {
	from, side := c.SplitInput(input)
	if keyBy != "" {
		sel, _ := c.keySelector(keyBy) // validated
		return graph.Edge{From: from, Output: side, To: to, Kind: graph.Hash, Key: sel, KeyBy: keyBy}
	}
	inP := 0
	if s, ok := c.SourceByName(from); ok {
		inP = c.SourceParallelism(s)
	} else if op, ok := c.OperatorByName(from); ok {
		inP = c.OperatorParallelism(op)
	}
	if inP == p {
		return graph.Edge{From: from, Output: side, To: to, Kind: graph.Forward}
	}
	return graph.Edge{From: from, Output: side, To: to, Kind: graph.Rebalance}
}
