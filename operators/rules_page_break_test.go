package operators

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// TestRulesPagesEveryStepRandomModel attacks RulesPageState (session 46's
// pages): one or two keys per rule (so each key passes maxInlineSlices
// again and again and spills pages often), windows from 1 ms to 744 h,
// sliding and hopping, records 0-2 ms apart and a third of them late (a few
// ms, seconds, or behind the watermark), watermarks expiring page slices,
// a rule deleted and re-added, another whose shape changes, and a
// restore every 90 records cycling the parallelism 1 -> 2 -> 3 -> 1. After
// every record and watermark each slice must be in exactly one place
// (inlineStatsPaged) and the alerts must be exactly the brute-force
// model's, on both backends.
func TestRulesPagesEveryStepRandomModel(t *testing.T) {
	fns := []string{"count", "sum", "min", "max", "avg", "count_distinct"}
	windows := []int64{1, 3, 12, 40, 250, 90_000, 744 * 3_600_000}
	for seed := uint64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewPCG(seed, 46))
		var rules []modelRule
		for i := range 7 {
			r := modelRule{id: fmt.Sprintf("r%d", i), fn: fns[(i+int(seed))%len(fns)], window: windows[rng.IntN(len(windows))],
				grouped: rng.IntN(2) == 0, filtered: rng.IntN(4) == 0}
			if i == 6 {
				r.window, r.slice = 60, 6 // hopping: panes of 6 ms
			}
			switch r.fn {
			case "count":
			case "count_distinct":
				r.of = "tag"
			default:
				r.of = "amount"
			}
			rules = append(rules, r)
		}
		recs := make([]modelRec, 540)
		ts := int64(1_700_000_000_000)
		for i := range recs {
			ts += rng.Int64N(3)
			at := ts
			switch p := rng.IntN(100); {
			case p < 25:
				at -= rng.Int64N(30)
			case p < 30:
				at -= rng.Int64N(3000)
			}
			var amount string
			if rng.IntN(3) == 0 {
				amount = fmt.Sprintf("%d.%02d", rng.IntN(1000)-300, 1+rng.IntN(99))
			} else {
				amount = strconv.Itoa(rng.IntN(2000) - 500)
			}
			v, err := strconv.ParseFloat(amount, 64)
			if err != nil {
				t.Fatal(err)
			}
			tag := fmt.Sprintf("t%d", rng.IntN(8))
			if rng.IntN(4) == 0 {
				tag = fmt.Sprintf("tag-%040d", rng.IntN(30)) // big slices: the summary's byte bound spills too
			}
			recs[i] = modelRec{id: i, ts: at, g: fmt.Sprintf("g%d", rng.IntN(2)), tag: tag, amount: amount,
				isFloat: slices.Contains([]byte(amount), '.'), value: v}
		}
		for _, kind := range backends {
			t.Run(fmt.Sprintf("seed%d/%s", seed, kind), func(t *testing.T) {
				model := &bruteWindows{rules: slices.Clone(rules), held: map[string][]modelRec{}}
				var want, got []string
				p := 1
				g := newRulesRig(t, kind, p, RuleTimeProcessing, nil, nil)
				for _, r := range rules {
					g.rule(r.id, r.json(), 0)
				}
				setRule := func(r modelRule, at int64) {
					g.rule(r.id, r.json(), at)
					model.rules = slices.Clone(model.rules)
					for j := range model.rules {
						if model.rules[j].id == r.id {
							model.rules[j] = r
						}
					}
				}
				maxTS, wm := int64(0), int64(0)
				pagedKeys := 0
				for i, x := range recs {
					if i > 0 && i%90 == 0 {
						got = append(got, g.alerts()...)
						routerState, err := g.router.SnapshotBroadcastState()
						if err != nil {
							t.Fatal(err)
						}
						p = p%3 + 1 // 1 -> 2 -> 3 -> 1 ...
						offset := g.offset
						g = newRulesRig(t, kind, p, RuleTimeProcessing, snapshotRules(t, g, p), routerState)
						g.offset = offset
						checkKeyHints(t, g)
					}
					switch i {
					case 250:
						g.rule("r0", "", x.ts)
						model.rules = slices.DeleteFunc(slices.Clone(model.rules), func(r modelRule) bool { return r.id == "r0" })
						for k := range model.held {
							if strings.HasPrefix(k, "r0/") {
								delete(model.held, k)
							}
						}
					case 300:
						r := rules[1]
						if r.fn == "count_distinct" {
							r.fn, r.of = "sum", "amount"
						} else {
							r.fn, r.of = "count_distinct", "tag"
						}
						setRule(r, x.ts)
						for k := range model.held {
							if strings.HasPrefix(k, "r1/") {
								delete(model.held, k)
							}
						}
					case 400:
						g.rule("r0", rules[0].json(), x.ts)
						model.rules = append(model.rules, rules[0])
					}
					want = append(want, model.record(x)...)
					c := &sliceCollector{}
					if err := g.router.ProcessElement(g.ctx, runtime.Record{Value: x.json(), Format: runtime.FormatJSON, Timestamp: time.UnixMilli(x.ts)}, c); err != nil {
						t.Fatal(err)
					}
					g.evaluate(c.recs)
					inlineStatsPaged(t, g, &pagedKeys)
					maxTS = max(maxTS, x.ts)
					if i%15 == 14 {
						wm = max(wm, maxTS-rng.Int64N(20))
						g.watermark(wm)
						model.watermark(wm)
						inlineStatsPaged(t, g, &pagedKeys)
					}
					if t.Failed() {
						t.Fatalf("after record %d", i)
					}
				}
				got = append(got, g.alerts()...)
				checkKeyHints(t, g)
				if pagedKeys < 100 {
					t.Errorf("keys with pages %d (summed over checks), want at least 100", pagedKeys)
				}
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("%d alerts, want %d; %s", len(got), len(want), firstDiff(got, want))
				}
			})
		}
	}
}

