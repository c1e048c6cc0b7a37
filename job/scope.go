package job

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/sink"
	"github.com/kstreamd/kstreamd/source"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// scope is what a Build is: a whole job in one process, or one
// cluster-mode work unit (Settings.Unit, docs/scale-out.md). Everything
// cluster mode changes about a build is decided here, once, so the
// per-kind builders carry no branch on it: where checkpoints and state
// live, how a restore is found, which key groups and input splits a
// subtask holds, which transactional ids a writer uses and fences, and
// whether a repartition sink writes markers.
type scope struct {
	// unit is nil for a whole job.
	unit *Unit
	// chkDir and chkName are the checkpoint storage's directory and job
	// name: <CheckpointDir>, <job>; for a unit the staging namespace
	// <CheckpointDir>/<job>/units/<stage>, <index>.
	chkDir, chkName string
	// stateRoot holds the local keyed state: <StateDir>/<job>, for a unit
	// <StateDir>/<job>/units/<stage>/<index>.
	stateRoot string
	// logger is the process logger, with stage and unit for a unit.
	logger *slog.Logger
}

// newScope returns the scope of building g with set.
func newScope(g *graph.Graph, set Settings, logger *slog.Logger) scope {
	u := set.Unit
	if u == nil {
		return scope{chkDir: set.CheckpointDir, chkName: g.Job, stateRoot: filepath.Join(set.StateDir, g.Job), logger: logger}
	}
	stage, index := strconv.Itoa(u.Stage), strconv.Itoa(u.Index)
	return scope{
		unit:   u,
		chkDir: filepath.Join(set.CheckpointDir, g.Job, "units", stage), chkName: index,
		stateRoot: filepath.Join(set.StateDir, g.Job, "units", stage, index),
		logger:    logger.With("stage", u.Stage, "unit", u.Index),
	}
}

// findRestore returns what to restore (dir and metadata, or none) and, for
// a unit, the owner of its namespace. A whole job restores
// deps.FromSavepoint, else its latest completed checkpoint (findLatest).
// A unit claims the next HEAD of its namespace in set.Store, which fences
// the previous owner before anything is committed or fenced in Kafka, and
// restores the checkpoint the HEAD before it names (docs/scale-out.md,
// takeover); its local staging copy starts empty.
func (sc scope) findRestore(ctx context.Context, g *graph.Graph, set Settings, storage *checkpoint.Storage, deps Deps) (string, *checkpoint.Metadata, *checkpoint.Owner, error) {
	u := sc.unit
	if u == nil {
		dir, meta, err := findLatest(storage, deps.FromSavepoint)
		return dir, meta, nil, err
	}
	if set.Store == nil {
		return "", nil, nil, fmt.Errorf("job: stage %d unit %d: no checkpoint store (Settings.Store)", u.Stage, u.Index)
	}
	if err := checkpoint.SelfTest(ctx, set.Store, g.Job+"/"); err != nil {
		return "", nil, nil, err
	}
	if err := os.RemoveAll(storage.JobDir()); err != nil {
		return "", nil, nil, fmt.Errorf("job: clear checkpoint staging dir: %w", err)
	}
	ns := checkpoint.Namespace{Store: set.Store, Prefix: checkpoint.UnitPrefix(g.Job, u.Stage, u.Index), Local: storage}
	if deps.Metrics != nil {
		ns.Resolved = deps.Metrics.cluster.headResolved
	}
	remote := unitRemoteStore(set)
	ns.Remote = remote // Retain collects its unreferenced objects (cluster_remotestate.go)
	var restores func(checkpoint.Head) error
	if u.Restores != nil {
		restores = func(hd checkpoint.Head) error { return u.Restores(ctx, hd.Fingerprint) }
	}
	owner, head, err := checkpoint.ClaimUpgrade(ctx, ns, u.Member, u.Fingerprint, u.Units, set.Retained, restores)
	if err != nil {
		return "", nil, nil, fmt.Errorf("job: stage %d unit %d: claim: %w", u.Stage, u.Index, err)
	}
	if err := releaseEarlierOwners(remote, sc.logger); err != nil { // cluster_remotestate.go
		return "", nil, nil, fmt.Errorf("job: stage %d unit %d: %w", u.Stage, u.Index, err)
	}
	if head.CheckpointID == 0 {
		// No checkpoint of its own yet: the job's savepoint origin, if
		// it started from one (cluster_savepoint.go).
		dir, meta, err := savepointRestore(ctx, g, set)
		if err != nil {
			return "", nil, nil, fmt.Errorf("job: stage %d unit %d: %w", u.Stage, u.Index, err)
		}
		if meta != nil {
			if err := verify(dir, meta); err != nil {
				return "", nil, nil, fmt.Errorf("job: stage %d unit %d: restore %s: %w", u.Stage, u.Index, dir, err)
			}
		}
		return dir, meta, owner, nil
	}
	dir, meta, err := owner.Restore(ctx, head)
	if err != nil {
		return "", nil, nil, fmt.Errorf("job: stage %d unit %d: HEAD-%d: %w", u.Stage, u.Index, head.Seq, err)
	}
	if err := verifyRemote(dir, meta, remote); err != nil {
		return "", nil, nil, fmt.Errorf("job: restore %s: %w", dir, err)
	}
	return dir, meta, owner, nil
}

