package checkpoint

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// keyedTask is a one-subtask job for a real Coordinator whose snapshot is a
// keyed state backend's: the coordinator's trigger hands the barrier to the
// test goroutine, which owns the backend, snapshots it (state.SnapshotKeyed
// into the barrier's directories, as operators.KeyedOperator does) and
// acknowledges.
type keyedTask struct {
	id        runtime.TaskID
	barriers  chan *runtime.Barrier
	completed chan int64
}

func newKeyedTask() *keyedTask {
	return &keyedTask{id: runtime.TaskID{Operator: "op"}, barriers: make(chan *runtime.Barrier, 4), completed: make(chan int64, 64)}
}

func (k *keyedTask) Name() string                                     { return k.id.String() }
func (k *keyedTask) Run(ctx context.Context, _ <-chan struct{}) error { <-ctx.Done(); return nil }
func (k *keyedTask) ID() runtime.TaskID                               { return k.id }
func (k *keyedTask) TriggerCheckpoint(b *runtime.Barrier)             { k.barriers <- b }
func (k *keyedTask) NotifyCheckpointComplete(id int64)                { k.completed <- id }
func (k *keyedTask) NotifyCheckpointAborted(int64)                    {}

// checkpoint takes the next checkpoint the coordinator triggers with b's
// state and waits until it completed; it returns the checkpoint id and the
// keyed snapshot.
func (k *keyedTask) checkpoint(t *testing.T, c *Coordinator, b state.KeyedStateBackend) (int64, state.KeyedSnapshot) {
	t.Helper()
	var bar *runtime.Barrier
	select {
	case bar = <-k.barriers:
	case <-time.After(time.Minute):
		t.Fatal("no checkpoint triggered within a minute")
	}
	finish, err := state.SnapshotKeyed(b, state.SnapshotTarget{Dir: bar.Dir, TaskPath: "op/0", SharedDir: bar.SharedDir})
	if err != nil {
		t.Fatalf("snapshot %d: %v", bar.CheckpointID, err)
	}
	ks, err := finish(context.Background())
	if err != nil {
		t.Fatalf("snapshot %d: %v", bar.CheckpointID, err)
	}
	r := b.KeyGroupRange()
	raw, err := json.Marshal(TaskState{KeyGroups: &r, Keyed: ks.Handle})
	if err != nil {
		t.Fatal(err)
	}
	c.Acknowledge(k.id, bar.CheckpointID, runtime.TaskSnapshot{State: raw, Bytes: ks.Bytes, SharedFiles: ks.SharedFiles})
	select {
	case id := <-k.completed:
		if id != bar.CheckpointID {
			t.Fatalf("completed %d, want %d", id, bar.CheckpointID)
		}
	case <-time.After(time.Minute):
		t.Fatalf("checkpoint %d did not complete within a minute", bar.CheckpointID)
	}
	return bar.CheckpointID, ks
}

var valueDesc = state.ValueStateDescriptor[int64]{Name: "value", Serializer: state.Int64Serializer{}}

// u64key is the serialized key of n: 8 bytes big-endian.
func u64key(n int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }

