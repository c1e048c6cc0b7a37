package operators

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// bid is a record of auction key: bid id, price, event time ms.
func bid(key, id string, price, ms int64) runtime.Record {
	return runtime.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"bid":%q,"price":%d}`, id, price), Timestamp: time.UnixMilli(ms)}
}

// rankText renders top_n output as "<kind> <record key> <value>".
func rankText(recs []runtime.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%s %s %s", r.Change, r.Key, r.Value)
	}
	return out
}

// TestTopNWindow: top 3 bids by price per auction and 1-minute window, on
// both backends: the exact changelog of the ranking (a bid entering at
// rank r emits -U/+U for every rank from r down and +I for a rank filled
// the first time; a bid below the top 3 emits nothing; an equal price
// ranks after the earlier bid), a second window ranked on its own, and
// after the watermark passes the first window's end a bid of it is
// dropped (its ranking left the state).
func TestTopNWindow(t *testing.T) {
	row := func(key string, start int64, rank int, id string, price int) string {
		return fmt.Sprintf(`%s@%d#%d {"key":%q,"rank":%d,"window_start":%d,"window_end":%d,"row":{"bid":%q,"price":%d}}`,
			key, start, rank, key, rank, start, start+60000, id, price)
	}
	want := []string{
		"+I " + row("a1", 0, 1, "a", 5),
		"-U " + row("a1", 0, 1, "a", 5), "+U " + row("a1", 0, 1, "b", 7), "+I " + row("a1", 0, 2, "a", 5),
		"-U " + row("a1", 0, 2, "a", 5), "+U " + row("a1", 0, 2, "c", 6), "+I " + row("a1", 0, 3, "a", 5),
		// d (4) is below the top 3: nothing
		"-U " + row("a1", 0, 2, "c", 6), "+U " + row("a1", 0, 2, "e", 7), "-U " + row("a1", 0, 3, "a", 5), "+U " + row("a1", 0, 3, "c", 6),
		"+I " + row("a1", 60000, 1, "f", 3),
		"+I " + row("a2", 0, 1, "g", 1),
		// watermark 60000: window 0 closed; h (9 at 10s) is dropped
	}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			p := TopNParams{N: 3, By: compiled(t, "price"), Order: TopNDesc, Window: time.Minute}
			h, err := openStateful(t, kind, t.TempDir(), nil, nil, NewTopN(p))
			if err != nil {
				t.Fatal(err)
			}
			h.process(bid("a1", "a", 5, 1000), bid("a1", "b", 7, 2000), bid("a1", "c", 6, 3000), bid("a1", "d", 4, 4000),
				bid("a1", "e", 7, 5000), bid("a1", "f", 3, 61000), bid("a2", "g", 1, 1500))
			if err := h.op.ProcessWatermark(h.ctx, time.UnixMilli(60000)); err != nil {
				t.Fatal(err)
			}
			h.process(bid("a1", "h", 9, 10000))
			got := h.finish()
			if g := rankText(got); !reflect.DeepEqual(g, want) {
				t.Fatalf("changelog\n%q\nwant\n%q", g, want)
			}
		})
	}
}

// TestTopNNoWindowAsc: without window one ranking per key, kept across a
// checkpoint and restore, on both backends (on Pebble the write cache keeps
// the ranking decoded; a row json.Marshal would compact leaves the state,
// as -U, as it does on hashmap); order asc ranks the lowest first.
func TestTopNNoWindowAsc(t *testing.T) {
	p := TopNParams{N: 2, By: compiled(t, "price"), Order: TopNAsc}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h, err := openStateful(t, kind, t.TempDir(), nil, nil, NewTopN(p))
			if err != nil {
				t.Fatal(err)
			}
			spaced := runtime.Record{Key: []byte("k"), Value: []byte(`{"bid": "e", "price": 2}`), Timestamp: time.UnixMilli(5)}
			h.process(bid("k", "a", 5, 1), bid("k", "b", 3, 2))
			first := rankText(h.emitted())
			h2, err := openStateful(t, kind, t.TempDir(), nil, snapshotRestore(t, h), NewTopN(p))
			if err != nil {
				t.Fatal(err)
			}
			h2.process(bid("k", "c", 4, 3), bid("k", "d", 9, 4), spaced, bid("k", "f", 1, 6))
			got := append(first, rankText(h2.finish())...)
			want := []string{
				`+I k#1 {"key":"k","rank":1,"row":{"bid":"a","price":5}}`,
				`-U k#1 {"key":"k","rank":1,"row":{"bid":"a","price":5}}`, `+U k#1 {"key":"k","rank":1,"row":{"bid":"b","price":3}}`,
				`+I k#2 {"key":"k","rank":2,"row":{"bid":"a","price":5}}`,
				`-U k#2 {"key":"k","rank":2,"row":{"bid":"a","price":5}}`, `+U k#2 {"key":"k","rank":2,"row":{"bid":"c","price":4}}`,
				`-U k#1 {"key":"k","rank":1,"row":{"bid":"b","price":3}}`, `+U k#1 {"key":"k","rank":1,"row":{"bid": "e", "price": 2}}`,
				`-U k#2 {"key":"k","rank":2,"row":{"bid":"c","price":4}}`, `+U k#2 {"key":"k","rank":2,"row":{"bid":"b","price":3}}`,
				`-U k#1 {"key":"k","rank":1,"row":{"bid":"e","price":2}}`, `+U k#1 {"key":"k","rank":1,"row":{"bid":"f","price":1}}`,
				`-U k#2 {"key":"k","rank":2,"row":{"bid":"b","price":3}}`, `+U k#2 {"key":"k","rank":2,"row":{"bid":"e","price":2}}`,
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("changelog\n%q\nwant\n%q", got, want)
			}
		})
	}
}

