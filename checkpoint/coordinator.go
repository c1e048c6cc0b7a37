package checkpoint

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
	"sync"
	"sync/atomic"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// Defaults of CoordinatorConfig.
const (
	DefaultTimeout           = 10 * time.Minute // Flink's execution.checkpointing.timeout
	DefaultTolerableFailures = 3
)

// ErrTooManyFailures is wrapped by the error Coordinator.Run returns when
// more consecutive checkpoints failed than tolerated.
var ErrTooManyFailures = errors.New("checkpoint: too many consecutive failed checkpoints")

// FaultPoint names a point of a cluster-mode unit's checkpoint where
// CoordinatorConfig.Fault may stop the coordinator.
type FaultPoint int

// The fault points, in the order of a checkpoint.
const (
	// FaultBeforeHead: transactions pre-committed, metadata written and
	// the checkpoint uploaded to the unit's store, no HEAD created.
	FaultBeforeHead FaultPoint = iota + 1
	// FaultAfterHead: the HEAD created, nothing committed.
	FaultAfterHead
)

// ErrFaultInjected is wrapped by Run's error when CoordinatorConfig.Fault
// stopped the coordinator.
var ErrFaultInjected = errors.New("checkpoint: stopped by an injected fault")

// ErrNotReady is returned by TriggerSavepoint when the job cannot take one
// yet (sources still bootstrapping) and ctx ended while waiting.
var ErrNotReady = errors.New("checkpoint: job not ready for a savepoint")

// ErrStopped is returned by TriggerCheckpoint and TriggerSavepoint when the
// coordinator's Run returned before it answered the request; the error
// also wraps the reason Run stopped, if any (ErrHeadExists when another
// owner took the unit).
var ErrStopped = errors.New("checkpoint: the checkpoint coordinator stopped")

