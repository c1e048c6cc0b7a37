package operators

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// TestIntervalJoinInPlaceRescaleModel attacks the in-place append of the
// interval join's lists (intervalSidesSerializer) and the shared select
// output blocks (joinOutput.selectValue): random records on both sides
// (many per key, out of order, some late) whose value bytes (but for the
// late ones, passed on as they are) live in one buffer the test
// overwrites after every record (as a source reusing its fetch buffer), random watermarks, and every 100-200 events a checkpoint
// that either lets the same subtasks go on (their lists appended to after
// the snapshot serialized them) or restores at parallelism 1, 2 or 3
// (records routed by key group). Every output is held unread until the
// end (a sink holding earlier outputs while the blocks fill) and must
// equal, byte for byte, what an independent model gives: the pairs
// left.ts-2s <= right.ts <= left.ts+3s of one key, and for the outer
// kinds the unmatched rows, with select {"k","l","r"} (ids, 0 for null).
// Late records go to the late output unchanged; nothing is left in state
// at the end. For inner and full outer joins, both backends, and lists
// kept in place (the default spill limit) or spilled to by-time at 3.
func TestIntervalJoinInPlaceRescaleModel(t *testing.T) {
	sel, err := CompileExpression(`{"k": key, "l": left == null ? 0 : left.id, "r": right == null ? 0 : right.id}`)
	if err != nil {
		t.Fatal(err)
	}
	lower, upper := int64(-2_000), int64(3_000)
	rng := rand.New(rand.NewPCG(41, 7))
	type ev struct {
		side, id int
		key      string
		ts       int64
		pad      int
		wm       int64 // > 0: a watermark
		ckpt     bool  // a checkpoint
		p        int   // > 0: restore at parallelism p after the checkpoint
	}
	var events []ev
	maxTS := int64(0)
	for i := 1; i <= 1500; i++ {
		ts := int64(10_000 + i*40 + rng.IntN(3_000) - 1_500)
		events = append(events, ev{side: rng.IntN(2), id: i, key: fmt.Sprint("k", rng.IntN(6)), ts: ts, pad: rng.IntN(40)})
		maxTS = max(maxTS, ts)
		if rng.IntN(7) == 0 {
			events = append(events, ev{wm: maxTS - int64(rng.IntN(2_500))})
		}
		if i%150 == 0 {
			e := ev{ckpt: true}
			if rng.IntN(2) == 0 {
				e.p = 1 + rng.IntN(3)
			}
			events = append(events, e)
		}
	}
	var goOn, rescaled int
	for _, e := range events {
		if e.ckpt && e.p == 0 {
			goOn++
		}
		if e.ckpt && e.p > 1 {
			rescaled++
		}
	}
	if goOn == 0 || rescaled == 0 {
		t.Fatalf("%d checkpoints going on, %d restores at parallelism above 1; the test wants both", goOn, rescaled)
	}
	value := func(e ev) string { return fmt.Sprintf(`{"id":%d,"pad":"%s"}`, e.id, strings.Repeat("x", e.pad)) }
	// The model: late records (at or before the watermark when they
	// arrive), then pairs and unmatched rows of the others.
	var live [2][]ev
	var wantLate []string
	isLate := map[int]bool{}
	wm := int64(0)
	for _, e := range events {
		switch {
		case e.ckpt:
		case e.wm > 0:
			wm = max(wm, e.wm)
		case e.ts <= wm:
			wantLate = append(wantLate, fmt.Sprintf("%s %d %s", e.key, e.ts, value(e)))
			isLate[e.id] = true
		default:
			live[e.side] = append(live[e.side], e)
		}
	}
	slices.Sort(wantLate)
	if len(wantLate) < 20 {
		t.Fatalf("%d late records; the test wants some", len(wantLate))
	}
	for _, kind := range []JoinKind{JoinInner, JoinFullOuter} {
		var want []string
		matched := [2]map[int]bool{{}, {}}
		for _, l := range live[0] {
			for _, r := range live[1] {
				if l.key == r.key && l.ts+lower <= r.ts && r.ts <= l.ts+upper {
					want = append(want, fmt.Sprintf(`%s %d {"k":"%s","l":%d,"r":%d}`, l.key, max(l.ts, r.ts), l.key, l.id, r.id))
					matched[0][l.id], matched[1][r.id] = true, true
				}
			}
		}
		for side := range 2 {
			for _, e := range live[side] {
				if !kind.outer(side) || matched[side][e.id] {
					continue
				}
				l, r := e.id, 0
				if side == 1 {
					l, r = 0, e.id
				}
				want = append(want, fmt.Sprintf(`%s %d {"k":"%s","l":%d,"r":%d}`, e.key, e.ts, e.key, l, r))
			}
		}
		slices.Sort(want)
		for _, backend := range backends {
			for _, run := range []struct{ spill, cache int }{{intervalJoinSpillRows, 0}, {3, 0}, {intervalJoinSpillRows, 1 << 11}, {3, 1 << 11}} {
				spill := run.spill
				if run.cache != 0 && backend != state.KindPebble {
					continue // the write cache is Pebble's
				}
				t.Run(fmt.Sprintf("%s/%s/spill%d/cache%d", kind, backend, spill, run.cache), func(t *testing.T) {
					ctx := context.Background()
					p := IntervalJoinParams{Lower: time.Duration(lower) * time.Millisecond, Upper: time.Duration(upper) * time.Millisecond, Join: kind, Select: sel}
					root := t.TempDir()
					open := func(stage, n int, restores []*Restore) []*joinHarness {
						subs := make([]*joinHarness, n)
						for i := range subs {
							cfg := state.BackendConfig{Kind: backend, MaxParallelism: testMaxP, KeyGroupRange: keygroup.RangeFor(testMaxP, n, i)}
							if backend == state.KindPebble {
								cfg.Dir = filepath.Join(root, fmt.Sprintf("db-%d-%d", stage, i))
								cfg.WriteCacheBytes = run.cache // 2 KiB: entries evicted between a key's read and its write
							}
							j := NewIntervalJoin(p)
							j.spillRows = spill
							h := &joinHarness{harness: &harness{t: t, mb: runtime.NewMailbox(), ch: runtime.NewChannel(1 << 16), ctx: ctx},
								late: runtime.NewChannel(1 << 12), j: j}
							out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{h.ch}, runtime.ForwardPartitioner{}))
							out.AddSideWriter(LateOutput, runtime.NewWriter([]runtime.Channel{h.late}, runtime.ForwardPartitioner{}))
							var r *Restore
							if restores != nil {
								r = restores[i]
							}
							h.op = NewKeyedCoProcessOperator(OpenContext{Operator: "j", Subtask: i, Parallelism: n}, func(rh []state.RestoreHandle) (state.KeyedStateBackend, error) {
								return state.OpenBackendRestored(cfg, rh)
							}, r, j, out)
							h.op.SetMailbox(h.mb)
							if err := h.op.Open(ctx); err != nil {
								t.Fatal(err)
							}
							subs[i] = h
						}
						return subs
					}
					subs := open(0, 1, nil)
					var got, gotLate []runtime.Record
					drain := func() {
						for _, h := range subs {
							got = append(got, h.emitted()...)
							gotLate = append(gotLate, h.lateRecords()...)
						}
					}
					async, pending := make(chan error, 8), 0
					wait := func() {
						for ; pending > 0; pending-- {
							if err := <-async; err != nil {
								t.Fatal(err)
							}
						}
					}
					buf := make([]byte, 0, 256)
					lastWM, stage := int64(0), 0
					for _, e := range events {
						switch {
						case e.ckpt:
							stage++
							dir := filepath.Join(root, fmt.Sprintf("chk-%d", stage))
							b := &runtime.Barrier{CheckpointID: int64(stage), Timestamp: time.Unix(int64(stage), 0), Dir: dir}
							wait() // the previous checkpoint's asynchronous parts
							if e.p == 0 {
								// The asynchronous parts run while the
								// same subtasks go on appending to
								// their lists.
								for _, h := range subs {
									finish, err := h.op.SnapshotState(ctx, b)
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
							old := make([]checkpoint.TaskState, len(subs))
							for i, h := range subs {
								finish, err := h.op.SnapshotState(ctx, b)
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
							}
							drain()
							for _, h := range subs {
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
							subs = open(stage, e.p, restores)
							for _, h := range subs {
								h.wm(lastWM) // a restored job resumes at its watermark
							}
						case e.wm > lastWM: // watermarks only rise
							for _, h := range subs {
								h.wm(e.wm)
							}
							lastWM = e.wm
						case e.wm > 0:
						default:
							h := subs[keygroup.SubtaskForKey([]byte(e.key), testMaxP, len(subs))]
							if isLate[e.id] { // passed on as it is: its own bytes
								h.send(e.side, runtime.Record{Key: []byte(e.key), Value: []byte(value(e)), Timestamp: time.UnixMilli(e.ts)})
								continue
							}
							buf = append(buf[:0], value(e)...)
							h.send(e.side, runtime.Record{Key: []byte(e.key), Value: buf, Timestamp: time.UnixMilli(e.ts)})
							for i := range buf {
								buf[i] = '#' // the source reuses its buffer
							}
						}
					}
					for _, h := range subs {
						h.wm(maxTS + upper - lower + 1)
					}
					wait()
					drain()
					if g := joinOutputs(got); !slices.Equal(g, want) {
						t.Errorf("%d outputs, want %d; first differences:\n%s", len(g), len(want), joinDiff(g, want))
					}
					if g := joinOutputs(gotLate); !slices.Equal(g, wantLate) {
						t.Errorf("%d late records, want %d; first differences:\n%s", len(g), len(wantLate), joinDiff(g, wantLate))
					}
					for i, h := range subs {
						if n := h.entries(); n != 0 {
							t.Errorf("subtask %d: %d state entries at the end, want 0", i, n)
						}
						if n := h.j.BufferedRows(); n != 0 {
							t.Errorf("subtask %d: %d buffered rows at the end, want 0", i, n)
						}
						if err := h.op.Close(); err != nil {
							t.Fatal(err)
						}
					}
				})
			}
		}
	}
}
