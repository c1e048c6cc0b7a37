package job_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/source"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// savepointYAML is threeStagesYAML (clicks -> per_user -> recount ->
// counts: a keyed count after each of two exchanges) as job name with
// units units per stage; units 0 means a single process (cluster.enabled
// false), writing to topic out.
func savepointYAML(name string, units int, out string) string {
	y := strings.Replace(threeStagesYAML, "name: clicks\n", "name: "+name+"\n", 1)
	y = strings.Replace(y, "topic: counts\n", "topic: "+out+"\n", 1)
	if units == 0 {
		return strings.Replace(y, "  enabled: true\n", "  enabled: false\n", 1)
	}
	return strings.Replace(y, "units: 4\n", fmt.Sprintf("units: %d\n", units), 1)
}

// planned parses yaml and plans its stages, with f's kind of settings:
// staging and state directories under f.dir/name, the hashmap backend
// and f's store.
func (f *unitFixture) planned(t *testing.T, name, yaml string) (*graph.Stages, job.Settings) {
	t.Helper()
	cfg := parseConfig(t, name+".yaml", yaml)
	st, err := cfg.PlanStages()
	if err != nil {
		t.Fatal(err)
	}
	set := cfg.Settings()
	set.CheckpointDir, set.StateDir, set.StateBackend = filepath.Join(f.dir, name, "staging"), filepath.Join(f.dir, name, "state"), "hashmap"
	set.Store = f.set.Store
	return st, set
}