// CoordinatorConfig configures NewCoordinator.
type CoordinatorConfig struct {
	// Job is the job's name, written into the metadata.
	Job string
	// MaxParallelism is written into the metadata.
	MaxParallelism int
	// Storage holds the checkpoints.
	Storage *Storage
	// Owner, if not nil, makes every checkpoint a cluster-mode unit's
	// fenced commit (docs/scale-out.md, invariant 1): before the barrier
	// the Owner picks the id (Owner.Reserve: above any chk-<n> another
	// claim took); after the metadata is written the Owner uploads the
	// checkpoint, making chk-<id> its claim's (its owner marker, or its
	// _metadata naming the claim), and creates the unit's next HEAD, and
	// only then notifies the tasks (which commit their transactions) and
	// applies retention. When a newer HEAD exists (found at the marker,
	// the _metadata or the HEAD create) Run returns an error wrapping
	// ErrHeadExists at once: nothing of this owner's is restored from the
	// new owner's checkpoints, committed or deleted.
	Owner *Owner
	// Fault, if not nil, is a fault-injection seam for tests of the
	// cluster-mode commit order (docs/scale-out.md, invariant 1); no
	// pipeline config reaches it. With Owner set it runs, for each
	// checkpoint, at FaultBeforeHead (every task acknowledged, so every
	// output transaction is pre-committed, the metadata is written and
	// the checkpoint uploaded to the store; no HEAD yet) and at FaultAfterHead (the HEAD is created; no task is
	// told to commit). When it returns true the coordinator stops as if
	// the process had died there: it creates no HEAD (before) or tells no
	// task to commit (after), and Run returns an error wrapping
	// ErrFaultInjected.
	Fault func(point FaultPoint, checkpointID int64) bool
	// Committed, if not nil, is called on the coordinator's goroutine after
	// a unit's checkpoint id is committed (with Owner: its HEAD created,
	// its tasks told to commit; their commits, retention and CommitsDone
	// may still be under way) with its metadata; never when the HEAD
	// existed. It must not block (a purge of the unit's input
	// runs elsewhere).
	Committed func(id int64, m *Metadata)
	// CommitsDone, if not nil, is called on the coordinator's goroutine
	// once every task's commit of a unit's checkpoint id returned (every
	// target's NotifyCheckpointCompleteThen called back: sinks and
	// dead-letter writers committed) and retention ran, with its metadata
	// (docs/scale-out.md, invariant 1, step 5): a unit purges its input
	// repartition partition here. Never when a commit failed, the task
	// ended before it committed, or the HEAD existed (at the commit or at
	// retention). It must not block.
	CommitsDone func(id int64, m *Metadata)
	// Interval between checkpoint triggers; 0 disables periodic
	// checkpoints (savepoints still work).
	Interval time.Duration
	// Aligned makes the periodic triggers fall on wall-clock times t
	// (Unix time) with t = Phase modulo Interval instead of every Interval
	// from the start. Cluster-mode units align them by stage
	// (docs/scale-out.md, Latency): a downstream stage's checkpoint is then
	// taken when the upstream stage's last one has committed, so the
	// records it made readable wait less than half an interval on average
	// for the downstream barrier. Every daemon's clock is assumed to be
	// synchronised (NTP); a skew only shifts the phase.
	Aligned bool
	// Phase is the offset of the aligned triggers (Aligned), reduced
	// modulo Interval.
	Phase time.Duration
	// Timeout after which an unfinished checkpoint is aborted. 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// MinPause is the least time between the end of one checkpoint and the
	// trigger of the next. Default 0.
	MinPause time.Duration
	// TolerableFailures is how many consecutive checkpoints may fail before
	// Run returns ErrTooManyFailures. Negative means
	// DefaultTolerableFailures; 0 tolerates none (Flink's default).
	TolerableFailures int
	// Incremental lets keyed state upload only new files to the shared
	// directory.
	Incremental bool
	// RequiredStates names, per operator, the operator list states every
	// subtask writes at least one entry of into each checkpoint (an
	// exactly-once sink's committables); the metadata records them, so a
	// restore or Verify can refuse a checkpoint that lost one.
	RequiredStates map[string][]string
	// UIDs maps each operator name whose uid differs from it to its uid;
	// the metadata records it (OperatorMetadata.UID), so a restore finds
	// the operator's state by uid after a rename. Nil: every uid is the
	// name.
	UIDs map[string]string
	// FirstID is the id of the first checkpoint this coordinator triggers;
	// at least one more than any id restored from. 0 picks one more than
	// the highest checkpoint id in Storage.
	FirstID int64
	// Logger receives lifecycle logs.
	Logger *slog.Logger
	// Metrics, if not nil, reports checkpoints.
	Metrics *Metrics
}

// Coordinator triggers checkpoints and savepoints, collects the tasks'
// acknowledgements and commits completed checkpoints (Flink's
// CheckpointCoordinator). One checkpoint is in flight at a time. It
// implements runtime.CheckpointResponder; its event loop is Run.
type Coordinator struct {
	cfg      CoordinatorConfig
	sources  []runtime.SourceTask
	targets  []runtime.CheckpointTarget
	expected map[runtime.TaskID]bool
	parallel map[string]int
	events   *runtime.Mailbox
	logger   *slog.Logger

	// Only the Run goroutine touches these.
	runCtx   context.Context // Run's; bounds a unit's uploads and retention
	nextID   int64
	pending  *pending
	lastEnd  time.Time
	failures int
	queue    []*savepointReq
	fatal    error

	// stopped is closed when Run returns, after runErr is set: a trigger
	// whose request Run never took does not wait for ever.
	stopped chan struct{}
	runErr  error

	mu       sync.Mutex // guards ready, lastID, lastTime
	ready    map[runtime.TaskID]bool
	lastID   int64
	lastTime time.Time

	history history // History; guarded by its own lock
}

// LastCompleted returns the id and completion time of the last checkpoint
// or savepoint this coordinator completed; 0 and the zero time when none.
// Safe for concurrent use.
func (c *Coordinator) LastCompleted() (int64, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastID, c.lastTime
}

