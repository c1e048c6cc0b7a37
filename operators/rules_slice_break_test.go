package operators

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestRulesSlice1msIsTheSlidingWindow: a rule with "slice":"1ms" gives
// exactly the alerts of the same rule without a slice (the sliding
// window [ts - window, ts], window_start and window_end included), for
// every aggregate, over records out of time order with late ones and
// watermarks; and both match an own brute force over that window. Before
// the fix a 1 ms pane's window was [ts - window + 1, ts]: a record at
// exactly ts - window was left out and window_start was one ms later.
func TestRulesSlice1msIsTheSlidingWindow(t *testing.T) {
	fns := []struct{ fn, of string }{{"count", ""}, {"sum", "amount"}, {"min", "amount"}, {"max", "amount"}, {"avg", "amount"}, {"count_distinct", "tag"}}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 2, RuleTimeProcessing, nil, nil)
			for _, f := range fns {
				agg := fmt.Sprintf(`{"fn":%q}`, f.fn)
				if f.of != "" {
					agg = fmt.Sprintf(`{"fn":%q,"of":%q}`, f.fn, f.of)
				}
				g.rule("x"+f.fn, fmt.Sprintf(`{"id":"x%s","aggregate":%s,"group_by":["g"],"window":"10ms","alert_when":"> -1e18"}`, f.fn, agg), 0)
				g.rule("m"+f.fn, fmt.Sprintf(`{"id":"m%s","aggregate":%s,"group_by":["g"],"window":"10ms","slice":"1ms","alert_when":"> -1e18"}`, f.fn, agg), 0)
			}
			rng := rand.New(rand.NewPCG(7, 43))
			type held struct {
				ts  int64
				g   string
				tag string
				v   int
			}
			var seen []held
			var want []string
			inexact := map[string]bool{}
			ts, wm := int64(1000), int64(0)
			for i := range 400 {
				ts += rng.Int64N(3)
				at := ts - rng.Int64N(14) // out of order, some behind the watermark
				x := modelRec{id: i, ts: at, g: fmt.Sprintf("g%d", rng.IntN(2)), tag: fmt.Sprintf("t%d", rng.IntN(3)), amount: fmt.Sprint(rng.IntN(20) - 5)}
				v := 0
				fmt.Sscan(x.amount, &v)
				seen = append(seen, held{at, x.g, x.tag, v})
				// Own brute force: every record of the group seen so far
				// (and not expired by a watermark) with a time in
				// [at - 10, at].
				var in []held
				for _, h := range seen {
					if h.g == x.g && h.ts >= at-10 && h.ts <= at {
						in = append(in, h)
					}
				}
				sum, mn, mx, tags := 0, in[0].v, in[0].v, map[string]bool{}
				for _, h := range in {
					sum += h.v
					mn, mx = min(mn, h.v), max(mx, h.v)
					tags[h.tag] = true
				}
				avg := fmt.Sprint(sum / len(in))
				for _, f := range []struct{ fn, v string }{{"count", fmt.Sprint(len(in))}, {"sum", fmt.Sprint(sum)}, {"min", fmt.Sprint(mn)},
					{"max", fmt.Sprint(mx)}, {"avg", avg}, {"count_distinct", fmt.Sprint(len(tags))}} {
					if f.fn == "avg" && sum%len(in) != 0 {
						inexact[fmt.Sprintf(" tx%d", i)] = true // compared between the two rules only
						continue
					}
					want = append(want, fmt.Sprintf(`%s {"g":%q} %s %d..%d tx%d`, f.fn, x.g, f.v, at-10, at, i))
				}
				g.send(x)
				if i%25 == 24 {
					wm = ts - 5
					g.watermark(wm)
					seen = slices.DeleteFunc(seen, func(h held) bool { return h.ts+10 < wm })
				}
			}
			var exact, ms, own []string
			for _, a := range g.alerts() {
				switch a[0] {
				case 'x':
					exact = append(exact, a[1:])
					if !strings.HasPrefix(a, "xavg") || !inexact[a[strings.LastIndexByte(a, ' '):]] {
						own = append(own, a[1:])
					}
				case 'm':
					ms = append(ms, a[1:])
				}
			}
			slices.Sort(exact)
			slices.Sort(ms)
			slices.Sort(want)
			slices.Sort(own)
			if len(exact) != 6*400 {
				t.Fatalf("%d alerts of the sliding rules, want %d", len(exact), 6*400)
			}
			if !slices.Equal(own, want) {
				t.Fatalf("sliding rules against the brute force: %s", firstDiff(own, want))
			}
			if !slices.Equal(ms, exact) {
				t.Fatalf("slice 1ms against no slice: %s", firstDiff(ms, exact))
			}
		})
	}
}

