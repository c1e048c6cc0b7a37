package job_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/pipeline"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// TestRemoteStateKeyedCountRescale runs the keyed count of legacyYAML on
// the disaggregated pebble backend (state.remote), exactly-once: 100
// records at parallelism 2, then 100 more after a restore at parallelism
// 3 (each new subtask ingests the files of its key groups by reference).
// The committed output is, per key k0..k4, the counts 1..40 each once;
// the state's tables are on the remote store (<checkpoints>/<job>/remote,
// or an S3 bucket) and never in the local state dir. The last checkpoint
// reads back through job.CheckpointReader (`kstreamd state`) with the
// count 40 of every key; on S3 only when the reader is given the store.
func TestRemoteStateKeyedCountRescale(t *testing.T) {
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) { testRemoteStateKeyedCountRescale(t, kind) })
	}
}

func testRemoteStateKeyedCountRescale(t *testing.T, kind string) {
	_, opts := newKafka(t, kfake.SeedTopics(2, "in", "out"))
	var store remote.Storage // nil: the directory store
	if kind == "s3" {
		addr := testkit.S3Server(t, "state", true)
		mc, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(testkit.S3AccessKey, testkit.S3SecretKey, ""), BucketLookup: minio.BucketLookupPath})
		if err != nil {
			t.Fatal(err)
		}
		store = state.NewRemoteS3Store(mc, "state", "legacy/remote/")
	}
	dir := t.TempDir()
	localTables := 0
	run := func(p string, want int) *job.Job {
		cfg, err := pipeline.Parse("remote.yaml", []byte(strings.ReplaceAll(legacyYAML, "parallelism: 2\nsinks", "parallelism: "+p+"\nsinks")), nil)
		if err != nil {
			t.Fatal(err)
		}
		g, err := cfg.Plan()
		if err != nil {
			t.Fatal(err)
		}
		set := cfg.Settings()
		set.CheckpointDir, set.StateDir, set.StateBackend = dir+"/chk", dir+"/state", "pebble"
		set.RemoteState = &state.RemoteConfig{CacheBytes: 1 << 20, Store: store}
		log := &testkit.SyncBuffer{}
		j, err := job.Build(context.Background(), g, set, job.Deps{ClientOpts: opts, DrainTimeout: runtime.DefaultDrainTimeout,
			Logger: slog.New(slog.NewJSONHandler(log, nil))})
		if err != nil {
			t.Fatalf("build: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- j.Run(ctx) }()
		committed := func() int { return len(testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "out", 2*time.Second)) }
		if !testkit.Poll(time.Minute, func() bool {
			_ = filepath.WalkDir(dir+"/state", func(p string, d fs.DirEntry, err error) error {
				if err == nil && strings.HasSuffix(p, ".sst") {
					localTables++
				}
				return nil
			})
			return committed() >= want
		}) {
			t.Fatalf("parallelism %s: %d committed outputs, want %d\n%s", p, committed(), want, log.String())
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("parallelism %s: %v", p, err)
		}
		return j
	}
	produceLegacy(t, opts, 0, 100)
	run("2", 100)
	produceLegacy(t, opts, 100, 200)
	if run("3", 200).RestoredFrom() == "" {
		t.Fatal("the job at parallelism 3 restored no checkpoint")
	}
	counts := map[string][]int{}
	for _, r := range testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "out", 5*time.Second) {
		var o countOutput
		if err := json.Unmarshal(r.Value, &o); err != nil {
			t.Fatal(err)
		}
		counts[o.Key] = append(counts[o.Key], o.Count)
	}
	want := make([]int, 40)
	for i := range want {
		want[i] = i + 1
	}
	for _, k := range []string{"k0", "k1", "k2", "k3", "k4"} {
		if got := slices.Sorted(slices.Values(counts[k])); !slices.Equal(got, want) {
			t.Errorf("%s: counts %v, want 1..40 once each", k, got)
		}
	}
	if len(counts) != 5 {
		t.Errorf("output keys %d, want 5", len(counts))
	}
	var names []string
	if store != nil {
		var err error
		if names, err = store.List("", ""); err != nil {
			t.Fatal(err)
		}
	} else {
		ents, err := os.ReadDir(filepath.Join(dir, "chk", "legacy", state.RemoteDirName))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	objects := 0
	for _, n := range names {
		if strings.HasSuffix(n, ".sst") {
			objects++
		}
	}
	if objects == 0 || localTables != 0 {
		t.Fatalf("remote store holds %d tables, local state dir was seen with %d; want > 0 and 0", objects, localTables)
	}

	// The state tool's read of the last checkpoint.
	chks, _ := filepath.Glob(filepath.Join(dir, "chk", "legacy", "chk-*"))
	last, lastID := "", -1
	for _, c := range chks {
		if id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(c), "chk-")); err == nil && id > lastID {
			last, lastID = c, id
		}
	}
	r := job.CheckpointReader{Scratch: t.TempDir(), RemoteStore: store}
	got := map[string]string{}
	if err := r.Dump(last, job.StateFilter{Operator: "count"}, func(e job.DumpedEntry) error {
		if e.Key != nil {
			got[*e.Key] = string(e.Value)
		}
		return nil
	}); err != nil {
		t.Fatalf("dump %s: %v", last, err)
	}
	if want := map[string]string{"k0": "40", "k1": "40", "k2": "40", "k3": "40", "k4": "40"}; !maps.Equal(got, want) {
		t.Fatalf("dump of %s: %v, want %v", last, got, want)
	}
	sum, err := r.Summarize(last)
	if err != nil {
		t.Fatalf("summarize %s: %v", last, err)
	}
	if op := sum.Operators["count"]; op == nil || op.Backend != state.KindPebble || len(op.KeyedStates) != 1 || op.KeyedStates[0].Entries != 5 {
		t.Fatalf("summary of count: %+v", op)
	}
	if store != nil {
		// Without the store the objects are looked for on the filesystem.
		if _, err := (job.CheckpointReader{Scratch: t.TempDir()}).Summarize(last); err == nil || !strings.Contains(err.Error(), "remote") {
			t.Fatalf("summarize without the S3 store: %v, want the remote objects missing", err)
		}
	}
}
