package operators

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/state"
)

// hintRuleC counts a group's copies in 1000 ms and alerts from the second.
const hintRuleC = `{"id":"c","group_by":["g"],"aggregate":{"fn":"count"},"window":"1000ms","alert_when":">= 2"}`

// hintKeys is the number of keys with a summary over every subtask of g,
// read from the state, and the number of hashes the subtasks' hints hold.
func hintKeys(t *testing.T, g *rulesRig) (stored, hashes int) {
	t.Helper()
	for _, f := range g.fns {
		err := state.ApplyToAllValueKeys(f.backend, RulesAggState, func(_ []byte, s state.ValueState[ruleWindow]) error {
			_, ok, err := s.Value()
			if ok {
				stored++
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		hashes += len(f.win.hint.n)
	}
	return stored, hashes
}

// sendRound sends one copy per group g<from>..g<to-1> at ts (record ids
// base+i) and returns the alerts it wants: the count n for every group at
// or above 2.
func sendRound(g *rulesRig, from, to int, ts int64, base, n int) []string {
	g.t.Helper()
	var want []string
	for i := from; i < to; i++ {
		g.send(modelRec{id: base + i, ts: ts, g: fmt.Sprintf("g%d", i), amount: "1"})
		if n >= 2 {
			want = append(want, fmt.Sprintf(`c {"g":"g%d"} %d %d..%d tx%d`, i, n, ts-1000, ts, base+i))
		}
	}
	slices.Sort(want)
	return want
}

func checkAlerts(t *testing.T, g *rulesRig, what string, want []string) {
	t.Helper()
	got := g.alerts()
	if !slices.Equal(got, want) {
		n := min(len(got), 3)
		t.Fatalf("%s: %d alerts, want %d; first %s", what, len(got), len(want), strings.Join(got[:n], " | "))
	}
}

// TestRulesKeyHintRescaleAndOlderCheckpoint: the key hint is rebuilt from
// whatever state a subtask restores, so no key's window is lost when key
// groups move: 200 keys go 1 -> 2 -> 4 -> 1 subtasks with a copy between
// the restores, and every copy after a restore counts every copy before
// (exact alerts, values 2, 3, 4, 5). Then the rule is deleted (every hint
// empties) and the job restarts from the OLDER checkpoint taken at
// parallelism 1 (each key's count 1, the rule present): the hint holds the
// keys again and the next copy counts 2 on every key; both backends.
func TestRulesKeyHintRescaleAndOlderCheckpoint(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			const keys = 200
			g := newRulesRig(t, kind, 1, RuleTimeProcessing, nil, nil)
			g.rule("c", hintRuleC, 0)
			checkAlerts(t, g, "first copies", sendRound(g, 0, keys, 10_000, 0, 1))
			checkKeyHints(t, g)
			older := snapshotRules(t, g, 2)
			olderRouter, err := g.router.SnapshotBroadcastState()
			if err != nil {
				t.Fatal(err)
			}
			for n, p := range []int{2, 4, 1} {
				rs, err := g.router.SnapshotBroadcastState()
				if err != nil {
					t.Fatal(err)
				}
				var restores []*Restore
				if n == 0 {
					restores = older
				} else {
					restores = snapshotRules(t, g, p)
				}
				g = newRulesRig(t, kind, p, RuleTimeProcessing, restores, rs)
				checkKeyHints(t, g)
				if s, h := hintKeys(t, g); s != keys || h != keys {
					t.Fatalf("parallelism %d: %d keys with a summary, %d hashes in the hints, want %d and %d", p, s, h, keys, keys)
				}
				if p > 1 {
					for i, f := range g.fns {
						if len(f.win.hint.n) == 0 {
							t.Fatalf("parallelism %d: subtask %d restored no key", p, i)
						}
					}
				}
				ts := 10_001 + int64(n)
				checkAlerts(t, g, fmt.Sprintf("after the restore at parallelism %d", p), sendRound(g, 0, keys, ts, 1000*(n+1), n+2))
				checkKeyHints(t, g)
			}
			// The rule's deletion empties the hint; a restart from the
			// older checkpoint brings its keys back.
			g.rule("c", "", 0)
			if s, h := hintKeys(t, g); s != 0 || h != 0 {
				t.Fatalf("after the deletion: %d keys with a summary, %d hashes, want 0 and 0", s, h)
			}
			g = newRulesRig(t, kind, 2, RuleTimeProcessing, older, olderRouter)
			checkKeyHints(t, g)
			if s, h := hintKeys(t, g); s != keys || h != keys {
				t.Fatalf("older checkpoint: %d keys with a summary, %d hashes, want %d and %d", s, h, keys, keys)
			}
			checkAlerts(t, g, "after the restart from the older checkpoint", sendRound(g, 0, keys, 10_010, 9000, 2))
			checkKeyHints(t, g)
		})
	}
}

