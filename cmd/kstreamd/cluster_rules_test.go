package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// matcherPipeline is the reference job's shape-pair matcher (items keyed by
// colour, the rules broadcast) in cluster mode: the matcher runs in stage
// 1, after the exchange, each unit reading the rules topic from the offset
// in its own checkpoint.
const matcherPipeline = `sources:
  - name: items
    topic: items
  - name: rules
    topic: rules
    parallelism: 1
operators:
  - name: matcher
    type: shape_pair_matcher
    input: items
    key_by: color
    broadcast: rules
sinks:
  - name: matches
    input: matcher
    topic: matches
    delivery: exactly-once
    transaction_timeout: 2m
`

// TestClusterRuleDeletedDuringMove: two daemons run the shape-pair matcher
// as 2 units per stage with two rules, sq (square then circle) and tr
// (triangle then square). The daemon holding the stage-1 unit of colour c
// is killed with -9 and rule sq is deleted while the unit moves to the
// other daemon, which restores the unit's broadcast state with the unit's
// own rules offset and so reads the deletion: after the move, colour c's
// square then circle match nothing, its triangle then square match tr. The
// read_committed output holds exactly the matches of the test's evaluation,
// each once: before the move sq for c and for colour d (of the other unit),
// after it tr for both.
// It runs on the filesystem store and on an S3 server the test starts.
func TestClusterRuleDeletedDuringMove(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) { t.Parallel(); clusterRuleDeletedDuringMove(t, kind) })
	}
}

func clusterRuleDeletedDuringMove(t *testing.T, kind string) {
	b := startTestBroker(t, map[string]int{"items": 2, "rules": 1, "matches": 4})
	const units = 2
	c := newCluster(t, clusterJob{Units: units, Pipeline: matcherPipeline, Output: "matches", Store: kind}, b.addr)
	// Colours c and d of stage-1 units 0 and 1.
	colors := map[int]string{}
	for _, col := range []string{"red", "blue", "green", "yellow", "black", "white", "pink", "grey"} {
		u := keygroup.OperatorIndex(keygroup.Assign([]byte(col), 24), 24, units)
		if colors[u] == "" {
			colors[u] = col
		}
	}
	cc, dc := colors[0], colors[1]
	if cc == "" || dc == "" {
		t.Fatalf("no colour for each unit: %v", colors)
	}
	prod := newClient(t, b.addr)
	produce(t, prod, rule("sq", "square", "circle"), rule("tr", "triangle", "square"))
	produce(t, prod, item(0, cc, "square"), item(1, cc, "circle"), item(2, dc, "square"), item(3, dc, "circle"))
	c.start("a")
	c.start("b")
	matches := func() []string {
		return matchStrings(t, testkit.ReadTopicWith(t, []kgo.Opt{kgo.SeedBrokers(b.addr)}, kgo.ReadCommitted(), "matches", 30*time.Second))
	}
	first := []string{fmt.Sprintf("sq %s 0,1", cc), fmt.Sprintf("sq %s 2,3", dc)}
	slices.Sort(first)
	var by map[string][]string
	var got []string
	if !testkit.Poll(2*time.Minute, func() bool {
		var ok bool
		by, ok = c.held()
		got = matches()
		return ok && len(by["a"]) == units && len(by["b"]) == units && len(got) >= 2
	}) {
		t.Fatalf("the units never spread 2/2 with the first matches committed: %v, matches %v\n%s", by, got, c.logs())
	}
	if !slices.Equal(got, first) {
		t.Fatalf("matches before the move %v, want %v", got, first)
	}
	unit := "1/0"
	victim, survivor := c.owners()[unit], ""
	for _, m := range []string{"a", "b"} {
		if m != victim {
			survivor = m
		}
	}
	c.kill(victim)
	produce(t, prod, rule("sq", "", ""))
	if !testkit.Poll(2*time.Minute, func() bool {
		var ok bool
		by, ok = c.held()
		return ok && len(by[survivor]) == 2*units
	}) {
		t.Fatalf("unit %s never moved from %s to %s: %v\n%s", unit, victim, survivor, by, c.logs())
	}
	produce(t, prod, item(4, cc, "triangle"), item(5, cc, "square"), item(6, cc, "circle"),
		item(7, dc, "triangle"), item(8, dc, "square"), item(9, dc, "circle"))
	want := append(slices.Clone(first), fmt.Sprintf("tr %s 4,5", cc), fmt.Sprintf("tr %s 7,8", dc))
	slices.Sort(want)
	if !testkit.Poll(2*time.Minute, func() bool { got = matches(); return len(got) >= len(want) }) {
		t.Fatalf("matches %v, want %v\n%s", got, want, c.logs())
	}
	// The last records are processed: nothing more arrives.
	if !slices.Equal(got, want) {
		t.Errorf("matches %v, want %v (after the move, rule sq is deleted)", got, want)
	}
	c.checkExchange(10, "id")
	if l := logLines(c.procs[survivor], "restoring"); len(l) == 0 || !strings.Contains(c.procs[survivor].out.String(), "unit running") {
		t.Errorf("the survivor restored no unit")
	}
}
