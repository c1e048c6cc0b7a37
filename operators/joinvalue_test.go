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
// every expression and every pair of values, and a kept table row's decoded value read by one
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
				// A kept row's decoded value, read again.
				row := tableValue{Value: rawB, Text: b.text}.withRight()
				for range 2 {
					right := row.decoded()
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

// joinOutputDecoded is what joinOutput.emit gave before its sides were
// lazy: select over left and right decoded whole (decodeValue, a nil row
// null) and the extra fields, the output value or the error's text.
func joinOutputDecoded(sel Expression, left, right *joinRow, extra string) string {
	side := func(r *joinRow) any {
		if r == nil {
			return nil
		}
		return decodeValue(r.Value, r.Text)
	}
	joined := map[string]any{"left": side(left), "right": side(right)}
	if extra != "" {
		v, err := expression.DecodeJSON([]byte("{" + extra[1:] + "}"))
		if err != nil {
			return "error: " + err.Error()
		}
		for k, e := range v.(map[string]any) {
			joined[k] = e
		}
	}
	in := expression.Input{Value: joined, Key: []byte("k"), Timestamp: time.UnixMilli(5)}
	var env expression.Env
	env.Reset(&in)
	v, err := sel.Program().Eval(&env)
	if err != nil {
		return "error: " + EvalRecordError(err).Error()
	}
	b, err := expression.EncodeJSON(v)
	if err != nil {
		return "error: " + resultError(sel, "select", err.Error()).Error()
	}
	return string(b)
}

// TestJoinOutputLazyEqualsDecoded: joinOutput.emit, whose sides are lazy
// (joinSide), writes for every select of lazySelects and every pair of
// lazyValues (and a missing row on either side) exactly the value, key and
// timestamp, or the error, that select over the sides decoded whole gives:
// with no row pinned, with the left row pinned and paired with every right
// row twice (its Doc read by earlier pairs), with the right row pinned,
// and with extra fields (window_join's window_start/window_end).
func TestJoinOutputLazyEqualsDecoded(t *testing.T) {
	rows := []*joinRow{nil}
	for _, v := range lazyValues {
		r := &joinRow{Value: []byte(v.raw), Text: v.text}
		if v.raw == "" {
			r.Value = nil
		}
		rows = append(rows, r)
	}
	emitted := func(o *joinOutput, left, right *joinRow, extra string) string {
		var c sliceCollector
		if err := o.emit([]byte("k"), left, right, 5, extra, &c); err != nil {
			return "error: " + err.Error()
		}
		if len(c.recs) != 1 || string(c.recs[0].Key) != "k" || c.recs[0].Timestamp.UnixMilli() != 5 {
			return fmt.Sprintf("bad output %v", c.recs)
		}
		return string(c.recs[0].Value)
	}
	for _, src := range lazySelects {
		sel, err := CompileExpression(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		o := &joinOutput{sel: sel}
		for _, extra := range []string{"", `,"window_start":1000,"window_end":2000`} {
			for _, a := range rows {
				o.pin(a)
				for range 2 {
					for _, b := range rows {
						if got, want := emitted(o, a, b, extra), joinOutputDecoded(sel, a, b, extra); got != want {
							t.Fatalf("select %s, extra %q, left %v (pinned), right %v:\n got %s\nwant %s", src, extra, a, b, got, want)
						}
					}
				}
				o.pin(nil)
				for _, b := range rows {
					if got, want := emitted(o, a, b, extra), joinOutputDecoded(sel, a, b, extra); got != want {
						t.Fatalf("select %s, extra %q, left %v, right %v:\n got %s\nwant %s", src, extra, a, b, got, want)
					}
					o.pin(b)
					if got, want := emitted(o, a, b, extra), joinOutputDecoded(sel, a, b, extra); got != want {
						t.Fatalf("select %s, extra %q, left %v, right %v (pinned):\n got %s\nwant %s", src, extra, a, b, got, want)
					}
					o.pin(nil)
				}
			}
		}
	}
}

// TestJoinOutputDecodesOnlyWhatIsRead: a join's select reading two fields
// of each side decodes those fields, not either side whole.
func TestJoinOutputDecodesOnlyWhatIsRead(t *testing.T) {
	sel, err := CompileExpression(`{"id": left.id, "price": right.price}`)
	if err != nil {
		t.Fatal(err)
	}
	o := &joinOutput{sel: sel}
	left := &joinRow{Value: []byte(`{"id":1,"name":"long","extra":[1,2,3]}`)}
	right := &joinRow{Value: []byte(`{"price":7,"bidder":9,"url":"u"}`)}
	var c sliceCollector
	o.pin(left)
	if err := o.emit([]byte("k"), left, right, 5, "", &c); err != nil {
		t.Fatal(err)
	}
	if len(c.recs) != 1 || string(c.recs[0].Value) != `{"id":1,"price":7}` {
		t.Fatalf("output %v", c.recs)
	}
	if _, whole := o.pinnedSide.doc.Decoded(); whole {
		t.Error("the pinned left value was decoded whole for one field read")
	}
	if _, whole := o.sides[1].doc.Decoded(); whole {
		t.Error("the right value was decoded whole for one field read")
	}
}

// selectOverEncode is selectOver by the code before selectJSON: Eval, then
// EncodeJSON of its result, errors as selectJoinOutput made them.
func selectOverEncode(sel Expression, left, right any) string {
	var env expression.Env
	joined := map[string]any{"left": left, "right": right}
	env.Reset(&expression.Input{Value: joined, Key: []byte("k"), Timestamp: time.UnixMilli(5)})
	v, err := sel.Program().Eval(&env)
	if err != nil {
		return "error: " + EvalRecordError(err).Error()
	}
	b, err := expression.EncodeJSON(v)
	if err != nil {
		return "error: " + resultError(sel, "select", "is not JSON: "+err.Error()).Error()
	}
	return string(b)
}

// TestSelectJSONEqualsEncode: a join's select written by selectJSON
// (Program.EvalJSON, a map literal's result written from CEL's values)
// gives byte for byte the output, or the error, of Eval then EncodeJSON,
// over lazy and decoded sides of every shape, for the selects of
// lazySelects and map literals of every kind of value (doubles, NaN,
// nested maps and lists, non-string keys, a failing field).
func TestSelectJSONEqualsEncode(t *testing.T) {
	srcs := append([]string{
		`{"a": 1.5, "b": -0.0, "c": 1e21, "d": 100.0, "e": "<&>\u00e9", "f": b"xy", "g": null, "h": true}`,
		`{"nan": double("NaN")}`,
		`{"inf": {"x": double("Infinity")}}`,
		`{"m": {"z": left, "a": [right, 1u, 2]}, "n": {}}`,
		`{1: left.id}`,
		`{"d": duration("1s"), "t": timestamp(0)}`,
		`{"x": left.id / 0}`,
		`{"l": left.nope}`,
		`{"r": right == null ? {"k": null} : {"k": right}}`,
		`{"id": left.id, "amount": left.amount, "last": right == null ? null : right.amount}`,
		`{"l": left != null, "r": null == right, "n": right.nested == null, "x": right.id != null}`,
		`{"id": left.id, "amount": left.amount, "l": left, "v": value}`,
	}, lazySelects...)
	var l, r joinSide
	for _, src := range srcs {
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
				want := selectOverEncode(sel, decodeValue(rawA, a.text), decodeValue(rawB, b.text))
				if got := selectOver(sel, decodeValue(rawA, a.text), decodeValue(rawB, b.text)); got != want {
					t.Errorf("select %s, decoded left %s, right %s:\n got %s\nwant %s", src, a.raw, b.raw, got, want)
				}
				if got := selectOver(sel, l.value(rawA, a.text), r.value(rawB, b.text)); got != want {
					t.Errorf("select %s, lazy left %s, right %s:\n got %s\nwant %s", src, a.raw, b.raw, got, want)
				}
			}
		}
	}
}
