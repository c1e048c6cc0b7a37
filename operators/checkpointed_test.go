package operators

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

const ckMaxP = 128

var (
	bufferState = state.ListStateDescriptor[string]{Name: "buffer", Serializer: state.StringSerializer{}}
	ownersState = state.ListStateDescriptor[string]{Name: "owners", Serializer: state.StringSerializer{}}
	countState  = state.ValueStateDescriptor[int64]{Name: "count", Serializer: state.Int64Serializer{}}
)

// statefulFn is a KeyedBroadcastProcessFunction with every kind of state:
// a keyed count per key, an even-split list ("buffer", the elements it
// holds, written at each snapshot as Flink's BufferingSink does), a union
// list ("owners", each subtask writes its own name) and broadcast rules.
type statefulFn struct {
	subtask int
	backend state.KeyedStateBackend
	count   state.ValueState[int64]
	buffer  *state.OperatorListState[string]
	owners  *state.OperatorListState[string]

	held  []string          // elements this subtask holds
	rules map[string]string // broadcast state

	// What InitializeState saw.
	restored       bool
	restoredBuffer []string
	restoredOwners []string
	snapshots      []int64
	failSnapshot   error
}

func (f *statefulFn) Open(ctx OpenContext) error {
	f.subtask, f.backend, f.rules = ctx.Subtask, ctx.Backend, map[string]string{}
	c, err := state.GetValueState(ctx.Backend, countState)
	f.count = c
	return err
}

func (f *statefulFn) ProcessElement(_ context.Context, _ runtime.Record, _ Collector) error {
	n, _, err := f.count.Value()
	if err != nil {
		return err
	}
	return f.count.Update(n + 1)
}

func (f *statefulFn) ProcessBroadcastElement(_ context.Context, rec runtime.Record, _ Collector) error {
	f.rules[string(rec.Key)] = string(rec.Value)
	return nil
}

func (f *statefulFn) InitializeState(ctx FunctionInitializationContext) error {
	var err error
	if f.buffer, err = state.GetOperatorListState(ctx.OperatorStateStore, bufferState); err != nil {
		return err
	}
	if f.owners, err = state.GetUnionListState(ctx.OperatorStateStore, ownersState); err != nil {
		return err
	}
	f.restored = ctx.IsRestored()
	if f.restoredBuffer, err = f.buffer.Get(); err != nil {
		return err
	}
	if f.restoredOwners, err = f.owners.Get(); err != nil {
		return err
	}
	f.held = slices.Clone(f.restoredBuffer)
	return nil
}

func (f *statefulFn) SnapshotState(ctx FunctionSnapshotContext) error {
	if f.failSnapshot != nil {
		return f.failSnapshot
	}
	f.snapshots = append(f.snapshots, ctx.CheckpointID)
	if err := f.buffer.Update(f.held); err != nil {
		return err
	}
	return f.owners.Update([]string{fmt.Sprintf("subtask-%d", f.subtask)})
}

func (f *statefulFn) SnapshotBroadcastState() (map[string]json.RawMessage, error) {
	b, err := json.Marshal(f.rules)
	return map[string]json.RawMessage{"rules": b}, err
}

func (f *statefulFn) RestoreBroadcastState(states map[string]json.RawMessage) error {
	return json.Unmarshal(states["rules"], &f.rules)
}

// subtaskOf is one running subtask of the test operator.
type subtaskOf struct {
	op *KeyedOperator
	fn *statefulFn
}

