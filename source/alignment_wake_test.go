package source

import (
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// TestAlignmentGroupWakesAtNeed: a member whose paused partitions wait
// for the group's least to reach 150 (need) is woken exactly once, by the
// first look at the group (min) after another member's published
// watermark lifts the least to 150 or beyond, and not before; a member
// waiting for nothing is never woken.
func TestAlignmentGroupWakesAtNeed(t *testing.T) {
	g := NewAlignmentGroup("g")
	waiting, other, idle := g.join(), g.join(), g.join()
	woken, idleWoken := 0, 0
	waiting.wake = func() { woken++ }
	idle.wake = func() { idleWoken++ }
	waiting.wm.Store(200) // its partition is ahead: 200 - 50ms drift = 150
	waiting.need.Store(150)
	idle.wm.Store(noAlignmentWatermark)
	for _, step := range []struct {
		publish    int64
		least      int64
		wantWoken  int
		whatWanted string
	}{
		{100, 100, 0, "below need"},
		{149, 149, 0, "one short of need"},
		{150, 150, 1, "at need"},
		{170, 170, 1, "need cleared: no second wake"},
	} {
		other.wm.Store(step.publish)
		if got := g.min(); got != step.least {
			t.Fatalf("%s: min = %d, want %d", step.whatWanted, got, step.least)
		}
		if woken != step.wantWoken {
			t.Fatalf("%s: woken %d times, want %d", step.whatWanted, woken, step.wantWoken)
		}
	}
	if idleWoken != 0 {
		t.Errorf("a member waiting for nothing was woken %d times", idleWoken)
	}
	if n := waiting.need.Load(); n != noAlignmentWatermark {
		t.Errorf("need after the wake = %d, want none", n)
	}
}

// TestAlignmentWakesWaitingSubtask: TestAlignmentGroupAcrossSubtasks'
// partitions (one advancing 4 ms per record, the other 1 ms) with a 10 ms
// drift and an update interval of an hour: the subtasks hand the lead to
// each other some 600 times (each partition fits in one fetch, so each
// subtask holds its whole partition and emits it a drift at a time). A subtask whose partition is paused is woken
// as soon as the other's progress lets it go on, so all 12,000 records
// come out, aligned, within the test's minute. Without the wake each
// handoff waited for the poll's bound (500 ms; the update interval is
// longer), some five minutes in all.
func TestAlignmentWakesWaitingSubtask(t *testing.T) {
	counts, start, step := []int{6000, 6000}, []int64{0, 0}, []int64{1, 4}
	opts := alignTopic(t, counts, start, step)
	d := newDriftTracker(counts, start)
	d.slack = alignChannel + 2
	const drift = 10 * time.Millisecond
	run := runAligned(t, opts, 2, WatermarkAlignment{Group: NewAlignmentGroup("src"), MaxDrift: drift, UpdateInterval: time.Hour}, nil, d.add, nil, nil)
	if !testkit.Poll(60*time.Second, func() bool { return run.emitted.Load() >= 12000 }) {
		t.Fatalf("emitted %d of 12000 records: a paused subtask waited for its update interval", run.emitted.Load())
	}
	run.stop()
	if d.total != 12000 || d.order != "" {
		t.Fatalf("emitted %d records (%v per partition), order: %q; want 6000 of each, in offset order", d.total, d.seen, d.order)
	}
	bound := drift.Milliseconds() + (alignChannel+3)*step[1]
	t.Logf("lead %d ms (bound %d): %s; %d pauses", d.lead, bound, d.at, run.pauses())
	if d.lead > bound {
		t.Errorf("a partition led the other by %d ms (%s), want at most %d", d.lead, d.at, bound)
	}
}
