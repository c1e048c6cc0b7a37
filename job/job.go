package job

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/runtime"
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
	// StateWriteCacheBytes is each pebble keyed subtask's write cache
	// (state.BackendConfig.WriteCacheBytes: 0 the 16 MiB default, -1
	// none).
	StateWriteCacheBytes int64
	// StateL0CompactionThreshold is each pebble keyed subtask's L0
	// compaction threshold (state.BackendConfig.L0CompactionThreshold: 0
	// the default, 16).
	StateL0CompactionThreshold int
	// RemoteState, if not nil, makes the pebble backend disaggregated
	// (state.RemoteConfig): SST files on the object store
	// <CheckpointDir>/<job>/remote, checkpoints by reference (always, as
	// if Incremental). Its Dir is ignored (set from the checkpoint
	// storage).
	RemoteState *state.RemoteConfig
	// UnitRemoteStore, with Unit and RemoteState, returns the remote
	// state store of the cluster-mode unit (stage, index): the one store
	// (a directory of the shared filesystem, or a prefix of an S3 bucket)
	// every owner of that unit, on any daemon, uses, and only that unit
	// (docs/scale-out.md "Remote state in cluster mode"). Required then;
	// RemoteState.Store is ignored for a unit.
	UnitRemoteStore func(stage, index int) (remote.Storage, error)
	// Checkpoints configures the coordinator: Interval 0 means no periodic
	// checkpoints.
	Interval, Timeout, MinPause time.Duration
	TolerableFailures, Retained int
	Incremental                 bool
	// AllowNonRestoredState makes a restore drop, logging each, the state
	// of vertices (by uid) the graph no longer has instead of refusing the
	// checkpoint (Flink's --allowNonRestoredState).
	AllowNonRestoredState bool
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
	// Restores, if not nil, decides whether the unit's graph restores a
	// HEAD written by another graph (fingerprint): nil when it does (a
	// state-compatible upgrade, docs/scale-out.md "Upgrades"), else the
	// error refusing it. Nil: only the unit's own graph is restored.
	Restores func(ctx context.Context, fingerprint string) error
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
	// Connectors holds the source, sink and format types the graph's
	// vertices name (connector.Registry); nil means NewBuiltinConnectors.
	Connectors *connector.Registry
	// CheckpointFault, if not nil, is the coordinator's fault-injection
	// seam (checkpoint.CoordinatorConfig.Fault) for tests of a unit's
	// commit order; no pipeline config sets it.
	CheckpointFault func(point checkpoint.FaultPoint, checkpointID int64) bool
	// SignalWindow is the sliding window of the per-subtask signals
	// (busy, back-pressured and idle time, records in and out per second:
	// Status, kstreamd_operator_*_time_ms_per_second); 0 means
	// DefaultSignalWindow.
	SignalWindow time.Duration
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
	restarts    []Restart   // the restarts before this attempt (restartLoop); set before it runs
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
	// resources are the connectors' and formats' shared resources, closed
	// when Run returns.
	resources *connector.Resources
	// signals are the subtasks' busy/back-pressured/idle times, rates and
	// watermarks (signals.go), sampled while Run runs.
	signals *signals
	// queries are the keyed operator subtasks QueryState reads (query.go).
	queries queries
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

