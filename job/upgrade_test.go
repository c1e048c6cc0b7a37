package job_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
)

// upgradeJobYAML is unitsYAML (two stages of 2 units: the keyed count by
// user, its sink) with a filter in stage 0 that keeps every click.
var upgradeJobYAML = strings.Replace(strings.Replace(unitsYAML, "units: 4", "units: 2", 1), `  - name: per_user
    type: keyed_count
    input: clicks`, `  - name: valid
    type: filter
    input: clicks
    params:
      condition: i >= 0
  - name: per_user
    type: keyed_count
    input: valid`, 1)

// TestUpgradeRestoresFromHeads is item 7's acceptance test of issue 28:
// the job runs with its graph; the daemon is stopped and started with an
// operator's param changed in a way that keeps the state (the filter's
// condition): its graph fingerprint differs, it restores every unit from
// the HEADs the old graph wrote (no unit starts empty: the counts go on),
// its HEADs record the new graph from then on, and the read_committed
// output holds, per key, exactly the counts 1..n. Then a daemon whose
// graph changed the count's type (state-incompatible) is refused: it gets
// no units and is not ready, naming the operator, what changed, and the
// savepoint as the way forward.
func TestUpgradeRestoresFromHeads(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", upgradeJobYAML, kfake.SeedTopics(2, "clicks", "counts"))
	next := planStages(t, "next.yaml", strings.Replace(upgradeJobYAML, "condition: i >= 0", "condition: i > -1", 1))
	if next.Fingerprint == f.st.Fingerprint {
		t.Fatal("the changed param left the fingerprint as it was")
	}
	const users, perUser, session = 5, 20, 6 * time.Second
	committed := func() []*kgo.Record {
		return testkit.ReadTopicWith(t, f.opts, kgo.ReadCommitted(), "counts", 10*time.Second)
	}
	runUntilCommitted(t, f, "a", session, users, perUser/2)
	latest := func(stage, unit int) checkpoint.Head {
		t.Helper()
		hd, err := checkpoint.Heads{Store: f.set.Store, Prefix: checkpoint.UnitPrefix("clicks", stage, unit)}.Latest(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return hd
	}
	before := map[[2]int]checkpoint.Head{} // each unit's newest HEAD, written by the old graph
	for s := range 2 {
		for u := range 2 {
			hd := latest(s, u)
			if hd.Fingerprint != f.st.Fingerprint || hd.CheckpointID == 0 {
				t.Fatalf("unit %d/%d: newest HEAD %+v, want a checkpoint of the old graph", s, u, hd)
			}
			before[[2]int{s, u}] = hd
		}
	}

	// The upgrade: the same daemon with the changed param.
	up := startLiveMember(t, next, f.set, f.opts, "a", session)
	produceClicks(t, f.opts, perUser/2, perUser, users)
	if !testkit.Poll(2*time.Minute, func() bool { return len(committed()) >= users*perUser }) {
		t.Fatalf("output holds %d records, want %d\n%s", len(committed()), users*perUser, up.logs.String())
	}
	checkUserCounts(t, committed(), users, perUser)
	if ready, why := up.mem.Readiness(); !ready {
		t.Errorf("the upgraded daemon is not ready: %s", why)
	}
	if l := up.logs.String(); !strings.Contains(l, `msg="upgrade: the store's HEADs record another graph whose state this graph restores"`) ||
		!strings.Contains(l, "store_graph="+f.st.Fingerprint[:12]+" graph="+next.Fingerprint[:12]) {
		t.Errorf("the upgrade is not logged:\n%s", up.logs.String())
	}
	// Every unit restored a checkpoint the old graph wrote, and its HEADs
	// record the new graph from then on. A unit whose partition got no
	// new clicks completes its first checkpoint after its claim
	// independently of the output, so it may still be under way when the
	// output is complete (seen under load): the HEADs are waited for.
	if n := strings.Count(up.logs.String(), "msg=restoring "); n != 4 {
		t.Errorf("%d unit restores logged, want 4 (every unit from its HEADs):\n%s", n, up.logs.String())
	}
	testkit.Poll(2*time.Minute, func() bool {
		for s := range 2 {
			for u := range 2 {
				if hd, was := latest(s, u), before[[2]int{s, u}]; hd.Seq <= was.Seq || hd.CheckpointID <= was.CheckpointID || hd.Fingerprint != next.Fingerprint {
					return false
				}
			}
		}
		return true
	})
	for s := range 2 {
		for u := range 2 {
			hd, was := latest(s, u), before[[2]int{s, u}]
			if hd.Seq <= was.Seq || hd.CheckpointID <= was.CheckpointID || hd.Fingerprint != next.Fingerprint {
				t.Errorf("unit %d/%d: newest HEAD %+v after the upgrade, want one past HEAD-%d (checkpoint %d) recording graph %.12s", s, u, hd, was.Seq, was.CheckpointID, next.Fingerprint)
			}
		}
	}
	up.stop(t)

	// A state-incompatible change: the count is another operator type.
	wrong := planStages(t, "wrong.yaml", strings.Replace(upgradeJobYAML, "type: keyed_count", "type: count_window_average", 1))
	w := startLiveMember(t, wrong, f.set, f.opts, "a", session)
	want := fmt.Sprintf(`this daemon runs graph %.12s, the store's HEADs record graph %.12s`, wrong.Fingerprint, next.Fingerprint)
	ready, why := w.mem.Readiness()
	for _, part := range []string{want, `it gets no units`,
		`"per_user" (uid per_user): operator type count_window_average, was keyed_count`,
		`take a savepoint of the running job (kstreamd savepoint, or stop with savepoint) and start the new graph from it (kstreamd run --from-savepoint DIR)`} {
		if ready || !strings.Contains(why, part) {
			t.Errorf("the incompatible daemon's readiness: %v %q, want not ready with %q", ready, why, part)
		}
	}
	time.Sleep(2 * time.Second) // a rebalance's time: it still holds nothing
	if u := w.mem.Status(context.Background()).Units; len(u) > 0 {
		t.Errorf("the incompatible daemon holds units %v", u)
	}
	if n := strings.Count(w.logs.String(), `msg="member excluded: it gets no units"`); n != 1 {
		t.Errorf("the exclusion was logged %d times, want once:\n%s", n, w.logs.String())
	}
}

// TestClusterStopFinishedByUpgrade: a stop-with-savepoint of a job whose
// HEADs the old graph wrote, left without a savepoint (its drainer died),
// is finished by the next daemon that starts, which runs the new pipeline
// file. The drain claims the units as a member does: a daemon whose graph
// cannot restore the old graph's state is refused naming the operator
// (ErrIncompatibleUpgrade), writing nothing, and the request stays
// pending; one whose graph is a state-compatible upgrade drains and
// gathers (its HEADs then record the new graph), and the savepoint
// restores into a single process with exactly the counts after it.
func TestClusterStopFinishedByUpgrade(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", upgradeJobYAML, kfake.SeedTopics(2, "clicks", "counts", "single"))
	next := planStages(t, "next.yaml", strings.Replace(upgradeJobYAML, "condition: i >= 0", "condition: i > -1", 1))
	wrong := planStages(t, "wrong.yaml", strings.Replace(upgradeJobYAML, "type: keyed_count", "type: count_window_average", 1))
	const users = 5
	committed := func(topic string) []*kgo.Record {
		return testkit.ReadTopicWith(t, f.opts, kgo.ReadCommitted(), topic, 10*time.Second)
	}
	runUntilCommitted(t, f, "a", 30*time.Second, users, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	requestStop(t, ctx, f, "gone")
	keysBefore, err := f.set.Store.List(ctx, "clicks/units/")
	if err != nil {
		t.Fatal(err)
	}
	mc := job.MemberConfig{GroupID: "clicks-cluster", MemberID: "b", SessionTimeout: 30 * time.Second, RebalanceTimeout: 20 * time.Second, RevokeTimeout: 10 * time.Second}
	err = job.RunMember(ctx, wrong, f.set, job.Deps{ClientOpts: f.opts, Registerer: prometheus.NewRegistry()}, mc)
	if !errors.Is(err, job.ErrIncompatibleUpgrade) || !strings.Contains(err.Error(), `"per_user" (uid per_user): operator type count_window_average, was keyed_count`) {
		t.Fatalf("an incompatible daemon finishing the stop: %v, want ErrIncompatibleUpgrade naming per_user", err)
	}
	if keys, _ := f.set.Store.List(ctx, "clicks/units/"); fmt.Sprint(keys) != fmt.Sprint(keysBefore) {
		t.Fatalf("the refused drain wrote to the units' namespaces: %v, was %v", keys, keysBefore)
	}

	if err := job.RunMember(ctx, next, f.set, job.Deps{ClientOpts: f.opts, Registerer: prometheus.NewRegistry()}, mc); err != nil {
		t.Fatalf("the upgraded daemon finishing the stop: %v", err)
	}
	done := stopRecord(t, ctx, f)
	if done.By != "gone" || filepath.Dir(done.Savepoint) != f.dir+"/savepoints" {
		t.Fatalf("recorded stop %+v, want gone's with a savepoint under %s", done, f.dir+"/savepoints")
	}
	for s := range 2 {
		for u := range 2 {
			hd, err := checkpoint.Heads{Store: f.set.Store, Prefix: checkpoint.UnitPrefix("clicks", s, u)}.Latest(ctx)
			if err != nil || hd.Fingerprint != next.Fingerprint || hd.CheckpointID == 0 {
				t.Errorf("unit %d/%d: newest HEAD %+v (%v), want the drain's final checkpoint recording graph %.12s", s, u, hd, err, next.Fingerprint)
			}
		}
	}

	produceClicks(t, f.opts, 4, 6, users)
	single := strings.Replace(strings.Replace(strings.Replace(upgradeJobYAML, "name: clicks\n", "name: single\n", 1),
		"topic: counts\n", "topic: single\n", 1), "  enabled: true\n", "  enabled: false\n", 1)
	cfg := parseConfig(t, "single.yaml", single)
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	set := cfg.Settings()
	set.CheckpointDir, set.StateDir, set.StateBackend = f.dir+"/single/chk", f.dir+"/single/state", "hashmap"
	runSingle(t, g, set, job.Deps{ClientOpts: f.opts, FromSavepoint: done.Savepoint}, func() bool { return len(committed("single")) >= users*2 })
	checkCountsFrom(t, "a single process from the savepoint the upgraded daemon gathered", committed("single"), users, 5, 6)
}
