package operators

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
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
	{`{"id": left.nested.a}`, true},
	{`{"p": left.nested.a, "q": right == null ? null : right.nested.a, "r": left.nested.b, "s": left.id}`, true},
	{`{"d": left.nested.a.b, "e": right.amount}`, true},
	{`{"id": left.nested["a"]}`, false},
	{"{\"id\": left.nested.`a.b`}", false},
	{`{"id": left.id, "k": key}`, false},
	{`{"id": left.id, "v": value}`, false},
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
	`{"id":1,"amount":2,"nested":{"a":3,"b":"x"}}`,
	`{"id":1,"amount":2,"nested":{ "a" : -0 , "b" : true , "c" : 1e5 } }`,
	`{"id":1,"amount":2,"nested":{"a":3,"a":"y","b":null}}`,
	`{"id":1,"amount":2,"nested":{"a":{"b":7},"b":"x"}}`,
	`{"id":1,"amount":2,"nested":{"a":{"b":1,"b":{"c":1}},"b":1}}`,
	`{"id":1,"amount":2,"nested":{"\u0061":3,"b":"x"}}`,
	`{"id":1,"amount":2,"nested":{"a":3,"b":"x"},"nested":{"b":"y"}}`,
	`{"id":1,"amount":2,"nested":{"b":"y"},"nested":{"a":4,"b":"z"}}`,
	`{"id":1,"amount":2,"nested":{"a":1.5,"b":"x"}}`,
	`{"id":1,"amount":2,"nested":{"a":"é","b":"x"}}`,
	`{"id":1,"amount":2,"nested":"str"}`,
	`{"id":1,"amount":2,"nested":null}`,
	`{"id":1,"amount":2,"nested":{}}`,
	`{"id":1,"amount":2,"nested":[{"a":1}]}`,
	`{"id":1,"amount":2,"nested.a":5,"nested":{"a":6,"b":"x"}}`,
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
	{raw: `{"amount":1,"nested":{"a":5}}`},
	{raw: `{"amount":1,"nested":{"a":{"b":"NL"}}}`},
	{raw: `{"amount":1,"nested":{"a":5,"a":[1]}}`},
	{raw: `{"amount":1,"nested":5}`},
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

// TestTableJoinLatestRawSelect is TestTableJoinLatest with the clicks
// marked valid JSON, so that they take the raw select through the state:
// a row joined, then updated, deleted and put again (a kept row's field
// bytes are never those of the row it replaced), across a snapshot and
// restore, on both backends; the outputs are select's.
func TestTableJoinLatestRawSelect(t *testing.T) {
	checked := func(r runtime.Record) runtime.Record {
		r.SetDecoded(runtime.ValidJSON{})
		return r
	}
	for _, kind := range []string{state.KindHashmap, state.KindPebble} {
		t.Run(kind, func(t *testing.T) {
			p := TableJoinParams{Mode: TableJoinLatest, Join: TableJoinLeft, Select: compiled(t, tableJoinSelect)}
			h := newTableJoinHarness(t, kind, t.TempDir(), nil, p)
			if h.tj.raw == nil {
				t.Fatal("the select has no raw form")
			}
			h.send(0, checked(clickOf("c1", "u1", 50)))
			h.send(1, user("u1", "NL", 100))
			h.send(0, checked(clickOf("c2", "u1", 60)))
			h.send(1, user("u1", "DE", 300))
			h.send(0, checked(clickOf("c3", "u1", 70)))
			before := h.emitted()
			r := snapshotRestore(t, h.harness)
			h2 := newTableJoinHarness(t, kind, t.TempDir(), r, p)
			h2.send(0, checked(clickOf("c4", "u1", 350)))
			h2.send(1, user("u1", "", 500))
			h2.send(0, checked(clickOf("c5", "u1", 550)))
			h2.send(1, user("u1", "FR", 700))
			h2.send(0, checked(clickOf("c6", "u1", 800)))
			h2.send(1, runtime.Record{Key: []byte("u1"), Value: []byte(`{"country":"BE","n":1e3}`), Change: runtime.ChangeUpdateAfter})
			h2.send(0, checked(clickOf("c7", "u1", 900)))
			got := tableJoinLines(append(before, h2.emitted()...))
			want := `u1 50 {"click":"c1","country":null}
u1 60 {"click":"c2","country":"NL"}
u1 70 {"click":"c3","country":"DE"}
u1 350 {"click":"c4","country":"DE"}
u1 550 {"click":"c5","country":null}
u1 800 {"click":"c6","country":"FR"}
u1 900 {"click":"c7","country":"BE"}
`
			if got != want {
				t.Fatalf("output:\n%s\nwant:\n%s", got, want)
			}
			// The raw select read the last click (it gave up at the row).
			if len(h2.tj.rawLeft) != 1 || string(h2.tj.rawLeft[0]) != `"c6"` {
				t.Fatalf("the raw select's last stream field %q, want the click c6's id", h2.tj.rawLeft)
			}
			h2.finish()
		})
	}
}

// TestTableJoinLateRawSelect is TestTableJoinLate with the clicks marked
// valid JSON: in mode event_time a click at or before the watermark joins
// at once (not through the timer) with the version valid at its time, by
// the raw select; the outputs are select's.
func TestTableJoinLateRawSelect(t *testing.T) {
	checked := func(r runtime.Record) runtime.Record {
		r.SetDecoded(runtime.ValidJSON{})
		return r
	}
	p := TableJoinParams{Mode: TableJoinEventTime, Join: TableJoinLeft, HistoryRetention: 100 * time.Millisecond, Select: compiled(t, tableJoinSelect)}
	h := newTableJoinHarness(t, state.KindHashmap, t.TempDir(), nil, p)
	h.send(1, user("u1", "NL", 100))
	h.send(1, user("u1", "DE", 930))
	h.send(1, user("u2", "BE", 100))
	h.send(1, user("u2", "", 940))
	h.wm(1000)
	h.send(0, checked(clickOf("late-ok", "u1", 950)))
	h.send(0, checked(clickOf("late-nl", "u1", 920)))
	h.send(0, checked(clickOf("gone", "u2", 960)))
	want := "u1 950 {\"click\":\"late-ok\",\"country\":\"DE\"}\nu1 920 {\"click\":\"late-nl\",\"country\":\"NL\"}\nu2 960 {\"click\":\"gone\",\"country\":null}\n"
	if got := tableJoinLines(h.emitted()); got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
	if len(h.tj.rawLeft) != 1 || string(h.tj.rawLeft[0]) != `"gone"` {
		t.Fatalf("the raw select's last stream field %q, want the click gone's id", h.tj.rawLeft)
	}
	h.finish()
}