// openStage opens p subtasks, restoring restores[i] (nil: fresh).
func openStage(t *testing.T, kind, root string, stage, p int, restores []*Restore) []subtaskOf {
	t.Helper()
	out := make([]subtaskOf, p)
	for i := range out {
		fn := &statefulFn{}
		cfg := state.BackendConfig{Kind: kind, MaxParallelism: ckMaxP, KeyGroupRange: keygroup.RangeFor(ckMaxP, p, i)}
		if kind == state.KindPebble {
			cfg.Dir = filepath.Join(root, fmt.Sprintf("db-%d-%d", stage, i))
		}
		open := func(r []state.RestoreHandle) (state.KeyedStateBackend, error) {
			return state.OpenBackendRestored(cfg, r)
		}
		var r *Restore
		if restores != nil {
			r = restores[i]
		}
		op := NewKeyedBroadcastOperator(OpenContext{Operator: "op", Subtask: i, Parallelism: p}, open, r, fn, nil)
		if err := op.Open(context.Background()); err != nil {
			t.Fatalf("open subtask %d of %d: %v", i, p, err)
		}
		out[i] = subtaskOf{op: op, fn: fn}
	}
	return out
}

// snapshotStage snapshots every subtask as barrier id would and closes
// them; it returns the metadata's task states.
func snapshotStage(t *testing.T, subs []subtaskOf, b *runtime.Barrier) []checkpoint.TaskState {
	t.Helper()
	out := make([]checkpoint.TaskState, len(subs))
	for i, s := range subs {
		finish, err := s.op.SnapshotState(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := finish(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if snap.Bytes <= int64(len(snap.State)) {
			t.Fatalf("subtask %d snapshot of %d bytes: no keyed state written", i, snap.Bytes)
		}
		if (b.SharedDir != "") != (len(snap.SharedFiles) > 0) {
			t.Fatalf("subtask %d: shared files %q with shared dir %q", i, snap.SharedFiles, b.SharedDir)
		}
		ts, err := checkpoint.DecodeTaskStates(checkpoint.OperatorMetadata{Subtasks: []json.RawMessage{snap.State}})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = ts[0]
		if !slices.Equal(s.fn.snapshots, []int64{b.CheckpointID}) {
			t.Fatalf("subtask %d: function snapshots %v, want [%d]", i, s.fn.snapshots, b.CheckpointID)
		}
		if err := s.op.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// restoresFor redistributes old over p subtasks as pipeline.Build does.
func restoresFor(t *testing.T, old []checkpoint.TaskState, dir, shared string, p int) []*Restore {
	t.Helper()
	keyed := checkpoint.RedistributeKeyed(old, ckMaxP, p)
	ops, err := checkpoint.RedistributeOperatorState(old, p)
	if err != nil {
		t.Fatal(err)
	}
	bc := checkpoint.RedistributeBroadcast(old, p)
	out := make([]*Restore, p)
	for i := range out {
		r := &Restore{Operator: ops[i], Broadcast: bc[i]}
		for _, h := range keyed[i] {
			r.Keyed = append(r.Keyed, state.RestoreHandle{Handle: h.Handle, Dir: dir, SharedDir: shared})
		}
		out[i] = r
	}
	return out
}

func strs(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

// TestKeyedOperatorRescale is the rescale acceptance through the
// operator: parallelism 2, snapshot, restore at 3, then 1, then 4. After
// each restore the function reports IsRestored; the even-split list keeps
// every element exactly once in contiguous runs differing by at most one;
// the union list gives every subtask the whole list; the broadcast rules
// are on every subtask (scale-up subtasks take old copies round-robin);
// every key's count is intact in the subtask owning it.
func TestKeyedOperatorRescale(t *testing.T) {
	ctx := context.Background()
	var keys [][]byte
	for i := range 200 {
		keys = append(keys, fmt.Appendf(nil, "key-%d", i))
	}
	rules := map[string]string{"R1": "one", "R2": "two"}
	for _, kind := range []string{state.KindPebble, state.KindHashmap} {
		t.Run(kind, func(t *testing.T) {
			root := t.TempDir()
			shared := filepath.Join(root, "shared")
			subs := openStage(t, kind, root, 0, 2, nil)
			for i, s := range subs {
				if s.fn.restored || len(s.fn.restoredBuffer) != 0 || len(s.fn.restoredOwners) != 0 {
					t.Fatalf("fresh subtask %d: restored %v", i, s.fn.restored)
				}
			}
			subs[0].fn.held = strs("e", 0, 6)
			subs[1].fn.held = strs("e", 6, 10)
			// The broadcast side reaches every subtask.
			for _, s := range subs {
				for _, name := range slices.Sorted(maps.Keys(rules)) {
					if err := s.op.ProcessRecord(ctx, 1, runtime.Record{Key: []byte(name), Value: []byte(rules[name])}); err != nil {
						t.Fatal(err)
					}
				}
			}
			counts := map[string]int64{}
			process := func(subs []subtaskOf) {
				for _, k := range keys {
					s := subs[keygroup.SubtaskForKey(k, ckMaxP, len(subs))]
					if err := s.op.ProcessRecord(ctx, 0, runtime.Record{Key: k}); err != nil {
						t.Fatal(err)
					}
					counts[string(k)]++
				}
			}
			process(subs)
			process(subs)

			for stage, step := range []struct {
				p         int
				wantSplit [][]string
				wantUnion []string
			}{
				{3, [][]string{strs("e", 0, 4), strs("e", 4, 7), strs("e", 7, 10)}, strs("subtask-", 0, 2)},
				{1, [][]string{strs("e", 0, 10)}, strs("subtask-", 0, 3)},
				{4, [][]string{strs("e", 0, 3), strs("e", 3, 6), strs("e", 6, 8), strs("e", 8, 10)}, strs("subtask-", 0, 1)},
			} {
				stage++
				dir := filepath.Join(root, fmt.Sprintf("chk-%d", stage))
				b := &runtime.Barrier{CheckpointID: int64(stage), Timestamp: time.Unix(int64(stage), 0), Dir: dir}
				if kind == state.KindPebble && stage != 2 {
					b.SharedDir = shared
				}
				old := snapshotStage(t, subs, b)
				subs = openStage(t, kind, root, stage, step.p, restoresFor(t, old, dir, shared, step.p))
				for i, s := range subs {
					if !s.fn.restored {
						t.Fatalf("p=%d subtask %d: IsRestored false", step.p, i)
					}
					if !slices.Equal(s.fn.restoredBuffer, step.wantSplit[i]) {
						t.Fatalf("p=%d subtask %d: even-split list %q, want %q", step.p, i, s.fn.restoredBuffer, step.wantSplit[i])
					}
					if !slices.Equal(s.fn.restoredOwners, step.wantUnion) {
						t.Fatalf("p=%d subtask %d: union list %q, want %q", step.p, i, s.fn.restoredOwners, step.wantUnion)
					}
					if !maps.Equal(s.fn.rules, rules) {
						t.Fatalf("p=%d subtask %d: broadcast rules %v, want %v", step.p, i, s.fn.rules, rules)
					}
				}
				for _, k := range keys {
					s := subs[keygroup.SubtaskForKey(k, ckMaxP, step.p)]
					s.fn.backend.SetCurrentKey(k)
					n, ok, err := s.fn.count.Value()
					if err != nil || !ok || n != counts[string(k)] {
						t.Fatalf("p=%d key %s: count %d (found %v, err %v), want %d", step.p, k, n, ok, err, counts[string(k)])
					}
				}
				process(subs)
			}
			for _, s := range subs {
				if err := s.op.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestKeyedOperatorSnapshotFailure: an error of the function's
// SnapshotState fails the operator's snapshot (the task declines).
func TestKeyedOperatorSnapshotFailure(t *testing.T) {
	subs := openStage(t, state.KindHashmap, t.TempDir(), 0, 1, nil)
	defer subs[0].op.Close()
	boom := errors.New("boom")
	subs[0].fn.failSnapshot = boom
	if _, err := subs[0].op.SnapshotState(context.Background(), &runtime.Barrier{CheckpointID: 1, Dir: t.TempDir()}); !errors.Is(err, boom) {
		t.Fatalf("SnapshotState = %v, want boom", err)
	}
}
