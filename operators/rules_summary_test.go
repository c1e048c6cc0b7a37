package operators

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// TestRulesSummaryHoldsFewSlices: a key of at most maxInlineSlices slices
// keeps them all in its summary (format version 4), so its copies write
// no RulesSliceState entry (on 706ff2d the map held every slice but the
// newest); the key's next slice beyond the bound moves them out as one
// page of RulesPageState (the summary keeps the newest, as in version 2;
// before session 46 they went to the map one entry each); slices the watermark
// expires while in the summary leave nothing; the alerts are the sums of
// the window's records throughout, also after a restore at another
// parallelism; slices too big for maxInlineSliceBytes stay in the map.
func TestRulesSummaryHoldsFewSlices(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 1, RuleTimeProcessing, nil, nil)
			r := modelRule{id: "s", fn: "sum", of: "amount", window: 1000, grouped: true}
			g.rule(r.id, r.json(), 0)
			var want []string
			sum := 0
			for i := range maxInlineSlices {
				ts := int64(10 * (i + 1))
				g.send(modelRec{id: i + 1, ts: ts, g: "g0", amount: "2"})
				sum += 2
				want = append(want, fmt.Sprintf(`s {"g":"g0"} %d %d..%d tx%d`, sum, ts-1000, ts, i+1))
			}
			if got := g.alerts(); !slices.Equal(got, sorted(want)) {
				t.Fatalf("alerts %v, want %v", got, sorted(want))
			}
			if got := mapSlices(t, g); len(got) != 0 {
				t.Fatalf("slice entries of a key with %d slices: %v, want none", maxInlineSlices, got)
			}
			if got, want := g.entries(), map[string]int{"s": maxInlineSlices}; !maps.Equal(got, want) {
				t.Fatalf("slices %v, want %v", got, want)
			}
			// One more: the summary keeps the newest only.
			g.send(modelRec{id: 9, ts: 90, g: "g0", amount: "3"})
			if got, want := g.alerts(), []string{`s {"g":"g0"} 19 -910..90 tx9`}; !slices.Equal(got, want) {
				t.Fatalf("alerts %v, want %v", got, want)
			}
			if got, want := storedSlices(t, g), map[string]int{`["s","g0"]`: maxInlineSlices}; !maps.Equal(got, want) {
				t.Fatalf("slices outside the summary %v, want %v", got, want)
			}
			if p, n := pageEntries(t, g); p != 1 || n != maxInlineSlices {
				t.Fatalf("%d pages of %d slices, want the %d slices moved out in one page", p, n, maxInlineSlices)
			}
			// Ends 1010 and 1020 pass: 7 slices left, those the timer read
			// (30, whose link changed) back in the summary.
			g.watermark(1_021)
			if got, want := g.entries(), map[string]int{"s": 7}; !maps.Equal(got, want) {
				t.Fatalf("slices after watermark 1021: %v, want %v", got, want)
			}
			if got, want := storedSlices(t, g), map[string]int{`["s","g0"]`: 5}; !maps.Equal(got, want) {
				t.Fatalf("slices outside the summary after watermark 1021: %v, want %v", got, want)
			}
			h := newRulesRig(t, kind, 2, RuleTimeProcessing, snapshotRules(t, g, 2), nil)
			h.rule(r.id, r.json(), 0)
			h.send(modelRec{id: 10, ts: 1_035, g: "g0", amount: "4"}) // window 35..1035: 40..90 and itself
			h.send(modelRec{id: 11, ts: 60, g: "g0", amount: "1"})    // out of order, into slice 60: -940..60 holds 30..60
			if got, want := h.alerts(), []string{`s {"g":"g0"} 17 35..1035 tx10`, `s {"g":"g0"} 9 -940..60 tx11`}; !slices.Equal(got, want) {
				t.Fatalf("alerts after the restore %v, want %v", got, want)
			}
			if got, want := h.entries(), map[string]int{"s": 8}; !maps.Equal(got, want) {
				t.Fatalf("slices after the restore %v, want %v", got, want)
			}
			h.watermark(3_000)
			if got := h.entries(); len(got) != 0 {
				t.Fatalf("slices after watermark 3000: %v, want none", got)
			}
			if got := storedSlices(t, h); len(got) != 0 {
				t.Fatalf("slices outside the summary after watermark 3000: %v, want none", got)
			}

			// Big inputs: the newest slice alone fills the bytes bound.
			d := modelRule{id: "d", fn: "count_distinct", of: "tag", window: 1000, grouped: true}
			g.rule(d.id, d.json(), 0)
			g.alerts()
			for i := range 3 {
				g.send(modelRec{id: 20 + i, ts: int64(5_000 + i), g: "g1", tag: strings.Repeat(string(rune('a'+i)), maxInlineSliceBytes/2), amount: "1"})
			}
			if got, want := mapSlices(t, g)[`["d","g1"]`], 2; got != want {
				t.Fatalf("slice entries of big slices %d, want %d", got, want)
			}
			alerts := g.alerts()
			if len(alerts) != 6 || !strings.HasPrefix(alerts[2], `d {"g":"g1"} 3 `) {
				t.Fatalf("alerts of big slices %v", alerts)
			}
		})
	}
}

// sorted returns a sorted copy of s.
func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestRulesRecordJSONInAlert: the alert's "record" is the record's JSON
// as it came when it is valid JSON (checked by the routing stage's field
// reads or by json.Valid), and a JSON string of its bytes when it is not.
func TestRulesRecordJSONInAlert(t *testing.T) {
	g := newRulesRig(t, state.KindHashmap, 1, RuleTimeProcessing, nil, nil)
	g.rule("c", `{"id":"c","aggregate":{"fn":"count"},"window":"1s","alert_when":"> 0"}`, 0)
	g.rule("f", `{"id":"f","filter":"amount > 1","aggregate":{"fn":"count"},"window":"1s","alert_when":"> 0"}`, 0)
	for i, v := range []string{`{"amount": 2, "x": [1, {"y": null}]}`, `{"amount": 2,`} {
		c := &sliceCollector{}
		if err := g.router.ProcessElement(g.ctx, runtime.Record{Value: []byte(v), Format: runtime.FormatJSON, Timestamp: time.UnixMilli(int64(10 + i))}, c); err != nil {
			t.Fatal(err)
		}
		g.evaluate(c.recs)
		var got []string
		for _, ch := range g.outs {
			for len(ch) > 0 {
				if el := <-ch; el.Kind == runtime.KindRecord {
					var a struct{ Rule, Record json.RawMessage }
					if err := json.Unmarshal(el.Record.Value, &a); err != nil {
						t.Fatalf("alert %s: %v", el.Record.Value, err)
					}
					got = append(got, string(a.Rule)+" "+string(a.Record))
				}
			}
		}
		slices.Sort(got)
		want := []string{`"c" ` + v, `"f" ` + v}
		if i == 1 {
			want = []string{`"c" "{\"amount\": 2,"`} // not JSON: no field to filter on
		}
		if !slices.Equal(got, want) {
			t.Fatalf("record %d: alerts %q, want %q", i, got, want)
		}
	}
}
