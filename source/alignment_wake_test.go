package source

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
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

// TestAlignmentBarrierBetweenBatches: one subtask, two partitions of
// 10,000 records each (one fetch each), alignment on with a drift of an
// hour (no partition is ever ahead). A checkpoint triggered when the first
// record is drained comes out behind at most two emit budgets and the
// channel's records: held records go out alignEmitBudget at a time with
// the mailbox run in between. Without the budget the barrier waited
// behind everything the first poll took (a whole fetch or more).
func TestAlignmentBarrierBetweenBatches(t *testing.T) {
	counts, start, step := []int{10000, 10000}, []int64{0, 0}, []int64{1, 1}
	opts := alignTopic(t, counts, start, step)
	drained, before := 0, -1
	barrier := make(chan struct{})
	src := make(chan *KafkaSource, 1) // handed over once runAligned returned
	run := runAligned(t, opts, 1, WatermarkAlignment{MaxDrift: time.Hour}, nil, func(r alignedRecord) {
		drained++
		if drained == 1 {
			(<-src).TriggerCheckpoint(&runtime.Barrier{CheckpointID: 1})
		}
	}, func(sub int, el runtime.Element) {
		if el.Kind == runtime.KindBarrier && before < 0 {
			before = drained
			close(barrier)
		}
	}, nil)
	src <- run.srcs[0]
	select {
	case <-barrier:
	case <-time.After(60 * time.Second):
		t.Fatal("no barrier within a minute")
	}
	if !testkit.Poll(60*time.Second, func() bool { return run.emitted.Load() >= 20000 }) {
		t.Fatalf("emitted %d of 20000 records", run.emitted.Load())
	}
	run.stop()
	if limit := 2*1000 + alignChannel + 2; before > limit { // alignEmitBudget is 1000
		t.Errorf("the barrier came after %d records, want at most %d (two emit budgets and the channel)", before, limit)
	}
	t.Logf("barrier after %d records", before)
}

// TestPartitionEventTimeGauge: kstreamd_source_partition_event_time_ms
// holds each partition's largest emitted event time once the source read
// it all (1,000 records each, 1 ms and 4 ms apart), with alignment off
// and on (where held records go out in polls that fetched nothing of
// their partition).
func TestPartitionEventTimeGauge(t *testing.T) {
	for _, drift := range []time.Duration{0, 20 * time.Millisecond} {
		counts, start, step := []int{1000, 1000}, []int64{0, 0}, []int64{1, 4}
		opts := alignTopic(t, counts, start, step)
		m, err := NewMetrics(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		run := runAligned(t, opts, 1, WatermarkAlignment{MaxDrift: drift}, nil, func(alignedRecord) {}, nil,
			func(c *Config) { c.Metrics = m })
		if !testkit.Poll(60*time.Second, func() bool { return run.emitted.Load() >= 2000 }) {
			t.Fatalf("drift %v: emitted %d of 2000 records", drift, run.emitted.Load())
		}
		// The gauges are set after the poll whose records went out last.
		want := []float64{float64(alignBase + 999*step[0]), float64(alignBase + 999*step[1])}
		ok := testkit.Poll(60*time.Second, func() bool {
			for p, w := range want {
				if testutil.ToFloat64(m.eventTime.WithLabelValues("src", strconv.Itoa(p))) != w {
					return false
				}
			}
			return true
		})
		run.stop()
		if !ok {
			for p, w := range want {
				t.Errorf("drift %v: partition %d event time gauge %v, want %v", drift, p, testutil.ToFloat64(m.eventTime.WithLabelValues("src", strconv.Itoa(p))), w)
			}
		}
	}
}
