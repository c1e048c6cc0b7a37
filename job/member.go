package job

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/sink"
)

// MemberConfig is how a daemon takes part in the group of a cluster-mode
// job (pipeline's cluster section).
type MemberConfig struct {
	// GroupID is the consumer group; MemberID the static member id
	// (group.instance.id, KIP-345).
	GroupID, MemberID string
	// SessionTimeout and RebalanceTimeout are the group's; RevokeTimeout
	// bounds a revoked unit's final checkpoint (below RebalanceTimeout).
	SessionTimeout, RebalanceTimeout, RevokeTimeout time.Duration
	// TakeoverTimeout bounds each build of a unit (cluster.takeover_timeout:
	// HEAD claim, commits of the restored transactions, fencing, state
	// download); one that takes longer fails and the unit is rebuilt after
	// its restart strategy's back-off. 0: unbounded.
	TakeoverTimeout time.Duration
	// OutputWatchInterval is how often the member measures the high
	// watermark minus the last stable offset of the job's output
	// partitions (kstreamd_cluster_output_unstable_offsets); 0 means
	// DefaultOutputWatchInterval.
	OutputWatchInterval time.Duration
	// OnJoined, if not nil, is called once the member's group client is
	// up (before any unit is assigned), with the member (the HTTP API's
	// status and readiness).
	OnJoined func(*Member)
}

// UnitsTopic returns the units topic of job: "<job>-units", one partition
// per unit (partition stage*units+index), never produced to: its
// partitions are what the group protocol hands out.
func UnitsTopic(job string) string { return job + "-units" }

// unitRun is one unit running in this process.
type unitRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	// stopping is set when the unit is revoked or lost: an attempt that
	// ends (after its final checkpoint) is not rebuilt.
	stopping atomic.Bool
	// lost is set while the group client has given up the unit's session
	// (OnPartitionsLost) and the unit keeps running until the member's
	// rejoin assigns it again, or not (then it stops), or the grace ends.
	lost atomic.Bool
	// takenOver is set when an attempt found another claim's HEAD
	// (checkpoint.ErrHeadExists): the next build waits until the group
	// confirms the unit is assigned to this member before it claims again.
	takenOver atomic.Bool
	mu        sync.Mutex
	job       *Job   // the current attempt; nil while building
	state     string // UnitStarting, StateRunning, StateRestarting, UnitTakenOver, StateFailed
	lastErr   string // the last attempt's failure ("" none)
}

// States of a unit assigned to this daemon besides StateRunning,
// StateRestarting and StateFailed (UnitStatus.State).
const (
	// UnitStarting: its first attempt is being built (claim, restore).
	UnitStarting = "starting"
	// UnitTakenOver: an attempt found another claim's HEAD; it is
	// claimed again (with the restart strategy's back-off) once the group
	// confirms it is still assigned to this member.
	UnitTakenOver = "taken_over"
)

// setState records the unit's state and, when not "", its last failure.
func (r *unitRun) setState(state, lastErr string) {
	r.mu.Lock()
	r.state = state
	if lastErr != "" {
		r.lastErr = lastErr
	}
	r.mu.Unlock()
}

// status returns the current attempt, the state and the last failure.
func (r *unitRun) status() (*Job, string, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.job, r.state, r.lastErr
}

func (r *unitRun) current() *Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.job
}

