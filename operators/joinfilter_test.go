package operators

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// countingJoinSide is a join side's MapState that counts its Gets.
type countingJoinSide struct {
	state.MapState[string, joinCount]
	gets int
}

func (c *countingJoinSide) Get(k string) (joinCount, bool, error) {
	c.gets++
	return c.MapState.Get(k)
}

// countJoinGets makes the join of h count the Gets of its sides' MapStates.
func countJoinGets(t *testing.T, h *joinHarness) [2]*countingJoinSide {
	t.Helper()
	j, ok := h.op.co.(*RegularJoin)
	if !ok {
		t.Fatalf("join function %T", h.op.co)
	}
	var c [2]*countingJoinSide
	for side := range 2 {
		c[side] = &countingJoinSide{MapState: j.sides[side]}
		j.sides[side] = c[side]
	}
	return c
}

// TestRegularJoinRowFilter: a new row of a side that spilled to its
// MapState since the join opened (Nexmark q4's bids of an auction) is
// known absent without a Get of the MapState (joinRowFilter), while a row
// already stored is still found (its count grows, its pairs are emitted as
// often as it is stored), and a side restored with its rows in the MapState
// reads them as before: a duplicate of a restored row is found, not
// written over as new.
func TestRegularJoinRowFilter(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			p := JoinParams{Join: JoinInner, Select: compiled(t, `{"a": left.a, "b": right.b}`)}
			h := newRegularJoinHarness(t, kind, t.TempDir(), nil, nil, p)
			gets := countJoinGets(t, h)
			h.send(0, change(runtime.ChangeInsert, "k", `{"a":1}`, 1))
			const n = 50
			for i := range n {
				h.send(1, change(runtime.ChangeInsert, "k", fmt.Sprintf(`{"b":%d}`, i), int64(2+i)))
			}
			// The first right row is inline, the second spills both: no
			// Get at all for the 50 distinct rows.
			if gets[1].gets != 0 {
				t.Fatalf("%d Gets of the right side for %d new rows, want 0", gets[1].gets, n)
			}
			h.emitted()
			// A duplicate of a stored row is found (count 2): it pairs,
			// and the row stays after one delete, gone after a second.
			h.send(1, change(runtime.ChangeInsert, "k", `{"b":7}`, 60))
			if !strings.Contains(regularJoinRows(t, h), "k right \"\\x00{\\\"b\\\":7}\" count=2") {
				t.Fatalf("the duplicate's count is not 2:\n%s", regularJoinRows(t, h))
			}
			h.send(1, change(runtime.ChangeDelete, "k", `{"b":7}`, 61))
			if !strings.Contains(regularJoinRows(t, h), "k right \"\\x00{\\\"b\\\":7}\" count=1") {
				t.Fatalf("one delete of a row stored twice:\n%s", regularJoinRows(t, h))
			}
			h.send(1, change(runtime.ChangeDelete, "k", `{"b":7}`, 62))
			if rows := regularJoinRows(t, h); strings.Contains(rows, `"b\":7}`) || !strings.Contains(rows, "k sizes=1,49") {
				t.Fatalf("two deletes of a row stored twice:\n%s", rows)
			}
			want := "+I k {\"a\":1,\"b\":7}\n-D k {\"a\":1,\"b\":7}\n-D k {\"a\":1,\"b\":7}\n"
			if got := joinChangeLines(h.emitted()); got != want {
				t.Fatalf("changelog\n%s\nwant\n%s", got, want)
			}
			if gets[1].gets == 0 {
				t.Fatal("no Get for a row the filter holds")
			}
			// Restored: the right side is in its MapState but not spilled
			// since this Open, so a duplicate of a restored row is read.
			r := snapshotRestore(t, h.harness)
			h = newRegularJoinHarness(t, kind, t.TempDir(), nil, r, p)
			gets = countJoinGets(t, h)
			h.send(1, change(runtime.ChangeInsert, "k", `{"b":3}`, 70))
			h.send(1, change(runtime.ChangeInsert, "k", `{"b":100}`, 71))
			if gets[1].gets != 2 {
				t.Fatalf("%d Gets of the restored right side for 2 rows, want 2", gets[1].gets)
			}
			if !strings.Contains(regularJoinRows(t, h), "k right \"\\x00{\\\"b\\\":3}\" count=2") {
				t.Fatalf("the restored row's duplicate's count is not 2:\n%s", regularJoinRows(t, h))
			}
			h.send(1, change(runtime.ChangeDelete, "k", `{"b":3}`, 72))
			h.send(1, change(runtime.ChangeDelete, "k", `{"b":3}`, 73))
			want = "+I k {\"a\":1,\"b\":3}\n+I k {\"a\":1,\"b\":100}\n-D k {\"a\":1,\"b\":3}\n-D k {\"a\":1,\"b\":3}\n"
			if got := joinChangeLines(h.emitted()); got != want {
				t.Fatalf("changelog after restore\n%s\nwant\n%s", got, want)
			}
			// Empty the side, then fill it again: it spills afresh, and
			// its new rows need no Get again.
			for i := range n + 1 {
				if i == 3 || i == 7 {
					continue
				}
				v := fmt.Sprintf(`{"b":%d}`, i)
				if i == n {
					v = `{"b":100}`
				}
				h.send(1, change(runtime.ChangeDelete, "k", v, int64(80+i)))
			}
			if got := regularJoinRows(t, h); got != "k left \"\\x00{\\\"a\\\":1}\" count=1 assoc=0\nk sizes=1,0\n" {
				t.Fatalf("state after emptying the right side\n%s", got)
			}
			h.emitted()
			before := gets[1].gets
			for i := range 10 {
				h.send(1, change(runtime.ChangeInsert, "k", fmt.Sprintf(`{"b":%d}`, 200+i), int64(200+i)))
			}
			h.send(1, change(runtime.ChangeInsert, "k", `{"b":205}`, 300))
			if got := gets[1].gets - before; got != 1 {
				t.Fatalf("%d Gets for 10 new rows and a duplicate of a side spilled again, want 1", got)
			}
			var w strings.Builder
			for i := range 10 {
				fmt.Fprintf(&w, "+I k {\"a\":1,\"b\":%d}\n", 200+i)
			}
			w.WriteString("+I k {\"a\":1,\"b\":205}\n")
			if got := joinChangeLines(h.emitted()); got != w.String() {
				t.Fatalf("changelog after refilling\n%s\nwant\n%s", got, w.String())
			}
			if !strings.Contains(regularJoinRows(t, h), "k right \"\\x00{\\\"b\\\":205}\" count=2") {
				t.Fatalf("the duplicate's count is not 2:\n%s", regularJoinRows(t, h))
			}
			h.finish()
		})
	}
}

