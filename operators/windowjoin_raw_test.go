package operators

import (
	"testing"
)

// windowRawSelects are window_join selects: the first ones have a raw
// form reading the window's own fields (window_start, window_end: the
// extra fields joinOutput.emit is given), nested fields or neither
// (Nexmark q8's select is the first), then ones whose own fields the raw
// select cannot write (a name the window join does not have: select
// fails; key and timestamp, which the expression package resolves) or
// without a raw form.
var windowRawSelects = []struct {
	src string
	raw bool // the raw select writes some of the outputs
}{
	{`{"id": left.nested.a, "name": left.nested.b, "starttime": window_start}`, true},
	{`{"s": window_start, "e": window_end, "l": left.id, "r": right == null ? null : right.amount}`, true},
	{`{"e": window_end, "r": right.amount, "e2": window_end}`, true},
	{`{"l": left.id, "r": right == null ? null : right.country}`, true},
	{`{"s": window_start, "l": left.id, "n": no_such_field}`, false},
	{`{"s": window_start, "k": key}`, false},
	{`{"s": window_start, "t": timestamp}`, false},
	{`{"s": window_start + "x", "l": left.id}`, false},
}

// windowRawExtras are extra fields as emit is given them: the window
// join's (window_start and window_end, RFC 3339 in UTC), none, and values
// the raw select must leave to select (an escape, a number it does not
// write, an object, a repeated name whose last value counts).
var windowRawExtras = []string{
	`,"window_start":"2026-12-07T13:00:00Z","window_end":"2026-12-07T13:00:10Z"`,
	`,"window_start":"1970-01-01T00:00:00.001Z","window_end":"1970-01-01T00:00:02.5Z"`,
	``,
	`,"window_start":7,"window_end":-3`,
	`,"window_start":"a\"b","window_end":"c"`,
	`,"window_start":1.5,"window_end":{"x":1}`,
	`,"window_start":"x","window_end":"y","window_start":"z"`,
	`,"window_start":"é","window_end":null`,
}

// checkWindowRawSelect compares, for the join outputs withRaw (raw
// select) and eval (select always evaluated), the outputs of the pairs
// of values l and r with extra fields extra in the roles of a window
// join's timer (the left row pinned for its pairs, paired twice; either
// side missing) and the other roles of checkJoinRawSelect's; it returns
// how many outputs the raw select wrote.
func checkWindowRawSelect(t testing.TB, withRaw, eval *joinOutput, l, r string, rText bool, extra string) (raw int) {
	other := rawJoinRow(`{"id":9,"amount":7,"country":"NL","nested":{"a":1,"b":"x"}}`, false, false)
	type pair struct{ pin, left, right *joinRow }
	var pairs [][]pair
	for _, unmarked := range []bool{false, true} {
		L, R := rawJoinRow(l, false, unmarked), rawJoinRow(r, rText, unmarked)
		pairs = append(pairs,
			[]pair{{L, L, R}, {L, L, other}, {L, L, R}},
			[]pair{{nil, other, R}, {nil, L, R}},
			[]pair{{nil, L, nil}},
			[]pair{{nil, nil, R}},
		)
	}
	for i, ps := range pairs {
		for k, p := range ps {
			if k == 0 && p.pin != nil {
				withRaw.pin(p.pin)
				eval.pin(p.pin)
			}
			want := windowRawPair(t, eval, p.left, p.right, extra)
			before := withRaw.rawHits
			got := windowRawPair(t, withRaw, p.left, p.right, extra)
			if got != want {
				t.Fatalf("select %s, left %q, right %q, extra %q (form %d.%d):\n got %s\nwant %s", withRaw.sel.Program().Source(), l, r, extra, i, k, got, want)
			}
			if withRaw.rawHits > before {
				raw++
			}
		}
		withRaw.pin(nil)
		eval.pin(nil)
	}
	return raw
}