// RunMember runs this process as a member of the cluster-mode job st
// (docs/scale-out.md): it refuses a unit count other than the one of the
// job's HEAD chains in set.Store, creates the repartition topics
// and the units topic (refusing a changed unit count), joins the group mc.GroupID with
// UnitBalancer, and runs every unit assigned to it as a job of its own
// (Build with set.Unit): on assignment it builds and runs the unit (the
// takeover: claim the next HEAD, commit the restored transactions, fence
// the unit's ids), on revoke it triggers the unit's final checkpoint at
// once (Coordinator.TriggerCheckpoint with stopAfter: the sources stop after
// its barrier, the sinks commit it before the unit ends), bounded by
// mc.RevokeTimeout, past which it stops the unit without a commit (the next
// owner restores the previous HEAD and replays what followed it); on lost
// (the group client gave up the session) it keeps the unit running for up
// to mc.SessionTimeout + mc.RebalanceTimeout while the member rejoins, and
// stops it, taking no checkpoint, when the rejoin assigns it elsewhere or
// the grace ends. A unit that fails is rebuilt
// while assigned, after the back-off of its own instance of the job's
// restart strategy (set.Restart; the zero value means DefaultRestartConfig:
// exponential-delay from 1s to 1m), counted in kstreamd_job_restarts_total,
// after checkpoint.ErrHeadExists (another claim took it) only once the group
// coordinator confirms it is still assigned to this member (a zombie must
// not claim it back). When a unit's strategy gives up, or its failure
// holds a RestartSuppressor, the member fails as a Flink job fails
// terminally: it stops every unit as on revoke and returns an error naming
// the unit (wrapping ErrRestartsExhausted when the strategy gave up), so
// the daemon exits and the group moves its units. The job's graph is
// elected by the group leader's UnitBalancer (first the graph the store's
// HEADs record, read here before joining); a member whose graph loses
// gets no units, logs why once and is not ready (Member.Excluded,
// Readiness). RunMember returns nil when ctx ends (SIGTERM), after
// stopping every unit as on revoke and, as a static member
// (mc.MemberID), leaving the group (LeaveGroup by instance id), so the
// other members take the units over at once rather than after the
// session timeout; an invalid set.Restart is returned before joining.
func RunMember(ctx context.Context, st *graph.Stages, set Settings, deps Deps, mc MemberConfig) error {
	logger := deps.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "cluster", "member", mc.MemberID)
	deps.Logger = logger
	stored, err := checkStoreUnits(ctx, set.Store, st)
	if err != nil {
		return err
	}
	if done, err := finishStop(ctx, st, set, deps, mc); done || err != nil { // cluster_savepoint.go
		return err
	}
	if deps.FromSavepoint != "" { // cluster_savepoint.go
		if err := AdoptClusterSavepoint(ctx, st, set.Store, deps.ClientOpts, deps.FromSavepoint, mc.MemberID); err != nil {
			return err
		}
		deps.FromSavepoint = "" // the units restore it through the store's origin
	}
	if err := checkTransactionTimeouts(ctx, deps.ClientOpts, st); err != nil {
		return err
	}
	if err := EnsureRepartitionTopics(ctx, deps.ClientOpts, st); err != nil {
		return err
	}
	topic := UnitsTopic(st.Job)
	if err := ensureUnitsTopic(ctx, deps.ClientOpts, topic, len(st.Stages)*st.Units); err != nil {
		return err
	}
	if deps.Metrics == nil {
		m, err := NewMetrics(deps.Registerer)
		if err != nil {
			return err
		}
		deps.Metrics = m
	}
	cm := deps.Metrics.cluster
	mem := &Member{id: mc.MemberID, group: mc.GroupID, job: st.Job, topic: UnitsTopic(st.Job), units: st.Units, running: map[int32]*unitRun{}, stages: st,
		fingerprint: st.Fingerprint, logger: logger}
	// The store's HEADs decide the job's graph: a daemon whose graph
	// cannot restore their state gets no units whatever the group holds
	// (UnitBalancer); one that can is an upgrade (cluster_upgrade.go).
	upgrade, err := newUpgradeCheck(ctx, set, st)
	if err != nil {
		return err
	}
	upgrades, why, err := upgrade.storedGraphVerdict(ctx, stored, set.Store, logger)
	if err != nil {
		return err
	}
	if why != "" {
		mem.exclude(stored.hd.Fingerprint, why)
	}
	mu, units := &mem.mu, mem.running
	// A unit whose restart strategy gives up fails the member (Flink's
	// job failing terminally): RunMember revokes its other units and
	// returns that error, so the daemon exits and the group moves its
	// units to the other members.
	ctx, failMember := context.WithCancelCause(ctx)
	defer failMember(nil)
	restartCfg := set.restart()
	if _, err := NewRestartStrategy(restartCfg, nil); err != nil {
		return err
	}
	start := func(p int32) {
		stage, index := int(p)/st.Units, int(p)%st.Units
		// Not a child of ctx: when ctx ends, units stop through revoke
		// (with their final checkpoint), not all at once.
		uctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		r := &unitRun{cancel: cancel, done: make(chan struct{}), state: UnitStarting}
		mu.Lock()
		if units[p] != nil { // already running (the cooperative protocol only hands out additions)
			mu.Unlock()
			cancel()
			return
		}
		units[p] = r
		mu.Unlock()
		cm.units.WithLabelValues(strconv.Itoa(stage)).Inc()
		up := cm.up.WithLabelValues(strconv.Itoa(stage), strconv.Itoa(index))
		up.Set(0)
		s := set
		s.Unit = &Unit{Stage: stage, Index: index, Units: st.Units, Member: mc.MemberID, Fingerprint: st.Fingerprint, Restores: upgrade.restores}
		ulog := logger.With("stage", stage, "unit", index)
		go func() {
			defer close(r.done)
			strategy, _ := NewRestartStrategy(restartCfg, nil) // validated above
			l := &restartLoop{strategy: strategy, metrics: deps.Metrics, logger: ulog, unit: fmt.Sprintf("unit %d/%d", stage, index),
				restartMsg: "unit failed; rebuilding", restartLevel: slog.LevelError,
				build: func(ctx context.Context) (*Job, error) {
					if r.takenOver.Load() {
						// A zombie must not claim back a unit the group
						// moved: only the group's word that the unit is
						// still assigned here lets it claim again.
						if err := mem.awaitAssigned(ctx, p); err != nil {
							return nil, err
						}
						r.takenOver.Store(false)
						ulog.Info("the group still assigns the taken-over unit here: claiming it again")
					}
					return buildUnit(ctx, st.Stages[stage].Graph, s, deps, mc.TakeoverTimeout)
				}}
			setJob := func(j *Job) {
				r.mu.Lock()
				r.job = j
				r.mu.Unlock()
			}
			l.state = func(j *Job, state string) {
				setJob(j)
				if j != nil {
					up.Set(1)
					r.setState(StateRunning, "")
					ulog.Info("unit running", "restored_from", j.RestoredFrom())
					return
				}
				up.Set(0)
				if state != "" && !(state == StateRestarting && r.takenOver.Load()) {
					r.setState(state, "")
				}
			}
			l.ran = func(*Job) { setJob(nil); up.Set(0) }
			l.final = func(err error) bool {
				if r.stopping.Load() {
					return true
				}
				if takenOver(err) {
					// Another claim's HEAD (read back: never this owner's
					// own), or its recovery fenced the unit's
					// transactional ids. Rebuilt with the restart strategy
					// once the group confirms the unit is still assigned
					// here.
					cm.fenced.WithLabelValues(strconv.Itoa(stage), strconv.Itoa(index)).Inc()
					r.takenOver.Store(true)
					r.setState(UnitTakenOver, err.Error())
					ulog.Error("unit taken over by another claim: stopped; claimed again if the group still assigns it here", "err", err)
					return false
				}
				r.setState(StateRestarting, err.Error())
				return false
			}
			err := l.run(uctx, nil)
			if err == nil || uctx.Err() != nil || r.stopping.Load() {
				return
			}
			if errors.Is(err, ErrRestartsExhausted) {
				ulog.Error("unit failed; the restart strategy gives up", "restarts", l.restarts, "strategy", strategy.String(), "err", err)
			} else {
				ulog.Error("unit failed; not restarted (a restart cannot cure this failure)", "err", err)
			}
			failMember(err)
		}()
	}
	stop := func(p int32, bound time.Duration) {
		mu.Lock()
		r := units[p]
		delete(units, p)
		mu.Unlock()
		if r == nil {
			return
		}
		cm.units.WithLabelValues(strconv.Itoa(int(p) / st.Units)).Dec()
		outcome := StopLost
		if bound > 0 {
			outcome = StopFailed // unless its final checkpoint completes below
		}
		r.stopping.Store(true)
		if j := r.current(); j != nil && bound > 0 {
			// The final checkpoint (invariant 6): triggered now, its
			// sources stop right after its barrier, its sinks commit it
			// before they finish. Bounded by the revoke timeout: past it
			// the unit stops without committing and the next owner
			// restores the previous HEAD.
			fctx, cancel := context.WithTimeout(context.Background(), bound)
			id, err := j.Coordinator().TriggerCheckpoint(fctx, true)
			cancel()
			switch {
			case err == nil:
				outcome = StopFinalCheckpoint
				logger.Info("revoked unit took its final checkpoint", "stage", int(p)/st.Units, "unit", int(p)%st.Units, "checkpoint_id", id)
			case errors.Is(err, context.DeadlineExceeded):
				outcome = StopTimedOut
				logger.Warn("revoked unit stops without a final checkpoint: revoke_timeout passed", "stage", int(p)/st.Units, "unit", int(p)%st.Units, "revoke_timeout", bound)
			default:
				outcome = StopFailed
				logger.Warn("revoked unit stops without a final checkpoint", "stage", int(p)/st.Units, "unit", int(p)%st.Units, "err", err)
			}
		}
		cm.stops.WithLabelValues(outcome).Inc()
		r.cancel()
		<-r.done
		cm.up.DeleteLabelValues(strconv.Itoa(int(p)/st.Units), strconv.Itoa(int(p)%st.Units))
		logger.Info("unit stopped", "stage", int(p)/st.Units, "unit", int(p)%st.Units)
	}
	each := func(m map[string][]int32, fn func(int32)) {
		var wg sync.WaitGroup
		for _, p := range m[topic] {
			wg.Go(func() { fn(p) })
		}
		wg.Wait()
	}
	// Lost units (the group client gave up its session, e.g. in a broker
	// outage, or the coordinator forgot the member) keep running for up to
	// a session timeout plus a rebalance timeout (the longest a rejoin may
	// take) while the member rejoins: a unit the rejoin
	// assigns here again goes on untouched (no restore, no move); one it
	// does not, or any still lost when the grace ends, stops as lost, and
	// the member rejoins once more so the group hands it out. Keeping a
	// lost unit is safe: if the group moved it, the new owner's claim
	// fences its HEAD and its Kafka recovery fences its transactions.
	var lostTimer *time.Timer // guarded by mu
	var cl *kgo.Client
	stillLost := func() []int32 {
		mu.Lock()
		defer mu.Unlock()
		var out []int32
		for p, r := range units {
			if r.lost.Load() {
				out = append(out, p)
			}
		}
		slices.Sort(out)
		return out
	}
	dropLost := func(why string) {
		gone := stillLost()
		if len(gone) == 0 {
			return
		}
		logger.Warn("lost units stop: "+why, "partitions", fmt.Sprint(gone))
		each(map[string][]int32{topic: gone}, func(p int32) { stop(p, 0) })
		mu.Lock()
		c := cl
		mu.Unlock()
		go c.ForceRebalance() // the group hands them out again
	}
	owned := func() []int32 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(maps.Keys(units))
	}
	bal := &UnitBalancer{Topic: topic, Stages: len(st.Stages), Units: st.Units, Fingerprint: st.Fingerprint,
		Store: func() string { return stored.hd.Fingerprint }, Running: mem.runningUnits, Elected: mem.elected, Owned: owned,
		Upgrades: func() string { return upgrades }}
	opts := append([]kgo.Opt{}, deps.ClientOpts...)
	opts = append(opts,
		kgo.ConsumerGroup(mc.GroupID), kgo.ConsumeTopics(topic), kgo.Balancers(bal, bal.Legacy()),
		kgo.SessionTimeout(mc.SessionTimeout), kgo.RebalanceTimeout(mc.RebalanceTimeout),
		kgo.HeartbeatInterval(heartbeatInterval(mc.SessionTimeout)),
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			logger.Info("units assigned", "partitions", fmt.Sprint(m[topic]))
			var kept []int32
			for _, p := range m[topic] {
				mu.Lock()
				r := units[p]
				mu.Unlock()
				if r != nil && r.lost.Swap(false) {
					kept = append(kept, p)
					cm.keptLost.Inc()
				}
				start(p)
			}
			if len(kept) > 0 {
				logger.Info("lost units assigned here again: they kept running (not restored, not moved)", "partitions", fmt.Sprint(kept))
			}
			// After a loss the client's first assignment is the whole
			// of this member's: a lost unit not in it went elsewhere.
			dropLost("the group assigned them elsewhere")
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			logger.Info("units revoked", "partitions", fmt.Sprint(m[topic]))
			each(m, func(p int32) { stop(p, mc.RevokeTimeout) })
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if len(m[topic]) == 0 {
				return // a failed rejoin after a loss: nothing more is lost
			}
			grace := mc.SessionTimeout + mc.RebalanceTimeout
			logger.Warn("units lost: the group session ended; they keep running while the member rejoins", "partitions", fmt.Sprint(m[topic]), "grace", grace)
			cm.sessionsLost.Inc()
			mu.Lock()
			for _, p := range m[topic] {
				if r := units[p]; r != nil {
					r.lost.Store(true)
				}
			}
			if lostTimer != nil {
				lostTimer.Stop()
			}
			lostTimer = time.AfterFunc(grace, func() { dropLost("not assigned here again within the session and rebalance timeouts") })
			mu.Unlock()
		}),
	)
	if mc.MemberID != "" {
		opts = append(opts, kgo.InstanceID(mc.MemberID))
	}
	gcl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("job: group client: %w", err)
	}
	mu.Lock()
	cl, mem.cl = gcl, gcl
	mu.Unlock()
	if mc.OnJoined != nil {
		mc.OnJoined(mem)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchOutputs(watchCtx, gcl, outputTopics(st), cm.unstable, cmp.Or(mc.OutputWatchInterval, DefaultOutputWatchInterval), logger)
	}()
	go watchStopRequest(watchCtx, set.Store, st.Job, logger, func() { failMember(ErrJobStopped) })
	for ctx.Err() == nil {
		cl.PollFetches(ctx) // the units topic holds no records: this only keeps the group session
	}
	stopWatch()
	<-watched
	cl.Close() // revokes every unit (OnPartitionsRevoked) before it returns
	if mc.MemberID != "" {
		leaveGroup(deps.ClientOpts, mc, logger)
	}
	mu.Lock()
	if lostTimer != nil {
		lostTimer.Stop()
	}
	left := make([]int32, 0, len(units))
	for p := range units {
		left = append(left, p)
	}
	mu.Unlock()
	for _, p := range left {
		stop(p, 0)
	}
	if err := context.Cause(ctx); errors.Is(err, ErrJobStopped) {
		logger.Info("member stopped: the job was stopped with a savepoint")
		return nil
	} else if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err // a unit's restart strategy gave up
	}
	return nil
}

