package operators

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// markingCollector records, for each record collected, whether it was
// marked as valid JSON at the time it was collected (the mark lives in a
// slot the next row reuses).
type markingCollector struct {
	values []string
	marked []bool
}

func (c *markingCollector) Collect(rec runtime.Record) error {
	v, ok := rec.Decoded()
	c.values = append(c.values, string(rec.Value))
	c.marked = append(c.marked, ok && v == any(runtime.ValidJSON{}))
	return nil
}

// TestAggregateRowsMarkedValidJSON: every row the aggregate emits (+I, -U
// and +U, -D) reaches the next operator of the chain marked as valid JSON
// (the aggregate wrote it), so a map of the results does not check it
// again; the rows are the JSON the aggregate always wrote (names escaped
// as encoding/json escapes them, an average as it writes a double, NaN as
// null).
func TestAggregateRowsMarkedValidJSON(t *testing.T) {
	a := newAggregator(AggregateParams{Aggregates: []AggregateSpec{
		{Name: "n<&>", Fn: AggCount}, {Name: "avg", Fn: AggAvg},
	}}, true)
	one := []aggAccumulator{{Fn: AggCount, Records: 1}, {Fn: AggAvg, Records: 3, Num: number{Int: 10}}}
	two := []aggAccumulator{{Fn: AggCount, Records: 2}, {Fn: AggAvg, Records: 0, Num: number{Int: 10}}}
	rec := runtime.Record{Key: []byte("k<1>"), Value: []byte(`{}`)}
	c := &markingCollector{}
	if err := a.emitChanges(rec, nil, false, false, one, c); err != nil {
		t.Fatal(err)
	}
	if err := a.emitChanges(rec, a.output(rec.Key, one), true, false, two, c); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"key":"k\u003c1\u003e","n\u003c\u0026\u003e":1,"avg":3.3333333333333335}`,
		`{"key":"k\u003c1\u003e","n\u003c\u0026\u003e":1,"avg":3.3333333333333335}`,
		`{"key":"k\u003c1\u003e","n\u003c\u0026\u003e":2,"avg":null}`,
	}
	if len(c.values) != len(want) {
		t.Fatalf("emitted %q, want %q", c.values, want)
	}
	for i := range want {
		if c.values[i] != want[i] || !c.marked[i] || !json.Valid([]byte(c.values[i])) {
			t.Errorf("row %d: %s marked %v, want %s marked valid JSON", i, c.values[i], c.marked[i], want[i])
		}
	}
}

// TestAppendFloatAsMarshal: appendFloat writes a finite double as
// encoding/json's Marshal does (it did call Marshal), NaN and the
// infinities as null.
func TestAppendFloatAsMarshal(t *testing.T) {
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1.5, 1.0 / 3, 1e20, 1e21, 123456789e15, 1e-6, 1e-7, 5e-324,
		math.MaxFloat64, -math.SmallestNonzeroFloat64, 2.5e-9, 41.768, 4540, 9007199254740993} {
		want, _ := json.Marshal(f)
		if got := appendFloat([]byte("x"), f); string(got) != "x"+string(want) {
			t.Errorf("appendFloat(%v) = %s, want x%s", f, got, want)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if got := appendFloat(nil, f); string(got) != "null" {
			t.Errorf("appendFloat(%v) = %s, want null", f, got)
		}
	}
}