// TestRulesPageMissingOrCorruptFailsLoudly: a summary listing a page that
// is not stored (a checkpoint missing its RulesPageState entry), or a page
// whose slice bytes are corrupt, makes the copy that reads it (out of
// time order) and the timer that expires it fail with an error naming
// the page or the slice, never drop the slices silently; on both backends.
func TestRulesPageMissingOrCorruptFailsLoudly(t *testing.T) {
	rule := modelRule{id: "s", fn: "sum", of: "amount", window: 1000, grouped: true}
	for _, kind := range backends {
		for _, harm := range []string{"missing", "corrupt"} {
			t.Run(kind+"/"+harm, func(t *testing.T) {
				g := newRulesRig(t, kind, 1, RuleTimeProcessing, nil, nil)
				g.rule(rule.id, rule.json(), 0)
				send := func(id int, ts int64) error {
					x := modelRec{id: id, ts: ts, g: "g", amount: "5", value: 5}
					c := &sliceCollector{}
					if err := g.router.ProcessElement(g.ctx, runtime.Record{Value: x.json(), Format: runtime.FormatJSON, Timestamp: time.UnixMilli(ts)}, c); err != nil {
						t.Fatal(err)
					}
					if len(c.recs) != 1 {
						t.Fatalf("%d copies routed, want 1", len(c.recs))
					}
					return g.evals[0].ProcessRecord(g.ctx, 0, c.recs[0])
				}
				for i := range maxInlineSlices + 1 {
					if err := send(i, 10_000+int64(i)*10); err != nil {
						t.Fatal(err)
					}
				}
				if p, n := pageEntries(t, g); p != 1 || n != maxInlineSlices {
					t.Fatalf("%d pages holding %d slices, want 1 holding %d", p, n, maxInlineSlices)
				}
				op := g.evals[0]
				err := state.ApplyToAllKeys(op.backend, RulesPageState, func(_ []byte, s state.MapState[int64, rulePage]) error {
					if harm == "missing" {
						return s.Clear()
					}
					p, ok, err := s.Get(10_000)
					if err != nil || !ok {
						return fmt.Errorf("page 10000: %v %v", ok, err)
					}
					for i := range p.Slices {
						p.Slices[i] = inlineSlice{K: p.Slices[i].K, Raw: []byte{0x7f, 0xff, 0xff}}
					}
					return s.Put(10_000, p)
				})
				if err != nil {
					t.Fatal(err)
				}
				want := "page 10000 of the key missing"
				if harm == "corrupt" {
					want = "rules slice"
				}
				// Out of time order: the copy reads slice 10030 in the page.
				if err := send(100, 10_030); err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("copy out of order: error %v, want one containing %q", err, want)
				}
				// The timer of the oldest slice (in the page) fails too.
				if err := op.ProcessWatermark(g.ctx, time.UnixMilli(20_000)); err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("watermark: error %v, want one containing %q", err, want)
				}
			})
		}
	}
}
