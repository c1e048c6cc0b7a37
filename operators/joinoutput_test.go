package operators

import (
	"slices"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// TestJoinRowsHeapSerializer: the join rows' HeapSerializer keeps the
// bytes of the serializer (AppendKept equals Append), shares the values of
// rows of a known list (the same memory) and copies the others (a change
// of the caller's bytes after Copy changes nothing kept), keeps nil and
// empty values apart, and View hands out rows the caller may mark without
// changing the kept list.
func TestJoinRowsHeapSerializer(t *testing.T) {
	var ser joinRowsSerializer
	kept, err := ser.Copy([]joinRow{{TS: 1, Value: []byte(`{"a":1}`)}, {TS: 2, Value: []byte("x"), Text: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	view := ser.View(kept)
	view[0].Matched = true
	if kept[0].Matched {
		t.Fatal("marking a viewed row changed the kept list")
	}
	fresh := []byte(`{"b":2}`)
	v := append(view[1:], joinRow{TS: 3, Value: fresh}, joinRow{TS: 4}, joinRow{TS: 5, Value: []byte{}})
	got, err := ser.Copy(v, [][]joinRow{kept, nil})
	if err != nil {
		t.Fatal(err)
	}
	if !sameBytes(got[0].Value, kept[1].Value) {
		t.Error("the known row's value was copied, want it shared")
	}
	if sameBytes(got[1].Value, fresh) {
		t.Error("the new row's value is the caller's memory, want a copy")
	}
	fresh[2] = 'X'
	if string(got[1].Value) != `{"b":2}` {
		t.Errorf("kept value %s changed with the caller's bytes", got[1].Value)
	}
	if got[2].Value != nil || got[3].Value == nil || len(got[3].Value) != 0 {
		t.Errorf("nil and empty values: %q %q", got[2].Value, got[3].Value)
	}
	a, _ := ser.Append(nil, got)
	b, _ := ser.AppendKept(nil, got)
	if string(a) != string(b) {
		t.Fatalf("AppendKept %x, Append %x", b, a)
	}
	back, err := ser.Decode(a)
	if err != nil {
		t.Fatal(err)
	}
	want := []joinRow{{TS: 2, Value: []byte("x"), Text: true}, {TS: 3, Value: []byte(`{"b":2}`)}, {TS: 4}, {TS: 5, Value: []byte{}}}
	if !slices.EqualFunc(back, want, func(x, y joinRow) bool {
		return x.TS == y.TS && x.Text == y.Text && x.Matched == y.Matched && string(x.Value) == string(y.Value) && (x.Value == nil) == (y.Value == nil)
	}) {
		t.Errorf("decoded %+v, want %+v", back, want)
	}
}

// TestJoinSelectValue: a select of value sees the whole joined object
// {"left", "right"} (interval join: with the other side null on an outer
// row; table join: the table's row), not one whose sides were cleared
// before it was encoded.
func TestJoinSelectValue(t *testing.T) {
	sel, err := CompileExpression(`value`)
	if err != nil {
		t.Fatal(err)
	}
	h := newJoinHarness(t, "pebble", t.TempDir(), nil, IntervalJoinParams{Upper: time.Second, Join: JoinLeftOuter, Select: sel})
	h.send(0, runtime.Record{Key: []byte("a"), Value: []byte(`{"id":1}`), Timestamp: time.UnixMilli(1000)})
	h.send(0, runtime.Record{Key: []byte("b"), Value: []byte(`{"id":2}`), Timestamp: time.UnixMilli(1000)})
	h.send(1, runtime.Record{Key: []byte("a"), Value: []byte(`"text"`), Timestamp: time.UnixMilli(1500), Format: runtime.FormatText})
	h.wm(5000)
	if got, want := values(h.emitted()), []string{`{"left":{"id":1},"right":"\"text\""}`, `{"left":{"id":2},"right":null}`}; !slices.Equal(got, want) {
		t.Errorf("interval join: %q, want %q", got, want)
	}
	h.finish()

	th := newTableJoinHarness(t, "pebble", t.TempDir(), nil, TableJoinParams{Join: TableJoinLeft, Select: sel})
	th.send(1, user("u1", "NL", 100))
	th.send(0, clickOf("c1", "u1", 200))
	th.send(0, clickOf("c2", "u2", 200))
	if got, want := values(th.emitted()), []string{`{"left":{"id":"c1"},"right":{"country":"NL"}}`, `{"left":{"id":"c2"},"right":null}`}; !slices.Equal(got, want) {
		t.Errorf("table join: %q, want %q", got, want)
	}
	th.finish()
}
