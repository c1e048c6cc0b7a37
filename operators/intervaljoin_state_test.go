package operators

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// legacyIntervalJoin is the interval join as it was before its rows were
// kept by time: per key and side one ValueState (intervalListState) holding
// every row, decoded and rewritten whole on every record and timer. It is
// the test's writer of checkpoints in that layout.
type legacyIntervalJoin struct {
	*IntervalJoin
	lists [2]state.ValueState[[]joinRow]
}

func (j *legacyIntervalJoin) Open(ctx OpenContext) error {
	j.timers = ctx.TimerService()
	for i, name := range []string{IntervalJoinLeftState, IntervalJoinRightState} {
		// joinRowsSerializer: this join marks rows matched in the lists it reads.
		v, err := state.GetValueState(ctx.Backend, state.ValueStateDescriptor[[]joinRow]{Name: name, Serializer: joinRowsSerializer{}})
		if err != nil {
			return err
		}
		j.lists[i] = v
	}
	j.lateRecs = newLateRecords(ctx.Operator, LateOutput, nil, nil, j.timers.CurrentProcessingTime)
	return nil
}

func (j *legacyIntervalJoin) ProcessElement1(_ context.Context, rec runtime.Record, out Collector) error {
	return j.process(0, rec, out)
}

func (j *legacyIntervalJoin) ProcessElement2(_ context.Context, rec runtime.Record, out Collector) error {
	return j.process(1, rec, out)
}

func (j *legacyIntervalJoin) process(side int, rec runtime.Record, out Collector) error {
	wm := j.timers.CurrentWatermark()
	if rec.Timestamp.IsZero() || (wm != runtime.MinWatermark && !rec.Timestamp.After(wm)) {
		return j.lateRecs.handle(rec, wm, out)
	}
	t := rec.Timestamp.UnixMilli()
	lo, hi, cleanup := t+j.lower, t+j.upper, t+j.upper
	if side == 1 {
		lo, hi, cleanup = t-j.upper, t-j.lower, t-j.lower
	}
	row := joinRow{TS: t, Value: rec.Value, Text: rec.Format == runtime.FormatText}
	rows, _, err := j.lists[1-side].Value()
	if err != nil {
		return err
	}
	for i := range rows {
		o := &rows[i]
		if o.TS < lo || o.TS > hi {
			continue
		}
		l, r := &row, o
		if side == 1 {
			l, r = o, &row
		}
		if err := j.emit(rec.Key, l, r, max(t, o.TS), out); err != nil {
			return err
		}
		row.Matched = true
		o.Matched = o.Matched || j.p.Join.outer(1-side)
	}
	if err := j.lists[1-side].Update(rows); err != nil {
		return err
	}
	if !j.p.Join.outer(side) {
		row.Matched = false
	}
	own, _, err := j.lists[side].Value()
	if err != nil {
		return err
	}
	if err := j.lists[side].Update(append(own, row)); err != nil {
		return err
	}
	j.addRows(1)
	return j.timers.RegisterEventTimeTimer(time.UnixMilli(cleanup))
}