// waitCompactionsIdle waits (bounded) until the Pebble backend has had no
// flush or compaction running for 10 polls in a row, so the files a snapshot
// sees are the files the next one sees unless the test writes.
func waitCompactionsIdle(t *testing.T, b state.KeyedStateBackend) {
	t.Helper()
	mp := b.(state.MetricsProvider)
	deadline := time.Now().Add(time.Minute)
	for idle := 0; idle < 10; {
		m := mp.Metrics()
		if m.Compact.NumInProgress == 0 && m.Flush.NumInProgress == 0 {
			idle++
		} else {
			idle = 0
		}
		if time.Now().After(deadline) {
			t.Fatalf("pebble compactions still busy after a minute: %d in progress", m.Compact.NumInProgress)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sharedFiles returns the files under the shared directory, relative and
// slash-separated.
func sharedFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// assertSharedExact asserts that the files under the shared directory are
// exactly the files the kept checkpoints refer to: none unreferenced, none
// missing. want is the union the test computed from the snapshots.
func assertSharedExact(t *testing.T, s *Storage, want []string) {
	t.Helper()
	refs, err := s.SharedRefCounts()
	if err != nil {
		t.Fatal(err)
	}
	referenced := slices.Sorted(maps.Keys(refs))
	onDisk := sharedFiles(t, s.SharedDir())
	if !slices.Equal(onDisk, referenced) {
		t.Fatalf("shared dir holds %d files, kept checkpoints refer to %d:\non disk %q\nreferenced %q", len(onDisk), len(referenced), onDisk, referenced)
	}
	slices.Sort(want)
	if !slices.Equal(referenced, slices.Compact(want)) {
		t.Fatalf("kept checkpoints refer to %q, the snapshots to %q", referenced, want)
	}
}

// completedStates is listStates without the checkpoint the coordinator may
// have triggered already (in flight, so incomplete).
func completedStates(t *testing.T, s *Storage) []string {
	t.Helper()
	var out []string
	for _, st := range listStates(t, s) {
		if strings.HasSuffix(st, ":"+StateCompleted) {
			out = append(out, st)
		}
	}
	return out
}

// instances returns the DB instance prefixes of shared file names.
func instances(files []string) []string {
	var out []string
	for _, f := range files {
		inst, _, _ := strings.Cut(f, "-")
		out = append(out, inst)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestIncrementalCheckpoints is the incremental acceptance: with
// 1,000,000 keys in a Pebble ValueState and 1,000 keys changed, incremental
// checkpoint n+1 writes under 5% of the bytes of a full snapshot (under the
// race detector, which makes the 1M writes alone take 75 s, the test uses
// 200,000 keys and checks every 10th key after restore); as
// checkpoints roll over Retained, the shared directory holds exactly the
// files the kept checkpoints refer to; the newest kept checkpoint restores
// the changed values; and once a restored backend's checkpoints replaced
// every old one, no file of the old DB instance remains.
func TestIncrementalCheckpoints(t *testing.T) {
	const (
		changed = 1_000
		maxP    = 128
	)
	numKeys, checkStep := 1_000_000, 1
	if raceEnabled {
		numKeys, checkStep = 200_000, 10
	}
	root := t.TempDir()
	all := keygroup.Range{Start: 0, End: maxP - 1}
	a, err := state.OpenBackend(state.BackendConfig{Kind: state.KindPebble, Dir: filepath.Join(root, "db-a"), MaxParallelism: maxP, KeyGroupRange: all})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	va, err := state.GetValueState(a, valueDesc)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range numKeys {
		a.SetCurrentKey(u64key(i))
		if err := va.Update(int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d keys in %v", numKeys, time.Since(start).Round(time.Millisecond))
	// want is every key's expected value; change updates it and the backend.
	want := func(i int) int64 { return int64(i) }
	overrides := map[int]int64{}
	change := func(b state.KeyedStateBackend, vs state.ValueState[int64], from, round int) {
		for i := from; i < from+changed; i++ {
			v := int64(-round*numKeys - i)
			b.SetCurrentKey(u64key(i))
			if err := vs.Update(v); err != nil {
				t.Fatal(err)
			}
			overrides[i] = v
		}
	}
	value := func(i int) int64 {
		if v, ok := overrides[i]; ok {
			return v
		}
		return want(i)
	}
	waitCompactionsIdle(t, a)

	finish, err := state.SnapshotKeyed(a, state.SnapshotTarget{Dir: filepath.Join(root, "full"), TaskPath: "op/0"})
	if err != nil {
		t.Fatal(err)
	}
	full, err := finish(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(full.SharedFiles) != 0 {
		t.Fatalf("a full snapshot refers to shared files %q", full.SharedFiles)
	}

	s := NewStorage(filepath.Join(root, "checkpoints"), "job", 2, nil)
	task := newKeyedTask()
	c, err := NewCoordinator(CoordinatorConfig{Job: "job", MaxParallelism: maxP, Storage: s, Interval: time.Millisecond, Incremental: true},
		[]runtime.SourceTask{task}, []runtime.CheckpointTarget{task})
	if err != nil {
		t.Fatal(err)
	}
	c.SourceCaughtUp(task.id)
	r := runCoordinator(c)
	defer r.stop()

	kept := map[int64][]string{} // checkpoint id -> shared files, while kept
	take := func(b state.KeyedStateBackend) (int64, state.KeyedSnapshot) {
		id, ks := task.checkpoint(t, c, b)
		kept[id] = ks.SharedFiles
		delete(kept, id-2) // Retained 2
		var union []string
		for _, files := range kept {
			union = append(union, files...)
		}
		assertSharedExact(t, s, union)
		return id, ks
	}

	n, first := take(a)
	change(a, va, 0, 1)
	n1, incr := take(a)
	if n1 != n+1 {
		t.Fatalf("checkpoint ids %d, %d", n, n1)
	}
	t.Logf("full snapshot %d bytes; incremental checkpoint %d (first) %d bytes; checkpoint %d after %d changed keys %d bytes (%.3f%% of full)",
		full.Bytes, n, first.Bytes, n1, changed, incr.Bytes, 100*float64(incr.Bytes)/float64(full.Bytes))
	if incr.Bytes*20 >= full.Bytes {
		t.Fatalf("checkpoint n+1 wrote %d bytes, not under 5%% of the full snapshot's %d", incr.Bytes, full.Bytes)
	}
	if m, err := ReadMetadata(s.CheckpointDir(n1)); err != nil || m.Bytes != incr.Bytes || !slices.Equal(m.SharedFiles, slices.Sorted(slices.Values(incr.SharedFiles))) ||
		m.SharedDir != DefaultSharedDir || m.SharedDirOf(s.CheckpointDir(n1)) != s.SharedDir() {
		t.Fatalf("metadata of %d: %+v, %v; want bytes %d, shared files %q in %s", n1, m, err, incr.Bytes, incr.SharedFiles, DefaultSharedDir)
	}
	change(a, va, changed, 2)
	n2, _ := take(a)
	if got := completedStates(t, s); !slices.Equal(got, []string{completedState(n1), completedState(n2)}) {
		t.Fatalf("List = %q after rolling over, want checkpoints %d and %d", got, n1, n2)
	}
	oldInstances := instances(sharedFiles(t, s.SharedDir()))
	if len(oldInstances) != 1 {
		t.Fatalf("shared files of %d DB instances: %q", len(oldInstances), oldInstances)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	// Restore the newest kept checkpoint as a new DB.
	dir, m, err := s.Latest()
	if err != nil || m.CheckpointID != n2 {
		t.Fatalf("Latest = %d, %v; want %d", m.CheckpointID, err, n2)
	}
	old, err := DecodeTaskStates(m.Operators["op"])
	if err != nil {
		t.Fatal(err)
	}
	var handles []state.RestoreHandle
	for _, kh := range RedistributeKeyed(old, maxP, 1)[0] {
		handles = append(handles, state.RestoreHandle{Handle: kh.Handle, Dir: dir, SharedDir: s.SharedDir()})
	}
	b, err := state.OpenBackendRestored(state.BackendConfig{Kind: state.KindPebble, Dir: filepath.Join(root, "db-b"), MaxParallelism: maxP, KeyGroupRange: all}, handles)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	vb, err := state.GetValueState(b, valueDesc)
	if err != nil {
		t.Fatal(err)
	}
	check := func(step int) {
		t.Helper()
		for i := 0; i < numKeys; i += step {
			b.SetCurrentKey(u64key(i))
			v, ok, err := vb.Value()
			if err != nil || !ok || v != value(i) {
				t.Fatalf("key %d restored as %d (found %v, err %v), want %d", i, v, ok, err, value(i))
			}
		}
	}
	check(checkStep)

	// The restored backend is a new DB instance: its checkpoints upload new
	// shared files, and once they are the only kept ones, the old
	// instance's files are gone.
	change(b, vb, 2*changed, 3)
	n3, afterRestore := take(b)
	t.Logf("first checkpoint (%d) of the restored DB, a new instance: %d bytes", n3, afterRestore.Bytes)
	change(b, vb, 3*changed, 4)
	n4, last := take(b)
	if got := completedStates(t, s); !slices.Equal(got, []string{completedState(n3), completedState(n4)}) {
		t.Fatalf("List = %q, want checkpoints %d and %d", got, n3, n4)
	}
	newInstances := instances(sharedFiles(t, s.SharedDir()))
	if len(newInstances) != 1 || newInstances[0] == oldInstances[0] || !slices.Equal(instances(last.SharedFiles), newInstances) {
		t.Fatalf("shared files of instances %q after the old instance %q rolled out", newInstances, oldInstances)
	}
	check(997 * checkStep)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}
