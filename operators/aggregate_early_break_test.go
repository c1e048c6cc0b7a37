package operators

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

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

// TestAggregateMiniBatchDistinctChurn: over a changelog, two keys whose
// few values (amounts 3, 9 and 13: each of the filters' ranges; users u0
// and u1) are inserted, retracted (-D, or -U then +U) and inserted again
// many times within one batch, with checkpoints (snapshot and restore) at
// random points, through the count_distinct aggregates with filters and a
// shared map (distinctFilterSpecs), with and without state_ttl (an hour,
// never reached): with mini_batch (sizes 2, 7 and 1000; the batch's table
// of entries) the upsert table at every checkpoint and at the end is the
// one without mini_batch, and the final one the model's (distinctModelRow).
func TestAggregateMiniBatchDistinctChurn(t *testing.T) {
	amounts := []int{3, 9, 13}
	for _, kind := range backends {
		for _, ttl := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ttl=%t", kind, ttl), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(45, 7))
				rows := map[string][][2]int{}
				var steps []mbStep
				rec := func(c runtime.ChangeKind, k string, r [2]int) {
					steps = append(steps, mbStep{rec: changed(c, k, r[0], fmt.Sprintf("u%d", r[1]))})
				}
				for range 200 {
					if rng.IntN(60) == 0 {
						steps = append(steps, mbStep{barrier: true})
					}
					k := fmt.Sprintf("k%d", rng.IntN(2))
					if n := len(rows[k]); n > 0 && rng.IntN(2) == 0 {
						i := rng.IntN(n)
						old := rows[k][i]
						rows[k] = append(rows[k][:i:i], rows[k][i+1:]...)
						if rng.IntN(2) == 0 {
							rec(runtime.ChangeDelete, k, old)
							continue
						}
						rec(runtime.ChangeUpdateBefore, k, old)
						r := [2]int{amounts[rng.IntN(3)], rng.IntN(2)}
						rows[k] = append(rows[k], r)
						rec(runtime.ChangeUpdateAfter, k, r)
						continue
					}
					r := [2]int{amounts[rng.IntN(3)], rng.IntN(2)}
					rows[k] = append(rows[k], r)
					rec(runtime.ChangeInsert, k, r)
				}
				newRun := func(size int) *mbRun {
					return &mbRun{t: t, kind: kind, size: size, newFn: func() *Aggregate {
						p := AggregateParams{Aggregates: distinctFilterSpecs(t, true)}
						if size > 0 {
							p.MiniBatch = &MiniBatchParams{Size: size}
						}
						if ttl {
							p.StateTTL = StateTTLParams{TTL: time.Hour}
						}
						return NewAggregate(p, true)
					}}
				}
				plain := newRun(0)
				plain.run(steps)
				want := map[string]string{}
				for k, rs := range rows {
					if len(rs) > 0 {
						want[k] = distinctModelRow(k, rs, true)
					}
				}
				if got := plain.tables[len(plain.tables)-1]; !reflect.DeepEqual(got, want) {
					t.Fatalf("without mini_batch: table\n%v\nwant (model)\n%v", got, want)
				}
				for _, size := range []int{2, 7, 1000} {
					b := newRun(size)
					b.plain = plain
					b.run(steps)
					if !reflect.DeepEqual(b.tables, plain.tables) {
						t.Fatalf("mini_batch %d: tables at the checkpoints and the end\n%v\nwant (without mini_batch)\n%v", size, b.tables, plain.tables)
					}
				}
			})
		}
	}
}

// TestAggregateEarlyFoldEvalErrorMidBatch: a record whose of fails (a sum
// over a string, a missing field) in the middle of an early-folding
// batch is a bad record (eval_error) and folds nothing: the records
// before and after it in the batch are folded, and the rows are exactly
// those without mini_batch.
func TestAggregateEarlyFoldEvalErrorMidBatch(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			run := func(mb *MiniBatchParams) (map[string]string, int) {
				p := AggregateParams{MiniBatch: mb, Aggregates: []AggregateSpec{
					{Name: "total", Fn: AggSum, Of: compiled(t, "amount")},
					{Name: "n", Fn: AggCount},
					{Name: "lo", Fn: AggMin, Of: compiled(t, "amount")},
					{Name: "hi", Fn: AggMax, Of: compiled(t, "amount")},
					{Name: "mean", Fn: AggAvg, Of: compiled(t, "amount")},
					{Name: "last_user", Fn: AggLast, Of: compiled(t, "user")},
				}}
				agg := NewAggregate(p, false)
				if mb != nil && !agg.foldsEarly() {
					t.Fatal("the aggregate does not fold early")
				}
				h, err := openStateful(t, kind, t.TempDir(), nil, nil, agg)
				if err != nil {
					t.Fatal(err)
				}
				bad := &recordErrors{}
				h.feed(bad, payment("a", 5, "u1"))
				h.feed(bad, payment("a", 4, "u2"), payment("a", "x", "u3"), payment("b", 1, "u1"),
					runtime.Record{Key: []byte("a"), Value: []byte(`{"user":"u4"}`)}, payment("a", 2, "u5"))
				for _, e := range bad.errs {
					if e.Reason != runtime.ReasonEvalError {
						t.Fatalf("bad record %v, want an eval_error", e)
					}
				}
				return lastRows(h.finish()), len(bad.errs)
			}
			want := map[string]string{
				"a": `{"key":"a","total":11,"n":3,"lo":2,"hi":5,"mean":3.6666666666666665,"last_user":"u5"}`,
				"b": `{"key":"b","total":1,"n":1,"lo":1,"hi":1,"mean":1,"last_user":"u1"}`,
			}
			for _, mb := range []*MiniBatchParams{nil, {Size: 1000}, {Size: 2}} {
				got, nbad := run(mb)
				if nbad != 2 || len(got) != len(want) || got["a"] != want["a"] || got["b"] != want["b"] {
					t.Fatalf("mini_batch %v: %d bad records, rows %v, want 2 and %v", mb, nbad, got, want)
				}
			}
		})
	}
}
