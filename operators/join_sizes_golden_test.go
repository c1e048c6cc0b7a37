package operators

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// updateJoinSizesGolden rewrites testdata/join_sizes_golden from the code
// under test. The files were written by the regular join of 3913bda, which
// kept each key's sizes (join.sizes, format 1: two uvarints) and every row
// in its side's MapState, so that the test below restores a checkpoint of
// that layout into the join that keeps a side's one row inline:
//
//	git -C /work/main worktree add /tmp/base 3913bda
//	cp operators/join_sizes_golden_test.go /tmp/base/operators/
//	cd /tmp/base && go test ./operators -run TestRegularJoinRestoresSizesV1 -update-join-sizes-golden \
//	    -join-sizes-golden-dir /path/to/this/operators/testdata/join_sizes_golden
var (
	updateJoinSizesGolden = flag.Bool("update-join-sizes-golden", false, "rewrite testdata/join_sizes_golden (see join_sizes_golden_test.go)")
	joinSizesGoldenDir    = flag.String("join-sizes-golden-dir", "testdata/join_sizes_golden", "where -update-join-sizes-golden writes")
)

// joinSizesGoldenInput is a fixed changelog in three parts: the first
// leaves its keys' sides in every state a checkpoint can catch (per key,
// left and right hold: a: the same row twice and none, b: 2 rows and 1,
// c: 1 and 1, d: 1 and 2, e: 1 row left of 2 and 2, f: none and 1); the
// second takes every side of every key through 1 -> 2 -> 1 -> 0 -> 1 rows
// from wherever it is (a duplicate row, an update -U/+U and a delete of a
// side's single row among them); the third deletes every row left, so
// that the state is empty at the end. It returns the records, their sides
// and where the second part starts.
func joinSizesGoldenInput() (recs []runtime.Record, sides []int, half int) {
	held := map[string]*[2][]string{}
	ts := int64(0)
	add := func(side int, c runtime.ChangeKind, k string, v int) {
		ts++
		val := fmt.Sprintf(`{"v":%d}`, v)
		h := held[k]
		if h == nil {
			h = &[2][]string{}
			held[k] = h
		}
		if c == runtime.ChangeInsert || c == runtime.ChangeUpdateAfter {
			h[side] = append(h[side], val)
		} else {
			i := slices.Index(h[side], val)
			h[side] = slices.Delete(h[side], i, i+1)
		}
		recs = append(recs, change(c, k, val, ts))
		sides = append(sides, side)
	}
	const L, R = 0, 1
	ins, del := runtime.ChangeInsert, runtime.ChangeDelete
	add(L, ins, "a", 1)
	add(L, ins, "a", 1)
	add(L, ins, "b", 1)
	add(L, ins, "b", 2)
	add(R, ins, "b", 5)
	add(L, ins, "c", 1)
	add(R, ins, "c", 5)
	add(L, ins, "d", 1)
	add(R, ins, "d", 5)
	add(R, ins, "d", 6)
	add(L, ins, "e", 1)
	add(L, ins, "e", 2)
	add(R, ins, "e", 5)
	add(R, ins, "e", 6)
	add(L, del, "e", 2)
	add(R, ins, "f", 5)
	half = len(recs)
	keys := slices.Sorted(maps.Keys(held))
	for _, k := range keys {
		for _, side := range []int{R, L} {
			first := func() int {
				var v int
				fmt.Sscanf(held[k][side][0], `{"v":%d}`, &v)
				return v
			}
			// Up to 2 distinct rows (a new one twice when there is one).
			for n := 0; len(slices.Compact(slices.Sorted(slices.Values(held[k][side])))) < 2; n++ {
				add(side, ins, k, 10+n)
				if n == 0 {
					add(side, ins, k, 10+n)
				}
			}
			// Down to 1 distinct row, then 0.
			for len(held[k][side]) > 0 {
				add(side, del, k, first())
				if rows := slices.Compact(slices.Sorted(slices.Values(held[k][side]))); len(rows) == 1 {
					// The single row updated, then deleted.
					v := first()
					add(side, runtime.ChangeUpdateBefore, k, v)
					add(side, runtime.ChangeUpdateAfter, k, v+20)
				}
			}
			add(side, ins, k, 30) // 0 -> 1
		}
	}
	for _, k := range keys {
		for side := range 2 {
			for len(held[k][side]) > 0 {
				var v int
				fmt.Sscanf(held[k][side][len(held[k][side])-1], `{"v":%d}`, &v)
				add(side, del, k, v)
			}
		}
	}
	return recs, sides, half
}

