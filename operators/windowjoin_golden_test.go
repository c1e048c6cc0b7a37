package operators

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// updateWindowJoinGolden rewrites testdata/windowjoin_golden from the code
// under test. The files were written by main's window_join before its rows
// were appended per record (the list layout: window_join.left and
// window_join.right, one list per key and window rewritten per record), so
// that the test below restores a checkpoint of that layout:
//
//	git archive main | tar -x -C /tmp/main-src
//	cp operators/windowjoin_golden_test.go /tmp/main-src/operators/
//	cd /tmp/main-src && go test ./operators -run TestWindowJoinRestoresListLayout -update-windowjoin-golden \
//	    -windowjoin-golden-dir /path/to/this/operators/testdata/windowjoin_golden
var (
	updateWindowJoinGolden = flag.Bool("update-windowjoin-golden", false, "rewrite testdata/windowjoin_golden (see windowjoin_golden_test.go)")
	windowJoinGoldenDir    = flag.String("windowjoin-golden-dir", "testdata/windowjoin_golden", "where -update-windowjoin-golden writes")
)

// windowJoinGoldenEvent is a record of a side, or (wm > 0) a watermark.
type windowJoinGoldenEvent struct {
	side int
	rec  runtime.Record
	wm   int64
}

// windowJoinGoldenInput is 400 seeded records of both sides over 8 keys,
// times out of order (some late for all their windows), some in text
// format, a watermark 3 s behind the largest time every 10 records.
func windowJoinGoldenInput() []windowJoinGoldenEvent {
	rng := rand.New(rand.NewPCG(37, 23))
	var out []windowJoinGoldenEvent
	maxTS := int64(0)
	for i := range 400 {
		ts := int64(100_000 + i*150 + rng.IntN(8_000) - 4_000)
		maxTS = max(maxTS, ts)
		rec := runtime.Record{Key: fmt.Appendf(nil, "k%d", rng.IntN(8)), Value: fmt.Appendf(nil, `{"id":%d,"v":%d}`, i, rng.IntN(100)), Timestamp: time.UnixMilli(ts)}
		if rng.IntN(10) == 0 {
			rec.Value, rec.Format = fmt.Appendf(nil, "text %d", i), runtime.FormatText
		}
		out = append(out, windowJoinGoldenEvent{side: rng.IntN(2), rec: rec})
		if i%10 == 9 {
			out = append(out, windowJoinGoldenEvent{wm: maxTS - 3_000})
		}
	}
	return append(out, windowJoinGoldenEvent{wm: maxTS + 20_000})
}

// windowJoinGoldenLines renders outputs as "key ts value" lines and late
// records as "late key value" lines.
func windowJoinGoldenLines(out, late []runtime.Record) string {
	var b strings.Builder
	for _, r := range out {
		fmt.Fprintf(&b, "%s %d %s\n", r.Key, r.Timestamp.UnixMilli(), r.Value)
	}
	for _, r := range late {
		fmt.Fprintf(&b, "late %s %s\n", r.Key, r.Value)
	}
	return b.String()
}

// windowJoinGoldenShapes are the joins of TestWindowJoinRestoresListLayout.
func windowJoinGoldenShapes(t *testing.T) []struct {
	name string
	p    WindowJoinParams
} {
	return []struct {
		name string
		p    WindowJoinParams
	}{
		{"tumbling-inner", WindowJoinParams{Kind: Tumbling, Size: 10 * time.Second, Join: JoinInner}},
		{"sliding-full", WindowJoinParams{Kind: Sliding, Size: 10 * time.Second, Slide: 4 * time.Second, Offset: time.Second, Join: JoinFullOuter,
			Select: compiled(t, `{"l": left, "r": right, "w": window_start}`)}},
	}
}