// windowRawPair emits the pair (left, right) with extra through o and
// returns the output value or the error's text.
func windowRawPair(t testing.TB, o *joinOutput, left, right *joinRow, extra string) string {
	var c sliceCollector
	if err := o.emit([]byte("k"), left, right, 5, extra, &c); err != nil {
		return "error: " + err.Error()
	}
	if len(c.recs) != 1 {
		t.Fatalf("%d outputs", len(c.recs))
	}
	return string(c.recs[0].Value)
}

// TestWindowJoinRawSelectEqualsEval: the join output writes with its raw
// select exactly the output (or error) evaluating select gives when the
// join passes fields of its own (window_join's window_start and
// window_end), for every select above and of the table join's list, each
// stream value and row, each extra; the raw select writes some outputs of
// the selects with a raw form (also those reading the window's fields and
// nested fields: Nexmark q8's), none of the others, and q8's output.
func TestWindowJoinRawSelectEqualsEval(t *testing.T) {
	type sel struct {
		src string
		raw bool
	}
	var sels []sel
	for _, s := range windowRawSelects {
		sels = append(sels, sel(s))
	}
	for _, s := range rawSelects {
		sels = append(sels, sel{s.src, s.raw})
	}
	for _, s := range sels {
		withRaw, eval := newJoinOutputs(t, s.src)
		raw := 0
		for _, extra := range windowRawExtras {
			for _, l := range rawLefts {
				for _, r := range rawRows {
					raw += checkWindowRawSelect(t, withRaw, eval, l, r.raw, r.text, extra)
				}
			}
		}
		if (raw > 0) != s.raw {
			t.Errorf("%s: the raw select wrote %d outputs, want some: %v", s.src, raw, s.raw)
		}
	}
	// Nexmark q8's select on its person record: by the raw select, the
	// window's start as the evaluated select writes it.
	withRaw, eval := newJoinOutputs(t, `{"id": left.person.id, "name": left.person.name, "starttime": window_start}`)
	person := `{"event_type":0,"person":{"id":1001,"name":"Walter Shultz","emailAddress":"x@y.com","creditCard":"1 2","city":"Boise","state":"ID","dateTime":1700000000123,"extra":""}}`
	auction := `{"event_type":1,"auction":{"id":1000,"seller":1001,"dateTime":1700000001000}}`
	extra := `,"window_start":"2023-11-14T22:13:20Z","window_end":"2023-11-14T22:13:30Z"`
	L, R := rawJoinRow(person, false, false), rawJoinRow(auction, false, false)
	withRaw.pin(L)
	eval.pin(L)
	want := `{"id":1001,"name":"Walter Shultz","starttime":"2023-11-14T22:13:20Z"}`
	if got := windowRawPair(t, eval, L, R, extra); got != want {
		t.Fatalf("evaluated q8 output %s, want %s", got, want)
	}
	if got := windowRawPair(t, withRaw, L, R, extra); got != want || withRaw.rawHits != 1 {
		t.Fatalf("raw q8 output %s (%d by the raw select), want %s by it", got, withRaw.rawHits, want)
	}
}

// FuzzWindowJoinRawSelectEqualsEval: for any two values and extra
// fields, the join output with its raw select writes what evaluating
// select writes, for each window select with a raw form.
func FuzzWindowJoinRawSelectEqualsEval(f *testing.F) {
	for i, l := range rawLefts {
		f.Add(l, `{"amount":7,"country":"NL"}`, windowRawExtras[i%len(windowRawExtras)])
	}
	for i, r := range rawRows {
		f.Add(rawLefts[len(rawLefts)-1-i%4], r.raw, windowRawExtras[i%len(windowRawExtras)])
	}
	type outs struct{ withRaw, eval *joinOutput }
	var os []outs
	for _, s := range windowRawSelects {
		if s.raw {
			w, e := newJoinOutputs(f, s.src)
			os = append(os, outs{w, e})
		}
	}
	f.Fuzz(func(t *testing.T, left, right, extra string) {
		if extra != "" && extra[0] != ',' {
			extra = "," + extra // emit's extra starts with a comma
		}
		for _, o := range os {
			checkWindowRawSelect(t, o.withRaw, o.eval, left, right, false, extra)
		}
	})
}
