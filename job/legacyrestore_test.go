package job_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
)

// writeLegacyFixture regenerates testdata/savepoint-v2: run once, with the
// code of main before the connector seam (commit 2eeb386), to write the
// savepoint a restore must keep reading. Regenerating it with newer code
// would no longer test what it is for (TestLegacySavepointRestores checks
// it still is a version-2 savepoint).
var writeLegacyFixture = flag.Bool("write-legacy-fixture", false, "rewrite testdata/savepoint-v2 with this code")

// legacyYAML is the job of the legacy fixture: a keyed count over two
// source partitions into an exactly-once Kafka sink.
const legacyYAML = `
job:
  name: legacy
  max_parallelism: 16
kafka:
  brokers: [localhost:9092]
checkpoints:
  interval: 100ms
  timeout: 1m
sources:
  - name: in
    topic: in
    parallelism: 2
operators:
  - name: count
    type: keyed_count
    input: in
    key_by: k
    parallelism: 2
sinks:
  - name: out
    input: count
    topic: out
    delivery: exactly-once
    transaction_timeout: 5m
`

// legacyFixture is where the version-2 savepoint is kept.
const legacyFixture = "testdata/savepoint-v2"

// produceLegacy writes records from..to-1 of the fixture's input to topic
// in: record i is {"k":"k<i%5>","n":i} on partition i%2, so the same
// records land at the same offsets on every broker.
func produceLegacy(t *testing.T, opts []kgo.Opt, from, to int) {
	t.Helper()
	cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("in"), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := from; i < to; i++ {
		recs = append(recs, &kgo.Record{Partition: int32(i % 2), Value: fmt.Appendf(nil, `{"k":"k%d","n":%d}`, i%5, i)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// countOutput is one output record of keyed_count.
type countOutput struct {
	Key   string `json:"key"`
	Count int    `json:"count"`
}

// TestLegacySavepointRestores: a savepoint written by the code before the
// connector seam (metadata version 2, Kafka committables in
// kafka-sink-committables; testdata/savepoint-v2, taken after records
// 0..99 of the input, each key k0..k4 counted 20 times, its sink
// transaction an empty epoch) restores on today's code with exact output:
// with records 0..199 on the topic at the same offsets, the job reads
// exactly records 100..199 and the committed output is, per key, the
// counts 21..40, each once, and nothing else.
func TestLegacySavepointRestores(t *testing.T) {
	if *writeLegacyFixture {
		writeLegacySavepoint(t)
	}
	m, err := checkpoint.ReadMetadata(legacyFixture)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != 2 {
		t.Fatalf("the fixture has metadata version %d; it must stay the version-2 savepoint main wrote", m.Version)
	}
	sinkStates, err := checkpoint.DecodeTaskStates(m.Operators["out"])
	if err != nil {
		t.Fatal(err)
	}
	for i, ts := range sinkStates {
		if n := len(ts.Operator[checkpoint.LegacyKafkaCommittables].Entries); n != 1 {
			t.Fatalf("fixture sink subtask %d holds %d legacy committables, want 1", i, n)
		}
	}

	dir := t.TempDir()
	sp := filepath.Join(dir, "savepoint")
	if err := os.CopyFS(sp, os.DirFS(legacyFixture)); err != nil {
		t.Fatal(err)
	}
	_, opts := newKafka(t, kfake.SeedTopics(2, "in", "out"))
	produceLegacy(t, opts, 0, 200)
	cfg := parseConfig(t, "legacy.yaml", legacyYAML)
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	set := cfg.Settings()
	set.CheckpointDir, set.StateDir, set.StateBackend = filepath.Join(dir, "chk"), filepath.Join(dir, "state"), "hashmap"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j, err := job.Build(ctx, g, set, job.Deps{ClientOpts: opts, FromSavepoint: sp})
	if err != nil {
		t.Fatal(err)
	}
	if j.RestoredFrom() != sp {
		t.Fatalf("restored from %q, want %q", j.RestoredFrom(), sp)
	}
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	var recs []*kgo.Record
	if !testkit.Poll(30*time.Second, func() bool {
		recs, _ = testkit.TryReadTopic(opts, kgo.ReadCommitted(), "out", 2*time.Second)
		return len(recs) >= 100
	}) {
		t.Fatalf("committed output: %d records, want 100", len(recs))
	}
	time.Sleep(300 * time.Millisecond) // a few more checkpoints: nothing else may be committed
	recs = testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "out", 5*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := map[string][]int{}
	for _, r := range recs {
		var o countOutput
		if err := json.Unmarshal(r.Value, &o); err != nil {
			t.Fatalf("output %s: %v", r.Value, err)
		}
		got[o.Key] = append(got[o.Key], o.Count)
	}
	if len(recs) != 100 || len(got) != 5 {
		t.Fatalf("committed output: %d records over keys %v, want 100 over k0..k4", len(recs), slices.Sorted(func(yield func(string) bool) {
			for k := range got {
				yield(k)
			}
		}))
	}
	for k := range 5 {
		key := fmt.Sprint("k", k)
		counts := slices.Sorted(slices.Values(got[key]))
		var want []int
		for c := 21; c <= 40; c++ {
			want = append(want, c)
		}
		if !slices.Equal(counts, want) {
			t.Errorf("key %s: counts %v, want %v", key, counts, want)
		}
	}
}

// writeLegacySavepoint writes legacyFixture: records 0..99, a savepoint
// that commits their output, then a stop-with-savepoint (its sink
// transactions empty epochs: a later restore on another broker has
// nothing to commit) which becomes the fixture.
func writeLegacySavepoint(t *testing.T) {
	dir := t.TempDir()
	_, opts := newKafka(t, kfake.SeedTopics(2, "in", "out"))
	produceLegacy(t, opts, 0, 100)
	cfg := parseConfig(t, "legacy.yaml", legacyYAML)
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	set := cfg.Settings()
	set.CheckpointDir, set.StateDir, set.StateBackend = filepath.Join(dir, "chk"), filepath.Join(dir, "state"), "hashmap"
	set.Interval = 0 // savepoints only
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j, err := job.Build(ctx, g, set, job.Deps{ClientOpts: opts})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	if !testkit.Poll(30*time.Second, func() bool {
		recs, _ := testkit.TryReadTopic(opts, kgo.ReadUncommitted(), "out", time.Second)
		return len(recs) >= 100
	}) {
		t.Fatal("the job did not count 100 records")
	}
	if _, err := j.TriggerSavepoint(ctx, filepath.Join(dir, "sp1"), false); err != nil {
		t.Fatal(err)
	}
	sp, err := j.TriggerSavepoint(ctx, filepath.Join(dir, "sp2"), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "out", 5*time.Second)); n != 100 {
		t.Fatalf("committed output before the fixture: %d, want 100", n)
	}
	if err := os.RemoveAll(legacyFixture); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(legacyFixture, os.DirFS(sp)); err != nil {
		t.Fatal(err)
	}
}