// TestTopNRowsSerializer: the ranking's serializer writes the bytes
// state.JSONSerializer wrote (name "json"), so checkpoints written before
// it restore and the other way round, and its Copy is Decode(Append(v)):
// rows shared with a known ranking stay shared, a new row is copied (its
// record's buffer may be reused), a row json.Marshal compacts or escapes
// is kept as json.Marshal writes it.
func TestTopNRowsSerializer(t *testing.T) {
	old := state.JSONSerializer[[]topNRow]{}
	ser := topNRowsSerializer{}
	if ser.Name() != old.Name() {
		t.Fatalf("name %q, want %q", ser.Name(), old.Name())
	}
	stored := []byte(`[{"row":{"bid":"a"},"score":{"int":7},"ts":1},{"row":"x\u003cy","score":{"float":1.5,"is_float":true},"ts":2}]`)
	kept, err := ser.Decode(stored)
	if err != nil {
		t.Fatal(err)
	}
	fresh := []byte(`{"bid": "n", "p":"<"}`)
	v := []topNRow{kept[0], {Row: fresh, Score: number{Int: 9}, TS: 3}, kept[1]}
	c, err := ser.Copy(v, [][]topNRow{kept, nil})
	if err != nil {
		t.Fatal(err)
	}
	copy(fresh, "XXXXXXXXX")
	if !sameBytes(c[0].Row, kept[0].Row) || !sameBytes(c[2].Row, kept[1].Row) {
		t.Fatal("rows of the known ranking were copied, want shared")
	}
	want := `[{"row":{"bid":"a"},"score":{"int":7},"ts":1},{"row":{"bid":"n","p":"\u003c"},"score":{"int":9},"ts":3},{"row":"x\u003cy","score":{"float":1.5,"is_float":true},"ts":2}]`
	got, err := ser.AppendKept(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("kept ranking encodes as\n%s\nwant\n%s", got, want)
	}
	plain := []topNRow{kept[0], {Row: []byte(`{"bid":"m"}`), Score: number{Int: 9}, TS: 3}}
	c, err = ser.Copy(plain, [][]topNRow{kept})
	if err != nil {
		t.Fatal(err)
	}
	if !sameBytes(c[0].Row, kept[0].Row) {
		t.Fatal("a row of the known ranking was copied, want shared")
	}
	a, _ := ser.AppendKept(nil, c)
	b, _ := old.Append(nil, plain)
	if string(a) != string(b) || sameBytes(c[1].Row, plain[1].Row) {
		t.Fatalf("kept ranking %s (new row shared: %v), want %s with the new row copied", a, sameBytes(c[1].Row, plain[1].Row), b)
	}
	if _, err := ser.Copy([]topNRow{{Row: []byte(`{bad`)}}, nil); err == nil {
		t.Fatal("Copy of a row that is not JSON: no error")
	}
	if v := ser.View(c); &v[0] == &c[0] {
		t.Fatal("View shares the kept slice")
	}
}

