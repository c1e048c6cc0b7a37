package job

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/sink"
	"github.com/kstreamd/kstreamd/source"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// Settings are where and how a job keeps its state and checkpoints: the
// parts of a pipeline config that are not the graph.
type Settings struct {
	// CheckpointDir holds <job>/chk-<n>/ and <job>/shared/.
	CheckpointDir string
	// SavepointDir is where savepoints go when a request names no dir.
	SavepointDir string
	// StateDir holds the local keyed state: <StateDir>/<job>/<operator>/subtask-<i>.
	StateDir string
	// StateBackend is "pebble" or "hashmap".
	StateBackend string
	// BlockCacheBytes is the Pebble block cache shared by the process, in bytes.
	BlockCacheBytes int64
	// Checkpoints configures the coordinator: Interval 0 means no periodic
	// checkpoints.
	Interval, Timeout, MinPause time.Duration
	TolerableFailures, Retained int
	Incremental                 bool
	// Restart is the restart strategy of Runner; the zero value is
	// replaced by DefaultRestartConfig.
	Restart RestartConfig
	// Unit, if not nil, makes Build build one cluster-mode work unit of a
	// stage graph (graph.Split) instead of a whole job: see Unit.
	Unit *Unit
	// MarkerInterval bounds how often a unit's repartition sink writes a
	// watermark marker while its watermark advances (cluster.
	// marker_interval; sink.MarkerConfig.Interval); 0 means
	// sink.DefaultMarkerInterval. Used with Unit only.
	MarkerInterval time.Duration
	// PurgeRepartitions makes a unit delete the records of its input
	// repartition partition up to the offsets of each committed checkpoint
	// (cluster.purge_repartitions).
	PurgeRepartitions bool
	// Store is the shared store of the units' HEAD chains and checkpoints
	// (checkpoint.FileStore or s3store.Store); required with Unit. A unit
	// then writes its checkpoints under CheckpointDir (the local staging
	// directory) and uploads them to Store before its HEAD.
	Store checkpoint.Store
}

// Unit is one cluster-mode work unit (docs/scale-out.md): unit Index of
// Units of stage Stage. Build then gives the unit its own checkpoint
// namespace <job>/units/<stage>/<index>/ in Settings.Store (staged locally
// in <CheckpointDir>/<job>/units/<stage>/<index>/), its own state dir
// <StateDir>/<job>/units/<stage>/<index>/, the key groups
// keygroup.RangeFor(maxP, Units, Index) for its keyed state, the input
// splits of subtask Index of Units (a broadcast source: every partition; a
// repartition source: partition Index only), and transactional ids
// <prefix>-<stage>-<index>-<slot> for every exactly-once sink, of which it
// fences exactly its own.
type Unit struct {
	Stage, Index, Units int
	// Member is the owner's group member id, written into each HEAD;
	// Fingerprint the graph fingerprint (graph.Stages.Fingerprint).
	Member, Fingerprint string
}

// prefix returns the transactional id prefix of a sink of the unit:
// <prefix>-<stage>, so that TransactionalID(prefix, Index, slot) is
// <prefix>-<stage>-<index>-<slot>.
func (u *Unit) prefix(p string) string { return p + "-" + strconv.Itoa(u.Stage) }

// Deps are what Build needs from the process.
type Deps struct {
	// Logger is the process logger; every component scopes it.
	Logger *slog.Logger
	// Registerer receives every metric of the job when Metrics is nil.
	Registerer prometheus.Registerer
	// Metrics, if not nil, are the job's metrics, registered once and
	// shared by every Build of the process (Runner passes its own); nil
	// means Build registers new ones with Registerer (nil: a registry of
	// its own).
	Metrics *Metrics
	// ClientOpts are the franz-go options every Kafka client of the job
	// shares: seed brokers, client id, TLS, SASL, logger.
	ClientOpts []kgo.Opt
	// DrainTimeout bounds the soft stop; 0 means runtime.DefaultDrainTimeout.
	DrainTimeout time.Duration
	// FromSavepoint, if not empty, is a savepoint (or checkpoint) directory
	// to restore instead of the job's latest checkpoint.
	FromSavepoint string
	// CheckpointFault, if not nil, is the coordinator's fault-injection
	// seam (checkpoint.CoordinatorConfig.Fault) for tests of a unit's
	// commit order; no pipeline config sets it.
	CheckpointFault func(point checkpoint.FaultPoint, checkpointID int64) bool
}

// ErrMaxParallelismChanged is wrapped by Build's error when the restored
// checkpoint has another max parallelism than the graph asks for
// explicitly (state.ErrMaxParallelismChanged).
var ErrMaxParallelismChanged = state.ErrMaxParallelismChanged

// Job is a job graph built into subtasks and channels, ready to run (Flink's
// ExecutionGraph with its tasks, on one process).
type Job struct {
	g           *graph.Graph
	settings    Settings
	job         *runtime.Job
	coordinator *checkpoint.Coordinator
	storage     *checkpoint.Storage
	logger      *slog.Logger
	metrics     *Metrics
	maxP        int
	cache       *state.BlockCache
	restoredDir string
	deadLetters *kgo.Client // shared dead-letter producer of the operators' bad-record policies; nil when none
	// purge deletes the unit's consumed repartition records after each
	// committed checkpoint; nil outside cluster mode or in stage 0.
	purge *repartitionPurge
	// reporters are the subtask functions that list their rules
	// (operators.RulesReporter), in graph order; fixed after Build.
	reporters []subtaskRules
	// sources are the Kafka source subtasks, in graph order; fixed after
	// Build (Readiness).
	sources []*source.KafkaSource
}

// subtaskRules is one subtask's operators.RulesReporter.
type subtaskRules struct {
	operator string
	subtask  int
	r        operators.RulesReporter
}

// SubtaskRules are the rules one operator subtask holds.
type SubtaskRules struct {
	Operator string                 `json:"operator"`
	Subtask  int                    `json:"subtask"`
	Rules    []operators.RuleStatus `json:"rules"`
}

