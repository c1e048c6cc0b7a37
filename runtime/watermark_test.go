package runtime

import (
	"testing"
	"time"
)

// TestStatusWatermarkValve drives a valve over three channels, the last
// one ignored (a broadcast input), and asserts the input watermark after
// each step.
func TestStatusWatermarkValve(t *testing.T) {
	ms := func(n int64) time.Time { return time.UnixMilli(n) }
	type step struct {
		op      string // wm, idle, active, finish
		ch      int
		at      int64
		want    int64 // input watermark after the step; -1 = MinWatermark
		adv     bool
		allIdle bool
	}
	steps := []step{
		{op: "wm", ch: 0, at: 10, want: -1},            // channel 1 sent nothing yet: held back
		{op: "wm", ch: 2, at: 100, want: -1},           // the broadcast channel is ignored
		{op: "wm", ch: 1, at: 5, want: 5, adv: true},   // min(10, 5)
		{op: "wm", ch: 1, at: 20, want: 10, adv: true}, // min(10, 20)
		{op: "wm", ch: 1, at: 15, want: 10},            // a channel never goes back
		{op: "idle", ch: 0, want: 20, adv: true},       // the idle channel no longer holds back
		{op: "idle", ch: 1, want: 20, allIdle: true},   // every channel idle: forward idle, keep time
		{op: "idle", ch: 1, want: 20},                  // reported once
		{op: "active", ch: 0, want: 20},                // a record: active again at its old 10
		{op: "wm", ch: 1, at: 30, want: 20},            // min(10, 30) = 10 < 20: no regression, no advance
		{op: "wm", ch: 0, at: 40, want: 30, adv: true}, // min(40, 30)
		{op: "finish", ch: 1, want: 40, adv: true},     // a finished channel leaves the minimum
	}
	v := NewStatusWatermarkValve(3, []bool{false, false, true})
	for i, s := range steps {
		var wm time.Time
		var adv, allIdle bool
		switch s.op {
		case "wm":
			wm, adv = v.Watermark(s.ch, ms(s.at))
		case "idle":
			wm, adv, allIdle = v.Idle(s.ch)
		case "active":
			v.Active(s.ch)
			wm = v.Current()
		case "finish":
			wm, adv = v.Finish(s.ch)
		}
		want := MinWatermark
		if s.want >= 0 {
			want = ms(s.want)
		}
		if !wm.Equal(want) || adv != s.adv || allIdle != s.allIdle {
			t.Fatalf("step %d %+v: got wm %d advanced %v allIdle %v, want %d %v %v", i, s, wm.UnixMilli(), adv, allIdle, want.UnixMilli(), s.adv, s.allIdle)
		}
	}
}

// TestValveAllIdleFlushesMaxWatermark: when every channel is idle, the
// input watermark is the largest any channel reached, whichever channel
// went quiet last (Flink's StatusWatermarkValve). Without it a job whose
// partitions all fall quiet keeps time at the slower one's watermark, and
// windows it could close stay open.
func TestValveAllIdleFlushesMaxWatermark(t *testing.T) {
	ms := func(n int64) time.Time { return time.UnixMilli(n) }
	for _, order := range [][2]int{{0, 1}, {1, 0}} {
		v := NewStatusWatermarkValve(2, nil)
		v.Watermark(0, ms(32_999))
		if wm, _ := v.Watermark(1, ms(9_999)); !wm.Equal(ms(9_999)) {
			t.Fatalf("min watermark %d, want 9999", wm.UnixMilli())
		}
		v.Idle(order[0])
		wm, adv, allIdle := v.Idle(order[1])
		if !v.Current().Equal(ms(32_999)) || !allIdle {
			t.Fatalf("idle order %v: current %d (last step %d %v %v), want 32999 and all idle", order, v.Current().UnixMilli(), wm.UnixMilli(), adv, allIdle)
		}
	}
	// A channel that never sent a watermark (a source subtask without a
	// partition) does not move time.
	v := NewStatusWatermarkValve(2, nil)
	v.Idle(0)
	if _, adv, _ := v.Idle(1); adv || !v.Current().Equal(MinWatermark) {
		t.Fatalf("all idle without watermarks: advanced %v to %d, want no time", adv, v.Current().UnixMilli())
	}
}
