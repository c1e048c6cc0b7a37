package operators

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// newWindowJoinHarness drives a WindowJoin as joinHarness drives an
// IntervalJoin.
func newWindowJoinHarness(t *testing.T, kind, dir string, restore *Restore, p WindowJoinParams) (*joinHarness, *WindowJoin) {
	t.Helper()
	h := &joinHarness{harness: &harness{t: t, mb: runtime.NewMailbox(), ch: runtime.NewChannel(1 << 16), ctx: context.Background()},
		late: runtime.NewChannel(1 << 12)}
	j := NewWindowJoin(p)
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{h.ch}, runtime.ForwardPartitioner{}))
	out.AddSideWriter(LateOutput, runtime.NewWriter([]runtime.Channel{h.late}, runtime.ForwardPartitioner{}))
	h.op = NewKeyedCoProcessOperator(OpenContext{Operator: "wj", Parallelism: 1}, opener(kind, dir), restore, j, out)
	h.op.SetMailbox(h.mb)
	if err := h.op.Open(h.ctx); err != nil {
		t.Fatal(err)
	}
	return h, j
}

// TestWindowJoinModel joins a random stream of 500 left and right records
// over 4 keys, with watermarks 3s behind the largest time (so some records
// are late for some or all of their windows), in tumbling 10s and sliding
// 10s/5s windows, for every join kind on both backends, with a snapshot
// and restore half-way. The output equals the definition computed
// independently: per key and window, every pair of a left and a right
// record that entered the window (its end - 1ms after the watermark when
// the record arrived), at the window's end - 1ms; for an outer side, each
// record of a window the other side never entered, with null. A record
// that entered none of its windows is on the late output; no state is
// left once every window ended.
func TestWindowJoinModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 23))
	var events []joinEvent
	maxTS := int64(0)
	for i := range 500 {
		ts := int64(30_000 + i*200 + rng.IntN(10_000) - 5_000)
		events = append(events, joinEvent{side: rng.IntN(2), key: fmt.Sprint("k", rng.IntN(4)), ts: ts, id: i})
		maxTS = max(maxTS, ts)
		if i%10 == 9 {
			events = append(events, joinEvent{wm: maxTS - 3_000})
		}
	}
	for _, wk := range []struct {
		name        string
		size, slide int64
	}{{"tumbling", 10_000, 0}, {"sliding", 10_000, 5_000}} {
		step := wk.size
		if wk.slide > 0 {
			step = wk.slide
		}
		windowsOf := func(ts int64) []int64 { // starts
			var out []int64
			for s := ts - ts%step; s > ts-wk.size; s -= step {
				out = append(out, s)
			}
			return out
		}
		// The model: per key and window start, the records of each side
		// that entered it.
		type kw struct {
			key   string
			start int64
		}
		entered := map[kw][2][]joinEvent{}
		var late []string
		wm := int64(0)
		for _, e := range events {
			if e.wm > 0 {
				wm = max(wm, e.wm)
				continue
			}
			in := false
			for _, s := range windowsOf(e.ts) {
				if s+wk.size-1 > wm {
					k := kw{e.key, s}
					sides := entered[k]
					sides[e.side] = append(sides[e.side], e)
					entered[k] = sides
					in = true
				}
			}
			if !in {
				late = append(late, e.value())
			}
		}
		slices.Sort(late)
		for _, kind := range []JoinKind{JoinInner, JoinLeftOuter, JoinRightOuter, JoinFullOuter} {
			var want []string
			for k, sides := range entered {
				end := k.start + wk.size
				win := fmt.Sprintf(`,"window_start":%q,"window_end":%q`, time.UnixMilli(k.start).UTC().Format(time.RFC3339Nano), time.UnixMilli(end).UTC().Format(time.RFC3339Nano))
				line := func(l, r string) string {
					return fmt.Sprintf(`%s %d {"left":%s,"right":%s%s}`, k.key, end-1, l, r, win)
				}
				for _, l := range sides[0] {
					for _, r := range sides[1] {
						want = append(want, line(l.value(), r.value()))
					}
				}
				if len(sides[1]) == 0 && kind.outer(0) {
					for _, l := range sides[0] {
						want = append(want, line(l.value(), "null"))
					}
				}
				if len(sides[0]) == 0 && kind.outer(1) {
					for _, r := range sides[1] {
						want = append(want, line("null", r.value()))
					}
				}
			}
			slices.Sort(want)
			for _, backend := range backends {
				t.Run(fmt.Sprintf("%s/%s/%s", wk.name, kind, backend), func(t *testing.T) {
					p := WindowJoinParams{Kind: Tumbling, Size: time.Duration(wk.size) * time.Millisecond, Join: kind}
					if wk.slide > 0 {
						p.Kind, p.Slide = Sliding, time.Duration(wk.slide)*time.Millisecond
					}
					h, j := newWindowJoinHarness(t, backend, t.TempDir(), nil, p)
					var got, gotLate []runtime.Record
					lastWM := int64(0)
					for i, e := range events {
						if i == len(events)/2 {
							got = append(got, h.emitted()...)
							gotLate = append(gotLate, h.lateRecords()...)
							r := snapshotRestore(t, h.harness)
							h, j = newWindowJoinHarness(t, backend, t.TempDir(), r, p)
							h.wm(lastWM)
						}
						if e.wm > 0 {
							h.wm(e.wm)
							lastWM = e.wm
							continue
						}
						h.send(e.side, runtime.Record{Key: []byte(e.key), Value: []byte(e.value()), Timestamp: time.UnixMilli(e.ts)})
					}
					h.wm(maxTS + wk.size)
					got = append(got, h.emitted()...)
					gotLate = append(gotLate, h.lateRecords()...)
					if g := joinOutputs(got); !slices.Equal(g, want) {
						t.Errorf("%d outputs, want %d; first differences:\n%s", len(g), len(want), joinDiff(g, want))
					}
					if g := values(gotLate); !slices.Equal(slices.Sorted(slices.Values(g)), late) {
						t.Errorf("late output %d records, want %d", len(g), len(late))
					}
					if n := h.entries(); n != 0 || j.BufferedRows() != 0 {
						t.Errorf("%d state entries, %d rows counted after every window ended, want none", n, j.BufferedRows())
					}
					h.finish()
				})
			}
			if kind == JoinInner && (len(want) < 200 || len(late) == 0) {
				t.Fatalf("%s: %d inner rows, %d late records: the input should give more", wk.name, len(want), len(late))
			}
		}
	}
}