// Rules lists the rules every subtask of a rules operator holds (both
// stages: "<op>.route" routes and counts matches, "<op>" keeps the state
// and counts alerts), in graph order. Safe to call from any goroutine
// while the job runs.
func (j *Job) Rules() []SubtaskRules {
	out := make([]SubtaskRules, 0, len(j.reporters))
	for _, r := range j.reporters {
		out = append(out, SubtaskRules{Operator: r.operator, Subtask: r.subtask, Rules: r.r.RuleStatuses()})
	}
	return out
}

// Build turns a planned graph into a runnable job. It finds what to restore
// (deps.FromSavepoint, else the job's latest completed checkpoint, else
// nothing), checks the max parallelism against it, discovers the
// partitions of every source topic (retrying while the brokers cannot be
// reached, until ctx ends), recovers exactly-once sinks, wires subtasks and
// channels along the graph's edges, and redistributes the restored state
// over the graph's parallelism. The local state directory is rebuilt from
// the checkpoint (or emptied when there is none). Errors wrap
// ErrMaxParallelismChanged when the checkpoint's max parallelism differs
// from the one the graph sets explicitly.
func Build(ctx context.Context, g *graph.Graph, set Settings, deps Deps) (_ *Job, err error) {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	logger := deps.Logger
	unit := set.Unit
	chkDir, chkName := set.CheckpointDir, g.Job
	if unit != nil {
		chkDir, chkName = filepath.Join(set.CheckpointDir, g.Job, "units", strconv.Itoa(unit.Stage)), strconv.Itoa(unit.Index)
		logger = logger.With("stage", unit.Stage, "unit", unit.Index)
	}
	storage := checkpoint.NewStorage(chkDir, chkName, set.Retained, logger.With("component", "checkpoint"))
	var (
		restoreDir string
		meta       *checkpoint.Metadata
		owner      *checkpoint.Owner
	)
	if unit != nil {
		// Takeover (docs/scale-out.md): the newest HEAD, not a listing,
		// names what to restore; claiming the next one fences the previous
		// owner before anything is committed or fenced in Kafka.
		if set.Store == nil {
			return nil, fmt.Errorf("job: stage %d unit %d: no checkpoint store (Settings.Store)", unit.Stage, unit.Index)
		}
		if err := checkpoint.SelfTest(ctx, set.Store, g.Job+"/"); err != nil {
			return nil, err
		}
		// The local staging copy starts empty: only the store's HEAD says
		// what the unit restores.
		if err := os.RemoveAll(storage.JobDir()); err != nil {
			return nil, fmt.Errorf("job: clear checkpoint staging dir: %w", err)
		}
		ns := checkpoint.Namespace{Store: set.Store, Prefix: checkpoint.UnitPrefix(g.Job, unit.Stage, unit.Index), Local: storage}
		o, head, err := checkpoint.Claim(ctx, ns, unit.Member, unit.Fingerprint, unit.Units, set.Retained)
		if err != nil {
			return nil, fmt.Errorf("job: stage %d unit %d: claim: %w", unit.Stage, unit.Index, err)
		}
		owner = o
		if head.CheckpointID > 0 {
			if restoreDir, meta, err = o.Restore(ctx, head); err != nil {
				return nil, fmt.Errorf("job: stage %d unit %d: HEAD-%d: %w", unit.Stage, unit.Index, head.Seq, err)
			}
			if err := verify(restoreDir, meta); err != nil {
				return nil, fmt.Errorf("job: restore %s: %w", restoreDir, err)
			}
		}
	} else {
		var err error
		if restoreDir, meta, err = findRestore(storage, deps.FromSavepoint); err != nil {
			return nil, err
		}
	}
	maxP := g.MaxParallelism
	if meta != nil {
		if meta.MaxParallelism != maxP {
			if g.MaxParallelismSet {
				return nil, fmt.Errorf("job: restore %s: the checkpoint has max parallelism %d, the config sets job.max_parallelism %d; it cannot change across a restore: %w",
					restoreDir, meta.MaxParallelism, maxP, ErrMaxParallelismChanged)
			}
			maxP = meta.MaxParallelism // not set explicitly: keep the checkpoint's, as Flink does
		}
		for _, op := range g.Operators {
			if op.Parallelism > maxP {
				return nil, fmt.Errorf("job: operator %q: parallelism %d exceeds the restored max parallelism %d", op.Name, op.Parallelism, maxP)
			}
		}
		if err := checkRestoredOperators(g, meta); err != nil {
			return nil, fmt.Errorf("job: restore %s: %w", restoreDir, err)
		}
		logger.Info("restoring", "dir", restoreDir, "checkpoint_id", meta.CheckpointID, "savepoint", meta.Savepoint, "max_parallelism", maxP)
	}

	metrics := deps.Metrics
	if metrics == nil {
		reg := deps.Registerer
		if reg == nil {
			reg = prometheus.NewRegistry()
		}
		if metrics, err = NewMetrics(reg); err != nil {
			return nil, err
		}
	}
	if unit != nil {
		l := unitLabels(unit)
		metrics.cluster.takeovers.WithLabelValues(l...).Inc()
		restores := metrics.cluster.restores.WithLabelValues(l...) // 0 until a takeover restores
		if meta != nil {
			restores.Inc()
		}
		metrics.cluster.head.WithLabelValues(l...).Set(float64(owner.Seq()))
	}
	rm, sm, om, cm, skm, wmm := metrics.runtime, metrics.source, metrics.operators, metrics.checkpoint, metrics.sink, metrics.watermark
	// Every client of the job counts its failed broker connections.
	deps.ClientOpts = append(slices.Clip(deps.ClientOpts), kgo.WithHooks(metrics.kafka.Hook()))
	partitions, err := discover(ctx, g, deps)
	if err != nil {
		return nil, err
	}
	b := &builder{g: g, maxP: maxP, outputs: map[string][]*runtime.Output{}, gates: map[string][][]runtime.InputChannel{}, exchange: InProcessExchange{}}
	for _, s := range g.Sources {
		b.stage(s.Name, s.Parallelism, rm)
	}
	for _, op := range g.Operators {
		b.stage(op.Name, op.Parallelism, rm)
	}
	for _, sk := range g.Sinks {
		b.gates[sk.Name] = make([][]runtime.InputChannel, sk.Parallelism)
	}
	for _, e := range g.Edges {
		if err := b.wire(e); err != nil {
			return nil, err
		}
	}

	stateRoot := filepath.Join(set.StateDir, g.Job)
	if unit != nil {
		stateRoot = filepath.Join(set.StateDir, g.Job, "units", strconv.Itoa(unit.Stage), strconv.Itoa(unit.Index))
	}
	if err := os.RemoveAll(stateRoot); err != nil {
		return nil, fmt.Errorf("job: clear state dir: %w", err)
	}
	j := &Job{g: g, settings: set, storage: storage, logger: logger, metrics: metrics, maxP: maxP, cache: state.NewBlockCache(set.BlockCacheBytes), restoredDir: restoreDir}
	defer func() {
		if err != nil {
			j.cache.Close()
			if j.deadLetters != nil {
				j.deadLetters.Close()
			}
		}
	}()
	resp := &responder{}

	var sources []runtime.Task
	var sourceTasks []runtime.SourceTask
	var targets []runtime.CheckpointTarget
	srcByName := map[string]*graph.Source{}
	for _, s := range g.Sources {
		srcByName[s.Name] = s
	}
	dl := j.deadLetterWriters(g, deps, metrics, logger)
	// readers says which source subtask reads each partition of a topic at
	// this start (restored splits, then AssignPartition), for
	// FactoryContext.SourceSubtask.
	readers := map[string]map[int32]int{}
	for _, s := range g.Sources {
		p := s.Parallelism
		sm.Init(s.Name)
		restored, err := restoreSource(meta, s, p)
		if err != nil {
			return nil, err
		}
		if _, dup := readers[s.Topic]; !dup {
			readers[s.Topic] = sourceReaders(s, partitions[s.Topic], restored)
		}
		if s.DiscoveryInterval == 0 && !s.Repartition { // a unit's repartition partition is fixed
			logger.Warn("partition discovery is off: partitions added to the topic later will not be read",
				"source", s.Name, "topic", s.Topic, "fix", "partition_discovery_interval")
		}
		for sub := 0; sub < p; sub++ {
			id := runtime.TaskID{Operator: s.Name, Subtask: sub}
			var assigner func(*runtime.Record) (time.Time, error)
			if s.Timestamp != nil {
				assigner = s.Timestamp()
			}
			var only []int32 // a unit reads its own partitions: the repartition partition of its index, or its share of the input
			var upstream []string
			switch {
			case unit == nil || s.Broadcast:
			case s.Repartition:
				only = []int32{int32(unit.Index)}
				// Its time comes from the markers of every unit of the
				// upstream stage (invariant 4), not from record timestamps.
				for u := range unit.Units {
					upstream = append(upstream, runtime.MarkerUnit(s.UpstreamStage, u))
				}
			default:
				only = append([]int32{}, source.PartitionsFor(s.Topic, partitions[s.Topic], unit.Index, unit.Units)...)
			}
			var dlw source.DeadLetterWriter
			if dl.on && s.OnError == string(source.OnErrorDeadLetter) {
				if dlw, err = dl.writer(s.Name, sub); err != nil {
					return nil, err
				}
			}
			src := source.New(source.Config{
				Timestamp: assigner, MaxAhead: s.MaxAhead, Watermarks: source.WatermarkConfig{OutOfOrderness: s.OutOfOrderness, Idleness: s.Idleness},
				WatermarkGauge: wmm.Gauge(id),
				Name:           s.Name, Topic: s.Topic, Partitions: partitions[s.Topic],
				Subtask: sub, Parallelism: p, Only: only, Upstream: upstream, StartFrom: source.StartFrom(s.StartFrom), Restored: restored[sub],
				DiscoveryInterval: s.DiscoveryInterval, Group: "kstreamd-" + g.Job,
				Format: sourceFormat(s.Format), Tombstones: s.Broadcast, Table: s.Table, Check: s.Check, Changelog: s.Changelog,
				OnError: source.OnError(s.OnError), DeadLetterTopic: s.DeadLetterTopic, PolicySource: s.PolicySource, DeadLetters: dlw, MaxRecordBytes: s.MaxRecordBytes,
				ClientOpts: deps.ClientOpts, Output: b.outputs[s.Name][sub], Responder: resp,
				OnCaughtUp: func() { resp.caughtUp(id) },
				RecordsIn:  rm.RecordsIn(s.Name, sub), Metrics: sm, Retries: metrics.kafka,
				Logger: logger.With("component", "source"),
			})
			sources = append(sources, src)
			j.sources = append(j.sources, src)
			sourceTasks = append(sourceTasks, src)
			targets = append(targets, src)
		}
	}
	// policy is the bad-record policy of an operator task for the records
	// of source name: dead letters go into the task's transactional writer
	// w when it has one (exactly-once), else through the job's shared
	// producer.
	policy := func(name string, w source.DeadLetterWriter, opLogger *slog.Logger) runtime.BadRecordHandler {
		s := srcByName[name]
		if s == nil {
			return nil
		}
		label := cmp.Or(s.PolicySource, s.Name) // a repartition source's: the job source it inherited the policy of
		if w != nil {
			return source.NewBadRecordPolicy(source.PolicyConfig{
				Source: label, OnError: source.OnError(s.OnError), DeadLetterTopic: s.DeadLetterTopic,
				Writer: w, Metrics: sm, Logger: opLogger,
			})
		}
		if s.OnError == string(source.OnErrorDeadLetter) && j.deadLetters == nil {
			cl, err := kgo.NewClient(deps.ClientOpts...)
			if err != nil {
				return nil // reported by the sources' own client, which uses the same options
			}
			j.deadLetters = cl
		}
		return source.NewBadRecordPolicy(source.PolicyConfig{
			Source: label, OnError: source.OnError(s.OnError), DeadLetterTopic: s.DeadLetterTopic,
			Producer: j.deadLetters, Metrics: sm, Logger: opLogger,
		})
	}
	var tasks []runtime.Task
	for _, op := range g.Operators {
		p := op.Parallelism
		restores, err := restoreOperator(meta, restoreDir, storage.SharedDir(), op.Name, maxP, p)
		if err != nil {
			return nil, err
		}
		for sub := 0; sub < p; sub++ {
			opLogger := logger.With("component", "operator", "operator", op.Name, "subtask", sub)
			mailbox := runtime.NewMailbox() // shared by the task and an async operator's completions
			fn, err := op.Factory.New(operators.FactoryContext{
				Operator: op.Name, Subtask: sub, Parallelism: p, Params: op.Params, AsyncState: op.AsyncState,
				ChangelogInput: op.ChangelogInput, Metrics: om, Logger: opLogger,
				SourceSubtask: func(topic string, partition int32) (int, bool) {
					sub, ok := readers[topic][partition]
					return sub, ok
				},
			})
			if err != nil {
				return nil, fmt.Errorf("job: operator %q (%s) subtask %d: %w", op.Name, op.Type, sub, err)
			}
			if rr, ok := fn.(operators.RulesReporter); ok {
				j.reporters = append(j.reporters, subtaskRules{operator: op.Name, subtask: sub, r: rr})
			}
			kop, err := j.operator(op, sub, fn, restores[sub], b.outputs[op.Name][sub], mailbox, stateRoot, logger)
			if err != nil {
				return nil, err
			}
			bootstrap := -1
			if op.Broadcast != "" {
				bootstrap = 1
			}
			var dlw source.DeadLetterWriter
			var sides []runtime.SideOutput
			if dl.on && slices.ContainsFunc(op.ErrorSources[:], func(name string) bool {
				s := srcByName[name]
				return s != nil && s.OnError == string(source.OnErrorDeadLetter)
			}) {
				if dlw, err = dl.writer(op.Name, sub); err != nil {
					return nil, err
				}
				sides = []runtime.SideOutput{{ID: runtime.TaskID{Operator: source.DeadLetterVertex(op.Name), Subtask: sub}, Operator: dlw}}
			}
			t := runtime.NewOperatorTask(runtime.OperatorTaskConfig{
				ID: runtime.TaskID{Operator: op.Name, Subtask: sub}, Gate: runtime.NewInputGate(b.gates[op.Name][sub]),
				Operator: kop, Output: b.outputs[op.Name][sub], Mailbox: mailbox, BootstrapInput: bootstrap,
				RecordsIn: rm.RecordsIn(op.Name, sub), Responder: resp,
				Watermark:   wmm.Gauge(runtime.TaskID{Operator: op.Name, Subtask: sub}),
				BadRecords:  []runtime.BadRecordHandler{policy(op.ErrorSources[0], dlw, opLogger), policy(op.ErrorSources[1], dlw, opLogger)},
				SideOutputs: sides,
			})
			tasks = append(tasks, t)
			targets = append(targets, t)
		}
	}
	for _, sk := range g.Sinks {
		exactlyOnce := sk.Delivery.ExactlyOnce()
		timeout, pool := sk.TransactionTimeout, sk.PoolSize
		if timeout == 0 {
			timeout = sink.DefaultTransactionTimeout
		}
		if pool == 0 {
			pool = sink.DefaultPoolSize
		}
		prefix, txnSub := sk.TransactionalIDPrefix, func(sub int) int { return sub }
		if unit != nil {
			prefix, txnSub = unit.prefix(prefix), func(int) int { return unit.Index }
		}
		var partition func([]byte) int32
		if sk.Units > 0 {
			units := sk.Units
			partition = func(key []byte) int32 {
				return int32(keygroup.OperatorIndex(keygroup.Assign(key, maxP), maxP, units))
			}
		}
		if exactlyOnce {
			skm.Init(sk.Name)
			var only []string
			if unit != nil {
				for slot := range pool {
					only = append(only, sink.TransactionalID(prefix, unit.Index, slot))
				}
			}
			if err := recoverSink(ctx, sk, prefix, only, meta, len(b.gates[sk.Name]), timeout, pool, skm, deps); err != nil {
				return nil, err
			}
		}
		sinkShares, err := restoreSinkState(meta, sk.Name, len(b.gates[sk.Name]))
		if err != nil {
			return nil, err
		}
		for sub := range b.gates[sk.Name] {
			sinkLogger := logger.With("component", "sink")
			var k runtime.Operator
			if exactlyOnce {
				tps := sink.NewTwoPhaseCommitSink(sk.Name, sub, sink.NewKafkaTxnCommitter(sink.KafkaTxnConfig{
					Name: sk.Name, Subtask: txnSub(sub), Topic: sk.Topic, TransactionalIDPrefix: prefix, Partition: partition, Partitions: int32(sk.Units),
					Changelog: sinkChangelog(sk.Changelog),
					PoolSize:  pool, TransactionTimeout: timeout, IgnoreLost: sk.IgnoreLostTransactions,
					ClientOpts: deps.ClientOpts, RecordsOut: rm.RecordsOut(sk.Name, sub), Metrics: skm, Retries: metrics.kafka, Logger: sinkLogger,
				}), skm, sinkLogger)
				if unit != nil && sk.Units > 0 {
					// A unit's repartition sink carries its time across the
					// exchange (invariant 4).
					interval := set.MarkerInterval
					if interval == 0 {
						interval = sink.DefaultMarkerInterval
					}
					if err := tps.EnableMarkers(sink.MarkerConfig{Unit: runtime.MarkerUnit(unit.Stage, unit.Index), Interval: interval}); err != nil {
						return nil, err
					}
				}
				k = tps
			} else {
				ks := sink.New(sink.Config{
					Name: sk.Name, Subtask: sub, Topic: sk.Topic, Delivery: sinkDelivery(sk.Delivery), Changelog: sinkChangelog(sk.Changelog),
					ClientOpts: deps.ClientOpts, RecordsOut: rm.RecordsOut(sk.Name, sub),
					Logger: sinkLogger,
				})
				k = ks
				if sk.BufferThreshold > 0 {
					k = sink.NewBufferingSink(ks, sk.BufferThreshold, sinkShares[sub])
				}
			}
			t := runtime.NewOperatorTask(runtime.OperatorTaskConfig{
				ID: runtime.TaskID{Operator: sk.Name, Subtask: sub}, Gate: runtime.NewInputGate(b.gates[sk.Name][sub]),
				Operator: k, BootstrapInput: -1, RecordsIn: rm.RecordsIn(sk.Name, sub), Responder: resp,
				Watermark: wmm.Gauge(runtime.TaskID{Operator: sk.Name, Subtask: sub}),
			})
			tasks = append(tasks, t)
			targets = append(targets, t)
		}
	}
	// Dead-letter writers (and those of a restored checkpoint the graph no
	// longer has) commit what the checkpoint pre-committed and fence their
	// ids before any task starts, as the sinks do.
	if err := dl.recover(ctx, meta); err != nil {
		return nil, err
	}
	var firstID int64
	if meta != nil {
		firstID = meta.CheckpointID + 1
		if infos, err := storage.List(); err == nil && len(infos) > 0 {
			firstID = max(firstID, infos[len(infos)-1].ID+1)
		}
	}
	var committed func(int64, *checkpoint.Metadata)
	if unit != nil {
		l := unitLabels(unit)
		checkpoints, head := metrics.cluster.checkpoints.WithLabelValues(l...), metrics.cluster.head.WithLabelValues(l...)
		if targets := purgeTargets(g, unit); len(targets) > 0 && set.PurgeRepartitions {
			purged := metrics.cluster.purged.WithLabelValues(l...)
			j.purge = &repartitionPurge{targets: targets, logger: logger.With("component", "purge"), opts: deps.ClientOpts,
				next: make(chan kadm.Offsets, 1), done: map[string]int64{},
				purged: func(_ string, _ int32, offset int64) { purged.Set(float64(offset)) }}
		}
		committed = func(int64, *checkpoint.Metadata) {
			checkpoints.Inc()
			head.Set(float64(owner.Seq()))
		}
	}
	var commitsDone func(int64, *checkpoint.Metadata)
	if j.purge != nil {
		// The purge waits for every task's commit of the checkpoint
		// (invariant 1, step 5), as retention does.
		commitsDone = j.purge.committed
	}
	if owner != nil {
		firstID = max(firstID, owner.NextCheckpointID())
	}
	coord, err := checkpoint.NewCoordinator(checkpoint.CoordinatorConfig{
		Job: g.Job, MaxParallelism: maxP, Storage: storage, Owner: owner, Fault: deps.CheckpointFault, Committed: committed, CommitsDone: commitsDone,
		Interval: set.Interval, Timeout: set.Timeout, MinPause: set.MinPause,
		TolerableFailures: set.TolerableFailures, Incremental: set.Incremental, RequiredStates: dl.requiredStates(requiredStates(g)),
		FirstID: firstID, Logger: logger.With("component", "checkpoint"), Metrics: cm,
	}, sourceTasks, targets)
	if err != nil {
		return nil, err
	}
	resp.c = coord
	// Only a broadcast source's bootstrap holds other inputs back, so only
	// those must catch up before barriers flow (a barrier behind a held
	// input would never align). Other sources take part in checkpoints from
	// the start, also while they work through a backlog.
	for _, st := range sourceTasks {
		if !srcByName[st.ID().Operator].Broadcast {
			coord.SourceCaughtUp(st.ID())
		}
	}
	j.coordinator = coord
	j.job = runtime.NewJob(logger.With("component", "job"), deps.DrainTimeout, sources, tasks)
	return j, nil
}

