package operators

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// fanOutInputs are valid JSON values (a source checked them) of the shapes
// a Doc reads differently: plain fields, nested objects and lists, a
// repeated key (the last counts), escapes, a number too large to read
// field by field (the whole value is decoded), a missing field (an
// eval_error in the filter), not an object.
var fanOutInputs = []string{
	`{"id":1,"amount":250,"nested":{"x":1,"y":[1,2]},"tags":["a","b"]}`,
	`{"id":2,"amount":900,"note":"caf\u00e9 \"q\""}`,
	`{"id":3,"amount":1,"amount":700}`,
	`{"id":4,"amount":12345678901234567890123,"nested":{"x":2}}`,
	`{"id":5,"nested":{"x":3}}`,
	`{"id":6,"amount":-3.5e2,"nested":null}`,
	`[1,2,3]`,
	`{"id":7,"amount":100,"nested":{"x":{"deep":true}},"tags":[]}`,
}

// fanOut runs inputs through a fan-out as a source's chain does
// (runtime.Output hands the same record, by value, to each branch in
// turn): branch one maps (a value holding the whole input and fields of
// it), branch two filters and maps what it keeps. form attaches the
// decoded form the source gives each record: "shared" its one reused
// expression.Doc (what a Kafka source attaches now), "mark"
// runtime.ValidJSON (what it attached before), "none" nothing. It returns
// every output value and error, in order.
func fanOut(t *testing.T, form string, inputs []string) []string {
	t.Helper()
	ctx := context.Background()
	m1 := NewMap(&MapParams{Value: mustExpr[Expression](t, `{"id": id, "whole": value, "amount": amount}`)})
	f := NewFilter(&FilterParams{Condition: mustExpr[BoolExpression](t, "amount < 500")})
	m2 := NewMap(&MapParams{Value: mustExpr[Expression](t, `{"n": has(value.nested) ? value.nested : null, "a": amount, "id": id}`)})
	out1, out2 := &sliceCollector{}, &sliceCollector{}
	var log []string
	var slot runtime.DecodedSlot
	var doc expression.Doc
	for _, in := range inputs {
		rec := testRecord(in)
		rec.Format = runtime.FormatJSON
		switch form {
		case "shared":
			doc.Reset(rec.Value, true)
			rec.SetDecodedIn(&slot, &doc)
		case "mark":
			rec.SetDecodedIn(&slot, runtime.ValidJSON{})
		}
		out1.recs, out2.recs = out1.recs[:0], out2.recs[:0]
		err1 := m1.ProcessElement(ctx, rec, out1)
		var kept sliceCollector
		err2 := f.ProcessElement(ctx, rec, &kept)
		for _, k := range kept.recs {
			if err := m2.ProcessElement(ctx, k, out2); err != nil {
				err2 = err
			}
		}
		log = append(log, fmt.Sprintf("in %s | map: %v", in, err1))
		for _, o := range out1.recs {
			log = append(log, "  map -> "+string(o.Value))
		}
		log = append(log, fmt.Sprintf("  filter+map: %v", err2))
		for _, o := range out2.recs {
			log = append(log, "  filter+map -> "+string(o.Value))
		}
		if form == "shared" && len(kept.recs) == 1 {
			// The filter handed on the source's Doc, not one of its own.
			if v, ok := kept.recs[0].Decoded(); !ok || v != any(&doc) {
				t.Errorf("%s: the filter handed on %#v, want the shared Doc", in, v)
			}
		}
	}
	return log
}

// TestFanOutSharedDocSameOutput: a fan-out of a map branch and a
// filter-then-map branch gives byte for byte the same outputs and errors
// whether its branches read one shared Doc per record (a Kafka source's),
// each its own from the mark of checked JSON (before), or each decodes
// the record itself: the map branch that reads the whole value and
// writes new bytes changes nothing the filter branch reads after it.
func TestFanOutSharedDocSameOutput(t *testing.T) {
	want := fanOut(t, "none", fanOutInputs)
	for _, form := range []string{"shared", "mark"} {
		if got := fanOut(t, form, fanOutInputs); !slices.Equal(got, want) {
			t.Errorf("form %s:\n%s\nwant (no decoded form):\n%s", form, got, want)
		}
	}
	// Each record twice: the Doc reset for a record does not keep what
	// the previous one decoded.
	twice := slices.Concat(fanOutInputs, fanOutInputs)
	if got, want := fanOut(t, "shared", twice), fanOut(t, "none", twice); !slices.Equal(got, want) {
		t.Errorf("twice:\n%s\nwant:\n%s", got, want)
	}
}

// TestFanOutFiltersShareOneDoc: two filters of a fan-out (the table-join
// and interval-join scenarios' split of one source) on a record with the
// source's shared Doc read it without a Doc, an index or a field of their
// own: the second costs no allocation beyond the record copy, where with
// the mark of checked JSON (before) it indexed the JSON again. Both hand
// the shared Doc on.
func TestFanOutFiltersShareOneDoc(t *testing.T) {
	ctx := context.Background()
	even := NewFilter(&FilterParams{Condition: mustExpr[BoolExpression](t, "id % 2 == 0")})
	odd := NewFilter(&FilterParams{Condition: mustExpr[BoolExpression](t, "id % 2 == 1")})
	value := []byte(`{"id":317,"key":"k-42","amount":1234,"note":"some text of the record"}`)
	c1, c2 := &countCollector{}, &countCollector{}
	var slot runtime.DecodedSlot
	var doc expression.Doc
	run := func(shared, both bool) float64 {
		rec := testRecord(string(value))
		rec.Format = runtime.FormatJSON
		return testing.AllocsPerRun(200, func() {
			r := rec
			if shared {
				doc.Reset(r.Value, true)
				r.SetDecodedIn(&slot, &doc)
			} else {
				r.SetDecodedIn(&slot, runtime.ValidJSON{})
			}
			if err := even.ProcessElement(ctx, r, c1); err != nil {
				t.Fatal(err)
			}
			if both {
				if err := odd.ProcessElement(ctx, r, c2); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	one, two := run(true, false), run(true, true)
	if c2.n == 0 || c2.doc != any(&doc) {
		t.Fatalf("the odd filter kept %d records handing on %p, want the shared Doc %p", c2.n, c2.doc, &doc)
	}
	if raceEnabled {
		return // the race detector allocates for itself
	}
	if two != one {
		t.Errorf("two filters on the shared Doc cost %v allocations per record, one %v: the second read it again", two, one)
	}
	if mark := run(false, true); mark <= two {
		t.Errorf("two filters with the mark of checked JSON cost %v allocations, shared %v: want the mark to cost more (each indexes its own Doc)", mark, two)
	}
}
