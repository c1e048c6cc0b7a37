package job_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/checkpoint/s3store"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/state"
)

// createdObjects records the names of the objects created in the remote
// state stores of a job's units (markers included), as "<stage>/<unit>/<name>".
type createdObjects struct {
	mu    sync.Mutex
	names []string
}

func (c *createdObjects) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.names)
}

// countedStore is a unit's remote state store recording what it creates.
type countedStore struct {
	remote.Storage
	unit string
	c    *createdObjects
}

func (s countedStore) CreateObject(name string) (io.WriteCloser, error) {
	s.c.mu.Lock()
	s.c.names = append(s.c.names, s.unit+"/"+name)
	s.c.mu.Unlock()
	return s.Storage.CreateObject(name)
}

// s3RemoteUnits sets up f for remote state on one in-process S3 server
// (gofakes3) holding both the cluster store (the units' namespaces) and
// the units' remote state stores next to them
// (<job>/units/<stage>/<unit>/remote/, as pipeline sets them up). It
// returns the store, what the units created in their remote stores and
// the job.Settings.UnitRemoteStore of another job on the same server.
func s3RemoteUnits(t *testing.T, f *unitFixture) (*s3store.Store, *createdObjects, func(job string) func(int, int) (remote.Storage, error)) {
	t.Helper()
	cfg := s3store.Config{Endpoint: testkit.S3Server(t, "chk", true), Bucket: "chk", Region: "us-east-1",
		PathStyle: true, AccessKey: testkit.S3AccessKey, SecretKey: testkit.S3SecretKey}
	store, err := s3store.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := s3store.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := state.NewRemoteS3Store(cl, "chk", "")
	created := &createdObjects{}
	f.set.Store = store
	f.set.StateBackend = state.KindPebble
	f.set.RemoteState = &state.RemoteConfig{CacheBytes: -1}
	of := func(job string) func(int, int) (remote.Storage, error) {
		return func(stage, index int) (remote.Storage, error) {
			unit := fmt.Sprintf("%d/%d", stage, index)
			return countedStore{Storage: state.NewRemotePrefixStore(base, job+"/units/"+unit+"/remote/"), unit: unit, c: created}, nil
		}
	}
	f.set.UnitRemoteStore = of(f.st.Job)
	return store, created, of
}

// unitRemoteListing lists unit (stage, index)'s remote state store:
// its objects and its markers, sorted (a reference list as an ext
// marker on each object it names).
func unitRemoteListing(t *testing.T, f *unitFixture, stage, index int) (objects, markers []string) {
	t.Helper()
	st, err := f.set.UnitRemoteStore(stage, index)
	if err != nil {
		t.Fatal(err)
	}
	names, err := st.List("", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if obj, rest, ok := strings.Cut(n, ".ref."); ok && strings.HasPrefix(obj, "refs-") && strings.HasSuffix(rest, ".list") {
			// A reference list (a restore's reference on every object
			// it ingested) stands for an ext marker on each object it
			// names.
			rd, size, err := st.ReadObject(context.Background(), n)
			if err != nil && st.IsNotExistError(err) {
				continue // released since the listing
			}
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, size)
			err = rd.ReadAt(context.Background(), buf, 0)
			_ = rd.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range strings.Fields(string(buf)) {
				markers = append(markers, o+".ref."+strings.TrimSuffix(rest, ".list")+".ext")
			}
		} else if strings.Contains(n, ".ref.") {
			markers = append(markers, n)
		} else {
			objects = append(objects, n)
		}
	}
	slices.Sort(objects)
	slices.Sort(markers)
	return objects, markers
}

