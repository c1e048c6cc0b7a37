package operators

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// modelRule is a random rule of TestRulesRandomModel with its model.
type modelRule struct {
	id, fn, of string
	window     int64 // ms
	grouped    bool  // group_by ["g"]
	filtered   bool  // filter id % 3 != 0
	slice      int64 // ms; 0: none (the sliding window)
}

// pane returns the start of the slice (pane) of time ts and the reach of
// r's windows below it: ts and window for the sliding window, for a
// hopping one (slice) the pane's start and window - slice.
func (r modelRule) pane(ts int64) (p, reach int64) {
	if r.slice <= 1 { // "1ms" is the sliding window
		return ts, r.window
	}
	return ts - ((ts%r.slice)+r.slice)%r.slice, r.window - r.slice
}

func (r modelRule) json() string {
	agg := fmt.Sprintf(`{"fn":%q}`, r.fn)
	if r.of != "" {
		agg = fmt.Sprintf(`{"fn":%q,"of":%q}`, r.fn, r.of)
	}
	s := fmt.Sprintf(`{"id":%q,"aggregate":%s,"window":"%dms","alert_when":"!= 123456789.5"`, r.id, agg, r.window)
	if r.grouped {
		s += `,"group_by":["g"]`
	}
	if r.filtered {
		s += `,"filter":"id % 3 != 0"`
	}
	if r.slice > 0 {
		s += fmt.Sprintf(`,"slice":"%dms"`, r.slice)
	}
	return s + "}"
}

// modelRec is one record of the model test: amount is an integer or a
// double with a fraction (a double without one reaches the keyed stage as
// an integer).
type modelRec struct {
	id     int
	ts     int64
	g      string
	tag    string
	amount string // JSON number

	isFloat bool    // amount has a fraction
	value   float64 // amount's value (exact: the integers are small)
}

func (x modelRec) json() []byte {
	return fmt.Appendf(nil, `{"id":%d,"g":%q,"tag":%q,"amount":%s}`, x.id, x.g, x.tag, x.amount)
}

// bruteWindows is the brute-force model: per rule and group every record
// held (not yet expired), in arrival order.
type bruteWindows struct {
	rules []modelRule
	held  map[string][]modelRec // rule id + "/" + group
}

// record returns the canonical alerts of rec: for every rule whose filter
// takes it, the aggregate over the held records of its group with
// timestamps in [ts - window, ts] (for a rule with a slice, in the
// hopping window [p + slice - window, p + slice) of rec's pane p),
// computed from scratch with exact
// arithmetic (big.Rat), rounded once.
func (m *bruteWindows) record(rec modelRec) []string {
	var out []string
	for _, r := range m.rules {
		if r.filtered && rec.id%3 == 0 {
			continue
		}
		group, gjson := "", "{}"
		if r.grouped {
			group, gjson = rec.g, fmt.Sprintf(`{"g":%q}`, rec.g)
		}
		k := r.id + "/" + group
		m.held[k] = append(m.held[k], rec)
		var in []modelRec
		p, reach := r.pane(rec.ts)
		for _, h := range m.held[k] {
			if hp, _ := r.pane(h.ts); hp >= p-reach && hp <= p {
				in = append(in, h)
			}
		}
		end := p
		if r.slice > 0 {
			end = p + r.slice - 1
		}
		out = append(out, fmt.Sprintf("%s %s %s %d..%d tx%d", r.id, gjson, bruteValue(r.fn, in), p-reach, end, rec.id))
	}
	return out
}