func (j *legacyIntervalJoin) OnTimer(_ context.Context, ts time.Time, tc TimerContext, out Collector) error {
	at := ts.UnixMilli()
	for side, until := range [2]int64{at - j.upper, at + j.lower} {
		rows, _, err := j.lists[side].Value()
		if err != nil {
			return err
		}
		var keep []joinRow
		for i := range rows {
			if rows[i].TS > until {
				keep = append(keep, rows[i])
				continue
			}
			j.addRows(-1)
			if !j.p.Join.outer(side) || rows[i].Matched {
				continue
			}
			l, r := &rows[i], (*joinRow)(nil)
			if side == 1 {
				l, r = nil, &rows[i]
			}
			if err := j.emit(tc.Key, l, r, rows[i].TS, out); err != nil {
				return err
			}
		}
		if len(keep) == 0 {
			err = j.lists[side].Clear()
		} else {
			err = j.lists[side].Update(keep)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// TestIntervalJoinRestoresListLayout runs TestIntervalJoinModel's input
// through the join as it was before the by-time layout
// (legacyIntervalJoin: one list of rows per key and side, main's
// checkpoint format) up to the half-way snapshot, and restores it into
// the current join with spillRows 1, for every join kind on both
// backends: the output (pairs before and after the restore, outer rows
// emitted by the timers the earlier join registered) equals the model
// exactly; the restored lists are moved as they are into the one entry
// per key of both sides (IntervalJoinRowsState; the buffered-rows count
// after the restore equals the count before it, no key holds rows by time
// or in the per-side lists after Open) and some hold more than 1 row, so
// the next record of such a key moves them by time; no state is left at
// the end.
func TestIntervalJoinRestoresListLayout(t *testing.T) {
	events, maxTS := intervalJoinEvents()
	late, live := intervalJoinLate(t, events)
	for _, kind := range []JoinKind{JoinInner, JoinLeftOuter, JoinRightOuter, JoinFullOuter} {
		want := intervalJoinWant(live, -5_000, 10_000, kind)
		for _, backend := range backends {
			t.Run(fmt.Sprintf("%s/%s", kind, backend), func(t *testing.T) {
				p := IntervalJoinParams{Lower: -5 * time.Second, Upper: 10 * time.Second, Join: kind}
				legacy := &legacyIntervalJoin{IntervalJoin: NewIntervalJoin(p)}
				legacy.spillRows = 1 // for the join restored from it
				h := newJoinHarnessFunc(t, backend, t.TempDir(), nil, legacy, legacy.IntervalJoin)
				runIntervalJoinModel(t, h, backend, p, events, maxTS, want, late, func(before, after *joinHarness) {
					if before.j.BufferedRows() < 10 {
						t.Fatalf("the earlier layout buffered %d rows at the snapshot; the test wants some", before.j.BufferedRows())
					}
					if got, want := after.j.BufferedRows(), before.j.BufferedRows(); got != want {
						t.Errorf("restored %d rows, the earlier layout held %d", got, want)
					}
					if n := byTimeKeys(t, after); n != 0 {
						t.Errorf("%d keys hold rows by time after Open, want 0", n)
					}
					longest := 0
					err := state.ApplyToAllValueKeys(after.op.backend, intervalRowsState(), func(_ []byte, v state.ValueState[*intervalKeyRows]) error {
						k, _, err := v.Value()
						if k != nil {
							longest = max(longest, len(k.sides[0]), len(k.sides[1]))
						}
						return err
					})
					if err != nil {
						t.Fatal(err)
					}
					if n := oldLayoutKeys(t, after); n != 0 {
						t.Errorf("%d keys still hold rows in the per-side lists after Open, want 0 (moved to %s)", n, IntervalJoinRowsState)
					}
					if longest <= 1 {
						t.Errorf("the longest restored list holds %d rows; the test wants some above spillRows 1", longest)
					}
				})
			})
		}
	}
}

// countingRows is joinRowsSerializer counting the values it decodes or
// hands out from the Pebble write cache's decoded values (View: a read
// that decodes nothing) and the rows in them: the values a read touched.
type countingRows struct {
	joinRowsSerializer
	values, rows *int
}

func (c countingRows) Decode(b []byte) ([]joinRow, error) {
	rows, err := c.joinRowsSerializer.Decode(b)
	*c.values++
	*c.rows += len(rows)
	return rows, err
}

func (c countingRows) View(v []joinRow) []joinRow {
	*c.values++
	*c.rows += len(v)
	return c.joinRowsSerializer.View(v)
}

// TestIntervalJoinHotKeyDecodesInRange: with 20,000 left rows buffered for
// one key (at 1000..20999 ms, a full outer join, bounds [-5ms, +10ms]), a
// right record at 11000 reads (decodes, or views in the write cache)
// exactly the 16 left buckets at 10990..11005 (16 rows) and emits exactly
// those 16 pairs; buffering the 20,000 rows read nothing (no right rows,
// no bucket shared); the watermark at 1010 fires the cleanup timer of the
// row at 1000 only: one bucket read, that row emitted with right null, 19,999 rows left; on
// both backends.
func TestIntervalJoinHotKeyDecodesInRange(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			var values, rows int
			p := IntervalJoinParams{Lower: -5 * time.Millisecond, Upper: 10 * time.Millisecond, Join: JoinFullOuter}
			j := NewIntervalJoin(p)
			j.rowSer = countingRows{values: &values, rows: &rows}
			h := newJoinHarnessFunc(t, backend, t.TempDir(), nil, j, j)
			rec := func(id int, ts int64) runtime.Record {
				return runtime.Record{Key: []byte("hot"), Value: fmt.Appendf(nil, `{"id":%d}`, id), Timestamp: time.UnixMilli(ts)}
			}
			for i := range 20_000 {
				h.send(0, rec(i, 1000+int64(i)))
			}
			if values != 0 || len(h.emitted()) != 0 {
				t.Fatalf("buffering 20,000 unmatched rows decoded %d values", values)
			}
			if n := j.BufferedRows(); n != 20_000 {
				t.Fatalf("%d rows buffered, want 20000", n)
			}
			h.send(1, rec(-1, 11_000))
			if values != 16 || rows != 16 {
				t.Errorf("a right record at 11000 decoded %d values, %d rows; want the 16 buckets in [10990, 11005]", values, rows)
			}
			var got []string
			for _, r := range h.emitted() {
				got = append(got, fmt.Sprintf("%d %s", r.Timestamp.UnixMilli(), r.Value))
			}
			var want []string
			for ts := int64(10_990); ts <= 11_005; ts++ {
				want = append(want, fmt.Sprintf(`%d {"left":{"id":%d},"right":{"id":-1}}`, max(ts, 11_000), ts-1000))
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("pairs:\n%v\nwant\n%v", got, want)
			}
			values, rows = 0, 0
			h.wm(1010)
			if values != 1 || rows != 1 {
				t.Errorf("the timer at 1010 decoded %d values, %d rows; want the bucket at 1000 only", values, rows)
			}
			out := h.emitted()
			if len(out) != 1 || string(out[0].Value) != `{"left":{"id":0},"right":null}` || out[0].Timestamp.UnixMilli() != 1000 {
				t.Errorf("the timer at 1010 emitted %v, want the left row at 1000 with right null", out)
			}
			if n := j.BufferedRows(); n != 20_000 {
				t.Errorf("%d rows buffered after the timer, want 20000 (19,999 left, 1 right)", n)
			}
			h.finish()
		})
	}
}

