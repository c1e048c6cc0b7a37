package operators

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// sliceModelRecs returns n random records of the model tests: times
// advancing 0-3 ms per record, 30% a few ms late, 3% up to 8 s late;
// integer and double amounts (some whose sums round), 4 groups, 12 tags.
func sliceModelRecs(t *testing.T, rng *rand.Rand, n int) []modelRec {
	t.Helper()
	recs := make([]modelRec, n)
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
	return recs
}

// TestRulesSliceRandomModel: rules with a slice (hopping windows: every
// aggregate, panes from 1 ms to 1 h, windows from 2 ms to 744 h, tumbling
// ones where slice = window, grouped or not, filtered or not, next to
// sliding rules without one) over records out of time order, with
// watermarks expiring panes and two restores at other parallelisms, give
// exactly the alerts of the brute-force model evaluating each record over
// the hopping window that ends with its pane (window_start and
// window_end included); on both backends.
func TestRulesSliceRandomModel(t *testing.T) {
	fns := []string{"count", "sum", "min", "max", "avg", "count_distinct"}
	shapes := []struct{ window, slice int64 }{
		{2, 1}, {6, 3}, {20, 20}, {250, 50}, {1000, 1}, {1000, 100}, {1000, 1000},
		{90_000, 1000}, {20 * 60_000, 60_000}, {744 * 3_600_000, 3_600_000}, {17, 0}, {1000, 0},
	}
	for seed := uint64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewPCG(seed, 43))
		var rules []modelRule
		for i := range 10 {
			sh := shapes[rng.IntN(len(shapes))]
			r := modelRule{id: fmt.Sprintf("r%d", i), fn: fns[(i+int(seed))%len(fns)], window: sh.window, slice: sh.slice,
				grouped: rng.IntN(3) > 0, filtered: rng.IntN(3) == 0}
			if i < len(fns) {
				r.fn = fns[i]
				if r.slice == 0 {
					r.window, r.slice = 1000, 100
				}
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
		recs := sliceModelRecs(t, rng, 1500)
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
						routerState, err := g.router.SnapshotBroadcastState()
						if err != nil {
							t.Fatal(err)
						}
						p := 1 + i/500 // 2 -> 2 -> 3
						g = newRulesRig(t, kind, p, RuleTimeProcessing, snapshotRules(t, g, p), routerState)
						checkKeyHints(t, g)
					}
					want = append(want, model.record(x)...)
					g.send(x)
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

// TestRulesSliceKeepsOneSlicePerPane: a key's records in one pane share
// one slice (one state entry where the sliding window keeps one per
// millisecond), the alert names the hopping window ending with the pane,
// and a record of the next pane sees the panes of its window only.
func TestRulesSliceKeepsOneSlicePerPane(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 1, RuleTimeProcessing, nil, nil)
			g.rule("hop", `{"id":"hop","aggregate":{"fn":"sum","of":"amount"},"window":"3s","slice":"1s","alert_when":"> 0"}`, 0)
			g.rule("ms", `{"id":"ms","aggregate":{"fn":"sum","of":"amount"},"window":"3s","alert_when":"> 0"}`, 0)
			for i := range 100 {
				g.send(modelRec{id: i, ts: 10_000 + int64(i)*7, g: "g", tag: "t", amount: "1"}) // 10,000..10,693 ms: pane 10 s
			}
			if got, want := g.entries(), map[string]int{"hop": 1, "ms": 100}; !maps.Equal(got, want) {
				t.Fatalf("slices %v, want %v", got, want)
			}
			g.alerts()
			g.send(modelRec{id: 100, ts: 12_999, g: "g", tag: "t", amount: "5"}) // pane 12 s: [10 s, 13 s)
			g.send(modelRec{id: 101, ts: 13_000, g: "g", tag: "t", amount: "7"}) // pane 13 s: [11 s, 14 s)
			g.send(modelRec{id: 102, ts: 10_500, g: "g", tag: "t", amount: "2"}) // late, pane 10 s: [8 s, 11 s), all of pane 10 s
			want := []string{
				`hop {} 105 10000..12999 tx100`,
				`hop {} 12 11000..13999 tx101`,
				`hop {} 102 8000..10999 tx102`,
				`ms {} 105 9999..12999 tx100`,
				`ms {} 112 10000..13000 tx101`, // every one, 5 and 7
				`ms {} 74 7500..10500 tx102`,   // the 72 ones up to 10,497 and 2
			}
			slices.Sort(want)
			if got := g.alerts(); !slices.Equal(got, want) {
				t.Fatalf("alerts\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if got, want := g.entries(), map[string]int{"hop": 3, "ms": 103}; !maps.Equal(got, want) {
				t.Fatalf("slices %v, want %v", got, want)
			}
			g.watermark(13_000) // pane 10 s ends at 10 s + 3 s - 1 s = 12,000 ms (window reach 2 s)
			if got, want := g.entries()["hop"], 2; got != want {
				t.Fatalf("hop slices after watermark 13,000: %d, want %d", got, want)
			}
			// Another slice is another shape: the groups start afresh.
			g.rule("hop", `{"id":"hop","aggregate":{"fn":"sum","of":"amount"},"window":"3s","slice":"500ms","alert_when":"> 0"}`, 0)
			if got, want := g.entries()["hop"], 0; got != want {
				t.Fatalf("hop slices after its slice changed: %d, want %d", got, want)
			}
			g.alerts()
			g.send(modelRec{id: 103, ts: 13_700, g: "g", tag: "t", amount: "4"})
			if got, want := g.alerts(), []string{`hop {} 4 11000..13999 tx103`, `ms {} 16 10700..13700 tx103`}; !slices.Equal(got, want) {
				t.Fatalf("alerts after the slice changed %q, want %q", got, want)
			}
		})
	}
}

