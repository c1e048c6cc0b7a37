package operators

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// joinHarness drives an IntervalJoin on a KeyedOperator as a
// KeyedCoProcessFunction: main output on ch, the late side output on late.
type joinHarness struct {
	*harness
	late runtime.Channel
	j    *IntervalJoin
}

func newJoinHarness(t *testing.T, kind, dir string, restore *Restore, p IntervalJoinParams) *joinHarness {
	t.Helper()
	j := NewIntervalJoin(p)
	return newJoinHarnessFunc(t, kind, dir, restore, j, j)
}

// newJoinHarnessFunc is newJoinHarness running fn, whose IntervalJoin
// (for BufferedRows) is j.
func newJoinHarnessFunc(t *testing.T, kind, dir string, restore *Restore, fn KeyedCoProcessFunction, j *IntervalJoin) *joinHarness {
	t.Helper()
	h := &joinHarness{harness: &harness{t: t, mb: runtime.NewMailbox(), ch: runtime.NewChannel(1 << 16), ctx: context.Background()},
		late: runtime.NewChannel(1 << 12), j: j}
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{h.ch}, runtime.ForwardPartitioner{}))
	out.AddSideWriter(LateOutput, runtime.NewWriter([]runtime.Channel{h.late}, runtime.ForwardPartitioner{}))
	h.op = NewKeyedCoProcessOperator(OpenContext{Operator: "j", Parallelism: 1}, opener(kind, dir), restore, fn, out)
	h.op.SetMailbox(h.mb)
	if err := h.op.Open(h.ctx); err != nil {
		t.Fatal(err)
	}
	return h
}

// send processes rec on input side (0 left, 1 right).
func (h *joinHarness) send(side int, rec runtime.Record) {
	h.t.Helper()
	if err := h.op.ProcessRecord(h.ctx, side, rec); err != nil {
		h.t.Fatal(err)
	}
}

func (h *joinHarness) wm(ms int64) {
	h.t.Helper()
	if err := h.op.ProcessWatermark(h.ctx, time.UnixMilli(ms)); err != nil {
		h.t.Fatal(err)
	}
}

func (h *joinHarness) lateRecords() []runtime.Record {
	var out []runtime.Record
	for {
		select {
		case el := <-h.late:
			out = append(out, el.Record)
		default:
			return out
		}
	}
}

// joinEvent is one input record of the model test.
type joinEvent struct {
	side int
	key  string
	ts   int64
	id   int
	wm   int64 // > 0: a watermark instead of a record
}

func (e joinEvent) value() string { return fmt.Sprintf(`{"id":%d}`, e.id) }

// joinOutputs renders records as "key ts value", sorted.
func joinOutputs(recs []runtime.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%s %d %s", r.Key, r.Timestamp.UnixMilli(), r.Value)
	}
	slices.Sort(out)
	return out
}

// TestIntervalJoinModel joins a random stream of 600 left and right
// records over 5 keys, bounds [-5s, +10s], with watermarks 4s behind the
// largest time so that some records are late, for every join kind on both
// backends, with a snapshot and restore half-way. The output equals what
// the definition gives, computed independently: every pair of records of
// one key, neither late (time at or before the watermark when it
// arrived), with left.ts - 5s <= right.ts <= left.ts + 10s, at the larger
// time; for outer kinds every such record of the outer side(s) without a
// pair, with the other side null, at its own time. Late records go to the
// late output unchanged; no state (rows, timers) is left once the
// watermark passed every interval.
func TestIntervalJoinModel(t *testing.T) {
	events, maxTS := intervalJoinEvents()
	lower, upper := int64(-5_000), int64(10_000)
	late, live := intervalJoinLate(t, events)
	for _, kind := range []JoinKind{JoinInner, JoinLeftOuter, JoinRightOuter, JoinFullOuter} {
		want := intervalJoinWant(live, lower, upper, kind)
		t.Logf("%s: %d outputs expected, %d late", kind, len(want), len(late))
		for _, backend := range backends {
			// spillRows 2 keeps most keys' rows by time (moving lists
			// there and back), the default keeps every key in its lists.
			for _, spill := range []int{intervalJoinSpillRows, 2} {
				t.Run(fmt.Sprintf("%s/%s/spill%d", kind, backend, spill), func(t *testing.T) {
					p := IntervalJoinParams{Lower: -5 * time.Second, Upper: 10 * time.Second, Join: kind}
					j := NewIntervalJoin(p)
					j.spillRows = spill
					h := newJoinHarnessFunc(t, backend, t.TempDir(), nil, j, j)
					runIntervalJoinModel(t, h, backend, p, events, maxTS, want, late, func(_, after *joinHarness) {
						n := byTimeKeys(t, after)
						if spill == 2 && n == 0 {
							t.Errorf("no key holds rows by time after the restore with spillRows 2")
						}
						if spill == intervalJoinSpillRows && n != 0 {
							t.Errorf("%d keys hold rows by time after the restore, want 0 with spillRows %d", n, spill)
						}
					})
				})
			}
		}
	}
}