type pending struct {
	barrier *runtime.Barrier
	start   time.Time
	acks    map[runtime.TaskID]runtime.TaskSnapshot
	timer   *time.Timer
	req     *savepointReq // nil for a checkpoint
}

type savepointReq struct {
	dir       string
	stopAfter bool
	// checkpoint asks for a checkpoint (TriggerCheckpoint), not a
	// savepoint: it goes to the job's checkpoint storage and, in cluster
	// mode, through the unit's HEAD chain.
	checkpoint bool
	reply      chan savepointResult
}

type savepointResult struct {
	path string
	id   int64
	err  error
}

// NewCoordinator returns a coordinator over the job's tasks: sources get
// triggers, every target gets completion notices and is expected to
// acknowledge each checkpoint, and so is each side output of a target that
// is a runtime.SideOutputOwner (under the side output's id).
func NewCoordinator(cfg CoordinatorConfig, sources []runtime.SourceTask, targets []runtime.CheckpointTarget) (*Coordinator, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.TolerableFailures < 0 {
		cfg.TolerableFailures = DefaultTolerableFailures
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Coordinator{cfg: cfg, sources: sources, targets: targets, expected: map[runtime.TaskID]bool{},
		parallel: map[string]int{}, events: runtime.NewMailbox(), logger: cfg.Logger, ready: map[runtime.TaskID]bool{},
		stopped: make(chan struct{})}
	for _, t := range targets {
		ids := []runtime.TaskID{t.ID()}
		if so, ok := t.(runtime.SideOutputOwner); ok {
			// A task's side outputs (dead-letter writers) acknowledge
			// under ids of their own: operators of their own in the
			// checkpoint.
			ids = append(ids, so.SideOutputIDs()...)
		}
		for _, id := range ids {
			c.expected[id] = true
			c.parallel[id.Operator]++
		}
	}
	c.nextID = cfg.FirstID
	if c.nextID <= 0 {
		infos, err := cfg.Storage.List()
		if err != nil {
			return nil, err
		}
		c.nextID = 1
		if len(infos) > 0 {
			c.nextID = infos[len(infos)-1].ID + 1
		}
	}
	return c, nil
}

// SourceCaughtUp records that a source subtask is ready for barriers: a
// broadcast source once it has read up to the end offsets it saw at start
// (a barrier must never wait behind a bootstrap that holds other inputs),
// any other source from the start. Checkpoints are triggered only once every
// source is ready; Ready reports it (the job's readiness: state restored,
// rules bootstrapped). Safe for concurrent use.
func (c *Coordinator) SourceCaughtUp(id runtime.TaskID) {
	c.mu.Lock()
	c.ready[id] = true
	c.mu.Unlock()
	c.events.Execute(func() {})
}

// Ready reports whether every source caught up. Safe for concurrent use.
func (c *Coordinator) Ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ready) >= len(c.sources)
}

// Acknowledge implements runtime.CheckpointResponder.
func (c *Coordinator) Acknowledge(task runtime.TaskID, id int64, snap runtime.TaskSnapshot) {
	c.events.Execute(func() { c.onAck(task, id, snap) })
}

// Decline implements runtime.CheckpointResponder.
func (c *Coordinator) Decline(task runtime.TaskID, id int64, err error) {
	c.events.Execute(func() {
		if c.pending != nil && c.pending.barrier.CheckpointID == id {
			c.abort(fmt.Errorf("declined by %s: %w", task, err))
		}
	})
}

// AlignmentDuration implements runtime.CheckpointResponder.
func (c *Coordinator) AlignmentDuration(_ runtime.TaskID, id int64, d time.Duration) {
	c.history.aligned(id, d)
	if c.cfg.Metrics != nil {
		c.cfg.Metrics.alignment.Observe(d.Seconds())
	}
}