// TestWindowJoinRestoresListLayout: the window join (tumbling inner, and
// sliding full outer with an offset and a select) gives exactly the
// output main's window join gave (testdata/windowjoin_golden, written by
// main's code in the list layout, see updateWindowJoinGolden) on 400
// seeded records with watermarks (some late), on both backends: straight through; and
// restored in the middle from the checkpoint main's join took there (the
// list layout, moved to the appended layout at Open) and run on to the
// end, with as many rows buffered after the restore as main's join held
// and no state left at the end; and that checkpoint restored rescaled
// into two subtasks by key group, whose outputs together are main's
// second half.
func TestWindowJoinRestoresListLayout(t *testing.T) {
	events := windowJoinGoldenInput()
	half := len(events) / 2
	for events[half-1].wm == 0 { // the snapshot right after a watermark
		half++
	}
	run := func(hs []*joinHarness, from, to int) string {
		var out, late []runtime.Record
		for _, e := range events[from:to] {
			if e.wm > 0 {
				for _, h := range hs {
					h.wm(e.wm)
				}
				continue
			}
			h := hs[0]
			if len(hs) > 1 {
				h = hs[keygroup.SubtaskForKey(e.rec.Key, testMaxP, len(hs))]
			}
			h.send(e.side, e.rec)
		}
		for _, h := range hs {
			out = append(out, h.emitted()...)
			late = append(late, h.lateRecords()...)
		}
		return windowJoinGoldenLines(out, late)
	}
	sortedLines := func(s string) []string { return slices.Sorted(slices.Values(strings.Split(s, "\n"))) }
	for _, shape := range windowJoinGoldenShapes(t) {
		for _, kind := range backends {
			t.Run(shape.name+"/"+kind, func(t *testing.T) {
				dir := filepath.Join(*windowJoinGoldenDir, shape.name, kind)
				h, j := newWindowJoinHarness(t, kind, t.TempDir(), nil, shape.p)
				first := run([]*joinHarness{h}, 0, half)
				rowsAtHalf := j.BufferedRows()
				snapDir := t.TempDir()
				if *updateWindowJoinGolden {
					snapDir = filepath.Join(dir, "checkpoint")
					if err := os.RemoveAll(snapDir); err != nil {
						t.Fatal(err)
					}
				}
				handle := snapshotHarnessTo(t, h.harness, snapDir)
				second := run([]*joinHarness{h}, half, len(events))
				if n := h.entries(); n != 0 || j.BufferedRows() != 0 {
					t.Fatalf("straight: %d state entries, %d rows left after every window ended", n, j.BufferedRows())
				}
				h.finish()
				if *updateWindowJoinGolden {
					for name, s := range map[string]string{"first.txt": first, "second.txt": second, "rows.txt": fmt.Sprint(rowsAtHalf)} {
						if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
							t.Fatal(err)
						}
					}
					if err := os.WriteFile(filepath.Join(dir, "handle.json"), handle, 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				read := func(name string) string {
					b, err := os.ReadFile(filepath.Join(dir, name))
					if err != nil {
						t.Fatal(err)
					}
					return string(b)
				}
				for name, got := range map[string]string{"first.txt": first, "second.txt": second, "rows.txt": fmt.Sprint(rowsAtHalf)} {
					if want := read(name); got != want {
						t.Fatalf("straight, %s differs from main's:\n%s", name, firstDiff(strings.Split(got, "\n"), strings.Split(want, "\n")))
					}
				}
				if strings.Count(second, "\n") < 100 || shape.p.Kind == Tumbling && !strings.Contains(first, "late ") {
					t.Fatalf("the input gives %d outputs after the half, late records %v: the test wants more", strings.Count(second, "\n"), strings.Contains(first, "late "))
				}
				lastWM := events[half-1].wm
				mainHandle := []byte(read("handle.json"))

				// Restored from main's checkpoint at the half.
				r := &Restore{Keyed: []state.RestoreHandle{{Handle: mainHandle, Dir: copyTree(t, filepath.Join(dir, "checkpoint"))}}}
				h, j = newWindowJoinHarness(t, kind, t.TempDir(), r, shape.p)
				if got, want := fmt.Sprint(j.BufferedRows()), read("rows.txt"); got != want || got == "0" {
					t.Fatalf("restored %s rows, main's join held %s", got, want)
				}
				h.wm(lastWM)
				if got, want := run([]*joinHarness{h}, half, len(events)), read("second.txt"); got != want {
					t.Fatalf("restored from main's checkpoint, the second half differs:\n%s", firstDiff(strings.Split(got, "\n"), strings.Split(want, "\n")))
				}
				if n := h.entries(); n != 0 || j.BufferedRows() != 0 {
					t.Fatalf("restored: %d state entries, %d rows left after every window ended", n, j.BufferedRows())
				}
				h.finish()

				// Restored rescaled: two subtasks, half the key groups each.
				var hs []*joinHarness
				rows := int64(0)
				for i, kgs := range []keygroup.Range{{Start: 0, End: testMaxP/2 - 1}, {Start: testMaxP / 2, End: testMaxP - 1}} {
					r := &Restore{Keyed: []state.RestoreHandle{{Handle: mainHandle, Dir: copyTree(t, filepath.Join(dir, "checkpoint"))}}}
					h, j := newWindowJoinHarnessRange(t, kind, t.TempDir(), kgs, i, r, shape.p)
					h.wm(lastWM)
					rows += j.BufferedRows()
					hs = append(hs, h)
				}
				if got, want := fmt.Sprint(rows), read("rows.txt"); got != want {
					t.Fatalf("restored rescaled: %s rows, main's join held %s", got, want)
				}
				got := run(hs, half, len(events))
				if g, w := sortedLines(got), sortedLines(read("second.txt")); !slices.Equal(g, w) {
					t.Fatalf("restored rescaled, the second half differs (sorted):\n%s", firstDiff(g, w))
				}
				for _, h := range hs {
					if n := h.entries(); n != 0 {
						t.Fatalf("restored rescaled: %d state entries left", n)
					}
					h.finish()
				}
			})
		}
	}
}

// newWindowJoinHarnessRange is newWindowJoinHarness of subtask i of 2,
// owning the key groups kgs.
func newWindowJoinHarnessRange(t *testing.T, kind, dir string, kgs keygroup.Range, i int, restore *Restore, p WindowJoinParams) (*joinHarness, *WindowJoin) {
	t.Helper()
	h := &joinHarness{harness: &harness{t: t, mb: runtime.NewMailbox(), ch: runtime.NewChannel(1 << 16), ctx: context.Background()},
		late: runtime.NewChannel(1 << 12)}
	j := NewWindowJoin(p)
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{h.ch}, runtime.ForwardPartitioner{}))
	out.AddSideWriter(LateOutput, runtime.NewWriter([]runtime.Channel{h.late}, runtime.ForwardPartitioner{}))
	open := func(restore []state.RestoreHandle) (state.KeyedStateBackend, error) {
		cfg := state.BackendConfig{Kind: kind, MaxParallelism: testMaxP, KeyGroupRange: kgs}
		if kind == state.KindPebble {
			cfg.Dir = dir
		}
		return state.OpenBackendRestored(cfg, restore)
	}
	h.op = NewKeyedCoProcessOperator(OpenContext{Operator: "wj", Subtask: i, Parallelism: 2}, open, restore, j, out)
	h.op.SetMailbox(h.mb)
	if err := h.op.Open(h.ctx); err != nil {
		t.Fatal(err)
	}
	return h, j
}

