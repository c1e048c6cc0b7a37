package operators

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// TestRegularJoinInlineRows: a side with one distinct row keeps it in the
// key's sizes value, not in its MapState (Nexmark q4's and q20's auction
// side: each bid then reads the auction with the sizes instead of a scan
// of the auction side), and a side that grows past joinInlineRows moves
// its rows to its MapState, where they stay until the side is empty. The
// pairs are the same as ever.
func TestRegularJoinInlineRows(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h := newRegularJoinHarness(t, kind, t.TempDir(), nil, nil, JoinParams{Join: JoinInner, Select: compiled(t, `{"a": left.a, "b": right.b}`)})
			h.send(0, change(runtime.ChangeInsert, "k", `{"a":1}`, 1))
			for i := range 5 {
				h.send(1, change(runtime.ChangeInsert, "k", fmt.Sprintf(`{"b":%d}`, i), int64(2+i)))
			}
			var want strings.Builder
			for i := range 5 {
				fmt.Fprintf(&want, "+I k {\"a\":1,\"b\":%d}\n", i)
			}
			if got := joinChangeLines(h.emitted()); got != want.String() {
				t.Fatalf("changelog\n%s\nwant\n%s", got, want.String())
			}
			// The sizes with the left row inline, and the five right rows.
			if n := h.entries(); n != 6 {
				t.Fatalf("%d state entries, want 6 (the sizes holding the left row, the 5 right rows)", n)
			}
			// A second left row: both left rows move to the left MapState.
			h.send(0, change(runtime.ChangeInsert, "k", `{"a":2}`, 10))
			if n := h.entries(); n != 8 {
				t.Fatalf("%d state entries, want 8 (the sizes, 2 left rows, 5 right rows)", n)
			}
			// Back to one left row: it stays in the MapState.
			h.send(0, change(runtime.ChangeDelete, "k", `{"a":1}`, 11))
			if n := h.entries(); n != 7 {
				t.Fatalf("%d state entries, want 7 (the sizes, 1 left row, 5 right rows)", n)
			}
			// Empty, then one row again: inline again.
			h.send(0, change(runtime.ChangeDelete, "k", `{"a":2}`, 12))
			h.send(0, change(runtime.ChangeInsert, "k", `{"a":3}`, 13))
			if n := h.entries(); n != 6 {
				t.Fatalf("%d state entries, want 6 (the sizes holding the left row, the 5 right rows)", n)
			}
			h.emitted()
			h.send(1, change(runtime.ChangeInsert, "k", `{"b":9}`, 14))
			if got, want := joinChangeLines(h.emitted()), "+I k {\"a\":3,\"b\":9}\n"; got != want {
				t.Fatalf("changelog\n%s\nwant\n%s", got, want)
			}
			h.finish()
		})
	}
}