// TriggerSavepoint takes a savepoint into a new directory under dir and
// returns that directory once it is committed. With stopAfter the sources
// stop right after the savepoint's barrier (stop-with-savepoint): the job
// then drains and ends. It waits for a checkpoint in flight and for the
// sources to catch up; it returns ctx.Err() (wrapped with ErrNotReady when
// the job was never ready) if ctx ends first, or the reason the savepoint
// failed.
func (c *Coordinator) TriggerSavepoint(ctx context.Context, dir string, stopAfter bool) (string, error) {
	req := &savepointReq{dir: dir, stopAfter: stopAfter, reply: make(chan savepointResult, 1)}
	c.events.Execute(func() { c.queue = append(c.queue, req); c.maybeTrigger() })
	select {
	case r := <-req.reply:
		return r.path, r.err
	case <-c.stopped:
		r := c.answerAfterStop(req)
		return r.path, r.err
	case <-ctx.Done():
		if !c.Ready() {
			return "", fmt.Errorf("%w: %w", ErrNotReady, ctx.Err())
		}
		return "", ctx.Err()
	}
}

// TriggerCheckpoint takes a checkpoint now (not at the next Interval
// tick), queued behind a checkpoint or savepoint in flight, and returns
// its id once it is complete: in cluster mode once the unit's HEAD names it
// and its sinks were told to commit. With stopAfter the sources stop right
// after its barrier and the exactly-once sinks wait for its commit before
// they finish, so the job then ends by itself with its output committed
// (the final checkpoint of a revoked unit, docs/scale-out.md invariant 6).
// It returns ctx.Err() if ctx ends first (the checkpoint may still
// complete later), or the reason the checkpoint failed; in cluster mode an
// error wrapping ErrHeadExists when another owner took the unit.
func (c *Coordinator) TriggerCheckpoint(ctx context.Context, stopAfter bool) (int64, error) {
	req := &savepointReq{stopAfter: stopAfter, checkpoint: true, reply: make(chan savepointResult, 1)}
	c.events.Execute(func() { c.queue = append(c.queue, req); c.maybeTrigger() })
	select {
	case r := <-req.reply:
		return r.id, r.err
	case <-c.stopped:
		r := c.answerAfterStop(req)
		return r.id, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// answerAfterStop is req's answer once Run returned: the one Run gave (it
// answers every request it took, also when it stops), or ErrStopped
// wrapping Run's error when Run never took req.
func (c *Coordinator) answerAfterStop(req *savepointReq) savepointResult {
	select {
	case r := <-req.reply:
		return r
	default:
	}
	if c.runErr != nil {
		return savepointResult{err: fmt.Errorf("%w: %w", ErrStopped, c.runErr)}
	}
	return savepointResult{err: ErrStopped}
}

// Run is the coordinator's event loop: it triggers a checkpoint every
// Interval and handles acknowledgements until ctx ends (then it aborts the
// checkpoint in flight and returns nil). It returns an error wrapping
// ErrTooManyFailures when more consecutive checkpoints failed than
// tolerated, or a commit error that leaves storage unusable.
func (c *Coordinator) Run(ctx context.Context) (err error) {
	c.runCtx = ctx
	defer func() {
		c.runErr = err
		close(c.stopped)
	}()
	var tick <-chan time.Time
	var aligned *time.Timer
	switch {
	case c.cfg.Interval > 0 && c.cfg.Aligned:
		aligned = time.NewTimer(time.Until(nextAligned(time.Now(), c.cfg.Interval, c.cfg.Phase)))
		defer aligned.Stop()
		tick = aligned.C
	case c.cfg.Interval > 0:
		t := time.NewTicker(c.cfg.Interval)
		defer t.Stop()
		tick = t.C
	}
	defer func() {
		if c.pending != nil {
			c.abort(errors.New("job stopping"))
		}
		for _, r := range c.queue {
			r.reply <- savepointResult{err: fmt.Errorf("%w before the queued checkpoint or savepoint started", ErrStopped)}
		}
	}()
	for {
		var timeout <-chan time.Time
		if c.pending != nil {
			timeout = c.pending.timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.events.Ready():
			c.events.TryYieldAll()
			c.maybeTrigger()
		case <-tick:
			c.maybeTriggerCheckpoint()
			if aligned != nil {
				aligned.Reset(time.Until(nextAligned(time.Now(), c.cfg.Interval, c.cfg.Phase)))
			}
		case <-timeout:
			c.abort(fmt.Errorf("timed out after %v", c.cfg.Timeout))
			c.maybeTrigger()
		}
		if c.fatal != nil {
			return c.fatal
		}
	}
}

// nextAligned returns the first time after now whose Unix time is phase
// modulo interval (interval > 0).
func nextAligned(now time.Time, interval, phase time.Duration) time.Time {
	phase %= interval
	if phase < 0 {
		phase += interval
	}
	off := time.Duration(now.UnixNano()%int64(interval)) - phase // now's offset past an aligned time
	if off < 0 {
		off += interval
	}
	return now.Add(interval - off)
}

// maybeTrigger starts a queued savepoint when nothing is in flight.
func (c *Coordinator) maybeTrigger() {
	if c.pending != nil || len(c.queue) == 0 || !c.Ready() {
		return
	}
	req := c.queue[0]
	c.queue = c.queue[1:]
	id := c.nextID
	if req.checkpoint {
		c.trigger(c.checkpointBarrier(id, req.stopAfter), req)
		return
	}
	dir := filepath.Join(req.dir, "savepoint-"+strconv.FormatInt(id, 10)+"-"+strconv.FormatInt(time.Now().Unix(), 10))
	c.trigger(&runtime.Barrier{CheckpointID: id, Timestamp: time.Now(), Savepoint: true, Dir: dir, StopAfter: req.stopAfter}, req)
}

// maybeTriggerCheckpoint starts a periodic checkpoint when nothing is in
// flight, the sources caught up and the minimum pause passed.
func (c *Coordinator) maybeTriggerCheckpoint() {
	if c.pending != nil || !c.Ready() || time.Since(c.lastEnd) < c.cfg.MinPause {
		return
	}
	c.trigger(c.checkpointBarrier(c.nextID, false), nil)
}

// checkpointBarrier is the barrier of checkpoint id (not a savepoint).
func (c *Coordinator) checkpointBarrier(id int64, stopAfter bool) *runtime.Barrier {
	b := &runtime.Barrier{CheckpointID: id, Timestamp: time.Now(), Dir: c.cfg.Storage.CheckpointDir(id), StopAfter: stopAfter}
	b.Staging = c.cfg.Owner != nil && c.cfg.Owner.stages()
	if c.cfg.Incremental {
		b.SharedDir = c.cfg.Storage.SharedDir()
	}
	return b
}

func (c *Coordinator) trigger(b *runtime.Barrier, req *savepointReq) {
	if o := c.cfg.Owner; o != nil && !b.Savepoint {
		// A unit's checkpoint id moves above a chk-<n> another claim took
		// (Owner.Reserve, after a checkpoint that met it failed), and a
		// fenced owner stops here. The upload makes chk-<id> this owner's
		// (its owner marker, or its _metadata naming the claim).
		ctx, cancel := context.WithTimeout(c.runCtx, c.cfg.Timeout)
		id, err := o.Reserve(ctx, b.CheckpointID)
		cancel()
		if errors.Is(err, ErrHeadExists) {
			c.fatal = fmt.Errorf("checkpoint %d: %w", b.CheckpointID, err)
			if req != nil {
				req.reply <- savepointResult{err: c.fatal}
			}
			return
		}
		if err == nil && id != b.CheckpointID {
			c.logger.Info("checkpoint id taken by another claim in the store; moving on", "checkpoint_id", b.CheckpointID, "new_id", id)
			b = c.checkpointBarrier(id, b.StopAfter)
		}
		if err != nil {
			c.nextID = b.CheckpointID + 1
			c.pending = &pending{barrier: b, req: req, timer: time.NewTimer(0)}
			c.abort(err)
			return
		}
	}
	c.nextID = b.CheckpointID + 1
	if err := c.mkdir(b); err != nil {
		c.pending = &pending{barrier: b, req: req, timer: time.NewTimer(0)}
		c.abort(err)
		return
	}
	c.pending = &pending{barrier: b, start: time.Now(), acks: map[runtime.TaskID]runtime.TaskSnapshot{}, timer: time.NewTimer(c.cfg.Timeout), req: req}
	c.history.started(b.CheckpointID, b.Savepoint, b.Dir, c.pending.start)
	c.logger.Debug("triggering checkpoint", "checkpoint_id", b.CheckpointID, "savepoint", b.Savepoint)
	for _, s := range c.sources {
		s.TriggerCheckpoint(b)
	}
}

// mkdir creates the directory of b durably (atomicfile.MkdirAll: the
// parent of each directory it creates is fsynced, so a crash cannot lose
// chk-<id>/ while a later _metadata or HEAD names it), except a cluster
// unit's staging copy (b.Staging), which the unit's start wipes. A
// cluster-mode unit's checkpoint creates its local staging directory
// create-only, as its upload writes every object of chk-<id> in the unit's
// store create-only (Owner): a chk-<id> that exists belongs to another
// owner (a zombie and the unit's new owner may count the same ids), and
// writing into it would overwrite that owner's checkpoint; the checkpoint
// fails instead and the next takes the next id.
func (c *Coordinator) mkdir(b *runtime.Barrier) error {
	s := c.cfg.Storage
	if c.cfg.Owner == nil || b.Savepoint {
		if b.Staging {
			return os.MkdirAll(b.Dir, 0o755)
		}
		return s.mkdirAll(b.Dir)
	}
	parent := filepath.Dir(b.Dir)
	if b.Staging {
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return err
		}
	} else if err := s.mkdirAll(parent); err != nil {
		return err
	}
	if err := os.Mkdir(b.Dir, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("checkpoint directory %s exists: another owner of the unit wrote it", b.Dir)
		}
		return err
	}
	if b.Staging {
		return nil
	}
	return s.sync(parent)
}