// operator wraps the function fn of one subtask of op into the
// runtime.Operator its traits call for, and refuses a function of the wrong
// kind for them.
func (j *Job) operator(op *graph.Operator, sub int, fn any, restore *operators.Restore, out *runtime.Output, mailbox *runtime.Mailbox, stateRoot string, logger *slog.Logger) (runtime.Operator, error) {
	info := operators.OpenContext{Operator: op.Name, Subtask: sub, Parallelism: op.Parallelism}
	kgr := keygroup.RangeFor(j.maxP, op.Parallelism, sub)
	if u := j.settings.Unit; u != nil {
		kgr = keygroup.RangeFor(j.maxP, u.Units, u.Index)
	}
	open := j.opener(stateRoot, op.Name, sub, kgr, logger)
	tr := op.Factory.Traits
	// ProcessFunction and KeyedProcessFunction have the same methods, so
	// the traits, not the type switch, tell them apart.
	if f, ok := fn.(operators.ProcessFunction); ok && !tr.Keyed {
		return operators.NewProcessOperator(info, restore, f, out), nil
	}
	if tr.TwoInput() {
		if f, ok := fn.(operators.KeyedCoProcessFunction); ok && tr.Keyed {
			return operators.NewKeyedCoProcessOperator(info, open, restore, f, out), nil
		}
		return nil, fmt.Errorf("job: operator %q: type %s reads two inputs (%v) but built a %T, not an operators.KeyedCoProcessFunction", op.Name, op.Type, tr.Inputs, fn)
	}
	switch f := fn.(type) {
	case operators.KeyedBroadcastProcessFunction:
		if tr.Keyed && tr.Broadcast {
			return operators.NewKeyedBroadcastOperator(info, open, restore, f, out), nil
		}
	case operators.AsyncKeyedProcessFunction:
		if tr.Keyed && op.AsyncState {
			return operators.NewAsyncKeyedProcessOperator(info, open, restore, f, out, mailbox), nil
		}
	case operators.KeyedProcessFunction:
		if tr.Keyed && !tr.Broadcast && !op.AsyncState {
			return operators.NewKeyedProcessOperator(info, open, restore, f, out), nil
		}
	}
	return nil, fmt.Errorf("job: operator %q: type %s (traits %+v, async_state %v) built a %T, which does not fit its traits", op.Name, op.Type, tr, op.AsyncState, fn)
}

