package job_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
)

// putUnit writes hd as the HEAD of job clicks' unit stage/unit in store
// and the files (each "x") in the unit's namespace, failing the test on an
// error.
func putUnit(t *testing.T, ctx context.Context, store checkpoint.Store, stage, unit int, hd checkpoint.Head, files ...string) {
	t.Helper()
	prefix := checkpoint.UnitPrefix("clicks", stage, unit)
	if err := (checkpoint.Heads{Store: store, Prefix: prefix}).Create(ctx, hd); err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if err := store.Create(ctx, prefix+file, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClusterGC is item 7's gc acceptance test of issue 28: the job's
// graph has 2 stages of 2 units; a member of the group runs a graph of 3
// stages (a rolling change in progress), so stage 2's topic and
// namespaces are in use. Stale are exactly: the topics of stage 3 and of
// a role no graph has, the namespaces of stage 3 and of a unit beyond the
// unit count; a namespace outside every graph whose newest HEAD a graph in
// use wrote is kept, as are another job's topic and namespace. gc refuses
// while the member's graph has no record; it lists without removing;
// --delete removes exactly the listed ones (every file of the
// namespaces); a second run lists nothing.
func TestClusterGC(t *testing.T) {
	yaml := strings.Replace(unitsYAML, "units: 4", "units: 2", 1)
	f := newUnitFixture(t, "units.yaml", yaml, kfake.SeedTopics(2, "clicks", "counts"))
	three := planStages(t, "three.yaml", strings.Replace(threeStagesYAML, "units: 4", "units: 2", 1))
	ctx := context.Background()
	adm := newAdmin(t, f.opts)
	for _, topic := range []string{"clicks-1-repartition", "clicks-2-repartition", "clicks-3-repartition", "clicks-1-left-repartition",
		"clicks-units", "clicksx-3-repartition", "other-3-repartition", "clicks-x-repartition"} {
		if _, err := adm.CreateTopic(ctx, 2, -1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	store := f.set.Store
	put := func(stage, unit int, fp string, files ...string) {
		t.Helper()
		putUnit(t, ctx, store, stage, unit, checkpoint.Head{Seq: 1, CheckpointID: 1, Owner: "m", Fingerprint: fp, Units: 2}, files...)
	}
	put(0, 0, f.st.Fingerprint, "chk-1/_metadata")
	put(1, 1, f.st.Fingerprint, "chk-1/_metadata")
	put(2, 0, three.Fingerprint, "chk-1/_metadata")                                         // the member's graph's stage 2
	put(1, 2, "old", "chk-1/_metadata", "shared/a.sst")                                     // unit 2 of 2 units: stale
	put(3, 0, "old", "chk-1/_metadata", "chk-1/_claim")                                     // stage 3: stale
	put(3, 1, three.Fingerprint, "chk-1/_metadata")                                         // a graph in use wrote its newest HEAD: kept
	if err := store.Create(ctx, "clickstream/units/5/0/HEAD-1", []byte("{}")); err != nil { // another job
		t.Fatal(err)
	}

	// A member running the three-stage graph joins the group.
	bal := &job.UnitBalancer{Topic: "clicks-units", Stages: 3, Units: 2, Fingerprint: three.Fingerprint}
	cl, err := kgo.NewClient(append(f.opts, kgo.ConsumerGroup("clicks-cluster"), kgo.ConsumeTopics("clicks-units"),
		kgo.Balancers(bal), kgo.InstanceID("m3"))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if !testkit.Poll(30*time.Second, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		cl.PollRecords(pctx, 1) // drive the group client
		cancel()
		groups, err := adm.DescribeGroups(ctx, "clicks-cluster")
		return err == nil && len(groups["clicks-cluster"].Members) == 1 && groups["clicks-cluster"].State == "Stable"
	}) {
		t.Fatal("the member never joined")
	}
	cfg := job.GCConfig{Stages: f.st, Store: store, ClientOpts: f.opts, GroupID: "clicks-cluster"}
	if _, err := job.ClusterGC(ctx, cfg); err == nil || !strings.Contains(err.Error(),
		fmt.Sprintf("member m3 of group clicks-cluster runs graph %.12s, which has no record in %s (clicks/graphs/%s.json): gc cannot tell what it uses; nothing is listed", three.Fingerprint, store, three.Fingerprint)) {
		t.Fatalf("gc with a member's graph unrecorded: %v", err)
	}
	if _, err := job.RecordGraph(ctx, store, three); err != nil {
		t.Fatal(err)
	}

	inUse := "graphs in use: " + strings.Join(slices.Sorted(slices.Values([]string{f.st.Fingerprint[:12], three.Fingerprint[:12]})), ", ")
	want := []job.GCItem{
		{Kind: "topic", Name: "clicks-1-left-repartition", Why: "stage 1 has no input role left (" + inUse + ")"},
		{Kind: "topic", Name: "clicks-3-repartition", Why: "stage 3 reads no such repartition topic (" + inUse + ")"},
		{Kind: "namespace", Name: "clicks/units/1/2/", Why: "no graph in use has unit 2 of stage 1 (" + inUse + ")"},
		{Kind: "namespace", Name: "clicks/units/3/0/", Why: "no graph in use has stage 3 (" + inUse + ")"},
	}
	keysBefore, err := store.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := job.ClusterGC(ctx, cfg)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("gc lists %v (%v), want %v", got, err, want)
	}
	if keys, _ := store.List(ctx, ""); fmt.Sprint(keys) != fmt.Sprint(keysBefore) {
		t.Errorf("listing changed the store: %v, was %v", keys, keysBefore)
	}

	cfg.Delete = true
	if got, err := job.ClusterGC(ctx, cfg); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("gc --delete removed %v (%v), want %v", got, err, want)
	}
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range topics.Names() {
		if n != "clicks" && n != "counts" {
			names = append(names, n)
		}
	}
	if fmt.Sprint(names) != "[clicks-1-repartition clicks-2-repartition clicks-units clicks-x-repartition clicksx-3-repartition other-3-repartition]" {
		t.Errorf("topics after gc: %v", names)
	}
	keys, err := store.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, k := range keys {
		if strings.HasPrefix(k, "clicks/graphs/") {
			continue
		}
		left = append(left, k)
	}
	if want := "[clicks/units/0/0/HEAD-1 clicks/units/0/0/chk-1/_metadata clicks/units/1/1/HEAD-1 clicks/units/1/1/chk-1/_metadata " +
		"clicks/units/2/0/HEAD-1 clicks/units/2/0/chk-1/_metadata clicks/units/3/1/HEAD-1 clicks/units/3/1/chk-1/_metadata clickstream/units/5/0/HEAD-1]"; fmt.Sprint(left) != want {
		t.Errorf("store after gc:\n%v\nwant\n%v", left, want)
	}
	if got, err := job.ClusterGC(ctx, cfg); err != nil || len(got) != 0 {
		t.Errorf("a second gc: %v (%v), want nothing", got, err)
	}
}

// TestClusterGCStopPending: a stop-with-savepoint whose savepoint is not
// gathered yet (its drainer died, or drains now) needs every unit's HEAD
// of the stopped graph, which no member reports (the group is empty). gc
// with a pipeline file of another unit count refuses, naming the request,
// and removes nothing; once the savepoint is recorded (it is
// self-contained), the old namespaces are listed.
func TestClusterGCStopPending(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", strings.Replace(unitsYAML, "units: 4", "units: 2", 1), kfake.SeedTopics(2, "clicks", "counts"))
	ctx := context.Background()
	store := f.set.Store
	prefix := checkpoint.UnitPrefix("clicks", 1, 3) // unit 3 of the stopped 4-unit graph
	putUnit(t, ctx, store, 1, 3, checkpoint.Head{Seq: 1, CheckpointID: 7, Owner: "m", Fingerprint: "old", Units: 4}, "chk-7/_metadata")
	req := []byte(`{"requested":"2026-01-02T03:04:05Z","by":"m1","dir":"/sp"}`)
	if err := store.Create(ctx, "clicks/"+job.StopRequestKey, req); err != nil {
		t.Fatal(err)
	}
	if err := store.Create(ctx, "clicks/"+job.DrainerKey, req); err != nil {
		t.Fatal(err)
	}
	keysBefore, err := store.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := job.GCConfig{Stages: f.st, Store: store, ClientOpts: f.opts, GroupID: "clicks-cluster", Delete: true}
	got, err := job.ClusterGC(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "job clicks has a stop-with-savepoint pending (clicks/stop-with-savepoint in "+store.String()+
		", requested at 2026-01-02T03:04:05Z by m1, its savepoint under /sp not gathered yet)") {
		t.Fatalf("gc --delete with a stop pending: %v (%v), want refused naming the request", got, err)
	}
	if keys, _ := store.List(ctx, ""); fmt.Sprint(keys) != fmt.Sprint(keysBefore) {
		t.Fatalf("a refused gc changed the store: %v, was %v", keys, keysBefore)
	}

	if err := store.Create(ctx, "clicks/"+job.StoppedKey, []byte(`{"requested":"2026-01-02T03:04:05Z","by":"m1","dir":"/sp","savepoint":"/sp/savepoint-8-1"}`)); err != nil {
		t.Fatal(err)
	}
	cfg.Delete = false
	got, err = job.ClusterGC(ctx, cfg)
	if err != nil || len(got) != 1 || got[0].Name != prefix {
		t.Fatalf("gc once the savepoint is recorded: %v (%v), want exactly %s", got, err, prefix)
	}
}

// TestClusterGCUnitsChanged: the job's HEAD chains are of 4 units and
// nothing runs (the group is empty); gc with a pipeline file of 2 units,
// which RunMember refuses on this store (ErrUnitsChanged), refuses too and
// removes nothing: units 2 and 3 are the job's state, not stale.
func TestClusterGCUnitsChanged(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", strings.Replace(unitsYAML, "units: 4", "units: 2", 1), kfake.SeedTopics(2, "clicks", "counts"))
	ctx := context.Background()
	store := f.set.Store
	for s := range 2 {
		for u := range 4 {
			putUnit(t, ctx, store, s, u, checkpoint.Head{Seq: 1, CheckpointID: 3, Owner: "m", Fingerprint: "four", Units: 4}, "chk-3/_metadata")
		}
	}
	keysBefore, err := store.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := job.GCConfig{Stages: f.st, Store: store, ClientOpts: f.opts, GroupID: "clicks-cluster", Delete: true}
	got, err := job.ClusterGC(ctx, cfg)
	if !errors.Is(err, job.ErrUnitsChanged) || !strings.Contains(err.Error(), "the store holds the HEAD chains of 4 units of stage 0, cluster.units is 2") {
		t.Fatalf("gc --delete with a file of another unit count: %v (%v), want refused wrapping ErrUnitsChanged", got, err)
	}
	if keys, _ := store.List(ctx, ""); fmt.Sprint(keys) != fmt.Sprint(keysBefore) {
		t.Fatalf("a refused gc changed the store: %v, was %v", keys, keysBefore)
	}
}

// TestClusterGCStoredGraph: the job's HEADs were written by a graph of 3
// stages and no daemon runs; the pipeline file was changed to 2 stages
// (an incompatible change, to go through a savepoint the old graph's
// state is needed for). gc counts the graph the store's HEADs record as
// in use: it refuses while that graph has no record, and once it has one
// lists neither stage 2's namespaces nor its repartition topic.
func TestClusterGCStoredGraph(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", strings.Replace(unitsYAML, "units: 4", "units: 2", 1), kfake.SeedTopics(2, "clicks", "counts"))
	three := planStages(t, "three.yaml", strings.Replace(threeStagesYAML, "units: 4", "units: 2", 1))
	ctx := context.Background()
	adm := newAdmin(t, f.opts)
	for _, topic := range []string{"clicks-1-repartition", "clicks-2-repartition"} {
		if _, err := adm.CreateTopic(ctx, 2, -1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	store := f.set.Store
	for s := range 3 {
		for u := range 2 {
			putUnit(t, ctx, store, s, u, checkpoint.Head{Seq: 1, CheckpointID: 5, Owner: "m", Fingerprint: three.Fingerprint, Units: 2}, "chk-5/_metadata")
		}
	}
	keysBefore, err := store.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := job.GCConfig{Stages: f.st, Store: store, ClientOpts: f.opts, GroupID: "clicks-cluster", Delete: true}
	got, err := job.ClusterGC(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("the store's HEADs record graph %.12s (HEAD-1 of clicks/units/0/0/ in %s), which has no record (clicks/graphs/%s.json)", three.Fingerprint, store, three.Fingerprint)) {
		t.Fatalf("gc --delete with the stored graph unrecorded: %v (%v), want refused naming it", got, err)
	}
	if keys, _ := store.List(ctx, ""); fmt.Sprint(keys) != fmt.Sprint(keysBefore) {
		t.Fatalf("a refused gc changed the store: %v, was %v", keys, keysBefore)
	}
	if _, err := job.RecordGraph(ctx, store, three); err != nil {
		t.Fatal(err)
	}
	if got, err := job.ClusterGC(ctx, cfg); err != nil || len(got) != 0 {
		t.Fatalf("gc --delete with the stored graph recorded: %v (%v), want nothing (stage 2 is the job's)", got, err)
	}
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !topics.Has("clicks-2-repartition") {
		t.Errorf("gc removed stage 2's repartition topic: %v", topics.Names())
	}
}
