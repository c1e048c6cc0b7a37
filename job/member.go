package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
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
	// OnJoined, if not nil, is called once the member's group client is
	// up (before any unit is assigned).
	OnJoined func()
}

// UnitsTopic returns the units topic of job: "<job>-units", one partition
// per unit (partition stage*units+index), never produced to: its
// partitions are what the group protocol hands out.
func UnitsTopic(job string) string { return job + "-units" }

// unitRun is one unit running in this process.
type unitRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	job    *Job // the current attempt; nil while building
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
// the unit's ids), on revoke it waits up to mc.RevokeTimeout for the unit's
// next completed checkpoint and then stops it (what it processed after
// that checkpoint is replayed by the next owner), on lost it stops it at
// once. A unit that fails is rebuilt after a second while assigned, except
// after checkpoint.ErrHeadExists (another owner took it: a zombie must not
// claim it back). RunMember returns nil when ctx ends, after stopping every
// unit as on revoke.
func RunMember(ctx context.Context, st *graph.Stages, set Settings, deps Deps, mc MemberConfig) error {
	logger := deps.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "cluster", "member", mc.MemberID)
	deps.Logger = logger
	if err := checkStoreUnits(ctx, set.Store, st); err != nil {
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
	var (
		mu    sync.Mutex
		units = map[int32]*unitRun{}
	)
	start := func(p int32) {
		stage, index := int(p)/st.Units, int(p)%st.Units
		// Not a child of ctx: when ctx ends, units stop through revoke
		// (with their final checkpoint), not all at once.
		uctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		r := &unitRun{cancel: cancel, done: make(chan struct{})}
		mu.Lock()
		if units[p] != nil { // already running (the cooperative protocol only hands out additions)
			mu.Unlock()
			cancel()
			return
		}
		units[p] = r
		mu.Unlock()
		s := set
		s.Unit = &Unit{Stage: stage, Index: index, Units: st.Units, Member: mc.MemberID, Fingerprint: st.Fingerprint}
		ulog := logger.With("stage", stage, "unit", index)
		go func() {
			defer close(r.done)
			for uctx.Err() == nil {
				j, err := Build(uctx, st.Stages[stage].Graph, s, deps)
				if err == nil {
					r.mu.Lock()
					r.job = j
					r.mu.Unlock()
					ulog.Info("unit running", "restored_from", j.RestoredFrom())
					err = j.Run(uctx)
					r.mu.Lock()
					r.job = nil
					r.mu.Unlock()
				}
				if uctx.Err() != nil {
					return
				}
				if errors.Is(err, checkpoint.ErrHeadExists) {
					ulog.Error("unit taken over by another owner: stopped", "err", err)
					return
				}
				ulog.Error("unit failed; rebuilding", "err", err)
				select {
				case <-uctx.Done():
				case <-time.After(time.Second):
				}
			}
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
		if j := r.current(); j != nil && bound > 0 {
			last, _ := j.Coordinator().LastCompleted()
			deadline := time.After(bound)
		wait:
			for {
				if id, _ := j.Coordinator().LastCompleted(); id > last {
					break
				}
				select {
				case <-r.done:
					break wait
				case <-deadline:
					logger.Warn("revoked unit stops without a final checkpoint: revoke_timeout passed", "stage", int(p)/st.Units, "unit", int(p)%st.Units, "revoke_timeout", bound)
					break wait
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
		r.cancel()
		<-r.done
		logger.Info("unit stopped", "stage", int(p)/st.Units, "unit", int(p)%st.Units)
	}
	each := func(m map[string][]int32, fn func(int32)) {
		var wg sync.WaitGroup
		for _, p := range m[topic] {
			wg.Go(func() { fn(p) })
		}
		wg.Wait()
	}
	bal := &UnitBalancer{Topic: topic, Stages: len(st.Stages), Units: st.Units, Fingerprint: st.Fingerprint}
	opts := append([]kgo.Opt{}, deps.ClientOpts...)
	opts = append(opts,
		kgo.ConsumerGroup(mc.GroupID), kgo.ConsumeTopics(topic), kgo.Balancers(bal),
		kgo.SessionTimeout(mc.SessionTimeout), kgo.RebalanceTimeout(mc.RebalanceTimeout),
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			logger.Info("units assigned", "partitions", fmt.Sprint(m[topic]))
			for _, p := range m[topic] {
				start(p)
			}
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			logger.Info("units revoked", "partitions", fmt.Sprint(m[topic]))
			each(m, func(p int32) { stop(p, mc.RevokeTimeout) })
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			logger.Warn("units lost", "partitions", fmt.Sprint(m[topic]))
			each(m, func(p int32) { stop(p, 0) })
		}),
	)
	if mc.MemberID != "" {
		opts = append(opts, kgo.InstanceID(mc.MemberID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("job: group client: %w", err)
	}
	if mc.OnJoined != nil {
		mc.OnJoined()
	}
	for ctx.Err() == nil {
		cl.PollFetches(ctx) // the units topic holds no records: this only keeps the group session
	}
	cl.Close() // revokes every unit (OnPartitionsRevoked) before it returns
	mu.Lock()
	left := make([]int32, 0, len(units))
	for p := range units {
		left = append(left, p)
	}
	mu.Unlock()
	for _, p := range left {
		stop(p, 0)
	}
	return nil
}

// checkStoreUnits refuses a unit count other than the one the job's HEAD
// chains in store were written with (invariant 7 of docs/scale-out.md),
// naming both: the newest HEAD of unit 0 of every stage (which every unit
// count has) records its stage's count. It runs before any topic is
// created, so that a broker that never saw the job does not get topics of
// the wrong count first.
func checkStoreUnits(ctx context.Context, store checkpoint.Store, st *graph.Stages) error {
	if store == nil {
		return fmt.Errorf("job: no checkpoint store (Settings.Store)")
	}
	for s := range st.Stages {
		heads := checkpoint.Heads{Store: store, Prefix: checkpoint.UnitPrefix(st.Job, s, 0)}
		hd, err := heads.Latest(ctx)
		if err != nil {
			return fmt.Errorf("job: %w", err)
		}
		if hd.Units != 0 && hd.Units != st.Units {
			return fmt.Errorf("job: the store holds the HEAD chains of %d units of stage %d, cluster.units is %d (HEAD-%d of %s in %s): %w", hd.Units, s, st.Units, hd.Seq, heads.Prefix, store, ErrUnitsChanged)
		}
	}
	return nil
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