// recoverSink prepares an exactly-once sink before its subtasks start: it
// checks the transaction timeout against the brokers' maximum, commits the
// transactions the restored checkpoint pre-committed and fences every
// transactional id the sink may have used (old or new parallelism).
//
// A cluster-mode unit passes its prefix and, in only, exactly its own ids:
// only those are fenced.
func recoverSink(ctx context.Context, sk *graph.Sink, prefix string, only []string, meta *checkpoint.Metadata, p int, timeout time.Duration, pool int, m *sink.Metrics, deps Deps) error {
	if err := sink.CheckTransactionTimeout(ctx, deps.ClientOpts, sk.Name, timeout); err != nil {
		return err
	}
	committables, oldP, err := restoredCommittables(meta, sk.Name)
	if err != nil {
		return err
	}
	return sink.RecoverTransactions(ctx, sink.RecoverConfig{
		Name: sk.Name, ClientOpts: deps.ClientOpts, Committables: committables,
		TransactionalIDPrefix: prefix, PoolSize: pool, Subtasks: max(oldP, p), FenceOnly: only,
		TransactionTimeout: timeout, IgnoreLost: sk.IgnoreLostTransactions, Metrics: m,
		Logger: deps.Logger.With("component", "sink"),
	})
}

// restoreSinkState returns each new sink subtask's share of the sink's
// operator list states (BufferingSink's buffer); nil maps when there is
// nothing to restore.
func restoreSinkState(meta *checkpoint.Metadata, name string, p int) ([]map[string]state.OperatorListSnapshot, error) {
	if meta == nil {
		return make([]map[string]state.OperatorListSnapshot, p), nil
	}
	om, ok := meta.Operators[name]
	if !ok {
		return make([]map[string]state.OperatorListSnapshot, p), nil
	}
	old, err := checkpoint.DecodeTaskStates(om)
	if err != nil {
		return nil, fmt.Errorf("job: restore sink %q: %w", name, err)
	}
	out, err := checkpoint.RedistributeOperatorState(old, p)
	if err != nil {
		return nil, fmt.Errorf("job: restore sink %q: %w", name, err)
	}
	return out, nil
}

