package operators

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	krt "github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// TestTableJoinOutputsSurviveRowUpdates attacks the latest join's kept
// decoded rows (tableValue.right, shared by the copies of a row the state
// hands out) and its shared output blocks (selectValue) where
// TestTableJoinOutputsOwnBytes does not go: random clicks of 6 users
// interleaved with updates and deletes of their rows (countries of 1-60
// bytes, and some of 20,000, whose outputs do not fit a block), every
// output held until the end (as a sink's producer holds them) while
// thousands more are written and the rows they joined change, a snapshot
// and restore in the middle. Each output must be byte for byte the one an
// independent model of the table (the latest row per user) gives.
func TestTableJoinOutputsSurviveRowUpdates(t *testing.T) {
	for _, kind := range []string{state.KindHashmap, state.KindPebble} {
		t.Run(kind, func(t *testing.T) {
			p := TableJoinParams{Mode: TableJoinLatest, Join: TableJoinLeft, Select: compiled(t, tableJoinSelect)}
			r := rand.New(rand.NewPCG(41, uint64(len(kind))))
			table := map[string]string{} // user -> country; absent: no row
			var got []krt.Record
			var want []string
			var restore *Restore
			ts := int64(0)
			for round := range 2 {
				h := newTableJoinHarness(t, kind, t.TempDir(), restore, p)
				for i := range 2500 {
					ts++
					u := fmt.Sprint("u", r.IntN(6))
					switch r.IntN(4) {
					case 0: // a row update
						n := 1 + r.IntN(60)
						if r.IntN(25) == 0 {
							n = 20000
						}
						c := strings.Repeat(string(rune('A'+r.IntN(26))), n)
						table[u] = c
						h.send(1, user(u, c, ts))
					case 1:
						if r.IntN(4) == 0 { // a row delete
							delete(table, u)
							h.send(1, user(u, "", ts))
							continue
						}
						fallthrough
					default: // a click
						id := fmt.Sprintf("c%d-%d", round, i)
						country := "null"
						if c, ok := table[u]; ok {
							country = `"` + c + `"`
						}
						want = append(want, fmt.Sprintf(`{"click":%q,"country":%s}`, id, country))
						h.send(0, clickOf(id, u, ts))
					}
					if i%500 == 499 {
						got = append(got, h.emitted()...)
					}
				}
				got = append(got, h.emitted()...)
				restore = snapshotRestore(t, h.harness)
			}
			if len(got) != len(want) {
				t.Fatalf("%d outputs, want %d", len(got), len(want))
			}
			for i, rec := range got {
				if string(rec.Value) != want[i] {
					t.Fatalf("output %d: %.80s (%d bytes), want %.80s (%d bytes)", i, rec.Value, len(rec.Value), want[i], len(want[i]))
				}
			}
		})
	}
}
