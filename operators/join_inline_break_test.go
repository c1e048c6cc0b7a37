package operators

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// TestRegularJoinInlineAgainstScanRescale attacks the regular join's
// inline rows (joinHead): the same input goes through a join with a long
// state_ttl (no join.sizes: every record scans both sides' MapStates, the
// layout before the inline rows) and through one without state_ttl (sides
// inline while they hold one distinct row) that is checkpointed every
// 20-40 records and restored at parallelism 1, 2 or 3 (records routed by
// key group), in the middle of the transitions, or whose asynchronous
// part runs while the same subtasks go on. Per key, the changelogs
// must be equal line for line (every +I and -D, the null-padded rows of
// the outer kinds included), and at every restore the rows and counts
// kept (inline or in a MapState) must equal a model's. The input starts
// with fixed transitions on key "t" of 0 -> 1 -> 2 -> 1 -> 0 -> 1 rows per
// side (the same row twice, an update and a delete of the inline row, both
// sides inline at once) and goes on with random inserts, -U/+U and
// deletes of four values on four keys (400 records); for inner, left and full outer
// joins, with and without an upsert left side, on the heap backend (and
// Pebble for the full outer join). One subtask opened in three gets its
// row filter (joinRowFilter) tiny bounds (a few rows, or two spilled keys
// and a few bytes of keys), so that filters are dropped in the middle of
// the stream, between restores; the others keep the default bounds.
func TestRegularJoinInlineAgainstScanRescale(t *testing.T) {
	type ev struct {
		side int
		c    runtime.ChangeKind
		k, v string
		p    int  // > 0: a checkpoint restored at parallelism p
		goOn bool // a checkpoint whose asynchronous part runs while the same subtasks go on
	}
	assoc := regexp.MustCompile(` assoc=\d+`)
	for _, upsertLeft := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(45, 77))
		val := func(i int) string { return fmt.Sprintf(`{"v":%d}`, i) }
		var events []ev
		add := func(side int, c runtime.ChangeKind, k, v string) {
			events = append(events, ev{side: side, c: c, k: k, v: v})
		}
		ckpt := func() { events = append(events, ev{p: 1 + rng.IntN(3)}) }
		// The fixed transitions on key t, a checkpoint after each step.
		fixed := []struct {
			side int
			c    runtime.ChangeKind
			v    int
		}{
			{0, runtime.ChangeInsert, 1},       // left 0 -> 1 (inline)
			{1, runtime.ChangeInsert, 5},       // right 0 -> 1: both inline
			{1, runtime.ChangeInsert, 5},       // right: the same row twice (count 2, still inline)
			{0, runtime.ChangeUpdateBefore, 1}, // left: update of the inline row
			{0, runtime.ChangeUpdateAfter, 2},  //
			{0, runtime.ChangeInsert, 3},       // left 1 -> 2 (to the MapState)
			{1, runtime.ChangeDelete, 5},       // right: one of the two
			{0, runtime.ChangeDelete, 2},       // left 2 -> 1 (stays in the MapState)
			{1, runtime.ChangeInsert, 6},       // right 1 -> 2
			{0, runtime.ChangeDelete, 3},       // left 1 -> 0
			{1, runtime.ChangeDelete, 5},       // right 2 -> 1
			{0, runtime.ChangeInsert, 4},       // left 0 -> 1 (inline again)
			{1, runtime.ChangeDelete, 6},       // right 1 -> 0
			{1, runtime.ChangeInsert, 7},       // right 0 -> 1 (inline again)
			{0, runtime.ChangeInsert, 4},       // left: the inline row twice
			{0, runtime.ChangeDelete, 4},       //
			{0, runtime.ChangeDelete, 4},       // left 1 -> 0
			{1, runtime.ChangeDelete, 7},       // right 1 -> 0: the key empty
			{1, runtime.ChangeInsert, 8},       // right 0 -> 1
		}
		for _, f := range fixed {
			add(f.side, f.c, "t", val(f.v))
			ckpt()
		}
		keys := []string{"a", "b", "c", "d"}
		// model[k][side]: the row multiset the random part is drawn from.
		model := map[string]*[2]map[string]int{}
		next := 25 + rng.IntN(25)
		for i := range 400 {
			if i == next {
				if rng.IntN(3) == 0 {
					events = append(events, ev{goOn: true})
				} else {
					ckpt()
				}
				next += 25 + rng.IntN(25)
			}
			side, k := rng.IntN(2), keys[rng.IntN(len(keys))]
			if model[k] == nil {
				model[k] = &[2]map[string]int{{}, {}}
			}
			rows := model[k][side]
			present := slices.Sorted(maps.Keys(rows))
			v := val(rng.IntN(4))
			upsert := side == 0 && upsertLeft
			put := func(c runtime.ChangeKind, v string) {
				if upsert {
					clear(rows)
				}
				rows[v]++
				add(side, c, k, v)
			}
			del := func(c runtime.ChangeKind, v string) {
				if upsert {
					clear(rows)
				} else if rows[v]--; rows[v] == 0 {
					delete(rows, v)
				}
				add(side, c, k, v)
			}
			switch op := rng.IntN(10); {
			case len(present) == 0 || op < 4:
				put(runtime.ChangeInsert, v)
			case op < 7:
				if !upsert {
					del(runtime.ChangeUpdateBefore, present[rng.IntN(len(present))])
				}
				put(runtime.ChangeUpdateAfter, v)
			case upsert && op == 9:
				del(runtime.ChangeDelete, "") // a tombstone
			default:
				del(runtime.ChangeDelete, present[rng.IntN(len(present))])
			}
		}
		var upsertRoles []string
		if upsertLeft {
			upsertRoles = []string{JoinLeft}
		}
		for _, jk := range []JoinKind{JoinInner, JoinLeftOuter, JoinFullOuter} {
			for _, backend := range backends {
				if backend == state.KindPebble && jk != JoinFullOuter {
					continue // Pebble's opens are slow: its layout is the same
				}
				t.Run(fmt.Sprintf("upsert=%v/%s/%s", upsertLeft, jk, backend), func(t *testing.T) {
					ctx := context.Background()
					p := JoinParams{Join: jk, Upsert: upsertRoles}
					root := t.TempDir()
					opens := 0
					var joins []*RegularJoin // the subtasks' joins with tiny filter bounds
					open := func(name string, p JoinParams, n int, restores []*Restore) []*joinHarness {
						subs := make([]*joinHarness, n)
						for i := range subs {
							cfg := state.BackendConfig{Kind: backend, MaxParallelism: testMaxP, KeyGroupRange: keygroup.RangeFor(testMaxP, n, i)}
							if backend == state.KindPebble {
								cfg.Dir = filepath.Join(root, fmt.Sprintf("%s-%d", name, i))
							}
							h := &joinHarness{harness: &harness{t: t, mb: runtime.NewMailbox(), ch: runtime.NewChannel(1 << 16), ctx: ctx}}
							out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{h.ch}, runtime.ForwardPartitioner{}))
							var r *Restore
							if restores != nil {
								r = restores[i]
							}
							h.op = NewKeyedCoProcessOperator(OpenContext{Operator: "join", Subtask: i, Parallelism: n}, func(rh []state.RestoreHandle) (state.KeyedStateBackend, error) {
								return state.OpenBackendRestored(cfg, rh)
							}, r, NewRegularJoin(p), out)
							h.op.SetMailbox(h.mb)
							if err := h.op.Open(ctx); err != nil {
								t.Fatal(err)
							}
							if j := h.op.co.(*RegularJoin); name != "ref" {
								switch opens++; opens % 6 {
								case 2:
									j.filter.maxRows = 3 + opens%11
									joins = append(joins, j)
								case 5:
									j.filter.maxKeys, j.filter.maxKeyBytes = 2, 1+opens%3
									joins = append(joins, j)
								}
							}
							subs[i] = h
						}
						return subs
					}
					perKey := func(lines map[string][]string, recs []runtime.Record) {
						for _, r := range recs {
							lines[string(r.Key)] = append(lines[string(r.Key)], fmt.Sprintf("%s %s", r.Change, r.Value))
						}
					}
					// The reference: the scanning layout (state_ttl), one
					// subtask, never restored.
					pt := p
					pt.StateTTL = StateTTLParams{TTL: 1000 * time.Hour}
					ref := open("ref", pt, 1, nil)[0]
					want := map[string][]string{}
					for _, e := range events {
						if e.p == 0 && !e.goOn {
							ref.send(e.side, change(e.c, e.k, e.v, 1))
						}
					}
					perKey(want, ref.finish())
					if len(want["t"]) == 0 {
						t.Fatal("no output for key t")
					}

					got := map[string][]string{}
					subs := open("s0", p, 1, nil)
					rows := map[string]*[2]map[string]int{} // the model of the stored rows
					modelRows := func() string {
						var lines []string
						for _, k := range slices.Sorted(maps.Keys(rows)) {
							var sz [2]int
							for side := range 2 {
								for v, n := range rows[k][side] {
									lines = append(lines, fmt.Sprintf("%s %s %q count=%d", k, [2]string{"left", "right"}[side], "\x00"+v, n))
								}
								sz[side] = len(rows[k][side])
							}
							if sz != [2]int{} {
								lines = append(lines, fmt.Sprintf("%s sizes=%d,%d", k, sz[0], sz[1]))
							}
						}
						slices.Sort(lines)
						return strings.Join(lines, "\n") + "\n"
					}
					stage, restored := 0, 0
					async, pending := make(chan error, 4), 0
					wait := func() {
						for ; pending > 0; pending-- {
							if err := <-async; err != nil {
								t.Fatal(err)
							}
						}
					}
					for _, e := range events {
						if e.goOn {
							// The snapshot is written while the same
							// subtasks go on changing their rows.
							wait()
							stage++
							dir := filepath.Join(root, fmt.Sprintf("chk-%d", stage))
							for _, h := range subs {
								finish, err := h.op.SnapshotState(ctx, &runtime.Barrier{CheckpointID: int64(stage), Timestamp: time.Unix(int64(stage), 0), Dir: dir})
								if err != nil {
									t.Fatal(err)
								}
								pending++
								go func() {
									_, err := finish(ctx)
									async <- err
								}()
							}
							continue
						}
						if e.p == 0 {
							if rows[e.k] == nil {
								rows[e.k] = &[2]map[string]int{{}, {}}
							}
							r := rows[e.k][e.side]
							switch {
							case e.side == 0 && upsertLeft:
								clear(r)
								if e.c == runtime.ChangeInsert || e.c == runtime.ChangeUpdateAfter {
									r[e.v] = 1
								}
							case e.c == runtime.ChangeInsert || e.c == runtime.ChangeUpdateAfter:
								r[e.v]++
							default:
								if r[e.v]--; r[e.v] <= 0 {
									delete(r, e.v)
								}
							}
							subs[keygroup.SubtaskForKey([]byte(e.k), testMaxP, len(subs))].send(e.side, change(e.c, e.k, e.v, 1))
							continue
						}
						wait()
						stage++
						var kept []string
						for _, h := range subs {
							perKey(got, h.emitted())
							kept = append(kept, strings.Split(strings.TrimSuffix(assoc.ReplaceAllString(regularJoinRows(t, h), ""), "\n"), "\n")...)
						}
						kept = slices.DeleteFunc(kept, func(s string) bool { return s == "" })
						slices.Sort(kept)
						if g, w := strings.Join(kept, "\n")+"\n", modelRows(); g != w {
							t.Fatalf("checkpoint %d: state rows\n%s\nwant\n%s", stage, g, w)
						}
						dir := filepath.Join(root, fmt.Sprintf("chk-%d", stage))
						old := make([]checkpoint.TaskState, len(subs))
						for i, h := range subs {
							finish, err := h.op.SnapshotState(ctx, &runtime.Barrier{CheckpointID: int64(stage), Timestamp: time.Unix(int64(stage), 0), Dir: dir})
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
							old[i] = ts[0]
							if err := h.op.Close(); err != nil {
								t.Fatal(err)
							}
						}
						keyed := checkpoint.RedistributeKeyed(old, testMaxP, e.p)
						restores := make([]*Restore, e.p)
						for i := range restores {
							restores[i] = &Restore{}
							for _, kh := range keyed[i] {
								restores[i].Keyed = append(restores[i].Keyed, state.RestoreHandle{Handle: kh.Handle, Dir: dir})
							}
						}
						if e.p > 1 {
							restored++
						}
						subs = open(fmt.Sprintf("s%d", stage), p, e.p, restores)
					}
					wait()
					for _, h := range subs {
						perKey(got, h.finish())
					}
					if restored == 0 {
						t.Fatal("no restore at a parallelism above 1")
					}
					dropped := 0
					for _, j := range joins {
						if j.filter.off {
							dropped++
						}
					}
					if dropped == 0 || dropped == len(joins) {
						t.Fatalf("%d of %d filters with tiny bounds dropped, want some but not all", dropped, len(joins))
					}
					for _, k := range slices.Sorted(maps.Keys(want)) {
						if g, w := strings.Join(got[k], "\n"), strings.Join(want[k], "\n"); g != w {
							t.Fatalf("key %s: changelog differs from the scanning join's:\n%s", k, firstDiff(got[k], want[k]))
						}
					}
					if len(got) != len(want) {
						t.Fatalf("output for %d keys, want %d", len(got), len(want))
					}
				})
			}
		}
	}
}
