package job

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/sink/pgsink"
	"github.com/kstreamd/kstreamd/source"
	"github.com/kstreamd/kstreamd/srformat"
	"github.com/kstreamd/kstreamd/state"
)

// Build turns a planned graph into a runnable job. It finds what to restore
// (deps.FromSavepoint, else the job's latest completed checkpoint, else
// nothing; a cluster-mode unit: its claimed HEAD), checks the max
// parallelism against it, prepares every source (the kafka type discovers
// its topic's partitions, retrying while the brokers cannot be reached,
// until ctx ends), recovers exactly-once sinks, wires subtasks and
// channels along the graph's edges, and redistributes the restored state
// over the graph's parallelism. Sources, sinks and formats are built by
// their types in deps.Connectors. The local state directory is rebuilt
// from the checkpoint (or emptied when there is none). Errors wrap
// ErrMaxParallelismChanged when the checkpoint's max parallelism differs
// from the one the graph sets explicitly.
func Build(ctx context.Context, g *graph.Graph, set Settings, deps Deps) (_ *Job, err error) {
	deps = deps.withDefaults()
	if set, err = unitRemoteState(set); err != nil { // cluster_remotestate.go
		return nil, err
	}
	sc := newScope(g, set, deps.Logger)
	storage := checkpoint.NewStorage(sc.chkDir, sc.chkName, set.Retained, sc.logger.With("component", "checkpoint"))
	if set.RemoteState != nil && set.RemoteState.Store != nil && set.Unit == nil { // a unit's Owner collects (cluster_remotestate.go)
		storage.SetRemoteStore(set.RemoteState.Store) // retention collects the remote state's objects there
	}
	rp, err := planRestore(ctx, g, set, sc, storage, deps)
	if err != nil {
		return nil, err
	}
	metrics, err := deps.metrics()
	if err != nil {
		return nil, err
	}
	sc.countTakeover(metrics, rp)
	// Every client of the job counts its failed broker connections.
	deps.ClientOpts = append(slices.Clip(deps.ClientOpts), kgo.WithHooks(metrics.kafka.Hook()))
	if err := releaseDeadRemoteState(set, storage, sc.stateRoot); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(sc.stateRoot); err != nil {
		return nil, fmt.Errorf("job: clear state dir: %w", err)
	}
	b := newBuild(ctx, g, set, deps, sc, rp, metrics, storage)
	defer func() {
		if err != nil {
			b.abort()
		}
	}()
	for _, step := range []func() error{b.wireGraph, b.buildSources, b.buildOperators, b.buildSinks, b.startChains, b.recoverDeadLetters} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return b.finish()
}

// withDefaults fills in what a zero Deps leaves out: a discarding logger
// and the built-in connector types.
func (d Deps) withDefaults() Deps {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Connectors == nil {
		d.Connectors = NewBuiltinConnectors()
	}
	return d
}

// metrics returns d.Metrics, or new ones registered with d.Registerer (a
// registry of their own when that is nil).
func (d Deps) metrics() (*Metrics, error) {
	if d.Metrics != nil {
		return d.Metrics, nil
	}
	reg := d.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	return NewMetrics(reg)
}

// build is one Build in progress: what the per-kind builders share and
// what they make.
type build struct {
	ctx     context.Context
	g       *graph.Graph
	set     Settings
	deps    Deps
	sc      scope
	rp      restorePlan
	m       *Metrics
	storage *checkpoint.Storage
	j       *Job
	wires   *builder
	resp    *responder
	dl      *deadLetters
	// res are the connectors' shared resources; the build itself is one
	// (buildKey).
	res *connector.Resources
	// admin is the client the kafka sources discover partitions with,
	// closed once the sources are built.
	admin *kgo.Client
	// srcByName indexes g.Sources.
	srcByName map[string]*graph.Source
	// alignGroups are the watermark alignment groups of the kafka
	// sources built, by name (build.alignment).
	alignGroups map[string]*source.AlignmentGroup
	// readers says which source subtask reads each partition of a topic
	// at this start, for FactoryContext.SourceSubtask.
	readers map[string]map[int32]int
	// What the builders make, in graph order.
	sources     []runtime.Task
	sourceTasks []runtime.SourceTask
	tasks       []runtime.Task
	targets     []runtime.CheckpointTarget
	// sinkTimes are the sink subtasks' meters (the others' are their
	// outputs').
	sinkTimes map[runtime.TaskID]*runtime.IOTimes
	// opTasks are the configs of the operator tasks to create (startChains)
	// in graph order; chains the operators and sinks chained to each head
	// (an operator or a source), per subtask; sourceBySub the source tasks
	// by source and subtask.
	opTasks     []*runtime.OperatorTaskConfig
	chains      map[string][]runtime.Chain
	sourceBySub map[string][]runtime.SourceTask
}