// ErrTakeoverTimeout is wrapped by the error of a unit's build that did
// not finish within MemberConfig.TakeoverTimeout.
var ErrTakeoverTimeout = errors.New("job: the takeover did not finish within cluster.takeover_timeout")

// buildUnit is Build bounded by timeout (0: unbounded): past it the
// build's context ends and the error wraps ErrTakeoverTimeout, naming the
// unit and the timeout. The bound is what the transaction-timeout check
// counts for a takeover (pipeline.Config.ClusterTxnBound): a takeover
// that took longer could find the transactions it must commit aborted.
func buildUnit(ctx context.Context, g *graph.Graph, set Settings, deps Deps, timeout time.Duration) (*Job, error) {
	if timeout <= 0 {
		return Build(ctx, g, set, deps)
	}
	bctx, cancel := context.WithTimeoutCause(ctx, timeout, ErrTakeoverTimeout)
	defer cancel()
	j, err := Build(bctx, g, set, deps)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(bctx), ErrTakeoverTimeout) {
		return nil, fmt.Errorf("%w: unit %d/%d took over %v: %v", ErrTakeoverTimeout, set.Unit.Stage, set.Unit.Index, timeout, err)
	}
	return j, err
}

// checkTransactionTimeouts refuses, before the member joins, a transaction
// timeout of an exactly-once Kafka sink or of a repartition sink
// (cluster.repartition_transaction_timeout) above the brokers'
// transaction.max.timeout.ms, naming both (sink.CheckTransactionTimeout):
// the broker would refuse every transaction of the unit.
func checkTransactionTimeouts(ctx context.Context, opts []kgo.Opt, st *graph.Stages) error {
	for _, stage := range st.Stages {
		for _, sk := range stage.Graph.Sinks {
			if !sk.Delivery.ExactlyOnce() || (sk.Type != "" && sk.Type != connector.DefaultType) {
				continue
			}
			timeout := kafkaTxnTimeout(sk)
			if err := sink.CheckTransactionTimeout(ctx, opts, sk.Name, timeout); err != nil {
				if sk.Units > 0 {
					return fmt.Errorf("job: cluster.repartition_transaction_timeout: %w", err)
				}
				return fmt.Errorf("job: %w", err)
			}
		}
	}
	return nil
}

