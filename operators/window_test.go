package operators

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// windowHarness drives a Window on a KeyedOperator: main output on ch,
// the late side output on late.
type windowHarness struct {
	*harness
	late runtime.Channel
}

func newWindowHarness(t *testing.T, kind, dir string, restore *Restore, p WindowParams) *windowHarness {
	t.Helper()
	return newWindowHarnessOf(t, kind, dir, restore, NewWindow(p), true)
}

// newWindowHarnessOf drives w; lateSink says whether a vertex reads the
// late side output (h.late), as a sink reading "w.late" would.
func newWindowHarnessOf(t *testing.T, kind, dir string, restore *Restore, w *Window, lateSink bool) *windowHarness {
	t.Helper()
	h := &windowHarness{harness: &harness{t: t, mb: runtime.NewMailbox(), ch: runtime.NewChannel(1024), ctx: context.Background()}, late: runtime.NewChannel(64)}
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{h.ch}, runtime.ForwardPartitioner{}))
	if lateSink {
		out.AddSideWriter(LateOutput, runtime.NewWriter([]runtime.Channel{h.late}, runtime.ForwardPartitioner{}))
	}
	h.op = NewKeyedProcessOperator(OpenContext{Operator: "w", Parallelism: 1}, opener(kind, dir), restore, w, out)
	h.op.SetMailbox(h.mb)
	if err := h.op.Open(h.ctx); err != nil {
		t.Fatal(err)
	}
	return h
}

// wm advances the watermark to ms and returns what was emitted.
func (h *windowHarness) wm(ms int64) []string {
	h.t.Helper()
	if err := h.op.ProcessWatermark(h.ctx, time.UnixMilli(ms)); err != nil {
		h.t.Fatal(err)
	}
	return values(h.emitted())
}

func (h *windowHarness) lateValues() []string {
	var out []string
	for {
		select {
		case el := <-h.late:
			out = append(out, string(el.Record.Value))
		default:
			return out
		}
	}
}

func (h *windowHarness) entries() int {
	h.t.Helper()
	n, err := state.EntryCount(h.op.backend)
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

func ev(key string, ms int64) runtime.Record {
	return runtime.Record{Key: []byte(key), Value: []byte(`{"u":"` + key + `","v":1}`), Timestamp: time.UnixMilli(ms)}
}

const sec = 1000

// TestTumblingWindow: 10s windows count records per key; each closes when
// the watermark reaches its end-1ms, not before; a snapshot in between is
// restored; after the last watermark no entry is left (windows nor timers).
func TestTumblingWindow(t *testing.T) {
	p := WindowParams{Kind: Tumbling, Size: 10 * time.Second, Time: WindowEventTime, Aggregates: []AggregateSpec{{Name: "n", Fn: AggCount}}}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h := newWindowHarness(t, kind, t.TempDir(), nil, p)
			h.process(ev("a", 1*sec), ev("b", 2*sec), ev("a", 9*sec), ev("a", 12*sec), ev("b", 19_999), ev("b", 25*sec))
			if got := h.wm(9_998); len(got) != 0 {
				t.Fatalf("watermark 9998 closed %q", got)
			}
			want := []string{
				`{"key":"a","window_start":"1970-01-01T00:00:00Z","window_end":"1970-01-01T00:00:10Z","n":2}`,
				`{"key":"b","window_start":"1970-01-01T00:00:00Z","window_end":"1970-01-01T00:00:10Z","n":1}`,
			}
			if got := h.wm(9_999); !reflect.DeepEqual(got, want) {
				t.Fatalf("watermark 9999:\n%q\nwant\n%q", got, want)
			}
			r := snapshotRestore(t, h.harness)
			h = newWindowHarness(t, kind, t.TempDir(), r, p)
			want = []string{
				`{"key":"a","window_start":"1970-01-01T00:00:10Z","window_end":"1970-01-01T00:00:20Z","n":1}`,
				`{"key":"b","window_start":"1970-01-01T00:00:10Z","window_end":"1970-01-01T00:00:20Z","n":1}`,
			}
			if got := h.wm(20_000); !reflect.DeepEqual(got, want) {
				t.Fatalf("restored, watermark 20000:\n%q\nwant\n%q", got, want)
			}
			if n := h.entries(); n != 2 { // b's [20, 30) window and its timer
				t.Fatalf("%d entries before the last window closed, want 2", n)
			}
			h.wm(40_000)
			if n := h.entries(); n != 0 {
				t.Fatalf("%d entries after every window closed, want 0", n)
			}
			h.finish()
		})
	}
}

