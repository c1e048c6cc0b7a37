package operators

import (
	"context"
	"testing"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// countCollector counts the records collected and keeps the last one's
// Decoded result, retaining nothing else.
type countCollector struct {
	n   int
	doc any
}

func (c *countCollector) Collect(rec runtime.Record) error {
	c.n++
	c.doc, _ = rec.Decoded()
	return nil
}

// TestFilterHandsOnDocWithoutCopy: a filter hands the record on with its
// own reused expression.Doc (RecordEnv.Keep through a
// runtime.DecodedSlot), not a copy made per record: the same Doc for every
// record, and no allocation per record for it. A record handed on earlier
// and kept (as a buffering operator downstream would) no longer finds
// that Doc once the filter read the next record, and read again it sees
// its own value, not the later record's.
func TestFilterHandsOnDocWithoutCopy(t *testing.T) {
	ctx := context.Background()
	f := NewFilter(&FilterParams{Condition: mustExpr[BoolExpression](t, "amount < 500")})
	kept := &sliceCollector{}
	first := testRecord(`{"amount":17,"note":"first"}`)
	first.SetDecoded(runtime.ValidJSON{})
	if err := f.ProcessElement(ctx, first, kept); err != nil {
		t.Fatal(err)
	}
	v, ok := kept.recs[0].Decoded()
	d1, isDoc := v.(*expression.Doc)
	if !ok || !isDoc {
		t.Fatalf("the filter handed on Decoded() = %#v, %v; want its expression.Doc", v, ok)
	}
	second := testRecord(`{"amount":42,"note":"second"}`)
	second.SetDecoded(runtime.ValidJSON{})
	if err := f.ProcessElement(ctx, second, kept); err != nil {
		t.Fatal(err)
	}
	if v, _ := kept.recs[1].Decoded(); v != any(d1) {
		t.Errorf("second record handed on %p, want the filter's reused Doc %p", v, d1)
	}
	if v, ok := kept.recs[0].Decoded(); ok {
		t.Errorf("the first record still finds a decoded form %#v after the filter read the next record", v)
	}
	var env RecordEnv
	got, err := mustExpr[Expression](t, "note").Program().Eval(env.Reset(&kept.recs[0]))
	if err != nil || got != "first" {
		t.Fatalf("the kept first record reads note = %#v, %v; want \"first\"", got, err)
	}

	// One record, with the mark of checked JSON as a source attaches it,
	// filtered again and again: the Doc handed on is not copied.
	c := &countCollector{}
	rec := testRecord(`{"amount":317,"note":"x"}`)
	var slot runtime.DecodedSlot
	allocs := testing.AllocsPerRun(200, func() {
		r := rec
		r.SetDecodedIn(&slot, runtime.ValidJSON{})
		if err := f.ProcessElement(ctx, r, c); err != nil {
			t.Fatal(err)
		}
	})
	if c.doc != any(d1) {
		t.Errorf("handed on %p, want the filter's Doc %p", c.doc, d1)
	}
	// What remains per record: the Doc's string of the JSON, the field's
	// value 317 as an interface, the record copied for the call.
	if !raceEnabled && allocs > 3 { // the race detector allocates for itself
		t.Errorf("a filtered record costs %v allocations, want at most 3 (no copy of the Doc)", allocs)
	}
}