// storedGraph is the newest HEAD of a unit namespace (prefix) that
// records a graph fingerprint; the zero value when the store holds none.
type storedGraph struct {
	hd     checkpoint.Head
	prefix string
}

// checkStoreUnits refuses a unit count other than the one the job's HEAD
// chains in store were written with (invariant 7 of docs/scale-out.md),
// naming both: the newest HEAD of unit 0 of every stage (which every unit
// count has) records its stage's count. It runs before any topic is
// created, so that a broker that never saw the job does not get topics of
// the wrong count first. It returns the HEAD of the lowest stage's unit 0
// that has one (the graph the store records; the election's first rule,
// UnitBalancer).
func checkStoreUnits(ctx context.Context, store checkpoint.Store, st *graph.Stages) (storedGraph, error) {
	if store == nil {
		return storedGraph{}, fmt.Errorf("job: no checkpoint store (Settings.Store)")
	}
	var stored storedGraph
	for s := range st.Stages {
		heads := checkpoint.Heads{Store: store, Prefix: checkpoint.UnitPrefix(st.Job, s, 0)}
		hd, err := heads.Latest(ctx)
		if err == nil {
			// A claim's graph wrote no state (its restore may have
			// failed): the graph is that of the HEAD naming the checkpoint.
			hd, err = heads.Writer(ctx, hd)
		}
		if err != nil {
			return storedGraph{}, fmt.Errorf("job: %w", err)
		}
		if hd.Units != 0 && hd.Units != st.Units {
			return storedGraph{}, fmt.Errorf("job: the store holds the HEAD chains of %d units of stage %d, cluster.units is %d (HEAD-%d of %s in %s): %w", hd.Units, s, st.Units, hd.Seq, heads.Prefix, store, ErrUnitsChanged)
		}
		if stored.hd.Fingerprint == "" && hd.Fingerprint != "" {
			stored = storedGraph{hd: hd, prefix: heads.Prefix}
		}
	}
	return stored, nil
}

