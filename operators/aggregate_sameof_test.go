package operators

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// TestAggregateSameOfEvaluatedOnce: aggregates whose of has the same text
// (q17's min, max and sum of bid.price) share one evaluation per record
// (aggregator.sameOf), and give exactly what evaluating each of gives:
// the same rows and the same errors, in the same order, over random
// records whose amount is an integer, a double, a string, null, an
// object or missing (an eval_error, or a sum or min of a non-number,
// named after the first aggregate that fails).
func TestAggregateSameOfEvaluatedOnce(t *testing.T) {
	specs := []AggregateSpec{
		{Name: "first", Fn: AggFirst, Of: compiled(t, "amount")},
		{Name: "n", Fn: AggCount},
		{Name: "total", Fn: AggSum, Of: compiled(t, "amount")},
		{Name: "lo", Fn: AggMin, Of: compiled(t, "amount")},
		{Name: "big", Fn: AggSum, Of: compiled(t, "amount > 10 ? 1 : 0")},
		{Name: "users", Fn: AggCountDistinct, Of: compiled(t, "user")},
		{Name: "last", Fn: AggLast, Of: compiled(t, "amount")},
		{Name: "hi", Fn: AggMax, Of: compiled(t, "amount")},
		{Name: "last_user", Fn: AggLast, Of: compiled(t, "user")},
	}
	rng := rand.New(rand.NewPCG(7, 7))
	var recs []runtime.Record
	for i := range 300 {
		key := fmt.Sprintf("k%d", rng.IntN(5))
		var v string
		switch rng.IntN(10) {
		case 0:
			v = fmt.Sprintf(`{"amount":%g,"user":"u%d"}`, rng.Float64()*40-20, rng.IntN(4))
		case 1:
			v = fmt.Sprintf(`{"amount":"x%d","user":"u%d"}`, i, rng.IntN(4))
		case 2:
			v = `{"user":"u1"}`
		case 3:
			v = `{"amount":null,"user":"u2"}`
		case 4:
			v = `{"amount":{"a":1},"user":"u3"}`
		default:
			v = fmt.Sprintf(`{"amount":%d,"user":"u%d"}`, rng.IntN(41)-20, rng.IntN(4))
		}
		recs = append(recs, runtime.Record{Key: []byte(key), Value: []byte(v)})
	}
	run := func(shared bool, mb *MiniBatchParams) []string {
		ctx := context.Background()
		ch := runtime.NewChannel(1024)
		out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
		f := NewAggregate(AggregateParams{Emit: EmitEveryUpdate, Aggregates: specs, MiniBatch: mb}, false)
		if want := []int{-1, -1, 0, 0, -1, -1, 0, 0, 5}; !reflect.DeepEqual(f.sameOf, want) {
			t.Fatalf("sameOf %v, want %v", f.sameOf, want)
		}
		if !shared {
			f.sameOf, f.vals = nil, nil
		}
		op := NewKeyedProcessOperator(OpenContext{Operator: "op", Parallelism: 1}, opener(state.KindHashmap, t.TempDir()), nil, f, out)
		if err := op.Open(ctx); err != nil {
			t.Fatal(err)
		}
		defer op.Close()
		var got []string
		for i, r := range recs {
			if err := op.ProcessRecord(ctx, 0, r); err != nil {
				got = append(got, fmt.Sprintf("record %d: %v", i, err))
			}
			got = append(got, elementsText(ch)...)
		}
		if err := op.EndInput(ctx); err != nil {
			t.Fatal(err)
		}
		return append(got, elementsText(ch)...)
	}
	for _, mb := range []*MiniBatchParams{nil, {Size: 7}} {
		want, got := run(false, mb), run(true, mb)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("mini_batch %v: with the shared evaluation\n%v\nwant (each of evaluated)\n%v", mb, got, want)
		}
		errs := 0
		for _, s := range got {
			if len(s) > 7 && s[:7] == "record " {
				errs++
			}
		}
		if errs < 50 || len(got)-errs < 150 {
			t.Fatalf("mini_batch %v: %d errors and %d rows; want both kinds (the inputs are meant to fail often)", mb, errs, len(got)-errs)
		}
	}
}