// TestIntervalRowsViewShares: the interval join's list serializer hands
// out the kept list itself (no copy), with its capacity cut to its length
// so that the append of a new row copies instead of writing past the kept
// rows; its name and bytes are joinRowsSerializer's.
func TestIntervalRowsViewShares(t *testing.T) {
	kept := make([]joinRow, 2, 8)
	kept[0], kept[1] = joinRow{TS: 1, Value: []byte("a")}, joinRow{TS: 2, Value: []byte("b")}
	v := intervalRowsSerializer{}.View(kept)
	if &v[0] != &kept[0] || len(v) != 2 || cap(v) != 2 {
		t.Fatalf("View: len %d cap %d, shared %v; want the kept rows, len = cap = 2", len(v), cap(v), &v[0] == &kept[0])
	}
	grown := append(v, joinRow{TS: 3})
	if &grown[0] == &kept[0] || kept[:3][2].TS != 0 {
		t.Fatal("appending to the view wrote into the kept list's memory")
	}
	if (intervalRowsSerializer{}).View(nil) != nil {
		t.Fatal("View(nil) not nil")
	}
	a, _ := intervalRowsSerializer{}.Append(nil, kept)
	b, _ := joinRowsSerializer{}.Append(nil, kept)
	if (intervalRowsSerializer{}).Name() != (joinRowsSerializer{}).Name() || string(a) != string(b) {
		t.Fatal("intervalRowsSerializer's name or bytes differ from joinRowsSerializer's")
	}
}

