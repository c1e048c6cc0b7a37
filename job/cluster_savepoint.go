package job

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/internal/atomicfile"
	"github.com/kstreamd/kstreamd/source"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// Cluster savepoints (docs/scale-out.md, "Savepoints across the cluster"):
// a stop-with-savepoint of a cluster-mode job gathers every unit's final
// checkpoint into one savepoint directory with one _metadata, in the
// format of a single-process savepoint taken at parallelism cluster.units
// (operator subtask u is unit u, with its key-group range); the
// repartition topics are drained first, so the savepoint holds only the
// operators' state and the input topics' offsets, never a repartition
// offset. A cluster restores it, or a single-process savepoint, through
// the job's savepoint origin in the store: each unit whose HEAD chain
// names no checkpoint takes its share of it (its key groups, its input
// partitions, its part of the operator list state), as in a rescale.

// Keys of the cluster store, under "<job>/", that cluster savepoints use.
const (
	// StopRequestKey is "<job>/stop-with-savepoint": a ClusterStopRequest,
	// created create-only by StopClusterWithSavepoint. Every member stops
	// its units (final checkpoints, leave) when it appears, and a member
	// does not start while it exists (ErrJobStopped).
	StopRequestKey = "stop-with-savepoint"
	// StoppedKey is "<job>/stopped-with-savepoint": the ClusterStopRequest
	// with Savepoint set, written once the savepoint is complete.
	StoppedKey = "stopped-with-savepoint"
	// DrainerKey is "<job>/stop-drainer": a ClusterStopRequest naming
	// the member that drains the stopped job (By), created create-only
	// once the group is empty, so that one process drains; deleted when
	// its drain fails, so that the next attempt may take it.
	DrainerKey = "stop-drainer"
	// SavepointOriginKey is "<job>/savepoint-origin": the
	// SavepointOrigin a cluster job was started from
	// (AdoptClusterSavepoint); each unit without a checkpoint restores
	// its share of it.
	SavepointOriginKey = "savepoint-origin"
	// ClusterSavepointInfo is the file beside a cluster savepoint's
	// _metadata naming the units it gathered (ClusterSavepointUnits), for
	// people and tools; a restore does not need it.
	ClusterSavepointInfo = "_cluster"
)

// ErrJobStopped is wrapped by RunMember's error when the job was stopped
// with a savepoint (its store holds StopRequestKey): a stopped job does
// not run again under its name; a new job starts from the savepoint.
var ErrJobStopped = errors.New("job: the cluster job was stopped with a savepoint")

// ErrSavepointOrigin is wrapped by AdoptClusterSavepoint's error when the
// job cannot start from the savepoint: the store already holds state of
// the job (HEADs, another origin) or a repartition topic holds records.
var ErrSavepointOrigin = errors.New("job: the cluster job cannot start from this savepoint")

// ClusterStopRequest is the content of StopRequestKey and StoppedKey
// (JSON).
type ClusterStopRequest struct {
	// Requested is when the stop was asked for; By the member or tool
	// that asked.
	Requested time.Time `json:"requested"`
	By        string    `json:"by"`
	// Dir is the directory the savepoint goes under.
	Dir string `json:"dir"`
	// Savepoint is the savepoint's directory once complete (StoppedKey
	// only).
	Savepoint string `json:"savepoint,omitempty"`
}

// SavepointOrigin is the content of SavepointOriginKey (JSON): the
// savepoint a cluster job started from.
type SavepointOrigin struct {
	// Savepoint is the savepoint's absolute directory: every daemon of
	// the job must reach it (a shared filesystem).
	Savepoint string `json:"savepoint"`
	// Job and CheckpointID are the savepoint's (its _metadata).
	Job          string `json:"job"`
	CheckpointID int64  `json:"checkpoint_id"`
	// Adopted is when the first daemon adopted it, By which.
	Adopted time.Time `json:"adopted"`
	By      string    `json:"by"`
}

// ClusterSavepointUnits is the content of a cluster savepoint's
// ClusterSavepointInfo file (JSON): what it gathered.
type ClusterSavepointUnits struct {
	Job         string `json:"job"`
	Fingerprint string `json:"fingerprint"`
	// Units is cluster.units; Stages the number of stages.
	Units  int `json:"units"`
	Stages int `json:"stages"`
	// Gathered lists each unit's final checkpoint, by stage then unit.
	Gathered []GatheredUnit `json:"gathered"`
}

// GatheredUnit is one unit's final checkpoint in a cluster savepoint: the
// HEAD that named it, its key groups (subtask Unit of every operator of
// its stage in the savepoint) and where its files are, relative to the
// savepoint's directory.
type GatheredUnit struct {
	UnitID
	Head         int64          `json:"head"`
	CheckpointID int64          `json:"checkpoint_id"`
	KeyGroups    keygroup.Range `json:"key_groups"`
	Dir          string         `json:"dir"`
}

// ClusterSavepointConfig is how StopClusterWithSavepoint stops a job.
type ClusterSavepointConfig struct {
	// GroupID is the job's consumer group; the units are drained only
	// once it has no member left.
	GroupID string
	// Member names the requester: in the stop request and as the member
	// id of the drain's unit claims.
	Member string
	// Dir is the directory the savepoint is written under (a new
	// savepoint-<id>-<unix> directory in it).
	Dir string
	// Poll is how often the members' stop and the group's emptiness are
	// checked; 0 means 200ms.
	Poll time.Duration
	// Quiet is how long the drain check waits for a record past a unit's
	// offset in its repartition partition before it counts the partition
	// drained; 0 means DefaultDrainQuiet.
	Quiet time.Duration
}

