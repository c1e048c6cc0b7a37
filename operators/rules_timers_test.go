package operators

import (
	"encoding/hex"
	"maps"
	"math/big"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
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

// TestRuleWindowFormatV1: the summary and slice bytes of the first sliced
// layout (format version 1, written by main's code for these values) decode
// to the same values, and a summary without a newest slice is written as
// exactly those bytes; a summary with its newest slice (version 2) reads
// back equal.
func TestRuleWindowFormatV1(t *testing.T) {
	const (
		goldenW = "01165b2273756d222c22616d6f756e74222c5b2267225d5d0373756dd00f06143c1408020000000000180112010a0000089800000002a000000000000000"
		goldenS = "0101d00f04280000000201350137"
	)
	w := ruleWindow{Shape: `["sum","amount",["g"]]`, Fn: AggSum, WindowMs: 1000, Slices: 3, Head: 10, Tail: 30, First: 10, N: 4,
		Ints: number{Int: 12}, Floats: 1, FSum: new(big.Float).SetPrec(fsumPrec).SetFloat64(2.5)}
	s := ruleSlice{WindowMs: 1000, N: 2, In: [][]byte{[]byte("5"), []byte("7")}, Prev: 20, HasPrev: true}
	gw, _ := hex.DecodeString(goldenW)
	gs, _ := hex.DecodeString(goldenS)
	dw, err := ruleWindowSerializer{}.Decode(gw)
	if err != nil {
		t.Fatal(err)
	}
	if !sameWindow(dw, w) || dw.TailSlice != nil {
		t.Fatalf("version 1 summary decoded as %+v, want %+v", dw, w)
	}
	if b, err := (ruleWindowSerializer{}).Append(nil, w); err != nil || hex.EncodeToString(b) != goldenW {
		t.Fatalf("summary without a newest slice written as %x (%v), want version 1's %s", b, err, goldenW)
	}
	ds, err := ruleSliceSerializer{}.Decode(gs)
	if err != nil || !reflect.DeepEqual(ds, s) {
		t.Fatalf("version 1 slice decoded as %+v (%v), want %+v", ds, err, s)
	}
	if b, _ := (ruleSliceSerializer{}).Append(nil, s); hex.EncodeToString(b) != goldenS {
		t.Fatalf("slice written as %x, want %s", b, goldenS)
	}
	w.TailSlice = &ruleSlice{WindowMs: 1000, N: 1, In: [][]byte{[]byte("0.5")}, Prev: 20, HasPrev: true, DPrev: 3, HasDPrev: true, InDeque: true}
	b, err := ruleWindowSerializer{}.Append(nil, w)
	if err != nil || b[0] != ruleStateV2 {
		t.Fatalf("summary with its newest slice: %x (%v), want format version %d", b, err, ruleStateV2)
	}
	back, err := ruleWindowSerializer{}.Decode(b)
	if err != nil || !sameWindow(back, w) || back.TailSlice == nil || !reflect.DeepEqual(*back.TailSlice, *w.TailSlice) {
		t.Fatalf("version 2 round trip: %+v (%v), want %+v", back, err, w)
	}
}

// sameWindow compares two summaries but for FSum's pointer and the slices
// they hold (TailSlice, Older).
func sameWindow(a, b ruleWindow) bool {
	if (a.FSum == nil) != (b.FSum == nil) || (a.FSum != nil && a.FSum.Cmp(b.FSum) != 0) {
		return false
	}
	a.FSum, b.FSum, a.TailSlice, b.TailSlice, a.Older, b.Older = nil, nil, nil, nil, nil, nil
	return reflect.DeepEqual(a, b)
}

// TestRulesRestoresFirstSlicedLayout: a checkpoint in the first sliced
// layout (newest slices in RulesSliceState, version 1 summaries) restores:
// a key's next copy aggregates over its restored slices and moves its
// newest slice into the summary (the map then holds the older ones only), a
// key not touched again keeps its version 1 state and still expires by the
// watermark, leaving nothing.
func TestRulesRestoresFirstSlicedLayout(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 1, RuleTimeProcessing, nil, nil)
			r := modelRule{id: "s", fn: "sum", of: "amount", window: 1000, grouped: true}
			g.rule(r.id, r.json(), 0)
			for i, ts := range []int64{10, 20, 30} {
				g.send(modelRec{id: i + 1, ts: ts, g: "g0", amount: "2"})
				g.send(modelRec{id: i + 11, ts: ts, g: "g1", amount: "3"})
			}
			toV1Layout(t, g)
			if got := mapSlices(t, g); got[`["s","g0"]`] != 3 || got[`["s","g1"]`] != 3 {
				t.Fatalf("slices in the map in the first layout: %v, want 3 per key", got)
			}
			routerState, err := g.router.SnapshotBroadcastState()
			if err != nil {
				t.Fatal(err)
			}
			h := newRulesRig(t, kind, 1, RuleTimeProcessing, snapshotRules(t, g, 1), routerState)
			h.send(modelRec{id: 21, ts: 40, g: "g0", amount: "5"})
			h.send(modelRec{id: 22, ts: 25, g: "g1", amount: "1"}) // out of order, before the newest
			want := []string{`s {"g":"g0"} 11 -960..40 tx21`, `s {"g":"g1"} 7 -975..25 tx22`}
			if got := h.alerts(); !slices.Equal(got, want) {
				t.Fatalf("alerts after the restore %v, want %v", got, want)
			}
			// The slices each copy read move into the summary (a key of at
			// most maxInlineSlices slices keeps them there): g0's copy read
			// its newest (30); g1's out-of-order copy read all three (the
			// walk to its place, then its window's slices).
			if got, want := mapSlices(t, h), map[string]int{`["s","g0"]`: 2}; !maps.Equal(got, want) {
				t.Fatalf("slices in the map after one copy per key: %v, want %v (those read in the summary)", got, want)
			}
			if got, want := h.entries(), map[string]int{"s": 8}; !maps.Equal(got, want) {
				t.Fatalf("slices %v, want %v", got, want)
			}
			h.watermark(1_031) // ends 1010..1030 passed: g0 keeps 40, g1 nothing
			if got, want := h.entries(), map[string]int{"s": 1}; !maps.Equal(got, want) {
				t.Fatalf("slices after watermark 1031: %v, want %v", got, want)
			}
			h.watermark(1_041)
			if got := h.entries(); len(got) != 0 {
				t.Fatalf("slices after watermark 1041: %v, want none", got)
			}
			if got := mapSlices(t, h); len(got) != 0 {
				t.Fatalf("map entries left: %v", got)
			}
		})
	}
}

// storedSlices counts the slices outside the summaries per routing key:
// the entries of RulesSliceState and the slices of RulesPageState's pages.
func storedSlices(t *testing.T, g *rulesRig) map[string]int {
	t.Helper()
	n := mapSlices(t, g)
	for _, op := range g.evals {
		err := state.ApplyToAllKeys(op.backend, RulesPageState, func(key []byte, s state.MapState[int64, rulePage]) error {
			for e, err := range s.Entries() {
				if err != nil {
					return err
				}
				n[string(key)] += len(e.Value.Slices)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// mapSlices counts the entries of RulesSliceState per routing key.
func mapSlices(t *testing.T, g *rulesRig) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, op := range g.evals {
		err := state.ApplyToAllKeys(op.backend, RulesSliceState, func(key []byte, s state.MapState[int64, ruleSlice]) error {
			for _, err := range s.Entries() {
				if err != nil {
					return err
				}
				n[string(key)]++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return n
}