// newBuild starts the build of g.
func newBuild(ctx context.Context, g *graph.Graph, set Settings, deps Deps, sc scope, rp restorePlan, m *Metrics, storage *checkpoint.Storage) *build {
	b := &build{ctx: ctx, g: g, set: set, deps: deps, sc: sc, rp: rp, m: m, storage: storage,
		resp: &responder{}, res: connector.NewResources(), sinkTimes: map[runtime.TaskID]*runtime.IOTimes{}, srcByName: map[string]*graph.Source{}, readers: map[string]map[int32]int{},
		wires: &builder{g: g, maxP: rp.maxP, outputs: map[string][]*runtime.Output{}, gates: map[string][][]runtime.InputChannel{}, exchange: InProcessExchange{}}}
	b.res.Set(buildKey{}, b)
	srformat.SetMetrics(b.res, m.registry)
	pgsink.SetMetrics(b.res, m.postgres)
	b.j = &Job{g: g, settings: set, storage: storage, logger: sc.logger, metrics: m, maxP: rp.maxP,
		cache: state.NewBlockCache(set.BlockCacheBytes), restoredDir: rp.dir, resources: b.res}
	for _, s := range g.Sources {
		b.srcByName[s.Name] = s
	}
	b.chains, b.sourceBySub = map[string][]runtime.Chain{}, map[string][]runtime.SourceTask{}
	b.wires.hosts = func(vertex string) bool {
		s := b.srcByName[vertex]
		if s == nil {
			return true
		}
		f, ok := deps.Connectors.Source(s.Type)
		return ok && f.Chains
	}
	b.dl = b.deadLetterWriters()
	return b
}

// abort releases what a failed build holds.
func (b *build) abort() {
	b.j.cache.Close()
	if b.j.deadLetters != nil {
		b.j.deadLetters.Close()
	}
	if b.admin != nil {
		b.admin.Close()
	}
	_ = b.res.Close()
}

// wireGraph creates every vertex's outputs and gates and connects them
// along the graph's edges.
func (b *build) wireGraph() error {
	for _, s := range b.g.Sources {
		b.wires.stage(s.Name, s.Parallelism, b.m)
	}
	for _, op := range b.g.Operators {
		b.wires.stage(op.Name, op.Parallelism, b.m)
	}
	for _, sk := range b.g.Sinks {
		b.wires.gates[sk.Name] = make([][]runtime.InputChannel, sk.Parallelism)
	}
	for _, e := range b.g.Edges {
		if err := b.wires.wire(e); err != nil {
			return err
		}
	}
	return nil
}

// format returns the format named name ("" when none) of one subtask of a
// source or sink, made by its type with its decoded params; nil for "".
func (b *build) format(vertex, topic string, role connector.Role, name graph.Format, params any, sub, p int) (connector.Format, error) {
	if name == "" {
		return nil, nil
	}
	f, ok := b.deps.Connectors.Format(string(name))
	if !ok {
		return nil, fmt.Errorf("job: %s %q: unknown format %q", role, vertex, name)
	}
	fm, err := f.New(connector.FormatContext{Vertex: vertex, Role: role, Topic: topic, Subtask: sub, Parallelism: p, Params: params,
		Sections: b.g.Sections, Resources: b.res, Logger: b.sc.logger.With("component", "format", "format", f.Type, string(role), vertex, "subtask", sub)})
	if err != nil {
		return nil, fmt.Errorf("job: %s %q subtask %d: format %s: %w", role, vertex, sub, f.Type, err)
	}
	return fm, nil
}