// TestIntervalKeyRowsSerializer: a key's rows (JSON, text, empty and nil
// values on the left, more than fit inline; an index row on the right)
// are written as the bytes 3913bda's serializer of the two lists wrote
// (interval-join-sides-v1: the left list as joinRowsSerializer writes it,
// then the right), and those bytes decode back into the same rows, a list
// of at most intervalInlineRows rows in the object's inline rows, a longer
// one in a list of its own; malformed or trailing bytes are refused; Copy
// and View hand over the object itself; Size counts the object, the
// out-of-line list and the values.
func TestIntervalKeyRowsSerializer(t *testing.T) {
	var s intervalKeyRowsSerializer
	left := []joinRow{{TS: 5, Value: []byte(`{"a":1}`), Matched: true}, {TS: -3, Value: []byte("text"), Text: true}, {TS: 7, Value: []byte{}}, {TS: 8}}
	v := newIntervalKeyRows()
	for _, r := range left {
		r.Value = ownValue(r.Value)
		v.appendRow(0, r)
	}
	v.setIndex(1, 40)
	// Written by 3913bda's intervalSidesSerializer for the same two lists.
	const old = "\x04\n\x01\a{\"a\":1}\x05\x02\x04text\x0e\x00\x00\x10\x04\x00\x01P\f\x00"
	b, _ := s.Append(nil, v)
	if string(b) != old {
		t.Fatalf("Append = %q, want 3913bda's bytes %q", b, old)
	}
	if s.Name() != "interval-join-sides-v1" {
		t.Fatalf("Name = %q", s.Name())
	}
	got, err := s.Decode([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	want := [2][]joinRow{left, {{TS: 40, Index: true}}}
	for side := range want {
		if len(got.sides[side]) != len(want[side]) {
			t.Fatalf("side %d: %d rows, want %d", side, len(got.sides[side]), len(want[side]))
		}
		for i, w := range want[side] {
			g := got.sides[side][i]
			if g.TS != w.TS || string(g.Value) != string(w.Value) || (g.Value == nil) != (w.Value == nil) || g.Text != w.Text || g.Matched != w.Matched || g.Index != w.Index {
				t.Fatalf("side %d row %d = %+v, want %+v", side, i, g, w)
			}
		}
	}
	if got.isInline(0) || !got.isInline(1) {
		t.Fatalf("decoded: left inline %v, right inline %v; want 4 rows out of line, 1 inline", got.isInline(0), got.isInline(1))
	}
	if e, err := s.Decode([]byte{0, 0}); err != nil || !e.empty() || !e.isInline(0) || !e.isInline(1) {
		t.Fatalf("Decode(two empty lists) = %+v, %v", e, err)
	}
	for _, bad := range [][]byte{nil, {0}, append([]byte(old), 0), []byte(old[:len(old)-1]), {1, 0}} {
		if _, err := s.Decode(bad); err == nil {
			t.Errorf("Decode(%q): no error", bad)
		}
	}
	if c, err := s.Copy(got, []*intervalKeyRows{v, nil}); err != nil || c != got || s.View(got) != got {
		t.Fatal("Copy and View: want the object itself")
	}
	values := len(`{"a":1}`) + len("text")
	if n, want := s.Size(got), int(unsafe.Sizeof(intervalKeyRows{}))+24+int(unsafe.Sizeof(joinRow{}))*cap(got.sides[0])+values; n != want {
		t.Fatalf("Size = %d, want %d", n, want)
	}
	if b, _ := s.Append(nil, nil); string(b) != "\x00\x00" {
		t.Fatalf("Append(nil) = %q, want two empty lists", b)
	}
}

// TestIntervalJoinKeyRowsInPlace: on Pebble (the write cache keeps a key's
// object) a key's rows stay in one object, changed in place by its
// records and cleanups (no copy per write): its first intervalInlineRows
// rows of a side in the object's inline rows, the next ones in a list of
// their own with room, appended in place; a cleanup moves the rows it
// keeps down in that list, and back into the inline rows once they fit;
// the rows read back are the rows sent, the values' bytes counted; the
// key's entry is removed with its last row.
func TestIntervalJoinKeyRowsInPlace(t *testing.T) {
	h := newJoinHarness(t, "pebble", t.TempDir(), nil, IntervalJoinParams{Lower: -20 * time.Millisecond, Upper: 20 * time.Millisecond})
	j := h.j
	read := func() *intervalKeyRows {
		t.Helper()
		j.backend.SetCurrentKey([]byte("a"))
		k, ok, err := j.keyRows.Value()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return nil
		}
		return k
	}
	check := func(k *intervalKeyRows, from, to int64, inline bool) {
		t.Helper()
		var ts []int64
		values := 0
		for i, r := range k.sides[0] {
			if want := fmt.Sprintf(`{"t":%d}`, r.TS); string(r.Value) != want {
				t.Fatalf("row %d: value %s, want %s", i, r.Value, want)
			}
			ts = append(ts, r.TS)
			values += len(r.Value)
		}
		var want []int64
		for ms := from; ms <= to; ms++ {
			want = append(want, ms)
		}
		if !slices.Equal(ts, want) || k.isInline(0) != inline || len(k.sides[1]) != 0 {
			t.Fatalf("rows %v, inline %v; want %v, inline %v", ts, k.isInline(0), want, inline)
		}
		if k.values != values {
			t.Fatalf("values counted %d bytes, the rows hold %d", k.values, values)
		}
	}
	// One buffer for every record's value, as a source reusing its
	// buffer: the rows' values must be their own.
	buf := make([]byte, 0, 64)
	send := func(ms int64) {
		buf = fmt.Appendf(buf[:0], `{"t":%d}`, ms)
		h.send(0, runtime.Record{Key: []byte("a"), Value: buf, Timestamp: time.UnixMilli(ms)})
		copy(buf, "xxxxxxxx")
	}
	send(1000)
	k := read()
	if k == nil {
		t.Fatal("no rows after the first record")
	}
	check(k, 1000, 1000, true)
	last := int64(1000)
	for range intervalInlineRows - 1 {
		last++
		send(last)
		if read() != k {
			t.Fatal("a record's write made a new object")
		}
		check(k, 1000, last, true)
	}
	last++
	send(last) // one more than fit inline
	list := k.sides[0]
	if read() != k || cap(list) != 2*intervalInlineRows {
		t.Fatalf("row %d: a new object %v; a list of capacity %d, want %d", last, read() != k, cap(list), 2*intervalInlineRows)
	}
	check(k, 1000, last, false)
	last++
	send(last)
	if l := read().sides[0]; &l[0] != &list[0] {
		t.Fatal("the next row was not appended in place")
	}
	check(k, 1000, last, false)
	h.wm(1020) // the row at 1000 ends
	if l := read().sides[0]; read() != k || &l[0] != &list[0] {
		t.Fatal("after the cleanup: want the same object and list, the rows moved down in place")
	}
	check(k, 1001, last, false)
	h.wm(1021) // the row at 1001 ends: the rest fit inline
	if read() != k {
		t.Fatal("after the second cleanup: a new object")
	}
	check(k, 1002, last, true)
	if n := j.BufferedRows(); n != last-1001 {
		t.Fatalf("%d rows buffered, want %d", n, last-1001)
	}
	h.wm(last + 20)
	if k := read(); k != nil || h.entries() != 0 {
		t.Fatalf("after the last row's cleanup: rows %+v, %d state entries; want none", k, h.entries())
	}
	h.finish()
}

// TestIntervalKeyRowsModel: random appends, removals (prefixes and rows in
// the middle), index rows and lists set whole, on both sides of one
// intervalKeyRows, against a model of two slices: after each, the rows
// are the model's, in the inline rows exactly when they fit there (after a
// removal or a set) or had not outgrown them, the counted value bytes are
// the rows', and the removed rows' memory holds no value.
func TestIntervalKeyRowsModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 1))
	k := newIntervalKeyRows()
	var model [2][]joinRow
	grown := [2]bool{}
	for op := range 20_000 {
		side := rng.IntN(2)
		switch c := rng.IntN(10); {
		case c < 5:
			r := joinRow{TS: int64(rng.IntN(100)), Value: ownValue([]byte(strings.Repeat("v", rng.IntN(20))))}
			if rng.IntN(20) == 0 {
				r.Value = nil
			}
			k.appendRow(side, r)
			model[side] = append(model[side], r)
			grown[side] = grown[side] || len(model[side]) > intervalInlineRows
		case c < 9:
			until := int64(rng.IntN(100))
			before := k.sides[side]
			n := k.removeUntil(side, until)
			kept := slices.DeleteFunc(slices.Clone(model[side]), func(r joinRow) bool { return r.TS <= until })
			if n != len(model[side])-len(kept) {
				t.Fatalf("op %d: removeUntil removed %d, want %d", op, n, len(model[side])-len(kept))
			}
			for _, r := range before[len(kept):cap(before)] {
				if r.Value != nil {
					t.Fatalf("op %d: a removed row's memory still holds its value", op)
				}
			}
			model[side] = kept
			if len(kept) <= intervalInlineRows {
				grown[side] = false
			}
		default:
			var rows []joinRow
			for range rng.IntN(2 * intervalInlineRows) {
				rows = append(rows, joinRow{TS: int64(rng.IntN(100)), Value: ownValue([]byte("set"))})
			}
			if rng.IntN(3) == 0 {
				n := int64(rng.IntN(3))
				k.setIndex(side, n)
				rows = nil
				if n > 0 {
					rows = []joinRow{{TS: n, Index: true}}
				}
			} else {
				k.setRows(side, slices.Clone(rows))
			}
			model[side] = rows
			grown[side] = len(rows) > intervalInlineRows
		}
		values := 0
		for s := range model {
			if !slices.EqualFunc(k.sides[s], model[s], func(a, b joinRow) bool {
				return a.TS == b.TS && a.Index == b.Index && string(a.Value) == string(b.Value) && (a.Value == nil) == (b.Value == nil)
			}) {
				t.Fatalf("op %d: side %d rows %+v, want %+v", op, s, k.sides[s], model[s])
			}
			if k.isInline(s) == grown[s] {
				t.Fatalf("op %d: side %d of %d rows inline %v", op, s, len(model[s]), k.isInline(s))
			}
			for _, r := range model[s] {
				values += len(r.Value)
			}
		}
		if k.values != values {
			t.Fatalf("op %d: values counted %d, the rows hold %d", op, k.values, values)
		}
		if k.empty() != (len(model[0])+len(model[1]) == 0) {
			t.Fatalf("op %d: empty %v", op, k.empty())
		}
	}
}