// TestSplitBlockFilter: every added hash is found (across the filter's
// growing parts), and hashes never added are mostly refused.
func TestSplitBlockFilter(t *testing.T) {
	var f splitBlockFilter
	x := uint64(46)
	next := func() uint64 { // splitmix64
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		return z ^ (z >> 31)
	}
	const n = sbfFirstCapacity*5 + 1234 // three parts
	added := make([]uint64, n)
	for i := range added {
		added[i] = next()
		f.add(added[i])
	}
	if len(f.parts) != 3 {
		t.Fatalf("%d parts, want 3", len(f.parts))
	}
	for i, h := range added {
		if !f.mayContain(h) {
			t.Fatalf("added hash %d (%x) not found", i, h)
		}
	}
	fp := 0
	const probes = 100_000
	for range probes {
		if f.mayContain(next()) {
			fp++
		}
	}
	// Three parts (the newest a quarter full) at ~0.5% each at capacity.
	if fp > probes/50 {
		t.Fatalf("%d of %d absent hashes found", fp, probes)
	}
}

// TestRegularJoinRowFilterBounds: past its bound of rows, or of spilled
// keys, the row filter is dropped and every row is read again (a Get per
// new row), with the same changelog and counts.
func TestRegularJoinRowFilterBounds(t *testing.T) {
	for _, bound := range []string{"rows", "keys"} {
		t.Run(bound, func(t *testing.T) {
			p := JoinParams{Join: JoinInner, Select: compiled(t, `{"a": left.a, "b": right.b}`)}
			h := newRegularJoinHarness(t, "pebble", t.TempDir(), nil, nil, p)
			gets := countJoinGets(t, h)
			j := h.op.co.(*RegularJoin)
			if bound == "rows" {
				j.filter.maxRows = 20
			} else {
				j.filter.maxKeys = 2
			}
			keys := []string{"k1", "k2", "k3"}
			for _, k := range keys {
				h.send(0, change(runtime.ChangeInsert, k, `{"a":1}`, 1))
			}
			// 2 right rows a key: each key's right side spills (6 rows).
			for _, k := range keys {
				for i := range 2 {
					h.send(1, change(runtime.ChangeInsert, k, fmt.Sprintf(`{"b":%d}`, i), 2))
				}
			}
			if bound == "keys" && (!j.filter.off || gets[1].gets != 0) {
				t.Fatalf("off %v after a third spilled key past 2, %d Gets; want off, 0", j.filter.off, gets[1].gets)
			}
			for i := 2; i < 10; i++ {
				for _, k := range keys {
					h.send(1, change(runtime.ChangeInsert, k, fmt.Sprintf(`{"b":%d}`, i), 3))
				}
			}
			// rows: 6 rows added at the spills, then 15 new rows without a
			// Get (the 21st row added drops the filter after its check); the
			// other 9 are read.
			want := 9
			if bound == "keys" {
				want = 24 // all new rows after the spills are read
			}
			if !j.filter.off || gets[1].gets != want {
				t.Fatalf("off %v, %d Gets; want off, %d", j.filter.off, gets[1].gets, want)
			}
			h.send(1, change(runtime.ChangeInsert, "k2", `{"b":4}`, 4))
			if !strings.Contains(regularJoinRows(t, h), "k2 right \"\\x00{\\\"b\\\":4}\" count=2") {
				t.Fatalf("a duplicate after the drop:\n%s", regularJoinRows(t, h))
			}
			if got := len(h.emitted()); got != 31 {
				t.Fatalf("%d pairs, want 31", got)
			}
			h.finish()
		})
	}
}