// heartbeatInterval is the group heartbeat interval for a session
// timeout: a third of it (Kafka's rule), at most 1s, so a member learns of
// a rebalance (a member leaving or joining) within a second rather than
// Kafka's default 3s: a leaving member's units run elsewhere that much
// sooner.
func heartbeatInterval(session time.Duration) time.Duration {
	return min(time.Second, max(session/3, 100*time.Millisecond))
}

// leaveTimeout bounds leaveGroup's LeaveGroup request.
const leaveTimeout = 5 * time.Second

// leaveGroup makes the static member mc.MemberID leave mc.GroupID at once
// (LeaveGroup by group.instance.id, KIP-345), after its units took their
// final checkpoints: kgo's Close leaves no group as a static member, so
// without it the group would hand the units over only once the session
// timeout expired. A failure is logged: the session timeout then moves
// the units.
func leaveGroup(opts []kgo.Opt, mc MemberConfig, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	cl, err := kgo.NewClient(opts...)
	if err == nil {
		defer cl.Close()
		var resp kadm.LeaveGroupResponses
		resp, err = kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(mc.GroupID).InstanceIDs(mc.MemberID).Reason("kstreamd member stopping: its units took their final checkpoints"))
		if err == nil {
			err = resp.Error()
		}
	}
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) {
		logger.Warn("could not leave the group; the group moves this member's units after cluster.session_timeout", "err", err)
		return
	}
	logger.Info("left the group: its units go to the other members now")
}