// responder forwards to the coordinator, which is created after the tasks.
type responder struct{ c *checkpoint.Coordinator }

func (r *responder) Acknowledge(t runtime.TaskID, id int64, s runtime.TaskSnapshot) {
	r.c.Acknowledge(t, id, s)
}
func (r *responder) Decline(t runtime.TaskID, id int64, err error) { r.c.Decline(t, id, err) }
func (r *responder) AlignmentDuration(t runtime.TaskID, id int64, d time.Duration) {
	r.c.AlignmentDuration(t, id, d)
}
func (r *responder) caughtUp(id runtime.TaskID) { r.c.SourceCaughtUp(id) }

// findRestore returns the directory and metadata to restore: the savepoint
// asked for, else the latest completed checkpoint, else none. Before
// anything is restored it refuses an inconsistent checkpoint (checkpoint.
// Verify: missing subtask states or sink committables, missing or
// truncated files; version-1 metadata is checked for committables in every
// subtask of an operator that holds any), links the shared files of a
// checkpoint of another job or checkpoints dir into the job's own shared
// directory (checkpoint.Storage.AdoptShared), and protects a checkpoint
// given explicitly from the job's retention while it runs.
func findRestore(storage *checkpoint.Storage, fromSavepoint string) (string, *checkpoint.Metadata, error) {
	var (
		dir string
		m   *checkpoint.Metadata
		err error
	)
	if fromSavepoint != "" {
		if m, err = checkpoint.ReadMetadata(fromSavepoint); err != nil {
			return "", nil, fmt.Errorf("job: --from-savepoint %s: %w", fromSavepoint, err)
		}
		dir = fromSavepoint
	} else {
		dir, m, err = storage.Latest()
		if errors.Is(err, checkpoint.ErrNoCheckpoint) {
			return "", nil, nil
		}
		if err != nil {
			return "", nil, fmt.Errorf("job: find latest checkpoint: %w", err)
		}
	}
	if err := verify(dir, m); err != nil {
		return "", nil, fmt.Errorf("job: restore %s: %w", dir, err)
	}
	if _, err := storage.AdoptShared(dir, m); err != nil {
		return "", nil, fmt.Errorf("job: restore %s: %w", dir, err)
	}
	if fromSavepoint != "" {
		storage.Protect(dir)
	}
	return dir, m, nil
}