// buildSources builds every source subtask by its type: Prepare once per
// source, Restore its splits, then New per subtask.
func (b *build) buildSources() error {
	defer func() {
		if b.admin != nil {
			b.admin.Close()
			b.admin = nil
		}
	}()
	for _, s := range b.g.Sources {
		f, ok := b.deps.Connectors.Source(s.Type)
		if !ok {
			return fmt.Errorf("job: source %q: unknown source type %q", s.Name, s.Type)
		}
		b.m.source.Init(s.Name)
		logger := b.sc.logger.With("component", "source", "source", s.Name)
		var prepared any
		if f.Prepare != nil {
			var err error
			if prepared, err = f.Prepare(b.ctx, connector.PrepareContext{Source: s, Resources: b.res, Logger: logger}); err != nil {
				return err
			}
		}
		restored := make([]any, s.Parallelism)
		if f.Restore != nil {
			shares, err := b.rp.splitShares(s, f.SplitsState)
			if err != nil {
				return err
			}
			if restored, err = f.Restore(connector.RestoreContext{Source: s, Prepared: prepared, Shares: shares, Resources: b.res}); err != nil {
				return err
			}
			if len(restored) != s.Parallelism {
				return fmt.Errorf("job: source %q (%s): Restore returned %d subtask restores for parallelism %d", s.Name, f.Type, len(restored), s.Parallelism)
			}
		}
		for sub := range s.Parallelism {
			if err := b.sourceSubtask(f, s, sub, prepared, restored[sub], logger); err != nil {
				return err
			}
		}
	}
	return nil
}

// sourceSubtask builds subtask sub of source s.
func (b *build) sourceSubtask(f *connector.SourceFactory, s *graph.Source, sub int, prepared, restored any, logger *slog.Logger) error {
	id := runtime.TaskID{Operator: s.Name, Subtask: sub}
	var fm connector.Format
	if f.Formats {
		var err error
		if fm, err = b.format(s.Name, s.Topic, connector.RoleSource, cmp.Or(s.Format, graph.DefaultFormat), s.FormatParams, sub, s.Parallelism); err != nil {
			return err
		}
	}
	t, err := f.New(connector.SourceContext{
		Source: s, Subtask: sub, Parallelism: s.Parallelism, Prepared: prepared, Restored: restored, Format: fm,
		Output: b.wires.outputs[s.Name][sub], Responder: b.resp, OnCaughtUp: func() { b.resp.caughtUp(id) },
		BadRecords: b.policy(s.Name, nil, logger.With("subtask", sub)),
		RecordsIn:  b.m.runtime.RecordsIn(s.Name, sub), Watermark: b.m.watermark.Gauge(id),
		Resources: b.res, Logger: logger,
	})
	if err != nil {
		return fmt.Errorf("job: source %q (%s) subtask %d: %w", s.Name, f.Type, sub, err)
	}
	if b.wires.heads != nil && b.chainHead(s.Name) {
		if _, ok := t.(runtime.ChainHost); !ok {
			return fmt.Errorf("job: source %q (%s) subtask %d: the type says it hosts chains but its task is no runtime.ChainHost", s.Name, f.Type, sub)
		}
	}
	b.sources = append(b.sources, t)
	b.sourceTasks = append(b.sourceTasks, t)
	b.sourceBySub[s.Name] = append(b.sourceBySub[s.Name], t)
	b.targets = append(b.targets, t)
	return nil
}

// policy is the bad-record policy of a task for the records of source
// name: dead letters go into the task's transactional writer w when it
// has one (exactly-once), else through the job's shared producer.
func (b *build) policy(name string, w source.DeadLetterWriter, logger *slog.Logger) runtime.BadRecordHandler {
	s := b.srcByName[name]
	if s == nil {
		return nil
	}
	cfg := source.PolicyConfig{
		Source:  cmp.Or(s.PolicySource, s.Name), // a repartition source's: the job source it inherited the policy of
		OnError: source.OnError(s.OnError), DeadLetterTopic: s.DeadLetterTopic, Writer: w, Metrics: b.m.source, Logger: logger,
	}
	if w == nil {
		if s.OnError == string(source.OnErrorDeadLetter) && b.j.deadLetters == nil {
			cl, err := kgo.NewClient(b.deps.ClientOpts...)
			if err != nil {
				return nil // reported by the sources' own client, which uses the same options
			}
			b.j.deadLetters = cl
		}
		cfg.Producer = b.j.deadLetters
	}
	return source.NewBadRecordPolicy(cfg)
}

// deadLetterWriter returns the transactional dead-letter writer of
// subtask sub of vertex when dead letters are transactional and need is
// true; nil otherwise.
func (b *build) deadLetterWriter(vertex string, sub int, need bool) (source.DeadLetterWriter, error) {
	if !b.dl.on || !need {
		return nil, nil
	}
	return b.dl.writer(vertex, sub)
}