// Member is this daemon's membership of a cluster-mode job (RunMember),
// for the HTTP API: its member id, the units it runs, and which member
// holds which unit. Safe for concurrent use.
type Member struct {
	id, group, job, topic string
	units                 int // per stage
	cl                    *kgo.Client
	mu                    sync.Mutex // guards running and excluded
	running               map[int32]*unitRun
	stages                *graph.Stages // the job's stages, for QueryState (query_cluster.go)
	// fingerprint is this daemon's graph; excluded, when not "", says why
	// the member gets no units (another graph won the election).
	fingerprint string
	excluded    string
	excludedBy  string // the job's graph excluded names
	logger      *slog.Logger
}

// exclude records why the member gets no units: the job runs graph
// (why says how that was decided), "" when the member is eligible. It
// logs once per graph: a reason for the graph already recorded keeps the
// first (the store's, read before joining, names the HEAD).
func (m *Member) exclude(graph, why string) {
	m.mu.Lock()
	was := m.excludedBy
	if graph != was {
		m.excluded, m.excludedBy = why, graph
	}
	m.mu.Unlock()
	switch {
	case graph == was:
	case graph != "":
		m.logger.Error("member excluded: it gets no units", "reason", why)
	default:
		m.logger.Info("member eligible again: the job runs this daemon's graph")
	}
}

// elected is UnitBalancer.Elected: the member is excluded while the
// elected graph is not its own.
func (m *Member) elected(e GraphElection) {
	if e.Fingerprint == m.fingerprint {
		m.exclude("", "")
		return
	}
	by := map[string]string{ElectedByStore: "recorded by the store's HEADs", ElectedByRunning: "its members run the most units",
		ElectedByMembers: "it has the most members", ElectedByOwned: "its members own the most units",
		ElectedByUpgrade: "a state-compatible upgrade of the graph the store's HEADs record"}[e.By]
	m.exclude(e.Fingerprint, fmt.Sprintf("this daemon runs graph %.12s, the job runs graph %.12s (%s): it gets no units; run it with the job's pipeline file",
		m.fingerprint, e.Fingerprint, cmp.Or(by, e.By)))
}

// Excluded returns why the member gets no units: its graph is not the one
// the job runs (UnitBalancer's election); "" when it is eligible.
func (m *Member) Excluded() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.excluded
}

