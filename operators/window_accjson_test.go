package operators

import (
	"encoding/json"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestAppendAccumulatorJSON: the stored form of an accumulator written
// directly (appendAccumulatorJSON) is byte for byte json.Marshal's, and
// fails where it fails, over random accumulators of every function:
// integers of both signs and zero, big numbers, doubles (-0, NaN,
// infinities), first and last values of every JSON kind with spaces, HTML
// characters, non-ASCII and U+2028, Seen lists, and odd function names.
func TestAppendAccumulatorJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 17))
	values := []string{``, `1`, `-12`, `"2023-11-14"`, `"a b"`, `"<b>&"`, `"a&b"`, `"x>y"`, `"\t"`, `"é"`, "\"\u2028\"", `{"x":1}`, `{ "x": 1 }`, `[1,2]`, `null`, `true`, `1.5e3`, `"\\u003c"`}
	fns := append(append([]AggregateFn{}, aggregateFns...), "Sum", "a<b", "x y", "é")
	ints := []int64{0, 1, -1, 42, math.MaxInt64, math.MinInt64}
	floats := []float64{0, math.Copysign(0, -1), 2.5, -1e21, 1e-7, math.NaN(), math.Inf(1)}
	direct := 0
	for range 20000 {
		a := aggAccumulator{Fn: fns[rng.IntN(len(fns))], Records: ints[rng.IntN(len(ints))], born: rng.Uint64()}
		if rng.IntN(2) == 0 {
			a.Distinct = ints[rng.IntN(len(ints))]
		}
		switch rng.IntN(6) {
		case 0:
			a.Num.Big = new(big.Int).Lsh(big.NewInt(int64(rng.IntN(9))-4), 70)
		case 1:
			a.Num.Float, a.Num.IsFloat = floats[rng.IntN(len(floats))], rng.IntN(4) > 0
		default:
			a.Num.Int = ints[rng.IntN(len(ints))]
		}
		a.Value = json.RawMessage(values[rng.IntN(len(values))])
		if len(a.Value) == 0 && rng.IntN(3) == 0 {
			a.Value = nil
		}
		if rng.IntN(5) == 0 {
			a.Seen = []string{values[1+rng.IntN(len(values)-1)]}
		}
		want, wantErr := json.Marshal(a)
		got, err := appendAccumulatorJSON([]byte("x"), a)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%+v: error %v, json.Marshal's %v", a, err, wantErr)
		}
		if err == nil && string(got) != "x"+string(want) {
			t.Fatalf("%+v:\n got %s\nwant x%s", a, got, want)
		}
		if plainAccumulator(a) {
			direct++
		}
	}
	if direct < 2000 {
		t.Errorf("only %d of 20000 written directly", direct)
	}
}