// TestRulesSliceRestoreUpdateDelete: a hopping rule and a tumbling one
// (slice = window) keep their panes across a restore mid-pane at another
// parallelism (a late record of the restored pane joins its pane's
// records), a pane the watermark expired is gone for a late record of it,
// removing the slice of a live key starts its groups afresh (no pane
// counted in the sliding window, no slice left), and a rule deleted and
// added again starts from nothing.
func TestRulesSliceRestoreUpdateDelete(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 2, RuleTimeProcessing, nil, nil)
			hop := `{"id":"h","aggregate":{"fn":"sum","of":"amount"},"window":"3s","slice":"1s","alert_when":"> 0"}`
			g.rule("h", hop, 0)
			g.rule("t", `{"id":"t","aggregate":{"fn":"count"},"window":"2s","slice":"2s","alert_when":"> 0"}`, 0)
			check := func(step string, want ...string) {
				t.Helper()
				slices.Sort(want)
				if got := g.alerts(); !slices.Equal(got, want) {
					t.Fatalf("%s: alerts\n%s\nwant\n%s", step, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
			send := func(id int, ts int64, amount string) {
				g.send(modelRec{id: id, ts: ts, g: "g", tag: "t", amount: amount})
			}
			send(0, 10_100, "1")
			send(1, 10_900, "2")
			send(2, 11_500, "4")
			check("before the restore",
				`h {} 1 8000..10999 tx0`, `h {} 3 8000..10999 tx1`, `h {} 7 9000..11999 tx2`,
				`t {} 1 10000..11999 tx0`, `t {} 2 10000..11999 tx1`, `t {} 3 10000..11999 tx2`)
			routerState, err := g.router.SnapshotBroadcastState()
			if err != nil {
				t.Fatal(err)
			}
			g = newRulesRig(t, kind, 3, RuleTimeProcessing, snapshotRules(t, g, 3), routerState)
			checkKeyHints(t, g)
			send(3, 11_200, "8")
			send(4, 10_050, "16") // pane 10 s again, out of order
			check("after the restore",
				`h {} 15 9000..11999 tx3`, `h {} 19 8000..10999 tx4`,
				`t {} 4 10000..11999 tx3`, `t {} 5 10000..11999 tx4`)
			if got, want := g.entries(), map[string]int{"h": 2, "t": 1}; !maps.Equal(got, want) {
				t.Fatalf("slices %v, want %v", got, want)
			}
			g.watermark(12_500) // pane 10 s leaves both (10 s + 2 s and 10 s + 0 s are behind; entries lists no zeros)
			if got, want := g.entries(), map[string]int{"h": 1}; !maps.Equal(got, want) {
				t.Fatalf("slices after watermark 12,500: %v, want %v", got, want)
			}
			send(5, 10_200, "32") // late: its pane's earlier records are gone
			check("a late record of an expired pane", `h {} 32 8000..10999 tx5`, `t {} 1 10000..11999 tx5`)
			g.watermark(12_501) // the late record's pane leaves again
			// The slice removed: h's groups start afresh.
			g.rule("h", `{"id":"h","aggregate":{"fn":"sum","of":"amount"},"window":"3s","alert_when":"> 0"}`, 0)
			if got := g.entries(); len(got) != 0 {
				t.Fatalf("slices after h lost its slice: %v, want none", got)
			}
			send(6, 12_600, "64")
			check("without the slice", `h {} 64 9600..12600 tx6`, `t {} 1 12000..13999 tx6`)
			// Deleted and added again (with the slice): nothing kept.
			g.rule("h", "", 0)
			if got := g.entries()["h"]; got != 0 {
				t.Fatalf("h deleted: %d slices", got)
			}
			g.rule("h", hop, 0)
			send(7, 12_700, "128")
			check("added again", `h {} 128 10000..12999 tx7`, `t {} 2 12000..13999 tx7`)
			if got, want := g.entries(), map[string]int{"h": 1, "t": 1}; !maps.Equal(got, want) {
				t.Fatalf("slices at the end %v, want %v", got, want)
			}
		})
	}
}

// TestRulesSliceMustDivideTheWindowItself: a window of a fraction of a
// millisecond ("2500us" is allowed, at least 1 ms) is not divided by a
// slice that divides its whole milliseconds only; before the fix "2ms"
// passed for it (2 ms of 2.5 ms) and the rule became a 2 ms tumbling
// window. "1ms" is a 1 ms pane, not a slice of 1.5 ms either.
func TestRulesSliceMustDivideTheWindowItself(t *testing.T) {
	for _, tc := range []struct{ window, slice, err string }{
		{"2500us", "2ms", "slice: must divide the window (2.5ms), got 2ms"},
		{"2500us", "1ms", "slice: must divide the window (2.5ms), got 1ms"},
		{"1500us", "1ms", "slice: must divide the window (1.5ms), got 1ms"},
		{"2ms", "1ms", ""},
		{"4ms", "2ms", ""},
	} {
		_, err := CompileRule(RuleSpec{ID: "r", Aggregate: RuleAggregate{Fn: "count"}, Window: tc.window, Slice: tc.slice, AlertWhen: "> 1"})
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.HasSuffix(err.Error(), tc.err)) {
			t.Errorf("window %s slice %s: error %v, want %q", tc.window, tc.slice, err, tc.err)
		}
	}
}
