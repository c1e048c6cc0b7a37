package operators

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/state"
)

// summarySlices returns, per rule id, the inputs (JSON) of the newest
// slice each of its keys holds in its summary, joined by spaces, and the
// slice's record count.
func summarySlices(t *testing.T, g *rulesRig) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, op := range g.evals {
		err := state.ApplyToAllValueKeys(op.backend, RulesAggState, func(key []byte, s state.ValueState[ruleWindow]) error {
			w, ok, err := s.Value()
			if ok && w.TailSlice != nil {
				in := make([]string, len(w.TailSlice.In))
				for i, b := range w.TailSlice.In {
					in[i] = string(b)
				}
				got[ruleOfKey(key)] = fmt.Sprintf("n=%d [%s]", w.TailSlice.N, strings.Join(in, " "))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return got
}

// TestRulesSliceFoldsInputs: a slice keeps its records' aggregate inputs
// pre-aggregated (ruleSlice.fold) instead of one per record: 60 records
// in one pane leave a sum rule's slice with one integer sum beside its
// doubles, a max or min rule's with its extreme, a count_distinct rule's
// with each distinct input once (on a9c897c every slice kept all 60).
// Every alert equals the brute-force aggregate of the window's records,
// before and after a restore at another parallelism and after the
// watermark expired the pane while a later one stays.
func TestRulesSliceFoldsInputs(t *testing.T) {
	rules := map[string]string{
		"sum": `{"id":"sum","aggregate":{"fn":"sum","of":"amount"},"window":"3s","slice":"1s","alert_when":"> -1000000"}`,
		"avg": `{"id":"avg","aggregate":{"fn":"avg","of":"amount"},"window":"3s","slice":"1s","alert_when":"> -1000000"}`,
		"max": `{"id":"max","aggregate":{"fn":"max","of":"amount"},"window":"3s","slice":"1s","alert_when":"> -1000000"}`,
		"min": `{"id":"min","aggregate":{"fn":"min","of":"amount"},"window":"3s","slice":"1s","alert_when":"< 1000000"}`,
		"cd":  `{"id":"cd","aggregate":{"fn":"count_distinct","of":"tag"},"window":"3s","slice":"1s","alert_when":"> 0"}`,
	}
	ids := slices.Sorted(maps.Keys(rules))
	amount := func(i int) string {
		switch {
		case i%20 == 7:
			return "0.25"
		case i == 33:
			return "100" // the max, then equalled by 100.0 at 44
		case i == 44:
			return "100.0" // routed as the integer 100 (number.appendJSON)
		default:
			return strconv.Itoa((i*37)%41 - 20)
		}
	}
	type rec struct {
		ts  int64
		v   float64
		tag string
	}
	var sent []rec
	// want: every rule's alert for the record sent last, from every sent
	// record in [paneStart + 1 s - 3 s, paneStart + 1 s).
	want := func(id int, ts int64) []string {
		pane := ts - ts%1000
		lo, hi := pane+1000-3000, pane+1000
		var sum, mx, mn float64
		n := 0
		tags := map[string]bool{}
		for _, r := range sent {
			if r.ts < lo || r.ts >= hi {
				continue
			}
			if n == 0 || r.v > mx {
				mx = r.v
			}
			if n == 0 || r.v < mn {
				mn = r.v
			}
			sum += r.v
			n++
			tags[r.tag] = true
		}
		w := fmt.Sprintf("%d..%d tx%d", lo, hi-1, id)
		out := []string{
			fmt.Sprintf("avg {} %g %s", sum/float64(n), w),
			fmt.Sprintf("cd {} %d %s", len(tags), w),
			fmt.Sprintf("max {} %g %s", mx, w),
			fmt.Sprintf("min {} %g %s", mn, w),
			fmt.Sprintf("sum {} %g %s", sum, w),
		}
		return out
	}
	// numeric renders the alerts' values as %g (100 and 100.0 alike).
	numeric := func(t *testing.T, alerts []string) []string {
		out := make([]string, len(alerts))
		for i, a := range alerts {
			f := strings.Fields(a)
			v, err := strconv.ParseFloat(f[2], 64)
			if err != nil {
				t.Fatalf("alert %q: %v", a, err)
			}
			f[2] = fmt.Sprintf("%g", v)
			out[i] = strings.Join(f, " ")
		}
		return out
	}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			sent = nil
			g := newRulesRig(t, kind, 1, RuleTimeProcessing, nil, nil)
			for _, id := range ids {
				g.rule(id, rules[id], 0)
			}
			send := func(g *rulesRig, id int, ts int64) {
				t.Helper()
				a := amount(id)
				v, _ := strconv.ParseFloat(a, 64)
				tag := []string{"a", "b", "c"}[id%3]
				sent = append(sent, rec{ts: ts, v: v, tag: tag})
				g.send(modelRec{id: id, ts: ts, g: "g", tag: tag, amount: a})
				if got, w := numeric(t, g.alerts()), want(id, ts); !slices.Equal(got, w) {
					t.Fatalf("record %d at %d: alerts\n%s\nwant\n%s", id, ts, strings.Join(got, "\n"), strings.Join(w, "\n"))
				}
			}
			for i := range 60 {
				send(g, i, 10_000+int64(i)*11) // pane 10 s
			}
			// 60 records: 3 doubles (0.25 at 7, 27, 47); the integers' sum
			// (100.0 routed as 100) in one input; max 100; min -20; the
			// tags once each (in first-seen order).
			intSum := 0
			for i := range 60 {
				if a := amount(i); a != "0.25" {
					n, _ := strconv.ParseFloat(a, 64)
					intSum += int(n)
				}
			}
			wantIn := map[string]string{
				"sum": fmt.Sprintf("n=60 [%d 0.25 0.25 0.25]", intSum),
				"avg": fmt.Sprintf("n=60 [%d 0.25 0.25 0.25]", intSum),
				"max": "n=60 [100]",
				"min": "n=60 [-20]",
				"cd":  `n=60 ["a" "b" "c"]`,
			}
			if got := summarySlices(t, g); !maps.Equal(got, wantIn) {
				t.Fatalf("slices %v\nwant %v", got, wantIn)
			}
			// A restore at parallelism 2, records in the restored pane and
			// the next, then the watermark expires pane 10 s.
			routerState, err := g.router.SnapshotBroadcastState()
			if err != nil {
				t.Fatal(err)
			}
			g = newRulesRig(t, kind, 2, RuleTimeProcessing, snapshotRules(t, g, 2), routerState)
			send(g, 60, 10_999)
			send(g, 61, 11_500)
			send(g, 62, 10_100) // late, into pane 10 s
			g.watermark(12_500) // pane 10 s ends at 10 s + 2 s
			sent = slices.DeleteFunc(sent, func(r rec) bool { return r.ts < 11_000 })
			send(g, 63, 11_600)
			if got := g.entries(); got["sum"] != 1 || got["max"] != 1 || got["cd"] != 1 {
				t.Fatalf("slices after the watermark %v, want one per rule", got)
			}
		})
	}
}

