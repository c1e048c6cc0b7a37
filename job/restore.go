package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/sink"
	"github.com/kstreamd/kstreamd/source"
	"github.com/kstreamd/kstreamd/state"
)

// restorePlan is what a Build restores, decided before anything is
// wired: the checkpoint or savepoint (none for a fresh start), the max
// parallelism the job runs with, and, for a cluster-mode unit, the owner
// of its namespace. Its methods hand each vertex its share.
type restorePlan struct {
	// dir and meta are the restored checkpoint; meta is nil for a fresh
	// start.
	dir  string
	meta *checkpoint.Metadata
	// sharedDir is the job's shared directory restored keyed state files
	// are found in (after checkpoint.Storage.AdoptShared).
	sharedDir string
	// owner is a unit's claim on its namespace; nil for a whole job.
	owner *checkpoint.Owner
	// maxP is the number of key groups: the graph's, or the checkpoint's
	// when the graph does not set it explicitly.
	maxP int
	// keys maps each vertex name of the graph to the name its state is
	// recorded under in meta: the operator with the same uid
	// (matchRestoredOperators), "" for none. A name it lacks (a
	// dead-letter writer, or every name when it is nil) is looked up as
	// it is.
	keys map[string]string
}

// metaKey returns the name vertex (or writer) name's state is recorded
// under in the restored checkpoint; "" when the checkpoint holds none.
func (rp restorePlan) metaKey(name string) string {
	if k, ok := rp.keys[name]; ok {
		return k
	}
	return name
}

// planRestore finds what to restore (scope.findRestore) and checks it
// against g: the max parallelism (ErrMaxParallelismChanged when the graph
// sets another explicitly), every operator's parallelism against it, and
// that the checkpoint holds no state of a vertex g lacks.
func planRestore(ctx context.Context, g *graph.Graph, set Settings, sc scope, storage *checkpoint.Storage, deps Deps) (restorePlan, error) {
	dir, meta, owner, err := sc.findRestore(ctx, g, set, storage, deps)
	if err != nil {
		return restorePlan{}, err
	}
	rp := restorePlan{dir: dir, meta: meta, owner: owner, maxP: g.MaxParallelism, sharedDir: storage.SharedDir()}
	if meta == nil {
		return rp, nil
	}
	if meta.MaxParallelism != rp.maxP {
		if g.MaxParallelismSet {
			return rp, fmt.Errorf("job: restore %s: the checkpoint has max parallelism %d, the config sets job.max_parallelism %d; it cannot change across a restore: %w",
				dir, meta.MaxParallelism, rp.maxP, ErrMaxParallelismChanged)
		}
		rp.maxP = meta.MaxParallelism // not set explicitly: keep the checkpoint's, as Flink does
	}
	for _, op := range g.Operators {
		if op.Parallelism > rp.maxP {
			return rp, fmt.Errorf("job: operator %q: parallelism %d exceeds the restored max parallelism %d", op.Name, op.Parallelism, rp.maxP)
		}
	}
	if rp.keys, err = matchRestoredOperators(g, meta, set.AllowNonRestoredState, sc.logger); err != nil {
		return rp, fmt.Errorf("job: restore %s: %w", dir, err)
	}
	sc.logger.Info("restoring", "dir", dir, "checkpoint_id", meta.CheckpointID, "savepoint", meta.Savepoint, "max_parallelism", rp.maxP)
	return rp, nil
}

// taskStates returns the decoded subtask states of vertex name and its
// old parallelism; nil when the checkpoint does not hold it.
func (rp restorePlan) taskStates(name string) ([]checkpoint.TaskState, int, error) {
	if rp.meta == nil {
		return nil, 0, nil
	}
	key := rp.metaKey(name)
	om, ok := rp.meta.Operators[key]
	if !ok {
		return nil, 0, nil
	}
	old, err := rp.taskStatesOf(key)
	return old, om.Parallelism, err
}

// taskStatesOf returns the decoded subtask states the checkpoint records
// under name; nil when it holds none.
func (rp restorePlan) taskStatesOf(name string) ([]checkpoint.TaskState, error) {
	om, ok := rp.meta.Operators[name]
	if !ok {
		return nil, nil
	}
	old, err := checkpoint.DecodeTaskStates(om)
	if err != nil {
		return nil, fmt.Errorf("job: restore %q: %w", name, err)
	}
	return old, nil
}

// listShares returns each of p new subtasks' share of vertex name's
// operator list states (even split or union redistribution); nil when the
// checkpoint does not hold it.
func (rp restorePlan) listShares(name string, p int) ([]map[string]state.OperatorListSnapshot, error) {
	old, _, err := rp.taskStates(name)
	if err != nil || old == nil {
		return nil, err
	}
	out, err := checkpoint.RedistributeOperatorState(old, p)
	if err != nil {
		return nil, fmt.Errorf("job: restore %q: %w", name, err)
	}
	return out, nil
}