// DefaultDrainQuiet is ClusterSavepointConfig.Quiet's default.
const DefaultDrainQuiet = 2 * time.Second

// drainPoll is the pause between two checkpoints of a unit that is not
// drained yet.
const drainPoll = 100 * time.Millisecond

// stopRequestPoll is how often a member looks for the stop request.
const stopRequestPoll = time.Second

func storeKey(job, key string) string { return job + "/" + key }

// readStoreJSON reads key of store into v; found is false when the key
// does not exist.
func readStoreJSON(ctx context.Context, store checkpoint.Store, key string, v any) (found bool, err error) {
	b, err := store.Read(ctx, key)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("job: %s in %s: %w", key, store, err)
	}
	return true, nil
}

// clusterStopped returns the job's stop request (and the savepoint, once
// gathered), nil when the job was not stopped.
func clusterStopped(ctx context.Context, store checkpoint.Store, job string) (*ClusterStopRequest, error) {
	var req ClusterStopRequest
	found, err := readStoreJSON(ctx, store, storeKey(job, StopRequestKey), &req)
	if err != nil || !found {
		return nil, err
	}
	var done ClusterStopRequest
	if ok, err := readStoreJSON(ctx, store, storeKey(job, StoppedKey), &done); err == nil && ok {
		return &done, nil
	}
	return &req, nil
}

// stoppedError is the error wrapping ErrJobStopped for req.
func stoppedError(req *ClusterStopRequest) error {
	where := "its savepoint is being taken under " + req.Dir
	if req.Savepoint != "" {
		where = "its savepoint is " + req.Savepoint
	}
	return fmt.Errorf("%w at %s by %s: %s; start a new job from it (run --from-savepoint with another job.name, or remove this job's state first)",
		ErrJobStopped, req.Requested.Format(time.RFC3339), req.By, where)
}

// finishStop is RunMember's check before it joins: a job stopped with a
// savepoint does not start again (an error wrapping ErrJobStopped naming
// it); a stop whose savepoint was never completed (its drainer failed or
// died) is finished here (StopClusterWithSavepoint resumes it), after
// which done is true and RunMember returns err (nil: stopped).
func finishStop(ctx context.Context, st *graph.Stages, set Settings, deps Deps, mc MemberConfig) (done bool, err error) {
	req, err := clusterStopped(ctx, set.Store, st.Job)
	if err != nil || req == nil {
		return false, err
	}
	if req.Savepoint != "" {
		return true, stoppedError(req)
	}
	deps.Logger.Warn("the job's stop-with-savepoint has no savepoint yet: finishing it here", "requested", req.Requested, "by", req.By, "dir", req.Dir)
	deps.Metrics, deps.Registerer = nil, prometheus.NewRegistry()
	sp, err := StopClusterWithSavepoint(ctx, st, set, deps, ClusterSavepointConfig{GroupID: mc.GroupID, Member: mc.MemberID, Dir: req.Dir})
	if err != nil {
		return true, err
	}
	deps.Logger.Info("member stopped: the job was stopped with a savepoint", "savepoint", sp)
	return true, nil
}

// watchStopRequest calls stop once the job's stop request appears in
// store, looking every stopRequestPoll until ctx ends (RunMember's hook:
// stop ends the member as SIGTERM does: final checkpoints, leave).
func watchStopRequest(ctx context.Context, store checkpoint.Store, job string, logger *slog.Logger, stop func()) {
	t := time.NewTicker(stopRequestPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var req ClusterStopRequest
		found, err := readStoreJSON(ctx, store, storeKey(job, StopRequestKey), &req)
		if err != nil {
			logger.Warn("could not look for a stop-with-savepoint request", "err", err)
			continue
		}
		if found {
			logger.Info("stop-with-savepoint requested: stopping every unit with its final checkpoint", "by", req.By, "dir", req.Dir)
			stop()
			return
		}
	}
}