// TestIntervalJoinCheckpointIsolatedFromLaterRecords: a checkpoint holds
// the rows of its barrier although the join changes its keys' objects in
// place: on TestIntervalJoinModel's records, the snapshot is taken (its
// synchronous part) at the half, the second half processed by the same
// join (appending, marking matched, cleaning up the rows the snapshot
// holds), and only then the snapshot's asynchronous part run; restored
// from it, the join gives exactly the straight run's second half and ends
// empty. Inner and full outer, spill limit 2 (by-time sides) and the
// default (lists in the objects' inline rows and out of line), on both
// backends.
func TestIntervalJoinCheckpointIsolatedFromLaterRecords(t *testing.T) {
	events, maxTS := intervalJoinEvents()
	half := len(events) / 2
	for events[half-1].wm == 0 {
		half++
	}
	run := func(h *joinHarness, evs []joinEvent, end int64) []string {
		for _, e := range evs {
			if e.wm > 0 {
				h.wm(e.wm)
				continue
			}
			h.send(e.side, runtime.Record{Key: []byte(e.key), Value: []byte(e.value()), Timestamp: time.UnixMilli(e.ts)})
		}
		if end > 0 {
			h.wm(end)
		}
		var out []string
		for _, r := range h.emitted() {
			out = append(out, fmt.Sprintf("%s %d %s", r.Key, r.Timestamp.UnixMilli(), r.Value))
		}
		for _, r := range h.lateRecords() {
			out = append(out, fmt.Sprintf("late %s %d %s", r.Key, r.Timestamp.UnixMilli(), r.Value))
		}
		return out
	}
	for _, shape := range intervalJoinGoldenShapes(t) {
		end := maxTS + shape.p.Upper.Milliseconds() - shape.p.Lower.Milliseconds() + 1
		for _, spill := range []int{2, intervalJoinSpillRows} {
			for _, kind := range backends {
				t.Run(fmt.Sprintf("%s/spill-%d/%s", shape.name, spill, kind), func(t *testing.T) {
					harness := func(restore *Restore) *joinHarness {
						j := NewIntervalJoin(shape.p)
						j.spillRows = spill
						return newJoinHarnessFunc(t, kind, t.TempDir(), restore, j, j)
					}
					h := harness(nil)
					run(h, events[:half], 0)
					straight := run(h, events[half:], end)
					h.finish()

					h = harness(nil)
					run(h, events[:half], 0)
					held := h.j.BufferedRows()
					dir := t.TempDir()
					finish, err := h.op.SnapshotState(h.ctx, &runtime.Barrier{CheckpointID: 1, Dir: dir})
					if err != nil {
						t.Fatal(err)
					}
					if got := run(h, events[half:], end); !slices.Equal(got, straight) {
						t.Fatalf("after the snapshot's first part, the second half differs:\n%s", firstDiff(got, straight))
					}
					if n := h.j.BufferedRows(); n != 0 || held < 10 {
						t.Fatalf("%d rows at the snapshot, %d at the end; the test wants some, then none", held, n)
					}
					snap, err := finish(h.ctx)
					if err != nil {
						t.Fatal(err)
					}
					var ts checkpoint.TaskState
					if err := json.Unmarshal(snap.State, &ts); err != nil {
						t.Fatal(err)
					}
					h.finish()

					r := harness(&Restore{Keyed: []state.RestoreHandle{{Handle: ts.Keyed, Dir: dir}}})
					if n := r.j.BufferedRows(); n != held {
						t.Fatalf("restored %d rows, the snapshot's barrier saw %d", n, held)
					}
					r.wm(events[half-1].wm)
					if got := run(r, events[half:], end); !slices.Equal(got, straight) {
						t.Fatalf("restored, the second half differs:\n%s", firstDiff(got, straight))
					}
					if n := r.entries(); n != 0 || r.j.BufferedRows() != 0 {
						t.Fatalf("restored: %d state entries, %d rows left after every interval ended", n, r.j.BufferedRows())
					}
					r.finish()
				})
			}
		}
	}
}

// TestAdoptRowsEmptyValueOwnMemory: a buffered row whose value is an empty
// slice of the record's buffer (of capacity 0, which Go points at the
// buffer's start) must not keep that buffer alive: adoptRows gives it
// emptyRowValue, and leaves a row that already holds it as it is.
func TestAdoptRowsEmptyValueOwnMemory(t *testing.T) {
	buf := make([]byte, 64)
	lo := uintptr(unsafe.Pointer(&buf[0]))
	hi := lo + uintptr(len(buf))
	for _, val := range [][]byte{buf[3:3:3], buf[0:0:0], buf[5:5]} {
		rows := adoptRows([]joinRow{{Value: val}}, nil)
		if len(rows[0].Value) != 0 || rows[0].Value == nil {
			t.Fatalf("value %q, want empty non-nil", rows[0].Value)
		}
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(rows[0].Value))); p >= lo && p <= hi {
			t.Fatalf("empty value of cap %d still points into the record's buffer", cap(val))
		}
	}
	kept := []joinRow{{Value: emptyRowValue}}
	if got := adoptRows(kept, [][]joinRow{kept}); unsafe.SliceData(got[0].Value) != unsafe.SliceData(emptyRowValue) {
		t.Fatal("an adopted empty value was replaced")
	}
}