// bruteValue is fn over the records in, as the alert's JSON value.
func bruteValue(fn string, in []modelRec) string {
	switch fn {
	case "count":
		return strconv.Itoa(len(in))
	case "count_distinct":
		seen := map[string]bool{}
		for _, x := range in {
			seen[x.tag] = true
		}
		return strconv.Itoa(len(seen))
	}
	// Exact: the integers in an int64 (they are small), the doubles in a
	// big.Float wide enough never to round (their exponents span less
	// than 200 bits here).
	ints := int64(0)
	fsum := new(big.Float).SetPrec(1 << 12)
	floats := false
	var ext float64
	extText := ""
	for i, x := range in {
		v := x.value
		if x.isFloat {
			fsum.Add(fsum, big.NewFloat(v))
			floats = true
		} else {
			ints += int64(v)
		}
		if i == 0 || (fn == "max" && v > ext) || (fn == "min" && v < ext) {
			ext, extText = v, string(appendModelNumber(nil, x.amount))
		}
	}
	switch fn {
	case "min", "max":
		return extText
	case "sum":
		if !floats {
			return strconv.FormatInt(ints, 10)
		}
		f, _ := fsum.Add(fsum, new(big.Float).SetInt64(ints)).Float64()
		return string(appendFloat(nil, f))
	}
	// avg: the sum as a double (rounded once), divided by the count
	f, _ := fsum.Add(fsum, new(big.Float).SetInt64(ints)).Float64()
	return string(appendFloat(nil, f/float64(len(in))))
}

// appendModelNumber appends a JSON number as the alert writes it: an
// integer as is, a double as encoding/json writes it.
func appendModelNumber(b []byte, s string) []byte {
	if !slices.Contains([]byte(s), '.') {
		return append(b, s...)
	}
	f, _ := strconv.ParseFloat(s, 64)
	return appendFloat(b, f)
}

// watermark drops the held records whose window the watermark wm passed
// (ts + window < wm; for a rule with a slice, pane + window - slice < wm),
// as the operator's timers do.
func (m *bruteWindows) watermark(wm int64) {
	for _, r := range m.rules {
		for k, hs := range m.held {
			if len(k) <= len(r.id) || k[:len(r.id)+1] != r.id+"/" {
				continue
			}
			m.held[k] = slices.DeleteFunc(hs, func(h modelRec) bool { p, reach := r.pane(h.ts); return p+reach < wm })
		}
	}
}

// TestRulesRandomModel: random rules (every aggregate, windows from 1 ms
// to 744 h, grouped or not, filtered or not) over records out of time
// order (most a few ms late, some seconds, some behind the watermark),
// with watermarks expiring slices and two restores at other parallelisms
// in the middle (the first from a checkpoint in the first sliced layout,
// format version 1, as main wrote it), give exactly the alerts of a brute-force model that keeps
// every record and aggregates each window from scratch with exact
// arithmetic; on both backends.
func TestRulesRandomModel(t *testing.T) {
	fns := []string{"count", "sum", "min", "max", "avg", "count_distinct"}
	windows := []int64{1, 2, 5, 17, 250, 1000, 90_000, 20 * 60_000, 744 * 3_600_000}
	for seed := uint64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewPCG(seed, 25))
		var rules []modelRule
		for i := range 9 {
			r := modelRule{id: fmt.Sprintf("r%d", i), fn: fns[(i+int(seed))%len(fns)], window: windows[rng.IntN(len(windows))],
				grouped: rng.IntN(3) > 0, filtered: rng.IntN(3) == 0}
			if i < len(fns) {
				r.fn = fns[i]
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
		recs := make([]modelRec, 1500)
		ts := int64(1_700_000_000_000)
		for i := range recs {
			ts += rng.Int64N(4)
			at := ts
			switch p := rng.IntN(100); {
			case p < 30:
				at -= rng.Int64N(25)
			case p < 33:
				at -= rng.Int64N(8000)
			}
			var amount string
			switch rng.IntN(4) {
			case 0:
				amount = fmt.Sprintf("%d.%02d", rng.IntN(1000)-300, 1+rng.IntN(99))
			case 1:
				// Sums of these round: only an exact sum rounded once is
				// the same whatever the order of the records.
				amount = []string{"0.1", "0.2", "0.3", "1000000000000000.25", "-1000000000000000.25", "3.3333333333333335"}[rng.IntN(6)]
			default:
				amount = strconv.Itoa(rng.IntN(2000) - 500)
			}
			v, err := strconv.ParseFloat(amount, 64)
			if err != nil {
				t.Fatal(err)
			}
			recs[i] = modelRec{id: i, ts: at, g: fmt.Sprintf("g%d", rng.IntN(4)), tag: fmt.Sprintf("t%d", rng.IntN(12)), amount: amount,
				isFloat: slices.Contains([]byte(amount), '.'), value: v}
		}
		for _, kind := range backends {
			t.Run(fmt.Sprintf("seed%d/%s", seed, kind), func(t *testing.T) {
				model := &bruteWindows{rules: rules, held: map[string][]modelRec{}}
				var want, got []string
				g := newRulesRig(t, kind, 2, RuleTimeProcessing, nil, nil)
				for _, r := range rules {
					g.rule(r.id, r.json(), 0)
				}
				maxTS, wm := int64(0), int64(0)
				for i, x := range recs {
					if i == 500 || i == 1000 {
						got = append(got, g.alerts()...)
						if i == 500 {
							// This checkpoint in the first sliced layout
							// (every slice in RulesSliceState, summaries
							// of format version 1), as main wrote them.
							toV1Layout(t, g)
						}
						routerState, err := g.router.SnapshotBroadcastState()
						if err != nil {
							t.Fatal(err)
						}
						p := 1 + i/500 // 2 -> 2 -> 3
						g = newRulesRig(t, kind, p, RuleTimeProcessing, snapshotRules(t, g, p), routerState)
						checkKeyHints(t, g)
					}
					want = append(want, model.record(x)...)
					c := &sliceCollector{}
					if err := g.router.ProcessElement(g.ctx, runtime.Record{Value: x.json(), Format: runtime.FormatJSON, Timestamp: time.UnixMilli(x.ts)}, c); err != nil {
						t.Fatal(err)
					}
					g.evaluate(c.recs)
					maxTS = max(maxTS, x.ts)
					if i%40 == 39 {
						wm = max(wm, maxTS-rng.Int64N(60))
						g.watermark(wm)
						model.watermark(wm)
					}
				}
				got = append(got, g.alerts()...)
				checkKeyHints(t, g)
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("%d alerts, want %d; %s", len(got), len(want), firstDiff(got, want))
				}
			})
		}
	}
}