func (c *Coordinator) onAck(task runtime.TaskID, id int64, snap runtime.TaskSnapshot) {
	p := c.pending
	if p == nil || p.barrier.CheckpointID != id || !c.expected[task] {
		return // late answer to an aborted checkpoint
	}
	p.acks[task] = snap
	if len(p.acks) < len(c.expected) {
		return
	}
	p.timer.Stop()
	if err := c.complete(p); err != nil {
		c.abort(err)
		return
	}
}

func (c *Coordinator) kind(p *pending) string {
	if p.barrier.Savepoint {
		return "savepoint"
	}
	return "checkpoint"
}

// complete writes the metadata (the commit point), applies retention and
// notifies every task.
func (c *Coordinator) complete(p *pending) error {
	b := p.barrier
	m := &Metadata{Version: MetadataVersion, Job: c.cfg.Job, CheckpointID: b.CheckpointID, Savepoint: b.Savepoint,
		Timestamp: b.Timestamp, MaxParallelism: c.cfg.MaxParallelism, Operators: map[string]OperatorMetadata{}}
	shared := map[string]bool{}
	for op, n := range c.parallel {
		req := slices.Sorted(slices.Values(c.cfg.RequiredStates[op]))
		m.Operators[op] = OperatorMetadata{Parallelism: n, Subtasks: make([]json.RawMessage, n), RequiredStates: req, UID: c.cfg.UIDs[op]}
	}
	for id, snap := range p.acks {
		m.Operators[id.Operator].Subtasks[id.Subtask] = snap.State
		m.Bytes += snap.Bytes
		for _, f := range snap.SharedFiles {
			shared[f] = true
		}
	}
	for f := range shared {
		m.SharedFiles = append(m.SharedFiles, f)
	}
	slices.Sort(m.SharedFiles)
	if len(m.SharedFiles) > 0 {
		m.SharedDir = sharedDirRef(b.Dir, b.SharedDir)
	}
	m.Completed = time.Now()
	// Checkpoints commit through Storage.commit, whose failure-injection
	// hook runs between the temporary metadata file and its rename.
	var err error
	if b.Savepoint {
		if err = c.cfg.Storage.syncEntries(b.Dir, m); err == nil {
			err = writeMetadataSync(b.Dir, m, nil, false, c.cfg.Storage.syncDir)
		}
	} else {
		err = c.cfg.Storage.commit(b.Dir, m, b.Staging)
	}
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	o := c.cfg.Owner
	if o != nil && !b.Savepoint {
		// A unit's commit point is its HEAD (invariant 1): upload, then
		// create the HEAD; only then do the tasks commit. Stopping the unit
		// (Run's ctx) cuts a slow upload short: no HEAD, nothing commits.
		// FaultBeforeHead runs once the checkpoint is uploaded, right
		// before the HEAD.
		ctx, cancel := context.WithTimeout(c.runCtx, c.cfg.Timeout)
		err := o.Checkpoint(ctx, b.CheckpointID, UnitCommit{Upload: func() error {
			if c.faultAt(FaultBeforeHead, b.CheckpointID, nil) {
				return c.fatal
			}
			return nil
		}})
		cancel()
		if err != nil {
			if errors.Is(err, ErrHeadExists) {
				c.fatal = fmt.Errorf("checkpoint %d: %w", b.CheckpointID, err)
			}
			if errors.Is(err, ErrFaultInjected) || errors.Is(err, ErrHeadExists) { // c.fatal is set
				c.pending = nil
				if p.req != nil {
					p.req.reply <- savepointResult{err: c.fatal}
				}
				return nil
			}
			return err
		}
	}
	c.pending, c.failures, c.lastEnd = nil, 0, time.Now()
	c.mu.Lock()
	c.lastID, c.lastTime = b.CheckpointID, m.Completed
	c.mu.Unlock()
	dur := time.Since(p.start)
	c.history.completed(b.CheckpointID, b.Savepoint, b.Dir, m.Bytes, p.start.Add(dur))
	c.logger.Info("checkpoint completed", "checkpoint_id", b.CheckpointID, "savepoint", b.Savepoint, "duration", dur, "bytes", m.Bytes, "dir", b.Dir)
	if mt := c.cfg.Metrics; mt != nil {
		mt.duration.Observe(dur.Seconds())
		mt.size.Set(float64(m.Bytes))
		mt.lastCompleted.Set(float64(b.CheckpointID))
		mt.lastTime.Set(float64(m.Completed.UnixNano()) / 1e9)
		mt.total.WithLabelValues(c.kind(p), "completed").Inc()
	}
	if o != nil && !b.Savepoint {
		if c.faultAt(FaultAfterHead, b.CheckpointID, p.req) {
			return nil
		}
		if err := c.cfg.Storage.Prune(); err != nil { // the local staging copy
			c.logger.Warn("checkpoint retention failed; will retry after the next checkpoint", "err", err)
		}
		seq := o.Seq()
		c.notifyThen(b.CheckpointID, func() {
			ctx, cancel := context.WithTimeout(c.runCtx, c.cfg.Timeout)
			defer cancel()
			if err := o.Retain(ctx, seq); err != nil {
				if errors.Is(err, ErrHeadExists) {
					c.fatal = fmt.Errorf("checkpoint %d: %w", b.CheckpointID, err)
					return
				}
				c.logger.Warn("unit checkpoint retention failed; will retry after the next checkpoint", "err", err)
			}
			if c.cfg.CommitsDone != nil {
				c.cfg.CommitsDone(b.CheckpointID, m)
			}
		})
		if c.cfg.Committed != nil {
			c.cfg.Committed(b.CheckpointID, m)
		}
		if p.req != nil {
			p.req.reply <- savepointResult{path: b.Dir, id: b.CheckpointID}
		}
		return nil
	}
	if b.Savepoint {
		if err := c.cfg.Storage.RecordSavepoint(b.Dir); err != nil {
			c.logger.Warn("could not record the savepoint as the job's newest; a restart without --from-savepoint resumes from the latest checkpoint", "dir", b.Dir, "err", err)
		}
	} else {
		if err := c.cfg.Storage.Prune(); err != nil {
			c.logger.Warn("checkpoint retention failed; will retry after the next checkpoint", "err", err)
		}
	}
	for _, t := range c.targets {
		t.NotifyCheckpointComplete(b.CheckpointID)
	}
	if p.req != nil {
		p.req.reply <- savepointResult{path: b.Dir, id: b.CheckpointID}
	}
	return nil
}

