package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// TestClusterTakeover is issue 13's multi-daemon acceptance test: two
// daemons (processes of the built binary) run the two stages of a keyed
// count as 8 units on one broker, with exactly-once; a third daemon with
// another graph joins the group, gets no units and is not ready saying
// why (the store's HEADs record another graph); one of the two is
// killed with -9 while records flow and the other takes its units over
// (claims the next HEAD of each, commits the restored transactions, fences
// those units' transactional ids and no other). The read_committed output
// holds, per key, exactly the counts 1..n; the repartition topic holds
// each input record once, in the partition of its key group's unit. It
// runs on the filesystem store and on an S3 server the test starts (each
// daemon staging its checkpoints in its own data_dir).
func TestClusterTakeover(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) { clusterTakeover(t, kind) })
	}
}

func clusterTakeover(t *testing.T, kind string) {
	tb := startTestBroker(t, map[string]int{"clicks": 4, "counts": 4})
	broker := tb.addr
	snapshot := tb.inits
	cl := newCluster(t, clusterJob{Units: 4, Store: kind}, broker)
	start := func(member, key string) *proc {
		cl.job.Key = key
		return cl.start(member)
	}
	const users, perUser = 6, 40
	total := users * perUser
	prod := newClient(t, broker, kgo.DefaultProduceTopic("clicks"))
	send := func(from, to int) {
		for i := from; i < to; i++ {
			produce(t, prod, &kgo.Record{Key: fmt.Appendf(nil, "%d", i), Value: fmt.Appendf(nil, `{"user":"u%d","page":"p%d","i":%d}`, i%users, i%3, i)})
		}
	}
	opts := []kgo.Opt{kgo.SeedBrokers(broker)}
	// committed counts the read_committed output; a read that times out on
	// a loaded machine counts -1 and is logged, and the Poll tries again.
	committed := func() int {
		recs, err := testkit.TryReadTopic(opts, kgo.ReadCommitted(), "counts", 10*time.Second)
		if err != nil {
			t.Logf("read counts: %v (trying again)", err)
			return -1
		}
		return len(recs)
	}

	send(0, total/2)
	a := start("a", "user")
	b := start("b", "user")
	var owners map[string]string
	if !testkit.Poll(2*time.Minute, func() bool {
		owners = cl.owners()
		n := map[string]int{}
		for _, o := range owners {
			n[o]++
		}
		return n["a"] == 4 && n["b"] == 4 && committed() >= total/2
	}) {
		t.Fatalf("units never spread 4/4 over a and b with the first half committed: owners %v\na:\n%s\nb:\n%s", owners, a.out.String(), b.out.String())
	}
	// Each daemon holds 2 units of each stage.
	for s := range 2 {
		n := map[string]int{}
		for u := range 4 {
			n[owners[fmt.Sprintf("%d/%d", s, u)]]++
		}
		if n["a"] != 2 || n["b"] != 2 {
			t.Errorf("stage %d units: %v, want 2 on a and 2 on b", s, n)
		}
	}
	// Each daemon is ready, and its /api/v1/job names it and lists every
	// member's units as the HEADs do.
	for _, p := range []*proc{a, b} {
		if !testkit.Poll(time.Minute, func() bool { code, _ := httpGet("http://" + p.metrics + "/readyz"); return code == 200 }) {
			t.Errorf("%s /readyz never answered 200", p.dir)
		}
	}
	var view struct {
		Member  string `json:"member"`
		Members []struct {
			Member string `json:"member"`
			Units  []struct {
				Stage int `json:"stage"`
				Unit  int `json:"unit"`
			} `json:"units"`
		} `json:"members"`
	}
	code, body := httpGet("http://" + b.metrics + "/api/v1/job")
	if err := json.Unmarshal([]byte(body), &view); code != 200 || err != nil {
		t.Fatalf("GET /api/v1/job: %d %s (%v)", code, body, err)
	}
	fromAPI := map[string]string{}
	for _, m := range view.Members {
		for _, u := range m.Units {
			fromAPI[fmt.Sprintf("%d/%d", u.Stage, u.Unit)] = m.Member
		}
	}
	if view.Member != "b" || fmt.Sprint(fromAPI) != fmt.Sprint(owners) {
		t.Errorf("b's /api/v1/job: member %q, units %v; want member b, units %v", view.Member, fromAPI, owners)
	}

	// A daemon with another graph joins the group: it gets no units.
	c := start("c", "page")
	if !testkit.Poll(time.Minute, func() bool { return strings.Contains(c.out.String(), "units assigned") }) {
		t.Fatalf("c never finished joining:\n%s", c.out.String())
	}
	if strings.Contains(c.out.String(), "unit running") {
		t.Errorf("the daemon with another graph runs units:\n%s", c.out.String())
	}
	// It is not ready and says why: the store's HEADs record another graph.
	if code, body := httpGet("http://" + c.metrics + "/readyz"); code != 503 || !strings.Contains(body, "the store's HEADs record graph") || !strings.Contains(body, "it gets no units") {
		t.Errorf("c's /readyz: %d %q, want 503 naming the store's graph", code, body)
	}
	if got := cl.owners(); fmt.Sprint(got) != fmt.Sprint(owners) {
		t.Errorf("owners after c joined: %v, want %v", got, owners)
	}

	// kill -9 a while records flow; b takes a's units over.
	spread, before := owners, snapshot()
	cl.kill("a")
	send(total/2, total)
	if !testkit.Poll(2*time.Minute, func() bool {
		owners = cl.owners()
		for _, o := range owners {
			if o != "b" {
				return false
			}
		}
		return committed() >= total
	}) {
		t.Fatalf("b never took every unit over with the whole output committed: owners %v, %d records\nb:\n%s", owners, committed(), b.out.String())
	}
	cl.checkOracle(users, perUser)
	// b fenced all the ids of the units it took from a, and none of the
	// units it held all along.
	after := snapshot()
	for s := range 2 {
		for u := range 4 {
			unit := fmt.Sprintf("%d/%d", s, u)
			switch f := fenced(unit, before, after); {
			case spread[unit] == "a" && f < 1:
				t.Errorf("unit %s moved from a to b but b never fenced all of %v (InitProducerId %v before the kill, %v after)", unit, unitTxnIDs(unit), counts(unitTxnIDs(unit), before), counts(unitTxnIDs(unit), after))
			case spread[unit] == "b" && f >= 2:
				t.Errorf("unit %s stayed on b but all of %v were initialised again (InitProducerId %v before the kill, %v after)", unit, unitTxnIDs(unit), counts(unitTxnIDs(unit), before), counts(unitTxnIDs(unit), after))
			}
		}
	}
	if strings.Contains(c.out.String(), "unit running") {
		t.Errorf("the daemon with another graph ran units after a was killed:\n%s", c.out.String())
	}
	if c.exited() || b.exited() {
		t.Errorf("a daemon the test did not kill exited: b %v, c %v", b.exited(), c.exited())
	}
}
