package operators

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// TestWindowCountDistinctCountedMap: a window's count_distinct values live
// in the counted map (WindowDistinctStateName: one entry per window and
// value, however often it comes), not in a list in the window's
// accumulator that every record would copy and scan; results are exact
// and nothing is left after the windows close.
func TestWindowCountDistinctCountedMap(t *testing.T) {
	rec := func(key string, ms, v int64) runtime.Record {
		return runtime.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"v":%d}`, v), Timestamp: time.UnixMilli(ms)}
	}
	count := AggregateSpec{Name: "n", Fn: AggCount}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			entries := func(aggs []AggregateSpec) (int, []string) {
				p := WindowParams{Kind: Tumbling, Size: 10 * time.Second, Time: WindowEventTime, Aggregates: aggs}
				h := newWindowHarness(t, kind, t.TempDir(), nil, p)
				for i := range int64(300) {
					h.process(rec("a", 1000+i, i%100))
				}
				h.process(rec("b", 2000, 7))
				n := h.entries()
				out := h.wm(9_999)
				slices.Sort(out)
				if left := h.entries(); left != 0 {
					t.Fatalf("%d entries left after the windows closed, want 0", left)
				}
				h.finish()
				return n, out
			}
			distinct := AggregateSpec{Name: "d", Fn: AggCountDistinct, Of: compiled(t, "v")}
			withD, out := entries([]AggregateSpec{distinct, count})
			without, _ := entries([]AggregateSpec{count})
			if got := withD - without; got != 101 {
				t.Errorf("count_distinct added %d state entries, want 101 (one per window and value)", got)
			}
			want := []string{
				`{"key":"a","window_start":"1970-01-01T00:00:00Z","window_end":"1970-01-01T00:00:10Z","d":100,"n":300}`,
				`{"key":"b","window_start":"1970-01-01T00:00:00Z","window_end":"1970-01-01T00:00:10Z","d":1,"n":1}`,
			}
			if !slices.Equal(out, want) {
				t.Errorf("got %q, want %q", out, want)
			}
		})
	}
}

// TestSessionCountDistinctMerge: sessions that merge add their counted
// maps (a value in two of them counts once) and the merged session's
// count_distinct is the size of the union.
func TestSessionCountDistinctMerge(t *testing.T) {
	p := WindowParams{Kind: Session, Gap: 100 * time.Millisecond, Time: WindowEventTime,
		Aggregates: []AggregateSpec{{Name: "d", Fn: AggCountDistinct, Of: compiled(t, "v")}, {Name: "n", Fn: AggCount}}}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h := newWindowHarness(t, kind, t.TempDir(), nil, p)
			rec := func(ms, v int64) runtime.Record {
				return runtime.Record{Key: []byte("a"), Value: fmt.Appendf(nil, `{"v":%d}`, v), Timestamp: time.UnixMilli(ms)}
			}
			// Three sessions [0,100) [150,250) [300,400); t=100 joins the
			// first two, t=240 the result with the third.
			h.process(rec(0, 1), rec(150, 2), rec(300, 1), rec(100, 3), rec(240, 1))
			got := h.wm(399)
			want := []string{`{"key":"a","window_start":"1970-01-01T00:00:00Z","window_end":"1970-01-01T00:00:00.4Z","d":3,"n":5}`}
			if !slices.Equal(got, want) {
				t.Errorf("got %q, want %q", got, want)
			}
			if n, err := state.EntryCount(h.op.backend); err != nil || n != 0 {
				t.Errorf("%d entries left (%v), want 0", n, err)
			}
			h.finish()
		})
	}
}

// TestSlidingWindowSlices: a sliding window of mergeable functions keeps
// one accumulator per key and slice of gcd(size, slide) (10s every 2s: a
// record's slice, not its five windows), registers its windows' timers
// once per slice, computes each window at its end from its slices, gives
// the same results after a checkpoint of the slices is restored, and
// leaves no state once the windows closed.
func TestSlidingWindowSlices(t *testing.T) {
	p := WindowParams{Kind: Sliding, Size: 10 * time.Second, Slide: 2 * time.Second, Time: WindowEventTime,
		Aggregates: []AggregateSpec{{Name: "n", Fn: AggCount}, {Name: "s", Fn: AggSum, Of: compiled(t, "v")}}}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h := newWindowHarness(t, kind, t.TempDir(), nil, p)
			for i := range int64(100) {
				h.process(ev("a", 10*sec+i)) // one slice [10s, 12s)
			}
			if n := h.entries(); n != 6 {
				t.Fatalf("%d entries, want 6 (one slice, five window timers)", n)
			}
			h.process(ev("a", 13*sec)) // the slice [12s, 14s): one more timer
			if n := h.entries(); n != 8 {
				t.Fatalf("%d entries, want 8 (two slices, six window timers)", n)
			}
			snap := t.TempDir()
			handle := snapshotWindowTo(t, h, snap)
			h.finish()
			h = newWindowHarness(t, kind, t.TempDir(), &Restore{Keyed: []state.RestoreHandle{{Handle: handle, Dir: snap}}}, p)
			got := h.wm(1 << 40)
			want := []string{
				`{"key":"a","window_start":"1970-01-01T00:00:02Z","window_end":"1970-01-01T00:00:12Z","n":100,"s":100}`,
				`{"key":"a","window_start":"1970-01-01T00:00:04Z","window_end":"1970-01-01T00:00:14Z","n":101,"s":101}`,
				`{"key":"a","window_start":"1970-01-01T00:00:06Z","window_end":"1970-01-01T00:00:16Z","n":101,"s":101}`,
				`{"key":"a","window_start":"1970-01-01T00:00:08Z","window_end":"1970-01-01T00:00:18Z","n":101,"s":101}`,
				`{"key":"a","window_start":"1970-01-01T00:00:10Z","window_end":"1970-01-01T00:00:20Z","n":101,"s":101}`,
				`{"key":"a","window_start":"1970-01-01T00:00:12Z","window_end":"1970-01-01T00:00:22Z","n":1,"s":1}`,
			}
			if !slices.Equal(got, want) {
				t.Errorf("got\n%q\nwant\n%q", got, want)
			}
			if n := h.entries(); n != 0 {
				t.Errorf("%d entries left, want 0", n)
			}
			h.finish()
		})
	}
}