// buildOperators builds every operator subtask: an operator chained to
// its upstream vertex (graph.Graph.Chained) joins the chain of its chain's
// head (startChains gives it to the head's task), and the upstream
// vertex's Output hands it each record; every other one gets a task.
func (b *build) buildOperators() error {
	mailboxes := map[string][]*runtime.Mailbox{} // chain head -> per subtask
	for _, op := range b.g.Operators {
		restores, err := b.rp.operatorRestores(op.Name, op.Parallelism)
		if err != nil {
			return err
		}
		head := b.wires.head(op.Name)
		if head == op.Name {
			mailboxes[op.Name] = make([]*runtime.Mailbox, op.Parallelism)
		}
		for sub := range op.Parallelism {
			if head == op.Name {
				// Shared by the task, an async operator's completions and
				// the operators chained to it.
				mailboxes[head][sub] = runtime.NewMailbox()
			}
			var mb *runtime.Mailbox
			if mailboxes[head] != nil {
				mb = mailboxes[head][sub] // a source head's chain gets the source's (ChainHost)
			}
			cfg, err := b.operatorSubtask(op, sub, restores[sub], mb)
			if err != nil {
				return err
			}
			if head == op.Name {
				b.opTasks = append(b.opTasks, cfg)
				continue
			}
			b.chain(op.Name, sub, &runtime.ChainedOperator{ID: cfg.ID, Operator: cfg.Operator, Output: cfg.Output, RecordsIn: cfg.RecordsIn,
				BadRecords: cfg.BadRecords[0], Watermark: cfg.Watermark, SideOutputs: cfg.SideOutputs})
		}
	}
	return nil
}

// chainHead reports whether vertex heads a chain.
func (b *build) chainHead(vertex string) bool {
	for v := range b.wires.heads {
		if b.wires.heads[v] == vertex {
			return true
		}
	}
	return false
}

// chain adds c, subtask sub of the chained vertex, to the Output of its
// upstream vertex and to the chain of its head.
func (b *build) chain(vertex string, sub int, c *runtime.ChainedOperator) {
	b.wires.outputs[b.wires.ups[vertex]][sub].AddChained(c)
	head := b.wires.head(vertex)
	if b.chains[head] == nil {
		b.chains[head] = make([]runtime.Chain, len(b.wires.outputs[head]))
	}
	b.chains[head][sub] = append(b.chains[head][sub], c)
}

// startChains creates the operator tasks, each with the chain it heads,
// and hands the chains headed by sources to their tasks
// (runtime.ChainHost); it logs the chains.
func (b *build) startChains() error {
	for _, cfg := range b.opTasks {
		if ch := b.chains[cfg.ID.Operator]; ch != nil {
			cfg.Chain = ch[cfg.ID.Subtask]
		}
		t := runtime.NewOperatorTask(*cfg)
		b.tasks = append(b.tasks, t)
		b.targets = append(b.targets, t)
	}
	for name, tasks := range b.sourceBySub {
		ch := b.chains[name]
		if ch == nil {
			continue
		}
		for sub, t := range tasks {
			host := t.(runtime.ChainHost) // checked in sourceSubtask
			host.HostChain(ch[sub])
			for _, c := range ch[sub] {
				// A keyed operator chained to a source (a cluster stage
				// reading its repartition topic) is queried through the
				// source's mailbox.
				b.j.queries.hostedBy(c.ID, host.Mailbox())
			}
		}
	}
	if chains := b.chainList(); len(chains) > 0 {
		b.sc.logger.Info("operators chained: each chain runs in one task per subtask", "chains", chains)
	}
	return nil
}

// chainList lists the graph's chains (graph.Graph.Chained, headed by a
// source or an operator) as "head->next->...", in graph order; a chain
// that forks lists each member after its head once.
func (b *build) chainList() []string {
	var heads, members []string
	for _, s := range b.g.Sources {
		heads = append(heads, s.Name)
	}
	for _, op := range b.g.Operators {
		heads = append(heads, op.Name)
		members = append(members, op.Name)
	}
	for _, sk := range b.g.Sinks {
		members = append(members, sk.Name)
	}
	var out []string
	for _, h := range heads {
		if b.wires.head(h) != h {
			continue
		}
		chain := []string{h}
		for _, m := range members {
			if m != h && b.wires.head(m) == h {
				chain = append(chain, m)
			}
		}
		if len(chain) > 1 {
			out = append(out, strings.Join(chain, "->"))
		}
	}
	return out
}