// TestRuleSliceFoldFormat: a slice whose inputs were folded is written
// under version byte ruleSliceFolded (a binary before the pre-aggregation
// refuses it instead of counting one record per input); one with an
// input per record, as every slice before, is written as version 1 byte
// for byte, and both read back equal; an integer sum that would leave
// int64 is kept as a second input.
func TestRuleSliceFoldFormat(t *testing.T) {
	enc := func(s ruleSlice) []byte {
		b, err := ruleSliceSerializer{}.Append(nil, s)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ruleSliceSerializer{}.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if back.N != s.N || !slices.EqualFunc(back.In, s.In, bytes.Equal) {
			t.Fatalf("decoded %+v, want %+v", back, s)
		}
		return b
	}
	fold := func(fn AggregateFn, ins ...string) ruleSlice {
		var s ruleSlice
		for _, in := range ins {
			s.N++
			s.fold(fn, []byte(in))
		}
		return s
	}
	one := fold(AggSum, "5")
	if b := enc(one); b[0] != ruleStateV1 {
		t.Fatalf("unfolded slice written as version %d, want %d", b[0], ruleStateV1)
	}
	legacy := ruleSlice{N: 3, In: [][]byte{[]byte("5"), []byte("7"), []byte("5")}}
	if b := enc(legacy); b[0] != ruleStateV1 {
		t.Fatalf("a slice of one input per record written as version %d, want %d", b[0], ruleStateV1)
	}
	folded := fold(AggSum, "5", "7", "1.5", "-2")
	if got := fmt.Sprintf("%s", folded.In); got != "[10 1.5]" {
		t.Fatalf("folded sum inputs %s, want [10 1.5]", got)
	}
	b := enc(folded)
	if b[0] != ruleSliceFolded {
		t.Fatalf("folded slice written as version %d, want %d", b[0], ruleSliceFolded)
	}
	b[0] = 3
	if _, err := (ruleSliceSerializer{}).Decode(b); err == nil {
		t.Fatal("slice version 3 decoded")
	}
	if got := fmt.Sprintf("%s", fold(AggSum, "9223372036854775807", "1", "2").In); got != "[9223372036854775807 3]" {
		t.Fatalf("overflowing sum inputs %s, want [9223372036854775807 3]", got)
	}
	// Folding into a slice of one input per record (restored from a
	// checkpoint before the pre-aggregation) keeps its value.
	for _, tc := range []struct {
		fn   AggregateFn
		in   string
		want string
	}{
		{AggMax, "6", "[7]"},
		{AggMax, "8", "[8]"},
		{AggMin, "5.0", "[5]"},
		{AggMin, "4", "[4]"},
		{AggSum, "1", "[6 7 5]"},
		{AggCountDistinct, "7", "[5 7 5]"},
		{AggCountDistinct, "9", "[5 7 5 9]"},
	} {
		s := legacy
		s.In = slices.Clone(legacy.In)
		s.N++
		s.fold(tc.fn, []byte(tc.in))
		if got := fmt.Sprintf("%s", s.In); got != tc.want {
			t.Errorf("%s: fold %s into %s: %s, want %s", tc.fn, tc.in, legacy.In, got, tc.want)
		}
	}
}

