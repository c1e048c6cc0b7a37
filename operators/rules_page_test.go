package operators

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// pageEntries counts RulesPageState's entries and the slices they hold
// over g's subtasks.
func pageEntries(t *testing.T, g *rulesRig) (pages, slicesIn int) {
	t.Helper()
	for _, op := range g.evals {
		err := state.ApplyToAllKeys(op.backend, RulesPageState, func(_ []byte, s state.MapState[int64, rulePage]) error {
			for e, err := range s.Entries() {
				if err != nil {
					return err
				}
				pages++
				slicesIn += len(e.Value.Slices)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return pages, slicesIn
}

// TestRulesSpillWritesOnePage: a key's ninth slice moves the eight its
// summary held out of it as ONE page (RulesPageState), not eight entries
// of RulesSliceState; the next slice displaced by a copy in time order
// goes to RulesSliceState as before; a copy out of time order and the
// watermark read slices back from the page (sum, max and count_distinct
// over the page's slices, exact against the brute-force model); expiry
// empties the page and removes it; on both backends, across a restore at
// another parallelism. On f2a2eb3 (no pages) the spill wrote 8 slice
// entries.
func TestRulesSpillWritesOnePage(t *testing.T) {
	rules := []modelRule{
		{id: "s", fn: "sum", of: "amount", window: 1000, grouped: true},
		{id: "m", fn: "max", of: "amount", window: 1000, grouped: true},
		{id: "d", fn: "count_distinct", of: "tag", window: 1000, grouped: true},
	}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 1, RuleTimeProcessing, nil, nil)
			for _, r := range rules {
				g.rule(r.id, r.json(), 0)
			}
			model := &bruteWindows{rules: rules, held: map[string][]modelRec{}}
			var want, got []string
			id := 0
			send := func(ts int64, amount int) {
				x := modelRec{id: id, ts: ts, g: "g", tag: fmt.Sprintf("t%d", id%3), amount: fmt.Sprint(amount), value: float64(amount)}
				id++
				want = append(want, model.record(x)...)
				c := &sliceCollector{}
				if err := g.router.ProcessElement(g.ctx, runtime.Record{Value: x.json(), Format: runtime.FormatJSON, Timestamp: time.UnixMilli(ts)}, c); err != nil {
					t.Fatal(err)
				}
				g.evaluate(c.recs)
			}
			for i := range maxInlineSlices {
				send(1000+int64(10*i), 9-i) // max falls: every slice stays in max's deque
			}
			if p, _ := pageEntries(t, g); p != 0 || len(mapSlices(t, g)) != 0 {
				t.Fatalf("%d pages, slices in the map %v before the ninth slice, want none", p, mapSlices(t, g))
			}
			send(1090, 1) // the ninth: the summary keeps the newest only
			if p, n := pageEntries(t, g); p != len(rules) || n != len(rules)*maxInlineSlices {
				t.Fatalf("%d pages holding %d slices after the ninth slice, want %d holding %d", p, n, len(rules), len(rules)*maxInlineSlices)
			}
			if m := mapSlices(t, g); len(m) != 0 {
				t.Fatalf("slices in RulesSliceState %v after the spill, want none (all in pages)", m)
			}
			send(1100, 1) // in time order: the displaced newest goes to the map alone
			m := mapSlices(t, g)
			for _, n := range m {
				if n != 1 {
					t.Fatalf("slices in RulesSliceState %v, want 1 per key", m)
				}
			}
			if len(m) != len(rules) {
				t.Fatalf("slices in RulesSliceState %v, want 1 for each of %d keys", m, len(rules))
			}
			send(1035, 20) // out of time order: links into the page's slices
			got = append(got, g.alerts()...)
			mi, sp := inlineStats(t, g)
			if mi != 1 || sp != len(rules) {
				t.Fatalf("inline %d, spilled keys %d, want 1 and %d", mi, sp, len(rules))
			}
			routerState, err := g.router.SnapshotBroadcastState()
			if err != nil {
				t.Fatal(err)
			}
			g = newRulesRig(t, kind, 2, RuleTimeProcessing, snapshotRules(t, g, 2), routerState)
			g.offset = int64(len(rules))
			checkKeyHints(t, g)
			send(1200, 3)
			g.watermark(2045) // 1000..1030 and 1035 expire: pages lose slices
			model.watermark(2045)
			inlineStats(t, g)
			send(1210, 4)
			g.watermark(5000) // all expire: pages removed
			model.watermark(5000)
			if p, n := pageEntries(t, g); p != 0 || n != 0 {
				t.Fatalf("%d pages holding %d slices after every slice expired, want none", p, n)
			}
			if m := mapSlices(t, g); len(m) != 0 {
				t.Fatalf("slices in RulesSliceState %v after every slice expired", m)
			}
			got = append(got, g.alerts()...)
			slices.Sort(got)
			slices.Sort(want)
			if len(want) == 0 || !slices.Equal(got, want) {
				t.Fatalf("%d alerts, want %d; %s", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

// TestRulePageFormat: rulePage round trips with decoded slices and with a
// summary's raw slice bytes (both the relative layout and version 1's),
// and refuses bad bytes.
func TestRulePageFormat(t *testing.T) {
	a := ruleSlice{WindowMs: 1000, N: 2, In: [][]byte{[]byte("7"), []byte("8")}, Prev: 90, HasPrev: true, Next: 130, HasNext: true}
	b := ruleSlice{WindowMs: 1000, N: 1, In: [][]byte{[]byte(`"x"`)}, Prev: 100, HasPrev: true, DPrev: 100, HasDPrev: true, InDeque: true}
	v1, err := ruleSliceSerializer{}.Append(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	p := rulePage{Slices: []inlineSlice{
		{K: 100, S: &a},
		{K: 130, Raw: appendSliceAt(nil, &b, 130)},
		{K: 1 << 40, Raw: v1},
	}}
	enc, err := rulePageSerializer{}.Append(nil, p)
	if err != nil {
		t.Fatal(err)
	}
	if enc[0] != rulePageVersion {
		t.Fatalf("version byte %d", enc[0])
	}
	d, err := rulePageSerializer{}.Decode(enc)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Slices) != 3 {
		t.Fatalf("%d slices", len(d.Slices))
	}
	for i, want := range []ruleSlice{a, b, b} {
		if d.Slices[i].K != p.Slices[i].K {
			t.Fatalf("slice %d at %d, want %d", i, d.Slices[i].K, p.Slices[i].K)
		}
		s, err := d.Slices[i].slice()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*s, want) {
			t.Fatalf("slice %d = %+v, want %+v", i, *s, want)
		}
	}
	if !p.Slices[1].inDeque() || !p.Slices[2].inDeque() || p.Slices[0].inDeque() || !d.Slices[1].inDeque() {
		t.Fatal("inDeque wrong")
	}
	again, err := rulePageSerializer{}.Append(nil, d)
	if err != nil || !bytes.Equal(again, enc) {
		t.Fatalf("re-encoded %x, %v; want %x", again, err, enc)
	}
	enc[0] = 9 // a slice's bytes in reused buffers must not change the decoded page
	if s, _ := d.Slices[1].slice(); !reflect.DeepEqual(*s, b) {
		t.Fatal("decoded page shares the input buffer")
	}
	for _, bad := range []rulePage{
		{Slices: []inlineSlice{{K: 5, S: &a}, {K: 5, S: &b}}},
		{Slices: []inlineSlice{{K: 5}}},
	} {
		if _, err := (rulePageSerializer{}).Append(nil, bad); err == nil {
			t.Fatalf("Append(%+v) did not fail", bad)
		}
	}
	enc[0] = rulePageVersion
	for n := range len(enc) {
		if _, err := (rulePageSerializer{}).Decode(enc[:n]); err == nil {
			t.Fatalf("Decode of %d of %d bytes did not fail", n, len(enc))
		}
	}
	if _, err := (rulePageSerializer{}).Decode([]byte{2, 1, 0, 1, 1}); err == nil || !strings.Contains(err.Error(), "format version 2") {
		t.Fatalf("version 2: %v", err)
	}
}

// TestRuleWindowFormatV5: a summary listing pages is written as format
// version 5 and round trips (with and without older slices, inline
// distinct counts); without pages the bytes are the earlier versions'
// (4 with older slices, 2 without); truncations fail.
func TestRuleWindowFormatV5(t *testing.T) {
	tail := ruleSlice{WindowMs: 1000, N: 1, In: [][]byte{[]byte("3")}, Prev: 1900, HasPrev: true}
	older := ruleSlice{WindowMs: 1000, N: 1, In: [][]byte{[]byte("4")}, Next: 2000, HasNext: true, Prev: 1000, HasPrev: true}
	base := ruleWindow{Shape: "sh", Fn: AggSum, WindowMs: 1000, Slices: 12, Head: 1000, Tail: 2000, First: 1000, N: 12, Ints: number{Int: 40}, TailSlice: &tail}
	for _, tc := range []struct {
		name    string
		w       ruleWindow
		version byte
	}{
		{"pages", func() ruleWindow { w := base; w.Pages = []pageRef{{K: 1000, Hi: 1070}, {K: 1040, Hi: 1800}}; return w }(), ruleStateV5},
		{"pages+older", func() ruleWindow {
			w := base
			w.Older = []inlineSlice{{K: 1900, S: &older}}
			w.Pages = []pageRef{{K: 1000, Hi: 1000}}
			return w
		}(), ruleStateV5},
		{"pages+distinct", func() ruleWindow {
			w := base
			w.Fn, w.DInline, w.DVals = AggCountDistinct, true, []distinctVal{{V: `"a"`, N: 2}}
			w.Pages = []pageRef{{K: 1010, Hi: 1020}}
			return w
		}(), ruleStateV5},
		{"older", func() ruleWindow { w := base; w.Older = []inlineSlice{{K: 1900, S: &older}}; return w }(), ruleStateV4},
		{"plain", base, ruleStateV2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc, err := ruleWindowSerializer{}.Append(nil, tc.w)
			if err != nil {
				t.Fatal(err)
			}
			if enc[0] != tc.version {
				t.Fatalf("version %d, want %d", enc[0], tc.version)
			}
			if n := ruleWindowSizeHint(&tc.w); n != len(enc) {
				t.Fatalf("size hint %d, written %d", n, len(enc))
			}
			d, err := ruleWindowSerializer{}.Decode(enc)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(d.Pages, tc.w.Pages) {
				t.Fatalf("pages %v, want %v", d.Pages, tc.w.Pages)
			}
			for i := range d.Older {
				if _, err := d.Older[i].slice(); err != nil {
					t.Fatal(err)
				}
				d.Older[i].S, d.Older[i].Raw = tc.w.Older[i].S, nil
			}
			if !reflect.DeepEqual(d, tc.w) {
				t.Fatalf("decoded %+v, want %+v", d, tc.w)
			}
			for n := 1; n < len(enc); n++ {
				if _, err := (ruleWindowSerializer{}).Decode(enc[:n]); err == nil {
					t.Fatalf("Decode of %d of %d bytes did not fail", n, len(enc))
				}
			}
		})
	}
	w := base
	w.TailSlice = nil
	w.Pages = []pageRef{{K: 1000, Hi: 1000}}
	if _, err := (ruleWindowSerializer{}).Append(nil, w); err == nil {
		t.Fatal("pages without the newest slice written")
	}
}
