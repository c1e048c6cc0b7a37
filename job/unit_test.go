package job_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/checkpoint/s3store"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

const unitsYAML = `
job:
  name: clicks
  max_parallelism: 16
kafka:
  brokers: [localhost:9092]
checkpoints:
  interval: 200ms
  timeout: 1m
cluster:
  enabled: true
  units: 4
  store:
    dir: /unused
sources:
  - name: clicks
    topic: clicks
operators:
  - name: per_user
    type: keyed_count
    input: clicks
    key_by: user
sinks:
  - name: counts
    input: per_user
    topic: counts
    delivery: exactly-once
    transaction_timeout: 5m
`

// TestUnitsExactlyOnceAcrossStages runs the two stages of a keyed count as
// eight units (4 per stage, over an input of 2 partitions) in one process,
// each a job of its own with its own checkpoints, connected only by the
// repartition topic: the read_committed output holds, per key, exactly the
// counts 1..n; the repartition topic holds each input record once, in the
// partition of the unit owning its key group; every stage-1 unit fences its
// own transactional ids only.
func TestUnitsExactlyOnceAcrossStages(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", unitsYAML, kfake.SeedTopics(2, "clicks", "counts"))
	kc, opts, st, set := f.kc, f.opts, f.st, f.set
	var fenceMu sync.Mutex
	fenced := map[string]int{}
	kc.ControlKey(22, func(req kmsg.Request) (kmsg.Response, error, bool) { // InitProducerId
		kc.KeepControl()
		if r := req.(*kmsg.InitProducerIDRequest); r.TransactionalID != nil {
			fenceMu.Lock()
			fenced[*r.TransactionalID]++
			fenceMu.Unlock()
		}
		return nil, nil, false
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.ensureRepartitions(t)
	// A second start with another unit count is refused naming both.
	other := *st
	other.Repartitions = []graph.Repartition{st.Repartitions[0]}
	other.Repartitions[0].Partitions = 6
	err := job.EnsureRepartitionTopics(ctx, opts, &other)
	if !errors.Is(err, job.ErrUnitsChanged) || !strings.Contains(err.Error(), "has 4 partitions, cluster.units is 6") {
		t.Fatalf("changed unit count: %v", err)
	}

	const users, perUser = 5, 20
	produceClicks(t, opts, 0, perUser, users)

	set.PurgeRepartitions = false // the test reads the whole repartition topic
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for _, stage := range st.Stages {
		for u := range st.Units {
			s := set
			s.Unit = &job.Unit{Stage: stage.Index, Index: u, Units: st.Units}
			j, err := job.Build(ctx, stage.Graph, s, job.Deps{ClientOpts: opts})
			if err != nil {
				t.Fatalf("build stage %d unit %d: %v", stage.Index, u, err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := j.Run(ctx); err != nil {
					errs <- fmt.Errorf("stage %d unit %d: %w", stage.Index, u, err)
				}
			}()
		}
	}
	var out []*kgo.Record
	if !testkit.Poll(2*time.Minute, func() bool {
		out = testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "counts", 10*time.Second)
		return len(out) >= users*perUser
	}) {
		t.Fatalf("output holds %d records, want %d", len(out), users*perUser)
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkUserCounts(t, out, users, perUser)
	rep := testkit.WithoutMarkers(testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), st.Repartitions[0].Topic, 10*time.Second))
	if len(rep) != users*perUser {
		t.Errorf("repartition topic holds %d records, want %d", len(rep), users*perUser)
	}
	for _, r := range rep {
		if want := keygroup.OperatorIndex(keygroup.Assign(r.Key, 16), 16, 4); int(r.Partition) != want {
			t.Errorf("record with key %s in partition %d, want %d", r.Key, r.Partition, want)
		}
	}
	// Each stage-1 unit fenced its own ids once at start, and no other.
	fenceMu.Lock()
	defer fenceMu.Unlock()
	for u := range 4 {
		id := fmt.Sprintf("kstreamd-clicks-counts-1-%d-0", u)
		if fenced[id] < 1 {
			t.Errorf("transactional id %s never initialised", id)
		}
	}
	for id := range fenced {
		if !strings.HasPrefix(id, "kstreamd-clicks-counts-1-") && !strings.HasPrefix(id, "kstreamd-clicks-repartition.1-0-") {
			t.Errorf("unexpected transactional id %s", id)
		}
	}
}

const copyYAML = `
job:
  name: copy
  max_parallelism: 8
kafka:
  brokers: [localhost:9092]
checkpoints:
  interval: 100ms
  timeout: 1m
cluster:
  enabled: true
  units: 1
  store:
    dir: /unused
sources:
  - name: in
    topic: in
sinks:
  - name: out
    input: in
    topic: out
    delivery: exactly-once
    transaction_timeout: 5m
`

// TestUnitZombieFenced: owner a runs the unit while its input is idle (its
// epochs are empty); owner b takes the unit over (claims the next HEAD and
// fences the unit's ids). a's next checkpoint finds its HEAD taken: a stops
// with ErrHeadExists, writes no HEAD after b's claim and deletes no file,
// not even the incomplete directory of b's checkpoint in flight;
// b carries on and its output holds every record once.
func TestUnitZombieFenced(t *testing.T) {
	f := newUnitFixture(t, "copy.yaml", copyYAML, kfake.SeedTopics(1, "in", "out"))
	opts, dir, set := f.opts, f.dir, f.set
	ns := dir + "/store/copy/units/0/0"
	heads := checkpoint.Heads{Store: set.Store, Prefix: "copy/units/0/0/"}
	produce := func(from, to int) { produceEach(t, opts, "in", from, to, copyValue) }
	produce(0, 20)
	a := f.buildOwner(t, "a", nil, nil)
	actx, acancel := context.WithCancel(context.Background())
	defer acancel()
	aDone := make(chan error, 1)
	go func() { aDone <- a.Run(actx) }()
	if !testkit.Poll(time.Minute, func() bool {
		return len(testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "out", 5*time.Second)) == 20
	}) {
		t.Fatal("a's output never reached 20 records")
	}
	// Input paused: a's epochs are empty. b takes the unit over.
	b := f.buildOwner(t, "b", nil, nil)
	claim, err := heads.Latest(context.Background())
	if err != nil || claim.Owner != "b" || !claim.Claim {
		t.Fatalf("after b's claim the newest HEAD is %+v (%v)", claim, err)
	}
	// b's first checkpoint in flight: a directory without metadata yet.
	inFlight := fmt.Sprintf("%s/chk-%d", ns, 1000)
	if err := os.MkdirAll(inFlight, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inFlight+"/state", []byte("b's snapshot"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := listFiles(t, ns)
	var aErr error
	select {
	case aErr = <-aDone:
	case <-time.After(2 * time.Minute):
		t.Fatal("the zombie never stopped")
	}
	if !errors.Is(aErr, checkpoint.ErrHeadExists) {
		t.Fatalf("zombie stopped with %v, want ErrHeadExists", aErr)
	}
	if after, err := heads.Latest(context.Background()); err != nil || after != claim {
		t.Errorf("newest HEAD after the zombie stopped: %+v, want b's claim %+v (%v)", after, claim, err)
	}
	for _, f := range before {
		if _, err := os.Stat(ns + "/" + f); err != nil {
			t.Errorf("file %s of the unit vanished after the zombie's last checkpoint: %v", f, err)
		}
	}
	if _, err := os.Stat(inFlight + "/state"); err != nil {
		t.Errorf("the zombie deleted the new owner's in-flight checkpoint: %v", err)
	}
	if err := os.RemoveAll(inFlight); err != nil { // b's own coordinator never wrote it
		t.Fatal(err)
	}
	bctx, bcancel := context.WithCancel(context.Background())
	bDone := make(chan error, 1)
	go func() { bDone <- b.Run(bctx) }()
	produce(20, 40)
	var out []*kgo.Record
	if !testkit.Poll(time.Minute, func() bool {
		out = testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "out", 5*time.Second)
		return len(out) >= 40
	}) {
		t.Fatalf("output holds %d records, want 40", len(out))
	}
	bcancel()
	if err := <-bDone; err != nil {
		t.Errorf("b: %v", err)
	}
	seen := map[string]int{}
	for _, r := range out {
		seen[string(r.Value)]++
	}
	for i := range 40 {
		if v := fmt.Sprintf(`{"i":%d}`, i); seen[v] != 1 {
			t.Errorf("record %s in the output %d times, want once", v, seen[v])
		}
	}
	if len(out) != 40 {
		t.Errorf("output holds %d records, want 40", len(out))
	}
}

// sourceOffset returns the offset the copy job's source recorded in the
// checkpoint in dir (partition 0 of "in").
func sourceOffset(t *testing.T, dir string) int64 {
	t.Helper()
	b, err := os.ReadFile(dir + "/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Operators map[string]struct {
			Subtasks []struct {
				Operator map[string]struct {
					Entries [][]byte `json:"entries"`
				} `json:"operator"`
			} `json:"subtasks"`
		} `json:"operators"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var split struct {
		Offset int64 `json:"offset"`
	}
	if err := json.Unmarshal(m.Operators["in"].Subtasks[0].Operator["kafka-source-splits"].Entries[0], &split); err != nil {
		t.Fatalf("source split of %s: %v", dir, err)
	}
	return split.Offset
}

// listFiles returns the names in dir of a filesystem store, without the
// temporary files of a create in flight (".kstreamd-tmp-*": the zombie's
// failing HEAD create removes its own).
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestUnitCrashAroundHead: owner a of the copy job's unit "crashes"
// (Deps.CheckpointFault stops its coordinator as a dead process would stop:
// no further HEAD, no commit, its transactions left open) in the first
// checkpoint after the first half of the input whose epoch holds records,
// at each point of the commit order; owner b takes the unit over. Right
// after the HEAD write: the HEAD names that checkpoint and b commits its
// restored transaction, so of a's uncommitted records only those of the
// transaction after it (aborted by b's fencing) are written again. Between
// the pre-commit and the HEAD: the HEAD names the checkpoint before, b
// commits nothing restored and every record a had not committed is
// aborted and replayed once. Either way the read_committed output holds
// every record exactly once.
func TestUnitCrashAroundHead(t *testing.T) {
	for _, tc := range crashPoints {
		t.Run(tc.name, func(t *testing.T) {
			f := newUnitFixture(t, "copy.yaml", copyYAML, kfake.SeedTopics(1, "in", "out"))
			opts, dir, set := f.opts, f.dir, f.set
			ns := dir + "/store/copy/units/0/0"
			read := func(iso kgo.IsolationLevel) []*kgo.Record {
				return testkit.ReadTopicWith(t, opts, iso, "out", 5*time.Second)
			}
			// The fault: once armed (after the first 10 records are
			// committed), the first checkpoint whose epoch holds records
			// (its source offset, in its metadata, is past 10) crashes at
			// tc.point; epoch is how many records it holds.
			var armed atomic.Bool
			var crashID, epoch int64 // written by a's coordinator only, read after a stopped
			fault := func(p checkpoint.FaultPoint, id int64) bool {
				if !armed.Load() {
					return false
				}
				if p == checkpoint.FaultBeforeHead && crashID == 0 { // uploaded to the store by then
					if off := sourceOffset(t, fmt.Sprintf("%s/chk-%d", ns, id)); off > 10 {
						crashID, epoch = id, off-10
					}
				}
				return p == tc.point && id == crashID
			}
			prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("in"))...)
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			produce := func(from, to int) {
				var recs []*kgo.Record
				for i := from; i < to; i++ {
					recs = append(recs, &kgo.Record{Value: copyValue(i)})
				}
				if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			produce(0, 10)
			a := f.buildOwner(t, "a", fault, &testkit.SyncBuffer{})
			aDone := make(chan error, 1)
			go func() { aDone <- a.Run(context.Background()) }()
			if !testkit.Poll(time.Minute, func() bool { return len(read(kgo.ReadCommitted())) == 10 }) {
				t.Fatal("a's output never held the first 10 records")
			}
			armed.Store(true)
			produce(10, 20)
			stoppedByFault(t, aDone)
			head, err := checkpoint.Heads{Store: set.Store, Prefix: "copy/units/0/0/"}.Latest(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			wantHead := crashID
			if tc.point == checkpoint.FaultBeforeHead {
				wantHead = crashID - 1
			}
			if head.Owner != "a" || head.CheckpointID != wantHead {
				t.Fatalf("after the crash in checkpoint %d the newest HEAD is %+v, want a's naming checkpoint %d", crashID, head, wantHead)
			}
			committedAtCrash, uncommittedAtCrash := len(read(kgo.ReadCommitted())), len(read(kgo.ReadUncommitted()))
			if committedAtCrash != 10 {
				t.Fatalf("read_committed output at the crash holds %d records, want the first 10", committedAtCrash)
			}

			blog := &testkit.SyncBuffer{}
			b := f.buildOwner(t, "b", nil, blog)
			bctx, bcancel := context.WithCancel(context.Background())
			bDone := make(chan error, 1)
			go func() { bDone <- b.Run(bctx) }()
			var out []*kgo.Record
			if !testkit.Poll(time.Minute, func() bool {
				out = read(kgo.ReadCommitted())
				return len(out) >= 20
			}) {
				t.Fatalf("output holds %d records, want 20\nb:\n%s", len(out), blog.String())
			}
			bcancel()
			if err := <-bDone; err != nil {
				t.Errorf("b: %v", err)
			}
			seen := map[string]int{}
			for _, r := range out {
				seen[string(r.Value)]++
			}
			for i := range 20 {
				if v := fmt.Sprintf(`{"i":%d}`, i); seen[v] != 1 {
					t.Errorf("record %s in the read_committed output %d times, want once", v, seen[v])
				}
			}
			if len(out) != 20 {
				t.Errorf("read_committed output holds %d records, want 20", len(out))
			}
			// What b committed of the restored checkpoint's transactions.
			restored := restoredCommits(t, blog.String())
			uncommitted := len(read(kgo.ReadUncommitted()))
			t.Logf("crash in checkpoint %d; a wrote %d records, b committed restored %+v; read uncommitted at the end %d", crashID, uncommittedAtCrash, restored, uncommitted)
			switch tc.point {
			case checkpoint.FaultAfterHead:
				if len(restored) != 1 || restored[0].CheckpointID != crashID || restored[0].Records != epoch {
					t.Fatalf("b committed restored transactions %+v, want one of checkpoint %d with its %d records", restored, crashID, epoch)
				}
				// Replayed: a's records after the crashed epoch only.
				if want := 20 + uncommittedAtCrash - 10 - int(epoch); uncommitted != want {
					t.Errorf("the output read uncommitted holds %d records, want %d (a's records after checkpoint %d written again)", uncommitted, want, crashID)
				}
			case checkpoint.FaultBeforeHead:
				// b commits the restored checkpoint's transactions again,
				// idempotently (a committed them), and none of the crashed one.
				for _, r := range restored {
					if r.CheckpointID >= crashID {
						t.Errorf("b committed the restored transaction %+v of checkpoint %d, which has no HEAD", r, crashID)
					}
				}
				// Replayed: every record a had not committed, once.
				if want := 20 + uncommittedAtCrash - 10; uncommitted != want || uncommittedAtCrash <= 10 {
					t.Errorf("the output read uncommitted holds %d records, want %d (a's %d uncommitted records aborted and written again)", uncommitted, want, uncommittedAtCrash-10)
				}
			}
		})
	}
}

// TestUnitsRestoreFromStore, on the filesystem store and on an S3 server:
// the two stages of a keyed count run as 4 units (2 per stage, Pebble
// with incremental checkpoints) owned by a, which is stopped mid-stream
// and whose staging directory is then deleted; owner b, with an empty
// staging directory, takes every unit over from the store alone: each
// stage-1 unit restores the checkpoint its newest HEAD names (downloaded
// into b's staging directory with its shared files), and the
// read_committed output holds, per key, exactly the counts 1..n.
func TestUnitsRestoreFromStore(t *testing.T) {
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) {
			f := newUnitFixture(t, "units.yaml", strings.Replace(unitsYAML, "units: 4", "units: 2", 1), kfake.SeedTopics(2, "clicks", "counts"))
			opts, st, dir := f.opts, f.st, f.dir
			ctx := context.Background()
			f.ensureRepartitions(t)
			store := f.set.Store
			if kind == "s3" {
				s, err := s3store.New(s3store.Config{Endpoint: testkit.S3Server(t, "chk", true), Bucket: "chk", Region: "us-east-1",
					PathStyle: true, AccessKey: testkit.S3AccessKey, SecretKey: testkit.S3SecretKey})
				if err != nil {
					t.Fatal(err)
				}
				store = s
			}
			set := f.set // each unit sets its own CheckpointDir and StateDir below
			set.StateBackend, set.Incremental, set.Store = "pebble", true, store
			var logs testkit.SyncBuffer
			const users, perUser = 5, 20
			produce := func(from, to int) { produceClicks(t, opts, from, to, users) }
			committed := func() []*kgo.Record {
				return testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "counts", 10*time.Second)
			}
			// run runs every unit as member until want output records are
			// committed, then stops them; it returns what each stage-1 unit
			// restored from.
			run := func(member string, want int) []string {
				return runUnits(t, st, set, dir, member, opts, nil, &logs, func() bool { return len(committed()) >= want })
			}
			produce(0, perUser/2)
			if got := run("a", users*perUser/2); fmt.Sprint(got) != "[ ]" {
				t.Errorf("a restored %q, want nothing", got)
			}
			if err := os.RemoveAll(dir + "/a"); err != nil {
				t.Fatal(err)
			}
			produce(perUser/2, perUser)
			checkRestoredFrom(t, run("b", users*perUser), dir, "b", "clicks")
			// A repartition source reads one fixed partition: no warning
			// that its partition discovery is off.
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "partition discovery is off") && strings.Contains(l, "source=repartition.") {
					t.Errorf("warning for a repartition source: %s", l)
				}
			}
			for u := range st.Units {
				h, err := checkpoint.Heads{Store: store, Prefix: checkpoint.UnitPrefix("clicks", 1, u)}.Latest(ctx)
				if err != nil || h.Owner != "b" {
					t.Errorf("unit 1/%d: newest HEAD %+v (%v), want one of b", u, h, err)
				}
			}
			checkUserCounts(t, committed(), users, perUser)
		})
	}
}