// splitShares returns, per new subtask of s, the entries of its source
// type's splits state (connector.RestoreContext.Shares); nil when the
// checkpoint does not hold s.
func (rp restorePlan) splitShares(s *graph.Source, splitsState string) ([][][]byte, error) {
	shares, err := rp.listShares(s.Name, s.Parallelism)
	if err != nil || shares == nil {
		return nil, err
	}
	out := make([][][]byte, len(shares))
	for i, sh := range shares {
		out[i] = sh[splitsState].Entries
	}
	return out, nil
}

// sinkShares returns each of p new sink subtasks' share of its operator
// list states (BufferingSink's buffer); nil maps when there is nothing to
// restore.
func (rp restorePlan) sinkShares(name string, p int) ([]map[string]state.OperatorListSnapshot, error) {
	shares, err := rp.listShares(name, p)
	if err != nil || shares != nil {
		return shares, err
	}
	return make([]map[string]state.OperatorListSnapshot, p), nil
}

// committables returns the bytes of every committable the checkpoint
// holds for the writer name (a sink or a dead-letter writer), from every
// old subtask in order, and its old parallelism; none without a
// checkpoint or state. A committable of another sink type than typ (the
// sink's type changed) is refused with ErrIncompatibleState: no other
// type can finish it.
func (rp restorePlan) committables(name, typ string) ([][]byte, int, error) {
	old, oldP, err := rp.taskStates(name)
	if err != nil || old == nil {
		return nil, 0, err
	}
	var out [][]byte
	for _, ts := range old {
		cs, err := checkpoint.DecodeCommittables(ts)
		if err != nil {
			return nil, 0, fmt.Errorf("job: restore %q: %w", name, err)
		}
		for _, c := range cs {
			if c.Sink != typ {
				return nil, 0, fmt.Errorf("job: restore %q: the checkpoint holds a committable of sink type %s, the sink is of type %s now: %w", name, c.Sink, typ, ErrIncompatibleState)
			}
			out = append(out, c.Data)
		}
	}
	return out, oldP, nil
}

// kafkaCommittables returns the Kafka committables the checkpoint holds
// for the writer name, decoded, and its old parallelism.
func (rp restorePlan) kafkaCommittables(name string) ([]sink.Committable, int, error) {
	raw, oldP, err := rp.committables(name, sink.CommittableType)
	if err != nil {
		return nil, 0, err
	}
	cs, err := decodeKafkaCommittables(name, raw)
	return cs, oldP, err
}

// decodeKafkaCommittables decodes the bytes of Kafka committables.
func decodeKafkaCommittables(name string, raw [][]byte) ([]sink.Committable, error) {
	envs := make([]checkpoint.Committable, len(raw))
	for i, r := range raw {
		envs[i] = checkpoint.Committable{Sink: sink.CommittableType, Data: r}
	}
	cs, err := sink.DecodeCommittables(name, envs)
	if err != nil {
		return nil, fmt.Errorf("job: restore: %w", err)
	}
	return cs, nil
}

// operatorRestores returns each new subtask's restore of operator name
// with parallelism p: keyed snapshots by key-group range, operator state
// redistributed, and one broadcast copy; nil entries when the operator is
// not in the checkpoint.
func (rp restorePlan) operatorRestores(name string, p int) ([]*operators.Restore, error) {
	out := make([]*operators.Restore, p)
	old, _, err := rp.taskStates(name)
	if err != nil || old == nil {
		return out, err
	}
	keyed := checkpoint.RedistributeKeyed(old, rp.maxP, p)
	opStates, err := checkpoint.RedistributeOperatorState(old, p)
	if err != nil {
		return nil, fmt.Errorf("job: restore operator %q: %w", name, err)
	}
	bc := checkpoint.RedistributeBroadcast(old, p)
	for i := range out {
		r := &operators.Restore{Operator: opStates[i], Broadcast: bc[i]}
		for _, kh := range keyed[i] {
			r.Keyed = append(r.Keyed, rp.keyedHandle(kh.Handle))
		}
		out[i] = r
	}
	return out, nil
}

// keyedHandle is the restore handle of a keyed snapshot of the restored
// checkpoint: its private files under the checkpoint's directory, its
// shared ones under the shared directory.
func (rp restorePlan) keyedHandle(h json.RawMessage) state.RestoreHandle {
	return state.RestoreHandle{Handle: h, Dir: rp.dir, SharedDir: rp.sharedDir}
}