// notifyThen notifies every target that checkpoint id completed and,
// once every target's listener returned (runtime.OperatorTask's
// NotifyCheckpointCompleteThen; at once for a target without it), runs
// then on the coordinator's goroutine.
func (c *Coordinator) notifyThen(id int64, then func()) {
	type completer interface {
		NotifyCheckpointCompleteThen(id int64, done func())
	}
	var left atomic.Int64
	left.Store(int64(len(c.targets)) + 1)
	done := func() {
		if left.Add(-1) == 0 {
			c.events.Execute(then)
		}
	}
	for _, t := range c.targets {
		if ct, ok := t.(completer); ok {
			ct.NotifyCheckpointCompleteThen(id, done)
		} else {
			t.NotifyCheckpointComplete(id)
			done()
		}
	}
	done()
}

// faultAt runs CoordinatorConfig.Fault at point of checkpoint id and
// reports whether it stopped the coordinator (then Run returns); a
// waiting TriggerCheckpoint (req) gets the fault as its answer.
func (c *Coordinator) faultAt(point FaultPoint, id int64, req *savepointReq) bool {
	if c.cfg.Fault == nil || !c.cfg.Fault(point, id) {
		return false
	}
	c.fatal = fmt.Errorf("checkpoint %d: fault point %d: %w", id, point, ErrFaultInjected)
	if req != nil {
		req.reply <- savepointResult{err: c.fatal}
	}
	return true
}