// runningUnits is UnitBalancer.Running: the units whose attempt runs.
func (m *Member) runningUnits() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.running {
		if r.current() != nil {
			n++
		}
	}
	return n
}

// ClusterStatus is a member's view of its cluster-mode job (GET
// /api/v1/job in cluster mode).
type ClusterStatus struct {
	Job string `json:"name"`
	// Member is this daemon's member id (cluster.member_id); Group the
	// consumer group; Joined whether the member is in a generation of it.
	Member string `json:"member"`
	Group  string `json:"group"`
	Joined bool   `json:"joined"`
	// Units are the units this daemon holds, by stage then index.
	Units []UnitStatus `json:"units"`
	// Members is every member of the group with the units the group's
	// last assignment gave it, by member id; MembersError says why it is
	// missing (the group could not be described).
	Members      []MemberUnits `json:"members"`
	MembersError string        `json:"members_error,omitempty"`
	// Excluded says why this daemon gets no units (Member.Excluded):
	// its graph is not the one the job runs; omitted when eligible.
	Excluded string `json:"excluded,omitempty"`
}

// UnitID names a unit: unit Unit of stage Stage.
type UnitID struct {
	Stage int `json:"stage"`
	Unit  int `json:"unit"`
}

// UnitStatus is one unit this daemon holds: whether its attempt runs with
// its sources caught up, its last checkpoint completed here (0: none), its
// state (StateRunning, UnitStarting, StateRestarting, UnitTakenOver,
// StateFailed) and, when it is not running, the last failure.
type UnitStatus struct {
	UnitID
	Running          bool   `json:"running"`
	LastCheckpointID int64  `json:"last_checkpoint_id"`
	State            string `json:"state"`
	Error            string `json:"error,omitempty"`
}

// MemberUnits is one member of the group and the units assigned to it.
type MemberUnits struct {
	// Member is the static member id (group.instance.id), else Kafka's
	// member id; Host the client host the broker saw.
	Member string   `json:"member"`
	Host   string   `json:"host"`
	Units  []UnitID `json:"units"`
	// Fingerprint is the graph fingerprint the member joined with (its
	// first 12 hex digits); Excluded is set when it holds no unit while
	// the members holding units run another graph: the group keeps it
	// out of the job.
	Fingerprint string `json:"fingerprint"`
	Excluded    bool   `json:"excluded,omitempty"`
}

// ID returns this daemon's member id.
func (m *Member) ID() string { return m.id }

// Joined reports whether the member is in a generation of the group.
func (m *Member) Joined() bool {
	_, gen := m.cl.GroupMetadata()
	return gen > 0
}

// Ready reports whether the member joined the group and every unit
// assigned to it runs and is ready (Job.Readiness: its broadcast sources
// caught up, every source subtask reading all its partitions); the HTTP
// API's /readyz.
func (m *Member) Ready() bool {
	ok, _ := m.Readiness()
	return ok
}

// Readiness is Ready with the reason when not ready: not joined, a unit
// not running, or the Job.Readiness reason of a unit, named stage/unit.
func (m *Member) Readiness() (bool, string) {
	if why := m.Excluded(); why != "" {
		return false, why
	}
	if !m.Joined() {
		return false, "joining the group"
	}
	m.mu.Lock()
	runs := maps.Clone(m.running)
	m.mu.Unlock()
	var why []string
	for _, p := range slices.Sorted(maps.Keys(runs)) {
		j, state, lastErr := runs[p].status()
		if j == nil {
			u := m.unit(p)
			why = append(why, fmt.Sprintf("stage %d unit %d: %s", u.Stage, u.Unit, notRunning(state, lastErr)))
			continue
		}
		if ok, reason := j.Readiness(); !ok {
			u := m.unit(p)
			why = append(why, fmt.Sprintf("stage %d unit %d: %s", u.Stage, u.Unit, reason))
		}
	}
	return len(why) == 0, strings.Join(why, "; ")
}

// local returns the units this daemon holds.
func (m *Member) local() []UnitStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]UnitStatus, 0, len(m.running))
	for _, p := range slices.Sorted(maps.Keys(m.running)) {
		j, state, lastErr := m.running[p].status()
		u := UnitStatus{UnitID: m.unit(p), State: state}
		if j != nil {
			u.Running = j.Coordinator().Ready()
			u.LastCheckpointID, _ = j.Coordinator().LastCompleted()
		} else {
			u.Error = lastErr
		}
		out = append(out, u)
	}
	return out
}