// findLatest returns the directory and metadata to restore: the savepoint
// asked for, else the latest completed checkpoint, else none. Before
// anything is restored it refuses an inconsistent checkpoint (checkpoint.
// Verify: missing subtask states or sink committables, missing or
// truncated files; version-1 metadata is checked for committables in every
// subtask of an operator that holds any), links the shared files of a
// checkpoint of another job or checkpoints dir into the job's own shared
// directory (checkpoint.Storage.AdoptShared), and protects a checkpoint
// given explicitly from the job's retention while it runs.
func findLatest(storage *checkpoint.Storage, fromSavepoint string) (string, *checkpoint.Metadata, error) {
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
	if err := verifyRemote(dir, m, storage.RemoteStore()); err != nil {
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
// required states) checked for a sink's committables (either state name)
// in every subtask of an operator that holds any.
func verify(dir string, m *checkpoint.Metadata) error { return verifyRemote(dir, m, nil) }

// verifyRemote is verify with the remote state objects on store (nil:
// the filesystem).
func verifyRemote(dir string, m *checkpoint.Metadata, store remote.Storage) error {
	return checkpoint.Verify(dir, m, checkpoint.VerifyOptions{InferRequired: []string{checkpoint.CommittablesState, checkpoint.LegacyKafkaCommittables},
		RemoteStore: store})
}

// requiredStates names, per exactly-once sink of g, the state every
// subtask writes into each checkpoint (its committables), for the
// checkpoint metadata's required_states.
func requiredStates(g *graph.Graph) map[string][]string {
	out := map[string][]string{}
	for _, sk := range g.Sinks {
		if sk.Delivery.ExactlyOnce() {
			out[sk.Name] = []string{checkpoint.CommittablesState}
		}
	}
	return out
}

// matchRestoredOperators matches the vertices of g with the operators
// whose state checkpoint m records, by uid (graph.Graph.UID; an operator
// recorded without a uid has its name as uid, as every checkpoint written
// before uids), and returns each vertex's recorded name ("" for none). It
// logs each vertex found under another name (renamed with its uid kept)
// and each one the checkpoint has nothing of (added: it starts empty).
// State of an operator no vertex has the uid of (removed, or renamed
// without its uid) is refused with an error wrapping ErrIncompatibleState
// that names each one, the new vertices it may have become, and the two
// ways out; with allow (Flink's --allowNonRestoredState) it is dropped,
// each one logged. A dead-letter writer's committables are not matched:
// recovery commits them whatever the graph.
func matchRestoredOperators(g *graph.Graph, m *checkpoint.Metadata, allow bool, logger *slog.Logger) (map[string]string, error) {
	byUID := map[string]string{}
	for name, om := range m.Operators {
		uid := om.UID
		if uid == "" {
			uid = name
		}
		byUID[uid] = name
	}
	keys := map[string]string{}
	matched := map[string]bool{}
	var added []string
	for _, name := range vertexNames(g) {
		uid := g.UID(name)
		key, ok := byUID[uid]
		if !ok {
			keys[name] = ""
			added = append(added, name)
			continue
		}
		keys[name], matched[key] = key, true
		if key != name {
			logger.Info("restoring the state of a renamed operator by its uid", "operator", name, "uid", uid, "recorded_as", key)
		}
	}
	var removed []string
	for _, name := range slices.Sorted(maps.Keys(m.Operators)) {
		if matched[name] || strings.HasSuffix(name, source.DeadLetterSuffix) || !holdsState(m.Operators[name]) {
			continue
		}
		removed = append(removed, name)
	}
	for _, name := range added {
		if len(removed) == 0 || allow {
			logger.Info("operator not in the checkpoint: it starts without state", "operator", name, "uid", g.UID(name))
		}
	}
	if len(removed) == 0 {
		return keys, nil
	}
	if allow {
		for _, name := range removed {
			logger.Warn("dropping the state of an operator the pipeline no longer has (allow_non_restored_state)",
				"operator", name, "uid", recordedUID(m, name))
		}
		return keys, nil
	}
	var b strings.Builder
	for i, name := range removed {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "the checkpoint holds state of %q (uid %q), which the pipeline no longer has: no source, operator or sink has that uid", name, recordedUID(m, name))
	}
	if len(added) > 0 {
		fmt.Fprintf(&b, "; the pipeline's %s %s not in the checkpoint: if one is a renamed operator, set its uid to the old one (uid: %s)",
			quoteAll(added), map[bool]string{true: "is", false: "are"}[len(added) == 1], recordedUID(m, removed[0]))
	}
	b.WriteString("; to drop the state instead, run with --allow-non-restored-state (or checkpoints.allow_non_restored_state: true)")
	return nil, fmt.Errorf("%s: %w", b.String(), ErrIncompatibleState)
}

// vertexNames returns the names of g's sources, operators and sinks.
func vertexNames(g *graph.Graph) []string {
	var out []string
	for _, s := range g.Sources {
		out = append(out, s.Name)
	}
	for _, o := range g.Operators {
		out = append(out, o.Name)
	}
	for _, s := range g.Sinks {
		out = append(out, s.Name)
	}
	return out
}

// holdsState reports whether any subtask of om recorded state.
func holdsState(om checkpoint.OperatorMetadata) bool {
	for _, st := range om.Subtasks {
		if len(st) > 0 && string(st) != "null" {
			return true
		}
	}
	return false
}

// recordedUID returns the uid checkpoint m records for operator name.
func recordedUID(m *checkpoint.Metadata, name string) string {
	if u := m.Operators[name].UID; u != "" {
		return u
	}
	return name
}

// quoteAll returns the names quoted and joined by commas.
func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}