// keyGroups returns the key groups of subtask sub of an operator of
// parallelism p: its share of maxP, or the unit's.
func (sc scope) keyGroups(maxP, p, sub int) keygroup.Range {
	if sc.unit != nil {
		return keygroup.RangeFor(maxP, sc.unit.Units, sc.unit.Index)
	}
	return keygroup.RangeFor(maxP, p, sub)
}

// txn returns the transactional-id prefix of a writer configured with
// prefix p and the subtask index its ids carry: p and sub, or for a unit
// <p>-<stage> and the unit's index (ids <p>-<stage>-<index>-<slot>).
func (sc scope) txn(p string, sub int) (string, int) {
	if sc.unit != nil {
		return sc.unit.prefix(p), sc.unit.Index
	}
	return p, sub
}

// fenceOnly returns the only transactional ids a recovery of a writer
// with (already scoped) prefix and pool fences: nil (every id of the
// prefix) for a whole job, the unit's own ids for a unit, which never
// fences another unit's live transactions.
func (sc scope) fenceOnly(prefix string, pool int) []string {
	if sc.unit == nil {
		return nil
	}
	only := make([]string, 0, pool)
	for slot := range pool {
		only = append(only, sink.TransactionalID(prefix, sc.unit.Index, slot))
	}
	return only
}

// sourcePartitions returns the partitions a subtask of source s reads
// when they are not the AssignPartition share (only, nil for that) and
// the upstream units whose markers give its time (nil for none): a unit
// reads its share of a job source's partitions, every partition of a
// broadcast source, and of a repartition source only partition Index,
// whose time comes from the markers of every unit of the upstream stage
// (invariant 4).
func (sc scope) sourcePartitions(s *graph.Source, partitions int32) (only []int32, upstream []string) {
	u := sc.unit
	switch {
	case u == nil || s.Broadcast:
		return nil, nil
	case s.Repartition:
		for i := range u.Units {
			upstream = append(upstream, runtime.MarkerUnit(s.UpstreamStage, i))
		}
		return []int32{int32(u.Index)}, upstream
	}
	return append([]int32{}, source.PartitionsFor(s.Topic, partitions, u.Index, u.Units)...), nil
}

// markers returns the marker config of an exactly-once sink: a unit's
// repartition sink carries its time across the exchange (invariant 4);
// nil for every other sink.
func (sc scope) markers(sk *graph.Sink, interval time.Duration) *sink.MarkerConfig {
	if sc.unit == nil || sk.Units == 0 {
		return nil
	}
	return &sink.MarkerConfig{Unit: runtime.MarkerUnit(sc.unit.Stage, sc.unit.Index), Interval: cmp.Or(interval, sink.DefaultMarkerInterval)}
}

// countTakeover counts a unit's build in its cluster metrics: a takeover,
// a restore when it restores, and its HEAD; nothing for a whole job.
func (sc scope) countTakeover(m *Metrics, rp restorePlan) {
	if sc.unit == nil {
		return
	}
	l := unitLabels(sc.unit)
	m.cluster.takeovers.WithLabelValues(l...).Inc()
	restores := m.cluster.restores.WithLabelValues(l...) // 0 until a takeover restores
	if rp.meta != nil {
		restores.Inc()
	}
	m.cluster.head.WithLabelValues(l...).Set(float64(rp.owner.Seq()))
}

// coordinatorHooks returns, for a unit, the coordinator's Committed hook
// (counting checkpoints and the HEAD) and its repartition purge (nil
// unless it reads a repartition topic and set.PurgeRepartitions); nil and
// nil for a whole job.
func (sc scope) coordinatorHooks(g *graph.Graph, set Settings, deps Deps, m *Metrics, owner *checkpoint.Owner) (func(int64, *checkpoint.Metadata), *repartitionPurge) {
	if sc.unit == nil {
		return nil, nil
	}
	l := unitLabels(sc.unit)
	checkpoints, head := m.cluster.checkpoints.WithLabelValues(l...), m.cluster.head.WithLabelValues(l...)
	var purge *repartitionPurge
	if targets := purgeTargets(g, sc.unit); len(targets) > 0 && set.PurgeRepartitions {
		purged := map[string]prometheus.Gauge{} // by topic: one per role of a two-input operator
		for _, tg := range targets {
			purged[tg.topic] = m.cluster.purged.WithLabelValues(append(slices.Clone(l), tg.topic)...)
		}
		purge = &repartitionPurge{targets: targets, logger: sc.logger.With("component", "purge"), opts: deps.ClientOpts,
			next: make(chan kadm.Offsets, 1), done: map[string]int64{},
			purged: func(topic string, _ int32, offset int64) {
				if g, ok := purged[topic]; ok {
					g.Set(float64(offset))
				}
			}}
	}
	return func(int64, *checkpoint.Metadata) {
		checkpoints.Inc()
		head.Set(float64(owner.Seq()))
	}, purge
}
