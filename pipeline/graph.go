package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/sink"
	"github.com/kstreamd/kstreamd/source"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// Deps are what Build needs from the process.
type Deps struct {
	// Logger is the process logger; every component scopes it.
	Logger *slog.Logger
	// Registerer receives every metric of the job.
	Registerer prometheus.Registerer
	// ClientOpts are the franz-go options every Kafka client of the job
	// shares: seed brokers, client id, logger (see ClientOptions).
	ClientOpts []kgo.Opt
	// DrainTimeout bounds the soft stop; 0 means runtime.DefaultDrainTimeout.
	DrainTimeout time.Duration
}

// ClientOptions returns the franz-go options of the config's Kafka clients:
// seed brokers and client id.
func (c *Config) ClientOptions() []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(c.Brokers()...), kgo.ClientID(c.Kafka.ClientID)}
}

// Job is a job graph built from a Config, ready to run.
type Job struct {
	cfg      *Config
	job      *runtime.Job
	cache    *state.BlockCache
	matchers map[string][]*operators.ShapePairMatcher
}

// Build turns a validated config into a runnable job: it discovers the
// partitions of every source topic (retrying while the brokers cannot be
// reached, until ctx ends), wires subtasks and channels, and prepares the
// state directories. Keyed state starts empty: the job's directory under
// the state dir is removed first (restoring from checkpoints arrives with
// the checkpoint issue).
func Build(ctx context.Context, cfg *Config, deps Deps) (*Job, error) {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	rm, err := runtime.NewMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	sm, err := source.NewMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	om, err := operators.NewMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	partitions, err := discover(ctx, cfg, deps)
	if err != nil {
		return nil, err
	}
	b := &builder{cfg: cfg, deps: deps, maxP: cfg.MaxParallelism(), outputs: map[string][]*runtime.Output{}, gates: map[string][][]runtime.InputChannel{}}
	if err := b.planSources(); err != nil {
		return nil, err
	}
	for i := range cfg.Sources {
		b.stage(cfg.Sources[i].Name, cfg.SourceParallelism(&cfg.Sources[i]), rm)
	}
	for i := range cfg.Operators {
		op := &cfg.Operators[i]
		p := cfg.OperatorParallelism(op)
		b.stage(op.Name, p, rm)
		b.connect(op.Input, op.Name, 0, p, runtime.KeyGroupPartitioner{MaxParallelism: b.maxP})
		if op.Broadcast != "" {
			b.connect(op.Broadcast, op.Name, 1, p, runtime.BroadcastPartitioner{})
		}
	}
	for i := range cfg.Sinks {
		sk := &cfg.Sinks[i]
		p := cfg.SinkParallelism(sk)
		b.gates[sk.Name] = make([][]runtime.InputChannel, p)
		up := len(b.outputs[sk.Input])
		if up == p {
			b.connectForward(sk.Input, sk.Name, p)
		} else {
			b.connect(sk.Input, sk.Name, 0, p, &runtime.RebalancePartitioner{})
		}
	}

	stateRoot := filepath.Join(cfg.StateDir(), cfg.Job.Name)
	if err := os.RemoveAll(stateRoot); err != nil {
		return nil, fmt.Errorf("pipeline: clear state dir: %w", err)
	}
	cache := state.NewBlockCache(cfg.State.BlockCacheBytes)
	j := &Job{cfg: cfg, cache: cache, matchers: map[string][]*operators.ShapePairMatcher{}}

	var sources, tasks []runtime.Task
	for i := range cfg.Sources {
		s := &cfg.Sources[i]
		plan := b.sourcePlans[s.Name]
		for sub := range b.outputs[s.Name] {
			sources = append(sources, source.New(source.Config{
				Name: s.Name, Topic: s.Topic, Partitions: partitions[s.Topic],
				Subtask: sub, Parallelism: len(b.outputs[s.Name]),
				StartFrom: source.StartFrom(s.StartFrom), KeyBy: plan.keyBy, Tombstones: plan.tombstones,
				ClientOpts: deps.ClientOpts, Output: b.outputs[s.Name][sub],
				RecordsIn: rm.RecordsIn(s.Name, sub), Metrics: sm,
				Logger: deps.Logger.With("component", "source"),
			}))
		}
	}
	for i := range cfg.Operators {
		op := &cfg.Operators[i]
		p := len(b.outputs[op.Name])
		for sub := 0; sub < p; sub++ {
			info := operators.OpenContext{Operator: op.Name, Subtask: sub, Parallelism: p}
			opener := j.opener(stateRoot, op.Name, sub, p, b.maxP, deps.Logger)
			logger := deps.Logger.With("component", "operator", "operator", op.Name, "subtask", sub)
			var kop *operators.KeyedOperator
			switch op.Type {
			case OperatorShapePairMatcher:
				m := &operators.ShapePairMatcher{Metrics: om, Logger: logger}
				j.matchers[op.Name] = append(j.matchers[op.Name], m)
				kop = operators.NewKeyedBroadcastOperator(info, opener, m, b.outputs[op.Name][sub])
			case OperatorCountWindowAverage:
				kop = operators.NewKeyedProcessOperator(info, opener, &operators.CountWindowAverage{}, b.outputs[op.Name][sub])
			case OperatorKeyedCount:
				kop = operators.NewKeyedProcessOperator(info, opener, &operators.KeyedCount{}, b.outputs[op.Name][sub])
			default:
				return nil, fmt.Errorf("pipeline: operators[%d]: unknown type %q", i, op.Type)
			}
			bootstrap := -1
			if op.Broadcast != "" {
				bootstrap = 1
			}
			tasks = append(tasks, runtime.NewOperatorTask(runtime.OperatorTaskConfig{
				ID: runtime.TaskID{Operator: op.Name, Subtask: sub}, Gate: runtime.NewInputGate(b.gates[op.Name][sub]),
				Operator: kop, Output: b.outputs[op.Name][sub], BootstrapInput: bootstrap,
				RecordsIn: rm.RecordsIn(op.Name, sub),
			}))
		}
	}
	for i := range cfg.Sinks {
		sk := &cfg.Sinks[i]
		for sub := range b.gates[sk.Name] {
			k := sink.New(sink.Config{
				Name: sk.Name, Subtask: sub, Topic: sk.Topic, Delivery: sink.Delivery(sk.Delivery),
				ClientOpts: deps.ClientOpts, RecordsOut: rm.RecordsOut(sk.Name, sub),
				Logger: deps.Logger.With("component", "sink"),
			})
			tasks = append(tasks, runtime.NewOperatorTask(runtime.OperatorTaskConfig{
				ID: runtime.TaskID{Operator: sk.Name, Subtask: sub}, Gate: runtime.NewInputGate(b.gates[sk.Name][sub]),
				Operator: k, BootstrapInput: -1, RecordsIn: rm.RecordsIn(sk.Name, sub),
			}))
		}
	}
	j.job = runtime.NewJob(deps.Logger.With("component", "job"), deps.DrainTimeout, sources, tasks)
	return j, nil
}

