package operators

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

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
					err := state.ApplyToAllValueKeys(after.op.backend, intervalSidesState(), func(_ []byte, v state.ValueState[joinSides]) error {
						sides, _, err := v.Value()
						longest = max(longest, len(sides[0]), len(sides[1]))
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

// TestIntervalSidesSerializer: a key's two lists (JSON, text, empty and
// nil values, an index row) round trip; the bytes are the two lists as
// joinRowsSerializer writes them, left then right; malformed or trailing
// bytes are refused; Copy keeps a list of a known value as it is (the
// other side's list a record did not change), keeps a known list with a
// row appended in place in its memory (copying only the new row's value)
// and shares the known rows' values of a new list; View hands out the
// kept lists with their capacity, and appends past their end change no
// earlier value.
func TestIntervalSidesSerializer(t *testing.T) {
	var s intervalSidesSerializer
	v := joinSides{
		{{TS: 5, Value: []byte(`{"a":1}`), Matched: true}, {TS: -3, Value: []byte("text"), Text: true}, {TS: 7, Value: []byte{}}, {TS: 8}},
		indexRow(40),
	}
	b, _ := s.Append(nil, v)
	l, _ := joinRowsSerializer{}.Append(nil, v[0])
	r, _ := joinRowsSerializer{}.Append(nil, v[1])
	if string(b) != string(l)+string(r) {
		t.Fatalf("Append = %q, want the left list's bytes then the right's", b)
	}
	got, err := s.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	for side := range v {
		if len(got[side]) != len(v[side]) {
			t.Fatalf("side %d: %d rows, want %d", side, len(got[side]), len(v[side]))
		}
		for i, w := range v[side] {
			g := got[side][i]
			if g.TS != w.TS || string(g.Value) != string(w.Value) || (g.Value == nil) != (w.Value == nil) || g.Text != w.Text || g.Matched != w.Matched || g.Index != w.Index {
				t.Fatalf("side %d row %d = %+v, want %+v", side, i, g, w)
			}
		}
	}
	if e, err := s.Decode([]byte{0, 0}); err != nil || len(e[0])+len(e[1]) != 0 {
		t.Fatalf("Decode(two empty lists) = %v, %v", e, err)
	}
	for _, bad := range [][]byte{nil, {0}, append(slices.Clone(b), 0), b[:len(b)-1], {1, 0}} {
		if _, err := s.Decode(bad); err == nil {
			t.Errorf("Decode(%v): no error", bad)
		}
	}

	kept, _ := s.Copy(got, nil)
	view := s.View(kept)
	if &view[0][0] != &kept[0][0] || len(view[0]) != len(kept[0]) {
		t.Fatal("View: want the kept lists")
	}
	next := view
	fresh := []byte("new")
	if cap(next[0]) == len(next[0]) {
		next[0] = append(make([]joinRow, 0, 8), next[0]...) // as buffer gives a full list room
		kept0 := next[0]
		if kept, _ = s.Copy(joinSides{kept0, kept[1]}, []joinSides{kept}); &kept[0][0] != &kept0[0] || cap(kept[0]) != 8 {
			t.Fatal("Copy of a list of known rows with room: want it kept with its capacity")
		}
		next = s.View(kept)
	}
	before := slices.Clone(kept[0])
	next[0] = append(next[0], joinRow{TS: 9, Value: fresh})
	c, err := s.Copy(next, []joinSides{kept})
	if err != nil {
		t.Fatal(err)
	}
	if &c[1][0] != &kept[1][0] {
		t.Error("Copy copied the unchanged right list")
	}
	// The row appended in place: the list kept in the same memory, with
	// its capacity; the known value's rows unchanged.
	if &c[0][0] != &kept[0][0] || cap(c[0]) != cap(kept[0]) || len(c[0]) != 5 {
		t.Error("Copy copied the list the row was appended to in place")
	}
	if !slices.EqualFunc(kept[0], before, func(a, b joinRow) bool {
		return a.TS == b.TS && (a.Value == nil) == (b.Value == nil) && (len(a.Value) == 0 || sameBytes(a.Value, b.Value))
	}) {
		t.Error("the append changed the rows of the value read")
	}
	if &c[0][0].Value[0] != &kept[0][0].Value[0] || &c[0][4].Value[0] == &fresh[0] || string(c[0][4].Value) != "new" {
		t.Error("Copy: want the known rows' values shared and the new row's value copied")
	}
	// A cleanup keeps the rows after those it removed: the same memory,
	// not a copy; the next row appended after them leaves c as it is.
	trimmed := s.View(c)
	trimmed[0] = trimmed[0][2:]
	d, err := s.Copy(trimmed, []joinSides{c})
	if err != nil {
		t.Fatal(err)
	}
	if len(d[0]) != 3 || &d[0][0] != &c[0][2] || d[0][2].TS != 9 {
		t.Errorf("Copy of the list's last 3 rows: %d rows, want c's own rows", len(d[0]))
	}
	e0 := append(s.View(d)[0], joinRow{TS: 10, Value: []byte("newer")})
	e, _ := s.Copy(joinSides{e0, d[1]}, []joinSides{d})
	if &e[0][0] != &c[0][2] || len(e[0]) != 4 || string(e[0][3].Value) != "newer" || len(c[0]) != 5 || c[0][4].TS != 9 || len(d[0]) != 3 {
		t.Errorf("append after a cleanup: %d rows; c %d rows (last at %d), d %d: want one more row in the same memory, c and d unchanged", len(e[0]), len(c[0]), c[0][4].TS, len(d[0]))
	}
	// A new list of known rows is kept, its values shared.
	other := joinSides{slices.Clone(c[0][3:]), c[1]}
	if e, _ := s.Copy(other, []joinSides{c}); &e[0][0] != &other[0][0] || &e[0][1].Value[0] != &c[0][4].Value[0] {
		t.Error("Copy of a new list of known rows: want the list kept and its values shared")
	}
}

// TestIntervalJoinAppendsInPlace: on Pebble (the write cache keeps a key's
// lists decoded) a record's row is appended in place to its key's list
// once the list has room, not into a new list per record: a key's first
// row gets a list of one, the second a list with room for four, the next
// ones go into the same memory; a cleanup keeps the rows after those it
// removed in that memory, and the rows read back are the rows sent.
func TestIntervalJoinAppendsInPlace(t *testing.T) {
	h := newJoinHarness(t, "pebble", t.TempDir(), nil, IntervalJoinParams{Lower: -20 * time.Millisecond, Upper: 20 * time.Millisecond})
	j := h.j
	list := func() []joinRow {
		t.Helper()
		j.backend.SetCurrentKey([]byte("a"))
		s, _, err := j.rows2.Value()
		if err != nil {
			t.Fatal(err)
		}
		return s[0]
	}
	times := func(rows []joinRow) (ts []int64) {
		for _, r := range rows {
			ts = append(ts, r.TS)
		}
		return ts
	}
	send := func(ms int64) {
		h.send(0, runtime.Record{Key: []byte("a"), Value: fmt.Appendf(nil, `{"t":%d}`, ms), Timestamp: time.UnixMilli(ms)})
	}
	send(1000)
	if l := list(); len(l) != 1 || cap(l) != 1 {
		t.Fatalf("first row: list of %d, capacity %d, want 1 and 1", len(l), cap(l))
	}
	send(1001)
	first := list()
	if len(first) != 2 || cap(first) != intervalJoinListRoom {
		t.Fatalf("second row: list of %d, capacity %d, want 2 and %d", len(first), cap(first), intervalJoinListRoom)
	}
	send(1002)
	send(1003)
	l := list()
	if &l[0] != &first[0] || !slices.Equal(times(l), []int64{1000, 1001, 1002, 1003}) {
		t.Fatalf("rows %v, in the second row's list's memory: %v; want 1000-1003 appended in place", times(l), &l[0] == &first[0])
	}
	h.wm(1020) // the row at 1000 ends
	l = list()
	if &l[0] != &first[1] || !slices.Equal(times(l), []int64{1001, 1002, 1003}) {
		t.Fatalf("after the cleanup: rows %v, the same memory %v; want 1001-1003 where they were", times(l), &l[0] == &first[1])
	}
	for i, r := range l {
		if want := fmt.Sprintf(`{"t":%d}`, r.TS); string(r.Value) != want {
			t.Fatalf("row %d: value %s, want %s", i, r.Value, want)
		}
	}
	if n := j.BufferedRows(); n != 3 {
		t.Fatalf("%d rows buffered, want 3", n)
	}
	h.finish()
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

// resizeCheckSerializer is intervalSidesSerializer counting its Resize
// calls and those whose result is not Size of the new value, or whose
// old size is not Size of the old value.
type resizeCheckSerializer struct {
	intervalSidesSerializer
	calls, wrong, wrongOld *int
}

// Resize implements state.HeapResizer.
func (s resizeCheckSerializer) Resize(old joinSides, oldSize int, v joinSides) int {
	*s.calls++
	if oldSize != s.Size(old) {
		*s.wrongOld++
	}
	n := s.intervalSidesSerializer.Resize(old, oldSize, v)
	if n != s.Size(v) {
		*s.wrong++
	}
	return n
}

// TestIntervalJoinResizeEqualsSize: on Pebble every write of a key's
// rows over its cached rows sizes them with Resize (the unchanged side's
// list not walked), and Resize always equals Size: records appended in
// place and into new lists, rows marked matched (outer), cleanups of
// the first rows and of rows in the middle, spills to the by-time state
// and back, keys cleared and written again, checkpoints between.
func TestIntervalJoinResizeEqualsSize(t *testing.T) {
	for _, kind := range []JoinKind{JoinInner, JoinFullOuter} {
		for _, spill := range []int{intervalJoinSpillRows, 3} {
			var calls, wrong, wrongOld int
			j := NewIntervalJoin(IntervalJoinParams{Lower: -30 * time.Millisecond, Upper: 20 * time.Millisecond, Join: kind})
			j.spillRows = spill
			j.sidesSer = resizeCheckSerializer{calls: &calls, wrong: &wrong, wrongOld: &wrongOld}
			h := newJoinHarnessFunc(t, "pebble", t.TempDir(), nil, j, j)
			rng := rand.New(rand.NewPCG(uint64(spill), 7))
			ts := int64(1_000)
			for i := range 3_000 {
				ts += rng.Int64N(4)
				at := ts + rng.Int64N(15) // up to 15 ms out of order, above the watermark
				v := fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, strings.Repeat("x", rng.IntN(40)))
				rec := runtime.Record{Key: fmt.Appendf(nil, "k%d", rng.IntN(4)), Value: []byte(v), Timestamp: time.UnixMilli(at)}
				if err := h.op.ProcessRecord(h.ctx, rng.IntN(2), rec); err != nil {
					t.Fatal(err)
				}
				if i%7 == 6 {
					if err := h.op.ProcessWatermark(h.ctx, time.UnixMilli(ts-1)); err != nil {
						t.Fatal(err)
					}
				}
				if i%500 == 499 {
					b := &runtime.Barrier{CheckpointID: int64(i), Timestamp: time.Unix(int64(i), 0), Dir: t.TempDir()}
					finish, err := h.op.SnapshotState(h.ctx, b)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := finish(h.ctx); err != nil {
						t.Fatal(err)
					}
				}
				h.emitted()
			}
			if err := h.op.ProcessWatermark(h.ctx, time.UnixMilli(ts+1_000)); err != nil {
				t.Fatal(err)
			}
			if n := j.BufferedRows(); n != 0 {
				t.Fatalf("%s spill %d: %d rows buffered after the last interval", kind, spill, n)
			}
			if calls < 1_000 || wrong != 0 || wrongOld != 0 {
				t.Fatalf("%s spill %d: %d Resize calls, %d not Size of the new value, %d given an old size not Size of the old value", kind, spill, calls, wrong, wrongOld)
			}
			if err := h.op.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
