package operators

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// updateJoinGolden rewrites testdata/join_golden from the code under test.
// The files were written by main's regular join before it kept the sizes
// of each key's sides (JoinSizesState), so that the test below restores a
// checkpoint of that layout:
//
//	git archive main | tar -x -C /tmp/main-src
//	cp operators/join_golden_test.go /tmp/main-src/operators/
//	cd /tmp/main-src && go test ./operators -run TestRegularJoinRestoresWithoutSizes -update-join-golden \
//	    -join-golden-dir /path/to/this/operators/testdata/join_golden
var (
	updateJoinGolden = flag.Bool("update-join-golden", false, "rewrite testdata/join_golden (see join_golden_test.go)")
	joinGoldenDir    = flag.String("join-golden-dir", "testdata/join_golden", "where -update-join-golden writes")
)

// joinGoldenInput is a seeded changelog of both sides over 8 keys: inserts,
// and retractions (-U, -D) of rows the side holds, some of which then come
// back (+U).
func joinGoldenInput() (recs []runtime.Record, sides []int) {
	rng := rand.New(rand.NewPCG(23, 20))
	held := [2]map[string][]string{{}, {}}
	for i := range 300 {
		side := rng.IntN(2)
		key := fmt.Sprintf("k%d", rng.IntN(8))
		rows := held[side][key]
		if len(rows) > 0 && rng.IntN(3) == 0 {
			j := rng.IntN(len(rows))
			kind := runtime.ChangeDelete
			if rng.IntN(2) == 0 {
				kind = runtime.ChangeUpdateBefore
			}
			recs = append(recs, change(kind, key, rows[j], int64(i)))
			held[side][key] = append(rows[:j:j], rows[j+1:]...)
		} else {
			v := fmt.Sprintf(`{"v":%d}`, rng.IntN(4))
			kind := runtime.ChangeInsert
			if rng.IntN(4) == 0 {
				kind = runtime.ChangeUpdateAfter
			}
			recs = append(recs, change(kind, key, v, int64(i)))
			held[side][key] = append(rows, v)
		}
		sides = append(sides, side)
	}
	return recs, sides
}

// TestRegularJoinRestoresWithoutSizes: the regular join (full outer, and
// left with an upsert right side) gives exactly the changelog main's join
// gave (testdata/join_golden, written by main's code, see
// updateJoinGolden) on 300 seeded changes over 8 keys, on both backends:
// straight through, and restored in the middle from the checkpoint main's
// join took there (rows, no sizes: migrated at open) and run on to the
// end, where the restored state holds the same rows and sizes as the
// state run straight through (regularJoinRows: where a row is kept,
// inline or in its side's MapState, may differ).
func TestRegularJoinRestoresWithoutSizes(t *testing.T) {
	recs, sides := joinGoldenInput()
	const half = 150
	shapes := []struct {
		name string
		p    JoinParams
	}{
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
				dir := filepath.Join(*joinGoldenDir, shape.name, kind)
				h := newRegularJoinHarness(t, kind, t.TempDir(), nil, nil, shape.p)
				first := run(h, 0, half)
				snapDir := t.TempDir()
				if *updateJoinGolden {
					snapDir = filepath.Join(dir, "checkpoint")
					if err := os.RemoveAll(snapDir); err != nil {
						t.Fatal(err)
					}
				}
				handle := snapshotHarnessTo(t, h.harness, snapDir)
				second := run(h, half, len(recs))
				straight := regularJoinRows(t, h)
				h.finish()
				if *updateJoinGolden {
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
						t.Fatalf("straight, %s differs from main's:\n%s", name, firstDiff(strings.Split(got, "\n"), strings.Split(string(want), "\n")))
					}
				}

				// Restored from main's checkpoint at the half.
				mainHandle, err := os.ReadFile(filepath.Join(dir, "handle.json"))
				if err != nil {
					t.Fatal(err)
				}
				r := &Restore{Keyed: []state.RestoreHandle{{Handle: mainHandle, Dir: copyTree(t, filepath.Join(dir, "checkpoint"))}}}
				h = newRegularJoinHarness(t, kind, t.TempDir(), nil, r, shape.p)
				want, _ := os.ReadFile(filepath.Join(dir, "second.txt"))
				if got := run(h, half, len(recs)); got != string(want) {
					t.Fatalf("restored from main's checkpoint, second half differs:\n%s", firstDiff(strings.Split(got, "\n"), strings.Split(string(want), "\n")))
				}
				if got := regularJoinRows(t, h); got != straight {
					t.Fatalf("restored: rows and sizes\n%s\nstraight through\n%s", got, straight)
				}
				h.finish()
			})
		}
	}
}

// snapshotHarnessTo takes a checkpoint of h into dir and returns its keyed
// handle.
func snapshotHarnessTo(t *testing.T, h *harness, dir string) json.RawMessage {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	finish, err := h.op.SnapshotState(h.ctx, &runtime.Barrier{CheckpointID: 1, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := finish(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ts checkpoint.TaskState
	if err := json.Unmarshal(snap.State, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Keyed
}

// regularJoinRows lists the regular join's state in h as sorted lines:
// per key "<key> sizes=<left>,<right>", and per stored row "<key> <side>
// <row key, quoted> count=<n> assoc=<m>" wherever the row is kept (inline
// in the key's sizes value or in its side's MapState), so that two states
// holding the same rows compare equal whatever their layout.
func regularJoinRows(t *testing.T, h *joinHarness) string {
	t.Helper()
	var lines []string
	row := func(key []byte, side int, r joinStoredRow) {
		lines = append(lines, fmt.Sprintf("%s %s %q count=%d assoc=%d", key, [2]string{"left", "right"}[side], r.key, r.Count, r.Assoc))
	}
	b := h.op.backend
	if state.HasState(b, JoinSizesState) {
		d := state.ValueStateDescriptor[joinHead]{Name: JoinSizesState, Serializer: joinSizesSerializer{}}
		err := state.ApplyToAllValueKeys(b, d, func(key []byte, s state.ValueState[joinHead]) error {
			hd, _, err := s.Value()
			if err != nil {
				return err
			}
			lines = append(lines, fmt.Sprintf("%s sizes=%d,%d", key, hd.sizes[0], hd.sizes[1]))
			for side := range 2 {
				for _, r := range hd.rows[side] {
					row(key, side, r)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for side, name := range []string{JoinLeftState, JoinRightState} {
		if !state.HasState(b, name) {
			continue
		}
		d := state.MapStateDescriptor[string, joinCount]{Name: name, KeySerializer: state.StringSerializer{}, ValueSerializer: joinCountSerializer{}}
		err := state.ApplyToAllKeys(b, d, func(key []byte, m state.MapState[string, joinCount]) error {
			for e, err := range m.Entries() {
				if err != nil {
					return err
				}
				row(key, side, joinStoredRow{key: e.Key, joinCount: e.Value})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}
