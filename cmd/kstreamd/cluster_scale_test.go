package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/source"
)

// The cluster acceptance tests of issue 13 (docs/scale-out.md) on daemons
// of the built binary and a broker in a process of its own.

// countsLSO returns the sum of the last stable offsets of the counts
// topic's partitions.
func countsLSO(t *testing.T, adm *kadm.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lso, err := adm.ListCommittedOffsets(ctx, "counts")
	if err == nil {
		err = lso.Error()
	}
	if err != nil {
		return -1
	}
	var sum int64
	lso.Each(func(o kadm.ListedOffset) { sum += o.Offset })
	return sum
}

// TestClusterScaleOutAndKill: three daemons run the two stages of a keyed
// count as 12 units per stage over an input of 2 partitions. Every daemon
// holds 4 units of each stage (the job scales past the input's partition
// count) and each unit is held by exactly one daemon, by its log and its
// newest HEAD. The daemon holding the stage-0 unit that reads input
// partition 0 is killed with -9 while records flow: its units move to the
// two survivors, the output's last stable offsets advance again, and the
// daemon restarted under its member id rejoins and gets units. The oracle
// holds (checkOracle).
// It runs on the filesystem store and on an S3 server the test starts.
func TestClusterScaleOutAndKill(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) { t.Parallel(); clusterScaleOutAndKill(t, kind) })
	}
}

func clusterScaleOutAndKill(t *testing.T, kind string) {
	b := startTestBroker(t, map[string]int{"clicks": 2, "counts": 4})
	const units, users, perUser = 12, 6, 30
	phase := users * perUser / 3
	c := newCluster(t, clusterJob{Units: units, Store: kind}, b.addr)
	prod := newClient(t, b.addr)
	send := func(from, to int) {
		for i := from; i < to; i++ {
			produce(t, prod, clickRecord(i, users))
		}
	}
	send(0, phase)
	for _, m := range []string{"a", "b", "c"} {
		c.start(m)
	}
	var by map[string][]string
	if !testkit.Poll(2*time.Minute, func() bool {
		var ok bool
		by, ok = c.held()
		return ok && len(by["a"]) == 2*units/3 && len(by["b"]) == 2*units/3 && len(by["c"]) == 2*units/3 &&
			len(committedCounts(t, b.addr)) >= phase
	}) {
		t.Fatalf("the units never spread 8/8/8 with the first phase committed: %v\n%s", by, c.logs())
	}
	t.Logf("held: %v", by)
	for m, us := range by {
		perStage := map[byte]int{}
		for _, u := range us {
			perStage[u[0]]++
		}
		if perStage['0'] != units/3 || perStage['1'] != units/3 {
			t.Errorf("daemon %s holds %v, want %d units of each stage", m, us, units/3)
		}
	}

	// The daemon holding the source unit of input partition 0.
	var srcUnit string
	for u := range units {
		if slices.Contains(source.PartitionsFor("clicks", 2, u, units), 0) {
			srcUnit = fmt.Sprintf("0/%d", u)
		}
	}
	victim := c.owners()[srcUnit]
	if victim == "" {
		t.Fatalf("no daemon holds source unit %s", srcUnit)
	}
	adm := kadm.NewClient(newClient(t, b.addr))
	atKill := countsLSO(t, adm)
	paced := producePaced(t, prod, phase, 10, 200*time.Millisecond, func(i, j int) []*kgo.Record {
		var out []*kgo.Record
		for k := i; k < j; k++ {
			out = append(out, clickRecord(phase+k, users))
		}
		return out
	})
	c.kill(victim)
	if !testkit.Poll(2*time.Minute, func() bool {
		var ok bool
		by, ok = c.held()
		return ok
	}) {
		t.Fatalf("%s's units never moved to the survivors: %v\n%s", victim, by, c.logs())
	}
	t.Logf("after killing %s (holding %s): %v", victim, srcUnit, by)
	if len(by[victim]) != 0 {
		t.Fatalf("the killed daemon %s still holds %v", victim, by[victim])
	}
	paced.wait(t, time.Minute)
	if !testkit.Poll(2*time.Minute, func() bool { return countsLSO(t, adm) > atKill }) {
		t.Fatalf("the output's last stable offsets never advanced past %d after the move\n%s", atKill, c.logs())
	}

	// The killed daemon restarts under its member id and gets units again.
	c.start(victim)
	if !testkit.Poll(2*time.Minute, func() bool {
		var ok bool
		by, ok = c.held()
		return ok && len(by[victim]) > 0
	}) {
		t.Fatalf("the restarted daemon %s never got units: %v\n%s", victim, by, c.logs())
	}
	send(2*phase, 3*phase)
	if !testkit.Poll(2*time.Minute, func() bool { return len(committedCounts(t, b.addr)) >= users*perUser }) {
		t.Fatalf("the output never held %d records\n%s", users*perUser, c.logs())
	}
	c.checkOracle(users, perUser)
}

