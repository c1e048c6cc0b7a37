package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/broadcast"
	"github.com/kstreamd/kstreamd/checkpoint"
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
	// FromSavepoint, if not empty, is a savepoint (or checkpoint) directory
	// to restore instead of the job's latest checkpoint.
	FromSavepoint string
}

// ClientOptions returns the franz-go options of the config's Kafka clients:
// seed brokers, client id, and the TLS dialer and SASL mechanism of
// kafka.tls and kafka.sasl, which Validate (run by Load) must have loaded
// (else dials or authentication fail with ErrSecurityNotLoaded).
func (c *Config) ClientOptions() []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers()...), kgo.ClientID(c.Kafka.ClientID)}
	return append(opts, c.Kafka.securityOptions()...)
}

// ErrMaxParallelismChanged is wrapped by Build's error when the restored
// checkpoint has another max parallelism than the config asks for.
var ErrMaxParallelismChanged = state.ErrMaxParallelismChanged

// Job is a job graph built from a Config, ready to run.
type Job struct {
	cfg         *Config
	job         *runtime.Job
	coordinator *checkpoint.Coordinator
	storage     *checkpoint.Storage
	logger      *slog.Logger
	reg         prometheus.Registerer
	maxP        int
	cache       *state.BlockCache
	restoredDir string
}