// TestSessionWindowLateness: sessions with a 5s gap over interleaved keys,
// allowed lateness 3s: exact sessions and counts; a record within the
// lateness updates its fired session (a second result), one beyond it goes
// to the late side output unchanged; no entry is left at the end.
func TestSessionWindowLateness(t *testing.T) {
	p := WindowParams{Kind: Session, Gap: 5 * time.Second, Time: WindowEventTime, AllowedLateness: 3 * time.Second,
		Aggregates: []AggregateSpec{{Name: "n", Fn: AggCount}}}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h := newWindowHarness(t, kind, t.TempDir(), nil, p)
			// a: 0, 2, 4 -> [0, 9); 20 -> [20, 25). b: 1, 5 (5 < 1+5: merged) -> [1, 10).
			h.process(ev("a", 0), ev("b", 1*sec), ev("a", 2*sec), ev("a", 4*sec), ev("b", 5*sec), ev("a", 20*sec))
			want := []string{`{"key":"a","window_start":"1970-01-01T00:00:00Z","window_end":"1970-01-01T00:00:09Z","n":3}`}
			if got := h.wm(9 * sec); !reflect.DeepEqual(got, want) {
				t.Fatalf("watermark 9s:\n%q\nwant\n%q", got, want)
			}
			// Within a's lateness (8.999 + 3 > 9): the session updates.
			h.process(ev("a", 3*sec))
			want = []string{`{"key":"a","window_start":"1970-01-01T00:00:00Z","window_end":"1970-01-01T00:00:09Z","n":4}`}
			if got := values(h.emitted()); !reflect.DeepEqual(got, want) {
				t.Fatalf("late record within the lateness:\n%q\nwant\n%q", got, want)
			}
			want = []string{`{"key":"b","window_start":"1970-01-01T00:00:01Z","window_end":"1970-01-01T00:00:10Z","n":2}`}
			if got := h.wm(12 * sec); !reflect.DeepEqual(got, want) {
				t.Fatalf("watermark 12s:\n%q\nwant\n%q", got, want)
			}
			// Beyond a's lateness (8.999 + 3 <= 12): to the side output.
			late := ev("a", 1*sec)
			h.process(late)
			if got := values(h.emitted()); len(got) != 0 {
				t.Fatalf("a record beyond the lateness emitted %q", got)
			}
			if got := h.lateValues(); !reflect.DeepEqual(got, []string{string(late.Value)}) {
				t.Fatalf("late side output %q, want the record", got)
			}
			want = []string{`{"key":"a","window_start":"1970-01-01T00:00:20Z","window_end":"1970-01-01T00:00:25Z","n":1}`}
			if got := h.wm(30 * sec); !reflect.DeepEqual(got, want) {
				t.Fatalf("watermark 30s:\n%q\nwant\n%q", got, want)
			}
			if n := h.entries(); n != 0 {
				t.Fatalf("%d entries after every session closed, want 0", n)
			}
			h.finish()
		})
	}
}

// TestSessionWindowsTouchingMerge: a record exactly gap after the last
// one of its key joins that session, as in Flink (TimeWindow.intersects is
// inclusive: [0, 5s) and [5s, 10s) intersect), and a record whose session
// touches two sessions merges all three; one gap + 1ms later opens a new
// session.
func TestSessionWindowsTouchingMerge(t *testing.T) {
	p := WindowParams{Kind: Session, Gap: 5 * time.Second, Time: WindowEventTime,
		Aggregates: []AggregateSpec{{Name: "n", Fn: AggCount}}}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h := newWindowHarness(t, kind, t.TempDir(), nil, p)
			// a: 0 -> [0, 5); 5s touches it -> [0, 10). b: 0 and 10s are
			// separate ([0, 5), [10, 15)) until 5s touches both -> [0, 15).
			// c: 0 and 5.001s stay apart.
			h.process(ev("a", 0), ev("a", 5*sec), ev("b", 0), ev("b", 10*sec), ev("b", 5*sec), ev("c", 0), ev("c", 5*sec+1))
			want := []string{
				`{"key":"a","window_start":"1970-01-01T00:00:00Z","window_end":"1970-01-01T00:00:10Z","n":2}`,
				`{"key":"b","window_start":"1970-01-01T00:00:00Z","window_end":"1970-01-01T00:00:15Z","n":3}`,
				`{"key":"c","window_start":"1970-01-01T00:00:00Z","window_end":"1970-01-01T00:00:05Z","n":1}`,
				`{"key":"c","window_start":"1970-01-01T00:00:05.001Z","window_end":"1970-01-01T00:00:10.001Z","n":1}`,
			}
			got := h.wm(20 * sec)
			slices.Sort(got)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("sessions:\n%q\nwant\n%q", got, want)
			}
			if n := h.entries(); n != 0 {
				t.Fatalf("%d entries after every session closed, want 0", n)
			}
			h.finish()
		})
	}
}

// TestSlidingWindow: 10s windows every 5s: a record is in two windows.
func TestSlidingWindow(t *testing.T) {
	p := WindowParams{Kind: Sliding, Size: 10 * time.Second, Slide: 5 * time.Second, Time: WindowEventTime,
		Aggregates: []AggregateSpec{{Name: "n", Fn: AggCount}, {Name: "sum", Fn: AggSum, Of: compiled(t, "v")}}}
	h := newWindowHarness(t, state.KindHashmap, "", nil, p)
	h.process(ev("a", 3*sec), ev("a", 7*sec))
	want := []string{
		`{"key":"a","window_start":"1969-12-31T23:59:55Z","window_end":"1970-01-01T00:00:05Z","n":1,"sum":1}`,
		`{"key":"a","window_start":"1970-01-01T00:00:00Z","window_end":"1970-01-01T00:00:10Z","n":2,"sum":2}`,
		`{"key":"a","window_start":"1970-01-01T00:00:05Z","window_end":"1970-01-01T00:00:15Z","n":1,"sum":1}`,
	}
	if got := h.wm(20 * sec); !reflect.DeepEqual(got, want) {
		t.Fatalf("sliding:\n%q\nwant\n%q", got, want)
	}
	if n := h.entries(); n != 0 {
		t.Fatalf("%d entries left", n)
	}
	h.finish()
}