// notRunning says why a unit assigned here has no running attempt.
func notRunning(state, lastErr string) string {
	switch {
	case state == UnitTakenOver:
		return "taken over by another claim (" + lastErr + "); claimed again once the group confirms it is assigned here"
	case lastErr != "":
		return state + " after: " + lastErr
	}
	return state
}

// awaitAssigned returns nil once the group confirms that unit partition p
// is assigned to this member (assignedHere), checking every
// assignedPoll, or ctx's error when ctx ends first (the unit was revoked
// or lost).
func (m *Member) awaitAssigned(ctx context.Context, p int32) error {
	for {
		if m.assignedHere(ctx, p) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(assignedPoll):
		}
	}
}

// assignedPoll is how often awaitAssigned asks the group.
const assignedPoll = time.Second

// assignedHere reports whether the group coordinator, asked now
// (DescribeGroups), holds a stable generation in which this member (its
// current Kafka member id: a zombie whose session was replaced has
// another) is assigned unit partition p. A member that cannot reach the
// coordinator gets false.
func (m *Member) assignedHere(ctx context.Context, p int32) bool {
	memberID, gen := m.cl.GroupMetadata()
	if gen <= 0 || memberID == "" {
		return false
	}
	groups, err := kadm.NewClient(m.cl).DescribeGroups(ctx, m.group)
	if err != nil || groups.Error() != nil {
		return false
	}
	g := groups[m.group]
	if g.State != "Stable" {
		return false
	}
	for _, gm := range g.Members {
		if gm.MemberID != memberID {
			continue
		}
		a, ok := gm.Assigned.AsConsumer()
		if !ok {
			return false
		}
		for _, t := range a.Topics {
			if t.Topic == m.topic && slices.Contains(t.Partitions, p) {
				return true
			}
		}
	}
	return false
}

func (m *Member) unit(p int32) UnitID { return UnitID{Stage: int(p) / m.units, Unit: int(p) % m.units} }

// Status returns the member's view of the job: its own units, and every
// member's assignment as the group coordinator holds it (DescribeGroups,
// the UnitBalancer's consumer assignment decoded into units).
func (m *Member) Status(ctx context.Context) ClusterStatus {
	st := ClusterStatus{Job: m.job, Member: m.id, Group: m.group, Joined: m.Joined(), Units: m.local(), Members: []MemberUnits{}, Excluded: m.Excluded()}
	groups, err := kadm.NewClient(m.cl).DescribeGroups(ctx, m.group)
	if err == nil {
		err = groups.Error()
	}
	if err != nil {
		st.MembersError = err.Error()
		return st
	}
	for _, gm := range groups[m.group].Members {
		mu := MemberUnits{Member: gm.MemberID, Host: gm.ClientHost, Units: []UnitID{}}
		if gm.InstanceID != nil {
			mu.Member = *gm.InstanceID
		}
		if a, ok := gm.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				if t.Topic != m.topic {
					continue
				}
				for _, p := range slices.Sorted(slices.Values(t.Partitions)) {
					mu.Units = append(mu.Units, m.unit(p))
				}
			}
		}
		if j, ok := gm.Join.AsConsumer(); ok {
			join, _ := parseUnitsJoin(j.UserData)
			mu.Fingerprint = join.Fingerprint
		}
		st.Members = append(st.Members, mu)
	}
	running := map[string]bool{} // fingerprints of the members holding units
	for _, mu := range st.Members {
		if len(mu.Units) > 0 {
			running[mu.Fingerprint] = true
		}
	}
	for i := range st.Members {
		mu := &st.Members[i]
		mu.Excluded = len(mu.Units) == 0 && len(running) > 0 && !running[mu.Fingerprint]
		mu.Fingerprint = mu.Fingerprint[:min(len(mu.Fingerprint), 12)]
	}
	slices.SortFunc(st.Members, func(a, b MemberUnits) int { return strings.Compare(a.Member, b.Member) })
	return st
}

// ensureUnitsTopic creates the units topic with n partitions, or checks
// that it has n.
func ensureUnitsTopic(ctx context.Context, opts []kgo.Opt, topic string, n int) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("job: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopic(ctx, int32(n), -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err == nil || !errors.Is(err, kerr.TopicAlreadyExists) {
		if err != nil {
			return fmt.Errorf("job: create units topic %s: %w", topic, err)
		}
		return nil
	}
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("job: describe units topic %s: %w", topic, err)
	}
	if got := len(details[topic].Partitions); got != n {
		return fmt.Errorf("job: units topic %s has %d partitions, stages x cluster.units is %d: %w", topic, got, n, ErrUnitsChanged)
	}
	return nil
}
