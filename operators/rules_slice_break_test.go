package operators

import (
	"fmt"
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