// toV1Layout rewrites the window state of g's evaluators into the first
// sliced layout: every key's slices in its summary (the newest and Older)
// and in its pages (RulesPageState) move into RulesSliceState and the summary is written in format version 1, the
// bytes the first sliced layout wrote (TestRuleWindowFormatV1).
func toV1Layout(t *testing.T, g *rulesRig) {
	t.Helper()
	for _, op := range g.evals {
		sl, err := state.GetMapState(op.backend, RulesSliceState)
		if err != nil {
			t.Fatal(err)
		}
		pg, err := state.GetMapState(op.backend, RulesPageState)
		if err != nil {
			t.Fatal(err)
		}
		err = state.ApplyToAllValueKeys(op.backend, RulesAggState, func(_ []byte, s state.ValueState[ruleWindow]) error {
			w, ok, err := s.Value()
			if err != nil || !ok || w.TailSlice == nil {
				return err
			}
			if err := sl.Put(w.Tail, *w.TailSlice); err != nil {
				return err
			}
			older := w.Older
			for _, ref := range w.Pages {
				p, ok, err := pg.Get(ref.K)
				if err != nil || !ok {
					return fmt.Errorf("page %d: %v %v", ref.K, ok, err)
				}
				older = append(older, p.Slices...)
				if err := pg.Remove(ref.K); err != nil {
					return err
				}
			}
			for _, o := range older {
				s, err := o.slice()
				if err != nil {
					return err
				}
				if err := sl.Put(o.K, *s); err != nil {
					return err
				}
			}
			w.TailSlice, w.Older, w.Pages = nil, nil, nil
			return s.Update(w)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestRulesMigratesBucketState: window state of the earlier layout
// (RulesWindowState, JSON buckets) in a checkpoint is moved into the sliced
// layout when the operator opens: the restored buckets count in the next
// windows (sum, max, count_distinct over old and new records), the rule
// status counts them, the old state is left empty, and buckets of a shape
// other than the key's newest are dropped.
func TestRulesMigratesBucketState(t *testing.T) {
	rules := []modelRule{
		{id: "s", fn: "sum", of: "amount", window: 1000, grouped: true},
		{id: "m", fn: "max", of: "amount", window: 1000, grouped: true},
		{id: "d", fn: "count_distinct", of: "tag", window: 1000, grouped: true},
	}
	shape := func(r modelRule) string {
		cr, err := CompileRule(RuleSpec{ID: r.id, Aggregate: RuleAggregate{Fn: r.fn, Of: r.of}, GroupBy: []string{"g"}, Window: "1s", AlertWhen: "> 0"})
		if err != nil {
			t.Fatal(err)
		}
		return cr.Shape
	}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 1, RuleTimeProcessing, nil, nil)
			for _, r := range rules {
				g.rule(r.id, r.json(), 0)
			}
			b := g.evals[0].backend
			old, err := state.GetMapState(b, RulesWindowState)
			if err != nil {
				t.Fatal(err)
			}
			put := func(r modelRule, shape string, ts int64, in ...string) {
				b.SetCurrentKey(appendRuleKey(nil, r.id, []json.RawMessage{json.RawMessage(`"g0"`)}))
				bk := RuleBucket{Shape: shape, WindowMs: r.window, N: int64(max(1, len(in)))}
				for _, x := range in {
					bk.In = append(bk.In, json.RawMessage(x))
				}
				if err := old.Put(ts, bk); err != nil {
					t.Fatal(err)
				}
			}
			put(rules[0], shape(rules[0]), 1000, "5", "7")
			put(rules[0], shape(rules[0]), 1500, "2.5")
			put(rules[0], `["count","",["g"]]`, 900) // another shape: dropped
			put(rules[1], shape(rules[1]), 1200, "40")
			put(rules[1], shape(rules[1]), 1600, "9")
			put(rules[2], shape(rules[2]), 1100, `"a"`, `"b"`)
			put(rules[2], shape(rules[2]), 1700, `"a"`)
			routerState, err := g.router.SnapshotBroadcastState()
			if err != nil {
				t.Fatal(err)
			}
			h := newRulesRig(t, kind, 1, RuleTimeProcessing, snapshotRules(t, g, 1), routerState)
			checkKeyHints(t, h) // the migrated keys hold a summary: the hint knows them
			if n := len(h.fns[0].win.hint.n); n != 3 {
				t.Fatalf("key hint holds %d hashes after the migration, want 3 (s, m, d of g0)", n)
			}
			if got, want := h.entries(), map[string]int{"s": 2, "m": 2, "d": 2}; !maps.Equal(got, want) {
				t.Fatalf("slices after the migration %v, want %v", got, want)
			}
			for _, st := range h.fns[0].RuleStatuses() {
				if st.StateEntries != 2 {
					t.Fatalf("rule %s: state_entries %d after the migration, want 2", st.ID, st.StateEntries)
				}
			}
			left := 0
			err = state.ApplyToAllKeys(h.evals[0].backend, RulesWindowState, func(_ []byte, s state.MapState[int64, RuleBucket]) error {
				for range s.Entries() {
					left++
				}
				return nil
			})
			if err != nil || left != 0 {
				t.Fatalf("old layout left %d buckets (%v), want 0", left, err)
			}
			send := func(id int, ts int64, amount, tag string) {
				c := &sliceCollector{}
				rec := modelRec{id: id, ts: ts, g: "g0", tag: tag, amount: amount}
				if err := h.router.ProcessElement(h.ctx, runtime.Record{Value: rec.json(), Format: runtime.FormatJSON, Timestamp: time.UnixMilli(ts)}, c); err != nil {
					t.Fatal(err)
				}
				h.evaluate(c.recs)
			}
			send(1, 1800, "1", "c")   // windows [800, 1800]: all the old buckets
			send(2, 2300, "3", "a")   // [1300, 2300]: 1500, 1600, 1700, 1800
			send(3, 1250, "0.5", "a") // out of order: [250, 1250]
			want := []string{
				`d {"g":"g0"} 2 250..1250 tx3`,
				`d {"g":"g0"} 2 1300..2300 tx2`,
				`d {"g":"g0"} 3 800..1800 tx1`,
				`m {"g":"g0"} 40 250..1250 tx3`,
				`m {"g":"g0"} 40 800..1800 tx1`,
				`m {"g":"g0"} 9 1300..2300 tx2`,
				`s {"g":"g0"} 12.5 250..1250 tx3`,
				`s {"g":"g0"} 15.5 800..1800 tx1`,
				`s {"g":"g0"} 6.5 1300..2300 tx2`,
			}
			slices.Sort(want)
			if got := h.alerts(); !slices.Equal(got, want) {
				t.Fatalf("alerts after the migration:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