// unitReferenced returns, sorted, the remote state objects the
// checkpoints named by the HEADs left in unit (stage, index)'s namespace
// (the retained ones, after retention) refer to; false when retention
// deleted a checkpoint while it was read (ask again).
func unitReferenced(t *testing.T, store checkpoint.Store, job string, stage, index int) ([]string, bool) {
	t.Helper()
	ctx := context.Background()
	prefix := checkpoint.UnitPrefix(job, stage, index)
	keys, err := store.List(ctx, prefix+checkpoint.HeadPrefix)
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]bool{}
	for _, k := range keys {
		var seq int64
		if _, err := fmt.Sscanf(strings.TrimPrefix(k, prefix+checkpoint.HeadPrefix), "%d", &seq); err != nil {
			continue
		}
		hd, err := checkpoint.Heads{Store: store, Prefix: prefix}.Read(ctx, seq)
		if err != nil || hd.CheckpointID == 0 {
			continue // purged meanwhile, or a claim
		}
		b, err := store.Read(ctx, fmt.Sprintf("%schk-%d/%s", prefix, hd.CheckpointID, checkpoint.MetadataFile))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false
		}
		if err != nil {
			t.Fatal(err)
		}
		var m checkpoint.Metadata
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		for _, sf := range m.SharedFiles {
			if obj, ok := strings.CutPrefix(sf, "../remote/"); ok {
				refs[obj] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(refs)), true
}

// markerCreator returns the creator id of marker name
// ("<object>.ref.<creator>.<suffix>") and of the object it names
// ("<hash>-<creator>-<file number>.sst").
func markerCreator(name string) (marker, object string) {
	obj, rest, _ := strings.Cut(name, ".ref.")
	marker, _, _ = strings.Cut(rest, ".")
	if parts := strings.Split(strings.TrimSuffix(obj, ".sst"), "-"); len(parts) == 3 {
		object = parts[1]
	}
	return marker, object
}