// operator wraps the function fn of one subtask of op into the
// runtime.Operator its traits call for, and refuses a function of the wrong
// kind for them.
func (j *Job) operator(op *graph.Operator, sub int, fn any, restore *operators.Restore, out *runtime.Output, mailbox *runtime.Mailbox, sc scope, logger *slog.Logger) (runtime.Operator, error) {
	info := operators.OpenContext{Operator: op.Name, Subtask: sub, Parallelism: op.Parallelism}
	open := j.opener(sc.stateRoot, op.Name, sub, sc.keyGroups(j.maxP, op.Parallelism, sub), logger)
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

// Run runs the job and its checkpoint coordinator until ctx ends (then the
// job drains and Run returns nil) or a subtask fails or too many checkpoints
// fail (then it returns the failure). It releases the shared block cache when
// it returns.
func (j *Job) Run(ctx context.Context) error {
	defer j.queries.stop()
	defer func() {
		if err := j.resources.Close(); err != nil {
			j.logger.Warn("could not close the connectors' resources", "err", err)
		}
	}()
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
	sigCtx, stopSignals := context.WithCancel(ctx)
	sigDone := make(chan struct{})
	go func() { defer close(sigDone); j.signals.run(sigCtx) }()
	defer func() { stopSignals(); <-sigDone }()
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
	// Edges are the graph's edges between the Operators' ids
	// (signals.go).
	Edges []EdgeStatus `json:"edges"`
	// Restarts are the newest restarts of the job in this process before
	// the running attempt, oldest first, with their causes.
	Restarts []Restart `json:"restarts"`
}

// VertexStatus is one vertex of the job graph with its signals
// (signals.go): ID is its uid; Subtasks each subtask's; the totals are
// the records of every subtask per second, the highest busy and
// back-pressured time of a subtask, the lowest watermark (omitted until
// every subtask has one) and the state's disk space (Pebble; omitted when
// not known).
type VertexStatus struct {
	ID                  string          `json:"id"`
	Name                string          `json:"name"`
	Kind                string          `json:"kind"` // source, operator or sink
	Type                string          `json:"type,omitempty"`
	Topic               string          `json:"topic,omitempty"`
	Parallelism         int             `json:"parallelism"`
	Subtasks            []SubtaskStatus `json:"subtasks"`
	RecordsInPerS       float64         `json:"records_in_per_s"`
	RecordsOutPerS      float64         `json:"records_out_per_s"`
	BusyMsPerS          float64         `json:"busy_ms_per_s"`
	BackPressuredMsPerS float64         `json:"backpressured_ms_per_s"`
	WatermarkMs         *int64          `json:"watermark_ms,omitempty"`
	StateBytes          *int64          `json:"state_bytes,omitempty"`
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
	st.Restarts = j.restartHistory()
	for _, s := range j.g.Sources {
		st.Operators = append(st.Operators, VertexStatus{Name: s.Name, Kind: "source", Topic: s.TopicDesc(), Parallelism: s.Parallelism})
	}
	for _, o := range j.g.Operators {
		st.Operators = append(st.Operators, VertexStatus{Name: o.Name, Kind: "operator", Type: o.Type, Parallelism: o.Parallelism})
	}
	for _, s := range j.g.Sinks {
		st.Operators = append(st.Operators, VertexStatus{Name: s.Name, Kind: "sink", Type: s.Delivery.String(), Topic: s.Topic, Parallelism: s.Parallelism})
	}
	j.fillSignals(&st)
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
// DB lives in <state dir>/<job>/<operator>/subtask-<i>, a scratch directory
// (build clears the state root at every start and restart, and state comes
// back only from checkpoints), so the DB does not fsync
// (state.BackendConfig.NoSync).
func (j *Job) opener(root, op string, sub int, kgr keygroup.Range, logger *slog.Logger) operators.BackendOpener {
	return func(restore []state.RestoreHandle) (state.KeyedStateBackend, error) {
		b, err := state.OpenBackendRestored(state.BackendConfig{
			Kind:            j.settings.StateBackend,
			Dir:             filepath.Join(root, op, "subtask-"+strconv.Itoa(sub)),
			NoSync:          true,
			MaxParallelism:  j.maxP,
			KeyGroupRange:   kgr,
			Cache:           j.cache,
			Logger:          logger.With("operator", op, "subtask", sub),
			Remote:          j.remoteState(),
			WriteCacheBytes: int(j.settings.StateWriteCacheBytes),

			L0CompactionThreshold: j.settings.StateL0CompactionThreshold,
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
