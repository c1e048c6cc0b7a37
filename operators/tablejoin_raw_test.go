package operators

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// rawSelects are table join selects: the first ones have a raw form
// (compileRawSelect), the others not.
var rawSelects = []struct {
	src string
	raw bool
}{
	{`{"id": left.id, "amount": left.amount, "last": right == null ? null : right.amount}`, true},
	{`{"click": left.id, "country": right == null ? null : right.country}`, true},
	{`{"b": left.id, "a": right.amount, "c": null == right ? null : right.country, "d": right != null ? right.amount : null, "e": left.id}`, true},
	{`{"x": right.amount}`, true},
	{`{"s": left.s, "n": left.n, "t": left.t, "f": left.f, "z": left.z, "o": left.o}`, true},
	{"{'k\\x41': left.id, r\"q\": left.s}", true},
	{`{"a": left.id, "b": left.id, "c": right.amount, "d": right.amount}`, true},
	{`{"in": (left.id), "a'b/": (right == null) ? null : (right.amount)}`, true},
	{`{"id": left.id, "id": left.id}`, false},
	{`{"id": left.id, "n": left.n + 1}`, false},
	{`{"id": left.nested.a}`, false},
	{`{"id": has(left.id)}`, false},
	{`{"id": right == null ? left.id : right.amount}`, false},
	{`{"id": right == null ? "none" : right.amount}`, false},
	{`{"id": left == null ? null : left.id}`, false},
	{`{"a<b": left.id}`, false},
	{`{1: left.id}`, false},
	{`{?"id": left.?id}`, false},
	{`left`, false},
	{`{}`, false},
}

// rawLefts are stream record values of many shapes: of the bench, with
// every kind of scalar, repeated names, escapes, non-ASCII bytes, unsafe
// numbers elsewhere in the record, nesting, whitespace, and other JSON
// values; invalid JSON is sent unmarked.
var rawLefts = []string{
	`{"id":12,"key":"key-3","shape":"circle","amount":437,"note":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`,
	`{"id":"c1","amount":-5,"s":"plain <&> text","n":0,"t":true,"f":false,"z":null,"o":7}`,
	` { "id" : 1 , "amount" : 2 , "nested" : { "a" : [ 1 , 2.5 , "s\"}" ] } , "s" : "}\\" } `,
	`{"id":1,"id":2,"amount":3,"amount":4}`,
	`{"id":1,"amount":2,"big":1e999}`,
	`{"id":1,"amount":2,"deep":{"x":[1E5]}}`,
	`{"id":1,"amount":2,"x":1.5,"y":-0.25}`,
	`{"id":-0,"amount":2}`,
	`{"id":1.0,"amount":2}`,
	`{"id":123456789012345678,"amount":1234567890123456789}`,
	`{"id":99999999999999999999,"amount":2}`,
	`{"id":"\u0041","amount":2}`,
	`{"id":"é","amount":2}`,
	`{"id":"a\"b","amount":2}`,
	`{"\u0069d":5,"amount":2}`,
	`{"id":1,"\u0069d":5,"amount":2}`,
	`{"id":{"a":1},"amount":[1]}`,
	`{"id":[],"amount":{}}`,
	`{"amount":2}`,
	`{"id":1,"amount":2,"s":"x","n":1,"t":true,"f":false,"z":null,"o":"o","country":"NL"}`,
	`{}`,
	`[1,2]`,
	`"str"`,
	`12`,
	`null`,
	`{"id":`,
	`{"id":1,}`,
	`{"id":1,"amount":2,"k":"` + string([]byte{0xff}) + `"}`,
	`{"id":{"a":1},"id":3,"amount":2}`,
	`{"id":"` + strings.Repeat("x", 5000) + `","amount":2}`,
	`{"id":1,"amount":2,"n":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`,
	`{"id":1,"amount":2,"n":{"m":` + strings.Repeat("1", 301) + `}}`,
	`{"id":1,"amount":2,"n":` + strings.Repeat("1", 300) + `}`,
	"\t{\"id\"\r\n:\t1,\"amount\":2}\n",
}

// rawRows are table rows: objects holding each kind of value, and rows
// the raw select must not write.
var rawRows = []struct {
	raw  string
	text bool
}{
	{raw: `{"amount":7}`},
	{raw: `{"amount":-7,"country":"NL"}`},
	{raw: `{"amount":"s<>","country":"NL"}`},
	{raw: `{"amount":1.5,"country":"NL"}`},
	{raw: `{"amount":1e3,"country":"NL"}`},
	{raw: `{"amount":null,"country":null}`},
	{raw: `{"amount":true,"country":false}`},
	{raw: `{"amount":99999999999999999999,"country":"NL"}`},
	{raw: `{"amount":{"a":1},"country":["NL"]}`},
	{raw: `{"amount":1,"amount":2,"country":"D\u0045"}`},
	{raw: `{"amount":1,"country":"é"}`},
	{raw: `{"country":"NL"}`},
	{raw: `{}`},
	{raw: `5`},
	{raw: `null`},
	{raw: `{"amount":`},
	{raw: `plain`, text: true},
	{raw: `{"amount":{"a":1},"amount":2}`},
	{raw: `{"amount":2,"amount":{"a":1}}`},
	{raw: `{"amount":1,"x":"` + string([]byte{0xff}) + `"}`},
	{raw: ` {"amount":-0} `},
	{raw: `{"amount":01}`},
	{raw: `{"amount":1}{}`},
	{raw: `{"amount":1,"n":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`},
}

