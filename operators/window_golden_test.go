package operators

import (
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// updateWindowGolden rewrites testdata/window_golden from the code under
// test. The files were written by main's window operator before the
// accumulators became a slice per window (the map layout), so that the
// test below compares today's operator with that one:
//
//	git archive main | tar -x -C /tmp/main-src
//	cp operators/window_golden_test.go /tmp/main-src/operators/
//	cd /tmp/main-src && go test ./operators -run TestWindowGolden -update-window-golden \
//	    -window-golden-dir /path/to/this/operators/testdata/window_golden
var (
	updateWindowGolden = flag.Bool("update-window-golden", false, "rewrite testdata/window_golden (see window_golden_test.go)")
	windowGoldenDir    = flag.String("window-golden-dir", "testdata/window_golden", "where -update-window-golden writes")
)

// windowGoldenShapes are the window shapes of TestWindowGolden: every kind,
// with and without allowed lateness.
var windowGoldenShapes = []struct {
	name string
	p    WindowParams
	// mergeable: only the functions that merge (count, sum, min, max,
	// avg), so that sliding windows are computed from slices.
	mergeable bool
}{
	{"tumbling", WindowParams{Kind: Tumbling, Size: 100 * time.Millisecond}, false},
	{"tumbling-late", WindowParams{Kind: Tumbling, Size: 100 * time.Millisecond, Offset: 30 * time.Millisecond, AllowedLateness: 50 * time.Millisecond}, false},
	{"sliding-late", WindowParams{Kind: Sliding, Size: 300 * time.Millisecond, Slide: 100 * time.Millisecond, AllowedLateness: 70 * time.Millisecond}, false},
	{"session-late", WindowParams{Kind: Session, Gap: 40 * time.Millisecond, AllowedLateness: 30 * time.Millisecond}, false},
	// Sliced sliding windows: slices of gcd(size, slide) = slide, and of 60
	// ms (size 300, slide 120), with an offset and with and without
	// lateness (70 ms: not a multiple of the slide; 240: two slides).
	{"sliding-merge", WindowParams{Kind: Sliding, Size: 300 * time.Millisecond, Slide: 100 * time.Millisecond}, true},
	{"sliding-merge-gcd-late", WindowParams{Kind: Sliding, Size: 300 * time.Millisecond, Slide: 120 * time.Millisecond, Offset: 50 * time.Millisecond, AllowedLateness: 70 * time.Millisecond}, true},
	{"sliding-merge-late2", WindowParams{Kind: Sliding, Size: 200 * time.Millisecond, Slide: 40 * time.Millisecond, AllowedLateness: 80 * time.Millisecond}, true},
}

// windowGoldenStep is one step of a golden run: the results the watermark
// wm emitted (sorted: the order across keys is not part of the contract)
// or, wm 0, what the records since the last step emitted, in order
// (updates of windows within their lateness) and sent to the late output.
type windowGoldenStep struct {
	WM   int64    `json:"wm,omitempty"`
	Out  []string `json:"out,omitempty"`
	Late []string `json:"late,omitempty"`
}

// windowGoldenInput is the seeded input of a golden run: records out of
// time order (some behind every window), watermarks every 20 records.
type windowGoldenInput struct {
	recs []runtime.Record
	wms  map[int]int64 // after record i, the watermark
}

func newWindowGoldenInput() windowGoldenInput {
	rng := rand.New(rand.NewPCG(25, 3))
	in := windowGoldenInput{wms: map[int]int64{}}
	ts, maxTS, wm := int64(1_000_000), int64(0), int64(0)
	for i := range 2000 {
		ts += rng.Int64N(6)
		at := ts - rng.Int64N(90)*int64(rng.IntN(2))
		if rng.IntN(40) == 0 {
			at -= 400
		}
		key := "k" + strconv.Itoa(rng.IntN(6))
		v := rng.Int64N(2000) - 700
		val := fmt.Sprintf(`{"v":%d,"tag":"t%d"}`, v, rng.IntN(9))
		if rng.IntN(10) == 0 {
			val = fmt.Sprintf(`{"v":%d.5,"tag":"t%d"}`, v, rng.IntN(9)) // a double
		}
		in.recs = append(in.recs, runtime.Record{Key: []byte(key), Value: []byte(val), Timestamp: time.UnixMilli(at)})
		maxTS = max(maxTS, at)
		if i%20 == 19 {
			wm = max(wm, maxTS-rng.Int64N(60))
			in.wms[i] = wm
		}
	}
	return in
}

// windowGoldenAggs are every aggregate function.
func windowGoldenAggs(t *testing.T) []AggregateSpec {
	return []AggregateSpec{{Name: "n", Fn: AggCount}, {Name: "s", Fn: AggSum, Of: compiled(t, "v")},
		{Name: "lo", Fn: AggMin, Of: compiled(t, "v")}, {Name: "hi", Fn: AggMax, Of: compiled(t, "v")},
		{Name: "a", Fn: AggAvg, Of: compiled(t, "v")}, {Name: "f", Fn: AggFirst, Of: compiled(t, "tag")},
		{Name: "l", Fn: AggLast, Of: compiled(t, "v")}, {Name: "d", Fn: AggCountDistinct, Of: compiled(t, "tag")}}
}

// runWindowGolden runs records from..to of in (a watermark first when
// from > 0, as a restored task gets one) and returns the steps.
func runWindowGolden(h *windowHarness, in windowGoldenInput, from, to int, startWM int64) []windowGoldenStep {
	var steps []windowGoldenStep
	flush := func() {
		out, late := values(h.emitted()), h.lateValues()
		if len(out) > 0 || len(late) > 0 {
			steps = append(steps, windowGoldenStep{Out: out, Late: late})
		}
	}
	if startWM > 0 {
		out := h.wm(startWM)
		slices.Sort(out)
		steps = append(steps, windowGoldenStep{WM: startWM, Out: out})
	}
	for i := from; i < to; i++ {
		h.process(in.recs[i])
		if wm, ok := in.wms[i]; ok {
			flush()
			out := h.wm(wm)
			slices.Sort(out)
			steps = append(steps, windowGoldenStep{WM: wm, Out: out})
		}
	}
	flush()
	return steps
}

// TestWindowGolden: the window operator gives exactly the results main's
// gave (the files in testdata/window_golden, written by main's code, see
// updateWindowGolden) on 2,000 seeded records out of time order with every
// aggregate function, for tumbling, sliding and session windows with and
// without allowed lateness, on both backends: straight through, and
// restored in the middle from the checkpoint main's operator took there
// (its keyed state and timers as main wrote them: the window state's
// accumulators by name) and run on to the end. After the end no state is
// left.
func TestWindowGolden(t *testing.T) {
	in := newWindowGoldenInput()
	const half = 1000
	for _, shape := range windowGoldenShapes {
		for _, kind := range backends {
			t.Run(shape.name+"/"+kind, func(t *testing.T) {
				p := shape.p
				p.Time, p.Aggregates = WindowEventTime, windowGoldenAggs(t)
				if shape.mergeable {
					p.Aggregates = p.Aggregates[:5]
				}
				dir := filepath.Join(*windowGoldenDir, shape.name, kind)
				end := int64(1 << 40)

				h := newWindowHarness(t, kind, t.TempDir(), nil, p)
				first := runWindowGolden(h, in, 0, half, 0)
				var midWM int64
				for w := range in.wms {
					if w < half {
						midWM = max(midWM, in.wms[w])
					}
				}
				snapDir := t.TempDir()
				if *updateWindowGolden {
					snapDir = filepath.Join(dir, "checkpoint")
					if err := os.RemoveAll(snapDir); err != nil {
						t.Fatal(err)
					}
				}
				handle := snapshotWindowTo(t, h, snapDir)
				second := runWindowGolden(h, in, half, len(in.recs), 0)
				second = append(second, runWindowGolden(h, in, 0, 0, end)...)
				if n := h.entries(); n != 0 {
					t.Fatalf("%d entries left, want 0", n)
				}
				h.finish()
				if *updateWindowGolden {
					writeJSON(t, filepath.Join(dir, "first.json"), first)
					writeJSON(t, filepath.Join(dir, "second.json"), second)
					if err := os.WriteFile(filepath.Join(dir, "handle.json"), handle, 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				var wantFirst, wantSecond []windowGoldenStep
				readJSON(t, filepath.Join(dir, "first.json"), &wantFirst)
				readJSON(t, filepath.Join(dir, "second.json"), &wantSecond)
				compareGolden(t, "straight, first half", first, wantFirst)
				compareGolden(t, "straight, second half", second, wantSecond)

				// Restored from main's checkpoint at the half.
				handle, err := os.ReadFile(filepath.Join(dir, "handle.json"))
				if err != nil {
					t.Fatal(err)
				}
				ckpt := copyTree(t, filepath.Join(dir, "checkpoint"))
				r := &Restore{Keyed: []state.RestoreHandle{{Handle: handle, Dir: ckpt}}}
				h = newWindowHarness(t, kind, t.TempDir(), r, p)
				// A restored task's first watermark is the one it had:
				// it closes nothing new.
				restored := runWindowGolden(h, in, half, len(in.recs), midWM)
				if len(restored[0].Out) != 0 {
					t.Fatalf("the restored watermark %d emitted %v", midWM, restored[0].Out)
				}
				restored = append(restored[1:], runWindowGolden(h, in, 0, 0, end)...)
				compareGolden(t, "restored from main's checkpoint, second half", restored, wantSecond)
				if n := h.entries(); n != 0 {
					t.Fatalf("restored: %d entries left, want 0", n)
				}
				h.finish()
			})
		}
	}
}

// snapshotWindowTo takes a checkpoint of h into dir and returns its keyed
// handle.
func snapshotWindowTo(t *testing.T, h *windowHarness, dir string) json.RawMessage {
	t.Helper()
	return snapshotHarnessTo(t, h.harness, dir)
}

func compareGolden(t *testing.T, what string, got, want []windowGoldenStep) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) == string(w) {
		return
	}
	for i := range min(len(got), len(want)) {
		if a, b := fmt.Sprint(got[i]), fmt.Sprint(want[i]); a != b {
			t.Fatalf("%s: step %d of %d:\ngot  %s\nwant %s", what, i, len(want), a, b)
		}
	}
	t.Fatalf("%s: %d steps, want %d", what, len(got), len(want))
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// copyTree copies the directory src to a new temporary directory (a
// restore must not change the files in testdata).
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}