// StopClusterWithSavepoint stops the cluster-mode job st with a savepoint
// (Flink's stop-with-savepoint, across daemons) and returns the
// savepoint's directory: it creates the job's stop request in set.Store
// (create-only; a second request is refused naming the first), which
// every member of the job sees within a second and ends as on SIGTERM
// (each unit takes its final checkpoint and commits it, the member leaves
// the group); once group sc.GroupID has no member left, it drains the job
// stage by stage in this process: each unit of stage 0, then 1, ... is
// claimed and restored from its HEAD like a takeover, a unit reading a
// repartition topic runs until it has read every record of its partition
// (the stages before it have stopped, so the partition is complete), and
// each takes a final checkpoint with stop-after (its sources stop after
// the barrier, its sinks commit). Then every unit's final checkpoint is
// gathered into one savepoint (gatherClusterSavepoint). The job then
// stays stopped: its members refuse to start (ErrJobStopped). set is the
// daemon's unit settings (staging and state directories, store); deps
// its Kafka client options and logger.
func StopClusterWithSavepoint(ctx context.Context, st *graph.Stages, set Settings, deps Deps, sc ClusterSavepointConfig) (string, error) {
	deps = deps.withDefaults()
	logger := deps.Logger.With("component", "cluster-savepoint")
	if set.Store == nil {
		return "", fmt.Errorf("job: no checkpoint store (Settings.Store)")
	}
	if sc.Dir == "" {
		return "", fmt.Errorf("job: stop with savepoint: no savepoint directory (--dir or checkpoints.savepoint_dir)")
	}
	dir, err := filepath.Abs(sc.Dir)
	if err != nil {
		return "", err
	}
	poll := sc.Poll
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	req := ClusterStopRequest{Requested: time.Now().UTC(), By: sc.Member, Dir: dir}
	b, _ := json.Marshal(req)
	if err := set.Store.Create(ctx, storeKey(st.Job, StopRequestKey), b); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("job: stop with savepoint: create the stop request: %w", err)
		}
		// An earlier request: refused once its savepoint is complete,
		// else resumed (its drain failed or its drainer died).
		have, err := clusterStopped(ctx, set.Store, st.Job)
		if err != nil {
			return "", err
		}
		if have == nil || have.Savepoint != "" {
			return "", stoppedError(cmp.Or(have, &req))
		}
		req = *have
		logger.Info("resuming the job's stop-with-savepoint", "requested", req.Requested, "by", req.By, "dir", req.Dir)
	}
	logger.Info("stop-with-savepoint requested; waiting for the members to stop", "group", sc.GroupID, "dir", req.Dir)
	if err := awaitEmptyGroup(ctx, deps.ClientOpts, sc.GroupID, poll); err != nil {
		return "", err
	}
	drainer := ClusterStopRequest{Requested: time.Now().UTC(), By: sc.Member, Dir: req.Dir}
	b, _ = json.Marshal(drainer)
	if err := set.Store.Create(ctx, storeKey(st.Job, DrainerKey), b); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return awaitDrainer(ctx, set.Store, st.Job, poll, logger)
		}
		return "", fmt.Errorf("job: stop with savepoint: %w", err)
	}
	sp, err := drainAndGather(ctx, st, set, deps, sc, req.Dir, logger)
	if err != nil {
		if derr := set.Store.Delete(context.WithoutCancel(ctx), storeKey(st.Job, DrainerKey)); derr != nil {
			logger.Warn("could not release the drain", "key", storeKey(st.Job, DrainerKey), "err", derr)
		}
		return "", err
	}
	req.Savepoint = sp
	b, _ = json.Marshal(req)
	if err := set.Store.Create(ctx, storeKey(st.Job, StoppedKey), b); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("job: stop with savepoint: record savepoint %s in the store: %w", sp, err)
	}
	logger.Info("cluster job stopped with savepoint", "savepoint", sp)
	return sp, nil
}