// TestAppendAlertFromHeadEqualsJSON: an alert written from the envelope
// head's cached parts is byte for byte the one appendAlertJSON computes
// (names and ids needing escapes, <, > and &, groups shorter or longer
// than group_by, emit or none, hopping and sliding windows).
func TestAppendAlertFromHeadEqualsJSON(t *testing.T) {
	for i, tc := range []struct {
		rule, when string
		fn         AggregateFn
		groupBy    []string
		group      []string
		emit       string
		slice      int64
	}{
		{"big-spender", "> 500", AggSum, []string{"payee_id", "currency"}, []string{`"p7"`, `"EUR"`}, `{"n":1}`, 0},
		{`r"q\<&>é`, "<= 2.5", AggMax, []string{`a"b`, "<x>"}, []string{`1`, `{"k":[1,2]}`}, "", 3600000},
		{"c", "> 6", AggCount, nil, nil, "", 0},
		{"d", "> 4", AggCountDistinct, []string{"g"}, []string{`"x"`, `"extra"`}, `"e"`, 1},
		{"e", "< 0", AggAvg, []string{"g", "h"}, []string{`"x"`}, "", 0},
	} {
		h := &envelopeHead{Rule: tc.rule, Fn: tc.fn, AlertWhen: tc.when, GroupBy: tc.groupBy, WindowMs: 7200000, SliceMs: tc.slice}
		h.setAlertParts()
		e := &ruleEnvelope{Rule: h.Rule, Fn: h.Fn, AlertWhen: h.AlertWhen, GroupBy: h.GroupBy, WindowMs: h.WindowMs, SliceMs: h.SliceMs,
			Record: []byte(`{"id":1,"amount":612.5}`), head: h}
		for _, g := range tc.group {
			e.Group = append(e.Group, []byte(g))
		}
		if tc.emit != "" {
			e.Emit = []byte(tc.emit)
		}
		for _, ts := range []int64{1_700_000_000_000, -5, 0} {
			got := appendAlert([]byte("x"), e, []byte("612.5"), ts)
			want := appendAlertJSON([]byte("x"), e, []byte("612.5"), ts)
			if !bytes.Equal(got, want) {
				t.Errorf("case %d ts %d: alert\n%s\nwant\n%s", i, ts, got, want)
			}
		}
	}
}