// VerifyCheckpoint checks the checkpoint or savepoint in dir offline, as a
// restore does before it reads anything (`kstreamd checkpoints verify`):
// it returns its metadata and nil, the metadata and an error wrapping
// checkpoint.ErrInconsistent (a *checkpoint.InconsistentError listing every
// problem), or a nil metadata and the error reading it
// (checkpoint.ReadMetadata).
func VerifyCheckpoint(dir string) (*checkpoint.Metadata, error) {
	m, err := checkpoint.ReadMetadata(dir)
	if err != nil {
		return nil, err
	}
	return m, verify(dir, m)
}

// verify is checkpoint.Verify, with version-1 metadata (which records no
// required states) checked for an exactly-once sink's committables in
// every subtask of an operator that holds any.
func verify(dir string, m *checkpoint.Metadata) error {
	return checkpoint.Verify(dir, m, checkpoint.VerifyOptions{InferRequired: []string{sink.CommittablesState}})
}

// requiredStates names, per exactly-once sink of g, the state every
// subtask writes into each checkpoint (its committables), for the
// checkpoint metadata's required_states.
func requiredStates(g *graph.Graph) map[string][]string {
	out := map[string][]string{}
	for _, sk := range g.Sinks {
		if sk.Delivery.ExactlyOnce() {
			out[sk.Name] = []string{sink.CommittablesState}
		}
	}
	return out
}

