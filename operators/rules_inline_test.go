package operators

import (
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// distinctEntries counts RulesDistinctState's entries per group value of
// rule id "d" over g's subtasks.
func distinctEntries(t *testing.T, g *rulesRig) int {
	t.Helper()
	n := 0
	for _, op := range g.evals {
		err := state.ApplyToAllKeys(op.backend, RulesDistinctState, func(_ []byte, s state.MapState[string, int64]) error {
			for _, err := range s.Entries() {
				if err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// TestRulesDistinctInline: a count_distinct key with few distinct inputs
// keeps their counts in its summary (format version 3) and writes nothing
// to RulesDistinctState; one whose inputs outgrow maxInlineDistinct moves
// them into the map; expiry takes counts out of both; the alerts are the
// brute-force model's throughout; on both backends.
func TestRulesDistinctInline(t *testing.T) {
	rules := []modelRule{{id: "d", fn: "count_distinct", of: "tag", window: 50, grouped: true}}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 1, RuleTimeProcessing, nil, nil)
			g.rule("d", rules[0].json(), 0)
			model := &bruteWindows{rules: rules, held: map[string][]modelRec{}}
			var want []string
			id := 0
			send := func(ts int64, grp string, tags int) {
				for i := range tags {
					x := modelRec{id: id, ts: ts, g: grp, tag: fmt.Sprintf("t%d", i%5+5*(i/5)), amount: "1", value: 1}
					id++
					want = append(want, model.record(x)...)
					c := &sliceCollector{}
					if err := g.router.ProcessElement(g.ctx, runtime.Record{Value: x.json(), Format: runtime.FormatJSON, Timestamp: time.UnixMilli(ts)}, c); err != nil {
						t.Fatal(err)
					}
					g.evaluate(c.recs)
					ts++
				}
			}
			send(1000, "few", 4)
			send(1000, "few", 4) // the same 4 inputs again
			if n := distinctEntries(t, g); n != 0 {
				t.Fatalf("%d entries in RulesDistinctState for 4 distinct inputs, want 0 (inline)", n)
			}
			send(1000, "many", maxInlineDistinct+3)
			if n := distinctEntries(t, g); n != maxInlineDistinct+3 {
				t.Fatalf("%d entries in RulesDistinctState, want the %d inputs of the group that outgrew the summary", n, maxInlineDistinct+3)
			}
			g.watermark(10_000)
			model.watermark(10_000)
			if n := distinctEntries(t, g); n != 0 {
				t.Fatalf("%d entries in RulesDistinctState after every slice expired, want 0", n)
			}
			send(20_000, "many", 3) // starts inline again
			if n := distinctEntries(t, g); n != 0 {
				t.Fatalf("%d entries in RulesDistinctState after the key started afresh, want 0", n)
			}
			got := g.alerts()
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("%d alerts, want %d; %s", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

// clearCounting counts the Clear calls of a MapState.
type clearCounting struct {
	state.MapState[string, int64]
	clears int
}

func (c *clearCounting) Clear() error {
	c.clears++
	return c.MapState.Clear()
}

// TestRulesExpiryClearsNoEmptyDistinctMap: when a key's last slice
// expires, RulesDistinctState is cleared only for a count_distinct key
// whose counts are in it (clearing a map on Pebble empties the whole write
// cache): not for a sum, count or max key, nor an inline count_distinct
// one.
func TestRulesExpiryClearsNoEmptyDistinctMap(t *testing.T) {
	g := newRulesRig(t, state.KindPebble, 1, RuleTimeProcessing, nil, nil)
	for _, r := range []modelRule{
		{id: "s", fn: "sum", of: "amount", window: 5, grouped: true},
		{id: "c", fn: "count", window: 5, grouped: true},
		{id: "m", fn: "max", of: "amount", window: 5, grouped: true},
		{id: "d", fn: "count_distinct", of: "tag", window: 5, grouped: true},
	} {
		g.rule(r.id, r.json(), 0)
	}
	cc := &clearCounting{MapState: g.fns[0].win.distinct}
	g.fns[0].win.distinct = cc
	for i := range 40 {
		x := modelRec{id: i, ts: int64(1000 + i), g: fmt.Sprintf("g%d", i%8), tag: fmt.Sprintf("t%d", i%3), amount: "2"}
		c := &sliceCollector{}
		if err := g.router.ProcessElement(g.ctx, runtime.Record{Value: x.json(), Format: runtime.FormatJSON, Timestamp: time.UnixMilli(x.ts)}, c); err != nil {
			t.Fatal(err)
		}
		g.evaluate(c.recs)
	}
	g.watermark(5000)
	if n := g.entries(); len(n) != 0 {
		t.Fatalf("slices left after the watermark: %v", n)
	}
	if cc.clears != 0 {
		t.Fatalf("RulesDistinctState cleared %d times as 32 keys' last slices expired, want 0 (none held counts there)", cc.clears)
	}
}

// TestRuleWindowFormatV3: a summary with inline distinct counts is written
// as format version 3 (with and without a newest slice) and reads back.
func TestRuleWindowFormatV3(t *testing.T) {
	w := ruleWindow{Shape: `["count_distinct","tag",["g"]]`, Fn: AggCountDistinct, WindowMs: 1000, Slices: 3, Head: 10, Tail: 30, First: 10, N: 4,
		Distinct: 2, DInline: true, DVals: []distinctVal{{V: `"a"`, N: 3}, {V: `"b"`, N: 1}}}
	const golden = "031e5b22636f756e745f64697374696e6374222c22746167222c5b2267225d5d0e636f756e745f64697374696e6374d00f06143c14080004000000000000000203226122060322622202"
	b, err := ruleWindowSerializer{}.Append(nil, w)
	if err != nil || hex.EncodeToString(b) != golden {
		t.Fatalf("inline summary written as %x (%v), want %s", b, err, golden)
	}
	for _, tail := range []*ruleSlice{nil, {WindowMs: 1000, N: 1, In: [][]byte{[]byte(`"a"`)}, Prev: 20, HasPrev: true}} {
		w.TailSlice = tail
		b, err := ruleWindowSerializer{}.Append(nil, w)
		if err != nil || b[0] != ruleStateV3 {
			t.Fatalf("inline summary: %x (%v), want format version %d", b, err, ruleStateV3)
		}
		back, err := ruleWindowSerializer{}.Decode(b)
		if err != nil || !sameWindow(back, w) || !back.DInline || !reflect.DeepEqual(back.DVals, w.DVals) || (tail != nil) != (back.TailSlice != nil) ||
			(tail != nil && !reflect.DeepEqual(*back.TailSlice, *tail)) {
			t.Fatalf("version 3 round trip: %+v (%v), want %+v", back, err, w)
		}
		if _, err := (ruleWindowSerializer{}).Decode(b[:len(b)-1]); err == nil {
			t.Fatalf("a truncated version 3 summary decoded")
		}
	}
}
