package main

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// counts returns the counts of ids in m, in the order of ids.
func counts(ids []string, m map[string]int) []int {
	var out []int
	for _, id := range ids {
		out = append(out, m[id])
	}
	return out
}

// TestClusterScaleOneThreeTwo: the keyed count of 6 units per stage runs
// on one daemon, then three (b and c join), then two (c stops with
// SIGTERM), while records flow. At each rebalance the units that did not
// move (held by the same daemon before and after) are not rebuilt and not
// restored (no "unit running" or "restoring" line for them) and not fenced
// (InitProducerId requests per transactional id, counted by the broker: a
// takeover fences all the ids of the moved unit, and none of any other
// unit), while every moved unit's ids are fenced; no daemon logs a failed
// commit, so no other unit's transaction was aborted. The
// oracle holds.
// It runs on the filesystem store and on an S3 server the test starts.
func TestClusterScaleOneThreeTwo(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) { t.Parallel(); clusterScaleOneThreeTwo(t, kind) })
	}
}

func clusterScaleOneThreeTwo(t *testing.T, kind string) {
	b := startTestBroker(t, map[string]int{"clicks": 2, "counts": 4})
	const units, users, perUser = 6, 6, 30
	phase := users * perUser / 3
	c := newCluster(t, clusterJob{Units: units, Store: kind}, b.addr)
	prod := newClient(t, b.addr)
	paced := func(from int) *pacedProducer {
		return producePaced(t, prod, phase, 4, 150*time.Millisecond, func(i, j int) []*kgo.Record {
			var out []*kgo.Record
			for k := i; k < j; k++ {
				out = append(out, clickRecord(from+k, users))
			}
			return out
		})
	}
	for i := range phase {
		produce(t, prod, clickRecord(i, users))
	}
	c.start("a")
	spread := func(want map[string]int) map[string][]string {
		t.Helper()
		var by map[string][]string
		if !testkit.Poll(2*time.Minute, func() bool {
			var ok bool
			by, ok = c.held()
			if !ok || len(by) != len(want) {
				return false
			}
			for m, n := range want {
				if len(by[m]) != n {
					return false
				}
			}
			return true
		}) {
			t.Fatalf("the units never spread as %v: %v\n%s", want, by, c.logs())
		}
		t.Logf("held: %v", by)
		return by
	}
	type logState struct {
		running, restoring map[string]map[string]int // member -> unit -> lines
		inits              map[string]int
	}
	snapshot := func() logState {
		s := logState{running: map[string]map[string]int{}, restoring: map[string]map[string]int{}, inits: b.inits()}
		for m, p := range c.procs {
			s.running[m], s.restoring[m] = unitLogs(p, "unit running"), unitLogs(p, "restoring")
		}
		return s
	}
	// checkMoves checks a rebalance from before (held by) to after.
	checkMoves := func(step string, byBefore, byAfter map[string][]string, s0, s1 logState) {
		t.Helper()
		owner := func(by map[string][]string) map[string]string {
			o := map[string]string{}
			for m, us := range by {
				for _, u := range us {
					o[u] = m
				}
			}
			return o
		}
		o0, o1 := owner(byBefore), owner(byAfter)
		moved := 0
		for _, u := range slices.Sorted(maps.Keys(o1)) {
			m := o1[u]
			switch f := fenced(u, s0.inits, s1.inits); {
			case o0[u] == m && f >= 2:
				t.Errorf("%s: unit %s stayed on %s but all its transactional ids %v were initialised again (a fence): InitProducerId %v before, %v after",
					step, u, m, unitTxnIDs(u), counts(unitTxnIDs(u), s0.inits), counts(unitTxnIDs(u), s1.inits))
			case o0[u] != m && f < 1:
				t.Errorf("%s: unit %s moved from %s to %s but not all its transactional ids %v were fenced: InitProducerId %v before, %v after",
					step, u, o0[u], m, unitTxnIDs(u), counts(unitTxnIDs(u), s0.inits), counts(unitTxnIDs(u), s1.inits))
			}
			if o0[u] != m {
				moved++
				continue
			}
			if s1.running[m][u] != s0.running[m][u] || s1.restoring[m][u] != s0.restoring[m][u] {
				t.Errorf("%s: unit %s stayed on %s but was rebuilt: %d -> %d \"unit running\", %d -> %d \"restoring\"", step, u, m,
					s0.running[m][u], s1.running[m][u], s0.restoring[m][u], s1.restoring[m][u])
			}
		}
		t.Logf("%s: %d units moved", step, moved)
	}

	one := spread(map[string]int{"a": 2 * units})
	s1 := snapshot()
	p := paced(phase)
	c.start("b")
	c.start("c")
	three := spread(map[string]int{"a": 2 * units / 3, "b": 2 * units / 3, "c": 2 * units / 3})
	s3 := snapshot()
	checkMoves("1 -> 3", one, three, s1, s3)
	p.wait(t, 2*time.Minute)

	p = paced(2 * phase)
	if code, _ := c.procs["c"].terminate(t, 30*time.Second); code != 0 {
		t.Errorf("c exited %d after SIGTERM, want 0", code)
	}
	c.stopped(c.procs["c"])
	two := spread(map[string]int{"a": units, "b": units})
	s2 := snapshot()
	checkMoves("3 -> 2", three, two, s3, s2)
	p.wait(t, 2*time.Minute)
	if !testkit.Poll(2*time.Minute, func() bool { return len(committedCounts(t, b.addr)) >= users*perUser }) {
		t.Fatalf("the output never held %d records\n%s", users*perUser, c.logs())
	}
	c.checkOracle(users, perUser)
	for _, p := range c.old {
		if strings.Contains(p.out.String(), "commit failed") {
			t.Errorf("a daemon logged a failed commit:\n%s", p.out.String())
		}
	}
}
