package main

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// dedupPipeline is a dedup keyed by id (every id is twice in the input:
// clickRecord) writing the first record of each id to counts.
const dedupPipeline = `sources:
  - name: clicks
    topic: clicks
operators:
  - name: first
    type: dedup
    input: clicks
    key_by: id
    params:
      ttl: 1h
sinks:
  - name: counts
    input: first
    topic: counts
    delivery: exactly-once
    transaction_timeout: 2m
`

// TestClusterZombie: two daemons a and b hold 2 units each (one of each
// stage). With the input paused (so a's next epochs are empty) a is
// stopped with SIGSTOP until b holds every unit (b claimed a's, by their
// newest HEADs), then resumed: the zombie writes no HEAD after the move
// (every HEAD that is not a takeover claim follows a HEAD of its own
// writer) and deletes no file of the units it lost (the job retains every
// checkpoint, so no owner deletes any) nor changes any. Then b, the new owner, is killed
// with -9; a takes every unit over and the records produced afterwards are
// processed: the oracle holds. Once with a keyed count, once with a dedup.
// It runs on the filesystem store and on an S3 server the test starts.
func TestClusterZombie(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) { t.Parallel(); clusterZombie(t, kind) })
	}
}

func clusterZombie(t *testing.T, kind string) {
	for _, tc := range []struct {
		name     string
		pipeline string
	}{
		{"keyed count", ""},
		{"dedup", dedupPipeline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := startTestBroker(t, map[string]int{"clicks": 2, "counts": 4})
			const units, users, perUser = 2, 4, 20
			total, phase := users*perUser, users*perUser/2
			c := newCluster(t, clusterJob{Units: units, Pipeline: tc.pipeline, Retained: 100000, Store: kind}, b.addr)
			want := func(n int) int { // output records of the first n input records
				if tc.pipeline != "" {
					return n / 2
				}
				return n
			}
			prod := newClient(t, b.addr)
			send := func(from, to int) {
				for i := from; i < to; i++ {
					produce(t, prod, clickRecord(i, users))
				}
			}
			send(0, phase)
			c.start("a")
			c.start("b")
			var by map[string][]string
			if !testkit.Poll(2*time.Minute, func() bool {
				var ok bool
				by, ok = c.held()
				return ok && len(by["a"]) == units && len(by["b"]) == units && len(committedCounts(t, b.addr)) == want(phase)
			}) {
				t.Fatalf("the units never spread 2/2 with the first phase committed: %v\n%s", by, c.logs())
			}
			moved := slices.Clone(by["a"])

			// The input is paused: a's epochs are empty. a is stopped until b
			// holds every unit.
			c.signal("a", syscall.SIGSTOP)
			var owners map[string]string
			if !testkit.Poll(2*time.Minute, func() bool {
				owners = c.owners()
				for _, o := range owners {
					if o != "b" {
						return false
					}
				}
				return true
			}) {
				c.signal("a", syscall.SIGCONT)
				t.Fatalf("b never claimed a's units %v: owners %v\n%s", moved, owners, c.logs())
			}
			before := map[string]map[string]string{}
			for _, u := range moved {
				before[u] = c.files(u)
				if len(before[u]) == 0 {
					t.Errorf("unit %s: no file in the store before the zombie resumed", u)
				}
				// A chk-<n> no HEAD names is an upload in flight or
				// abandoned (the zombie's, stopped before its HEAD): the
				// owner's retention deletes it. What must stay is what the
				// HEADs commit.
				named := map[string]bool{}
				for _, h := range c.heads(u) {
					named[fmt.Sprintf("chk-%d", h.CheckpointID)] = true
				}
				for f := range before[u] {
					if top, _, _ := strings.Cut(f, "/"); strings.HasPrefix(top, "chk-") && !named[top] {
						delete(before[u], f)
					}
				}
			}
			c.signal("a", syscall.SIGCONT)
			// The zombie notices: each of its units stops (lost, or its next
			// HEAD exists), and the group settles with every unit held once.
			// Which of the two did not happen is said apart (a loaded
			// machine's slow rebalance is not a zombie that goes on).
			stopped, settled, by := 0, false, map[string][]string{}
			if !testkit.Poll(2*time.Minute, func() bool {
				stopped = 0
				for _, l := range logLines(c.procs["a"], "unit stopped") {
					if l.Stage != nil && slices.Contains(moved, fmt.Sprintf("%d/%d", *l.Stage, *l.Unit)) {
						stopped++
					}
				}
				by, settled = c.held()
				return settled && stopped >= len(moved)
			}) {
				if stopped < len(moved) {
					t.Fatalf("the zombie stopped %d of its units %v\n%s", stopped, moved, c.logs())
				}
				t.Fatalf("the zombie stopped its units %v, but the group did not settle with every unit held once (running by owner: %v)\n%s", moved, by, c.logs())
			}
			for _, m := range []string{"units lost", "unit taken over by another claim: stopped"} {
				t.Logf("zombie log %q: %d lines", m, len(logLines(c.procs["a"], m)))
			}
			c.checkChains()
			for _, u := range moved {
				now := c.files(u)
				for f, sum := range before[u] {
					switch got, ok := now[f]; {
					case !ok:
						t.Errorf("unit %s: file %s deleted after the zombie resumed", u, f)
					case got != sum:
						t.Errorf("unit %s: file %s changed after the zombie resumed", u, f)
					}
				}
			}

			// The new owner is killed; a takes every unit over.
			c.kill("b")
			if !testkit.Poll(2*time.Minute, func() bool {
				var ok bool
				by, ok = c.held()
				return ok && len(by["a"]) == 2*units
			}) {
				t.Fatalf("a never took every unit over from the killed b: %v\n%s", by, c.logs())
			}
			send(phase, total)
			if !testkit.Poll(2*time.Minute, func() bool { return len(committedCounts(t, b.addr)) >= want(total) }) {
				t.Fatalf("the output never held %d records\n%s", want(total), c.logs())
			}
			c.checkChains()
			if tc.pipeline != "" {
				c.checkDedupOracle(total)
			} else {
				c.checkOracle(users, perUser)
			}
			if s := c.procs["a"].out.String(); strings.Contains(s, `"level":"ERROR"`) && !strings.Contains(s, "taken over") {
				t.Logf("a logged errors:\n%s", s)
			}
		})
	}
}