// byTimeKeys counts the keys and sides whose rows h's join keeps by time.
func byTimeKeys(t *testing.T, h *joinHarness) int {
	t.Helper()
	n := 0
	for _, name := range []string{IntervalJoinLeftByTimeState, IntervalJoinRightByTimeState} {
		err := state.ApplyToAllKeys(h.op.backend, joinSideState(name), func([]byte, state.MapState[int64, []joinRow]) error {
			n++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// intervalJoinEvents returns TestIntervalJoinModel's input: 600 records
// (random side, one of 5 keys, times spread around 500 ms apart) with a
// watermark 4s behind the largest time after every 10th, and the largest
// time.
func intervalJoinEvents() ([]joinEvent, int64) {
	rng := rand.New(rand.NewPCG(23, 4))
	var events []joinEvent
	maxTS := int64(0)
	for i := range 600 {
		ts := int64(20_000 + i*500 + rng.IntN(16_000) - 8_000)
		events = append(events, joinEvent{side: rng.IntN(2), key: fmt.Sprint("k", rng.IntN(5)), ts: ts, id: i})
		maxTS = max(maxTS, ts)
		if i%10 == 9 {
			events = append(events, joinEvent{wm: maxTS - 4_000})
		}
	}
	return events, maxTS
}

// intervalJoinLate splits events into the late records ("side ts value",
// sorted; at least 20 wanted) and each side's records that are not late.
func intervalJoinLate(t *testing.T, events []joinEvent) ([]string, [2][]joinEvent) {
	var late []string
	var live [2][]joinEvent
	wm := int64(0)
	for _, e := range events {
		switch {
		case e.wm > 0:
			wm = max(wm, e.wm)
		case e.ts <= wm:
			late = append(late, fmt.Sprintf("%d %d %s", e.side, e.ts, e.value()))
		default:
			live[e.side] = append(live[e.side], e)
		}
	}
	slices.Sort(late)
	if len(late) < 20 {
		t.Fatalf("the input has %d late records; the test wants some", len(late))
	}
	return late, live
}

// intervalJoinWant is the model join of the records live of kind with
// bounds [lower, upper] (ms): "key ts value" per output, sorted.
func intervalJoinWant(live [2][]joinEvent, lower, upper int64, kind JoinKind) []string {
	var want []string
	matched := [2]map[int]bool{{}, {}}
	for _, l := range live[0] {
		for _, r := range live[1] {
			if l.key == r.key && l.ts+lower <= r.ts && r.ts <= l.ts+upper {
				want = append(want, fmt.Sprintf(`%s %d {"left":%s,"right":%s}`, l.key, max(l.ts, r.ts), l.value(), r.value()))
				matched[0][l.id], matched[1][r.id] = true, true
			}
		}
	}
	for side := range 2 {
		if !kind.outer(side) {
			continue
		}
		for _, e := range live[side] {
			if matched[side][e.id] {
				continue
			}
			v := fmt.Sprintf(`{"left":%s,"right":null}`, e.value())
			if side == 1 {
				v = fmt.Sprintf(`{"left":null,"right":%s}`, e.value())
			}
			want = append(want, fmt.Sprintf("%s %d %s", e.key, e.ts, v))
		}
	}
	slices.Sort(want)
	return want
}

// runIntervalJoinModel feeds events to h, restoring into a new interval
// join of params p half-way, then passes the last interval and checks the
// output against want, the late output against late and that no state is
// left. restored, if not nil, is called with the harness before and
// after the restore.
func runIntervalJoinModel(t *testing.T, h *joinHarness, backend string, p IntervalJoinParams, events []joinEvent, maxTS int64, want, late []string, restored func(before, after *joinHarness)) {
	upper, lower := p.Upper.Milliseconds(), p.Lower.Milliseconds()
	var got, gotLate []runtime.Record
	lastWM := int64(0)
	for i, e := range events {
		if i == len(events)/2 {
			got = append(got, h.emitted()...)
			gotLate = append(gotLate, h.lateRecords()...)
			r := snapshotRestore(t, h.harness)
			before := h
			j := NewIntervalJoin(p)
			j.spillRows = h.j.spillRows
			h = newJoinHarnessFunc(t, backend, t.TempDir(), r, j, j)
			if restored != nil {
				restored(before, h)
			}
			h.wm(lastWM) // a restored job resumes at its watermark
		}
		if e.wm > 0 {
			h.wm(e.wm)
			lastWM = e.wm
			continue
		}
		h.send(e.side, runtime.Record{Key: []byte(e.key), Value: []byte(e.value()), Timestamp: time.UnixMilli(e.ts)})
	}
	h.wm(maxTS + upper - lower + 1)
	got = append(got, h.emitted()...)
	gotLate = append(gotLate, h.lateRecords()...)
	if g := joinOutputs(got); !slices.Equal(g, want) {
		t.Errorf("%d outputs, want %d; first differences:\n%s", len(g), len(want), joinDiff(g, want))
	}
	var lateGot []string
	for _, r := range gotLate {
		side := 0
		for _, e := range events {
			if e.wm == 0 && e.value() == string(r.Value) {
				side = e.side
			}
		}
		lateGot = append(lateGot, fmt.Sprintf("%d %d %s", side, r.Timestamp.UnixMilli(), r.Value))
	}
	slices.Sort(lateGot)
	if !slices.Equal(lateGot, late) {
		t.Errorf("late output %d records, want %d", len(lateGot), len(late))
	}
	if n := h.entries(); n != 0 {
		t.Errorf("%d state entries after the watermark passed every interval, want 0", n)
	}
	if n := h.j.BufferedRows(); n != 0 {
		t.Errorf("%d buffered rows counted at the end, want 0", n)
	}
	h.finish()
}

// joinDiff describes the first few lines in which got and want differ.
func joinDiff(got, want []string) string {
	var s string
	n := 0
	for _, g := range got {
		if !slices.Contains(want, g) && n < 5 {
			s += "unexpected: " + g + "\n"
			n++
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) && n < 10 {
			s += "missing:    " + w + "\n"
			n++
		}
	}
	return s
}

// TestIntervalJoinSelect: select sees left and right (null for the
// missing side of an outer row), key and timestamp; unmatched rows are
// emitted only once the watermark reaches their interval's end (left:
// t + upper), and the buffered-rows count follows the state.
func TestIntervalJoinSelect(t *testing.T) {
	sel, err := CompileExpression(`{"o": left.id, "p": right == null ? null : right.amount, "k": key, "t": timestamp}`)
	if err != nil {
		t.Fatal(err)
	}
	p := IntervalJoinParams{Lower: 0, Upper: 2 * time.Second, Join: JoinLeftOuter, Select: sel}
	h := newJoinHarness(t, "hashmap", t.TempDir(), nil, p)
	h.send(0, runtime.Record{Key: []byte("a"), Value: []byte(`{"id":1}`), Timestamp: time.UnixMilli(1000)})
	h.send(0, runtime.Record{Key: []byte("b"), Value: []byte(`{"id":2}`), Timestamp: time.UnixMilli(1500)})
	h.send(1, runtime.Record{Key: []byte("a"), Value: []byte(`{"amount":7}`), Timestamp: time.UnixMilli(2500)})
	if got, want := values(h.emitted()), []string{`{"k":"a","o":1,"p":7,"t":2500}`}; !slices.Equal(got, want) {
		t.Fatalf("pair: %q, want %q", got, want)
	}
	if n := h.j.BufferedRows(); n != 3 {
		t.Fatalf("%d rows buffered, want 3", n)
	}
	h.wm(3499)
	if got := h.emitted(); len(got) != 0 {
		t.Fatalf("watermark 3499 emitted %q; b's interval ends at 3500", values(got))
	}
	h.wm(3500)
	if got, want := values(h.emitted()), []string{`{"k":"b","o":2,"p":null,"t":1500}`}; !slices.Equal(got, want) {
		t.Fatalf("watermark 3500: %q, want %q", got, want)
	}
	h.wm(10_000)
	if n := h.j.BufferedRows(); n != 0 || h.entries() != 0 {
		t.Fatalf("%d rows, %d entries left, want none", n, h.entries())
	}
	h.finish()
}

// entries counts the keyed state entries (rows and timers) of every key.
func (h *joinHarness) entries() int {
	h.t.Helper()
	n, err := state.EntryCount(h.op.backend)
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

// TestIntervalJoinCleanupQueue: the join registers no event-time timer per
// buffered row (its cleanup queue is in memory, rebuilt from the rows at
// Open): with five rows buffered on two keys the timer service holds none
// and the state holds only one entry per key (both sides' rows); the watermark still
// removes each row exactly when it reaches the row's interval end (left t
// + upper, right t - lower), emitting the unmatched rows of the outer side
// then, in order of end time and key, and after a snapshot and restore the
// restored rows are removed the same way.
func TestIntervalJoinCleanupQueue(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			p := IntervalJoinParams{Lower: -1 * time.Second, Upper: 2 * time.Second, Join: JoinFullOuter}
			h := newJoinHarness(t, backend, t.TempDir(), nil, p)
			rec := func(key string, id int, ts int64) runtime.Record {
				return runtime.Record{Key: []byte(key), Value: []byte(fmt.Sprintf(`{"id":%d}`, id)), Timestamp: time.UnixMilli(ts)}
			}
			h.send(0, rec("a", 1, 1000)) // ends at 3000
			h.send(0, rec("a", 2, 1500)) // ends at 3500
			h.send(1, rec("b", 3, 1200)) // ends at 2200
			h.send(0, rec("b", 4, 5000)) // ends at 7000
			h.send(1, rec("a", 5, 9000)) // ends at 10000
			if n := h.op.timers.q.Len(EventTime); n != 0 {
				t.Fatalf("%d event-time timers registered for 5 rows, want 0", n)
			}
			if n := h.entries(); n != 2 {
				t.Fatalf("%d state entries, want 2 (a's rows, b's rows: both sides of a key in one)", n)
			}
			h.wm(2199)
			if got := h.emitted(); len(got) != 0 {
				t.Fatalf("watermark 2199 emitted %q", values(got))
			}
			h.wm(3000)
			if got, want := joinOutputs(h.emitted()), []string{`a 1000 {"left":{"id":1},"right":null}`, `b 1200 {"left":null,"right":{"id":3}}`}; !slices.Equal(got, want) {
				t.Fatalf("watermark 3000: %q, want %q", got, want)
			}
			if n := h.j.BufferedRows(); n != 3 {
				t.Fatalf("%d rows buffered after watermark 3000, want 3", n)
			}
			r := snapshotRestore(t, h.harness)
			h = newJoinHarness(t, backend, t.TempDir(), r, p)
			h.wm(3000)
			if n := h.j.BufferedRows(); n != 3 {
				t.Fatalf("%d rows restored, want 3", n)
			}
			h.wm(6999)
			if got, want := joinOutputs(h.emitted()), []string{`a 1500 {"left":{"id":2},"right":null}`}; !slices.Equal(got, want) {
				t.Fatalf("watermark 6999 after the restore: %q, want %q", got, want)
			}
			h.wm(10_000)
			if got, want := values(h.emitted()), []string{`{"left":{"id":4},"right":null}`, `{"left":null,"right":{"id":5}}`}; !slices.Equal(got, want) {
				t.Fatalf("watermark 10000: %q, want %q (by end time)", got, want)
			}
			if n, e := h.j.BufferedRows(), h.entries(); n != 0 || e != 0 {
				t.Fatalf("%d rows, %d entries left, want none", n, e)
			}
			h.finish()
		})
	}
}

// TestIntervalJoinSelectFailureAllOrNothing: a record on whose second
// pair select fails is a bad record that leaves nothing behind, in both
// layouts (the other side's rows in a list, or by time with spillRows 1)
// on both backends: its first pair is not emitted and the right row of
// that pair is not marked matched, so the full outer join emits both right
// rows as unmatched once the watermark passes them (as the regular join's
// TestRegularJoinSelectFailureAllOrNothing). Before, the first pair was
// emitted, and in the by-time layout its bucket was written with the row
// marked matched, so the row was never emitted unmatched.
func TestIntervalJoinSelectFailureAllOrNothing(t *testing.T) {
	sel := compiled(t, `{"l": left == null ? null : left.v, "r": right == null ? null : right.w, "s": left == null || right == null ? null : left.v + right.w}`)
	p := IntervalJoinParams{Lower: -time.Second, Upper: time.Second, Join: JoinFullOuter, Select: sel}
	rec := func(v string, ts int64) runtime.Record {
		return runtime.Record{Key: []byte("k"), Value: []byte(v), Timestamp: time.UnixMilli(ts)}
	}
	for _, backend := range backends {
		for _, spill := range []int{intervalJoinSpillRows, 1} {
			t.Run(fmt.Sprintf("%s/spill%d", backend, spill), func(t *testing.T) {
				j := NewIntervalJoin(p)
				j.spillRows = spill
				h := newJoinHarnessFunc(t, backend, t.TempDir(), nil, j, j)
				bad := &recordErrors{}
				h.op.SetBadRecordHandlers([]runtime.BadRecordHandler{bad})
				h.send(1, rec(`{"w":2}`, 1000))
				h.send(1, rec(`{"w":"x"}`, 1100))
				var re *runtime.RecordError
				// 1 + 2, then 1 + "x" fails.
				if err := h.op.ProcessRecord(h.ctx, 0, rec(`{"v":1}`, 1050)); !errors.As(err, &re) {
					t.Fatalf("select failing on the second pair: %v, want a record error", err)
				}
				if got := h.emitted(); len(got) != 0 {
					t.Fatalf("the failed record emitted %q, want nothing", values(got))
				}
				if n := h.j.BufferedRows(); n != 2 {
					t.Fatalf("%d rows buffered, want 2 (the failed record is not)", n)
				}
				h.send(1, rec(`{"w":4}`, 5000))
				h.send(0, rec(`{"v":1}`, 5000))
				h.wm(10_000)
				want := []string{
					`k 1000 {"l":null,"r":2,"s":null}`,
					`k 1100 {"l":null,"r":"x","s":null}`,
					`k 5000 {"l":1,"r":4,"s":5}`,
				}
				if got := joinOutputs(h.emitted()); !slices.Equal(got, want) {
					t.Fatalf("output %q, want %q", got, want)
				}
				if n, e := h.j.BufferedRows(), h.entries(); n != 0 || e != 0 {
					t.Fatalf("%d rows, %d entries left, want none", n, e)
				}
				h.finish()
			})
		}
	}
}

// TestExpiryQueueBuckets: the cleanup queue hands out one bucket per end
// time, earliest first and only once due, listing each key and side pushed
// (a repeat of the entry pushed last listed once; sortByKey orders by key,
// then side, without repeats), and a recycled bucket starts empty.
func TestExpiryQueueBuckets(t *testing.T) {
	var q expiryQueue
	push := func(at int64, key string, side uint8) { q.push(at, []byte(key), side) }
	push(30, "b", 0)
	push(10, "c", 1)
	push(10, "c", 1) // listed once
	push(30, "a", 1)
	push(20, "a", 0)
	push(10, "a", 0)
	push(30, "b", 0)
	push(30, "a", 0)
	list := func(b *expiryBucket) []string {
		var s []string
		for i := range b.ents {
			s = append(s, fmt.Sprintf("%s/%d", b.key(i), b.ents[i].side))
		}
		return s
	}
	if _, ok := q.popDue(9); ok {
		t.Fatal("a bucket due at 9, want none before 10")
	}
	var got []string
	for {
		b, ok := q.popDue(30)
		if !ok {
			break
		}
		if b.at == 30 {
			if l, want := list(b), []string{"b/0", "a/1", "b/0", "a/0"}; !slices.Equal(l, want) {
				t.Fatalf("bucket 30 as pushed: %q, want %q", l, want)
			}
			b.sortByKey()
		}
		got = append(got, fmt.Sprintf("%d:%v", b.at, list(b)))
		q.recycle(b)
	}
	want := []string{"10:[c/1 a/0]", "20:[a/0]", "30:[a/0 a/1 b/0]"}
	if !slices.Equal(got, want) {
		t.Fatalf("buckets %q, want %q", got, want)
	}
	push(40, "d", 1)
	b, ok := q.popDue(40)
	if !ok || b.at != 40 || !slices.Equal(list(b), []string{"d/1"}) {
		t.Fatalf("reused bucket: %v %v, want 40 [d/1]", ok, b)
	}
	if _, ok := q.popDue(1 << 40); ok || len(q.buckets) != 0 {
		t.Fatalf("queue not empty: %d buckets", len(q.buckets))
	}
}

// TestIntervalJoinCheckedRowsSameOutput: records whose values their source
// checked (runtime.ValidJSON) give the same output as unmarked ones on
// both backends, for every join kind, with the stored rows read through
// the mark (joinRow.Valid) when select pairs them: on Pebble the write
// cache keeps the mark with the row.
func TestIntervalJoinCheckedRowsSameOutput(t *testing.T) {
	sel := compiled(t, `{"l": left == null ? null : left.id, "r": right == null ? null : right.id, "n": right == null ? null : right.n}`)
	for _, backend := range backends {
		for _, kind := range []JoinKind{JoinInner, JoinLeftOuter, JoinRightOuter, JoinFullOuter} {
			t.Run(fmt.Sprintf("%s/%s", backend, kind), func(t *testing.T) {
				p := IntervalJoinParams{Lower: -time.Second, Upper: time.Second, Join: kind, Select: sel}
				run := func(mark bool) []string {
					h := newJoinHarness(t, backend, t.TempDir(), nil, p)
					for i := range 40 {
						r := runtime.Record{Key: []byte(fmt.Sprintf("k%d", i%3)), Value: []byte(fmt.Sprintf(`{"id":%d,"n":{"x":[%d]}}`, i, i)), Timestamp: time.UnixMilli(int64(1000 + 300*i))}
						if mark {
							r.SetDecoded(runtime.ValidJSON{})
						}
						h.send(i%2, r)
					}
					if mark && backend == "pebble" {
						h.op.backend.SetCurrentKey([]byte("k0"))
						k, _, err := h.j.keyRows.Value()
						if err != nil {
							t.Fatal(err)
						}
						if k == nil || k.empty() || !slices.ContainsFunc(append(slices.Clone(k.sides[0]), k.sides[1]...), func(r joinRow) bool { return r.Valid }) {
							t.Fatalf("k0's rows %+v: want the checked mark kept in the write cache", k)
						}
					}
					h.wm(1 << 20)
					out := joinOutputs(h.emitted())
					h.finish()
					return out
				}
				plain, checked := run(false), run(true)
				if len(plain) == 0 || !slices.Equal(plain, checked) {
					t.Fatalf("checked records gave %q, unmarked ones %q", checked, plain)
				}
			})
		}
	}
}
