package runtime

import (
	"context"
	"fmt"
	"slices"
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

// bcastTimeOp is an Operator that is a BroadcastWatermarkHandler: it
// records the broadcast times it is handed.
type bcastTimeOp struct {
	recorder
	times []string
}

func (o *bcastTimeOp) BroadcastWatermarks() bool { return true }
func (o *bcastTimeOp) ProcessBroadcastWatermark(_ context.Context, wm time.Time) error {
	if wm.Equal(MaxWatermark) {
		o.times = append(o.times, "max")
	} else {
		o.times = append(o.times, fmt.Sprint(wm.UnixMilli()))
	}
	return nil
}

// TestOperatorTaskBroadcastWatermark: for a BroadcastWatermarkHandler the
// task hands over the broadcast input's own watermark (MaxWatermark while
// it is idle or finished, back to its last watermark when a record makes
// it active), forwards the minimum of both inputs, and holds an all-idle
// main input's idle status back until the broadcast time caught up.
func TestOperatorTaskBroadcastWatermark(t *testing.T) {
	main, bc, down := NewChannel(1), NewChannel(1), NewChannel(64)
	wm := func(ms int64) Element { return Element{Kind: KindWatermark, Watermark: time.UnixMilli(ms)} }
	idle := Element{Kind: KindWatermark, Idle: true}
	op := &bcastTimeOp{}
	task := NewOperatorTask(OperatorTaskConfig{
		ID: TaskID{"route", 0}, Gate: NewInputGate([]InputChannel{{Ch: main, Input: 0}, {Ch: bc, Input: 1}}),
		Operator: op, Output: NewOutput(nil, NewWriter([]Channel{down}, ForwardPartitioner{})), BootstrapInput: 1,
	})
	done := make(chan error, 1)
	go func() { done <- task.Run(context.Background(), nil) }()
	// One element at a time: the next is sent once the task took the last,
	// so it has processed every earlier one.
	steps := []struct {
		ch Channel
		el Element
	}{
		{bc, Element{Kind: KindCaughtUp}},
		{main, wm(50)},    // broadcast time unknown: nothing forwarded
		{bc, wm(100)},     // 100; forwards min(50, 100)
		{main, wm(300)},   // forwards 100
		{bc, idle},        // max; forwards 300
		{bc, rec("rule")}, // active again at 100; nothing to forward
		{bc, wm(400)},     // 400
		{main, wm(500)},   // forwards 400
		{main, idle},      // idle held back: broadcast time 400 < 500
		{bc, wm(600)},     // 600; forwards 500, then idle
		{main, Element{Kind: KindEndOfInput}},
		{bc, Element{Kind: KindEndOfInput}}, // max
	}
	for i, s := range steps {
		s.ch <- s.el
		deadline := time.Now().Add(time.Minute)
		for len(s.ch) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("step %d not taken", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(down) > 0 {
		el := <-down
		switch {
		case el.Kind == KindWatermark && el.Idle:
			got = append(got, "idle")
		case el.Kind == KindWatermark:
			got = append(got, fmt.Sprint(el.Watermark.UnixMilli()))
		default:
			got = append(got, el.Kind.String())
		}
	}
	if want := []string{"50", "100", "300", "400", "500", "idle", "end-of-input"}; !slices.Equal(got, want) {
		t.Errorf("forwarded %q, want %q", got, want)
	}
	if want := []string{"100", "max", "100", "400", "600", "max"}; !slices.Equal(op.times, want) {
		t.Errorf("broadcast times %q, want %q", op.times, want)
	}
	if want := []string{"1:rule"}; !slices.Equal(op.seen, want) {
		t.Errorf("records %q, want %q", op.seen, want)
	}
}
