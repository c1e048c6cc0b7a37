package operators

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// TestAggregateSharedRescaleModel runs mixedSpecs (shared of values, two
// shared distinct maps, min/max multisets over a changelog) at parallelism
// 1, 2, 3 and 1 again, snapshotting every subtask and restoring the key
// groups at the next parallelism: a fresh subtask has the key hint on,
// every restored one has it off, and after every stage each key's last
// row equals mixedModelRow of its records so far (a hint left on, or a
// shared map lost in the redistribution, restarts a key from zero). Both
// backends, with and without mini_batch, append-only and changelog.
func TestAggregateSharedRescaleModel(t *testing.T) {
	ctx := context.Background()
	specs := mixedSpecs(t, []int{5, 0, 1, 2, 3, 4, 6})
	for _, kind := range backends {
		for _, mb := range []*MiniBatchParams{nil, {Size: 4}} {
			for _, changelog := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/mini_batch=%t/changelog=%t", kind, mb != nil, changelog), func(t *testing.T) {
					root := t.TempDir()
					r := rand.New(rand.NewPCG(17, uint64(len(kind))))
					in := map[string][][2]int{}
					last := map[string]map[string]any{}
					var restores []*Restore
					for stage, p := range []int{1, 2, 3, 1} {
						ch := runtime.NewChannel(100_000)
						fns := make([]*Aggregate, p)
						ops := make([]*KeyedOperator, p)
						for i := range p {
							cfg := state.BackendConfig{Kind: kind, MaxParallelism: ckMaxP, KeyGroupRange: keygroup.RangeFor(ckMaxP, p, i)}
							if kind == state.KindPebble {
								cfg.Dir = filepath.Join(root, fmt.Sprintf("db-%d-%d", stage, i))
							}
							open := func(h []state.RestoreHandle) (state.KeyedStateBackend, error) {
								return state.OpenBackendRestored(cfg, h)
							}
							var rs *Restore
							if restores != nil {
								rs = restores[i]
							}
							fns[i] = NewAggregate(AggregateParams{Aggregates: specs, MiniBatch: mb}, changelog)
							out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
							ops[i] = NewKeyedProcessOperator(OpenContext{Operator: "op", Subtask: i, Parallelism: p}, open, rs, fns[i], out)
							if err := ops[i].Open(ctx); err != nil {
								t.Fatal(err)
							}
							if fns[i].hint.on != (stage == 0) {
								t.Fatalf("stage %d subtask %d: hint on %v", stage, i, fns[i].hint.on)
							}
						}
						for range 120 {
							k := fmt.Sprint("k", r.IntN(24))
							rows := in[k]
							var rec runtime.Record
							if changelog && len(rows) > 0 && r.IntN(3) == 0 {
								i := r.IntN(len(rows))
								rec = changed(runtime.ChangeDelete, k, rows[i][0], fmt.Sprint("u", rows[i][1]))
								in[k] = append(rows[:i], rows[i+1:]...)
							} else {
								row := [2]int{r.IntN(20), r.IntN(6)}
								rec = changed(runtime.ChangeInsert, k, row[0], fmt.Sprint("u", row[1]))
								in[k] = append(in[k], row)
							}
							if err := ops[keygroup.SubtaskForKey(rec.Key, ckMaxP, p)].ProcessRecord(ctx, 0, rec); err != nil {
								t.Fatal(err)
							}
						}
						dir := filepath.Join(root, fmt.Sprintf("chk-%d", stage))
						b := &runtime.Barrier{CheckpointID: int64(stage + 1), Dir: dir}
						var old []checkpoint.TaskState
						for i, op := range ops {
							finish, err := op.SnapshotState(ctx, b)
							if err != nil {
								t.Fatal(err)
							}
							snap, err := finish(ctx)
							if err != nil {
								t.Fatal(err)
							}
							ts, err := checkpoint.DecodeTaskStates(checkpoint.OperatorMetadata{Subtasks: []json.RawMessage{snap.State}})
							if err != nil {
								t.Fatal(err)
							}
							old = append(old, ts[0])
							if err := op.EndInput(ctx); err != nil {
								t.Fatal(err)
							}
							if err := op.Close(); err != nil {
								t.Fatalf("close subtask %d: %v", i, err)
							}
						}
						for done := false; !done; {
							select {
							case el := <-ch:
								rec := el.Record
								if rec.Change == runtime.ChangeDelete {
									delete(last, string(rec.Key))
								} else if rec.Change != runtime.ChangeUpdateBefore {
									var row map[string]any
									if err := json.Unmarshal(rec.Value, &row); err != nil {
										t.Fatalf("row %s: %v", rec.Value, err)
									}
									last[string(rec.Key)] = row
								}
							default:
								done = true
							}
						}
						want := map[string]map[string]any{}
						for k, rows := range in {
							if len(rows) > 0 {
								want[k] = mixedModelRow(k, rows)
							}
						}
						if !reflect.DeepEqual(last, want) {
							for k := range want {
								for f, v := range want[k] {
									if last[k][f] != v {
										t.Errorf("stage %d key %s %s = %v, want %v", stage, k, f, last[k][f], v)
									}
								}
							}
							t.Fatalf("stage %d (parallelism %d): last rows differ (%d keys, want %d)", stage, p, len(last), len(want))
						}
						if stage < 3 {
							restores = restoresFor(t, old, dir, "", []int{1, 2, 3, 1}[stage+1])
						}
					}
				})
			}
		}
	}
}
