package operators

import (
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

// TestWindowJoinDedupRestoresOldCheckpointRescaled restores the
// checkpoints an older window_join wrote without dedup
// (testdata/windowjoin_golden: 400 seeded records over 8 keys, some text,
// some late, many records of a key and side per window) into two
// subtasks by key group, with dedup switched on (and, in one shape, both
// sides kept without values: select reads no field of either), and runs
// the second half of the input. Its output and late records equal,
// sorted, those of the same join run straight through with dedup from
// the start (a side's first row of a key and window is the same row
// either way: the restored rows are cut to it when the window fires); the
// rows counted after the restore are every row the checkpoint held
// (rows.txt), and none is left, counted or stored, at the end.
func TestWindowJoinDedupRestoresOldCheckpointRescaled(t *testing.T) {
	events := windowJoinGoldenInput()
	half := len(events) / 2
	for events[half-1].wm == 0 {
		half++
	}
	lastWM := events[half-1].wm
	run := func(hs []*joinHarness, from, to int) []string {
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
		return slices.Sorted(slices.Values(strings.Split(windowJoinGoldenLines(out, late), "\n")))
	}
	shapes := windowJoinGoldenShapes(t)
	for _, c := range []struct {
		name  string
		shape int
		dedup WindowJoinDedup
		sel   string
	}{
		{"tumbling-inner", 0, WindowJoinDedupBoth, ""},
		{"tumbling-inner", 0, WindowJoinDedupRight, ""},
		{"sliding-full", 1, WindowJoinDedupRight, ""},
		{"sliding-full", 1, WindowJoinDedupLeft, `{"w": window_start, "e": window_end}`},
	} {
		for _, kind := range backends {
			t.Run(fmt.Sprintf("%s/%s/%s/%v", c.name, c.dedup, kind, c.sel != ""), func(t *testing.T) {
				dir := filepath.Join(*windowJoinGoldenDir, c.name)
				p := shapes[c.shape].p
				p.Dedup = c.dedup
				if c.sel != "" {
					p.Select = compiled(t, c.sel)
				}
				h, _ := newWindowJoinHarness(t, kind, t.TempDir(), nil, p)
				run([]*joinHarness{h}, 0, half)
				want := run([]*joinHarness{h}, half, len(events))
				h.finish()
				if len(want) < 30 {
					t.Fatalf("%d lines after the half: the test wants more", len(want))
				}

				handle := []byte(readFile(t, filepath.Join(dir, kind, "handle.json")))
				var hs []*joinHarness
				var js []*WindowJoin
				rows := int64(0)
				for i, kgs := range []keygroup.Range{{Start: 0, End: testMaxP/2 - 1}, {Start: testMaxP / 2, End: testMaxP - 1}} {
					r := &Restore{Keyed: []state.RestoreHandle{{Handle: handle, Dir: copyTree(t, filepath.Join(dir, kind, "checkpoint"))}}}
					h, j := newWindowJoinHarnessRange(t, kind, t.TempDir(), kgs, i, r, p)
					h.wm(lastWM)
					rows += j.BufferedRows()
					hs, js = append(hs, h), append(js, j)
				}
				if got, w := fmt.Sprint(rows), readFile(t, filepath.Join(dir, kind, "rows.txt")); got != w {
					t.Fatalf("restored rescaled: %s rows, the checkpoint held %s", got, w)
				}
				if got := run(hs, half, len(events)); !slices.Equal(got, want) {
					t.Fatalf("restored rescaled with dedup %s, the second half differs from the straight run (sorted):\n%s", c.dedup, firstDiff(got, want))
				}
				for i, h := range hs {
					if n := h.entries(); n != 0 || js[i].BufferedRows() != 0 {
						t.Fatalf("subtask %d: %d state entries, %d rows counted after every window ended", i, n, js[i].BufferedRows())
					}
					h.finish()
				}
			})
		}
	}
}

// readFile returns the text of the file at path, failing t when it
// cannot be read.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWindowJoinDedupKeepsFirstArrival pins what "first" means for dedup
// in sliding windows (10s, sliding 5s), where one record is in two
// windows: per key and window the side keeps the record that arrived
// first, not the one of the smallest time (Flink's window deduplication
// orders by the time attribute; for a side select reads no field of, as
// Nexmark q8's GROUP BY of the auctions, the two are the same). A record
// is kept in the windows it is first in and dropped from the others; a
// record dropped from every open window is not late; one whose windows
// have all ended is, and goes to the late output.
func TestWindowJoinDedupKeepsFirstArrival(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			p := WindowJoinParams{Kind: Sliding, Size: 10 * time.Second, Slide: 5 * time.Second, Dedup: WindowJoinDedupRight,
				Select: compiled(t, `{"l": left.id, "r": right.id, "w": window_start}`)}
			h, j := newWindowJoinHarness(t, backend, t.TempDir(), nil, p)
			send := func(side, id int, ts int64) {
				h.send(side, runtime.Record{Key: []byte("a"), Value: fmt.Appendf(nil, `{"id":%d}`, id), Timestamp: time.UnixMilli(ts)})
			}
			send(1, 1, 27_000) // first in [20s,30s) and [25s,35s)
			send(1, 2, 23_000) // first in [15s,25s); [20s,30s) holds 1 (later, earlier in time)
			send(1, 3, 32_000) // first in [30s,40s); [25s,35s) holds 1
			send(0, 100, 28_000)
			send(0, 101, 24_000)
			send(0, 102, 31_000)
			if n := j.BufferedRows(); n != 10 {
				t.Fatalf("%d rows buffered, want 10 (6 left, 4 right)", n)
			}
			h.wm(26_000)
			if n := j.BufferedRows(); n != 8 {
				t.Fatalf("%d rows buffered after [15s,25s) ended, want 8", n)
			}
			send(1, 4, 24_000) // [15s,25s) ended, [20s,30s) holds 1: dropped, not late
			send(1, 6, 19_000) // [10s,20s) and [15s,25s) ended: late
			if n := j.BufferedRows(); n != 8 {
				t.Fatalf("%d rows buffered after a duplicate and a late record, want 8", n)
			}
			h.wm(50_000)
			got := joinOutputs(h.emitted())
			want := []string{
				`a 24999 {"l":101,"r":2,"w":"1970-01-01T00:00:15Z"}`,
				`a 29999 {"l":100,"r":1,"w":"1970-01-01T00:00:20Z"}`,
				`a 29999 {"l":101,"r":1,"w":"1970-01-01T00:00:20Z"}`,
				`a 34999 {"l":100,"r":1,"w":"1970-01-01T00:00:25Z"}`,
				`a 34999 {"l":102,"r":1,"w":"1970-01-01T00:00:25Z"}`,
				`a 39999 {"l":102,"r":3,"w":"1970-01-01T00:00:30Z"}`,
			}
			if !slices.Equal(got, want) {
				t.Errorf("outputs %q, want %q", got, want)
			}
			var late []string
			for _, r := range h.lateRecords() {
				late = append(late, string(r.Value))
			}
			if !slices.Equal(late, []string{`{"id":6}`}) {
				t.Errorf("late %q, want only id 6", late)
			}
			if n := h.entries(); n != 0 || j.BufferedRows() != 0 {
				t.Errorf("%d state entries, %d rows counted at the end, want none", n, j.BufferedRows())
			}
			h.finish()
		})
	}
}

