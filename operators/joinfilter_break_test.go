package operators

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// TestJoinRowFilterKeyBytesBound: the row filter's spilled keys are bounded
// by their bytes, not only by their number: a join key may be as large as
// a Kafka key (a MiB), and 2^20 spilled keys of a MiB would hold a TiB of
// heap in a filter documented at some 100 MiB. 32 MiB of keys fit
// (joinFilterMaxKeyBytes); a key that empties gives its bytes back; the
// key past the bound drops the filter (every row read again).
func TestJoinRowFilterKeyBytesBound(t *testing.T) {
	var f joinRowFilter
	f.reset()
	key := make([]byte, 1<<20)
	spill := func(i int, on bool) {
		binary.BigEndian.PutUint64(key, uint64(i))
		f.setSpilled(key, 1, on)
	}
	for i := range 32 {
		spill(i, true)
		f.add(key, 1, "\x00{}")
	}
	if f.off || len(f.spilled) != 32 {
		t.Fatalf("off %v, %d spilled keys after 32 MiB of keys; want on, 32", f.off, len(f.spilled))
	}
	spill(0, false) // key 0 empties: its MiB is free again
	spill(32, true)
	if f.off || len(f.spilled) != 32 {
		t.Fatalf("off %v, %d spilled keys after one left and one came; want on, 32", f.off, len(f.spilled))
	}
	binary.BigEndian.PutUint64(key, 5)
	if f.absent(f.sides(key), key, 1, "\x00{}") || !f.absent(f.sides(key), key, 1, "\x00{\"new\":1}") {
		t.Fatal("the filter does not answer for key 5's rows as it should")
	}
	spill(33, true) // 33 MiB: past the bound
	if !f.off || f.spilled != nil {
		t.Fatalf("off %v, %d spilled keys after 33 MiB of keys; want off, none", f.off, len(f.spilled))
	}
	binary.BigEndian.PutUint64(key, 5)
	if f.absent(1<<1, key, 1, "\x00{\"new\":1}") {
		t.Fatal("a dropped filter answers absent")
	}
}

// TestRegularJoinRowFilterReopen: Open starts the row filter afresh. The
// same RegularJoin opened again on another subtask's restored state (key k
// spilled on its right side in both, with other rows) must read the
// restored rows: a duplicate of one is counted 2, not written over as new
// because the filter of the first Open said key k's right side spilled
// and did not hold the row.
func TestRegularJoinRowFilterReopen(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			p := JoinParams{Join: JoinInner, Select: compiled(t, `{"a": left.a, "b": right.b}`)}
			ha := newRegularJoinHarness(t, kind, t.TempDir(), nil, nil, p)
			j := ha.op.co.(*RegularJoin)
			ha.send(0, change(runtime.ChangeInsert, "k", `{"a":1}`, 1))
			ha.send(1, change(runtime.ChangeInsert, "k", `{"b":1}`, 2))
			ha.send(1, change(runtime.ChangeInsert, "k", `{"b":2}`, 3)) // spills k's right side
			if j.filter.sides([]byte("k")) != 1<<1 {
				t.Fatalf("k's spilled sides %b, want 10", j.filter.sides([]byte("k")))
			}
			ha.finish()

			hb := newRegularJoinHarness(t, kind, t.TempDir(), nil, nil, p)
			hb.send(0, change(runtime.ChangeInsert, "k", `{"a":1}`, 1))
			hb.send(1, change(runtime.ChangeInsert, "k", `{"b":3}`, 2))
			hb.send(1, change(runtime.ChangeInsert, "k", `{"b":4}`, 3))
			r := snapshotRestore(t, hb.harness)

			// The first join, opened again on the second's state.
			h := &joinHarness{harness: &harness{t: t, mb: runtime.NewMailbox(), ch: runtime.NewChannel(1 << 16), ctx: context.Background()},
				late: runtime.NewChannel(16)}
			out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{h.ch}, runtime.ForwardPartitioner{}))
			h.op = NewKeyedCoProcessOperator(OpenContext{Operator: "join", Parallelism: 1}, clockOpener(kind, t.TempDir(), nil), r, j, out)
			h.op.SetMailbox(h.mb)
			if err := h.op.Open(h.ctx); err != nil {
				t.Fatal(err)
			}
			gets := countJoinGets(t, h)
			h.send(1, change(runtime.ChangeInsert, "k", `{"b":3}`, 4))
			if gets[1].gets != 1 {
				t.Fatalf("%d Gets for a duplicate of a restored row, want 1", gets[1].gets)
			}
			want := "k left \"\\x00{\\\"a\\\":1}\" count=1 assoc=0\n" +
				"k right \"\\x00{\\\"b\\\":3}\" count=2 assoc=1\n" +
				"k right \"\\x00{\\\"b\\\":4}\" count=1 assoc=1\n" +
				"k sizes=1,2\n"
			if got := regularJoinRows(t, h); got != want {
				t.Fatalf("state after a duplicate of a restored row\n%s\nwant\n%s", got, want)
			}
			h.send(1, change(runtime.ChangeDelete, "k", `{"b":3}`, 5))
			h.send(1, change(runtime.ChangeDelete, "k", `{"b":3}`, 6))
			wantRows := "k left \"\\x00{\\\"a\\\":1}\" count=1 assoc=0\n" +
				"k right \"\\x00{\\\"b\\\":4}\" count=1 assoc=1\n" +
				"k sizes=1,1\n"
			if got := regularJoinRows(t, h); got != wantRows {
				t.Fatalf("state after two deletes\n%s\nwant\n%s", got, wantRows)
			}
			wantOut := "+I k {\"a\":1,\"b\":3}\n-D k {\"a\":1,\"b\":3}\n-D k {\"a\":1,\"b\":3}\n"
			if got := joinChangeLines(h.finish()); got != wantOut {
				t.Fatalf("changelog\n%s\nwant\n%s", got, wantOut)
			}
		})
	}
}
