package operators

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/kstreamd/kstreamd/runtime"
)

// joinOutputPair emits the pair (left, right) (nil: absent) through o
// and returns the output value or the error's text.
func joinOutputPair(t testing.TB, o *joinOutput, left, right *joinRow) string {
	var c sliceCollector
	if err := o.emit([]byte("k"), left, right, 5, "", &c); err != nil {
		return "error: " + err.Error()
	}
	if len(c.recs) != 1 {
		t.Fatalf("%d outputs", len(c.recs))
	}
	if ts := c.recs[0].Timestamp.UnixMilli(); ts != 5 || string(c.recs[0].Key) != "k" {
		t.Fatalf("output key %q time %d", c.recs[0].Key, ts)
	}
	return string(c.recs[0].Value)
}

// rawJoinRow is a row of value v (nil for ""), marked valid JSON when it
// is, as a source marks a record (runtime.Record.CheckedJSON), unless
// unmarked.
func rawJoinRow(v string, text, unmarked bool) *joinRow {
	r := &joinRow{TS: 5, Text: text}
	if v != "" {
		r.Value = []byte(v)
	}
	r.Valid = !text && !unmarked && json.Valid(r.Value)
	return r
}

// checkJoinRawSelect compares, for select sel, the outputs of a join
// output with its raw select (withRaw) and of one evaluating select
// (eval) for the values l and r as the two rows of a pair in every role:
// each side pinned (the record being processed) or not, marked valid or
// not, either side absent, a pinned row paired twice (its fields found
// once), and each value on the other side. It returns how many of the
// outputs the raw select wrote (select not evaluated).
func checkJoinRawSelect(t testing.TB, withRaw, eval *joinOutput, l, r string, rText bool) (raw int) {
	other := rawJoinRow(`{"id":9,"amount":7,"country":"NL","s":"x","n":1,"t":true,"f":false,"z":null,"o":"o"}`, false, false)
	type pair struct{ pin, left, right *joinRow }
	var pairs [][]pair
	for _, unmarked := range []bool{false, true} {
		L, R := rawJoinRow(l, false, unmarked), rawJoinRow(r, rText, unmarked)
		L2, R2 := rawJoinRow(r, rText, unmarked), rawJoinRow(l, false, unmarked)
		pairs = append(pairs,
			[]pair{{L, L, R}, {L, L, other}, {L, L, L}, {L, other, L}},
			[]pair{{R, L, R}, {R, other, R}},
			[]pair{{nil, L, R}},
			[]pair{{nil, nil, R}},
			[]pair{{L, L, nil}},
			[]pair{{L2, L2, R2}, {L2, L2, other}},
			[]pair{{nil, L2, nil}},
		)
	}
	for i, ps := range pairs {
		for k, p := range ps {
			if k == 0 && p.pin != nil {
				withRaw.pinChecked(p.pin, p.pin.Valid)
				eval.pinChecked(p.pin, p.pin.Valid)
			}
			want := joinOutputPair(t, eval, p.left, p.right)
			before := withRaw.rawHits
			got := joinOutputPair(t, withRaw, p.left, p.right)
			if got != want {
				t.Fatalf("select %s, left %q, right %q (form %d.%d):\n got %s\nwant %s", withRaw.sel.Program().Source(), l, r, i, k, got, want)
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

// newJoinOutputs returns a join output for select src with its raw
// select and one that always evaluates select.
func newJoinOutputs(t testing.TB, src string) (withRaw, eval *joinOutput) {
	sel, err := CompileExpression(src)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	return &joinOutput{sel: sel}, &joinOutput{sel: sel, noRaw: true}
}

// TestIntervalJoinRawSelectEqualsEval: the joins' output (interval,
// window and regular join: joinOutput) writes exactly the output (or
// error) evaluating select gives, for every select of the table join's
// list, each pair of its stream values and rows in every role
// (checkJoinRawSelect); and the raw select writes the interval-join
// bench's outputs and most of the others for a select with a raw form.
func TestIntervalJoinRawSelectEqualsEval(t *testing.T) {
	for _, s := range rawSelects {
		withRaw, eval := newJoinOutputs(t, s.src)
		raw := 0
		for _, l := range rawLefts {
			for _, r := range rawRows {
				raw += checkJoinRawSelect(t, withRaw, eval, l, r.raw, r.text)
			}
		}
		if (raw > 0) != s.raw {
			t.Errorf("%s: the raw select wrote %d outputs, want some: %v", s.src, raw, s.raw)
		}
		if withRaw.rawHits != raw || eval.rawHits != 0 {
			t.Fatalf("%s: counted %d/%d raw outputs, want %d/0", s.src, withRaw.rawHits, eval.rawHits, raw)
		}
	}
	// The bench's select and records: every output by the raw select,
	// the pinned row's field found once for its two pairs.
	withRaw, eval := newJoinOutputs(t, `{"l": left.id, "r": right.id}`)
	bench := `{"id":12,"key":"key-3","shape":"circle","amount":437,"note":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`
	if n := checkJoinRawSelect(t, withRaw, eval, bench, `{"id":13,"key":"key-3"}`, false); n != 18 {
		t.Errorf("the raw select wrote %d of the bench select's 24 outputs, want 18 (the 6 with a row missing are evaluated: select fails)", n)
	}
	L, R := rawJoinRow(bench, false, false), rawJoinRow(`{"id":13}`, false, false)
	withRaw.pinChecked(L, true)
	if got := joinOutputPair(t, withRaw, L, R); got != `{"l":12,"r":13}` {
		t.Fatalf("output %s", got)
	}
	L.Value = []byte(`{"id":99}`) // the pinned row's fields are those found at its first pair
	if got := joinOutputPair(t, withRaw, L, R); got != `{"l":12,"r":13}` {
		t.Fatalf("output %s, want the pinned row's field found once", got)
	}
}

// FuzzIntervalJoinRawSelectEqualsEval: for any two values, the joins'
// output with its raw select writes what evaluating select writes, for
// each select of the table join's list that has a raw form.
func FuzzIntervalJoinRawSelectEqualsEval(f *testing.F) {
	for _, l := range rawLefts {
		f.Add(l, `{"amount":7,"country":"NL"}`)
	}
	for _, r := range rawRows {
		f.Add(rawLefts[1], r.raw)
	}
	type outs struct{ withRaw, eval *joinOutput }
	var os []outs
	for _, s := range rawSelects {
		if s.raw {
			w, e := newJoinOutputs(f, s.src)
			os = append(os, outs{w, e})
		}
	}
	f.Fuzz(func(t *testing.T, left, right string) {
		for _, o := range os {
			checkJoinRawSelect(t, o.withRaw, o.eval, left, right, false)
		}
	})
}

// TestIntervalJoinRawSelectAllocs: a pair of rows known valid JSON (the
// record pinned, a stored row) written by the raw select costs no
// allocation (the output goes into a shared block); evaluating the same
// select costs some (the rows' Docs, the string copy of each stored row).
// Counted without the race detector only (it allocates for itself).
func TestIntervalJoinRawSelectAllocs(t *testing.T) {
	withRaw, eval := newJoinOutputs(t, `{"l": left.id, "r": right.id}`)
	L := rawJoinRow(`{"id":12,"key":"k000042","shape":"CIRCLE","amount":512,"note":"xxxx"}`, false, false)
	R := rawJoinRow(`{"id":13,"key":"k000042","shape":"CIRCLE","amount":77,"note":"xxxx"}`, false, false)
	var c sliceCollector
	c.recs = make([]runtime.Record, 0, 4096)
	key := []byte("k")
	pair := func(o *joinOutput) func() {
		return func() {
			o.pinChecked(L, true)
			if err := o.emit(key, L, R, 5, "", &c); err != nil {
				t.Fatal(err)
			}
			if len(c.recs) != 1 || string(c.recs[0].Value) != `{"l":12,"r":13}` {
				t.Fatalf("outputs %v", c.recs)
			}
			c.recs = c.recs[:0]
		}
	}
	if n := testing.AllocsPerRun(200, pair(withRaw)); n != 0 && !raceEnabled {
		t.Errorf("raw select: %.2f allocations per pair, want 0", n)
	}
	if withRaw.rawHits == 0 {
		t.Fatal("the raw select wrote no output")
	}
	if n := testing.AllocsPerRun(200, pair(eval)); n < 1 && !raceEnabled {
		t.Errorf("evaluated select: %.2f allocations per pair, want at least 1 (the check that the pair measured the raw path)", n)
	}
}

// TestIntervalJoinRawFieldNoted: the raw select notes in the record's own
// row (pinChecked) where its one field is, and a later pair of the row,
// buffered, takes the field from there without scanning or checking the
// value again (here the value's rest is made invalid JSON: the output
// stays that of the field noted); a field of the other side, a row of the
// state pinned with pin (window_join's), a select reading two fields of
// a side and an integer written again (-0) note nothing; and joinRow
// stays 40 bytes (the note lives in its padding).
func TestIntervalJoinRawFieldNoted(t *testing.T) {
	if n := unsafe.Sizeof(joinRow{}); n != 40 {
		t.Fatalf("joinRow is %d bytes, want 40", n)
	}
	o, _ := newJoinOutputs(t, `{"l": left.id, "r": right.id}`)
	L := rawJoinRow(`{"key":"k1","id":12,"note":"xx"}`, false, false)
	R := rawJoinRow(`{"id":13}`, false, false)
	o.pinChecked(L, true)
	if got := joinOutputPair(t, o, L, R); got != `{"l":12,"r":13}` {
		t.Fatalf("output %s", got)
	}
	o.pin(nil)
	if L.rawSide != 1 || string(L.Value[L.rawAt:int(L.rawAt)+int(L.rawLen)]) != "12" {
		t.Fatalf("noted side %d at %d+%d, want left at the id 12", L.rawSide, L.rawAt, L.rawLen)
	}
	if R.rawSide != 0 {
		t.Fatalf("the buffered row R was changed: side %d noted", R.rawSide)
	}
	// The buffered L paired again: the field noted, the rest not read.
	copy(L.Value[L.rawAt+2:], `}}}}}}}}}}`)
	L.Valid = false
	R2 := rawJoinRow(`{"id":15}`, false, false)
	o.pinChecked(R2, true)
	if got := joinOutputPair(t, o, L, R2); got != `{"l":12,"r":15}` {
		t.Fatalf("output %s, want the noted field of the buffered row", got)
	}
	if R2.rawSide != 2 || string(R2.Value[R2.rawAt:int(R2.rawAt)+int(R2.rawLen)]) != "15" {
		t.Fatalf("noted side %d at %d+%d, want right at the id 15", R2.rawSide, R2.rawAt, R2.rawLen)
	}
	// The note is of its side only: L as a right row is scanned (and,
	// its value broken, evaluated: select fails on the invalid JSON).
	o.pin(nil)
	if got := joinOutputPair(t, o, R2, L); got == `{"l":15,"r":12}` {
		t.Fatalf("a left row's note used for the right side: %s", got)
	}
	for _, c := range []struct{ sel, v string }{
		{`{"l": left.id, "r": right.id}`, `{"id":-0}`},                             // written again
		{`{"l": left.id, "a": left.amount, "r": right.id}`, `{"id":1,"amount":2}`}, // two fields
	} {
		o, _ := newJoinOutputs(t, c.sel)
		L := rawJoinRow(c.v, false, false)
		o.pinChecked(L, true)
		joinOutputPair(t, o, L, R)
		if L.rawSide != 0 {
			t.Errorf("%s of %s: noted side %d, want none", c.sel, c.v, L.rawSide)
		}
	}
	// A row pinned with pin (a row of the state: window_join) is not
	// changed.
	W := rawJoinRow(`{"id":7}`, false, false)
	o.pin(W)
	joinOutputPair(t, o, W, R)
	if W.rawSide != 0 {
		t.Fatalf("a row pinned with pin was noted: side %d", W.rawSide)
	}
}

// TestCanonicalInteger: fieldsJSON keeps an integer's own bytes exactly
// when strconv.AppendInt writes its value the same.
func TestCanonicalInteger(t *testing.T) {
	for _, s := range []string{"0", "7", "-7", "10", "-120", "123456789012345678", "-0", "00", "007", "-01"} {
		x, ok := plainInteger([]byte(s))
		if !ok {
			t.Fatalf("%s: not a plain integer", s)
		}
		if got, want := canonicalInteger([]byte(s)), strconv.FormatInt(x, 10) == s; got != want {
			t.Errorf("canonicalInteger(%s) = %v, want %v", s, got, want)
		}
	}
}

// TestIntervalJoinNotesUnpairedRow: a record that pairs with nothing when
// it arrives is buffered with its raw select field noted (noteBuffered,
// found while its value is hot), so its later pairs as a buffered row
// read the note; a record whose source did not check its JSON, or a
// select reading two fields of its side, is buffered without a note; a
// record that paired is noted by its pairs, as before.
func TestIntervalJoinNotesUnpairedRow(t *testing.T) {
	for _, c := range []struct {
		sel     string
		checked bool
		noted   bool
	}{
		{`{"l": left.id, "r": right.id}`, true, true},
		{`{"l": left.id, "r": right.id}`, false, false},
		{`{"l": left.id, "a": left.amount, "r": right.id}`, true, false},
	} {
		j := NewIntervalJoin(IntervalJoinParams{Lower: -time.Second, Upper: time.Second, Select: compiled(t, c.sel)})
		h := newJoinHarnessFunc(t, "pebble", t.TempDir(), nil, j, j)
		send := func(side int, ts int64, v string) {
			rec := runtime.Record{Key: []byte("k"), Value: []byte(v), Timestamp: time.UnixMilli(ts)}
			if c.checked {
				rec.SetDecoded(runtime.ValidJSON{})
			}
			if err := h.op.ProcessRecord(h.ctx, side, rec); err != nil {
				t.Fatal(err)
			}
		}
		rows := func() [2][]joinRow {
			j.backend.SetCurrentKey([]byte("k"))
			k, ok, err := j.keyRows.Value()
			if err != nil || !ok {
				t.Fatal(ok, err)
			}
			return k.sides
		}
		send(0, 10_000, `{"key":"k","id":12,"amount":3,"note":"xx"}`)
		if out := h.emitted(); len(out) != 0 {
			t.Fatalf("%s: %d outputs of an unpaired record", c.sel, len(out))
		}
		L := rows()[0][0]
		f, ok := L.rawField(0)
		if ok != c.noted || (ok && string(f) != "12") || L.rawSide == 2 {
			t.Fatalf("%s checked %v: buffered left row noted side %d field %q, want noted %v (the id 12)", c.sel, c.checked, L.rawSide, f, c.noted)
		}
		send(1, 10_100, `{"id":13}`)
		want := `{"l":12,"r":13}`
		if c.sel != `{"l": left.id, "r": right.id}` {
			want = `{"a":3,"l":12,"r":13}` // evaluated (two left fields: no raw form)
		}
		if out := h.emitted(); len(out) != 1 || string(out[0].Value) != want {
			t.Fatalf("%s: outputs %v, want one %s", c.sel, rawBreakLines(out), want)
		}
		// The right record paired on arrival: noted by its pair.
		R := rows()[1][0]
		if f, ok := R.rawField(1); !ok || string(f) != "13" {
			t.Fatalf("%s checked %v: the paired right row noted %v %q", c.sel, c.checked, ok, f)
		}
		if err := h.op.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