// TestWindowRowsSerializer: rows (JSON, text, empty and nil values) round
// trip, the encoding of two lists concatenated is the concatenation of
// theirs (what AppendValue relies on), and malformed bytes are refused.
func TestWindowRowsSerializer(t *testing.T) {
	a := []joinRow{{Value: []byte(`{"a":1}`)}, {Value: []byte("text"), Text: true}}
	b := []joinRow{{Value: []byte{}}, {Value: nil}, {Value: []byte(`2`)}}
	var s windowRowsSerializer
	ea, _ := s.Append(nil, a)
	eb, _ := s.Append(nil, b)
	eab, _ := s.Append(nil, append(slices.Clone(a), b...))
	if string(append(slices.Clone(ea), eb...)) != string(eab) {
		t.Fatalf("Append(a+b) = %q, want Append(a)+Append(b) %q", eab, append(ea, eb...))
	}
	got, err := s.Decode(eab)
	if err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(a), b...)
	if len(got) != len(want) {
		t.Fatalf("decoded %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if string(got[i].Value) != string(want[i].Value) || (got[i].Value == nil) != (want[i].Value == nil) || got[i].Text != want[i].Text {
			t.Fatalf("row %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if rows, err := s.Decode(nil); err != nil || len(rows) != 0 {
		t.Fatalf("Decode(empty) = %v, %v; want no rows", rows, err)
	}
	for _, bad := range [][]byte{{0}, {0, 5, 'x'}, {16, 0}, {12, 0}, {8, 1, 'x'}, {0, 0x80}} {
		if _, err := s.Decode(bad); err == nil {
			t.Errorf("Decode(%v): no error", bad)
		}
	}
}

// countingWindowRows is windowRowsSerializer counting the values it
// decodes.
type countingWindowRows struct {
	windowRowsSerializer
	values *int
}

func (c countingWindowRows) Decode(b []byte) ([]joinRow, error) {
	*c.values++
	return c.windowRowsSerializer.Decode(b)
}

// TestWindowJoinAppendsWithoutReading: buffering 2,000 left and 20 right
// records of one key in one tumbling window reads (decodes) no stored rows
// (each record appends its row); the window's timer reads each side once
// and emits the 40,000 pairs, left rows then right rows in arrival order;
// no state is left; on both backends. The list layout before it read and
// rewrote the window's list per record.
func TestWindowJoinAppendsWithoutReading(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			values := 0
			p := WindowJoinParams{Kind: Tumbling, Size: 10 * time.Second, Join: JoinLeftOuter, Select: compiled(t, `[left.id, right.id]`)}
			h := &joinHarness{harness: &harness{t: t, mb: runtime.NewMailbox(), ch: runtime.NewChannel(1 << 16), ctx: context.Background()},
				late: runtime.NewChannel(16)}
			j := NewWindowJoin(p)
			j.rowSer = countingWindowRows{values: &values}
			out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{h.ch}, runtime.ForwardPartitioner{}))
			out.AddSideWriter(LateOutput, runtime.NewWriter([]runtime.Channel{h.late}, runtime.ForwardPartitioner{}))
			h.op = NewKeyedCoProcessOperator(OpenContext{Operator: "wj", Parallelism: 1}, opener(backend, t.TempDir()), nil, j, out)
			h.op.SetMailbox(h.mb)
			if err := h.op.Open(h.ctx); err != nil {
				t.Fatal(err)
			}
			rec := func(id int) runtime.Record {
				return runtime.Record{Key: []byte("hot"), Value: fmt.Appendf(nil, `{"id":%d}`, id), Timestamp: time.UnixMilli(int64(1000 + id%9000))}
			}
			for i := range 2000 {
				h.send(0, rec(i))
				if i%100 == 0 {
					h.send(1, rec(i))
				}
			}
			if values != 0 || j.BufferedRows() != 2020 {
				t.Fatalf("buffering 2,020 rows decoded %d stored values; %d rows counted", values, j.BufferedRows())
			}
			h.wm(10_000)
			if values != 2 {
				t.Errorf("the window's timer decoded %d values, want 2 (each side's rows once)", values)
			}
			got := h.emitted()
			if len(got) != 2000*20 {
				t.Fatalf("%d rows emitted, want 40000", len(got))
			}
			for _, i := range []int{0, 1, 19, 20, 39_999} {
				if want := fmt.Sprintf("[%d,%d]", i/20, i%20*100); string(got[i].Value) != want {
					t.Fatalf("row %d = %s, want %s (left then right in arrival order)", i, got[i].Value, want)
				}
			}
			if n := h.entries(); n != 0 || j.BufferedRows() != 0 {
				t.Errorf("%d entries, %d rows left", n, j.BufferedRows())
			}
			h.finish()
		})
	}
}
