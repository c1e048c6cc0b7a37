package operators

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// tableRec is a record of a table source: an upsert of key to value,
// or a tombstone (value "").
func tableRec(key, value string) runtime.Record {
	if value == "" {
		return runtime.Record{Key: []byte(key), Change: runtime.ChangeDelete}
	}
	return runtime.Record{Key: []byte(key), Value: []byte(value), Change: runtime.ChangeUpdateAfter}
}

// joinRecs renders records as "key value change" lines.
func joinRecs(recs []runtime.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%s %s %s %d\n", r.Key, r.Value, r.Change, r.Timestamp.UnixMilli())
	}
	return b.String()
}

// TestGlobalTableJoin runs a table's changelog (upserts, an update, a
// tombstone, a -U that must be ignored) and clicks through the join,
// inner and left, and compares the exact output; then a snapshot restored
// into a new join keeps the table.
func TestGlobalTableJoin(t *testing.T) {
	ctx := context.Background()
	click := func(id, user string, ts int64) runtime.Record {
		return runtime.Record{Key: []byte(id), Value: []byte(fmt.Sprintf(`{"id":%q,"user":%q}`, id, user)), Timestamp: time.UnixMilli(ts)}
	}
	for _, tc := range []struct {
		join TableJoinKind
		want string
	}{
		{TableJoinInner, `c1 {"click":"c1","country":"NL"} +I 1
c2 {"click":"c2","country":"DE"} +I 2
c4 {"click":"c4","country":"BE"} +I 4
`},
		{TableJoinLeft, `c1 {"click":"c1","country":"NL"} +I 1
c2 {"click":"c2","country":"DE"} +I 2
c3 {"click":"c3","country":null} +I 3
c4 {"click":"c4","country":"BE"} +I 4
c5 {"click":"c5","country":null} +I 5
`},
	} {
		t.Run(string(tc.join), func(t *testing.T) {
			p := &GlobalTableJoinParams{
				Key: compiled(t, "user"), Join: tc.join,
				Select: compiled(t, `{"click": left.id, "country": right == null ? null : right.country}`),
			}
			j := NewGlobalTableJoin(p)
			out := &sliceCollector{}
			bc := func(r runtime.Record) {
				if err := j.ProcessBroadcastElement(ctx, r, out); err != nil {
					t.Fatal(err)
				}
			}
			el := func(r runtime.Record) {
				if err := j.ProcessElement(ctx, r, out); err != nil {
					t.Fatal(err)
				}
			}
			bc(tableRec("u1", `{"country":"NL"}`))
			bc(tableRec("u2", `{"country":"DE"}`))
			bc(tableRec("u3", `{"country":"FR"}`))
			el(click("c1", "u1", 1))
			el(click("c2", "u2", 2))
			bc(tableRec("u2", ""))                 // u2 deleted
			bc(tableRec("u1", `{"country":"BE"}`)) // u1 updated
			bc(runtime.Record{Key: []byte("u3"), Value: []byte(`{"country":"FR"}`), Change: runtime.ChangeUpdateBefore})
			el(click("c3", "u2", 3))
			el(click("c4", "u1", 4))
			el(click("c5", "nobody", 5))
			if got := joinRecs(out.recs); got != tc.want {
				t.Fatalf("output:\n%s\nwant:\n%s", got, tc.want)
			}
			if j.Rows() != 2 {
				t.Fatalf("%d rows, want 2 (u1, u3)", j.Rows())
			}
			snap, err := j.SnapshotBroadcastState()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := string(snap[GlobalTableState]), `{"format":2,"rows":"AnUxABB7ImNvdW50cnkiOiJCRSJ9AnUzABB7ImNvdW50cnkiOiJGUiJ9"}`; got != want {
				t.Fatalf("snapshot %s, want %s", got, want)
			}
			r := NewGlobalTableJoin(p)
			if err := r.RestoreBroadcastState(snap); err != nil {
				t.Fatal(err)
			}
			out.recs = nil
			for _, c := range []runtime.Record{click("c6", "u3", 6), click("c7", "u2", 7)} {
				if err := r.ProcessElement(ctx, c, out); err != nil {
					t.Fatal(err)
				}
			}
			want := "c6 {\"click\":\"c6\",\"country\":\"FR\"} +I 6\n"
			if tc.join == TableJoinLeft {
				want += "c7 {\"click\":\"c7\",\"country\":null} +I 7\n"
			}
			if got := joinRecs(out.recs); got != want {
				t.Fatalf("after restore:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestGlobalTableJoinKeys: a numeric key expression looks up the key's JSON
// text; a key of another type, and a select that fails, are bad records
// (eval_error); a text-format table row is seen as a string; the stream
// record's change kind, key, timestamp and headers pass through.
func TestGlobalTableJoinKeys(t *testing.T) {
	ctx := context.Background()
	j := NewGlobalTableJoin(&GlobalTableJoinParams{Key: compiled(t, "n"), Select: compiled(t, `{"n": left.n, "row": right, "k": key, "ts": timestamp}`)})
	out := &sliceCollector{}
	for _, r := range []runtime.Record{tableRec("42", `{"a":1}`), {Key: []byte("7"), Value: []byte("plain text"), Format: runtime.FormatText, Change: runtime.ChangeUpdateAfter}} {
		if err := j.ProcessBroadcastElement(ctx, r, out); err != nil {
			t.Fatal(err)
		}
	}
	in := runtime.Record{Key: []byte("s"), Value: []byte(`{"n":42}`), Timestamp: time.UnixMilli(9), Change: runtime.ChangeDelete, Headers: []runtime.Header{{Key: "h", Value: []byte("v")}}}
	if err := j.ProcessElement(ctx, in, out); err != nil {
		t.Fatal(err)
	}
	if err := j.ProcessElement(ctx, runtime.Record{Value: []byte(`{"n":7}`)}, out); err != nil {
		t.Fatal(err)
	}
	if got, want := joinRecs(out.recs), "s {\"k\":\"s\",\"n\":42,\"row\":{\"a\":1},\"ts\":9} -D 9\n {\"k\":null,\"n\":7,\"row\":\"plain text\",\"ts\":0} +I -62135596800000\n"; got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
	if h := out.recs[0].Headers; len(h) != 1 || h[0].Key != "h" {
		t.Fatalf("headers %v, want kept", h)
	}
	for _, v := range []string{`{"n":true}`, `{"m":1}`} {
		err := j.ProcessElement(ctx, runtime.Record{Value: []byte(v)}, out)
		var re *runtime.RecordError
		if !errors.As(err, &re) || re.Reason != runtime.ReasonEvalError {
			t.Fatalf("%s: %v, want an eval_error record error", v, err)
		}
	}
	if j := NewGlobalTableJoin(&GlobalTableJoinParams{Key: compiled(t, "n"), Select: compiled(t, `right.missing`), Join: TableJoinLeft}); true {
		err := j.ProcessElement(ctx, runtime.Record{Value: []byte(`{"n":1}`)}, out)
		var re *runtime.RecordError
		if !errors.As(err, &re) || re.Reason != runtime.ReasonEvalError {
			t.Fatalf("select on a null right: %v, want an eval_error record error", err)
		}
	}
}

// TestGlobalTableJoinSnapshotFollowsTable: an unchanged table's snapshots
// are one encoding, shared (not sorted and encoded per checkpoint), and
// every kind of change (an upsert, a tombstone, a restore) makes the next
// snapshot show it; a tombstone of a missing row and a -U change nothing.
func TestGlobalTableJoinSnapshotFollowsTable(t *testing.T) {
	ctx := context.Background()
	j := NewGlobalTableJoin(&GlobalTableJoinParams{Key: compiled(t, "user"), Select: compiled(t, `right`)})
	bc := func(r runtime.Record) {
		t.Helper()
		if err := j.ProcessBroadcastElement(ctx, r, &sliceCollector{}); err != nil {
			t.Fatal(err)
		}
	}
	snap := func(want string) json.RawMessage {
		t.Helper()
		m, err := j.SnapshotBroadcastState()
		if err != nil {
			t.Fatal(err)
		}
		if got := tableText(t, m[GlobalTableState]); got != want {
			t.Fatalf("snapshot %s, want %s", got, want)
		}
		return m[GlobalTableState]
	}
	const u1NL = `u1={"country":"NL"}`
	const u1BE = `u1={"country":"BE"}`
	const u2DE = `u2={"country":"DE"}`
	snap(``)
	bc(tableRec("u2", `{"country":"DE"}`))
	bc(tableRec("u1", `{"country":"NL"}`))
	first := snap(u1NL + ` ` + u2DE)
	bc(tableRec("u3", ""))                                                                                       // tombstone of a missing row
	bc(runtime.Record{Key: []byte("u1"), Value: []byte(`{"country":"FR"}`), Change: runtime.ChangeUpdateBefore}) // ignored
	again := snap(u1NL + ` ` + u2DE)
	if &again[0] != &first[0] {
		t.Fatal("an unchanged table was encoded again")
	}
	bc(tableRec("u1", `{"country":"BE"}`))
	snap(u1BE + ` ` + u2DE)
	bc(tableRec("u2", ""))
	snap(u1BE)
	if err := j.RestoreBroadcastState(map[string]json.RawMessage{GlobalTableState: first}); err != nil {
		t.Fatal(err)
	}
	snap(u1NL + ` ` + u2DE)
	bc(tableRec("u2", `{"country":"DE"}`)) // the same row again: still a change of the table's version
	snap(u1NL + ` ` + u2DE)
}

// tableText renders a checkpointed table of format 2 as "key=value"
// rows in its order, a text row's value in parentheses, a nil value as
// <nil>; it fails on any other format.
func tableText(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	if !strings.HasPrefix(string(raw), `{"format":2,"rows":"`) {
		t.Fatalf("table %s: not format 2", raw)
	}
	var s globalTableRows
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	rows, err := decodeGlobalTable(raw)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	b := s.Rows
	for len(b) > 0 { // the keys in their stored order
		n, w := binary.Uvarint(b)
		keys = append(keys, string(b[w:w+int(n)]))
		b = b[w+int(n)+1:]
		n, w = binary.Uvarint(b)
		b = b[w+int(n):]
	}
	var out []string
	for _, k := range keys {
		r := rows[k]
		switch {
		case r.raw == nil:
			out = append(out, k+"=<nil>")
		case r.text:
			out = append(out, k+"=("+string(r.raw)+")")
		default:
			out = append(out, k+"="+string(r.raw))
		}
	}
	return strings.Join(out, " ")
}

// TestGlobalTableJoinRestoresListFormat: the table f2a2eb3 checkpointed
// (the JSON list before format 2: testdata/globaltablejoin_golden)
// restores with every row as it was (a text row, a nil and an empty
// value, an empty key) and is checkpointed again in format 2 with the
// same rows; a format-2 table survives its own round trip; an unknown
// format, a truncated row and a row's key twice are refused.
func TestGlobalTableJoinRestoresListFormat(t *testing.T) {
	old, err := os.ReadFile("testdata/globaltablejoin_golden/table-list-f2a2eb3.json")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := &GlobalTableJoinParams{Key: compiled(t, "user"), Join: TableJoinLeft, Select: compiled(t, `{"user": left.user, "row": right}`)}
	j := NewGlobalTableJoin(p)
	if err := j.RestoreBroadcastState(map[string]json.RawMessage{GlobalTableState: old}); err != nil {
		t.Fatal(err)
	}
	out := &sliceCollector{}
	for _, u := range []string{"u1", "u3", "7", "empty", "nil", "", "u2"} {
		if err := j.ProcessElement(ctx, runtime.Record{Value: fmt.Appendf(nil, `{"user":%q}`, u)}, out); err != nil {
			t.Fatal(err)
		}
	}
	want := ` {"row":{"country":"BE"},"user":"u1"} +I -62135596800000
 {"row":{"country":"FR"},"user":"u3"} +I -62135596800000
 {"row":"plain text","user":"7"} +I -62135596800000
 {"row":"","user":"empty"} +I -62135596800000
 {"row":null,"user":"nil"} +I -62135596800000
 {"row":"no key","user":""} +I -62135596800000
 {"row":null,"user":"u2"} +I -62135596800000
`
	if got := joinRecs(out.recs); got != want {
		t.Fatalf("joined after restoring the list:\n%s\nwant:\n%s", got, want)
	}
	m, err := j.SnapshotBroadcastState()
	if err != nil {
		t.Fatal(err)
	}
	const rows = `="no key" 7=(plain text) empty= nil=<nil> u1={"country":"BE"} u3={"country":"FR"}`
	if got := tableText(t, m[GlobalTableState]); got != rows {
		t.Fatalf("checkpointed again as %s, want %s", got, rows)
	}
	r := NewGlobalTableJoin(p)
	if err := r.RestoreBroadcastState(m); err != nil {
		t.Fatal(err)
	}
	m2, err := r.SnapshotBroadcastState()
	if err != nil {
		t.Fatal(err)
	}
	if string(m2[GlobalTableState]) != string(m[GlobalTableState]) {
		t.Fatalf("format 2 round trip %s, want %s", m2[GlobalTableState], m[GlobalTableState])
	}
	for raw, want := range map[string]string{
		`{"format":3,"rows":""}`:             "unknown table format 3",
		`{"format":2,"rows":"AnUx"}`:         "malformed table rows", // key u1, no flags
		`{"format":2,"rows":"AnUxBAA="}`:     "malformed table rows", // flags 4
		`{"format":2,"rows":"AnUxAgF4"}`:     "malformed table rows", // nil with a value
		`{"format":2,"rows":"AnUxAAUx"}`:     "malformed table rows", // value longer than the rows
		`{"format":2,"rows":"AXgAAAF4AAA="}`: `key "x" twice`,
	} {
		err := NewGlobalTableJoin(p).RestoreBroadcastState(map[string]json.RawMessage{GlobalTableState: json.RawMessage(raw)})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v, want %q", raw, err, want)
		}
	}
}