// TestRulesSliceSpec: slice is checked (a duration of whole ms in
// [1ms, window] dividing window), it joins the rule's shape (a changed
// slice starts the groups afresh; a rule without one has the shape it
// had), and the envelope head of a rule without a slice is the earlier
// one byte for byte while one with a slice carries it at its end.
func TestRulesSliceSpec(t *testing.T) {
	for _, tc := range []struct{ window, slice, err string }{
		{"1h", "1m", ""},
		{"1h", "1h", ""},
		{"744h", "1h", ""},
		{"3ms", "1ms", ""},
		{"1h", "7m", "slice: must divide the window (1h0m0s), got 7m"},
		{"1h", "2h", "slice: must divide the window (1h0m0s), got 2h"},
		{"1h", "0s", "slice: must be at least 1ms, got 0s"},
		{"1h", "-1m", "slice: must be at least 1ms, got -1m"},
		{"1h", "1500us", "slice: must be whole milliseconds, got 1500us"},
		{"1h", "soon", `slice: not a duration: "soon"`},
	} {
		_, err := CompileRule(RuleSpec{ID: "r", Aggregate: RuleAggregate{Fn: "count"}, Window: tc.window, Slice: tc.slice, AlertWhen: "> 1"})
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.HasSuffix(err.Error(), tc.err)) {
			t.Errorf("window %s slice %s: error %v, want %q", tc.window, tc.slice, err, tc.err)
		}
	}
	plain, err := CompileRule(RuleSpec{ID: "r", Aggregate: RuleAggregate{Fn: "sum", Of: "amount"}, GroupBy: []string{"g"}, Window: "1h", AlertWhen: "> 1", Emit: []byte(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	hop, err := CompileRule(RuleSpec{ID: "r", Aggregate: RuleAggregate{Fn: "sum", Of: "amount"}, GroupBy: []string{"g"}, Window: "1h", Slice: "1m", AlertWhen: "> 1"})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Shape != `["sum","amount",["g"]]` || hop.Shape != `["sum","amount",["g"],60000]` {
		t.Fatalf("shapes %s and %s", plain.Shape, hop.Shape)
	}
	if !strings.Contains(string(hop.JSON), `"slice":"1m"`) || strings.Contains(string(plain.JSON), `slice`) {
		t.Fatalf("rule JSON %s and %s", hop.JSON, plain.JSON)
	}
	v := ruleVersion{P: 1, O: 7}
	ph, hh := appendEnvelopeHead(nil, plain, v), appendEnvelopeHead(nil, hop, v)
	// A plain rule's head is 3fb9d43's (before slices) byte for byte, and
	// a hopping rule's adds the slice after the earlier fields.
	const base = "0172020e165b2273756d222c22616d6f756e74222c5b2267225d5d0373756d80bab703033e2031013e3ff0000000000000010167077b226e223a317d"
	if got := fmt.Sprintf("%x", ph); got != base {
		t.Fatalf("plain head %s, want 3fb9d43's %s", got, base)
	}
	noSlice := *hop
	noSlice.Slice = 0
	if h0 := appendEnvelopeHead(nil, &noSlice, v); !bytes.HasPrefix(hh, h0) || len(hh) != len(h0)+3 {
		t.Fatalf("heads %x and %x: the slice must follow the earlier head", ph, hh)
	}
	d, err := decodeEnvelopeHead(ph)
	if err != nil || d.WindowMs != 3_600_000 || d.SliceMs != 0 {
		t.Fatalf("plain head: %+v, %v", d, err)
	}
	if d, err = decodeEnvelopeHead(hh); err != nil || d.WindowMs != 3_540_000 || d.SliceMs != 60_000 {
		t.Fatalf("hopping head: %+v, %v", d, err)
	}
	bad := append(slices.Clone(ph), 0x7f) // slice -64 ms
	if _, err := decodeEnvelopeHead(bad); err == nil {
		t.Fatal("a head with a negative slice decoded")
	}
}
