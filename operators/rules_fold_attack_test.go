package operators

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// hugeValue is fn over the records in as the alert writes it, computed
// from scratch with exact arithmetic: integer sums in math/big (past
// int64), a sum with doubles the exact sum rounded once, min and max the
// first extreme in arrival order by number.less (exact for integers).
func hugeValue(fn string, in []modelRec) string {
	switch fn {
	case "count":
		return strconv.Itoa(len(in))
	case "count_distinct":
		seen := map[string]bool{}
		for _, x := range in {
			seen[x.tag] = true
		}
		return strconv.Itoa(len(seen))
	case "min", "max":
		var ext number
		text := ""
		for i, x := range in {
			v := parseNumber([]byte(x.amount))
			if i == 0 || (fn == "max" && ext.less(v)) || (fn == "min" && v.less(ext)) {
				ext, text = v, string(appendModelNumber(nil, x.amount))
			}
		}
		return text
	}
	ints := new(big.Int)
	exact := new(big.Float).SetPrec(1 << 12)
	floats := false
	for _, x := range in {
		if x.isFloat {
			f, _ := strconv.ParseFloat(x.amount, 64)
			exact.Add(exact, big.NewFloat(f))
			floats = true
		} else {
			z, _ := new(big.Int).SetString(x.amount, 10)
			ints.Add(ints, z)
			exact.Add(exact, new(big.Float).SetInt(z))
		}
	}
	f, _ := exact.Float64()
	switch {
	case fn == "avg":
		return string(appendFloat(nil, f/float64(len(in))))
	case floats:
		return string(appendFloat(nil, f))
	}
	return ints.String()
}

// TestRulesFoldHugeIntegersModel attacks the pre-aggregated slices
// (ruleSlice.fold) with integers at int64's ends (a slice's folded sum
// overflows into a second sum, sums reach math.MinInt64 and leave int64 in
// the running aggregate), integers beyond 2^53 beside doubles, and many
// records per slice (panes of 100 ms to 1 h, sliding windows of 1-5 ms)
// out of time order, for every fn: the alerts equal a brute force with
// exact arithmetic, through watermarks expiring slices and restores at
// parallelism 2 -> 3 -> 1 (rescale), on both backends.
func TestRulesFoldHugeIntegersModel(t *testing.T) {
	rules := []modelRule{
		{id: "sum", fn: "sum", of: "amount", window: 1000, slice: 100, grouped: true},
		{id: "summs", fn: "sum", of: "amount", window: 5},
		{id: "sumh", fn: "sum", of: "amount", window: 744 * 3_600_000, slice: 3_600_000, filtered: true},
		{id: "avg", fn: "avg", of: "amount", window: 1000, slice: 100},
		{id: "max", fn: "max", of: "amount", window: 1000, slice: 250, grouped: true},
		{id: "min", fn: "min", of: "amount", window: 2, slice: 1},
		{id: "maxms", fn: "max", of: "amount", window: 3},
		{id: "cd", fn: "count_distinct", of: "tag", window: 1000, slice: 100, grouped: true},
		{id: "cnt", fn: "count", window: 1000, slice: 500},
	}
	ints := []string{"9223372036854775807", "-9223372036854775808", "9223372036854775806", "4611686018427387904",
		"-4611686018427387904", "9007199254740993", "-9007199254740993", "1", "-1", "0", "7"}
	floats := []string{"0.5", "-2.25", "1000000000000000.2", "-0.1"}
	for seed := uint64(1); seed <= 1; seed++ {
		rng := rand.New(rand.NewPCG(seed, 44))
		recs := make([]modelRec, 900)
		ts := int64(1_700_000_000_000)
		for i := range recs {
			ts += rng.Int64N(3)
			at := ts
			switch p := rng.IntN(100); {
			case p < 25:
				at -= rng.Int64N(20)
			case p < 28:
				at -= rng.Int64N(3000)
			}
			amount := ints[rng.IntN(len(ints))]
			if rng.IntN(5) == 0 {
				amount = floats[rng.IntN(len(floats))]
			}
			recs[i] = modelRec{id: i, ts: at, g: fmt.Sprintf("g%d", rng.IntN(2)), tag: fmt.Sprintf("t%d", rng.IntN(5)), amount: amount,
				isFloat: slices.Contains([]byte(amount), '.')}
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
					if i == 300 || i == 600 {
						got = append(got, g.alerts()...)
						routerState, err := g.router.SnapshotBroadcastState()
						if err != nil {
							t.Fatal(err)
						}
						p := map[int]int{300: 3, 600: 1}[i]
						g = newRulesRig(t, kind, p, RuleTimeProcessing, snapshotRules(t, g, p), routerState)
						checkKeyHints(t, g)
					}
					for _, r := range rules {
						if r.filtered && x.id%3 == 0 {
							continue
						}
						group, gjson := "", "{}"
						if r.grouped {
							group, gjson = x.g, fmt.Sprintf(`{"g":%q}`, x.g)
						}
						k := r.id + "/" + group
						model.held[k] = append(model.held[k], x)
						var in []modelRec
						p, reach := r.pane(x.ts)
						for _, h := range model.held[k] {
							if hp, _ := r.pane(h.ts); hp >= p-reach && hp <= p {
								in = append(in, h)
							}
						}
						end := p
						if r.slice > 0 {
							end = p + r.slice - 1
						}
						want = append(want, fmt.Sprintf("%s %s %s %d..%d tx%d", r.id, gjson, hugeValue(r.fn, in), p-reach, end, x.id))
					}
					g.send(x)
					maxTS = max(maxTS, x.ts)
					if i%30 == 29 {
						wm = max(wm, maxTS-rng.Int64N(40))
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