// TestWindowJoinDedupOffRestoresRescaled takes a checkpoint half-way of a
// window_join with dedup (right, or both with select reading no field of
// either side: rows stored without values) on the seeded input of
// TestWindowJoinRestoresListLayout, and restores it with dedup switched
// off: into one subtask, and rescaled into two by key group. Both hold
// the rows the checkpoint held (fewer than the same join without dedup
// held there), and the rescaled output and late records of the second
// half equal, sorted, the single subtask's; nothing is left at the end.
func TestWindowJoinDedupOffRestoresRescaled(t *testing.T) {
	events := windowJoinGoldenInput()
	half := len(events) / 2
	for events[half-1].wm == 0 {
		half++
	}
	lastWM := events[half-1].wm
	run := func(hs []*joinHarness, from, to int) []string {
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
		return slices.Sorted(slices.Values(strings.Split(windowJoinGoldenLines(out, late), "\n")))
	}
	shapes := windowJoinGoldenShapes(t)
	for _, c := range []struct {
		shape int
		dedup WindowJoinDedup
		sel   string
	}{
		{0, WindowJoinDedupRight, ""},
		{1, WindowJoinDedupBoth, `{"w": window_start}`},
	} {
		for _, kind := range backends {
			t.Run(fmt.Sprintf("%s/%s/%s", shapes[c.shape].name, c.dedup, kind), func(t *testing.T) {
				p := shapes[c.shape].p
				if c.sel != "" {
					p.Select = compiled(t, c.sel)
				}
				h, j := newWindowJoinHarness(t, kind, t.TempDir(), nil, p)
				run([]*joinHarness{h}, 0, half)
				without := j.BufferedRows()
				h.finish()
				p.Dedup = c.dedup
				h, j = newWindowJoinHarness(t, kind, t.TempDir(), nil, p)
				run([]*joinHarness{h}, 0, half)
				held := j.BufferedRows()
				if held == 0 || held >= without {
					t.Fatalf("%d rows held with dedup, %d without: the test wants fewer, not none", held, without)
				}
				snapDir := t.TempDir()
				handle := snapshotHarnessTo(t, h.harness, snapDir)
				h.finish()

				p.Dedup = WindowJoinDedupNone
				r := &Restore{Keyed: []state.RestoreHandle{{Handle: handle, Dir: copyTree(t, snapDir)}}}
				h, j = newWindowJoinHarness(t, kind, t.TempDir(), r, p)
				if n := j.BufferedRows(); n != held {
					t.Fatalf("restored %d rows, the checkpoint held %d", n, held)
				}
				h.wm(lastWM)
				want := run([]*joinHarness{h}, half, len(events))
				if n := h.entries(); n != 0 || j.BufferedRows() != 0 {
					t.Fatalf("restored: %d state entries, %d rows left", n, j.BufferedRows())
				}
				h.finish()
				if len(want) < 30 {
					t.Fatalf("%d lines after the half: the test wants more", len(want))
				}

				var hs []*joinHarness
				var js []*WindowJoin
				rows := int64(0)
				for i, kgs := range []keygroup.Range{{Start: 0, End: testMaxP/2 - 1}, {Start: testMaxP / 2, End: testMaxP - 1}} {
					r := &Restore{Keyed: []state.RestoreHandle{{Handle: handle, Dir: copyTree(t, snapDir)}}}
					h, j := newWindowJoinHarnessRange(t, kind, t.TempDir(), kgs, i, r, p)
					h.wm(lastWM)
					rows += j.BufferedRows()
					hs, js = append(hs, h), append(js, j)
				}
				if rows != held {
					t.Fatalf("restored rescaled: %d rows, the checkpoint held %d", rows, held)
				}
				if got := run(hs, half, len(events)); !slices.Equal(got, want) {
					t.Fatalf("restored rescaled, the second half differs (sorted):\n%s", firstDiff(got, want))
				}
				for i, h := range hs {
					if n := h.entries(); n != 0 || js[i].BufferedRows() != 0 {
						t.Fatalf("subtask %d: %d state entries, %d rows counted at the end", i, n, js[i].BufferedRows())
					}
					h.finish()
				}
			})
		}
	}
}
