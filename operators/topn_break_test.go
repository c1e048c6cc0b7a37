package operators

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// TestTopNDeepCheckedRecord: a record nested deeper than encoding/json's
// 10,000 levels is valid to gjson, the check a Kafka source of format json
// marks its records with (runtime.ValidJSON), and invalid to encoding/json,
// which decodes top_n's state. top_n must not take the source's mark for
// encoding/json's check: the record is ranked as the string of its bytes
// (as without the mark), so the ranking's checkpoint restores, on both
// backends, and the rankings go on from it.
func TestTopNDeepCheckedRecord(t *testing.T) {
	deep := `{"price":5,"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`
	if !gjson.Valid(deep) || json.Valid([]byte(deep)) {
		t.Fatalf("gjson.Valid %v, json.Valid %v: want true, false", gjson.Valid(deep), json.Valid([]byte(deep)))
	}
	quoted, _ := json.Marshal(deep)
	p := TopNParams{N: 2, By: compiled(t, "price"), Order: TopNDesc}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h, err := openStateful(t, kind, t.TempDir(), nil, nil, NewTopN(p))
			if err != nil {
				t.Fatal(err)
			}
			rec := runtime.Record{Key: []byte("k"), Value: []byte(deep), Format: runtime.FormatJSON, Timestamp: time.UnixMilli(1)}
			rec.SetDecoded(runtime.ValidJSON{}) // as the source marks it
			h.process(rec)
			first := rankText(h.emitted())
			h2, err := openStateful(t, kind, t.TempDir(), nil, snapshotRestore(t, h), NewTopN(p))
			if err != nil {
				t.Fatal(err)
			}
			h2.process(bid("k", "b", 9, 2))
			got := append(first, rankText(h2.finish())...)
			want := []string{
				`+I k#1 {"key":"k","rank":1,"row":` + string(quoted) + `}`,
				`-U k#1 {"key":"k","rank":1,"row":` + string(quoted) + `}`,
				`+U k#1 {"key":"k","rank":1,"row":{"bid":"b","price":9}}`,
				`+I k#2 {"key":"k","rank":2,"row":` + string(quoted) + `}`,
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("changelog (%d records)\n%.300q\nwant\n%.300q", len(got), got, want)
			}
		})
	}
}

// FuzzTopNRowWriters: the writers top_n's state uses without reflection
// equal encoding/json's on any row: compactEscape is json.Compact then
// json.HTMLEscape of valid JSON, Copy fails exactly when Append does and
// AppendKept of its ranking (row, a score of each kind, a row of a known
// ranking) is Append's bytes, which Decode reads back to the rows
// json.Marshal writes; and checkRankRow's scan without a parse says what
// the parse says for a valid row and any rank_field name.
func FuzzTopNRowWriters(f *testing.F) {
	for _, s := range []string{
		`{"auction":1000,"url":"https://x.com/a?b=1&c=2","extra":"<p>"}`,
		`{ "a" : [1, 2 ,{"b":"c d"}] ,"e":"\u2028 ` + "\u2028\u2029" + `"}`,
		`"x\"y\\z"`, `12.50`, `null`, `[]`, `{}`, ` {"rank_number":1} `, `{"r\u0061nk_number":1}`,
		`{"a":{"rank_number":1}}`, `{"a":"\"rank_number\""}`, "{\"\xff\":\"\xfe\"}", `{"a<b":1}`, `{"":1}`,
		`{"a":1,}`, `{"a" 1}`, `"\x"`, "\"\x01\"", `01`, ``,
	} {
		f.Add([]byte(s), "rank_number", int64(7), 1.5, uint8(0), int64(1))
	}
	f.Add([]byte(`{"a<b":1}`), "a<b", int64(0), 0.0, uint8(1), int64(-1))
	f.Add([]byte(`{"":1}`), "", int64(math.MinInt64), -0.0, uint8(2), int64(math.MaxInt64))
	f.Add([]byte("{\"\xff\":1}"), "\xff", int64(-1), 1e300, uint8(3), int64(0))
	f.Add([]byte("{\"\u2028\":1}"), "\u2028", int64(1), 5e-324, uint8(4), int64(0))
	old := state.JSONSerializer[[]topNRow]{}
	ser := topNRowsSerializer{}
	by, err := CompileExpression("price")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, row []byte, name string, i int64, fl float64, kind uint8, ts int64) {
		valid := json.Valid(row)
		if valid {
			var c, e bytes.Buffer
			if err := json.Compact(&c, row); err != nil {
				t.Fatal(err)
			}
			json.HTMLEscape(&e, c.Bytes())
			if got := compactEscape(nil, row); string(got) != e.String() {
				t.Fatalf("compactEscape(%q) = %q, want %q", row, got, e.String())
			}
		}
		var sc number
		switch kind % 5 {
		case 0:
			sc = number{Int: i}
		case 1:
			sc = number{Float: fl, IsFloat: true}
		case 2:
			sc = number{Big: new(big.Int).Mul(big.NewInt(i), big.NewInt(math.MaxInt64))}
		case 3:
			sc = number{}
		}
		known := [][]topNRow{{{Row: json.RawMessage(`{"bid":1,"url":"a\u0026b"}`), TS: 3}}}
		rec := bytes.Clone(row) // the record's buffer
		v := []topNRow{{Row: rec, Score: sc, TS: ts}, known[0][0], {Row: json.RawMessage(` [ 1 ,"<" ] `), Score: number{Int: -i}, TS: -ts}}
		want, werr := old.Append(nil, v)
		kept, cerr := ser.Copy(v, known)
		if (werr == nil) != (cerr == nil) {
			t.Fatalf("row %q score %+v: Append error %v, Copy error %v", row, sc, werr, cerr)
		}
		if werr == nil {
			rec[0] = 'X' // reused: Copy shares no memory with it
			got, err := ser.AppendKept([]byte("p"), kept)
			if err != nil || string(got) != "p"+string(want) {
				t.Fatalf("row %q score %+v: AppendKept %q %v, want %q", row, sc, got, err, want)
			}
			back, err := old.Decode(want)
			if err != nil {
				t.Fatal(err)
			}
			again, err := ser.AppendKept(nil, back)
			if err != nil || string(again) != string(want) {
				t.Fatalf("row %q: AppendKept of the decoded ranking %q %v, want %q", row, again, err, want)
			}
		}
		if !valid || name == "" { // "": no rank_field
			return
		}
		tn := NewTopN(TopNParams{N: 1, By: by, RankField: name})
		r := gjson.ParseBytes(row)
		has := false
		r.ForEach(func(k, _ gjson.Result) bool {
			has = k.String() == name
			return !has
		})
		wantErr := !r.IsObject() || has
		if err := tn.checkRankRow(row); (err != nil) != wantErr {
			t.Fatalf("checkRankRow(%q) with rank_field %q: %v, want an error %v", row, name, err, wantErr)
		}
	})
}