// operatorSubtask builds subtask sub of op: its type's function, wrapped
// into the runtime operator its traits call for, with the bad-record
// policies of its inputs' sources, and returns the config of its task
// (or of its place in a chain).
func (b *build) operatorSubtask(op *graph.Operator, sub int, restore *operators.Restore, mailbox *runtime.Mailbox) (*runtime.OperatorTaskConfig, error) {
	logger := b.sc.logger.With("component", "operator", "operator", op.Name, "subtask", sub)
	fn, err := op.Factory.New(operators.FactoryContext{
		Operator: op.Name, Subtask: sub, Parallelism: op.Parallelism, Params: op.Params, AsyncState: op.AsyncState,
		ChangelogInput: op.ChangelogInput, UpdateAfterOnly: op.UpdateAfterOnly, Metrics: b.m.operators, Logger: logger,
		SourceSubtask: func(topic string, partition int32) (int, bool) {
			sub, ok := b.readers[topic][partition]
			return sub, ok
		},
	})
	if err != nil {
		return nil, fmt.Errorf("job: operator %q (%s) subtask %d: %w", op.Name, op.Type, sub, err)
	}
	if rr, ok := fn.(operators.RulesReporter); ok {
		b.j.reporters = append(b.j.reporters, subtaskRules{operator: op.Name, subtask: sub, r: rr})
	}
	out := b.wires.outputs[op.Name][sub]
	kop, err := b.j.operator(op, sub, fn, restore, out, mailbox, b.sc, b.sc.logger)
	if err != nil {
		return nil, err
	}
	b.j.queries.add(b.g, op, sub, b.sc.keyGroups(b.j.maxP, op.Parallelism, sub), kop, mailbox)
	bootstrap := -1
	if op.Broadcast != "" {
		bootstrap = 1
	}
	dlw, err := b.deadLetterWriter(op.Name, sub, slices.ContainsFunc(op.ErrorSources[:], func(name string) bool {
		s := b.srcByName[name]
		return s != nil && s.OnError == string(source.OnErrorDeadLetter)
	}))
	if err != nil {
		return nil, err
	}
	var sides []runtime.SideOutput
	if dlw != nil {
		sides = []runtime.SideOutput{{ID: runtime.TaskID{Operator: source.DeadLetterVertex(op.Name), Subtask: sub}, Operator: dlw}}
	}
	id := runtime.TaskID{Operator: op.Name, Subtask: sub}
	return &runtime.OperatorTaskConfig{
		ID: id, Gate: runtime.NewInputGate(b.wires.gates[op.Name][sub]),
		Operator: kop, Output: out, Mailbox: mailbox, BootstrapInput: bootstrap,
		RecordsIn: b.m.runtime.RecordsIn(op.Name, sub), Responder: b.resp, Watermark: b.m.watermark.Gauge(id),
		BadRecords:  []runtime.BadRecordHandler{b.policy(op.ErrorSources[0], dlw, logger), b.policy(op.ErrorSources[1], dlw, logger)},
		SideOutputs: sides,
	}, nil
}

// buildSinks builds every sink by its type: an exactly-once sink's type
// first recovers the committables the checkpoint holds, then New makes
// each subtask.
func (b *build) buildSinks() error {
	for _, sk := range b.g.Sinks {
		f, ok := b.deps.Connectors.Sink(sk.Type)
		if !ok {
			return fmt.Errorf("job: sink %q: unknown sink type %q", sk.Name, sk.Type)
		}
		logger := b.sc.logger.With("component", "sink")
		p := len(b.wires.gates[sk.Name])
		if sk.Delivery.ExactlyOnce() && f.Recover != nil {
			cs, oldP, err := b.rp.committables(sk.Name, f.Type)
			if err != nil {
				return err
			}
			if err := f.Recover(b.ctx, connector.RecoverContext{Job: b.g.Job, Sink: sk, UID: b.g.UID(sk.Name), Committables: cs, OldParallelism: oldP, Parallelism: p, Resources: b.res, Logger: logger}); err != nil {
				return err
			}
		}
		shares, err := b.rp.sinkShares(sk.Name, p)
		if err != nil {
			return err
		}
		for sub := range p {
			if err := b.sinkSubtask(f, sk, sub, p, shares[sub], logger); err != nil {
				return err
			}
		}
	}
	return nil
}

