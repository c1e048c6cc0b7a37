package operators

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// tableJoinHarness drives a TableJoin on a KeyedOperator as a
// KeyedCoProcessFunction: main output on ch, the late side output on late.
type tableJoinHarness struct {
	*joinHarness
	tj *TableJoin
}

func newTableJoinHarness(t *testing.T, kind, dir string, restore *Restore, p TableJoinParams) *tableJoinHarness {
	t.Helper()
	h := &joinHarness{harness: &harness{t: t, mb: runtime.NewMailbox(), ch: runtime.NewChannel(1 << 12), ctx: context.Background()},
		late: runtime.NewChannel(1 << 10)}
	tj := NewTableJoin(p)
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{h.ch}, runtime.ForwardPartitioner{}))
	out.AddSideWriter(LateOutput, runtime.NewWriter([]runtime.Channel{h.late}, runtime.ForwardPartitioner{}))
	h.op = NewKeyedCoProcessOperator(OpenContext{Operator: "tj", Parallelism: 1}, opener(kind, dir), restore, tj, out)
	h.op.SetMailbox(h.mb)
	if err := h.op.Open(h.ctx); err != nil {
		t.Fatal(err)
	}
	return &tableJoinHarness{joinHarness: h, tj: tj}
}

// user is a record of the users table (input 1): an upsert of user to
// country at ts, or a tombstone when country is "".
func user(id, country string, ts int64) runtime.Record {
	r := runtime.Record{Key: []byte(id), Timestamp: time.UnixMilli(ts), Change: runtime.ChangeUpdateAfter}
	if country == "" {
		r.Change = runtime.ChangeDelete
	} else {
		r.Value = []byte(`{"country":"` + country + `"}`)
	}
	return r
}

// clickOf is a click (input 0) keyed by its user.
func clickOf(id, userID string, ts int64) runtime.Record {
	return runtime.Record{Key: []byte(userID), Value: []byte(`{"id":"` + id + `"}`), Timestamp: time.UnixMilli(ts)}
}

// tableJoinLines renders outputs as "key ts value" lines.
func tableJoinLines(recs []runtime.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%s %d %s\n", r.Key, r.Timestamp.UnixMilli(), r.Value)
	}
	return b.String()
}

const tableJoinSelect = `{"click": left.id, "country": right == null ? null : right.country}`