// TestTopNCheckParams: n in [1, 1000] and by are required; window is 0 or
// at least 1ms.
func TestTopNCheckParams(t *testing.T) {
	var got []string
	(&TopNParams{N: 1001, Window: -time.Second}).CheckParams(func(field, msg string) { got = append(got, field+": "+msg) })
	want := []string{
		"n: must be in [1, 1000], got 1001",
		"by: required: the expression records are ranked by (a number, such as price)",
		"window: must be 0 (no window) or at least 1ms, got -1s",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("problems %q, want %q", got, want)
	}
}

// TestTopNRankField: with rank_field each rank's value is the ranked
// record's own object with the rank number added last (Flink's Top-N row,
// Nexmark q19 without a map), keyed "<key>#<rank>" with the same changelog
// as without it; whitespace and an empty object are handled; a record
// that is not an object or already has the field is an eval_error; and
// rank_field with window is refused. Both backends, across a restore.
func TestTopNRankField(t *testing.T) {
	p := TopNParams{N: 2, By: compiled(t, "price"), RankField: "rank_number"}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h, err := openStateful(t, kind, t.TempDir(), nil, nil, NewTopN(p))
			if err != nil {
				t.Fatal(err)
			}
			h.process(bid("k", "a", 5, 1), bid("k", "b", 7, 2))
			first := rankText(h.emitted())
			h2, err := openStateful(t, kind, t.TempDir(), nil, snapshotRestore(t, h), NewTopN(p))
			if err != nil {
				t.Fatal(err)
			}
			bad := &recordErrors{}
			h2.feed(bad,
				runtime.Record{Key: []byte("k"), Value: []byte(`{"bid": "s", "price": 9 } `), Timestamp: time.UnixMilli(3)},
				runtime.Record{Key: []byte("k"), Value: []byte(`{"price":8,"rank_number":1}`), Timestamp: time.UnixMilli(4)},
			)
			got := append(first, rankText(h2.finish())...)
			want := []string{
				`+I k#1 {"bid":"a","price":5,"rank_number":1}`,
				`-U k#1 {"bid":"a","price":5,"rank_number":1}`, `+U k#1 {"bid":"b","price":7,"rank_number":1}`,
				`+I k#2 {"bid":"a","price":5,"rank_number":2}`,
				`-U k#1 {"bid":"b","price":7,"rank_number":1}`, `+U k#1 {"bid": "s", "price": 9,"rank_number":1}`,
				`-U k#2 {"bid":"a","price":5,"rank_number":2}`, `+U k#2 {"bid":"b","price":7,"rank_number":2}`,
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("changelog\n%q\nwant\n%q", got, want)
			}
			var errs []string
			for _, e := range bad.errs {
				errs = append(errs, string(e.Reason)+": "+e.Detail)
			}
			wantErrs := []string{
				`eval_error: expression "price": top_n rank_field the record already has a field "rank_number"`,
			}
			if !reflect.DeepEqual(errs, wantErrs) {
				t.Fatalf("bad records %q, want %q", errs, wantErrs)
			}
		})
	}
	f := NewTopN(p)
	if r := f.rankFieldRecord(bid("e", "x", 1, 1), 2, topNRow{Row: []byte("{ }\n")}, runtime.ChangeInsert); string(r.Key) != "e#3" || string(r.Value) != `{"rank_number":3}` {
		t.Fatalf("an empty object's rank %s %s", r.Key, r.Value)
	}
	if err := f.checkRankRow([]byte(`[1]`)); err == nil || !strings.Contains(err.Error(), "needs a JSON object record, got JSON") {
		t.Fatalf("an array row: %v", err)
	}
	var problems []string
	q := TopNParams{N: 1, By: compiled(t, "price"), Window: time.Minute, RankField: "r"}
	q.CheckParams(func(field, msg string) { problems = append(problems, field+": "+msg) })
	if want := []string{"rank_field: not with window: a window's rows are emitted as {key, rank, window_start, window_end, row}"}; !reflect.DeepEqual(problems, want) {
		t.Fatalf("problems %q, want %q", problems, want)
	}
}