// sinkSubtask builds subtask sub of sink sk.
func (b *build) sinkSubtask(f *connector.SinkFactory, sk *graph.Sink, sub, p int, restored map[string]state.OperatorListSnapshot, logger *slog.Logger) error {
	var fm connector.Format
	if f.Formats {
		var err error
		if fm, err = b.format(sk.Name, sk.Topic, connector.RoleSink, sk.Format, sk.FormatParams, sub, p); err != nil {
			return err
		}
	}
	k, err := f.New(connector.SinkContext{Job: b.g.Job, Sink: sk, UID: b.g.UID(sk.Name), Subtask: sub, Parallelism: p, Format: fm, Restored: restored,
		RecordsOut: b.m.runtime.RecordsOut(sk.Name, sub), Resources: b.res, Logger: logger})
	if err != nil {
		return fmt.Errorf("job: sink %q (%s) subtask %d: %w", sk.Name, f.Type, sub, err)
	}
	id := runtime.TaskID{Operator: sk.Name, Subtask: sub}
	if b.wires.head(sk.Name) != sk.Name {
		// Chained to the vertex before it: no task, no channel; its time
		// is its chain head's.
		b.sinkTimes[id] = b.wires.outputs[b.wires.head(sk.Name)][sub].IOTimes()
		b.chain(sk.Name, sub, &runtime.ChainedOperator{ID: id, Operator: k, RecordsIn: b.m.runtime.RecordsIn(sk.Name, sub),
			Watermark: b.m.watermark.Gauge(id)})
		return nil
	}
	b.sinkTimes[id] = b.m.ioTimes(sk.Name, sub)
	t := runtime.NewOperatorTask(runtime.OperatorTaskConfig{
		ID: id, Gate: runtime.NewInputGate(b.wires.gates[sk.Name][sub]),
		Operator: k, BootstrapInput: -1, RecordsIn: b.m.runtime.RecordsIn(sk.Name, sub), Responder: b.resp,
		Watermark: b.m.watermark.Gauge(id), IOTimes: b.sinkTimes[id],
	})
	b.tasks = append(b.tasks, t)
	b.targets = append(b.targets, t)
	return nil
}

// recoverDeadLetters commits what the restored checkpoint pre-committed
// for every dead-letter writer (and those of a checkpoint the graph no
// longer has) and fences their ids before any task starts, as the sinks
// do.
func (b *build) recoverDeadLetters() error { return b.dl.recover(b.ctx, b.rp) }

// finish creates the checkpoint coordinator over the built tasks and
// returns the job.
func (b *build) finish() (*Job, error) {
	var firstID int64
	if meta := b.rp.meta; meta != nil {
		firstID = meta.CheckpointID + 1
		if infos, err := b.storage.List(); err == nil && len(infos) > 0 {
			firstID = max(firstID, infos[len(infos)-1].ID+1)
		}
	}
	if b.rp.owner != nil {
		firstID = max(firstID, b.rp.owner.NextCheckpointID())
	}
	committed, purge := b.sc.coordinatorHooks(b.g, b.set, b.deps, b.m, b.rp.owner)
	b.j.purge = purge
	var commitsDone func(int64, *checkpoint.Metadata)
	if purge != nil {
		// The purge waits for every task's commit of the checkpoint
		// (invariant 1, step 5), as retention does.
		commitsDone = purge.committed
	}
	aligned, phase := b.sc.checkpointPhase(b.set.Interval)
	coord, err := checkpoint.NewCoordinator(checkpoint.CoordinatorConfig{
		Job: b.g.Job, MaxParallelism: b.rp.maxP, Storage: b.storage, Owner: b.rp.owner, Fault: b.deps.CheckpointFault, Committed: committed, CommitsDone: commitsDone,
		Interval: b.set.Interval, Aligned: aligned, Phase: phase, Timeout: b.set.Timeout, MinPause: b.set.MinPause,
		TolerableFailures: b.set.TolerableFailures, Incremental: b.set.Incremental || b.set.RemoteState != nil, RequiredStates: b.dl.requiredStates(requiredStates(b.g)),
		UIDs: b.g.UIDs, FirstID: firstID, Logger: b.sc.logger.With("component", "checkpoint"), Metrics: b.m.checkpoint,
	}, b.sourceTasks, b.targets)
	if err != nil {
		return nil, err
	}
	b.resp.c = coord
	// Only a broadcast source's bootstrap holds other inputs back, so only
	// those must catch up before barriers flow (a barrier behind a held
	// input would never align). Other sources take part in checkpoints from
	// the start, also while they work through a backlog.
	for _, st := range b.sourceTasks {
		if !b.srcByName[st.ID().Operator].Broadcast {
			coord.SourceCaughtUp(st.ID())
		}
	}
	b.j.coordinator = coord
	b.j.signals = newSignals(b, b.deps.SignalWindow)
	b.j.job = runtime.NewJob(b.sc.logger.With("component", "job"), b.deps.DrainTimeout, b.sources, b.tasks)
	return b.j, nil
}