// TestRegularJoinRestoresSizesV1: the regular join (inner, full outer,
// and left with an upsert right side) gives exactly the changelog
// 3913bda's join gave (testdata/join_sizes_golden, see
// updateJoinSizesGolden) on joinSizesGoldenInput, on both backends:
// straight through, and restored from the checkpoint 3913bda's join took
// after the first part (sizes of format 1, every row in its side's
// MapState) and run on to the end, where no state is left.
func TestRegularJoinRestoresSizesV1(t *testing.T) {
	recs, sides, half := joinSizesGoldenInput()
	shapes := []struct {
		name string
		p    JoinParams
	}{
		{"inner", JoinParams{Join: JoinInner}},
		{"full", JoinParams{Join: JoinFullOuter}},
		{"left-upsert", JoinParams{Join: JoinLeftOuter, Upsert: []string{JoinRight}}},
	}
	run := func(h *joinHarness, from, to int) string {
		for i := from; i < to; i++ {
			h.send(sides[i], recs[i])
		}
		return joinChangeLines(h.emitted())
	}
	for _, shape := range shapes {
		for _, kind := range backends {
			t.Run(shape.name+"/"+kind, func(t *testing.T) {
				dir := filepath.Join(*joinSizesGoldenDir, shape.name, kind)
				h := newRegularJoinHarness(t, kind, t.TempDir(), nil, nil, shape.p)
				first := run(h, 0, half)
				snapDir := t.TempDir()
				if *updateJoinSizesGolden {
					snapDir = filepath.Join(dir, "checkpoint")
					if err := os.RemoveAll(snapDir); err != nil {
						t.Fatal(err)
					}
				}
				handle := snapshotHarnessTo(t, h.harness, snapDir)
				second := run(h, half, len(recs))
				if n := h.entries(); n != 0 {
					t.Fatalf("straight through: %d state entries at the end, want 0", n)
				}
				h.finish()
				if *updateJoinSizesGolden {
					for name, s := range map[string]string{"first.txt": first, "second.txt": second} {
						if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
							t.Fatal(err)
						}
					}
					if err := os.WriteFile(filepath.Join(dir, "handle.json"), handle, 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				for name, got := range map[string]string{"first.txt": first, "second.txt": second} {
					want, err := os.ReadFile(filepath.Join(dir, name))
					if err != nil {
						t.Fatal(err)
					}
					if got != string(want) {
						t.Fatalf("straight, %s differs from 3913bda's:\n%s", name, firstDiff(strings.Split(got, "\n"), strings.Split(string(want), "\n")))
					}
				}
				baseHandle, err := os.ReadFile(filepath.Join(dir, "handle.json"))
				if err != nil {
					t.Fatal(err)
				}
				r := &Restore{Keyed: []state.RestoreHandle{{Handle: baseHandle, Dir: copyTree(t, filepath.Join(dir, "checkpoint"))}}}
				h = newRegularJoinHarness(t, kind, t.TempDir(), nil, r, shape.p)
				want, _ := os.ReadFile(filepath.Join(dir, "second.txt"))
				if got := run(h, half, len(recs)); got != string(want) {
					t.Fatalf("restored from 3913bda's checkpoint, the rest differs:\n%s", firstDiff(strings.Split(got, "\n"), strings.Split(string(want), "\n")))
				}
				if n := h.entries(); n != 0 {
					t.Fatalf("restored: %d state entries at the end, want 0", n)
				}
				h.finish()
			})
		}
	}
}
