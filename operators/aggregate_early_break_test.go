package operators

import (
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// TestAggregateEarlyFoldRetractEndsBatchKey: an early-folding mini-batch
// (no MapState, no state_ttl) over an input not declared a changelog, with
// only +U rows emitted (updateAfterOnly: the row before the batch is not
// rendered at a key's first record), ends the batch when a retraction of
// a key that had a row comes; the retraction is then folded into its own
// key's accumulators, not those of the key the batch's end made current
// last. Key a's -D of 5 leaves a at 1 and b at 9, as without mini_batch.
func TestAggregateEarlyFoldRetractEndsBatchKey(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			run := func(mb *MiniBatchParams) map[string]string {
				p := AggregateParams{MiniBatch: mb, Aggregates: []AggregateSpec{
					{Name: "total", Fn: AggSum, Of: compiled(t, "amount")},
					{Name: "n", Fn: AggCount},
				}}
				agg := NewAggregate(p, false)
				agg.updateAfterOnly = true
				if mb != nil && !agg.foldsEarly() {
					t.Fatal("the aggregate does not fold early")
				}
				h, err := openStateful(t, kind, t.TempDir(), nil, nil, agg)
				if err != nil {
					t.Fatal(err)
				}
				bad := &recordErrors{}
				h.feed(bad, payment("a", 5, "u1"), payment("b", 7, "u1"))
				h.feed(bad, payment("a", 1, "u1"), payment("b", 2, "u1"), changed(runtime.ChangeDelete, "a", 5, "u1"))
				if len(bad.errs) > 0 {
					t.Fatalf("bad records %v", bad.errs)
				}
				return lastRows(h.finish())
			}
			want := map[string]string{"a": `{"key":"a","total":1,"n":1}`, "b": `{"key":"b","total":9,"n":2}`}
			for _, mb := range []*MiniBatchParams{nil, {Size: 1000}} {
				if got := run(mb); len(got) != len(want) || got["a"] != want["a"] || got["b"] != want["b"] {
					t.Fatalf("mini_batch %v: rows %v, want %v", mb, got, want)
				}
			}
		})
	}
}