// checkRestoredOperators refuses a checkpoint holding state of a vertex
// the graph no longer has (Flink refuses it too, unless told to drop it).
func checkRestoredOperators(g *graph.Graph, m *checkpoint.Metadata) error {
	for name, op := range m.Operators {
		if g.Vertex(name) || strings.HasSuffix(name, source.DeadLetterSuffix) {
			continue // a dead-letter writer's committables are committed by recovery, whatever the graph
		}
		for _, st := range op.Subtasks {
			if len(st) > 0 && string(st) != "null" {
				return fmt.Errorf("the checkpoint holds state of %q, which the pipeline no longer has: %w", name, ErrIncompatibleState)
			}
		}
	}
	return nil
}

// sourceReaders returns which subtask of s reads each of its topic's
// partitions: a restored split's holder, else AssignPartition (as
// KafkaSource.assign does).
func sourceReaders(s *graph.Source, partitions int32, restored []*source.Restored) map[int32]int {
	out := map[int32]int{}
	for sub, r := range restored {
		if r == nil {
			continue
		}
		for _, sp := range r.Splits {
			out[sp.Partition] = sub
		}
	}
	for p := int32(0); p < partitions; p++ {
		if _, ok := out[p]; !ok {
			out[p] = source.AssignPartition(s.Topic, p, s.Parallelism)
		}
	}
	return out
}

// restoreSource returns each new subtask's share of the restored splits
// (even-split redistribution) with every partition the checkpoint knew;
// nil entries when the source is not in the checkpoint.
func restoreSource(m *checkpoint.Metadata, s *graph.Source, p int) ([]*source.Restored, error) {
	out := make([]*source.Restored, p)
	if m == nil {
		return out, nil
	}
	om, ok := m.Operators[s.Name]
	if !ok {
		return out, nil
	}
	old, err := checkpoint.DecodeTaskStates(om)
	if err != nil {
		return nil, fmt.Errorf("job: restore source %q: %w", s.Name, err)
	}
	shares, err := checkpoint.RedistributeOperatorState(old, p)
	if err != nil {
		return nil, fmt.Errorf("job: restore source %q: %w", s.Name, err)
	}
	var known []int32
	for i, share := range shares {
		r := &source.Restored{}
		for _, e := range share[source.SplitsState].Entries {
			var sp source.Split
			if err := json.Unmarshal(e, &sp); err != nil {
				return nil, fmt.Errorf("job: restore source %q: split %s: %w", s.Name, e, err)
			}
			if sp.Topic != s.Topic {
				continue // the source was pointed at another topic: start fresh there
			}
			r.Splits = append(r.Splits, sp)
			known = append(known, sp.Partition)
		}
		out[i] = r
	}
	slices.Sort(known)
	for _, r := range out {
		r.Known = known
	}
	return out, nil
}

// restoreOperator returns each new subtask's restore of a keyed operator:
// keyed snapshots by key-group range, operator state redistributed, and one
// broadcast copy; nil entries when the operator is not in the checkpoint.
func restoreOperator(m *checkpoint.Metadata, dir, sharedDir, name string, maxP, p int) ([]*operators.Restore, error) {
	out := make([]*operators.Restore, p)
	if m == nil {
		return out, nil
	}
	om, ok := m.Operators[name]
	if !ok {
		return out, nil
	}
	old, err := checkpoint.DecodeTaskStates(om)
	if err != nil {
		return nil, fmt.Errorf("job: restore operator %q: %w", name, err)
	}
	keyed := checkpoint.RedistributeKeyed(old, maxP, p)
	opStates, err := checkpoint.RedistributeOperatorState(old, p)
	if err != nil {
		return nil, fmt.Errorf("job: restore operator %q: %w", name, err)
	}
	bc := checkpoint.RedistributeBroadcast(old, p)
	for i := range out {
		r := &operators.Restore{Operator: opStates[i], Broadcast: bc[i]}
		for _, kh := range keyed[i] {
			r.Keyed = append(r.Keyed, state.RestoreHandle{Handle: kh.Handle, Dir: dir, SharedDir: sharedDir})
		}
		out[i] = r
	}
	return out, nil
}

// Run runs the job and its checkpoint coordinator until ctx ends (then the
// job drains and Run returns nil) or a subtask fails or too many checkpoints
// fail (then it returns the failure). It releases the shared block cache when
// it returns.
func (j *Job) Run(ctx context.Context) error {
	defer j.cache.Close()
	defer j.metrics.stateSize.clear()
	if j.deadLetters != nil {
		defer j.deadLetters.Close()
	}
	jobCtx, stopJob := context.WithCancel(ctx)
	defer stopJob()
	if j.purge != nil {
		purgeCtx, stopPurge := context.WithCancel(ctx)
		purgeDone := make(chan struct{})
		go func() { defer close(purgeDone); j.purge.run(purgeCtx) }()
		defer func() { stopPurge(); <-purgeDone }()
	}
	coordCtx, stopCoord := context.WithCancel(ctx)
	coordDone := make(chan error, 1)
	go func() { coordDone <- j.coordinator.Run(coordCtx) }()
	jobDone := make(chan error, 1)
	go func() { jobDone <- j.job.Run(jobCtx) }()
	defer func() {
		// Every task returned: no snapshot is being written any more. Not
		// so for a cluster-mode unit: another owner may have taken it
		// over and be writing its next checkpoint in the same namespace
		// (a zombie must delete nothing: docs/scale-out.md, invariant 1);
		// only the owner's retention (Owner.Retain after its commits)
		// deletes in the store, and the unit's local staging copy is
		// cleared by its next Build.
		if j.settings.Unit != nil {
			return
		}
		if err := j.storage.DiscardIncomplete(); err != nil {
			j.logger.Warn("could not discard incomplete checkpoints", "err", err)
		}
	}()
	select {
	case err := <-jobDone:
		stopCoord()
		<-coordDone
		return err
	case cerr := <-coordDone:
		// The coordinator gave up (too many failed checkpoints): stop the job.
		stopJob()
		err := <-jobDone
		stopCoord()
		if cerr != nil {
			return cerr
		}
		return err
	}
}

