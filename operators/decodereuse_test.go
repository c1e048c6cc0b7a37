package operators

import (
	"context"
	"reflect"
	"testing"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestDecodeOncePerChain: an operator hands on with the record it passes
// what its expressions read of the value (runtime.Record.Decoded): a
// filter whose condition reads a field hands on the expression.Doc
// holding that field, decoded, and not the whole value; one that read
// value hands on the Doc decoded whole; the next operator of the chain
// starts from what it is given (here a deliberately wrong decoding, to
// tell it from the JSON's). A map that replaces the value hands on its
// result when the result is what the JSON it wrote decodes to and not a
// map literal's (EvalJSON writes that from CEL's values, building no Go
// value), else the mark that the JSON is valid (runtime.ValidJSON), from which the next
// operator reads without checking it again; a map that keeps the value
// hands on the Doc it read; a record whose value changed loses all.
func TestDecodeOncePerChain(t *testing.T) {
	ctx := context.Background()
	fields := NewFilter(&FilterParams{Condition: mustExpr[BoolExpression](t, "amount > 100")})
	kept := &sliceCollector{}
	if err := fields.ProcessElement(ctx, testRecord(`{"amount":250,"note":"x"}`), kept); err != nil {
		t.Fatal(err)
	}
	if len(kept.recs) != 1 {
		t.Fatalf("a filter of a field kept %d records, want 1", len(kept.recs))
	}
	v, ok := kept.recs[0].Decoded()
	doc, isDoc := v.(*expression.Doc)
	if !ok || !isDoc {
		t.Fatalf("a filter of a field handed on Decoded() = %#v, %v; want its expression.Doc", v, ok)
	}
	if _, whole := doc.Decoded(); whole {
		t.Error("a filter of a field decoded the whole value")
	}

	f := NewFilter(&FilterParams{Condition: mustExpr[BoolExpression](t, "value.amount > 100")})
	kept = &sliceCollector{}
	if err := f.ProcessElement(ctx, testRecord(`{"amount":250}`), kept); err != nil {
		t.Fatal(err)
	}
	v, _ = kept.recs[0].Decoded()
	if doc, ok := v.(*expression.Doc); !ok {
		t.Fatalf("filter of value handed on %#v, want a Doc", v)
	} else if w, ok := doc.Decoded(); !ok || !reflect.DeepEqual(w, map[string]any{"amount": int64(250)}) {
		t.Fatalf("filter of value's Doc: Decoded() = %#v, %v; want the decoded value {amount: 250}", w, ok)
	}

	// The map reuses the attached value: a sentinel decoding shows it
	// did not decode the JSON bytes.
	rec := testRecord(`{"amount":250}`)
	rec.SetDecoded(map[string]any{"amount": int64(7)})
	m := NewMap(&MapParams{Value: mustExpr[Expression](t, `{"a": amount, "s": "\u00e9\n", "f": 1.5, "l": [null]}`)})
	out := &sliceCollector{}
	if err := m.ProcessElement(ctx, rec, out); err != nil {
		t.Fatal(err)
	}
	const want = `{"a":7,"f":1.5,"l":[null],"s":"é\n"}`
	if got := string(out.recs[0].Value); got != want {
		t.Errorf("map after a decoded record gave %s, want %s (the attached value)", got, want)
	}
	// A map literal's result is written from CEL's values without being
	// built as Go values (expression.Program.EvalJSON): the map hands on
	// the mark of valid JSON, from which the next operator reads the
	// fields it needs.
	if v, ok := out.recs[0].Decoded(); !ok || v != any(runtime.ValidJSON{}) {
		t.Errorf("a map of a literal hands on Decoded() = %#v, %v; want runtime.ValidJSON", v, ok)
	}
	// A result that is not a literal (an object of the record) is handed
	// on as it is when it reads back the same.
	mo := NewMap(&MapParams{Value: mustExpr[Expression](t, `value.inner`)})
	out = &sliceCollector{}
	if err := mo.ProcessElement(ctx, testRecord(`{"inner":{"a":7,"s":"é\n","l":[null]}}`), out); err != nil {
		t.Fatal(err)
	}
	back, _ := expression.DecodeJSON([]byte(`{"a":7,"l":[null],"s":"é\n"}`))
	if v, ok := out.recs[0].Decoded(); !ok || !reflect.DeepEqual(v, back) || string(out.recs[0].Value) != `{"a":7,"l":[null],"s":"é\n"}` {
		t.Errorf("a map of value.inner gave %s, hands on Decoded() = %#v, %v; want its result %#v", out.recs[0].Value, v, ok, back)
	}

	// A result that reads back otherwise (2.0 is written 2, an int): the
	// mark of valid JSON, and the next map reads 2 as an int.
	m2 := NewMap(&MapParams{Value: mustExpr[Expression](t, `{"d": 2.0}`)})
	out = &sliceCollector{}
	if err := m2.ProcessElement(ctx, testRecord(`{}`), out); err != nil {
		t.Fatal(err)
	}
	if v, ok := out.recs[0].Decoded(); !ok || v != any(runtime.ValidJSON{}) || string(out.recs[0].Value) != `{"d":2}` {
		t.Fatalf("map of 2.0: %s, Decoded() = %#v, %v; want {\"d\":2} marked valid JSON", out.recs[0].Value, v, ok)
	}
	m3 := NewMap(&MapParams{Value: mustExpr[Expression](t, `{"t": d + 1}`)})
	out3 := &sliceCollector{}
	if err := m3.ProcessElement(ctx, out.recs[0], out3); err != nil {
		t.Fatal(err)
	}
	if got := string(out3.recs[0].Value); got != `{"t":3}` {
		t.Errorf("after a map of 2.0 the next map saw %s, want d an int as the JSON says", got)
	}

	// A map of the key only keeps the value, and hands on its Doc.
	mk := NewMap(&MapParams{Key: mustExpr[Expression](t, `string(value.amount)`)})
	out = &sliceCollector{}
	if err := mk.ProcessElement(ctx, testRecord(`{"amount":3}`), out); err != nil {
		t.Fatal(err)
	}
	v, ok = out.recs[0].Decoded()
	if doc, isDoc := v.(*expression.Doc); !ok || !isDoc || string(out.recs[0].Key) != "3" {
		t.Errorf("key-only map: key %q, Decoded() = %#v, %v; want key 3 and the Doc", out.recs[0].Key, v, ok)
	} else if w, _ := doc.Decoded(); !reflect.DeepEqual(w, map[string]any{"amount": int64(3)}) {
		t.Errorf("key-only map's Doc holds %#v", w)
	}

	// A copy with another value loses the decoded value.
	changed := kept.recs[0]
	changed.Value = []byte(`{"amount":1}`)
	if _, ok := changed.Decoded(); ok {
		t.Errorf("a record whose value changed still returns the old decoded value")
	}
}

// TestTimestampAssignerHandsOnItsDoc: a source's timestamp expression
// reads the fields it needs of a record the source marked valid JSON, and
// the record keeps the Doc holding them (the source gives it to the
// record it emits, runtime.Record.TakeDecoded), so a filter after it in
// the chain reads those fields without decoding them again.
func TestTimestampAssignerHandsOnItsDoc(t *testing.T) {
	assign := NewTimestampAssigner(mustExpr[Expression](t, "bid.dateTime"), TimestampMillis)
	rec := testRecord(`{"event_type":2,"bid":{"dateTime":1700000000999,"price":5}}`)
	rec.SetDecoded(runtime.ValidJSON{})
	ts, err := assign(&rec)
	if err != nil || ts.UnixMilli() != 1700000000999 {
		t.Fatalf("timestamp %v, %v", ts, err)
	}
	v, ok := rec.Decoded()
	doc, isDoc := v.(*expression.Doc)
	if !ok || !isDoc {
		t.Fatalf("after the assigner Decoded() = %#v, %v; want a Doc", v, ok)
	}
	bid, err := expression.Compile("bid")
	if err != nil {
		t.Fatal(err)
	}
	b1, err := bid.Eval(expression.NewEnv(&expression.Input{Doc: doc}))
	if err != nil {
		t.Fatal(err)
	}
	f := NewFilter(&FilterParams{Condition: mustExpr[BoolExpression](t, "bid.price == 5")})
	kept := &sliceCollector{}
	if err := f.ProcessElement(context.Background(), rec, kept); err != nil || len(kept.recs) != 1 {
		t.Fatalf("filter kept %d, %v", len(kept.recs), err)
	}
	v, _ = kept.recs[0].Decoded()
	if v != any(doc) {
		t.Fatalf("the filter handed on %#v, not the assigner's Doc", v)
	}
	b2, _ := bid.Eval(expression.NewEnv(&expression.Input{Doc: doc}))
	if reflect.ValueOf(b1).UnsafePointer() != reflect.ValueOf(b2).UnsafePointer() {
		t.Error("bid was decoded twice")
	}
}
