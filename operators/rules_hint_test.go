package operators

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/state"
)

// countingRuleAgg counts the summary reads of the keyed stage.
type countingRuleAgg struct {
	state.ValueState[ruleWindow]
	reads int
}

func (c *countingRuleAgg) Value() (ruleWindow, bool, error) {
	c.reads++
	return c.ValueState.Value()
}

// checkKeyHints fails unless every evaluator of g has its key hint on and
// the hint holds exactly one count per key with a summary in the state
// (nothing hidden, nothing left over).
func checkKeyHints(t *testing.T, g *rulesRig) {
	t.Helper()
	for i, f := range g.fns {
		h := f.win.hint
		if h == nil {
			t.Fatalf("subtask %d: key hint off", i)
		}
		want := map[uint64]uint32{}
		err := state.ApplyToAllValueKeys(f.backend, RulesAggState, func(_ []byte, s state.ValueState[ruleWindow]) error {
			_, ok, err := s.Value()
			if ok {
				want[h.hash(f.backend.CurrentKey())]++
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(h.n, want) {
			t.Fatalf("subtask %d: key hint holds %d hashes, the state %d keys with a summary", i, len(h.n), len(want))
		}
	}
}

// TestRulesKeyHintSkipsAbsentReads: a copy to a key without a summary
// reads no summary from the state (the per-subtask key hint says the key
// holds none); a copy to a key with one reads it and sees it, also after a
// restore (the hint is rebuilt from the restored state), after the
// watermark expired a key's slices, and after a deletion and re-add of the
// rule; the hint always equals the keys with a summary.
func TestRulesKeyHintSkipsAbsentReads(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			const rule = `{"id":"c","group_by":["g"],"aggregate":{"fn":"count"},"window":"1000ms","alert_when":">= 2"}`
			g := newRulesRig(t, kind, 1, RuleTimeProcessing, nil, nil)
			g.rule("c", rule, 0)
			cnt := &countingRuleAgg{ValueState: g.fns[0].win.agg}
			g.fns[0].win.agg = cnt
			send := func(from, to int, ts int64) {
				t.Helper()
				for i := from; i < to; i++ {
					g.send(modelRec{id: i, ts: ts, g: fmt.Sprintf("g%d", i), amount: "1"})
				}
			}
			send(0, 100, 10_000) // 100 new keys
			if cnt.reads != 0 {
				t.Fatalf("%d summary reads for 100 new keys, want 0", cnt.reads)
			}
			if n := len(g.alerts()); n != 0 {
				t.Fatalf("%d alerts after one copy per key, want 0", n)
			}
			checkKeyHints(t, g)
			send(0, 100, 10_001) // their second copy
			if cnt.reads != 100 {
				t.Fatalf("%d summary reads for 100 keys with a summary, want 100", cnt.reads)
			}
			if n := len(g.alerts()); n != 100 {
				t.Fatalf("%d alerts after two copies per key, want 100", n)
			}
			checkKeyHints(t, g)

			// A restore rebuilds the hint: the restored keys are read and
			// counted on, new ones are not read.
			routerState, err := g.router.SnapshotBroadcastState()
			if err != nil {
				t.Fatal(err)
			}
			g = newRulesRig(t, kind, 1, RuleTimeProcessing, snapshotRules(t, g, 1), routerState)
			checkKeyHints(t, g)
			cnt = &countingRuleAgg{ValueState: g.fns[0].win.agg}
			g.fns[0].win.agg = cnt
			send(50, 150, 10_002)
			if cnt.reads != 50 {
				t.Fatalf("%d summary reads after the restore, want 50 (keys g50..g99)", cnt.reads)
			}
			if n := len(g.alerts()); n != 50 {
				t.Fatalf("%d alerts after the restore, want 50 (third copies of g50..g99)", n)
			}
			checkKeyHints(t, g)

			// The watermark expires every slice: no key holds a summary,
			// so none is read again and a copy starts over.
			g.watermark(20_000)
			checkKeyHints(t, g)
			if n := len(g.fns[0].win.hint.n); n != 0 {
				t.Fatalf("key hint holds %d hashes after every slice expired, want 0", n)
			}
			cnt.reads = 0
			send(0, 10, 30_000)
			if cnt.reads != 0 || len(g.alerts()) != 0 {
				t.Fatalf("after expiry: %d reads, want 0, and no alert", cnt.reads)
			}

			// Deleting the rule removes its state (and the keys from the
			// hint); the re-added rule starts empty.
			g.rule("c", "", 0)
			checkKeyHints(t, g)
			if n := len(g.fns[0].win.hint.n); n != 0 {
				t.Fatalf("key hint holds %d hashes after the deletion, want 0", n)
			}
			g.rule("c", rule, 0)
			send(0, 10, 30_001)
			if cnt.reads != 0 || len(g.alerts()) != 0 {
				t.Fatalf("after re-add: %d reads, want 0, and no alert", cnt.reads)
			}
			send(0, 10, 30_002)
			if cnt.reads != 10 || len(g.alerts()) != 10 {
				t.Fatalf("after re-add, second copies: %d reads, want 10, and 10 alerts", cnt.reads)
			}
			checkKeyHints(t, g)
		})
	}
}

// TestRuleKeyHintSharedHash: two keys of one hash keep it until both
// summaries are gone.
func TestRuleKeyHintSharedHash(t *testing.T) {
	h := newRuleKeyHint()
	k := []byte(`["r","a"]`)
	h.add(k)
	h.add(k) // a second key of the same hash
	h.remove(k)
	if !h.mayHold(k) {
		t.Fatal("hash dropped while a second key holds a summary")
	}
	h.remove(k)
	if h.mayHold(k) || len(h.n) != 0 {
		t.Fatalf("hash kept after both summaries went: %v", h.n)
	}
}

// TestRulesKeyHintShapeChangeUnderKey: with rule_time event, a copy of a
// record before an update of the rule's aggregate (same group, same key)
// starts a slice of the old shape, and the next copy under the new shape
// replaces the key's state in place; the hint keeps exactly one count for
// the key, and the copy after sees the new state.
func TestRulesKeyHintShapeChangeUnderKey(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 1, RuleTimeEvent, nil, nil)
			g.rule("r", `{"id":"r","group_by":["payee_id"],"aggregate":{"fn":"count"},"window":"1h","alert_when":">= 100"}`, 5000)
			g.rule("r", `{"id":"r","group_by":["payee_id"],"aggregate":{"fn":"sum","of":"amount"},"window":"1h","alert_when":"> 15"}`, 9000)
			g.rulesTime(time.UnixMilli(20_000))
			g.tx(testTx{ID: 1, Payee: "p1", Amount: 10, TS: 7000})  // count shape
			g.tx(testTx{ID: 2, Payee: "p1", Amount: 10, TS: 10000}) // sum shape: the count slice goes
			checkKeyHints(t, g)
			if n := len(g.fns[0].win.hint.n); n != 1 {
				t.Fatalf("key hint holds %d hashes, want 1", n)
			}
			g.tx(testTx{ID: 3, Payee: "p1", Amount: 10, TS: 11000})
			want := []string{`r {"payee_id":"p1"} 20 -3589000..11000 tx3`}
			if got := g.alerts(); !slices.Equal(got, want) {
				t.Fatalf("alerts %q, want %q", got, want)
			}
			checkKeyHints(t, g)
		})
	}
}