// Status describes a running job (the HTTP API's GET /api/v1/job).
type Status struct {
	Name           string         `json:"name"`
	Ready          bool           `json:"ready"`
	RestoredFrom   string         `json:"restored_from,omitempty"`
	MaxParallelism int            `json:"max_parallelism"`
	Operators      []VertexStatus `json:"operators"`
	// LastCheckpointID is the last checkpoint or savepoint completed by this
	// run (0: none yet); LastCheckpointTime when it completed.
	LastCheckpointID   int64     `json:"last_checkpoint_id"`
	LastCheckpointTime time.Time `json:"last_checkpoint_time,omitempty"`
}

// VertexStatus is one vertex of the job graph.
type VertexStatus struct {
	Name        string `json:"name"`
	Kind        string `json:"kind"` // source, operator or sink
	Type        string `json:"type,omitempty"`
	Topic       string `json:"topic,omitempty"`
	Parallelism int    `json:"parallelism"`
}

// Readiness reports whether the job is ready (the HTTP API's /readyz):
// every broadcast source has read up to the end offsets it saw at start
// (the rules are bootstrapped) and every source subtask reads all its
// partitions (restored, start offsets looked up, none unavailable:
// source.KafkaSource.Readiness). When it is not, reason says why, naming
// the sources, subtasks and partitions (topic/partition and the error of
// an unavailable one). Safe for concurrent use.
func (j *Job) Readiness() (ready bool, reason string) {
	var why []string
	if !j.coordinator.Ready() {
		why = append(why, "a broadcast source is still reading up to the end offsets it saw at start (bootstrapping rules)")
	}
	for _, src := range j.sources {
		if ok, detail := src.Readiness(); !ok {
			why = append(why, detail)
		}
	}
	return len(why) == 0, strings.Join(why, "; ")
}

// Status returns the job's status. Safe for concurrent use.
func (j *Job) Status() Status {
	ready, _ := j.Readiness()
	st := Status{Name: j.g.Job, Ready: ready, RestoredFrom: j.restoredDir, MaxParallelism: j.maxP}
	st.LastCheckpointID, st.LastCheckpointTime = j.coordinator.LastCompleted()
	for _, s := range j.g.Sources {
		st.Operators = append(st.Operators, VertexStatus{Name: s.Name, Kind: "source", Topic: s.Topic, Parallelism: s.Parallelism})
	}
	for _, o := range j.g.Operators {
		st.Operators = append(st.Operators, VertexStatus{Name: o.Name, Kind: "operator", Type: o.Type, Parallelism: o.Parallelism})
	}
	for _, s := range j.g.Sinks {
		st.Operators = append(st.Operators, VertexStatus{Name: s.Name, Kind: "sink", Type: s.Delivery.String(), Topic: s.Topic, Parallelism: s.Parallelism})
	}
	return st
}

// Storage returns the job's checkpoint storage.
func (j *Job) Storage() *checkpoint.Storage { return j.storage }

// Coordinator returns the job's checkpoint coordinator (savepoints,
// readiness).
func (j *Job) Coordinator() *checkpoint.Coordinator { return j.coordinator }

// RestoredFrom returns the checkpoint or savepoint directory the job
// restored, or "" for a fresh start.
func (j *Job) RestoredFrom() string { return j.restoredDir }

// TriggerSavepoint takes a savepoint into dir ("" means the configured
// savepoint directory) and returns its path; with stop the job stops right
// after it (stop-with-savepoint). See checkpoint.Coordinator.TriggerSavepoint.
func (j *Job) TriggerSavepoint(ctx context.Context, dir string, stop bool) (string, error) {
	if dir == "" {
		dir = j.settings.SavepointDir
	}
	return j.coordinator.TriggerSavepoint(ctx, dir, stop)
}

// opener returns the state backend opener of one keyed subtask: its Pebble
// DB lives in <state dir>/<job>/<operator>/subtask-<i>.
func (j *Job) opener(root, op string, sub int, kgr keygroup.Range, logger *slog.Logger) operators.BackendOpener {
	return func(restore []state.RestoreHandle) (state.KeyedStateBackend, error) {
		b, err := state.OpenBackendRestored(state.BackendConfig{
			Kind:           j.settings.StateBackend,
			Dir:            filepath.Join(root, op, "subtask-"+strconv.Itoa(sub)),
			MaxParallelism: j.maxP,
			KeyGroupRange:  kgr,
			Cache:          j.cache,
			Logger:         logger.With("operator", op, "subtask", sub),
		}, restore)
		if err != nil {
			return nil, err
		}
		if du, ok := b.(state.DiskUser); ok {
			j.metrics.stateSize.set(op, sub, du)
		}
		return b, nil
	}
}

// discover returns the partition count of every source topic.
func discover(ctx context.Context, g *graph.Graph, deps Deps) (map[string]int32, error) {
	cl, err := kgo.NewClient(deps.ClientOpts...)
	if err != nil {
		return nil, fmt.Errorf("job: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	out := map[string]int32{}
	for _, s := range g.Sources {
		n, err := source.Discover(ctx, adm, deps.Logger.With("component", "source", "source", s.Name), s.Topic)
		if err != nil {
			return nil, fmt.Errorf("job: source %q: %w", s.Name, err)
		}
		out[s.Topic] = n
	}
	return out, nil
}
