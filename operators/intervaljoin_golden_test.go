package operators

import (
	"context"
	"flag"
	"fmt"
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

// updateIntervalJoinGolden rewrites testdata/intervaljoin_golden from the
// code under test. The files were written by main's interval_join at
// a62e0e9, before both sides of a key shared one entry (the per-side
// layout: interval_join.left and interval_join.right, one list per key and
// side, and the by-time map states of a spilled side), so that the test
// below restores a checkpoint of that layout:
//
//	git worktree add /tmp/main-src a62e0e9
//	cp operators/intervaljoin_golden_test.go /tmp/main-src/operators/
//	cd /tmp/main-src && go test ./operators -run TestIntervalJoinRestoresPerSideLayout -update-intervaljoin-golden \
//	    -intervaljoin-golden-dir /path/to/this/operators/testdata/intervaljoin_golden
//
// testdata/intervaljoin_golden_sides is the same test's files written by
// main's interval_join at 3913bda, whose IntervalJoinRowsState value was
// a key's two lists (joinSides) rather than intervalKeyRows (the same
// bytes, interval-join-sides-v1), restored by
// TestIntervalJoinRestoresSidesLayout:
//
//	git worktree add /tmp/main-src 3913bda
//	cp operators/intervaljoin_golden_test.go /tmp/main-src/operators/
//	cd /tmp/main-src && go test ./operators -run TestIntervalJoinRestoresSidesLayout -update-intervaljoin-golden \
//	    -intervaljoin-sides-golden-dir /path/to/this/operators/testdata/intervaljoin_golden_sides
var (
	updateIntervalJoinGolden   = flag.Bool("update-intervaljoin-golden", false, "rewrite testdata/intervaljoin_golden or _sides (see intervaljoin_golden_test.go)")
	intervalJoinGoldenDir      = flag.String("intervaljoin-golden-dir", "testdata/intervaljoin_golden", "where -update-intervaljoin-golden writes TestIntervalJoinRestoresPerSideLayout's files")
	intervalJoinSidesGoldenDir = flag.String("intervaljoin-sides-golden-dir", "testdata/intervaljoin_golden_sides", "where -update-intervaljoin-golden writes TestIntervalJoinRestoresSidesLayout's files")
)

// intervalJoinGoldenSpill is the spill limit of the golden joins: low, so
// that the checkpoint holds keys whose side is in the list and keys whose
// side is by time.
const intervalJoinGoldenSpill = 2

// intervalJoinGoldenShapes are the joins of
// TestIntervalJoinRestoresPerSideLayout.
func intervalJoinGoldenShapes(t *testing.T) []struct {
	name string
	p    IntervalJoinParams
} {
	return []struct {
		name string
		p    IntervalJoinParams
	}{
		{"inner", IntervalJoinParams{Lower: -5 * time.Second, Upper: 10 * time.Second, Join: JoinInner}},
		{"full-select", IntervalJoinParams{Lower: -5 * time.Second, Upper: 10 * time.Second, Join: JoinFullOuter,
			Select: compiled(t, `{"l": left == null ? null : left.id, "r": right == null ? null : right.id}`)}},
	}
}

// newIntervalJoinHarnessRange is newJoinHarness of an interval join with
// spill limit intervalJoinGoldenSpill, subtask i of n owning the key
// groups kgs.
func newIntervalJoinHarnessRange(t *testing.T, kind, dir string, kgs keygroup.Range, i, n int, restore *Restore, p IntervalJoinParams) *joinHarness {
	t.Helper()
	j := NewIntervalJoin(p)
	j.spillRows = intervalJoinGoldenSpill
	h := &joinHarness{harness: &harness{t: t, mb: runtime.NewMailbox(), ch: runtime.NewChannel(1 << 16), ctx: context.Background()},
		late: runtime.NewChannel(1 << 12), j: j}
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{h.ch}, runtime.ForwardPartitioner{}))
	out.AddSideWriter(LateOutput, runtime.NewWriter([]runtime.Channel{h.late}, runtime.ForwardPartitioner{}))
	open := func(restore []state.RestoreHandle) (state.KeyedStateBackend, error) {
		cfg := state.BackendConfig{Kind: kind, MaxParallelism: testMaxP, KeyGroupRange: kgs}
		if kind == state.KindPebble {
			cfg.Dir = dir
		}
		return state.OpenBackendRestored(cfg, restore)
	}
	h.op = NewKeyedCoProcessOperator(OpenContext{Operator: "j", Subtask: i, Parallelism: n}, open, restore, j, out)
	h.op.SetMailbox(h.mb)
	if err := h.op.Open(h.ctx); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestIntervalJoinRestoresPerSideLayout: the interval join (inner, and full
// outer with a select), spill limit 2, gives exactly the output main's
// interval join gave (testdata/intervaljoin_golden, written by main's code
// in the per-side layout, see updateIntervalJoinGolden) on
// TestIntervalJoinModel's 600 records with watermarks (some late), on both
// backends: straight through; restored in the middle from the checkpoint
// main's join took there (lists and by-time rows of each side, moved into
// one entry per key at Open) and run on to the end, with as many rows
// buffered after the restore as main's join held, some key sides by time,
// and no state left at the end; and that checkpoint restored rescaled into
// two subtasks by key group, whose outputs together are main's second
// half.
func TestIntervalJoinRestoresPerSideLayout(t *testing.T) {
	testIntervalJoinRestoresGolden(t, *intervalJoinGoldenDir)
}

// TestIntervalJoinRestoresSidesLayout is TestIntervalJoinRestoresPerSideLayout
// on the checkpoints of main's interval join at 3913bda
// (testdata/intervaljoin_golden_sides): the layout of a key's two lists in
// one entry (interval-join-sides-v1), read back into intervalKeyRows,
// straight, restored and restored rescaled, on both backends.
func TestIntervalJoinRestoresSidesLayout(t *testing.T) {
	testIntervalJoinRestoresGolden(t, *intervalJoinSidesGoldenDir)
}

// testIntervalJoinRestoresGolden is the restore tests' body over the
// golden files in goldenDir (or writing them there, with
// -update-intervaljoin-golden).
func testIntervalJoinRestoresGolden(t *testing.T, goldenDir string) {
	events, maxTS := intervalJoinEvents()
	half := len(events) / 2
	for events[half-1].wm == 0 { // the snapshot right after a watermark
		half++
	}
	lines := func(out, late []runtime.Record) string {
		var b strings.Builder
		for _, r := range out {
			fmt.Fprintf(&b, "%s %d %s\n", r.Key, r.Timestamp.UnixMilli(), r.Value)
		}
		for _, r := range late {
			fmt.Fprintf(&b, "late %s %d %s\n", r.Key, r.Timestamp.UnixMilli(), r.Value)
		}
		return b.String()
	}
	run := func(hs []*joinHarness, from, to int, end int64) string {
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
				h = hs[keygroup.SubtaskForKey([]byte(e.key), testMaxP, len(hs))]
			}
			h.send(e.side, runtime.Record{Key: []byte(e.key), Value: []byte(e.value()), Timestamp: time.UnixMilli(e.ts)})
		}
		for _, h := range hs {
			if end > 0 {
				h.wm(end)
			}
			out = append(out, h.emitted()...)
			late = append(late, h.lateRecords()...)
		}
		return lines(out, late)
	}
	sortedLines := func(s string) []string { return slices.Sorted(slices.Values(strings.Split(s, "\n"))) }
	all := keygroup.Range{Start: 0, End: testMaxP - 1}
	for _, shape := range intervalJoinGoldenShapes(t) {
		end := maxTS + shape.p.Upper.Milliseconds() - shape.p.Lower.Milliseconds() + 1
		for _, kind := range backends {
			t.Run(shape.name+"/"+kind, func(t *testing.T) {
				dir := filepath.Join(goldenDir, shape.name, kind)
				h := newIntervalJoinHarnessRange(t, kind, t.TempDir(), all, 0, 1, nil, shape.p)
				first := run([]*joinHarness{h}, 0, half, 0)
				rowsAtHalf := h.j.BufferedRows()
				snapDir := t.TempDir()
				if *updateIntervalJoinGolden {
					snapDir = filepath.Join(dir, "checkpoint")
					if err := os.RemoveAll(snapDir); err != nil {
						t.Fatal(err)
					}
				}
				handle := snapshotHarnessTo(t, h.harness, snapDir)
				second := run([]*joinHarness{h}, half, len(events), end)
				if n := h.entries(); n != 0 || h.j.BufferedRows() != 0 {
					t.Fatalf("straight: %d state entries, %d rows left after every interval ended", n, h.j.BufferedRows())
				}
				h.finish()
				if *updateIntervalJoinGolden {
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
				if strings.Count(second, "\n") < 100 || !strings.Contains(first, "late ") {
					t.Fatalf("the input gives %d outputs after the half, late records %v: the test wants more", strings.Count(second, "\n"), strings.Contains(first, "late "))
				}
				lastWM := events[half-1].wm
				mainHandle := []byte(read("handle.json"))

				// Restored from main's checkpoint at the half.
				r := &Restore{Keyed: []state.RestoreHandle{{Handle: mainHandle, Dir: copyTree(t, filepath.Join(dir, "checkpoint"))}}}
				h = newIntervalJoinHarnessRange(t, kind, t.TempDir(), all, 0, 1, r, shape.p)
				if got, want := fmt.Sprint(h.j.BufferedRows()), read("rows.txt"); got != want || got == "0" {
					t.Fatalf("restored %s rows, main's join held %s", got, want)
				}
				if n := byTimeKeys(t, h); n == 0 {
					t.Fatal("no key side of main's checkpoint is by time: the test wants some")
				}
				if n := oldLayoutKeys(t, h); n != 0 {
					t.Fatalf("%d key sides left in the per-side lists after Open, want 0", n)
				}
				h.wm(lastWM)
				if got, want := run([]*joinHarness{h}, half, len(events), end), read("second.txt"); got != want {
					t.Fatalf("restored from main's checkpoint, the second half differs:\n%s", firstDiff(strings.Split(got, "\n"), strings.Split(want, "\n")))
				}
				if n := h.entries(); n != 0 || h.j.BufferedRows() != 0 {
					t.Fatalf("restored: %d state entries, %d rows left after every interval ended", n, h.j.BufferedRows())
				}
				h.finish()

				// Restored rescaled: two subtasks, half the key groups each.
				var hs []*joinHarness
				rows := int64(0)
				for i, kgs := range []keygroup.Range{{Start: 0, End: testMaxP/2 - 1}, {Start: testMaxP / 2, End: testMaxP - 1}} {
					r := &Restore{Keyed: []state.RestoreHandle{{Handle: mainHandle, Dir: copyTree(t, filepath.Join(dir, "checkpoint"))}}}
					h := newIntervalJoinHarnessRange(t, kind, t.TempDir(), kgs, i, 2, r, shape.p)
					h.wm(lastWM)
					rows += h.j.BufferedRows()
					hs = append(hs, h)
				}
				if got, want := fmt.Sprint(rows), read("rows.txt"); got != want {
					t.Fatalf("restored rescaled: %s rows, main's join held %s", got, want)
				}
				got := run(hs, half, len(events), end)
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

// oldLayoutKeys counts the keys and sides holding rows in the per-side
// lists of before IntervalJoinRowsState in h's backend.
func oldLayoutKeys(t *testing.T, h *joinHarness) int {
	t.Helper()
	n := 0
	for _, name := range []string{IntervalJoinLeftState, IntervalJoinRightState} {
		if !state.HasState(h.op.backend, name) {
			continue
		}
		err := state.ApplyToAllValueKeys(h.op.backend, intervalListState(name), func([]byte, state.ValueState[[]joinRow]) error {
			n++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return n
}