// userCounts returns, per key, the counts of the keyed-count output out in
// order.
func userCounts(t *testing.T, out []*kgo.Record) map[string][]int64 {
	t.Helper()
	got := map[string][]int64{}
	for _, r := range out {
		var v struct {
			Key   string `json:"key"`
			Count int64  `json:"count"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("output %s: %v", r.Value, err)
		}
		got[v.Key] = append(got[v.Key], v.Count)
	}
	return got
}

// checkCountsFrom fails the test unless out holds, for each of users
// users, exactly the counts from..to in order, and nothing else.
func checkCountsFrom(t *testing.T, what string, out []*kgo.Record, users int, from, to int64) {
	t.Helper()
	got := userCounts(t, out)
	for u := range users {
		var want []int64
		for c := from; c <= to; c++ {
			want = append(want, c)
		}
		if key := fmt.Sprintf("u%d", u); fmt.Sprint(got[key]) != fmt.Sprint(want) {
			t.Errorf("%s: key %s: counts %v, want %v", what, key, got[key], want)
		}
	}
	if want := users * int(to-from+1); len(out) != want {
		t.Errorf("%s: %d records, want %d", what, len(out), want)
	}
}

// TestClusterSavepoint is item 6's acceptance test of issue 28, with
// in-process members on incremental Pebble state: three members run the three stages of a keyed
// count twice over (3 units per stage); 4 clicks per user are counted.
// StopClusterWithSavepoint stops the job: every member sees the request,
// stops its units with final checkpoints and returns nil; the units are
// drained stage by stage and gathered into one savepoint with one
// _metadata: every operator at parallelism 3, subtask u with unit u's key
// groups, no repartition vertex, the input offsets exactly at the 20
// records read. A member of the stopped job refuses to start
// (ErrJobStopped). 4 more clicks per user arrive while it is stopped.
// Then the savepoint is restored twice: by two members of a job with 2
// units per stage (another unit count: key groups redistributed), which
// counts 4 more after it, so its read_committed output topic holds per
// user exactly 1..12 with the first run's (nothing twice, nothing lost),
// and by a single process, whose own output topic holds per user exactly
// 5..12.
func TestClusterSavepoint(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", savepointYAML("clicks", 3, "counts"), kfake.SeedTopics(2, "clicks", "counts", "single"))
	// Incremental Pebble: the units' final checkpoints refer to shared
	// files, which the savepoint copies and makes its own.
	f.set.StateBackend, f.set.Incremental = "pebble", true
	const users, session = 5, 30 * time.Second
	committed := func(topic string) []*kgo.Record {
		return testkit.ReadTopicWith(t, f.opts, kgo.ReadCommitted(), topic, 10*time.Second)
	}
	produceClicks(t, f.opts, 0, 4, users)
	a := startLiveMember(t, f.st, f.set, f.opts, "a", session)
	b := startLiveMember(t, f.st, f.set, f.opts, "b", session)
	c := startLiveMember(t, f.st, f.set, f.opts, "c", session)
	if !testkit.Poll(2*time.Minute, func() bool { return len(committed("counts")) >= users*4 }) {
		t.Fatalf("the first 4 clicks per user were never counted: %d records", len(committed("counts")))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	drain := f.set
	drain.CheckpointDir, drain.StateDir = f.dir+"/drain/staging", f.dir+"/drain/state"
	sp, err := job.StopClusterWithSavepoint(ctx, f.st, drain, job.Deps{ClientOpts: f.opts, Registerer: prometheus.NewRegistry()},
		job.ClusterSavepointConfig{GroupID: "clicks-cluster", Member: "stopper", Dir: f.dir + "/savepoints"})
	if err != nil {
		t.Fatalf("stop with savepoint: %v", err)
	}
	for _, m := range []*liveMember{a, b, c} {
		m.stop(t) // RunMember returned nil after the request (stop fails the test otherwise)
		if !strings.Contains(m.logs.String(), "stop-with-savepoint requested") {
			t.Errorf("%s did not see the stop request:\n%s", m.name, m.logs.String())
		}
	}
	checkClusterSavepoint(t, sp, f.st, users*4)
	checkSelfContained(t, sp)
	checkCountsFrom(t, "the stopped job", committed("counts"), users, 1, 4)

	err = job.RunMember(ctx, f.st, f.set, job.Deps{ClientOpts: f.opts, Registerer: prometheus.NewRegistry()},
		job.MemberConfig{GroupID: "clicks-cluster", MemberID: "late", SessionTimeout: session, RebalanceTimeout: 20 * time.Second, RevokeTimeout: 10 * time.Second})
	if !errors.Is(err, job.ErrJobStopped) || !strings.Contains(err.Error(), "its savepoint is "+sp) {
		t.Errorf("a member of the stopped job: %v, want ErrJobStopped naming %s", err, sp)
	}

	produceClicks(t, f.opts, 4, 8, users)

	// Into a cluster of 2 units per stage on two members.
	st2, set2 := f.planned(t, "clicks2", savepointYAML("clicks2", 2, "counts"))
	set2.StateBackend, set2.Incremental = "pebble", true
	if err := job.AdoptClusterSavepoint(ctx, st2, set2.Store, f.opts, sp, "test"); err != nil {
		t.Fatal(err)
	}
	d := startLiveMember(t, st2, set2, f.opts, "d", session)
	e := startLiveMember(t, st2, set2, f.opts, "e", session)
	if !testkit.Poll(2*time.Minute, func() bool { return len(committed("counts")) >= users*8 }) {
		t.Fatalf("the restored cluster never counted the next 4 clicks per user: %d records", len(committed("counts")))
	}
	produceClicks(t, f.opts, 8, 12, users)
	if !testkit.Poll(2*time.Minute, func() bool { return len(committed("counts")) >= users*12 }) {
		t.Fatalf("the restored cluster never counted the last 4 clicks per user: %d records", len(committed("counts")))
	}
	time.Sleep(time.Second) // a few more checkpoints: nothing else may be committed
	checkCountsFrom(t, "3 units, stopped, then 2 units", committed("counts"), users, 1, 12)
	d.stop(t)
	e.stop(t)

	// Into a single process.
	cfg := parseConfig(t, "single.yaml", savepointYAML("single", 0, "single"))
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	set := cfg.Settings()
	set.CheckpointDir, set.StateDir, set.StateBackend = f.dir+"/single/chk", f.dir+"/single/state", "pebble"
	runSingle(t, g, set, job.Deps{ClientOpts: f.opts, FromSavepoint: sp}, func() bool { return len(committed("single")) >= users*8 })
	checkCountsFrom(t, "a single process from the cluster savepoint", committed("single"), users, 5, 12)
}

// runSingle builds the single-process job g with set and deps, runs it
// until done reports true (within 2 minutes) and a second more (nothing
// else may be committed), and stops it.
func runSingle(t *testing.T, g *graph.Graph, set job.Settings, deps job.Deps, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j, err := job.Build(ctx, g, set, deps)
	if err != nil {
		t.Fatal(err)
	}
	if deps.FromSavepoint != "" && j.RestoredFrom() != deps.FromSavepoint {
		t.Fatalf("restored from %q, want %q", j.RestoredFrom(), deps.FromSavepoint)
	}
	ran := make(chan error, 1)
	go func() { ran <- j.Run(ctx) }()
	if !testkit.Poll(2*time.Minute, done) {
		t.Errorf("the single process never produced its output")
	}
	time.Sleep(time.Second)
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
}

// checkClusterSavepoint checks the gathered savepoint sp of st: one
// _metadata, every operator of the job (no repartition vertex) at
// parallelism st.Units, the keyed ones with unit u's key groups in
// subtask u, and the input source's offsets adding up to read records.
func checkClusterSavepoint(t *testing.T, sp string, st *graph.Stages, read int) {
	t.Helper()
	m, err := job.VerifyCheckpoint(sp)
	if err != nil {
		t.Fatalf("savepoint %s: %v", sp, err)
	}
	if !m.Savepoint || m.Job != st.Job || m.MaxParallelism != st.MaxParallelism {
		t.Errorf("savepoint metadata: savepoint %v, job %q, max parallelism %d", m.Savepoint, m.Job, m.MaxParallelism)
	}
	var names []string
	for name, om := range m.Operators {
		names = append(names, name)
		if om.Parallelism != st.Units || len(om.Subtasks) != st.Units {
			t.Errorf("operator %s: parallelism %d with %d subtasks, want %d", name, om.Parallelism, len(om.Subtasks), st.Units)
		}
	}
	slices.Sort(names)
	if want := []string{"clicks", "counts", "per_user", "recount"}; !slices.Equal(names, want) {
		t.Errorf("savepoint operators %v, want %v", names, want)
	}
	for _, name := range []string{"per_user", "recount"} {
		states, err := checkpoint.DecodeTaskStates(m.Operators[name])
		if err != nil {
			t.Fatal(err)
		}
		for u, ts := range states {
			if want := keygroup.RangeFor(st.MaxParallelism, st.Units, u); ts.KeyGroups == nil || *ts.KeyGroups != want || ts.Keyed == nil {
				t.Errorf("%s subtask %d: key groups %v (keyed %v), want %v", name, u, ts.KeyGroups, ts.Keyed != nil, want)
			}
		}
	}
	states, err := checkpoint.DecodeTaskStates(m.Operators["clicks"])
	if err != nil {
		t.Fatal(err)
	}
	var offsets int64
	parts := map[int32]bool{}
	for _, ts := range states {
		for _, e := range ts.Operator[source.SplitsState].Entries {
			var s source.Split
			if err := json.Unmarshal(e, &s); err != nil {
				t.Fatal(err)
			}
			offsets += s.Offset
			parts[s.Partition] = true
		}
	}
	if int(offsets) != read || len(parts) != 2 {
		t.Errorf("input splits: %d partitions, offsets adding up to %d, want 2 and %d", len(parts), offsets, read)
	}
}

// TestSingleSavepointIntoCluster: a single-process savepoint restores into
// a cluster. A single process (parallelism 2) counts 4 clicks per user and
// stops with a savepoint; a cluster job of 3 units per stage adopts it
// (AdoptClusterSavepoint), one member runs its 9 units, 4 more clicks per
// user arrive: the read_committed output of both holds per user exactly
// 1..8.
func TestSingleSavepointIntoCluster(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", savepointYAML("clicks", 3, "counts"), kfake.SeedTopics(2, "clicks", "counts"))
	const users = 5
	committed := func() []*kgo.Record {
		return testkit.ReadTopicWith(t, f.opts, kgo.ReadCommitted(), "counts", 10*time.Second)
	}
	produceClicks(t, f.opts, 0, 4, users)
	cfg := parseConfig(t, "single.yaml", savepointYAML("single", 0, "counts"))
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	set := cfg.Settings()
	set.CheckpointDir, set.StateDir, set.StateBackend = f.dir+"/single/chk", f.dir+"/single/state", "hashmap"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, err := job.Build(ctx, g, set, job.Deps{ClientOpts: f.opts})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- j.Run(ctx) }()
	if !testkit.Poll(2*time.Minute, func() bool { return len(committed()) >= users*4 }) {
		t.Fatalf("the single process never counted 4 clicks per user: %d records", len(committed()))
	}
	sp, err := j.TriggerSavepoint(ctx, f.dir+"/savepoints", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	produceClicks(t, f.opts, 4, 8, users)
	// RunMember with Deps.FromSavepoint (run --from-savepoint) adopts it.
	mctx, stopMember := context.WithCancel(ctx)
	logs := &testkit.SyncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- job.RunMember(mctx, f.st, f.set, job.Deps{ClientOpts: f.opts, Registerer: prometheus.NewRegistry(), FromSavepoint: sp,
			Logger: slog.New(slog.NewTextHandler(logs, nil))},
			job.MemberConfig{GroupID: "clicks-cluster", MemberID: "a", SessionTimeout: 30 * time.Second, RebalanceTimeout: 20 * time.Second, RevokeTimeout: 10 * time.Second})
	}()
	if !testkit.Poll(2*time.Minute, func() bool { return len(committed()) >= users*8 }) {
		t.Fatalf("the cluster never counted the next 4 clicks per user: %d records", len(committed()))
	}
	time.Sleep(time.Second) // a few more checkpoints: nothing else may be committed
	checkCountsFrom(t, "a single process, then 3 units from its savepoint", committed(), users, 1, 8)
	stopMember()
	if err := memberReturned(t, done); err != nil {
		t.Errorf("RunMember: %v", err)
	}
	if n := strings.Count(logs.String(), "dir="+sp); n != 9 {
		t.Errorf("%d units logged restoring %s, want 9:\n%s", n, sp, logs.String())
	}
}

// TestAdoptClusterSavepointRefusals: a cluster job starts from a savepoint
// only with no state of its own: AdoptClusterSavepoint refuses, wrapping
// ErrSavepointOrigin and naming what it found, a savepoint of another max
// parallelism, a store holding a HEAD of the job, a repartition topic
// holding a record, and a second savepoint once one was adopted (the same
// one again is accepted: every daemon adopts it at start).
func TestAdoptClusterSavepointRefusals(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", savepointYAML("clicks", 3, "counts"), kfake.SeedTopics(2, "clicks", "counts"))
	ctx := context.Background()
	sp := func(name string, maxP int) string {
		dir := filepath.Join(f.dir, name)
		m := &checkpoint.Metadata{Version: checkpoint.MetadataVersion, Job: "old", CheckpointID: 7, Savepoint: true, MaxParallelism: maxP,
			Operators: map[string]checkpoint.OperatorMetadata{}}
		b, _ := json.Marshal(m)
		if err := (checkpoint.FileStore{Root: dir}).Create(ctx, checkpoint.MetadataFile, b); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	adopt := func(st *graph.Stages, dir string) error {
		return job.AdoptClusterSavepoint(ctx, st, f.set.Store, f.opts, dir, "test")
	}
	refused := func(what string, err error, want string) {
		t.Helper()
		if !errors.Is(err, job.ErrSavepointOrigin) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrSavepointOrigin naming %q", what, err, want)
		}
	}
	refused("max parallelism", adopt(f.st, sp("sp-32", 32)), "the savepoint has max parallelism 32, the job 16")

	if err := f.set.Store.Create(ctx, "clicks/units/1/2/HEAD-1", []byte(`{"seq":1}`)); err != nil {
		t.Fatal(err)
	}
	refused("HEADs", adopt(f.st, sp("sp-a", 16)), "already holds state of job clicks (clicks/units/1/2/HEAD-1)")

	st2, _ := f.planned(t, "other", savepointYAML("other", 3, "counts"))
	if err := job.EnsureRepartitionTopics(ctx, f.opts, st2); err != nil {
		t.Fatal(err)
	}
	produceEach(t, f.opts, "other-2-repartition", 0, 1, copyValue)
	refused("repartition records", adopt(st2, sp("sp-b", 16)), "repartition topic other-2-repartition partition")

	st3, _ := f.planned(t, "third", savepointYAML("third", 3, "counts"))
	if err := adopt(st3, sp("sp-c", 16)); err != nil {
		t.Fatal(err)
	}
	if err := adopt(st3, filepath.Join(f.dir, "sp-c")); err != nil {
		t.Errorf("the same savepoint again: %v", err)
	}
	refused("another savepoint", adopt(st3, sp("sp-d", 16)), "job third started from savepoint "+filepath.Join(f.dir, "sp-c"))
}

// checkSelfContained fails the test unless savepoint sp's keyed state
// handles name only private files of the unit of their subtask, some of
// them the unit's shared files copied in (incremental Pebble).
func checkSelfContained(t *testing.T, sp string) {
	t.Helper()
	m, err := checkpoint.ReadMetadata(sp)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.SharedFiles) != 0 {
		t.Errorf("savepoint lists shared files %v", m.SharedFiles)
	}
	files, shared := 0, 0
	for name, om := range m.Operators {
		states, err := checkpoint.DecodeTaskStates(om)
		if err != nil {
			t.Fatal(err)
		}
		for u, ts := range states {
			if ts.Keyed == nil {
				continue
			}
			var h struct {
				Files []struct {
					Path   string `json:"path"`
					Shared bool   `json:"shared"`
				} `json:"files"`
			}
			if err := json.Unmarshal(ts.Keyed, &h); err != nil {
				t.Fatal(err)
			}
			for _, f := range h.Files {
				files++
				if strings.HasPrefix(f.Path, fmt.Sprintf("units/%d/%d/shared/", stageOfTest(name), u)) {
					shared++
				}
				if f.Shared || !strings.HasPrefix(f.Path, fmt.Sprintf("units/%d/", stageOfTest(name))) {
					t.Errorf("%s subtask %d: file %s (shared %v), want a private file under units/<stage>/%d/", name, u, f.Path, f.Shared, u)
				}
			}
		}
	}
	if files == 0 || shared == 0 {
		t.Errorf("savepoint %s names %d keyed state files, %d of them a unit's shared file, want some of each", sp, files, shared)
	}
}

// stageOfTest is the stage of an operator of savepointYAML's job.
func stageOfTest(name string) int {
	return map[string]int{"per_user": 1, "recount": 2}[name]
}

// requestStop leaves a pending stop with savepoint (into f.dir/savepoints)
// in f's store, as member by asked for it (<job>/StopRequestKey of job
// clicks) and died before it was finished.
func requestStop(t *testing.T, ctx context.Context, f *unitFixture, by string) {
	t.Helper()
	req, _ := json.Marshal(job.ClusterStopRequest{Requested: time.Now(), By: by, Dir: f.dir + "/savepoints"})
	if err := f.set.Store.Create(ctx, "clicks/"+job.StopRequestKey, req); err != nil {
		t.Fatal(err)
	}
}

// stopRecord reads the record of a finished stop (<job>/StoppedKey of job
// clicks) from f's store, failing the test if there is none.
func stopRecord(t *testing.T, ctx context.Context, f *unitFixture) job.ClusterStopRequest {
	t.Helper()
	b, err := f.set.Store.Read(ctx, "clicks/"+job.StoppedKey)
	if err != nil {
		t.Fatal(err)
	}
	var done job.ClusterStopRequest
	if err := json.Unmarshal(b, &done); err != nil {
		t.Fatal(err)
	}
	return done
}

// TestClusterStopResumed: a stop-with-savepoint whose drain never
// completed (its request is in the store, no savepoint: the drainer
// failed or died) is finished by the next member that starts: RunMember
// drains and gathers, returns nil and records the savepoint, which
// restores into a single process with exactly the counts after it; the
// member after that is refused (ErrJobStopped naming the savepoint).
func TestClusterStopResumed(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", savepointYAML("clicks", 2, "counts"), kfake.SeedTopics(2, "clicks", "counts", "single"))
	const users = 5
	committed := func(topic string) []*kgo.Record {
		return testkit.ReadTopicWith(t, f.opts, kgo.ReadCommitted(), topic, 10*time.Second)
	}
	runUntilCommitted(t, f, "a", 30*time.Second, users, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	requestStop(t, ctx, f, "gone")
	mc := job.MemberConfig{GroupID: "clicks-cluster", MemberID: "b", SessionTimeout: 30 * time.Second, RebalanceTimeout: 20 * time.Second, RevokeTimeout: 10 * time.Second}
	if err := job.RunMember(ctx, f.st, f.set, job.Deps{ClientOpts: f.opts, Registerer: prometheus.NewRegistry()}, mc); err != nil {
		t.Fatalf("the member finishing the stop: %v", err)
	}
	done := stopRecord(t, ctx, f)
	if done.By != "gone" || filepath.Dir(done.Savepoint) != f.dir+"/savepoints" {
		t.Errorf("recorded stop %+v, want gone's with a savepoint under %s", done, f.dir+"/savepoints")
	}
	checkClusterSavepoint(t, done.Savepoint, f.st, users*4)
	mc.MemberID = "c"
	err := job.RunMember(ctx, f.st, f.set, job.Deps{ClientOpts: f.opts, Registerer: prometheus.NewRegistry()}, mc)
	if !errors.Is(err, job.ErrJobStopped) || !strings.Contains(err.Error(), "its savepoint is "+done.Savepoint) {
		t.Errorf("a member after the stop: %v, want ErrJobStopped naming %s", err, done.Savepoint)
	}
	produceClicks(t, f.opts, 4, 6, users)
	cfg := parseConfig(t, "single.yaml", savepointYAML("single", 0, "single"))
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	set := cfg.Settings()
	set.CheckpointDir, set.StateDir, set.StateBackend = f.dir+"/single/chk", f.dir+"/single/state", "hashmap"
	runSingle(t, g, set, job.Deps{ClientOpts: f.opts, FromSavepoint: done.Savepoint}, func() bool { return len(committed("single")) >= users*2 })
	checkCountsFrom(t, "a single process from the resumed savepoint", committed("single"), users, 5, 6)
}

// TestClusterStopOneDrainer: one process drains a stopped job. A stop
// with savepoint that finds another drainer's key (stop-drainer) drains
// nothing: it answers the other's savepoint once the store records it,
// or, when the other's drain failed (its key released with no savepoint),
// an error naming it.
func TestClusterStopOneDrainer(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", savepointYAML("clicks", 2, "counts"), kfake.SeedTopics(2, "clicks", "counts"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	put := func(key string, req job.ClusterStopRequest) {
		t.Helper()
		b, _ := json.Marshal(req)
		if err := f.set.Store.Create(ctx, "clicks/"+key, b); err != nil {
			t.Fatal(err)
		}
	}
	stop := func() (string, error) {
		return job.StopClusterWithSavepoint(ctx, f.st, f.set, job.Deps{ClientOpts: f.opts, Registerer: prometheus.NewRegistry()},
			job.ClusterSavepointConfig{GroupID: "clicks-cluster", Member: "api", Dir: f.dir + "/sp", Poll: 50 * time.Millisecond})
	}
	put(job.StopRequestKey, job.ClusterStopRequest{By: "first", Dir: f.dir + "/sp"})
	put(job.DrainerKey, job.ClusterStopRequest{By: "other", Dir: f.dir + "/sp"})
	go func() {
		time.Sleep(300 * time.Millisecond)
		put(job.StoppedKey, job.ClusterStopRequest{By: "first", Dir: f.dir + "/sp", Savepoint: f.dir + "/sp/savepoint-9-1"})
	}()
	if sp, err := stop(); err != nil || sp != f.dir+"/sp/savepoint-9-1" {
		t.Errorf("with another drainer: %q, %v; want the other's savepoint", sp, err)
	}
	if _, err := stop(); !errors.Is(err, job.ErrJobStopped) || !strings.Contains(err.Error(), "its savepoint is "+f.dir+"/sp/savepoint-9-1") {
		t.Errorf("once stopped: %v, want ErrJobStopped naming the savepoint", err)
	}

	for _, k := range []string{job.StopRequestKey, job.DrainerKey, job.StoppedKey} {
		if err := f.set.Store.Delete(ctx, "clicks/"+k); err != nil {
			t.Fatal(err)
		}
	}
	put(job.StopRequestKey, job.ClusterStopRequest{By: "first", Dir: f.dir + "/sp"})
	put(job.DrainerKey, job.ClusterStopRequest{By: "other", Dir: f.dir + "/sp"})
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = f.set.Store.Delete(ctx, "clicks/"+job.DrainerKey)
	}()
	if _, err := stop(); err == nil || !strings.Contains(err.Error(), "the drain by other failed") {
		t.Errorf("another drainer failing: %v, want an error naming it", err)
	}
}