// TestTableJoinEventTime: the users table (u1 NL at 100, DE at 300, deleted
// at 500, FR at 700; u2 BE at 200) arrives after the clicks, half of it
// before a snapshot and restore; once the watermark passes the clicks,
// each joins the country valid at its own time: the click before u1
// existed gets null on a left join and is dropped on an inner one, as the
// click during u1's deletion and the click of a user who never existed.
// Outputs come per key in event-time order. After the watermark moves far
// past, only the latest version of each user is left in state.
func TestTableJoinEventTime(t *testing.T) {
	want := map[TableJoinKind]string{
		TableJoinLeft: `u1 50 {"click":"c1","country":null}
u1 150 {"click":"c2","country":"NL"}
u1 350 {"click":"c3","country":"DE"}
u1 550 {"click":"c4","country":null}
u1 800 {"click":"c5","country":"FR"}
u2 250 {"click":"c6","country":"BE"}
u3 260 {"click":"c7","country":null}
`,
		TableJoinInner: `u1 150 {"click":"c2","country":"NL"}
u1 350 {"click":"c3","country":"DE"}
u1 800 {"click":"c5","country":"FR"}
u2 250 {"click":"c6","country":"BE"}
`,
	}
	for _, kind := range []string{state.KindHashmap, state.KindPebble} {
		for _, join := range []TableJoinKind{TableJoinLeft, TableJoinInner} {
			t.Run(kind+"/"+string(join), func(t *testing.T) {
				p := TableJoinParams{Mode: TableJoinEventTime, Join: join, HistoryRetention: time.Second, Select: compiled(t, tableJoinSelect)}
				h := newTableJoinHarness(t, kind, t.TempDir(), nil, p)
				for _, c := range []runtime.Record{clickOf("c5", "u1", 800), clickOf("c1", "u1", 50), clickOf("c6", "u2", 250),
					clickOf("c3", "u1", 350), clickOf("c2", "u1", 150), clickOf("c7", "u3", 260), clickOf("c4", "u1", 550)} {
					h.send(0, c)
				}
				h.send(1, user("u1", "NL", 100))
				h.send(1, user("u2", "BE", 200))
				h.send(1, user("u1", "DE", 300))
				h.wm(40) // before every click: nothing yet
				if got := h.emitted(); len(got) != 0 {
					t.Fatalf("emitted before the watermark passed a click: %s", tableJoinLines(got))
				}
				r := snapshotRestore(t, h.harness)
				h = newTableJoinHarness(t, kind, t.TempDir(), r, p)
				h.wm(40)
				h.send(1, user("u1", "", 500))
				h.send(1, user("u1", "FR", 700))
				h.wm(1000)
				got := h.emitted()
				// Per key in time order; keys in timer order (by time, then key).
				byKey := map[string]string{}
				for _, r := range got {
					byKey[string(r.Key)] += tableJoinLines([]runtime.Record{r})
				}
				if all := byKey["u1"] + byKey["u2"] + byKey["u3"]; all != want[join] {
					t.Fatalf("output:\n%s\nwant:\n%s", all, want[join])
				}
				if late := h.lateRecords(); len(late) != 0 {
					t.Fatalf("late records %v, want none", late)
				}
				// Far past every version: u1 keeps FR, u2 BE; waiting
				// records and cleanup timers are gone.
				h.wm(100_000)
				if n := h.entries(); n != 2 {
					t.Fatalf("%d state entries once the history expired, want 2 (the latest row of u1 and u2)", n)
				}
				h.send(0, clickOf("c8", "u1", 200_000))
				h.send(0, clickOf("c9", "u2", 200_000))
				h.wm(200_001)
				if got, want := tableJoinLines(h.emitted()), "u1 200000 {\"click\":\"c8\",\"country\":\"FR\"}\nu2 200000 {\"click\":\"c9\",\"country\":\"BE\"}\n"; got != want {
					t.Fatalf("after the history expired:\n%s\nwant:\n%s", got, want)
				}
				h.finish()
			})
		}
	}
}

// TestTableJoinLatest: mode latest joins each click with the row as it is
// when the click is processed, at once (no watermark needed); a snapshot
// and restore keeps the table.
func TestTableJoinLatest(t *testing.T) {
	for _, kind := range []string{state.KindHashmap, state.KindPebble} {
		t.Run(kind, func(t *testing.T) {
			p := TableJoinParams{Mode: TableJoinLatest, Join: TableJoinLeft, Select: compiled(t, tableJoinSelect)}
			h := newTableJoinHarness(t, kind, t.TempDir(), nil, p)
			h.send(0, clickOf("c1", "u1", 50))
			h.send(1, user("u1", "NL", 100))
			h.send(1, user("u2", "BE", 200))
			h.send(0, clickOf("c2", "u1", 10)) // its time does not matter
			h.send(0, clickOf("c6", "u2", 250))
			h.send(0, clickOf("c7", "u3", 260))
			h.send(1, user("u1", "DE", 300))
			h.send(1, runtime.Record{Key: []byte("u1"), Value: []byte(`{"country":"XX"}`), Change: runtime.ChangeUpdateBefore})
			before := h.emitted()
			r := snapshotRestore(t, h.harness)
			h2 := newTableJoinHarness(t, kind, t.TempDir(), r, p)
			h2.send(0, clickOf("c3", "u1", 350))
			h2.send(1, user("u1", "", 500))
			h2.send(0, clickOf("c4", "u1", 550))
			h2.send(1, user("u1", "FR", 700))
			h2.send(0, clickOf("c5", "u1", 800))
			got := tableJoinLines(append(before, h2.emitted()...))
			want := `u1 50 {"click":"c1","country":null}
u1 10 {"click":"c2","country":"NL"}
u2 250 {"click":"c6","country":"BE"}
u3 260 {"click":"c7","country":null}
u1 350 {"click":"c3","country":"DE"}
u1 550 {"click":"c4","country":null}
u1 800 {"click":"c5","country":"FR"}
`
			if got != want {
				t.Fatalf("output:\n%s\nwant:\n%s", got, want)
			}
			h2.finish()
		})
	}
}