// tableJoinOutput returns what emit of j writes for the stream value left
// (marked valid JSON when it is) and row (absent when hasRow is false):
// the output value or the error's text.
func tableJoinOutput(t testing.TB, j *TableJoin, left string, row tableValue, hasRow bool) string {
	rec := runtime.Record{Key: []byte("k"), Value: []byte(left), Timestamp: time.UnixMilli(5)}
	if json.Valid(rec.Value) {
		rec.SetDecoded(runtime.ValidJSON{})
	}
	var c sliceCollector
	if err := j.emit(rec, row, hasRow, &c); err != nil {
		return "error: " + err.Error()
	}
	if len(c.recs) != 1 {
		t.Fatalf("%d outputs", len(c.recs))
	}
	if c.recs[0].Format != runtime.FormatJSON {
		t.Fatalf("output format %v", c.recs[0].Format)
	}
	return string(c.recs[0].Value)
}

// checkRawSelect compares, for select src, the outputs of a table join
// with its raw select and of one evaluating select, over left and each
// form of the row (absent, kept with its holder, read twice, and made
// outside the state); it returns how often the raw select wrote them.
func checkRawSelect(t testing.TB, sel Expression, left, row string, text bool) (raw int) {
	p := TableJoinParams{Mode: TableJoinLatest, Join: TableJoinLeft, Select: sel}
	withRaw, eval := NewTableJoin(p), NewTableJoin(p)
	eval.raw = nil
	var rawRow []byte
	if row != "" {
		rawRow = []byte(row)
	}
	kept := tableValue{Value: rawRow, Text: text}.withRight()
	for i, r := range []struct {
		v  tableValue
		ok bool
	}{{tableValue{}, false}, {kept, true}, {kept, true}, {tableValue{Value: rawRow, Text: text}, true}} {
		want := tableJoinOutput(t, eval, left, r.v, r.ok)
		slab := len(withRaw.slab)
		got := tableJoinOutput(t, withRaw, left, r.v, r.ok)
		if got != want {
			t.Fatalf("select %s, left %s, row %q (form %d):\n got %s\nwant %s", sel.Program().Source(), left, row, i, got, want)
		}
		if withRaw.raw != nil && len(withRaw.slab) > slab {
			raw++
		}
	}
	return raw
}

// TestTableJoinRawSelectEqualsEval: the table join writes exactly the
// output (or error) evaluating select gives, for every select, stream
// value and row of the lists above; and the raw select writes it for the
// bench's select and records.
func TestTableJoinRawSelectEqualsEval(t *testing.T) {
	for _, s := range rawSelects {
		sel, err := CompileExpression(s.src)
		if err != nil {
			t.Fatalf("%s: %v", s.src, err)
		}
		if got := compileRawSelect(s.src) != nil; got != s.raw {
			t.Errorf("%s: raw form %v, want %v", s.src, got, s.raw)
		}
		for _, l := range rawLefts {
			for _, r := range rawRows {
				checkRawSelect(t, sel, l, r.raw, r.text)
			}
		}
	}
	sel, err := CompileExpression(rawSelects[0].src)
	if err != nil {
		t.Fatal(err)
	}
	if n := checkRawSelect(t, sel, rawLefts[0], `{"amount":7}`, false); n != 4 {
		t.Errorf("the raw select wrote %d of the bench's 4 outputs", n)
	}
}

// FuzzTableJoinRawSelectEqualsEval: for any stream value and row, the
// table join with its raw select writes what evaluating select writes.
func FuzzTableJoinRawSelectEqualsEval(f *testing.F) {
	for _, l := range rawLefts {
		f.Add(l, `{"amount":7,"country":"NL"}`)
	}
	for _, r := range rawRows {
		f.Add(rawLefts[1], r.raw)
	}
	var sels []Expression
	for _, s := range rawSelects {
		if s.raw {
			sel, err := CompileExpression(s.src)
			if err != nil {
				f.Fatal(err)
			}
			sels = append(sels, sel)
		}
	}
	f.Fuzz(func(t *testing.T, left, row string) {
		for _, sel := range sels {
			checkRawSelect(t, sel, left, row, false)
		}
	})
}