// TestRuleSummarySlicesRelative: the slices a summary holds are written
// as ruleSliceRel (links as distances from their own time: a summary of
// a max key with 4 slices a second apart is less than two thirds of what
// version 1's absolute links made it) and read back equal, also beside
// older slices still in version 1's bytes (a summary restored from a
// checkpoint before ruleSliceRel, whose Raw older slices are written back
// as they are); the map's slice serializer refuses a ruleSliceRel slice.
func TestRuleSummarySlicesRelative(t *testing.T) {
	const t0 = int64(1_700_000_000_000)
	mk := func(k int64, prev, next bool) *ruleSlice {
		s := &ruleSlice{WindowMs: 2_678_400_000, N: 1, In: [][]byte{[]byte("42")}, InDeque: true}
		if prev {
			s.Prev, s.HasPrev, s.DPrev, s.HasDPrev = k-1000, true, k-1000, true
		}
		if next {
			s.Next, s.HasNext, s.DNext, s.HasDNext = k+1000, true, k+1000, true
		}
		return s
	}
	w := ruleWindow{Shape: `["max","amount",["key"]]`, Fn: AggMax, WindowMs: 2_678_400_000, Slices: 4, Head: t0, Tail: t0 + 3000,
		First: t0, N: 4, DFront: t0, DBack: t0 + 3000, DLen: 4, TailSlice: mk(t0+3000, true, false)}
	for i := range 3 {
		k := t0 + int64(i)*1000
		w.Older = append(w.Older, inlineSlice{K: k, S: mk(k, i > 0, true)})
	}
	b, err := ruleWindowSerializer{}.Append(nil, w)
	if err != nil {
		t.Fatal(err)
	}
	if n := ruleWindowSizeHint(&w); n != len(b) {
		t.Fatalf("size hint %d, written %d", n, len(b))
	}
	abs := 0 // the same slices in version 1's layout
	for _, s := range append([]*ruleSlice{w.TailSlice}, w.Older[0].S, w.Older[1].S, w.Older[2].S) {
		v1, _ := ruleSliceSerializer{}.Append(nil, *s)
		abs += len(v1)
	}
	rel := 0
	for _, s := range []struct {
		s *ruleSlice
		k int64
	}{{w.TailSlice, w.Tail}, {w.Older[0].S, w.Older[0].K}, {w.Older[1].S, w.Older[1].K}, {w.Older[2].S, w.Older[2].K}} {
		rel += ruleSliceSizeAt(s.s, s.k)
	}
	if 3*rel >= 2*abs {
		t.Fatalf("summary slices %d bytes, version 1 %d: want less than two thirds", rel, abs)
	}
	check := func(b []byte) {
		t.Helper()
		got, err := ruleWindowSerializer{}.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(*got.TailSlice) != fmt.Sprint(*w.TailSlice) {
			t.Fatalf("newest slice %+v, want %+v", *got.TailSlice, *w.TailSlice)
		}
		for i, o := range got.Older {
			s, err := o.slice()
			if err != nil {
				t.Fatal(err)
			}
			if o.K != w.Older[i].K || fmt.Sprint(*s) != fmt.Sprint(*w.Older[i].S) {
				t.Fatalf("older slice %d: %d %+v, want %d %+v", i, o.K, *s, w.Older[i].K, *w.Older[i].S)
			}
		}
	}
	check(b)
	// Older slices in version 1's bytes (Raw), as a restored summary
	// holds them, are written back as they are and read the same.
	old := w
	old.Older = nil
	for _, o := range w.Older {
		raw, _ := ruleSliceSerializer{}.Append(nil, *o.S)
		if raw[0] != ruleStateV1 {
			t.Fatalf("map slice version %d, want %d", raw[0], ruleStateV1)
		}
		old.Older = append(old.Older, inlineSlice{K: o.K, Raw: raw})
	}
	b2, err := ruleWindowSerializer{}.Append(nil, old)
	if err != nil {
		t.Fatal(err)
	}
	check(b2)
	if _, err := (ruleSliceSerializer{}).Decode(appendSliceAt(nil, w.TailSlice, w.Tail)); err == nil {
		t.Fatal("the map's serializer decoded a summary's slice")
	}
}