// TestTopNRowsAppendKept: AppendKept of a ranking Copy returned writes
// exactly the bytes state.JSONSerializer's json.Marshal writes for the
// ranking (the checkpoint format), over random rankings: integer scores
// (zero, negative, the int64 bounds), doubles, a big integer, rows with
// whitespace, <, >, &, U+2028 and U+2029, strings; a nil ranking.
func TestTopNRowsAppendKept(t *testing.T) {
	old := state.JSONSerializer[[]topNRow]{}
	ser := topNRowsSerializer{}
	rng := rand.New(rand.NewPCG(19, 9))
	rows := []string{
		`{"auction":1000,"url":"https://x.com/a?b=1&c=2","extra":"<p>"}`,
		`{ "a" : [1, 2 ,{"b":"c d"}] ,"e":"\u2028 ` + "\u2028\u2029" + `"}`,
		`"plain"`, `"x\"y\\z"`, `12.50`, `null`, `true`, `[]`, `{}`,
		`{"bid":{"auction":1,"price":2},"rank":"a&b"}`,
	}
	scores := []number{
		{}, {Int: 7}, {Int: -3}, {Int: math.MaxInt64}, {Int: math.MinInt64},
		{Float: 1.5, IsFloat: true}, {Float: 1e21, IsFloat: true}, {Float: -0.000001, IsFloat: true}, {IsFloat: true},
		{Big: new(big.Int).Lsh(big.NewInt(1), 70)},
	}
	for n := range 500 {
		var v []topNRow
		if n > 0 {
			v = make([]topNRow, rng.IntN(12))
		}
		for i := range v {
			v[i] = topNRow{Row: []byte(rows[rng.IntN(len(rows))]), Score: scores[rng.IntN(len(scores))], TS: rng.Int64N(1<<42) - 1<<40}
		}
		want, err := old.Append(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		c, err := ser.Copy(v, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ser.AppendKept([]byte("x"), c)
		if err != nil {
			t.Fatal(err)
		}
		if string(got[1:]) != string(want) || got[0] != 'x' {
			t.Fatalf("ranking %d: AppendKept\n%s\nwant\n%s", n, got, want)
		}
	}
}

// TestTopNCompactEscape: compactEscape writes what json.Compact then
// json.HTMLEscape write, for valid JSON with whitespace inside and outside
// strings, escapes, <, >, &, U+2028, U+2029 and other UTF-8; and
// marshalRaw still refuses what is not JSON.
func TestTopNCompactEscape(t *testing.T) {
	for _, in := range []string{
		`{}`, ` { "a" : 1 } `, "{\n\t\"a b\": \"c\\\" d\\\\\",\r\n \"e\": [ 1 , 2 ]}",
		`{"url":"https://www.nexmark.com/a/b?c=1&channel_id=2","x":"<script>"}`,
		`"\u2028` + "\u2028\u2029\u2027\u202a é 日本" + `"`, `[ "a&b" , "<>" , null , true , -1.5e3 ]`,
		`"\\"`, `"\\\"&"`,
	} {
		var c, e bytes.Buffer
		if err := json.Compact(&c, []byte(in)); err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		json.HTMLEscape(&e, c.Bytes())
		if got := compactEscape(nil, []byte(in)); string(got) != e.String() {
			t.Fatalf("%q: compactEscape %q, want %q", in, got, e.String())
		}
		got, err := marshalRaw([]byte(in))
		if err != nil || string(got) != e.String() {
			t.Fatalf("%q: marshalRaw %q %v, want %q", in, got, err, e.String())
		}
	}
	if _, err := marshalRaw([]byte(`{"a":`)); err == nil {
		t.Fatal("marshalRaw of a row that is not JSON: no error")
	}
}

// TestTopNRankFieldEscapedName: the rank field is found in a record that
// writes its name with an escape, and a name JSON escapes (a<b) is found
// written plainly; a record without it passes.
func TestTopNRankFieldEscapedName(t *testing.T) {
	f := NewTopN(TopNParams{N: 1, By: compiled(t, "price"), RankField: "rank_number"})
	if err := f.checkRankRow([]byte(`{"price":1,"r\u0061nk_number":2}`)); err == nil || !strings.Contains(err.Error(), `already has a field "rank_number"`) {
		t.Fatalf("an escaped member name: %v", err)
	}
	if err := f.checkRankRow([]byte(` {"price":1,"rank_number_2":"rank_numbe"}`)); err != nil {
		t.Fatalf("a record without the field: %v", err)
	}
	if err := f.checkRankRow([]byte(`{"price":1,"x":"\"rank_number\""}`)); err != nil {
		t.Fatalf("the name inside a string value: %v", err)
	}
	g := NewTopN(TopNParams{N: 1, By: compiled(t, "price"), RankField: "a<b"})
	if err := g.checkRankRow([]byte(`{"price":1,"a<b":2}`)); err == nil || !strings.Contains(err.Error(), `already has a field "a<b"`) {
		t.Fatalf("a name JSON escapes, written plainly: %v", err)
	}
	if err := g.checkRankRow([]byte(`{"price":1}`)); err != nil {
		t.Fatalf("a record without the field: %v", err)
	}
}
