package operators

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// rawAlerts drains g's alerts as their bytes, sorted.
func rawAlerts(g *rulesRig) []string {
	var out []string
	for _, ch := range g.outs {
		for len(ch) > 0 {
			if el := <-ch; el.Kind == runtime.KindRecord {
				out = append(out, string(el.Record.Value))
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestRulesFoldedSlicesAcrossRuleUpdates: updates of a rule whose key
// holds folded slices (ruleSlice.fold): a new fn (another shape) drops
// them, a longer window over the same shape rebuilds the running
// aggregate from the folded slices (sums, avg's count, max's extreme,
// count_distinct's once-per-slice counts), and a new alert_when or emit
// changes the alert's bytes (the envelope head's cached alert parts);
// every alert's bytes are exact, before and after a restore.
func TestRulesFoldedSlicesAcrossRuleUpdates(t *testing.T) {
	rule := func(fn, of, window, when, emit string) string {
		s := fmt.Sprintf(`{"id":"r","aggregate":{"fn":%q,"of":%q},"group_by":["g"],"window":%q,"slice":"1s","alert_when":%q`, fn, of, window, when)
		if emit != "" {
			s += `,"emit":` + emit
		}
		return s + "}"
	}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 1, RuleTimeProcessing, nil, nil)
			id := 0
			send := func(ts int64, amount, tag string) string {
				t.Helper()
				x := modelRec{id: id, ts: ts, g: "g", tag: tag, amount: amount}
				id++
				g.send(x)
				return string(x.json())
			}
			alert := func(fn, value, when string, start, end int64, rec, emit string) string {
				s := fmt.Sprintf(`{"rule":"r","group":{"g":"g"},"aggregate":%q,"value":%s,"alert_when":%q,"window_start":%d,"window_end":%d,"record":%s`,
					fn, value, when, start, end, rec)
				if emit != "" {
					s += `,"emit":` + emit
				}
				return s + "}"
			}
			check := func(step string, want ...string) {
				t.Helper()
				slices.Sort(want)
				if got := rawAlerts(g); !slices.Equal(got, want) {
					t.Fatalf("%s: alerts\n%s\nwant\n%s", step, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
			g.rule("r", rule("sum", "amount", "2s", "> 0", `{"to":"a"}`), 0)
			var want []string
			var running int
			for i, a := range []int{5, 7, 5, 9223372036854775, 3} {
				running += a
				rec := send(10_000+int64(i)*100, fmt.Sprint(a), "t")
				want = append(want, alert("sum", fmt.Sprint(running), "> 0", 9000, 10_999, rec, `{"to":"a"}`))
			}
			rec := send(11_000, "4", "t") // pane 11 s: panes 10 s and 11 s
			want = append(want, alert("sum", fmt.Sprint(running+4), "> 0", 10_000, 11_999, rec, `{"to":"a"}`))
			check("sum", want...)

			// alert_when and emit only: same shape, the head's parts change.
			g.rule("r", rule("sum", "amount", "2s", ">= 1", `{"to":"b"}`), 0)
			rec = send(11_500, "-2", "t")
			check("alert_when, emit", alert("sum", fmt.Sprint(running+2), ">= 1", 10_000, 11_999, rec, `{"to":"b"}`))

			// A longer window over the same shape: rebuilt from the folded slices.
			g.rule("r", rule("sum", "amount", "4s", ">= 1", ""), 0)
			rec = send(12_100, "1", "t")
			check("window 4s", alert("sum", fmt.Sprint(running+3), ">= 1", 9_000, 12_999, rec, ""))

			// Restored at parallelism 2, then late into the oldest pane.
			routerState, err := g.router.SnapshotBroadcastState()
			if err != nil {
				t.Fatal(err)
			}
			g = newRulesRig(t, kind, 2, RuleTimeProcessing, snapshotRules(t, g, 2), routerState)
			rec = send(10_050, "10", "t") // pane 10 s: [7 s, 11 s): panes 10 s only
			check("restored, late", alert("sum", fmt.Sprint(running+10), ">= 1", 7_000, 10_999, rec, ""))

			// Another fn: another shape, the folded sums go.
			g.rule("r", rule("max", "amount", "4s", "> -100", ""), 0)
			rec = send(12_200, "-7", "t")
			check("max", alert("max", "-7", "> -100", 9_000, 12_999, rec, ""))
			for i, a := range []string{"-9", "-7", "2.5", "2.5", "-1"} {
				send(12_300+int64(i), a, "t")
			}
			rawAlerts(g)
			rec = send(12_400, "1", "t")
			check("max of folded", alert("max", "2.5", "> -100", 9_000, 12_999, rec, ""))

			// count_distinct over the same field name: another shape again.
			g.rule("r", rule("count_distinct", "tag", "4s", "> 0", ""), 0)
			for i, tag := range []string{"a", "b", "a", "a", "c", "b"} {
				send(13_000+int64(i), "1", tag)
			}
			rawAlerts(g)
			g.rule("r", rule("count_distinct", "tag", "2s", "> 0", ""), 0) // shorter: rebuilt
			rec = send(14_000, "1", "a")
			check("count_distinct 2s", alert("count_distinct", "3", "> 0", 13_000, 14_999, rec, ""))
			g.watermark(15_000) // pane 13 s (its windows end by 14,999) expires
			rec = send(15_000, "1", "d")
			check("count_distinct next pane", alert("count_distinct", "2", "> 0", 14_000, 15_999, rec, ""))
		})
	}
}
