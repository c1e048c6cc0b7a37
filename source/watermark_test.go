package source

import (
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// TestWatermarks follows two partitions with 2s out-of-orderness and 10s
// idleness: the watermark is the minimum of both, a partition without
// records holds it until it is idle, an idle partition stops holding it,
// and a subtask without partitions emits only the idle status.
func TestWatermarks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ev := func(s int64) time.Time { return time.Unix(s, 0) }
	w := newWatermarks(WatermarkConfig{OutOfOrderness: 2 * time.Second, Idleness: 10 * time.Second})
	w.assign(0, noTimestamp, at(0))
	w.assign(1, noTimestamp, at(0))
	type want struct {
		ok   bool
		idle bool
		wm   int64 // ms
	}
	check := func(name string, now time.Time, exp want) {
		t.Helper()
		el, ok := w.next(now)
		if ok != exp.ok || (ok && (el.Kind != runtime.KindWatermark || el.Idle != exp.idle || (!exp.idle && el.Watermark.UnixMilli() != exp.wm))) {
			t.Fatalf("%s: got %v %+v (wm %d), want %+v", name, ok, el, el.Watermark.UnixMilli(), exp)
		}
	}
	w.observe(0, ev(20))
	w.seenAt(at(1))
	check("partition 1 has no record", at(1), want{})
	w.observe(1, ev(15))
	w.seenAt(at(2))
	check("min(20, 15) - 2s - 1ms", at(2), want{ok: true, wm: 13_000 - 1})
	w.observe(0, ev(30))
	w.seenAt(at(3))
	check("partition 1 still holds", at(3), want{})
	check("partition 1 idle after 10s", at(12), want{ok: true, wm: 28_000 - 1})
	check("nothing new", at(12.5), want{})
	check("both idle", at(13), want{ok: true, idle: true})
	check("idle reported once", at(14), want{})
	w.observe(1, ev(16))
	w.seenAt(at(15))
	check("partition 1 active again: repeat the last watermark", at(15), want{ok: true, wm: 28_000 - 1})

	empty := newWatermarks(WatermarkConfig{})
	if el, ok := empty.next(at(0)); !ok || !el.Idle {
		t.Fatalf("subtask without partitions: got %v %+v, want the idle status", ok, el)
	}
	if _, ok := empty.next(at(1)); ok {
		t.Fatal("subtask without partitions emitted twice")
	}
}

// TestWatermarksSeenAtStampsEachObservedPartition: observe takes no clock
// reading; seenAt, called once after a fetch's records, gives every
// partition observed since the last call that processing time, for the
// idleness of next.
func TestWatermarksSeenAtStampsEachObservedPartition(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := newWatermarks(WatermarkConfig{Idleness: 10 * time.Second})
	w.assign(0, noTimestamp, t0)
	w.assign(1, noTimestamp, t0)
	w.assign(2, noTimestamp, t0)
	w.observe(0, time.UnixMilli(5000))
	w.observe(0, time.UnixMilli(7000))
	w.observe(1, time.UnixMilli(6000))
	if got := w.lastSeen[0]; !got.Equal(t0) {
		t.Fatalf("observe moved lastSeen of partition 0 to %v; want %v until seenAt", got, t0)
	}
	w.seenAt(t0.Add(9 * time.Second))
	for p, want := range map[int32]time.Time{0: t0.Add(9 * time.Second), 1: t0.Add(9 * time.Second), 2: t0} {
		if got := w.lastSeen[p]; !got.Equal(want) {
			t.Fatalf("lastSeen of partition %d = %v, want %v", p, got, want)
		}
	}
	if len(w.seen) != 0 {
		t.Fatalf("seen = %v after seenAt, want empty", w.seen)
	}
	// At t0+12s partition 2 (last seen at t0) is idle, 0 and 1 are not:
	// the watermark is min(7000, 6000) - 1.
	el, ok := w.next(t0.Add(12 * time.Second))
	if !ok || el.Idle || el.Watermark.UnixMilli() != 5999 {
		t.Fatalf("next = %v %+v, want watermark 5999", ok, el)
	}
}