// TestClusterStartRefusals: a daemon refuses to start with a message
// naming the values (exit 1; 2 for a config error) when its unit count
// differs from the one the job's repartition topics were created with (on
// a fresh store), when it differs from the one the job's HEAD chains in
// the store were written with (on a broker that never saw the job), and
// when the sink's transaction timeout is not above (tolerable_failures + 1)
// x (checkpoints.interval + checkpoints.timeout) + cluster.session_timeout +
// cluster.rebalance_timeout + cluster.takeover_timeout.
// The running daemon keeps its units. It runs on the filesystem store and
// on an S3 server the test starts.
func TestClusterStartRefusals(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) { t.Parallel(); clusterStartRefusals(t, kind) })
	}
}

func clusterStartRefusals(t *testing.T, kind string) {
	b := startTestBroker(t, map[string]int{"clicks": 2, "counts": 4})
	c := newCluster(t, clusterJob{Units: 4, Store: kind}, b.addr)
	a := c.start("a")
	if !testkit.Poll(time.Minute, func() bool { by, ok := c.held(); return ok && len(by["a"]) == 8 }) {
		t.Fatalf("a never held the 8 units:\n%s", a.out.String())
	}
	fresh := startTestBroker(t, map[string]int{"clicks": 2, "counts": 4})
	refuse := func(job clusterJob, store, broker string) (int, string) {
		t.Helper()
		dir := t.TempDir()
		path := filepath.Join(dir, "job.yaml")
		if err := os.WriteFile(path, []byte(job.config(dir, store, broker, testkit.FreeAddr(t), "z")), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runBinaryEnv(t, c.env, "run", "--config", path)
		return code, stdout + stderr
	}
	for _, tc := range []struct {
		name   string
		job    clusterJob
		store  string // the cluster.store section
		broker string
		code   int
		want   string
	}{
		{"units against the topics", clusterJob{Units: 6}, c.emptyStoreYAML(), b.addr, 1,
			"job: repartition topic clicks-1-repartition has 4 partitions, cluster.units is 6"},
		{"units against the HEAD chains", clusterJob{Units: 6}, c.storeYAML, fresh.addr, 1,
			"job: the store holds the HEAD chains of 4 units of stage 0, cluster.units is 6"},
		{"transaction timeout", clusterJob{Units: 4, TxnTimeout: "26s"}, c.storeYAML, b.addr, 2,
			"sinks[0].transaction_timeout: 26s must exceed (checkpoints.tolerable_failures 3 + 1) x (checkpoints.interval 200ms + checkpoints.timeout 10s) + cluster.session_timeout 6s + cluster.rebalance_timeout 20s + cluster.takeover_timeout 10s = 1m16.8s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := refuse(tc.job, tc.store, tc.broker)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, output:\n%s\nwant exit %d naming %q", code, out, tc.code, tc.want)
			}
		})
	}
	if by, ok := c.held(); !ok || len(by["a"]) != 8 || a.exited() {
		t.Errorf("after the refusals a holds %v (every unit once: %v, exited: %v), want the 8 units", by, ok, a.exited())
	}
}