// Build turns a validated config into a runnable job. It finds what to
// restore (deps.FromSavepoint, else the job's latest completed checkpoint,
// else nothing), checks the max parallelism against it, discovers the
// partitions of every source topic (retrying while the brokers cannot be
// reached, until ctx ends), wires subtasks and channels, and redistributes
// the restored state over the configured parallelism. The local state
// directory is rebuilt from the checkpoint (or emptied when there is none).
func Build(ctx context.Context, cfg *Config, deps Deps) (*Job, error) {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	logger := deps.Logger
	storage := checkpoint.NewStorage(cfg.CheckpointDir(), cfg.Job.Name, cfg.Checkpoints.Retained, logger.With("component", "checkpoint"))
	restoreDir, meta, err := findRestore(storage, deps.FromSavepoint)
	if err != nil {
		return nil, err
	}
	maxP := cfg.MaxParallelism()
	if meta != nil {
		if meta.MaxParallelism != maxP {
			if cfg.Job.MaxParallelism != 0 {
				return nil, fmt.Errorf("pipeline: restore %s: the checkpoint has max parallelism %d, the config sets job.max_parallelism %d; it cannot change across a restore: %w",
					restoreDir, meta.MaxParallelism, maxP, ErrMaxParallelismChanged)
			}
			maxP = meta.MaxParallelism // not set explicitly: keep the checkpoint's, as Flink does
		}
		for _, op := range cfg.Operators {
			if p := cfg.OperatorParallelism(&op); p > maxP {
				return nil, fmt.Errorf("pipeline: operator %q: parallelism %d exceeds the restored max parallelism %d", op.Name, p, maxP)
			}
		}
		if err := checkRestoredOperators(cfg, meta); err != nil {
			return nil, fmt.Errorf("pipeline: restore %s: %w", restoreDir, err)
		}
		logger.Info("restoring", "dir", restoreDir, "checkpoint_id", meta.CheckpointID, "savepoint", meta.Savepoint, "max_parallelism", maxP)
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
	cm, err := checkpoint.NewMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	partitions, err := discover(ctx, cfg, deps)
	if err != nil {
		return nil, err
	}
	b := &builder{cfg: cfg, deps: deps, maxP: maxP, outputs: map[string][]*runtime.Output{}, gates: map[string][][]runtime.InputChannel{}}
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
		if len(b.outputs[sk.Input]) == p {
			b.connectForward(sk.Input, sk.Name, p)
		} else {
			b.connect(sk.Input, sk.Name, 0, p, &runtime.RebalancePartitioner{})
		}
	}

	stateRoot := filepath.Join(cfg.StateDir(), cfg.Job.Name)
	if err := os.RemoveAll(stateRoot); err != nil {
		return nil, fmt.Errorf("pipeline: clear state dir: %w", err)
	}
	j := &Job{cfg: cfg, storage: storage, logger: logger, reg: deps.Registerer, maxP: maxP, cache: state.NewBlockCache(cfg.State.BlockCacheBytes), restoredDir: restoreDir}
	resp := &responder{}

	var sources []runtime.Task
	var sourceTasks []runtime.SourceTask
	var targets []runtime.CheckpointTarget
	for i := range cfg.Sources {
		s := &cfg.Sources[i]
		plan := b.sourcePlans[s.Name]
		p := len(b.outputs[s.Name])
		sm.Init(s.Name)
		restored, err := restoreSource(meta, s, p)
		if err != nil {
			return nil, err
		}
		for sub := 0; sub < p; sub++ {
			id := runtime.TaskID{Operator: s.Name, Subtask: sub}
			src := source.New(source.Config{
				Name: s.Name, Topic: s.Topic, Partitions: partitions[s.Topic],
				Subtask: sub, Parallelism: p, StartFrom: source.StartFrom(s.StartFrom), Restored: restored[sub],
				DiscoveryInterval: s.PartitionDiscoveryInterval, Group: "kstreamd-" + cfg.Job.Name,
				KeyBy: plan.keyBy, Tombstones: plan.tombstones, Check: plan.check,
				OnError: source.OnError(s.OnError), DeadLetterTopic: s.DeadLetterTopic, MaxRecordBytes: s.MaxRecordBytes,
				ClientOpts: deps.ClientOpts, Output: b.outputs[s.Name][sub], Responder: resp,
				OnCaughtUp: func() { resp.caughtUp(id) },
				RecordsIn:  rm.RecordsIn(s.Name, sub), Metrics: sm,
				Logger: logger.With("component", "source"),
			})
			sources = append(sources, src)
			sourceTasks = append(sourceTasks, src)
			targets = append(targets, src)
		}
	}
	var tasks []runtime.Task
	for i := range cfg.Operators {
		op := &cfg.Operators[i]
		p := len(b.outputs[op.Name])
		restores, err := restoreOperator(meta, restoreDir, storage.SharedDir(), op.Name, maxP, p)
		if err != nil {
			return nil, err
		}
		for sub := 0; sub < p; sub++ {
			info := operators.OpenContext{Operator: op.Name, Subtask: sub, Parallelism: p}
			opener := j.opener(stateRoot, op.Name, sub, p, maxP, logger)
			opLogger := logger.With("component", "operator", "operator", op.Name, "subtask", sub)
			var kop *operators.KeyedOperator
			mailbox := runtime.NewMailbox() // shared by the task and an async operator's completions
			switch op.Type {
			case OperatorShapePairMatcher:
				kop = operators.NewKeyedBroadcastOperator(info, opener, restores[sub], &operators.ShapePairMatcher{Metrics: om, Logger: opLogger}, b.outputs[op.Name][sub])
			case OperatorCountWindowAverage:
				if op.AsyncState {
					kop = operators.NewAsyncKeyedProcessOperator(info, opener, restores[sub], &operators.AsyncCountWindowAverage{}, b.outputs[op.Name][sub], mailbox)
				} else {
					kop = operators.NewKeyedProcessOperator(info, opener, restores[sub], &operators.CountWindowAverage{}, b.outputs[op.Name][sub])
				}
			case OperatorKeyedCount:
				if op.AsyncState {
					kop = operators.NewAsyncKeyedProcessOperator(info, opener, restores[sub], &operators.AsyncKeyedCount{}, b.outputs[op.Name][sub], mailbox)
				} else {
					kop = operators.NewKeyedProcessOperator(info, opener, restores[sub], &operators.KeyedCount{}, b.outputs[op.Name][sub])
				}
			default:
				return nil, fmt.Errorf("pipeline: operators[%d]: unknown type %q", i, op.Type)
			}
			bootstrap := -1
			if op.Broadcast != "" {
				bootstrap = 1
			}
			t := runtime.NewOperatorTask(runtime.OperatorTaskConfig{
				ID: runtime.TaskID{Operator: op.Name, Subtask: sub}, Gate: runtime.NewInputGate(b.gates[op.Name][sub]),
				Operator: kop, Output: b.outputs[op.Name][sub], Mailbox: mailbox, BootstrapInput: bootstrap,
				RecordsIn: rm.RecordsIn(op.Name, sub), Responder: resp,
			})
			tasks = append(tasks, t)
			targets = append(targets, t)
		}
	}
	skm, err := sink.NewMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	for i := range cfg.Sinks {
		sk := &cfg.Sinks[i]
		exactlyOnce := sk.Delivery == DeliveryExactlyOnce
		timeout, pool := sk.TransactionTimeout, sk.PoolSize
		if timeout == 0 {
			timeout = 15 * time.Minute
		}
		if pool == 0 {
			pool = sink.DefaultPoolSize
		}
		if exactlyOnce {
			skm.Init(sk.Name)
			if err := recoverSink(ctx, cfg, sk, meta, len(b.gates[sk.Name]), timeout, pool, skm, deps); err != nil {
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
				k = sink.NewTwoPhaseCommitSink(sk.Name, sub, sink.NewKafkaTxnCommitter(sink.KafkaTxnConfig{
					Name: sk.Name, Subtask: sub, Topic: sk.Topic, TransactionalIDPrefix: cfg.TransactionalIDPrefix(sk),
					PoolSize: pool, TransactionTimeout: timeout, IgnoreLost: sk.IgnoreLostTransactions,
					ClientOpts: deps.ClientOpts, RecordsOut: rm.RecordsOut(sk.Name, sub), Metrics: skm, Logger: sinkLogger,
				}), skm, sinkLogger)
			} else {
				ks := sink.New(sink.Config{
					Name: sk.Name, Subtask: sub, Topic: sk.Topic, Delivery: sink.Delivery(sk.Delivery),
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
			})
			tasks = append(tasks, t)
			targets = append(targets, t)
		}
	}
	var firstID int64
	if meta != nil {
		firstID = meta.CheckpointID + 1
		if infos, err := storage.List(); err == nil && len(infos) > 0 {
			firstID = max(firstID, infos[len(infos)-1].ID+1)
		}
	}
	coord, err := checkpoint.NewCoordinator(checkpoint.CoordinatorConfig{
		Job: cfg.Job.Name, MaxParallelism: maxP, Storage: storage,
		Interval: cfg.Checkpoints.Interval, Timeout: cfg.Checkpoints.Timeout, MinPause: cfg.Checkpoints.MinPause,
		TolerableFailures: cfg.Checkpoints.TolerableFailures, Incremental: cfg.Checkpoints.Incremental,
		FirstID: firstID, Logger: logger.With("component", "checkpoint"), Metrics: cm,
	}, sourceTasks, targets)
	if err != nil {
		return nil, err
	}
	resp.c = coord
	// Only a broadcast source's bootstrap holds other inputs back, so only
	// those must catch up before barriers flow (a barrier behind a held
	// input would never align). Keyed sources take part in checkpoints from
	// the start, also while they work through a backlog.
	for _, st := range sourceTasks {
		if !b.sourcePlans[st.ID().Operator].tombstones {
			coord.SourceCaughtUp(st.ID())
		}
	}
	j.coordinator = coord
	j.job = runtime.NewJob(logger.With("component", "job"), deps.DrainTimeout, sources, tasks)
	return j, nil
}

// recoverSink prepares an exactly-once sink before its subtasks start: it
// checks the transaction timeout against the brokers' maximum, commits the
// transactions the restored checkpoint pre-committed and fences every
// transactional id the sink may have used (old or new parallelism).
func recoverSink(ctx context.Context, cfg *Config, sk *SinkConfig, meta *checkpoint.Metadata, p int, timeout time.Duration, pool int, m *sink.Metrics, deps Deps) error {
	if err := sink.CheckTransactionTimeout(ctx, deps.ClientOpts, sk.Name, timeout); err != nil {
		return err
	}
	var committables []sink.Committable
	oldP := 0
	if meta != nil {
		if om, ok := meta.Operators[sk.Name]; ok {
			oldP = om.Parallelism
			old, err := checkpoint.DecodeTaskStates(om)
			if err != nil {
				return fmt.Errorf("pipeline: restore sink %q: %w", sk.Name, err)
			}
			for _, ts := range old {
				for _, e := range ts.Operator[sink.CommittablesState].Entries {
					var c sink.Committable
					if err := json.Unmarshal(e, &c); err != nil {
						return fmt.Errorf("pipeline: restore sink %q: committable %s: %w", sk.Name, e, err)
					}
					committables = append(committables, c)
				}
			}
		}
	}
	return sink.RecoverTransactions(ctx, sink.RecoverConfig{
		Name: sk.Name, ClientOpts: deps.ClientOpts, Committables: committables,
		TransactionalIDPrefix: cfg.TransactionalIDPrefix(sk), PoolSize: pool, Subtasks: max(oldP, p),
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
		return nil, fmt.Errorf("pipeline: restore sink %q: %w", name, err)
	}
	out, err := checkpoint.RedistributeOperatorState(old, p)
	if err != nil {
		return nil, fmt.Errorf("pipeline: restore sink %q: %w", name, err)
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
// asked for, else the latest completed checkpoint, else none.
func findRestore(storage *checkpoint.Storage, fromSavepoint string) (string, *checkpoint.Metadata, error) {
	if fromSavepoint != "" {
		m, err := checkpoint.ReadMetadata(fromSavepoint)
		if err != nil {
			return "", nil, fmt.Errorf("pipeline: --from-savepoint %s: %w", fromSavepoint, err)
		}
		return fromSavepoint, m, nil
	}
	dir, m, err := storage.Latest()
	if errors.Is(err, checkpoint.ErrNoCheckpoint) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("pipeline: find latest checkpoint: %w", err)
	}
	return dir, m, nil
}

// checkRestoredOperators refuses a checkpoint holding state of an operator
// the job no longer has (Flink refuses it too, unless told to drop it).
func checkRestoredOperators(cfg *Config, m *checkpoint.Metadata) error {
	for name, op := range m.Operators {
		_, isSource := cfg.SourceByName(name)
		_, isOp := cfg.OperatorByName(name)
		_, isSink := cfg.SinkByName(name)
		if isSource || isOp || isSink {
			continue
		}
		for _, st := range op.Subtasks {
			if len(st) > 0 && string(st) != "null" {
				return fmt.Errorf("the checkpoint holds state of %q, which the pipeline no longer has", name)
			}
		}
	}
	return nil
}

// restoreSource returns each new subtask's share of the restored splits
// (even-split redistribution) with every partition the checkpoint knew;
// nil entries when the source is not in the checkpoint.
func restoreSource(m *checkpoint.Metadata, s *SourceConfig, p int) ([]*source.Restored, error) {
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
		return nil, fmt.Errorf("pipeline: restore source %q: %w", s.Name, err)
	}
	shares, err := checkpoint.RedistributeOperatorState(old, p)
	if err != nil {
		return nil, fmt.Errorf("pipeline: restore source %q: %w", s.Name, err)
	}
	var known []int32
	for i, share := range shares {
		r := &source.Restored{}
		for _, e := range share[source.SplitsState].Entries {
			var sp source.Split
			if err := json.Unmarshal(e, &sp); err != nil {
				return nil, fmt.Errorf("pipeline: restore source %q: split %s: %w", s.Name, e, err)
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
		return nil, fmt.Errorf("pipeline: restore operator %q: %w", name, err)
	}
	keyed := checkpoint.RedistributeKeyed(old, maxP, p)
	opStates, err := checkpoint.RedistributeOperatorState(old, p)
	if err != nil {
		return nil, fmt.Errorf("pipeline: restore operator %q: %w", name, err)
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
	jobCtx, stopJob := context.WithCancel(ctx)
	defer stopJob()
	coordCtx, stopCoord := context.WithCancel(ctx)
	coordDone := make(chan error, 1)
	go func() { coordDone <- j.coordinator.Run(coordCtx) }()
	jobDone := make(chan error, 1)
	go func() { jobDone <- j.job.Run(jobCtx) }()
	defer func() {
		// Every task returned: no snapshot is being written any more.
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

// JobStatus describes a running job (the HTTP API's GET /api/v1/job).
type JobStatus struct {
	Name           string           `json:"name"`
	Ready          bool             `json:"ready"`
	RestoredFrom   string           `json:"restored_from,omitempty"`
	MaxParallelism int              `json:"max_parallelism"`
	Operators      []OperatorStatus `json:"operators"`
	// LastCheckpointID is the last checkpoint or savepoint completed by this
	// run (0: none yet); LastCheckpointTime when it completed.
	LastCheckpointID   int64     `json:"last_checkpoint_id"`
	LastCheckpointTime time.Time `json:"last_checkpoint_time,omitempty"`
}

// OperatorStatus is one stage of the job graph.
type OperatorStatus struct {
	Name        string `json:"name"`
	Kind        string `json:"kind"` // source, operator or sink
	Type        string `json:"type,omitempty"`
	Topic       string `json:"topic,omitempty"`
	Parallelism int    `json:"parallelism"`
}

// Status returns the job's status. Safe for concurrent use.
func (j *Job) Status() JobStatus {
	st := JobStatus{Name: j.cfg.Job.Name, Ready: j.coordinator.Ready(), RestoredFrom: j.restoredDir, MaxParallelism: j.maxP}
	st.LastCheckpointID, st.LastCheckpointTime = j.coordinator.LastCompleted()
	for i := range j.cfg.Sources {
		s := &j.cfg.Sources[i]
		st.Operators = append(st.Operators, OperatorStatus{Name: s.Name, Kind: "source", Topic: s.Topic, Parallelism: j.cfg.SourceParallelism(s)})
	}
	for i := range j.cfg.Operators {
		o := &j.cfg.Operators[i]
		st.Operators = append(st.Operators, OperatorStatus{Name: o.Name, Kind: "operator", Type: o.Type, Parallelism: j.cfg.OperatorParallelism(o)})
	}
	for i := range j.cfg.Sinks {
		s := &j.cfg.Sinks[i]
		st.Operators = append(st.Operators, OperatorStatus{Name: s.Name, Kind: "sink", Type: string(s.Delivery), Topic: s.Topic, Parallelism: j.cfg.SinkParallelism(s)})
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
		dir = j.cfg.SavepointDir()
	}
	return j.coordinator.TriggerSavepoint(ctx, dir, stop)
}

// opener returns the state backend opener of one keyed subtask: its Pebble
// DB lives in <state dir>/<job>/<operator>/subtask-<i>.
func (j *Job) opener(root, op string, sub, p, maxP int, logger *slog.Logger) operators.BackendOpener {
	return func(restore []state.RestoreHandle) (state.KeyedStateBackend, error) {
		b, err := state.OpenBackendRestored(state.BackendConfig{
			Kind:           string(j.cfg.State.Backend),
			Dir:            filepath.Join(root, op, "subtask-"+strconv.Itoa(sub)),
			MaxParallelism: maxP,
			KeyGroupRange:  keygroup.RangeFor(maxP, p, sub),
			Cache:          j.cache,
			Logger:         logger.With("operator", op, "subtask", sub),
		}, restore)
		if err != nil {
			return nil, err
		}
		if du, ok := b.(state.DiskUser); ok && j.reg != nil {
			g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "kstreamd_state_size_bytes",
				Help:        "Disk space of a keyed operator subtask's Pebble state (SST files, WAL and manifest).",
				ConstLabels: prometheus.Labels{"operator": op, "subtask": strconv.Itoa(sub)},
			}, func() float64 { n, _ := du.DiskSpaceUsage(); return float64(n) })
			if err := j.reg.Register(g); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					return nil, err
				}
			}
		}
		return b, nil
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
	check      func(key, value []byte) error // broadcast rules: decode, so a bad rule meets the bad-record policy
}

// checkRule refuses a rules-topic record that does not decode as a rule.
func checkRule(key, value []byte) error {
	_, err := broadcast.DecodeRule(key, value)
	return err
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
		if op.Type == OperatorShapePairMatcher {
			plan.check = checkRule
		}
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
		outs[i].SetBackPressure(rm.BackPressure(name, i))
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