// TestRulesKeyHintChurnReturnsToLiveKeys: the hint does not grow with the
// keys a long run has seen, only with those holding a summary. Over 2
// subtasks, 30 rounds 600 ms apart each send one copy to 100 groups, 50 of
// them new and 50 the previous round's (those alert with count 2, exact),
// then the watermark expires the previous round's slices: after every
// round the state holds exactly 100 keys and the hints exactly 100 hashes
// (150 and 150 before the watermark), though 1,550 keys went through; a
// last watermark leaves 0 and 0. Both backends.
func TestRulesKeyHintChurnReturnsToLiveKeys(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 2, RuleTimeProcessing, nil, nil)
			g.rule("c", hintRuleC, 0)
			const rounds = 30
			for r := range rounds {
				ts := 10_000 + 600*int64(r)
				var want []string
				for i := 50 * r; i < 50*r+100; i++ {
					g.send(modelRec{id: 1000*r + i, ts: ts, g: fmt.Sprintf("g%d", i), amount: "1"})
					if r > 0 && i < 50*r+50 {
						want = append(want, fmt.Sprintf(`c {"g":"g%d"} 2 %d..%d tx%d`, i, ts-1000, ts, 1000*r+i))
					}
				}
				slices.Sort(want)
				checkAlerts(t, g, fmt.Sprintf("round %d", r), want)
				if r == 0 {
					continue
				}
				if s, h := hintKeys(t, g); s != 150 || h != 150 {
					t.Fatalf("round %d before the watermark: %d keys with a summary, %d hashes, want 150 and 150", r, s, h)
				}
				g.watermark(ts + 401) // the previous round's slices end at ts-600+1000
				if s, h := hintKeys(t, g); s != 100 || h != 100 {
					t.Fatalf("round %d: %d keys with a summary, %d hashes, want 100 and 100", r, s, h)
				}
				checkKeyHints(t, g)
			}
			g.watermark(1 << 40)
			if s, h := hintKeys(t, g); s != 0 || h != 0 {
				t.Fatalf("after the last watermark: %d keys with a summary, %d hashes, want 0 and 0", s, h)
			}
			checkKeyHints(t, g)
		})
	}
}

// TestRulesKeyHintRecreatedBetweenCheckpoints: within one checkpoint
// interval a key's summary is removed (its slice expires) and created
// again, and another key's is removed and not created again; the
// checkpoint then holds the re-created key only, and after the restore
// the hint holds exactly it: its next copy counts 2 (exact alert), the
// removed key's next copy starts over (no alert). Both backends, 1 -> 2
// subtasks.
func TestRulesKeyHintRecreatedBetweenCheckpoints(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 1, RuleTimeProcessing, nil, nil)
			g.rule("c", hintRuleC, 0)
			checkAlerts(t, g, "first copies", sendRound(g, 0, 2, 10_000, 0, 1))
			_ = snapshotRules(t, g, 1) // a checkpoint with g0 and g1
			g.watermark(11_001)        // both summaries go
			if s, h := hintKeys(t, g); s != 0 || h != 0 {
				t.Fatalf("after the expiry: %d keys with a summary, %d hashes, want 0 and 0", s, h)
			}
			checkAlerts(t, g, "g0 again", sendRound(g, 0, 1, 12_000, 100, 1)) // g0 re-created
			checkKeyHints(t, g)
			rs, err := g.router.SnapshotBroadcastState()
			if err != nil {
				t.Fatal(err)
			}
			g = newRulesRig(t, kind, 2, RuleTimeProcessing, snapshotRules(t, g, 2), rs)
			checkKeyHints(t, g)
			if s, h := hintKeys(t, g); s != 1 || h != 1 {
				t.Fatalf("after the restore: %d keys with a summary, %d hashes, want 1 and 1", s, h)
			}
			g.send(modelRec{id: 200, ts: 12_500, g: "g0", amount: "1"})
			g.send(modelRec{id: 201, ts: 12_500, g: "g1", amount: "1"})
			checkAlerts(t, g, "after the restore", []string{`c {"g":"g0"} 2 11500..12500 tx200`})
			checkKeyHints(t, g)
		})
	}
}
