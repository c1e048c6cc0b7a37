package operators

import (
	"fmt"
	"maps"
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
// a rule's window changed (same shape: the running aggregate rebuilt from
// slices in pages) and changed back, a rule deleted and re-added, another
// whose shape changes, and a restore every 90 records cycling the
// parallelism 1 -> 2 -> 3 -> 1. After every record and watermark each
// slice must be in exactly one place (inlineStatsPaged) and each record's
// alerts must be exactly the brute-force model's (with the keyed stage's
// expiry, slicedExpiry), on both backends with the same watermarks.
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
				expiry := &slicedExpiry{m: model, written: map[string]map[int64]int64{}}
				// The watermarks' own generator: both backends see the same
				// ones (drawn from rng they differed per backend).
				rng := rand.New(rand.NewPCG(seed, 47))
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
					case 200:
						// r2's window grows (same shape): its keys' running
						// aggregates are rebuilt from slices in pages; at
						// 330 it shrinks back, and slices written under
						// the longer window stay for it (slicedExpiry).
						r := rules[2]
						if r.window = r.window*3 + 7; r.window > 744*3_600_000 {
							r.window = rules[2].window / 2 // windows end at 744 h
						}
						setRule(r, 0)
					case 330:
						setRule(rules[2], 0)
					case 250:
						g.rule("r0", "", x.ts)
						model.rules = slices.DeleteFunc(slices.Clone(model.rules), func(r modelRule) bool { return r.id == "r0" })
						for k := range model.held {
							if strings.HasPrefix(k, "r0/") {
								delete(model.held, k)
								delete(expiry.written, k)
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
								delete(expiry.written, k)
							}
						}
					case 400:
						g.rule("r0", rules[0].json(), x.ts)
						model.rules = append(model.rules, rules[0])
					}
					wx := expiry.record(x)
					want = append(want, wx...)
					c := &sliceCollector{}
					if err := g.router.ProcessElement(g.ctx, runtime.Record{Value: x.json(), Format: runtime.FormatJSON, Timestamp: time.UnixMilli(x.ts)}, c); err != nil {
						t.Fatal(err)
					}
					g.evaluate(c.recs)
					gx := g.alerts()
					got = append(got, gx...)
					if slices.Sort(wx); !slices.Equal(gx, wx) {
						t.Fatalf("record %d (ts %d, watermark %d): alerts %q, want %q", i, x.ts, wm, gx, wx)
					}
					inlineStatsPaged(t, g, &pagedKeys)
					maxTS = max(maxTS, x.ts)
					if i%15 == 14 {
						wm = max(wm, maxTS-rng.Int64N(20))
						g.watermark(wm)
						expiry.watermark(wm)
						inlineStatsPaged(t, g, &pagedKeys)
					}
					if t.Failed() {
						t.Fatalf("after record %d", i)
					}
				}
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

// slicedExpiry is the keyed stage's expiry of a key's slices (OnTimer,
// sliceEnd) over the brute-force model's held records: a slice (pane) of
// a key leaves once the watermark passes its time plus the longer of the
// rule's current window and the longest window a copy written into it
// had, oldest first, so a slice also waits for every older slice of its
// key. While a rule's window never changes this is bruteWindows.watermark.
// After the window shrinks, slices written under the longer window stay
// for it (a copy routed under the longer window may still need them) and
// hold back the newer slices behind them; a record behind the watermark
// then sees them in its window.
type slicedExpiry struct {
	m       *bruteWindows
	written map[string]map[int64]int64 // model key -> pane -> longest reach written
}

// record is bruteWindows.record, noting each matched key's pane's reach.
func (e *slicedExpiry) record(x modelRec) []string {
	for _, r := range e.m.rules {
		if r.filtered && x.id%3 == 0 {
			continue
		}
		k := r.id + "/"
		if r.grouped {
			k += x.g
		}
		p, reach := r.pane(x.ts)
		if e.written[k] == nil {
			e.written[k] = map[int64]int64{}
		}
		e.written[k][p] = max(e.written[k][p], reach)
	}
	return e.m.record(x)
}

// watermark drops, key by key and oldest first, the panes whose end
// (pane + the longer of the rule's reach and the pane's longest written
// reach) wm passed, stopping at the first that stays.
func (e *slicedExpiry) watermark(wm int64) {
	for _, r := range e.m.rules {
		_, reach := r.pane(0)
		for k, hs := range e.m.held {
			if !strings.HasPrefix(k, r.id+"/") {
				continue
			}
			var panes []int64
			for _, h := range hs {
				p, _ := r.pane(h.ts)
				panes = append(panes, p)
			}
			slices.Sort(panes)
			gone := map[int64]bool{}
			for _, p := range slices.Compact(panes) {
				if p+max(reach, e.written[k][p]) >= wm {
					break
				}
				gone[p] = true
				delete(e.written[k], p)
			}
			e.m.held[k] = slices.DeleteFunc(hs, func(h modelRec) bool { p, _ := r.pane(h.ts); return gone[p] })
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

// TestRulesWindowShrinkKeepsLongerSlices pins the keyed stage's expiry
// after a rule's window shrinks (what slicedExpiry models): a slice written
// under the longer window keeps it, and the newer slices of its key, whose
// own ends the watermark passed, wait behind it, so a record behind the
// watermark still sees them; on both backends.
func TestRulesWindowShrinkKeepsLongerSlices(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 1, RuleTimeProcessing, nil, nil)
			r := modelRule{id: "s", fn: "sum", of: "amount", window: 1000, grouped: true}
			g.rule(r.id, r.json(), 0)
			g.send(modelRec{id: 1, ts: 0, g: "g0", amount: "1"})
			g.send(modelRec{id: 2, ts: 500, g: "g0", amount: "2"})
			r.window = 100
			g.rule(r.id, r.json(), 0)
			g.send(modelRec{id: 3, ts: 600, g: "g0", amount: "4"})
			g.send(modelRec{id: 4, ts: 700, g: "g0", amount: "8"})
			g.watermark(750) // slice 600 ends at 700, but slice 0 ends at 1000
			if got, want := g.entries(), map[string]int{"s": 4}; !maps.Equal(got, want) {
				t.Fatalf("slices after watermark 750: %v, want %v", got, want)
			}
			g.alerts()
			g.send(modelRec{id: 5, ts: 650, g: "g0", amount: "16"}) // behind the watermark
			if got, want := g.alerts(), []string{`s {"g":"g0"} 20 550..650 tx5`}; !slices.Equal(got, want) {
				t.Fatalf("alerts %v, want %v", got, want)
			}
			g.watermark(1_001) // slice 0 leaves; slice 500 (ends at 1500) holds the rest
			if got, want := g.entries(), map[string]int{"s": 4}; !maps.Equal(got, want) {
				t.Fatalf("slices after watermark 1001: %v, want %v", got, want)
			}
			g.watermark(1_501)
			if got, want := g.entries(), map[string]int{}; !maps.Equal(got, want) {
				t.Fatalf("slices after watermark 1501: %v, want %v", got, want)
			}
		})
	}
}