// TestClusterRemoteStateTakeover: a two-stage keyed count in cluster
// mode on remote state (Pebble's tables on S3, in-process gofakes3,
// next to the units' namespaces), 3 units per stage on 3 members. Member
// c stops without final checkpoints (revoke timeout 1 ns, as a killed
// daemon's units end) after a dead instance's marker and object were
// planted in the store of a stage-1 unit it ran (what a daemon killed
// with -9, whose local directory is on a machine that is gone, leaves).
// Its units are taken over by a and b: the read_committed output holds,
// per user, exactly the counts 1..20; nothing was copied or downloaded
// (no import object created in any remote store, no shared file in any
// namespace); each of c's stage-1 units is restored by reference (its
// new owner's ext markers name objects another instance created); and,
// once the job is idle, every unit's remote store holds exactly the
// objects its retained checkpoints refer to plus those its live instance
// ingested at its restore (ext markers, held while the instance lives),
// with markers of that one instance only (the planted dead marker and
// object are gone).
func TestClusterRemoteStateTakeover(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", strings.Replace(unitsYAML, "units: 4", "units: 3", 1), kfake.SeedTopics(2, "clicks", "counts"))
	store, created, _ := s3RemoteUnits(t, f)
	const users, perUser, session = 5, 20, 30 * time.Second
	committed := func() []*kgo.Record {
		return testkit.ReadTopicWith(t, f.opts, kgo.ReadCommitted(), "counts", 10*time.Second)
	}
	produceClicks(t, f.opts, 0, perUser/2, users)
	a := startLiveMember(t, f.st, f.set, f.opts, "a", session)
	b := startLiveMember(t, f.st, f.set, f.opts, "b", session)
	c := startLiveMemberRevoke(t, f.st, f.set, f.opts, "c", session, time.Nanosecond)
	var on map[string]string
	var cUnits []int // c's stage-1 units
	if !testkit.Poll(2*time.Minute, func() bool {
		on = runningOn(a, b, c)
		cUnits = nil
		for u := range 3 {
			if on[fmt.Sprintf("1/%d", u)] == "c" {
				cUnits = append(cUnits, u)
			}
		}
		return len(on) == 6 && len(cUnits) > 0 && len(committed()) >= users*perUser/2
	}) {
		t.Fatalf("the units never ran on a, b and c (c with a stage-1 unit) with the first half committed: %v, %d records", on, len(committed()))
	}
	dead, err := f.set.UnitRemoteStore(1, cUnits[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"dead-7-000001.sst", "dead-7-000001.sst.ref.7.1"} {
		w, err := dead.CreateObject(n)
		if err == nil {
			_, err = w.Write([]byte(n))
		}
		if err == nil {
			err = w.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	c.stop(t)
	produceClicks(t, f.opts, perUser/2, perUser, users)
	if !testkit.Poll(2*time.Minute, func() bool {
		on = runningOn(a, b)
		return len(on) == 6 && !slices.Contains(slices.Collect(maps.Values(on)), "two") && len(committed()) >= users*perUser
	}) {
		t.Fatalf("a and b never ran every unit with the whole output committed: %v, %d records; c:\n%s", on, len(committed()), c.logs.String())
	}
	checkUserCounts(t, committed(), users, perUser)

	for _, n := range created.all() {
		if strings.Contains(n, "/import-") {
			t.Errorf("object %s was copied into a unit's remote store: a takeover must restore by reference", n)
		}
	}
	keys, err := store.List(context.Background(), f.st.Job+"/")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(k, "/shared/") {
			t.Errorf("the store holds shared file %s: remote state must not be uploaded (nor downloaded)", k)
		}
	}
	for _, u := range cUnits {
		_, markers := unitRemoteListing(t, f, 1, u)
		byRef := 0
		for _, m := range markers {
			if mc, oc := markerCreator(m); strings.HasSuffix(m, ".ext") && oc != "" && oc != mc {
				byRef++
			}
		}
		if byRef == 0 {
			t.Errorf("unit 1/%d (c's) was not restored by reference: no marker of its new owner on another instance's object: %v", u, markers)
		}
	}

	// Idle: retention converges on exactly the retained checkpoints'
	// objects (and the live instance's ingested ones) in every unit's
	// store.
	var why string
	if !testkit.Poll(time.Minute, func() bool {
		why = ""
		for s := range 2 {
			for u := range 3 {
				objects, markers := unitRemoteListing(t, f, s, u)
				refs, ok := unitReferenced(t, store, f.st.Job, s, u)
				if !ok {
					why += fmt.Sprintf("unit %d/%d: a retained checkpoint was deleted while read\n", s, u)
				} else {
					// An object the live instance ingested at its restore
					// keeps its ext marker while the instance lives,
					// even once a compaction replaced its table: the
					// only objects allowed besides the referenced ones.
					want := slices.Clone(refs)
					for _, m := range markers {
						if obj, _, _ := strings.Cut(m, ".ref."); strings.HasSuffix(m, ".ext") && !slices.Contains(want, obj) {
							want = append(want, obj)
						}
					}
					slices.Sort(want)
					if !slices.Equal(objects, want) {
						why += fmt.Sprintf("unit %d/%d: objects %v, want %v (retained checkpoints refer to %v)\n", s, u, objects, want, refs)
					}
				}
				creators := map[string]bool{}
				for _, m := range markers {
					mc, _ := markerCreator(m)
					creators[mc] = true
					if obj, _, _ := strings.Cut(m, ".ref."); !slices.Contains(objects, obj) {
						why += fmt.Sprintf("unit %d/%d: marker %s names no object\n", s, u, m)
					}
				}
				if len(creators) > 1 {
					why += fmt.Sprintf("unit %d/%d: markers of %d instances: %v\n", s, u, len(creators), markers)
				}
			}
		}
		return why == ""
	}) {
		t.Errorf("the remote stores never held exactly the retained checkpoints' objects:\n%s", why)
	}
	for u := range 3 {
		objects, markers := unitRemoteListing(t, f, 1, u)
		t.Logf("unit 1/%d: objects %v markers %v", u, objects, markers)
	}
	t.Logf("c ran stage-1 units %v; %d objects and markers created", cUnits, len(created.all()))
	if s1, _ := unitRemoteListing(t, f, 1, 0); len(s1) == 0 {
		t.Errorf("unit 1/0 holds no remote object: the test proves nothing")
	}
}

// TestClusterSavepointRemoteState: a stop-with-savepoint of a cluster job
// on remote state (three stages, 2 units per stage, 2 members, tables on
// S3) is self-contained: each keyed subtask's handle names only private
// files, units/<stage>/<unit>/remote/<object>, copies of the objects its
// unit's final checkpoint referred to, present in the savepoint. With
// every unit's remote store emptied afterwards, 4 more clicks per user
// arrive and it is restored twice: by a cluster of 3 units per stage on
// remote state (the savepoint's objects copied into the units' stores),
// whose output completes the first run's to exactly 1..8 per user, and
// by a single process on remote state, whose output holds exactly 5..8.
func TestClusterSavepointRemoteState(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", savepointYAML("clicks", 2, "counts"), kfake.SeedTopics(2, "clicks", "counts", "single"))
	_, created, remoteOf := s3RemoteUnits(t, f)
	const users, session = 5, 30 * time.Second
	committed := func(topic string) []*kgo.Record {
		return testkit.ReadTopicWith(t, f.opts, kgo.ReadCommitted(), topic, 10*time.Second)
	}
	produceClicks(t, f.opts, 0, 4, users)
	a := startLiveMember(t, f.st, f.set, f.opts, "a", session)
	b := startLiveMember(t, f.st, f.set, f.opts, "b", session)
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
	a.stop(t)
	b.stop(t)
	checkClusterSavepoint(t, sp, f.st, users*4)
	m, err := checkpoint.ReadMetadata(sp)
	if err != nil {
		t.Fatal(err)
	}
	copied := 0
	for _, name := range []string{"per_user", "recount"} {
		states, err := checkpoint.DecodeTaskStates(m.Operators[name])
		if err != nil {
			t.Fatal(err)
		}
		for u, ts := range states {
			var h struct {
				Remote bool `json:"remote"`
				Files  []struct {
					Path   string `json:"path"`
					Shared bool   `json:"shared"`
				} `json:"files"`
			}
			if err := json.Unmarshal(ts.Keyed, &h); err != nil {
				t.Fatal(err)
			}
			if !h.Remote {
				t.Errorf("%s subtask %d: not a remote state handle", name, u)
			}
			for _, file := range h.Files {
				want := fmt.Sprintf("units/%d/%d/remote/", stageOfTest(name), u)
				if file.Shared || !strings.HasPrefix(file.Path, want) {
					t.Errorf("%s subtask %d: file %s (shared %v), want a private copy under %s", name, u, file.Path, file.Shared, want)
				}
				if _, err := os.Stat(filepath.Join(sp, file.Path)); err != nil {
					t.Errorf("%s subtask %d: %v", name, u, err)
				}
				copied++
			}
		}
	}
	if copied == 0 || len(m.SharedFiles) != 0 {
		t.Errorf("savepoint names %d remote state files and shared files %v, want some of the first, none of the second", copied, m.SharedFiles)
	}
	for s := range 3 {
		for u := range 2 {
			st, err := f.set.UnitRemoteStore(s, u)
			if err != nil {
				t.Fatal(err)
			}
			names, err := st.List("", "")
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if err := st.Delete(n); err != nil {
					t.Fatal(err)
				}
			}
		}
	}

	produceClicks(t, f.opts, 4, 8, users)

	// Into a cluster of 3 units per stage (key groups redistributed).
	st2, set2 := f.planned(t, "clicks2", savepointYAML("clicks2", 3, "counts"))
	set2.StateBackend, set2.RemoteState, set2.UnitRemoteStore = state.KindPebble, f.set.RemoteState, remoteOf("clicks2")
	if err := job.AdoptClusterSavepoint(ctx, st2, set2.Store, f.opts, sp, "test"); err != nil {
		t.Fatal(err)
	}
	d := startLiveMember(t, st2, set2, f.opts, "d", session)
	if !testkit.Poll(2*time.Minute, func() bool { return len(committed("counts")) >= users*8 }) {
		t.Fatalf("the restored cluster never counted the next 4 clicks per user: %d records; d:\n%s", len(committed("counts")), d.logs.String())
	}
	d.stop(t)
	checkCountsFrom(t, "2 units, stopped, then 3 units on remote state", committed("counts"), users, 1, 8)
	imported := 0
	for _, n := range created.all() {
		if strings.Contains(n, "/import-") && !strings.Contains(n, ".ref.") {
			imported++
		}
	}
	if imported == 0 {
		t.Errorf("the 3-unit cluster imported no object from the savepoint: %v", created.all())
	}

	cfg := parseConfig(t, "single.yaml", savepointYAML("single", 0, "single"))
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	set := cfg.Settings()
	set.CheckpointDir, set.StateDir, set.StateBackend = f.dir+"/single/chk", f.dir+"/single/state", state.KindPebble
	set.RemoteState = &state.RemoteConfig{CacheBytes: -1}
	runSingle(t, g, set, job.Deps{ClientOpts: f.opts, FromSavepoint: sp}, func() bool { return len(committed("single")) >= users*4 })
	checkCountsFrom(t, "a single process on remote state from the cluster savepoint", committed("single"), users, 5, 8)
}