// TestJoinSizesFormats: a joinHead's format 2 round-trips (inline sides
// and not), format 1 (two uvarints, what binaries before format 2 wrote)
// decodes with no side inline, format 1's decoder refuses format 2 (an
// older binary fails instead of missing inline rows), and malformed
// values are refused.
func TestJoinSizesFormats(t *testing.T) {
	ser := joinSizesSerializer{}
	heads := []joinHead{
		{sizes: joinSizes{1, 0}, inline: [2]bool{true, false}, rows: [2][]joinStoredRow{{{key: "\x00{\"a\":1}", joinCount: joinCount{Count: 2, Assoc: 3}}}, nil}},
		{sizes: joinSizes{7, 1}, inline: [2]bool{false, true}, rows: [2][]joinStoredRow{nil, {{key: "\x01text", joinCount: joinCount{Count: 1}}}}},
		{sizes: joinSizes{300, 5}},
	}
	for _, h := range heads {
		b, err := ser.Append(nil, h)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ser.Decode(b)
		if err != nil {
			t.Fatalf("decode %v: %v", h, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(h) {
			t.Fatalf("round trip: %v, want %v", got, h)
		}
		if _, err := (joinCountSerializer{}).Decode(b); err == nil {
			t.Fatalf("format 1's decoder accepted format 2 bytes %x", b)
		}
	}
	v1 := binary.AppendUvarint(binary.AppendUvarint(nil, 4), 9)
	got, err := ser.Decode(v1)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(joinHead{sizes: joinSizes{4, 9}}) {
		t.Fatalf("format 1: %v, %v; want sizes 4, 9, nothing inline", got, err)
	}
	good, _ := ser.Append(nil, heads[0])
	for _, b := range [][]byte{
		nil,
		{1},
		append(slices.Clone(v1), 3),       // an unknown format
		append(slices.Clone(v1), 2, 0),    // a side's flag missing
		append(slices.Clone(v1), 2, 0, 2), // a flag not 0 or 1
		append(slices.Clone(v1), 2, 1, 1, 1, 'x', 1, 0, 0), // 1 row inline, size 4
		append(slices.Clone(good), 0),                      // trailing byte
		good[:len(good)-1],                                 // cut
	} {
		if h, err := ser.Decode(b); err == nil {
			t.Fatalf("decode %x: %v, want an error", b, h)
		}
	}
}

// TestRegularJoinModelRestores: TestRegularJoinModel's random changes
// (inserts, -U/+U, deletes, duplicates) on both sides of three keys with
// six row values, so sides move between inline and MapState rows, with a
// snapshot and restore every 40 steps: the view from the changelog equals
// the model's join after every step, and at every restore the state holds
// exactly the model's rows and counts (wherever they are kept).
func TestRegularJoinModelRestores(t *testing.T) {
	assoc := regexp.MustCompile(` assoc=\d+`)
	for _, kind := range backends {
		for _, jk := range []JoinKind{JoinInner, JoinFullOuter} {
			t.Run(kind+"/"+string(jk), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(45, uint64(len(jk))))
				p := JoinParams{Join: jk}
				clk := newStepClock()
				h := newRegularJoinHarness(t, kind, t.TempDir(), clk, nil, p)
				model := joinModel{}
				view := map[string]int{}
				keys := []string{"k1", "k2", "k3"}
				ts := int64(0)
				step := func(side int, c runtime.ChangeKind, k, v string) {
					ts++
					sides := model[k]
					if sides == nil {
						sides = &[2]map[string]int{{}, {}}
						model[k] = sides
					}
					if c == runtime.ChangeInsert || c == runtime.ChangeUpdateAfter {
						sides[side][v]++
					} else {
						sides[side][v]--
						if sides[side][v] == 0 {
							delete(sides[side], v)
						}
					}
					h.send(side, change(c, k, v, ts))
				}
				modelRows := func() string {
					var lines []string
					for _, k := range keys {
						var sz [2]int
						for side := range 2 {
							for v, n := range model.side(k, side) {
								lines = append(lines, fmt.Sprintf("%s %s %q count=%d", k, [2]string{"left", "right"}[side], "\x00"+v, n))
							}
							sz[side] = len(model.side(k, side))
						}
						if sz != [2]int{} {
							lines = append(lines, fmt.Sprintf("%s sizes=%d,%d", k, sz[0], sz[1]))
						}
					}
					slices.Sort(lines)
					return strings.Join(lines, "\n") + "\n"
				}
				const steps = 600
				for i := range steps {
					if i > 0 && i%40 == 0 {
						materialize(t, view, h.emitted())
						if got, want := assoc.ReplaceAllString(regularJoinRows(t, h), ""), modelRows(); got != want {
							t.Fatalf("step %d: state rows\n%s\nwant\n%s", i, got, want)
						}
						r := snapshotRestore(t, h.harness)
						h = newRegularJoinHarness(t, kind, t.TempDir(), clk, r, p)
					}
					side, k := rng.IntN(2), keys[rng.IntN(len(keys))]
					rows := slices.Sorted(maps.Keys(model.side(k, side)))
					v := fmt.Sprintf(`{"v":%d}`, rng.IntN(6))
					switch op := rng.IntN(10); {
					case len(rows) == 0 || op < 4:
						step(side, runtime.ChangeInsert, k, v)
					case op < 7:
						step(side, runtime.ChangeUpdateBefore, k, rows[rng.IntN(len(rows))])
						step(side, runtime.ChangeUpdateAfter, k, v)
					default:
						step(side, runtime.ChangeDelete, k, rows[rng.IntN(len(rows))])
					}
					materialize(t, view, h.emitted())
					if want := model.view(jk); !maps.Equal(view, want) {
						t.Fatalf("step %d: view\n%v\nwant\n%v", i, view, want)
					}
				}
				h.finish()
			})
		}
	}
}
