package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

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
	if err := checkRestoredOperators(g, meta); err != nil {
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
	om, ok := rp.meta.Operators[name]
	if !ok {
		return nil, 0, nil
	}
	old, err := rp.taskStatesOf(name)
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
// required states) checked for a sink's committables (either state name)
// in every subtask of an operator that holds any.
func verify(dir string, m *checkpoint.Metadata) error {
	return checkpoint.Verify(dir, m, checkpoint.VerifyOptions{InferRequired: []string{checkpoint.CommittablesState, checkpoint.LegacyKafkaCommittables}})
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
