package operators

import (
	"context"
	"testing"
)

// TestDecodeOncePerChain: a filter hands the value its condition decoded
// on with the record it keeps (runtime.Record.Decoded), and a map after it
// in the chain evaluates on that decoded value instead of decoding the
// JSON again: the map's result is computed from the attached value (here
// deliberately not the JSON's decoding, to tell them apart). A map that
// leaves the value as it is passes the decoded value on too; one that
// replaces the value passes nothing (the decoded value belongs to the old
// bytes), and neither does a record whose value an operator changed.
func TestDecodeOncePerChain(t *testing.T) {
	ctx := context.Background()
	f := NewFilter(&FilterParams{Condition: mustExpr[BoolExpression](t, "amount > 100")})
	kept := &sliceCollector{}
	if err := f.ProcessElement(ctx, testRecord(`{"amount":250}`), kept); err != nil {
		t.Fatal(err)
	}
	if len(kept.recs) != 1 {
		t.Fatalf("filter kept %d records, want 1", len(kept.recs))
	}
	v, ok := kept.recs[0].Decoded()
	if m, isMap := v.(map[string]any); !ok || !isMap || m["amount"] != int64(250) {
		t.Fatalf("filter's output Decoded() = %v, %v; want the decoded value {amount: 250}", v, ok)
	}

	// The map reuses the attached value: a sentinel decoding shows it
	// did not decode the JSON bytes.
	rec := testRecord(`{"amount":250}`)
	rec.SetDecoded(map[string]any{"amount": int64(7)})
	m := NewMap(&MapParams{Value: mustExpr[Expression](t, `{"a": amount}`)})
	out := &sliceCollector{}
	if err := m.ProcessElement(ctx, rec, out); err != nil {
		t.Fatal(err)
	}
	if got := string(out.recs[0].Value); got != `{"a":7}` {
		t.Errorf("map after a decoded record gave %s, want {\"a\":7} (the attached value)", got)
	}
	if _, ok := out.recs[0].Decoded(); ok {
		t.Errorf("a map that replaced the value passed a decoded value on")
	}

	// A map of the key only keeps the value, and passes its decoding on.
	mk := NewMap(&MapParams{Key: mustExpr[Expression](t, `string(amount)`)})
	out = &sliceCollector{}
	if err := mk.ProcessElement(ctx, testRecord(`{"amount":3}`), out); err != nil {
		t.Fatal(err)
	}
	if v, ok := out.recs[0].Decoded(); !ok || v.(map[string]any)["amount"] != int64(3) || string(out.recs[0].Key) != "3" {
		t.Errorf("key-only map: key %q, Decoded() = %v, %v; want key 3 and the decoded value", out.recs[0].Key, v, ok)
	}

	// A copy with another value loses the decoded value.
	changed := kept.recs[0]
	changed.Value = []byte(`{"amount":1}`)
	if _, ok := changed.Decoded(); ok {
		t.Errorf("a record whose value changed still returns the old decoded value")
	}
}