// Run runs the job until ctx ends (then it drains and returns nil) or a
// subtask fails (then it returns the failure). It releases the shared block
// cache when it returns.
func (j *Job) Run(ctx context.Context) error {
	defer j.cache.Close()
	return j.job.Run(ctx)
}

// opener returns the state backend opener of one keyed subtask: its Pebble
// DB lives in <state dir>/<job>/<operator>/subtask-<i>.
func (j *Job) opener(root, op string, sub, p, maxP int, logger *slog.Logger) operators.BackendOpener {
	return func() (state.KeyedStateBackend, error) {
		return state.OpenBackend(state.BackendConfig{
			Kind:           string(j.cfg.State.Backend),
			Dir:            filepath.Join(root, op, "subtask-"+strconv.Itoa(sub)),
			MaxParallelism: maxP,
			KeyGroupRange:  keygroup.RangeFor(maxP, p, sub),
			Cache:          j.cache,
			Logger:         logger.With("component", "state", "operator", op, "subtask", sub),
		})
	}
}

// discover returns the partition count of every source topic.
func discover(ctx context.Context, cfg *Config, deps Deps) (map[string]int32, error) {
	cl, err := kgo.NewClient(deps.ClientOpts...)
	if err != nil {
		return nil, fmt.Errorf("pipeline: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	out := map[string]int32{}
	for _, s := range cfg.Sources {
		n, err := source.Discover(ctx, adm, deps.Logger.With("component", "source", "source", s.Name), s.Topic)
		if err != nil {
			return nil, fmt.Errorf("pipeline: source %q: %w", s.Name, err)
		}
		out[s.Topic] = n
	}
	return out, nil
}

// sourcePlan is what a source must do for its consumers.
type sourcePlan struct {
	keyBy      string
	tombstones bool
}

type builder struct {
	cfg         *Config
	deps        Deps
	maxP        int
	outputs     map[string][]*runtime.Output        // stage -> per subtask
	gates       map[string][][]runtime.InputChannel // stage -> per subtask input channels
	sourcePlans map[string]sourcePlan
}

// planSources decides per source the key field to extract and whether null
// values pass (broadcast rule deletions). A keyed operator's input must be a
// source for now (re-keying an operator's output comes later), and one
// source cannot feed two different keys.
func (b *builder) planSources() error {
	b.sourcePlans = map[string]sourcePlan{}
	for i, op := range b.cfg.Operators {
		if _, ok := b.cfg.SourceByName(op.Input); !ok {
			return fmt.Errorf("pipeline: operators[%d] (%s): input %q is an operator; a keyed operator reads a source in this version", i, op.Name, op.Input)
		}
		plan := b.sourcePlans[op.Input]
		if plan.keyBy != "" && plan.keyBy != op.KeyBy || plan.tombstones {
			return fmt.Errorf("pipeline: operators[%d] (%s): source %q is already keyed or broadcast differently by another operator", i, op.Name, op.Input)
		}
		plan.keyBy = op.KeyBy
		b.sourcePlans[op.Input] = plan
	}
	for i, op := range b.cfg.Operators {
		if op.Broadcast == "" {
			continue
		}
		plan := b.sourcePlans[op.Broadcast]
		if plan.keyBy != "" {
			return fmt.Errorf("pipeline: operators[%d] (%s): broadcast source %q is also a keyed input", i, op.Name, op.Broadcast)
		}
		plan.tombstones = true
		b.sourcePlans[op.Broadcast] = plan
	}
	return nil
}

// stage creates the outputs of a stage with p subtasks and its empty gates.
func (b *builder) stage(name string, p int, rm *runtime.Metrics) {
	if _, ok := b.outputs[name]; ok {
		return
	}
	outs := make([]*runtime.Output, p)
	for i := range outs {
		outs[i] = runtime.NewOutput(rm.RecordsOut(name, i))
	}
	b.outputs[name] = outs
	b.gates[name] = make([][]runtime.InputChannel, p)
}

// connect wires every subtask of from to every subtask of to (p subtasks)
// over one channel per pair, as logical input in, routed by part.
func (b *builder) connect(from, to string, in, p int, part runtime.Partitioner) {
	for _, out := range b.outputs[from] {
		chans := make([]runtime.Channel, p)
		for d := 0; d < p; d++ {
			chans[d] = runtime.NewChannel(0)
			b.gates[to][d] = append(b.gates[to][d], runtime.InputChannel{Ch: chans[d], Input: in})
		}
		pt := part
		if rb, ok := part.(*runtime.RebalancePartitioner); ok {
			c := *rb
			pt = &c // each upstream subtask keeps its own round-robin position
		}
		out.AddWriter(runtime.NewWriter(chans, pt))
	}
}

// connectForward wires subtask i of from to subtask i of to.
func (b *builder) connectForward(from, to string, p int) {
	for i := 0; i < p; i++ {
		ch := runtime.NewChannel(0)
		b.gates[to][i] = append(b.gates[to][i], runtime.InputChannel{Ch: ch, Input: 0})
		b.outputs[from][i].AddWriter(runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
	}
}