// awaitDrainer waits for the drain another process took (DrainerKey) and
// returns its savepoint once StoppedKey records it; an error when its
// drain failed (it released DrainerKey without a savepoint), or ctx's,
// naming the drainer (whose key is to be deleted by hand if it died).
func awaitDrainer(ctx context.Context, store checkpoint.Store, job string, poll time.Duration, logger *slog.Logger) (string, error) {
	var other ClusterStopRequest
	if _, err := readStoreJSON(ctx, store, storeKey(job, DrainerKey), &other); err != nil {
		return "", err
	}
	logger.Info("another process drains the stopped job: waiting for its savepoint", "drainer", other.By, "since", other.Requested)
	for {
		var done ClusterStopRequest
		found, err := readStoreJSON(ctx, store, storeKey(job, StoppedKey), &done)
		if err == nil && found && done.Savepoint != "" {
			return done.Savepoint, nil
		}
		var still ClusterStopRequest
		held, err := readStoreJSON(ctx, store, storeKey(job, DrainerKey), &still)
		if err == nil && !held {
			if found, _ := readStoreJSON(ctx, store, storeKey(job, StoppedKey), &done); found && done.Savepoint != "" {
				return done.Savepoint, nil
			}
			return "", fmt.Errorf("job: stop with savepoint: the drain by %s failed; ask again (kstreamd savepoint --stop) or start a daemon of the job, which finishes it", other.By)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("job: stop with savepoint: waiting for the drain by %s since %s (%s in %s; delete it if that process died): %w",
				other.By, other.Requested.Format(time.RFC3339), storeKey(job, DrainerKey), store, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// drainAndGather drains st stage by stage (drainUnit) and gathers the
// units' final checkpoints into a savepoint under dir.
func drainAndGather(ctx context.Context, st *graph.Stages, set Settings, deps Deps, sc ClusterSavepointConfig, dir string, logger *slog.Logger) (string, error) {
	var err error
	if deps.Metrics == nil {
		if deps.Metrics, err = NewMetrics(deps.Registerer); err != nil {
			return "", err
		}
	}
	quiet := sc.Quiet
	if quiet <= 0 {
		quiet = DefaultDrainQuiet
	}
	// The drainer claims the units as a member does: HEADs another graph
	// wrote are restored when this graph is a state-compatible upgrade of
	// it (a daemon started with the new pipeline file finishing a stop
	// requested of the old one, or a stop during a rolling upgrade, whose
	// units' HEADs record both graphs), refused naming why otherwise.
	upgrade, err := newUpgradeCheck(ctx, set, st)
	if err != nil {
		return "", err
	}
	for s := range st.Stages {
		errs := make([]error, st.Units)
		var wg sync.WaitGroup
		for u := range st.Units {
			wg.Go(func() {
				errs[u] = drainUnit(ctx, st, s, u, set, deps, sc.Member, quiet, upgrade.restores, logger)
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return "", fmt.Errorf("job: stop with savepoint: stage %d: %w", s, err)
		}
		logger.Info("stage drained and stopped", "stage", s)
	}
	return gatherClusterSavepoint(ctx, st, set.Store, dir, unitRemoteStores(set), atomicfile.SyncDir)
}

// awaitEmptyGroup returns nil once group has no member (every member
// stopped and left; one killed without leaving counts until its session
// timeout), asking every poll, or ctx's error.
func awaitEmptyGroup(ctx context.Context, opts []kgo.Opt, group string, poll time.Duration) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("job: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var lastErr error
	for {
		groups, err := adm.DescribeGroups(ctx, group)
		if err == nil {
			err = groups.Error()
		}
		if errors.Is(err, kerr.GroupIDNotFound) || (err == nil && len(groups[group].Members) == 0) {
			return nil // a group that never formed has no member either
		}
		if err != nil && ctx.Err() == nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("job: stop with savepoint: waiting for the members of group %s to stop (last error: %v): %w", group, lastErr, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// drainUnit claims unit u of stage s (Build: the takeover restores its
// HEAD and commits what it pre-committed; restores decides on a HEAD
// another graph wrote, as Unit.Restores), runs it until it has read its
// repartition partitions to their end (drained), and stops it with a
// final checkpoint.
func drainUnit(ctx context.Context, st *graph.Stages, s, u int, set Settings, deps Deps, member string, quiet time.Duration,
	restores func(context.Context, string) error, logger *slog.Logger) error {
	set.Unit = &Unit{Stage: s, Index: u, Units: st.Units, Member: member, Fingerprint: st.Fingerprint, Restores: restores}
	g := st.Stages[s].Graph
	ulog := logger.With("stage", s, "unit", u)
	j, err := Build(ctx, g, set, deps)
	if err != nil {
		return fmt.Errorf("unit %d: %w", u, err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- j.Run(runCtx) }()
	stopNow := func(err error) error {
		cancel()
		<-done
		return fmt.Errorf("unit %d: %w", u, err)
	}
	if targets := purgeTargets(g, set.Unit); len(targets) > 0 {
		cl, err := kgo.NewClient(deps.ClientOpts...)
		if err != nil {
			return stopNow(err)
		}
		defer cl.Close()
		for {
			id, err := j.Coordinator().TriggerCheckpoint(ctx, false)
			if err != nil {
				return stopNow(err)
			}
			m, err := unitMetadata(ctx, set.Store, checkpoint.UnitPrefix(st.Job, s, u), id)
			if err != nil {
				return stopNow(err)
			}
			offsets, err := (&repartitionPurge{targets: targets}).offsets(m)
			if err != nil {
				return stopNow(err)
			}
			ok, err := drained(ctx, cl, deps.ClientOpts, targets, offsets, quiet)
			if err != nil {
				return stopNow(err)
			}
			if ok {
				break
			}
			select {
			case <-ctx.Done():
				return stopNow(ctx.Err())
			case <-time.After(drainPoll):
			}
		}
	}
	id, err := j.Coordinator().TriggerCheckpoint(ctx, true)
	if err != nil {
		return stopNow(err)
	}
	if err := <-done; err != nil {
		return fmt.Errorf("unit %d: after its final checkpoint %d: %w", u, id, err)
	}
	ulog.Info("unit drained: final checkpoint taken", "checkpoint_id", id)
	return nil
}

// unitMetadata reads the _metadata of checkpoint id in the unit namespace
// prefix of store.
func unitMetadata(ctx context.Context, store checkpoint.Store, prefix string, id int64) (*checkpoint.Metadata, error) {
	b, err := store.Read(ctx, prefix+"chk-"+strconv.FormatInt(id, 10)+"/"+checkpoint.MetadataFile)
	if err != nil {
		return nil, err
	}
	var m checkpoint.Metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %s chk-%d: %v", checkpoint.ErrCorruptMetadata, prefix, id, err)
	}
	return &m, nil
}

// drained reports whether every target partition holds no committed
// record (data or marker) at or past the offset its unit's checkpoint
// recorded (offsets; a partition left out was not read: from its start).
// The stages upstream have stopped, so nothing more is written: a
// partition whose last stable offset is the offset is drained; else a
// read_committed fetch from the offset that returns nothing within quiet
// (only transaction markers follow) is.
func drained(ctx context.Context, cl *kgo.Client, opts []kgo.Opt, targets []purgeTarget, offsets kadm.Offsets, quiet time.Duration) (bool, error) {
	adm := kadm.NewClient(cl)
	for _, t := range targets {
		ends, err := adm.ListCommittedOffsets(ctx, t.topic)
		if err != nil {
			return false, fmt.Errorf("list the end of %s: %w", t.topic, err)
		}
		end, ok := ends.Lookup(t.topic, t.partition)
		if !ok || end.Err != nil {
			return false, fmt.Errorf("list the end of %s/%d: %v", t.topic, t.partition, end.Err)
		}
		from := int64(0)
		if o, ok := offsets.Lookup(t.topic, t.partition); ok {
			from = o.At
		}
		if from >= end.Offset {
			continue
		}
		more, err := recordsFrom(ctx, opts, t.topic, t.partition, from, quiet)
		if err != nil || more {
			return false, err
		}
	}
	return true, nil
}

// recordsFrom reports whether a read_committed fetch of topic/partition
// from offset from returns a record within quiet.
func recordsFrom(ctx context.Context, opts []kgo.Opt, topic string, partition int32, from int64, quiet time.Duration) (bool, error) {
	cl, err := kgo.NewClient(append(slices.Clip(opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return false, err
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, quiet)
	defer cancel()
	for pctx.Err() == nil {
		fs := cl.PollFetches(pctx)
		if n := fs.NumRecords(); n > 0 {
			return true, nil
		}
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) && !errors.Is(fe.Err, context.Canceled) && !kerr.IsRetriable(fe.Err) {
				return false, fmt.Errorf("read %s/%d from %d: %w", topic, partition, from, fe.Err)
			}
		}
	}
	return false, ctx.Err()
}

// gatherClusterSavepoint writes the savepoint of the stopped job st into
// a new directory savepoint-<id>-<unix> under dir and returns it: every
// unit's newest HEAD names its final checkpoint, whose files (and the
// shared files it refers to) are copied from store into
// units/<stage>/<unit>/ of the savepoint; its one _metadata holds, for
// every operator, source and sink of the job (not the repartition
// vertices, whose topics were drained), cluster.units subtasks, subtask u
// being unit u's state with unit u's key-group range, its keyed state
// handles pointing at the copied files (none shared: the savepoint is
// self-contained), so it reads as a single-process savepoint taken at
// parallelism cluster.units. A broadcast source copied into several
// stages is taken from the lowest. Its id is above every unit's
// checkpoint id.
//
// The units' files come through Store.Download and the remote state
// store's download, which do not fsync (they serve restores' working
// copies), but the savepoint is a durable copy (the job is stopped; its
// units' state may be removed): before its _metadata is written, sync
// (atomicfile.SyncDir, which fsyncs a file as well) is called on every
// file and directory of the savepoint and on dir (syncSavepointTree).
func gatherClusterSavepoint(ctx context.Context, st *graph.Stages, store checkpoint.Store, dir string, remoteOf unitRemoteOf, syncPath func(path string) error) (string, error) {
	type unitCk struct {
		prefix string
		hd     checkpoint.Head
	}
	heads := make([][]unitCk, len(st.Stages))
	var id int64
	for s := range st.Stages {
		for u := range st.Units {
			prefix := checkpoint.UnitPrefix(st.Job, s, u)
			hd, err := checkpoint.Heads{Store: store, Prefix: prefix}.Latest(ctx)
			if err != nil {
				return "", fmt.Errorf("job: gather savepoint: %w", err)
			}
			if hd.CheckpointID == 0 {
				return "", fmt.Errorf("job: gather savepoint: unit %d/%d (%s in %s) has no checkpoint", s, u, prefix, store)
			}
			heads[s] = append(heads[s], unitCk{prefix: prefix, hd: hd})
			id = max(id, hd.CheckpointID)
		}
	}
	id++
	now := time.Now().UTC()
	spDir := filepath.Join(dir, fmt.Sprintf("savepoint-%d-%d", id, now.Unix()))
	if err := atomicfile.MkdirAll(spDir, 0o755, nil); err != nil { // its entry durable before the _metadata that completes it
		return "", fmt.Errorf("job: gather savepoint: %w", err)
	}
	meta := &checkpoint.Metadata{Version: checkpoint.MetadataVersion, Job: st.Job, CheckpointID: id, Savepoint: true,
		Timestamp: now, MaxParallelism: st.MaxParallelism, Operators: map[string]checkpoint.OperatorMetadata{}}
	info := ClusterSavepointUnits{Job: st.Job, Fingerprint: st.Fingerprint, Units: st.Units, Stages: len(st.Stages)}
	stageOf := map[string]int{}
	for s := range st.Stages {
		for u, uc := range heads[s] {
			rel := fmt.Sprintf("units/%d/%d", s, u)
			um, err := copyUnitCheckpoint(ctx, store, uc.prefix, uc.hd.CheckpointID, spDir, rel, remoteOf.of(s, u))
			if err != nil {
				return "", fmt.Errorf("job: gather savepoint: unit %d/%d: %w", s, u, err)
			}
			if um.MaxParallelism != st.MaxParallelism {
				return "", fmt.Errorf("job: gather savepoint: unit %d/%d has max parallelism %d, the job %d", s, u, um.MaxParallelism, st.MaxParallelism)
			}
			info.Gathered = append(info.Gathered, GatheredUnit{UnitID: UnitID{Stage: s, Unit: u}, Head: uc.hd.Seq, CheckpointID: uc.hd.CheckpointID,
				KeyGroups: keygroup.RangeFor(st.MaxParallelism, st.Units, u), Dir: rel})
			meta.Bytes += um.Bytes
			for _, name := range slices.Sorted(maps.Keys(um.Operators)) {
				om := um.Operators[name]
				if strings.HasPrefix(name, "repartition.") {
					continue // drained: no repartition offset or committable is needed
				}
				if first, ok := stageOf[name]; ok && first != s {
					continue // a broadcast source copied into a later stage
				}
				stageOf[name] = s
				if len(om.Subtasks) != 1 {
					return "", fmt.Errorf("job: gather savepoint: unit %d/%d: operator %q has %d subtasks, a unit runs 1", s, u, name, len(om.Subtasks))
				}
				gm, ok := meta.Operators[name]
				if !ok {
					gm = checkpoint.OperatorMetadata{Parallelism: st.Units, Subtasks: make([]json.RawMessage, st.Units), UID: om.UID, RequiredStates: om.RequiredStates}
					for i := range gm.Subtasks {
						gm.Subtasks[i] = json.RawMessage("null")
					}
				}
				sub, err := rebaseTaskState(om.Subtasks[0], rel+"/chk", rel+"/shared", rel+"/"+remoteSavepointDir)
				if err != nil {
					return "", fmt.Errorf("job: gather savepoint: unit %d/%d: operator %q: %w", s, u, name, err)
				}
				gm.Subtasks[u] = sub
				meta.Operators[name] = gm
			}
		}
	}
	ib, _ := json.MarshalIndent(info, "", "  ")
	if err := atomicfile.WriteFile(filepath.Join(spDir, ClusterSavepointInfo), ib, atomicfile.Options{Perm: 0o644}); err != nil {
		return "", fmt.Errorf("job: gather savepoint: %w", err)
	}
	if err := verify(spDir, meta); err != nil {
		return "", fmt.Errorf("job: gather savepoint: %w", err)
	}
	if err := syncSavepointTree(spDir, syncPath); err != nil {
		return "", fmt.Errorf("job: gather savepoint: %w", err)
	}
	mb, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return "", err
	}
	if err := atomicfile.WriteFile(filepath.Join(spDir, checkpoint.MetadataFile), mb, atomicfile.Options{TempName: checkpoint.MetadataFile + ".tmp", Perm: 0o644}); err != nil {
		return "", fmt.Errorf("job: gather savepoint: %w", err)
	}
	return spDir, nil
}

// syncSavepointTree calls syncPath on every regular file under root, then on
// every directory under it (root included) deepest first, then on root's
// parent: the files and their names are durable once it returns nil.
func syncSavepointTree(root string, syncPath func(path string) error) error {
	var files, dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			dirs = append(dirs, p)
		case d.Type().IsRegular():
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.Reverse(dirs) // WalkDir visits a directory before its entries
	for _, p := range append(append(files, dirs...), filepath.Dir(root)) {
		if err := syncPath(p); err != nil {
			return fmt.Errorf("sync %s: %w", p, err)
		}
	}
	return nil
}

// copyUnitCheckpoint copies checkpoint id of the unit namespace prefix in
// store into spDir/rel/chk (its files but the owner marker, the inline
// files of its _metadata among them; only those when the _metadata names
// its claim, Metadata.Claim) and the
// shared files its metadata names into spDir/rel/shared, and returns its
// metadata.
func copyUnitCheckpoint(ctx context.Context, store checkpoint.Store, prefix string, id int64, spDir, rel string, remoteOf func() (remote.Storage, error)) (*checkpoint.Metadata, error) {
	chk := prefix + "chk-" + strconv.FormatInt(id, 10) + "/"
	keys, err := store.List(ctx, chk)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(keys, chk+checkpoint.MetadataFile) {
		return nil, fmt.Errorf("%s has no %s in %s", strings.TrimSuffix(chk, "/"), checkpoint.MetadataFile, store)
	}
	base := filepath.Join(spDir, filepath.FromSlash(rel))
	m, err := unitMetadata(ctx, store, prefix, id)
	if err != nil {
		return nil, err
	}
	if m.Claim != nil {
		// The _metadata is the checkpoint's owner marker and its only
		// object (checkpoint.Owner.upload): anything else in chk-<id> is
		// another writer's.
		keys = nil
	}
	for _, k := range keys {
		name := strings.TrimPrefix(k, chk)
		if name == checkpoint.ClaimFile || name == checkpoint.MetadataFile {
			continue
		}
		if err := store.Download(ctx, k, filepath.Join(base, "chk", filepath.FromSlash(name))); err != nil {
			return nil, err
		}
	}
	// The small files a unit's upload put into its _metadata (version 4).
	if err := checkpoint.WriteInlineFiles(filepath.Join(base, "chk"), m.InlineFiles); err != nil {
		return nil, fmt.Errorf("%s: %w", strings.TrimSuffix(chk, "/"), err)
	}
	if err := copyRemoteObjects(m, base, remoteOf); err != nil { // cluster_remotestate.go
		return nil, err
	}
	for _, f := range m.SharedFiles {
		if isRemoteObject(f) {
			continue // copied above
		}
		if err := store.Download(ctx, prefix+"shared/"+f, filepath.Join(base, "shared", filepath.FromSlash(f))); err != nil {
			return nil, fmt.Errorf("shared file %s: %w", f, err)
		}
	}
	return m, nil
}

// rebaseTaskState returns the task state raw with its keyed handle's files
// made private files of the savepoint: a private file's path prefixed
// with chkRel, a shared one's with sharedRel (and no longer shared). A
// remote handle's (state.remote) objects, "../remote/<object>", become
// remoteRel/<object>: copyUnitCheckpoint copied them there.
func rebaseTaskState(raw json.RawMessage, chkRel, sharedRel, remoteRel string) (json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage("null"), nil
	}
	var ts checkpoint.TaskState
	if err := json.Unmarshal(raw, &ts); err != nil {
		return nil, err
	}
	if ts.Keyed == nil {
		return raw, nil
	}
	var h map[string]json.RawMessage
	if err := json.Unmarshal(ts.Keyed, &h); err != nil {
		return nil, err
	}
	var files []map[string]json.RawMessage
	if f, ok := h["files"]; ok {
		if err := json.Unmarshal(f, &files); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		var path string
		var shared bool
		if err := json.Unmarshal(f["path"], &path); err != nil {
			return nil, fmt.Errorf("keyed state file without a path: %w", err)
		}
		_ = json.Unmarshal(f["shared"], &shared)
		prefix := chkRel
		if shared {
			prefix = sharedRel
		}
		if obj, ok := remoteObjectName(path); ok && shared {
			prefix, path = remoteRel, obj
		}
		f["path"], _ = json.Marshal(prefix + "/" + path)
		delete(f, "shared")
	}
	h["files"], _ = json.Marshal(files)
	var err error
	if ts.Keyed, err = json.Marshal(h); err != nil {
		return nil, err
	}
	return json.Marshal(ts)
}

// AdoptClusterSavepoint makes the savepoint in dir (a cluster savepoint,
// or a single-process savepoint or checkpoint) the origin of the
// cluster-mode job st in store (SavepointOriginKey, create-only): from
// then on, every unit whose HEAD chain names no checkpoint restores its
// share of it (unitSavepointMeta). It is what `run --from-savepoint` does
// in cluster mode, on every daemon: the first adopts, the others find the
// same origin. It refuses, wrapping ErrSavepointOrigin, another origin, a
// store that already holds HEADs of the job (the job has state of its
// own: use another job.name, or remove the job's state), a repartition
// topic of the job that holds records, and a savepoint of another max
// parallelism (the repartition topics partition by key group), naming
// what it found; a savepoint that does not verify is refused as a restore
// refuses it.
func AdoptClusterSavepoint(ctx context.Context, st *graph.Stages, store checkpoint.Store, opts []kgo.Opt, dir, by string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	m, err := checkpoint.ReadMetadata(abs)
	if err != nil {
		return fmt.Errorf("job: --from-savepoint %s: %w", dir, err)
	}
	if err := verify(abs, m); err != nil {
		return fmt.Errorf("job: --from-savepoint %s: %w", dir, err)
	}
	if m.MaxParallelism != st.MaxParallelism {
		return fmt.Errorf("job: --from-savepoint %s: the savepoint has max parallelism %d, the job %d (the repartition topics partition by key group: set job.max_parallelism: %d): %w",
			dir, m.MaxParallelism, st.MaxParallelism, m.MaxParallelism, ErrSavepointOrigin)
	}
	var have SavepointOrigin
	found, err := readStoreJSON(ctx, store, storeKey(st.Job, SavepointOriginKey), &have)
	if err != nil {
		return fmt.Errorf("job: %w", err)
	}
	if found {
		return sameOrigin(st.Job, store, have, abs)
	}
	keys, err := store.List(ctx, st.Job+"/units/")
	if err != nil {
		return fmt.Errorf("job: %w", err)
	}
	for _, k := range keys {
		if strings.Contains(k, "/"+checkpoint.HeadPrefix) {
			return fmt.Errorf("job: --from-savepoint %s: the store (%s) already holds state of job %s (%s): a job starts from a savepoint only before its first checkpoint; use another job.name, or remove the job's state: %w",
				dir, store, st.Job, k, ErrSavepointOrigin)
		}
	}
	if err := emptyRepartitions(ctx, opts, st); err != nil {
		return fmt.Errorf("job: --from-savepoint %s: %w", dir, err)
	}
	b, _ := json.Marshal(SavepointOrigin{Savepoint: abs, Job: m.Job, CheckpointID: m.CheckpointID, Adopted: time.Now().UTC(), By: by})
	if err := store.Create(ctx, storeKey(st.Job, SavepointOriginKey), b); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("job: %w", err)
		}
		if _, err := readStoreJSON(ctx, store, storeKey(st.Job, SavepointOriginKey), &have); err != nil {
			return fmt.Errorf("job: %w", err)
		}
		return sameOrigin(st.Job, store, have, abs)
	}
	return nil
}

// sameOrigin refuses an origin other than the savepoint abs.
func sameOrigin(job string, store checkpoint.Store, have SavepointOrigin, abs string) error {
	if filepath.Clean(have.Savepoint) == filepath.Clean(abs) {
		return nil
	}
	return fmt.Errorf("job: --from-savepoint %s: job %s started from savepoint %s (%s in %s); one job starts from one savepoint: use another job.name: %w",
		abs, job, have.Savepoint, storeKey(job, SavepointOriginKey), store, ErrSavepointOrigin)
}

// emptyRepartitions refuses a repartition topic of st that exists and
// holds records (its end offset above its start): the units of a job
// started from a savepoint read their repartition partitions from the
// start.
func emptyRepartitions(ctx context.Context, opts []kgo.Opt, st *graph.Stages) error {
	if len(st.Repartitions) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics := make([]string, 0, len(st.Repartitions))
	for _, r := range st.Repartitions {
		topics = append(topics, r.Topic)
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("list the repartition topics' offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("list the repartition topics' offsets: %w", err)
	}
	var bad error
	ends.Each(func(e kadm.ListedOffset) {
		if e.Err != nil || bad != nil {
			return // an unknown topic: created empty at start
		}
		s, ok := starts.Lookup(e.Topic, e.Partition)
		if ok && s.Err == nil && e.Offset > s.Offset {
			bad = fmt.Errorf("repartition topic %s partition %d holds records (offsets %d to %d) of an earlier run: use another job.name, or delete the topic: %w",
				e.Topic, e.Partition, s.Offset, e.Offset, ErrSavepointOrigin)
		}
	})
	return bad
}

// savepointRestore is a unit's restore when its HEAD chain names no
// checkpoint: the job's savepoint origin in set.Store (AdoptClusterSavepoint)
// cut to the unit's share (unitSavepointMeta), or none (dir "") when the
// job has no origin.
func savepointRestore(ctx context.Context, g *graph.Graph, set Settings) (string, *checkpoint.Metadata, error) {
	var origin SavepointOrigin
	found, err := readStoreJSON(ctx, set.Store, storeKey(g.Job, SavepointOriginKey), &origin)
	if err != nil || !found {
		return "", nil, err
	}
	m, err := checkpoint.ReadMetadata(origin.Savepoint)
	if err != nil {
		return "", nil, fmt.Errorf("job: the job's savepoint origin %s: %w", origin.Savepoint, err)
	}
	um, err := unitSavepointMeta(m, g, set.Unit.Units, set.Unit.Index)
	if err != nil {
		return "", nil, fmt.Errorf("job: restore savepoint %s: %w", origin.Savepoint, err)
	}
	return origin.Savepoint, um, nil
}

// unitSavepointMeta returns the share of savepoint sp (a single-process
// savepoint or checkpoint at any parallelism, or a cluster savepoint,
// which reads as one at parallelism cluster.units) of unit index of units
// running the stage graph g, as metadata of its own that restores as a
// rescale does (Flink's StateAssignmentOperation): for each vertex of g
// whose uid sp records (not a repartition source or sink: their topics
// start empty), the keyed snapshots whose key groups overlap the unit's
// range (the backend reads only the unit's key groups from them), the
// unit's part of the operator list states (even split over units, union
// whole; a Kafka source's splits: exactly the partitions the unit reads,
// source.AssignPartition, or every one for a broadcast source) and one
// copy of the broadcast states. Committables of dead-letter writers are
// left out (the job that took the savepoint committed them). Its
// operators keep their recorded names and uids, so the restore matches
// them by uid.
func unitSavepointMeta(sp *checkpoint.Metadata, g *graph.Graph, units, index int) (*checkpoint.Metadata, error) {
	if sp.MaxParallelism != g.MaxParallelism {
		return nil, fmt.Errorf("the savepoint has max parallelism %d, the job %d: %w", sp.MaxParallelism, g.MaxParallelism, ErrMaxParallelismChanged)
	}
	r := keygroup.RangeFor(sp.MaxParallelism, units, index)
	byUID := map[string]string{}
	for name := range sp.Operators {
		byUID[recordedUID(sp, name)] = name
	}
	sources := map[string]*graph.Source{}
	for _, s := range g.Sources {
		sources[s.Name] = s
	}
	out := &checkpoint.Metadata{Version: checkpoint.MetadataVersion, Job: sp.Job, CheckpointID: sp.CheckpointID, Savepoint: true,
		Timestamp: sp.Timestamp, Completed: sp.Completed, MaxParallelism: sp.MaxParallelism, Operators: map[string]checkpoint.OperatorMetadata{}}
	for _, name := range vertexNames(g) {
		if s := sources[name]; s != nil && s.Repartition {
			continue
		}
		if slices.ContainsFunc(g.Sinks, func(sk *graph.Sink) bool { return sk.Name == name && sk.Units > 0 }) {
			continue
		}
		key, ok := byUID[g.UID(name)]
		if !ok {
			continue
		}
		om := sp.Operators[key]
		old, err := checkpoint.DecodeTaskStates(om)
		if err != nil {
			return nil, fmt.Errorf("operator %q: %w", key, err)
		}
		share, err := checkpoint.RedistributeOperatorState(old, units)
		if err != nil {
			return nil, fmt.Errorf("operator %q: %w", key, err)
		}
		first := checkpoint.TaskState{Operator: share[index]}
		if s := sources[name]; s != nil {
			splits, err := unitSplits(old, s, units, index)
			if err != nil {
				return nil, fmt.Errorf("source %q: %w", key, err)
			}
			if splits != nil {
				first.Operator[source.SplitsState] = *splits
			}
		}
		for _, ts := range old {
			if len(ts.Broadcast) > 0 {
				first.Broadcast = ts.Broadcast
				break
			}
		}
		if len(first.Operator) == 0 {
			first.Operator = nil
		}
		subs := []checkpoint.TaskState{first}
		for _, ts := range old {
			if ts.KeyGroups == nil || ts.Keyed == nil || ts.KeyGroups.Intersect(r).Len() == 0 {
				continue
			}
			if subs[len(subs)-1].Keyed != nil {
				subs = append(subs, checkpoint.TaskState{})
			}
			kg := *ts.KeyGroups
			subs[len(subs)-1].KeyGroups, subs[len(subs)-1].Keyed = &kg, ts.Keyed
		}
		nom := checkpoint.OperatorMetadata{Parallelism: len(subs), UID: om.UID}
		for _, ts := range subs {
			b, err := json.Marshal(ts)
			if err != nil {
				return nil, err
			}
			nom.Subtasks = append(nom.Subtasks, b)
		}
		out.Operators[key] = nom
	}
	return out, nil
}

// unitSplits returns the splits of a Kafka source's checkpointed state old
// that unit index of units reads: the partitions source.AssignPartition
// gives it (every one for a broadcast source); nil when old holds none.
func unitSplits(old []checkpoint.TaskState, s *graph.Source, units, index int) (*checkpoint.OperatorListState, error) {
	var out *checkpoint.OperatorListState
	for _, ts := range old {
		ls, ok := ts.Operator[source.SplitsState]
		if !ok {
			continue
		}
		if out == nil {
			out = &checkpoint.OperatorListState{Mode: ls.Mode, Entries: [][]byte{}}
		}
		for _, e := range ls.Entries {
			var sp source.Split
			if err := json.Unmarshal(e, &sp); err != nil {
				return nil, fmt.Errorf("split %s: %w", e, err)
			}
			topic := sp.Topic
			if topic == "" {
				topic = s.Topic
			}
			if s.Broadcast || source.AssignPartition(topic, sp.Partition, units) == index {
				out.Entries = append(out.Entries, e)
			}
		}
	}
	return out, nil
}