// TestTableJoinLate: with event_time, a click at or before the watermark
// but within history_retention joins at once with the version valid at its
// time; an older click, and a table record older than the watermark minus
// the retention, are late records (side output) and change nothing.
func TestTableJoinLate(t *testing.T) {
	p := TableJoinParams{Mode: TableJoinEventTime, Join: TableJoinLeft, HistoryRetention: 100 * time.Millisecond, Select: compiled(t, tableJoinSelect)}
	h := newTableJoinHarness(t, state.KindHashmap, t.TempDir(), nil, p)
	h.send(1, user("u1", "NL", 100))
	h.send(1, user("u1", "DE", 930))
	h.wm(1000)
	h.send(0, clickOf("late-ok", "u1", 950))  // >= 900: exact
	h.send(0, clickOf("late-nl", "u1", 920))  // NL was valid then
	h.send(0, clickOf("too-late", "u1", 800)) // < 900: late
	h.send(1, user("u1", "FR", 850))          // < 900: late
	if got, want := tableJoinLines(h.emitted()), "u1 950 {\"click\":\"late-ok\",\"country\":\"DE\"}\nu1 920 {\"click\":\"late-nl\",\"country\":\"NL\"}\n"; got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
	late := h.lateRecords()
	if len(late) != 2 || !strings.Contains(string(late[0].Value), "too-late") || string(late[1].Value) != `{"country":"FR"}` {
		t.Fatalf("late records %v, want the click at 800 and the row at 850", late)
	}
	h.finish()
}

// TestTableRowSerializerBytes: the table row's stored bytes (table-row-v1,
// part of the checkpoint format) are one flag byte (1: text) and the
// value, for a row as put and as kept (Copy, AppendKept), and they decode
// to a row whose decoded value is what decodeValue gives.
func TestTableRowSerializerBytes(t *testing.T) {
	var s tableValueSerializer
	for _, c := range []struct {
		v    tableValue
		want string
	}{
		{tableValue{Value: []byte(`{"country":"NL","n":3}`)}, "\x00{\"country\":\"NL\",\"n\":3}"},
		{tableValue{Value: []byte(`plain`), Text: true}, "\x01plain"},
		{tableValue{Value: []byte(`[1,2]`)}, "\x00[1,2]"},
	} {
		b, err := s.Append(nil, c.v)
		if err != nil || string(b) != c.want {
			t.Fatalf("Append %s: %q, %v; want %q", c.v.Value, b, err, c.want)
		}
		kept, err := s.Copy(c.v, nil)
		if err != nil {
			t.Fatal(err)
		}
		if kb, _ := s.AppendKept(nil, kept); string(kb) != c.want {
			t.Fatalf("AppendKept %s: %q, want %q", c.v.Value, kb, c.want)
		}
		d, err := s.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		want := selectOver(compiled(t, `{"r": right}`), nil, decodeValue(c.v.Value, c.v.Text))
		for _, row := range []tableValue{kept, d, d} {
			if got := selectOver(compiled(t, `{"r": right}`), nil, row.decoded()); got != want {
				t.Fatalf("row %s decoded: %s, want %s", c.v.Value, got, want)
			}
		}
	}
	if _, err := s.Decode([]byte{2, 'x'}); err == nil {
		t.Fatal("Decode of flag 2: no error")
	}
}
