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

// TestRulesInlineSlicesRandomModel attacks summary format version 4 (a
// key's slices inline in its summary up to maxInlineSlices and
// maxInlineSliceBytes, spilled to RulesSliceState past either): few keys
// (so each holds many slices), windows of 5-300 ms over records 0-3 ms
// apart (so a key's slice count and count_distinct's slice bytes cross
// the bounds both ways as slices are made and expire), watermarks every
// 20 records, and a restore every 150 records at parallelism 1, 2 or 3
// (some from checkpoints rewritten in the first sliced layout, format
// version 1, beside version 4 summaries of other keys), and a rule
// deleted and re-added, and one whose shape changes, while their keys
// hold slices; the alerts must
// be exactly the brute-force model's, on both backends.
func TestRulesInlineSlicesRandomModel(t *testing.T) {
	fns := []string{"count", "sum", "min", "max", "avg", "count_distinct"}
	windows := []int64{5, 9, 17, 30, 60, 120, 300}
	for seed := uint64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 42))
		var rules []modelRule
		for i := range 8 {
			r := modelRule{id: fmt.Sprintf("r%d", i), fn: fns[(i+int(seed))%len(fns)], window: windows[rng.IntN(len(windows))],
				grouped: rng.IntN(4) > 0, filtered: rng.IntN(4) == 0}
			switch r.fn {
			case "count":
			case "count_distinct":
				r.of = "tag"
			default:
				r.of = "amount"
			}
			rules = append(rules, r)
		}
		recs := make([]modelRec, 1200)
		ts := int64(1_700_000_000_000)
		for i := range recs {
			ts += rng.Int64N(4)
			at := ts
			if rng.IntN(100) < 25 {
				at -= rng.Int64N(40)
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
			// Long, many tags: count_distinct's slices pass 384 bytes
			// together within a few slices.
			recs[i] = modelRec{id: i, ts: at, g: fmt.Sprintf("g%d", rng.IntN(2)), tag: fmt.Sprintf("tag-%024d", rng.IntN(60)), amount: amount,
				isFloat: slices.Contains([]byte(amount), '.'), value: v}
		}
		for _, kind := range backends {
			t.Run(fmt.Sprintf("seed%d/%s", seed, kind), func(t *testing.T) {
				model := &bruteWindows{rules: rules, held: map[string][]modelRec{}}
				var want, got []string
				p := 2
				g := newRulesRig(t, kind, p, RuleTimeProcessing, nil, nil)
				for _, r := range rules {
					g.rule(r.id, r.json(), 0)
				}
				maxTS, wm := int64(0), int64(0)
				maxInline, spilled, pagedKeys := 0, 0, 0
				for i, x := range recs {
					if i%50 == 49 {
						mi, sp := inlineStatsPaged(t, g, &pagedKeys)
						maxInline, spilled = max(maxInline, mi), spilled+sp
					}
					if i > 0 && i%150 == 0 {
						got = append(got, g.alerts()...)
						mi, sp := inlineStatsPaged(t, g, &pagedKeys)
						maxInline, spilled = max(maxInline, mi), spilled+sp
						if i%450 == 0 {
							toV1Layout(t, g)
						}
						routerState, err := g.router.SnapshotBroadcastState()
						if err != nil {
							t.Fatal(err)
						}
						p = 1 + (p+int(seed))%3
						offset := g.offset // the rules topic's offsets go on
						g = newRulesRig(t, kind, p, RuleTimeProcessing, snapshotRules(t, g, p), routerState)
						g.offset = offset
						checkKeyHints(t, g)
					}
					switch i {
					case 520:
						// r0 deleted while its keys hold slices inline (and
						// some in the map), re-added fresh at 700: its
						// old slices must count nowhere.
						g.rule("r0", "", x.ts)
						model.rules = slices.DeleteFunc(slices.Clone(model.rules), func(r modelRule) bool { return r.id == "r0" })
						for k := range model.held {
							if strings.HasPrefix(k, "r0/") {
								delete(model.held, k)
							}
						}
					case 610:
						// r1's shape changes (another fn; count_distinct of
						// tag <-> sum of amount) while its keys hold slices:
						// its old slices count nowhere.
						r := rules[1]
						if r.fn == "count_distinct" {
							r.fn, r.of = "sum", "amount"
						} else {
							r.fn, r.of = "count_distinct", "tag"
						}
						g.rule("r1", r.json(), x.ts)
						model.rules = slices.Clone(model.rules)
						for j := range model.rules {
							if model.rules[j].id == "r1" {
								model.rules[j] = r
							}
						}
						for k := range model.held {
							if strings.HasPrefix(k, "r1/") {
								delete(model.held, k)
							}
						}
					case 700:
						g.rule("r0", rules[0].json(), x.ts)
						model.rules = append(model.rules, rules[0])
					}
					want = append(want, model.record(x)...)
					c := &sliceCollector{}
					if err := g.router.ProcessElement(g.ctx, runtime.Record{Value: x.json(), Format: runtime.FormatJSON, Timestamp: time.UnixMilli(x.ts)}, c); err != nil {
						t.Fatal(err)
					}
					g.evaluate(c.recs)
					maxTS = max(maxTS, x.ts)
					if i%20 == 19 {
						wm = max(wm, maxTS-rng.Int64N(30))
						g.watermark(wm)
						model.watermark(wm)
					}
				}
				got = append(got, g.alerts()...)
				checkKeyHints(t, g)
				mi, sp := inlineStatsPaged(t, g, &pagedKeys)
				maxInline, spilled = max(maxInline, mi), spilled+sp
				t.Logf("most slices inline %d, keys spilled %d, keys with pages %d (summed over checks)", maxInline, spilled, pagedKeys)
				if pagedKeys == 0 {
					t.Errorf("no key held a page (the test no longer reaches RulesPageState)")
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

// inlineStats checks that every key's slices are each in exactly one
// place (the summary's TailSlice and Older, RulesSliceState, or a page of
// RulesPageState the summary lists, within its range: none in two, none
// lost, their number the summary's Slices; no page the summary does not
// list) and returns the most slices a summary held and how many keys had
// slices in the map or pages; pagedKeys counts the keys seen with pages.
func inlineStats(t *testing.T, g *rulesRig) (maxInline, spilled int) {
	return inlineStatsPaged(t, g, new(int))
}

func inlineStatsPaged(t *testing.T, g *rulesRig, pagedKeysOut *int) (maxInline, spilled int) {
	t.Helper()
	for _, op := range g.evals {
		inMap := map[string][]int64{}
		pageKeys := map[string][]int64{}
		paged := map[string]map[int64][]int64{}
		err := state.ApplyToAllKeys(op.backend, RulesPageState, func(key []byte, s state.MapState[int64, rulePage]) error {
			for e, err := range s.Entries() {
				if err != nil {
					return err
				}
				k, p := e.Key, e.Value
				pageKeys[string(key)] = append(pageKeys[string(key)], k)
				if paged[string(key)] == nil {
					paged[string(key)] = map[int64][]int64{}
				}
				for _, o := range p.Slices {
					if _, err := o.slice(); err != nil {
						return err
					}
					paged[string(key)][k] = append(paged[string(key)][k], o.K)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		err = state.ApplyToAllKeys(op.backend, RulesSliceState, func(key []byte, s state.MapState[int64, ruleSlice]) error {
			for k, err := range s.Keys() {
				if err != nil {
					return err
				}
				inMap[string(key)] = append(inMap[string(key)], k)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		err = state.ApplyToAllValueKeys(op.backend, RulesAggState, func(key []byte, s state.ValueState[ruleWindow]) error {
			w, ok, err := s.Value()
			if err != nil || !ok {
				return err
			}
			var in []int64
			if w.TailSlice != nil {
				in = append(in, w.Tail)
			}
			for _, o := range w.Older {
				in = append(in, o.K)
			}
			m := slices.Clone(inMap[string(key)])
			var refs []int64
			for _, ref := range w.Pages {
				refs = append(refs, ref.K)
				ks := paged[string(key)][ref.K]
				if len(ks) == 0 {
					t.Errorf("key %q: page %d of the summary missing or empty", key, ref.K)
				}
				for _, k := range ks {
					if k < ref.K || k > ref.Hi {
						t.Errorf("key %q: page %d [%d, %d] holds slice %d", key, ref.K, ref.K, ref.Hi, k)
					}
				}
				m = append(m, ks...)
			}
			pk := slices.Clone(pageKeys[string(key)])
			slices.Sort(pk)
			slices.Sort(refs)
			if !slices.Equal(pk, refs) {
				t.Errorf("key %q: pages %v stored, the summary lists %v", key, pk, refs)
			}
			delete(pageKeys, string(key))
			for _, k := range in {
				if slices.Contains(m, k) {
					t.Errorf("key %q: slice %d both in the summary and in the map or a page", key, k)
				}
			}
			slices.Sort(m)
			if len(slices.Compact(slices.Clone(m))) != len(m) {
				t.Errorf("key %q: a slice twice in the map and pages: %v", key, m)
			}
			if int64(len(in)+len(m)) != w.Slices {
				t.Errorf("key %q: %d slices inline, %d in the map and pages, summary says %d", key, len(in), len(m), w.Slices)
			}
			if len(w.Pages) > 0 {
				*pagedKeysOut++
			}
			maxInline = max(maxInline, len(in))
			if len(m) > 0 {
				spilled++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for key, ks := range pageKeys {
			t.Errorf("key %q: pages %v stored without a summary", key, ks)
		}
	}
	return maxInline, spilled
}