// sharedDirRef is Metadata.SharedDir for a checkpoint in dir whose shared
// files are in shared: relative to dir when both are on one tree (the
// usual ../shared, so a job directory can move as a whole), else absolute.
func sharedDirRef(dir, shared string) string {
	if rel, err := filepath.Rel(dir, shared); err == nil {
		return filepath.ToSlash(rel)
	}
	if abs, err := filepath.Abs(shared); err == nil {
		return filepath.ToSlash(abs)
	}
	return filepath.ToSlash(shared)
}

// abort gives up the pending checkpoint.
func (c *Coordinator) abort(reason error) {
	p := c.pending
	if p == nil {
		return
	}
	c.pending, c.lastEnd = nil, time.Now()
	p.timer.Stop()
	b := p.barrier
	c.history.failed(b.CheckpointID, b.Savepoint, b.Dir, reason, c.lastEnd)
	c.logger.Warn("checkpoint failed", "checkpoint_id", b.CheckpointID, "savepoint", b.Savepoint, "err", reason)
	if c.cfg.Metrics != nil {
		c.cfg.Metrics.total.WithLabelValues(c.kind(p), "failed").Inc()
	}
	for _, t := range c.targets {
		t.NotifyCheckpointAborted(b.CheckpointID)
	}
	if p.req != nil {
		p.req.reply <- savepointResult{err: fmt.Errorf("checkpoint: %s %d failed: %w", c.kind(p), b.CheckpointID, reason)}
		return
	}
	if errors.Is(reason, ErrForeignClaim) {
		// A zombie's checkpoint took the id in the store first (its
		// _metadata or owner marker is there): no failure of this
		// owner's, whose next id is above it (Owner.Reserve). The zombie
		// is fenced at its next HEAD, so this happens at most while a
		// takeover's previous owner still runs.
		return
	}
	c.failures++
	if c.failures > c.cfg.TolerableFailures {
		c.fatal = fmt.Errorf("%w: %d failed in a row (tolerable: %d); last: checkpoint %d: %v",
			ErrTooManyFailures, c.failures, c.cfg.TolerableFailures, b.CheckpointID, reason)
	}
}
