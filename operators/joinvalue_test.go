package operators

import (
	"fmt"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// lazySelects are select expressions reading left and right in every way
// CEL reads a map: field reads (present, missing, nested, indexed,
// has(), optional), size, in, iteration, equality, conversion, the whole
// side as a result or inside one, and value.
var lazySelects = []string{
	`{"id": left.id, "amount": left.amount, "last": right == null ? null : right.amount}`,
	`left`,
	`right`,
	`value`,
	`[left, right]`,
	`{"l": left, "r": right}`,
	`left.missing`,
	`has(left.id) && has(left.nope)`,
	`left.?id.orValue(-1)`,
	`left.?nope.orValue("none")`,
	`left["id"]`,
	`left[right.k]`,
	`"id" in left`,
	`1 in left`,
	`size(left)`,
	`left.all(k, k != "zz")`,
	`left.exists(k, left[k] == 1)`,
	`left.filter(k, k == "id")`,
	`left == right`,
	`left == {"id": 1}`,
	`right == null`,
	`left != null && right != null`,
	`type(left) == map`,
	`string(left)`,
	`left.nested.a`,
	`left.nested`,
	`left.list[0]`,
	`left + 1`,
	`dyn(left).id`,
	`left.id + right.amount`,
}

// lazyValues are sides of several shapes: objects that read field by field,
// objects that do not (repeated names, an exponent), other JSON values,
// invalid JSON and text.
var lazyValues = []struct {
	raw  string
	text bool
}{
	{raw: `{"id":1,"key":"k","amount":7,"note":"xx"}`},
	{raw: `{"id": 1, "nested": {"a": [1, 2.5, "s"]}, "list": [3], "k": "id"}`},
	{raw: `{"amount":3,"k":"amount"}`},
	{raw: `{"id":1,"id":2}`},
	{raw: `{"id":1e3,"x":"\u00e9"}`},
	{raw: `{}`},
	{raw: `[1,2]`},
	{raw: `"str"`},
	{raw: `12`},
	{raw: `null`},
	{raw: `{"id":`},
	{raw: `plain text`, text: true},
	{raw: ""},
}

// selectOver evaluates sel with the sides as given and returns the output
// value or the error's text.
func selectOver(sel Expression, left, right any) string {
	var (
		in  expression.Input
		env expression.Env
	)
	rec := runtime.Record{Key: []byte("k"), Value: []byte("{}"), Timestamp: time.UnixMilli(5)}
	o, err := selectJoinOutput(sel, &in, &env, map[string]any{}, rec, left, right)
	if err != nil {
		return "error: " + err.Error()
	}
	return string(o.Value)
}

// TestLazyObjectEqualsDecoded: select over the sides as joinSide hands them
// (lazyObject for objects read field by field) gives exactly the output, or
// the error, select gives over the sides decoded whole (decodeValue), for
// every expression and every pair of values, and a row's Doc read by one
// select reads the same for the next.
func TestLazyObjectEqualsDecoded(t *testing.T) {
	var l, r joinSide
	for _, src := range lazySelects {
		sel, err := CompileExpression(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		for _, a := range lazyValues {
			for _, b := range lazyValues {
				rawA, rawB := []byte(a.raw), []byte(b.raw)
				if a.raw == "" {
					rawA = nil
				}
				if b.raw == "" {
					rawB = nil
				}
				want := selectOver(sel, decodeValue(rawA, a.text), decodeValue(rawB, b.text))
				got := selectOver(sel, l.value(rawA, a.text), r.value(rawB, b.text))
				if got != want {
					t.Errorf("select %s, left %s, right %s:\n got %s\nwant %s", src, a.raw, b.raw, got, want)
				}
				// A kept row's Doc, read again.
				row := tableValue{Value: rawB, Text: b.text}.withDoc()
				for range 2 {
					var right any
					if row.doc != nil {
						right = r.of(row.doc)
					} else {
						right = decodeValue(rawB, b.text)
					}
					if got := selectOver(sel, l.value(rawA, a.text), right); got != want {
						t.Errorf("select %s over a kept row, left %s, right %s:\n got %s\nwant %s", src, a.raw, b.raw, got, want)
					}
				}
			}
		}
	}
}

// FuzzLazyObjectEqualsDecoded: for any two JSON texts, the selects of
// lazySelects give the same output or error over the lazy sides as over
// the sides decoded whole.
func FuzzLazyObjectEqualsDecoded(f *testing.F) {
	for _, a := range lazyValues {
		f.Add(a.raw, `{"amount":1,"k":"id"}`)
	}
	sels := make([]Expression, len(lazySelects))
	for i, src := range lazySelects {
		var err error
		if sels[i], err = CompileExpression(src); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		var l, r joinSide
		for i, sel := range sels {
			want := selectOver(sel, decodeValue([]byte(a), false), decodeValue([]byte(b), false))
			got := selectOver(sel, l.value([]byte(a), false), r.value([]byte(b), false))
			if got != want {
				t.Fatalf("select %s, left %q, right %q:\n got %s\nwant %s", lazySelects[i], a, b, got, want)
			}
		}
	})
}

// TestLazyObjectDecodesOnlyWhatIsRead: a select reading two fields of a
// side decodes those two, not the whole value.
func TestLazyObjectDecodesOnlyWhatIsRead(t *testing.T) {
	sel, err := CompileExpression(`{"id": left.id, "amount": left.amount}`)
	if err != nil {
		t.Fatal(err)
	}
	var l joinSide
	v := l.value([]byte(`{"id":1,"amount":2,"note":"long"}`), false)
	if got := selectOver(sel, v, nil); got != `{"amount":2,"id":1}` {
		t.Fatalf("output %s", got)
	}
	if _, whole := l.doc.Decoded(); whole {
		t.Error("the whole left value was decoded for two field reads")
	}
	if fmt.Sprint(l.doc.Whole()) != "map[amount:2 id:1 note:long]" {
		t.Errorf("whole %v", l.doc.Whole())
	}
}
