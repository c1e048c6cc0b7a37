package operators

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// TestWindowJoinRestoresMigratedCheckpoint: main's list-layout checkpoint
// (testdata/windowjoin_golden) restored, run on a quarter (the rows moved
// to the appended layout and more appended), checkpointed, and that
// checkpoint restored again, both as one subtask and rescaled into two,
// gives main's second half (as a set of lines), leaves no state, on both
// backends and both shapes.
func TestWindowJoinRestoresMigratedCheckpoint(t *testing.T) {
	events := windowJoinGoldenInput()
	half := len(events) / 2
	for events[half-1].wm == 0 {
		half++
	}
	q := half + (len(events)-half)/2
	for events[q-1].wm == 0 {
		q++
	}
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
		s := windowJoinGoldenLines(out, late)
		return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	}
	for _, shape := range windowJoinGoldenShapes(t) {
		for _, kind := range backends {
			t.Run(shape.name+"/"+kind, func(t *testing.T) {
				dir := filepath.Join(*windowJoinGoldenDir, shape.name, kind)
				b, err := os.ReadFile(filepath.Join(dir, "second.txt"))
				if err != nil {
					t.Fatal(err)
				}
				want := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
				slices.Sort(want)
				mainHandle, err := os.ReadFile(filepath.Join(dir, "handle.json"))
				if err != nil {
					t.Fatal(err)
				}
				r := &Restore{Keyed: []state.RestoreHandle{{Handle: mainHandle, Dir: copyTree(t, filepath.Join(dir, "checkpoint"))}}}
				h, j := newWindowJoinHarness(t, kind, t.TempDir(), r, shape.p)
				h.wm(events[half-1].wm)
				got := run([]*joinHarness{h}, half, q)
				rowsAtQ := j.BufferedRows()
				snapDir := t.TempDir()
				handle := snapshotHarnessTo(t, h.harness, snapDir)
				h.finish()

				for _, n := range []int{1, 2} {
					t.Run(fmt.Sprint(n), func(t *testing.T) {
						var hs []*joinHarness
						rows := int64(0)
						for i := range n {
							kgs := keygroup.Range{Start: 0, End: testMaxP - 1}
							if n == 2 {
								kgs = []keygroup.Range{{Start: 0, End: testMaxP/2 - 1}, {Start: testMaxP / 2, End: testMaxP - 1}}[i]
							}
							r := &Restore{Keyed: []state.RestoreHandle{{Handle: handle, Dir: copyTree(t, snapDir)}}}
							h, j := newWindowJoinHarnessRange(t, kind, t.TempDir(), kgs, i, r, shape.p)
							h.wm(events[q-1].wm)
							rows += j.BufferedRows()
							hs = append(hs, h)
						}
						if rows != rowsAtQ || rows == 0 {
							t.Fatalf("restored again: %d rows, %d at the checkpoint", rows, rowsAtQ)
						}
						all := append(slices.Clone(got), run(hs, q, len(events))...)
						slices.Sort(all)
						if !slices.Equal(all, want) {
							t.Fatalf("migrated, checkpointed, restored: the second half differs (sorted):\n%s", firstDiff(all, want))
						}
						for _, h := range hs {
							if n := h.entries(); n != 0 {
								t.Fatalf("%d state entries left", n)
							}
							h.finish()
						}
					})
				}
			})
		}
	}
}
