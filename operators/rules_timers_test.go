package operators

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// eventTimers counts the event-time timers registered at every evaluator
// subtask of g.
func (g *rulesRig) eventTimers() int {
	n := 0
	for _, f := range g.fns {
		n += f.timers.(*timerService).q.Len(EventTime)
	}
	return n
}

// send routes modelRec x and hands its copies to the evaluators.
func (g *rulesRig) send(x modelRec) {
	g.t.Helper()
	c := &sliceCollector{}
	if err := g.router.ProcessElement(g.ctx, runtime.Record{Value: x.json(), Format: runtime.FormatJSON, Timestamp: time.UnixMilli(x.ts)}, c); err != nil {
		g.t.Fatal(err)
	}
	g.evaluate(c.recs)
}

// TestRulesOneTimerPerKey: the keyed stage keeps one pending timer per key
// (not one per slice): 200 records of one group in time order (200
// slices) leave 1 timer, one older than every slice adds a second; the
// watermark then removes exactly the slices whose time plus the window it
// passed, oldest first, a later one removes the rest, and no timer is
// left once no slice is.
func TestRulesOneTimerPerKey(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 1, RuleTimeProcessing, nil, nil)
			r := modelRule{id: "c", fn: "count", window: 1000, grouped: true}
			g.rule(r.id, r.json(), 0)
			for i := range 200 {
				g.send(modelRec{id: i + 1, ts: 10_000 + int64(i)*10, g: "g0", amount: "1"})
			}
			if n := g.eventTimers(); n != 1 {
				t.Fatalf("%d event-time timers after 200 slices in time order, want 1", n)
			}
			g.send(modelRec{id: 999, ts: 9_000, g: "g0", amount: "1"}) // a new oldest slice
			if n := g.eventTimers(); n != 2 {
				t.Fatalf("%d event-time timers after a new oldest slice, want 2", n)
			}
			// Slices 9000 and 10000..10990 end by 11990: the watermark
			// 11995 removes 9000 and 10000..10990 (100 slices), leaving
			// 11000..11990 (100).
			g.watermark(11_995)
			if got, want := g.entries(), map[string]int{"c": 100}; !maps.Equal(got, want) {
				t.Fatalf("slices after watermark 11995: %v, want %v", got, want)
			}
			if n := g.eventTimers(); n != 1 {
				t.Fatalf("%d event-time timers after the watermark, want 1 (for slice 11000)", n)
			}
			// An on-time record sees exactly the 100 slices of its window.
			g.alerts()
			g.send(modelRec{id: 1000, ts: 12_000, g: "g0", amount: "1"})
			if got, want := g.alerts(), []string{`c {"g":"g0"} 101 11000..12000 tx1000`}; !slices.Equal(got, want) {
				t.Fatalf("alerts %v, want %v", got, want)
			}
			g.watermark(13_001)
			if got := g.entries(); len(got) != 0 {
				t.Fatalf("slices after watermark 13001: %v, want none", got)
			}
			if n := g.eventTimers(); n != 0 {
				t.Fatalf("%d event-time timers with no slice left, want 0", n)
			}
		})
	}
}

// TestRulesWindowShrinkRearmsTimers: a rule whose window grows (the oldest
// slice's timer fires and waits for the longer window) and then shrinks
// again still has its slices removed once the watermark passes their time
// plus the current window: the update registers the key's timer at the
// new end (without it the slice stayed until the longer window's timer).
// The same holds for a rule the lowered expression limits drop at restore:
// its slices leave by their own windows.
func TestRulesWindowShrinkRearmsTimers(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 2, RuleTimeProcessing, nil, nil)
			r := modelRule{id: "s", fn: "sum", of: "amount", window: 1000, grouped: true}
			g.rule(r.id, r.json(), 0)
			for i, ts := range []int64{0, 100} {
				g.send(modelRec{id: i + 1, ts: ts, g: "g0", amount: "2"})
				g.send(modelRec{id: i + 11, ts: ts, g: "g1", amount: "3"})
			}
			r.window = 5000
			g.rule(r.id, r.json(), 0)
			g.watermark(1_500) // both slices' first timers fire; they now end at 5000 and 5100
			if got, want := g.entries(), map[string]int{"s": 4}; !maps.Equal(got, want) {
				t.Fatalf("slices after watermark 1500 with a 5 s window: %v, want %v", got, want)
			}
			r.window = 2000
			g.rule(r.id, r.json(), 0)
			g.watermark(2_050) // slice 0 ends at 2000, slice 100 at 2100
			if got, want := g.entries(), map[string]int{"s": 2}; !maps.Equal(got, want) {
				t.Fatalf("slices after the window shrank to 2 s and watermark 2050: %v, want %v", got, want)
			}
			g.alerts()
			g.send(modelRec{id: 21, ts: 2_090, g: "g0", amount: "5"})
			if got, want := g.alerts(), []string{`s {"g":"g0"} 7 90..2090 tx21`}; !slices.Equal(got, want) {
				t.Fatalf("alerts %v, want %v", got, want)
			}
			g.watermark(2_101)
			if got, want := g.entries(), map[string]int{"s": 1}; !maps.Equal(got, want) {
				t.Fatalf("slices after watermark 2101: %v, want %v", got, want)
			}
		})
	}
}
