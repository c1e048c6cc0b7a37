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
	w.observe(0, ev(20), at(1))
	check("partition 1 has no record", at(1), want{})
	w.observe(1, ev(15), at(2))
	check("min(20, 15) - 2s - 1ms", at(2), want{ok: true, wm: 13_000 - 1})
	w.observe(0, ev(30), at(3))
	check("partition 1 still holds", at(3), want{})
	check("partition 1 idle after 10s", at(12), want{ok: true, wm: 28_000 - 1})
	check("nothing new", at(12.5), want{})
	check("both idle", at(13), want{ok: true, idle: true})
	check("idle reported once", at(14), want{})
	w.observe(1, ev(16), at(15))
	check("partition 1 active again: repeat the last watermark", at(15), want{ok: true, wm: 28_000 - 1})

	empty := newWatermarks(WatermarkConfig{})
	if el, ok := empty.next(at(0)); !ok || !el.Idle {
		t.Fatalf("subtask without partitions: got %v %+v, want the idle status", ok, el)
	}
	if _, ok := empty.next(at(1)); ok {
		t.Fatal("subtask without partitions emitted twice")
	}
}
