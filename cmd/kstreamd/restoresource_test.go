package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/sink"
)

// Issue 14's acceptance tests of items 3 to 5: a changed
// transactional_id_prefix, an inconsistent checkpoint, and an incremental
// checkpoint restored by another job.

// stableAtEnd polls until the last stable offset of every partition of
// topic equals its high watermark (no open transaction holds read_committed
// readers back) and reports whether that happened within limit, with the
// offsets last seen.
func stableAtEnd(t *testing.T, adm *kadm.Client, topic string, partitions int, limit time.Duration) (bool, string) {
	t.Helper()
	var lso, hwm map[int32]int64
	ok := testkit.Poll(limit, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			return false
		}
		lso = map[int32]int64{}
		l.Each(func(o kadm.ListedOffset) { lso[o.Partition] = o.Offset })
		if hwm, err = endOffsets(ctx, adm, topic); err != nil {
			return false
		}
		for p, o := range hwm {
			if lso[p] != o {
				return false
			}
		}
		return len(hwm) == partitions
	})
	return ok, fmt.Sprintf("last stable offsets %v, high watermarks %v", lso, hwm)
}

// TestExactlyOncePrefixChange: the job writes under transactional_id_prefix
// "old-prefix" and is SIGKILLed while its sink subtasks hold open
// transactions with records; it restarts with "new-prefix". The restore
// fences the old prefix's ids too (they are in the restored committables):
// the lingering transactions are aborted at once, so once the job idles the
// last stable offset equals the high watermark within seconds, not after
// the 10-minute transaction timeout. The fences and aborts are counted, and
// the read_committed matches are exact.
func TestExactlyOncePrefixChange(t *testing.T) {
	const p = 2
	_, broker := startKfake(t, referenceTopics)
	dir := t.TempDir()
	metrics := testkit.FreeAddr(t)
	cl := newClient(t, broker)
	adm := kadm.NewClient(cl)
	rng := rand.New(rand.NewPCG(14, 3))
	colors := make([]string, 16)
	for i := range colors {
		colors[i] = fmt.Sprintf("c%02d", i)
	}
	var oldIDs []string
	for sub := 0; sub < p; sub++ {
		for slot := 0; slot < sink.PoolSizeFor(3); slot++ {
			oldIDs = append(oldIDs, sink.TransactionalID("old-prefix", sub, slot))
		}
	}
	config := func(prefix string) string {
		return eoConfig(dir, broker, metrics, eoOptions{parallelism: p, interval: "500ms", timeout: "10m",
			sinkExtra: "    transactional_id_prefix: " + prefix + "\n"})
	}
	ongoingOld := func() map[string]kadm.DescribedTransaction {
		ds, err := adm.DescribeTransactions(context.Background(), oldIDs...)
		if err != nil {
			return nil
		}
		out := map[string]kadm.DescribedTransaction{}
		for id, dt := range ds {
			if dt.State == "Ongoing" {
				out[id] = dt
			}
		}
		return out
	}

	d := startProc(t, dir, config("old-prefix"), broker, metrics)
	loadRules(t, cl, d, p)
	next := 1
	completed := map[string]string{"kind": "checkpoint", "result": "completed"}
	if !testkit.Poll(30*time.Second, func() bool {
		produce(t, cl, genItems(rng, next, 100, colors)...)
		next += 100
		if v, err := testkit.Scrape(d.url(), "kstreamd_checkpoints_total", completed); err != nil || v < 2 {
			return false
		}
		return len(ongoingOld()) > 0
	}) {
		t.Fatalf("no transaction of old-prefix ever ongoing:\n%s", d.out.String())
	}
	d.kill(t)
	ongoing := ongoingOld()
	if len(ongoing) == 0 {
		t.Fatalf("no transaction of old-prefix ongoing after the kill")
	}

	d = startProc(t, dir, config("new-prefix"), broker, metrics)
	log := d.out.String()
	lingering := 0
	for id := range ongoing {
		if logCount(log, "committed restored transaction", "transactional_id="+id+" ") == 0 {
			lingering++
		}
	}
	if lingering == 0 {
		t.Fatalf("every ongoing old-prefix transaction was a restored pre-commit; none lingered:\n%s", log)
	}
	if still := ongoingOld(); len(still) != 0 {
		t.Fatalf("old-prefix transactions still ongoing after the restore: %v", slices.Sorted(mapKeys(still)))
	}
	// Every match the killed run's checkpoint committed or that this run
	// replays is read, and nothing holds readers back once the job idles.
	want := expectedMatches(t, testkit.ReadTopic(t, []string{broker}, "items", 20*time.Second))
	got, _ := waitMatches(t, d, broker, want, 30*time.Second, time.Second)
	if !slices.Equal(got, want) {
		t.Fatalf("read_committed matches: %s", diffMatches(got, want))
	}
	if ok, s := stableAtEnd(t, adm, "matches", 4, 20*time.Second); !ok {
		t.Fatalf("read_committed readers held back after the prefix change: %s\n%s", s, d.out.String())
	}
	// Prefixes new-prefix and old-prefix, 2 subtasks, pool 6 (the default
	// for tolerable_failures 3): 24 ids fenced; each lingering transaction
	// aborted by its fence.
	for result, want := range map[string]float64{"fenced": float64(2 * p * sink.PoolSizeFor(3)), "aborted": float64(lingering), "lost": 0} {
		if v := d.scrape(t, "kstreamd_sink_transactions_total", map[string]string{"sink": "matches", "result": result}); v != want {
			t.Errorf("kstreamd_sink_transactions_total{result=%q} = %v, want %v", result, v, want)
		}
	}
	if n := logCount(d.out.String(), "fenced and aborted an open transaction of a previous run", "transactional_id=old-prefix-"); n != lingering {
		t.Errorf("%d log lines name an aborted old-prefix transaction, want %d", n, lingering)
	}
	checkNoLoss(t, d)
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// restoreJobConfig is the reference job named name on the broker at broker,
// its data under dir: Pebble state, incremental checkpoints every 100 ms,
// an exactly-once sink.
func restoreJobConfig(name, dir, broker, metrics string, p int) string {
	return jobHead(name, p, dir, brokersKafka(broker), metrics, "info") + `state:
  backend: pebble
checkpoints:
  interval: 100ms
  incremental: true
` + referencePipeline + `    delivery: exactly-once
    transaction_timeout: 1m
`
}

// runToCheckpoint produces items and waits until a checkpoint taken after
// the job read them all completed.
func runToCheckpoint(t *testing.T, d *daemon, cl *kgo.Client, items []*kgo.Record) float64 {
	t.Helper()
	base, err := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", map[string]string{"operator": "items"})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, cl, items...)
	testkit.WaitMetric(t, 20*time.Second, d.url(), "kstreamd_operator_records_in_total", map[string]string{"operator": "items"}, base+float64(len(items)))
	last, err := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	if err != nil {
		t.Fatal(err)
	}
	return waitCheckpointAfter(t, d, last)
}

// TestRestoreCheckpointOfAnotherJob is item 5's acceptance: an incremental
// checkpoint of job A (its shared files in A's directory) is restored by
// job B of another name and data dir with --from-savepoint; B runs and
// checkpoints; A's whole directory is deleted; B restarts from its own
// latest checkpoint and goes on. The matches need A's keyed state (the
// RECTANGLEs of the first phase pair with TRIANGLEs of the later ones) and
// are exact with read_committed. The same holds for a checkpoint whose
// metadata is of version 1 (an older kstreamd), which records no shared_dir.
func TestRestoreCheckpointOfAnotherJob(t *testing.T) {
	for _, version := range []int{checkpoint.MetadataVersion, 1} {
		t.Run(fmt.Sprintf("metadata v%d", version), func(t *testing.T) { restoreOtherJob(t, version) })
	}
}

func restoreOtherJob(t *testing.T, version int) {
	const p = 2
	_, broker := startKfake(t, referenceTopics)
	root := t.TempDir()
	dirA, dirB := filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, d := range []string{dirA, dirB} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	metrics := testkit.FreeAddr(t)
	cl := newClient(t, broker)
	colors := []string{"red", "blue", "green", "yellow", "black", "white"}
	var items []*kgo.Record
	phase := func(first int, shape string) []*kgo.Record {
		var recs []*kgo.Record
		for i, c := range colors {
			recs = append(recs, item(first+i, c, shape))
		}
		items = append(items, recs...)
		return recs
	}

	a := startDaemon(t, dirA, restoreJobConfig("job-a", dirA, broker, metrics, p), broker, metrics)
	produce(t, cl, eoRules()...)
	testkit.WaitMetric(t, 15*time.Second, a.url(), "kstreamd_broadcast_rules", map[string]string{"operator": "matcher"}, 2*p)
	runToCheckpoint(t, a, cl, phase(1, "RECTANGLE"))
	if code := a.stop(t); code != 0 {
		t.Fatalf("job A exit %d", code)
	}
	storeA := checkpoint.NewStorage(filepath.Join(dirA, "checkpoints"), "job-a", 0, nil)
	chkA, metaA, err := storeA.Latest()
	if err != nil || metaA.Savepoint || len(metaA.SharedFiles) == 0 {
		t.Fatalf("job A's latest: %s %+v %v; want an incremental checkpoint with shared files", chkA, metaA, err)
	}
	if version == 1 {
		downgradeMetadata(t, chkA)
	}

	b := startDaemon(t, dirB, restoreJobConfig("job-b", dirB, broker, metrics, p), broker, metrics, "--from-savepoint", chkA)
	restoringFrom(t, b.out.String(), chkA)
	if !strings.Contains(b.out.String(), "linked the restored checkpoint's shared files into the job's shared directory") {
		t.Errorf("job B did not log linking A's shared files:\n%s", b.out.String())
	}
	runToCheckpoint(t, b, cl, phase(101, "TRIANGLE"))
	runToCheckpoint(t, b, cl, phase(201, "RECTANGLE"))
	if code := b.stop(t); code != 0 {
		t.Fatalf("job B exit %d", code)
	}
	storeB := checkpoint.NewStorage(filepath.Join(dirB, "checkpoints"), "job-b", 0, nil)
	chkB, metaB, err := storeB.Latest()
	if err != nil || metaB.Version != checkpoint.MetadataVersion || metaB.Job != "job-b" || metaB.CheckpointID <= metaA.CheckpointID {
		t.Fatalf("job B's latest: %s %+v %v", chkB, metaB, err)
	}
	for _, f := range metaB.SharedFiles {
		if slices.Contains(metaA.SharedFiles, f) {
			t.Errorf("job B's checkpoint %d refers to job A's shared file %s", metaB.CheckpointID, f)
		}
	}

	if err := os.RemoveAll(dirA); err != nil {
		t.Fatal(err)
	}
	var out testkit.SyncBuffer
	if code := run(context.Background(), []string{"checkpoints", "verify", chkB}, &out, &out); code != 0 {
		t.Fatalf("checkpoints verify %s after deleting job A = %d:\n%s", chkB, code, out.String())
	}
	b = startDaemon(t, dirB, restoreJobConfig("job-b", dirB, broker, metrics, p), broker, metrics)
	restoringFrom(t, b.out.String(), chkB)
	runToCheckpoint(t, b, cl, phase(301, "TRIANGLE"))
	want := expectedMatches(t, items)
	if len(want) != 2*len(colors) {
		t.Fatalf("expected %d matches, want 2 per colour", len(want))
	}
	var got []string
	testkit.Poll(20*time.Second, func() bool {
		got = matchStrings(t, testkit.ReadTopic(t, []string{broker}, "matches", 10*time.Second))
		return len(got) >= len(want)
	})
	if !slices.Equal(got, want) {
		t.Fatalf("read_committed matches: %s", diffMatches(got, want))
	}
	if code := b.stop(t); code != 0 {
		t.Fatalf("job B exit %d", code)
	}
}

// downgradeMetadata rewrites the metadata in dir as kstreamd wrote version
// 1: no shared_dir, no required_states.
func downgradeMetadata(t *testing.T, dir string) {
	t.Helper()
	path := filepath.Join(dir, checkpoint.MetadataFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["version"] = 1
	delete(m, "shared_dir")
	for _, op := range m["operators"].(map[string]any) {
		delete(op.(map[string]any), "required_states")
	}
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestInconsistentCheckpointRefused is item 4's acceptance: the latest
// checkpoint of an exactly-once job loses one sink subtask's committable
// (hand-edited _metadata). `checkpoints verify` reports it with exit 1; a
// start refuses it before anything is read (no "job running", no restored
// transaction committed, no transactional id fenced), naming the
// checkpoint, the sink subtask and the missing state, and exits 1. The
// intact checkpoint verifies with exit 0. The same holds for version-1
// metadata, where the committables are inferred.
func TestInconsistentCheckpointRefused(t *testing.T) {
	const p = 2
	_, broker := startKfake(t, referenceTopics)
	dir := t.TempDir()
	metrics := testkit.FreeAddr(t)
	cl := newClient(t, broker)
	cfg := restoreJobConfig("colorshape", dir, broker, metrics, p)
	d := startDaemon(t, dir, cfg, broker, metrics)
	produce(t, cl, eoRules()...)
	testkit.WaitMetric(t, 15*time.Second, d.url(), "kstreamd_broadcast_rules", map[string]string{"operator": "matcher"}, 2*p)
	runToCheckpoint(t, d, cl, []*kgo.Record{item(1, "red", "RECTANGLE"), item(2, "blue", "RECTANGLE")})
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	store := checkpoint.NewStorage(filepath.Join(dir, "checkpoints"), "colorshape", 0, nil)
	chk, meta, err := store.Latest()
	if err != nil {
		t.Fatal(err)
	}
	verify := func() (int, string) {
		var out testkit.SyncBuffer
		code := run(context.Background(), []string{"checkpoints", "verify", chk}, &out, &out)
		return code, out.String()
	}
	if code, out := verify(); code != 0 || !strings.Contains(out, fmt.Sprintf("%s: ok: checkpoint %d of job colorshape", chk, meta.CheckpointID)) {
		t.Fatalf("verify of the intact checkpoint = %d:\n%s", code, out)
	}
	pristine, err := os.ReadFile(filepath.Join(chk, checkpoint.MetadataFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, version := range []int{checkpoint.MetadataVersion, 1} {
		t.Run(fmt.Sprintf("metadata v%d", version), func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(chk, checkpoint.MetadataFile), pristine, 0o644); err != nil {
				t.Fatal(err)
			}
			if version == 1 {
				downgradeMetadata(t, chk)
			}
			dropCommittables(t, chk, "matches", 1)
			problem := fmt.Sprintf(`operator "matches" subtask 1: holds no entry of %q, which every subtask must hold`, sink.CommittablesState)
			code, out := verify()
			if code != 1 || !strings.Contains(out, fmt.Sprintf("%s: checkpoint %d of job colorshape is inconsistent:\n  %s\n", chk, meta.CheckpointID, problem)) {
				t.Fatalf("verify of the damaged checkpoint = %d, want 1 naming %q:\n%s", code, problem, out)
			}
			r := launchDaemon(t, dir, cfg, broker, metrics)
			if code := r.waitExit(t, 30*time.Second); code != 1 {
				t.Fatalf("start on the damaged checkpoint exit %d, want 1:\n%s", code, r.out.String())
			}
			log := r.out.String()
			wantErr := fmt.Sprintf("checkpoint %d (%s) is inconsistent, refusing to restore it: %s", meta.CheckpointID, chk, problem)
			if logCount(log, "job failed", strings.ReplaceAll(wantErr, `"`, `\"`)) != 1 {
				t.Errorf("log does not refuse with %q:\n%s", wantErr, log)
			}
			for _, never := range []string{"job running", "restoring", "committed restored transaction", "fenced"} {
				if strings.Contains(log, never) {
					t.Errorf("log holds %q: the refusal came too late:\n%s", never, log)
				}
			}
		})
	}
}

// dropCommittables empties the committables of one subtask of sinkName in
// the metadata in dir.
func dropCommittables(t *testing.T, dir, sinkName string, subtask int) {
	t.Helper()
	path := filepath.Join(dir, checkpoint.MetadataFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	sub := m["operators"].(map[string]any)[sinkName].(map[string]any)["subtasks"].([]any)[subtask].(map[string]any)
	st := sub["operator"].(map[string]any)[sink.CommittablesState].(map[string]any)
	if len(st["entries"].([]any)) == 0 {
		t.Fatalf("sink subtask %d has no committable to drop", subtask)
	}
	st["entries"] = []any{}
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointsVerifyCommandLine: the command's usage and failures.
func TestCheckpointsVerifyCommandLine(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "chk-9")
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"no dir", []string{"checkpoints", "verify"}, 2, "usage: kstreamd checkpoints verify DIR"},
		{"two dirs", []string{"checkpoints", "verify", "a", "b"}, 2, "usage: kstreamd checkpoints verify DIR"},
		{"no metadata", []string{"checkpoints", "verify", missing}, 1, "kstreamd checkpoints verify: open " + filepath.Join(missing, checkpoint.MetadataFile) + ": no such file or directory"},
		{"help", []string{"checkpoints", "--help"}, 0, "usage: kstreamd checkpoints <command> [flags]\n\ncommands:\n  list --dir DIR"},
		{"help names verify", []string{"checkpoints", "--help"}, 0, "\n  verify DIR              check the checkpoint or savepoint in DIR as a restore\n"},
		{"unknown sub-command", []string{"checkpoints", "check"}, 2, "usage: kstreamd checkpoints <command> [flags]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out testkit.SyncBuffer
			if code := run(context.Background(), tc.args, &out, &out); code != tc.code || !strings.Contains(out.String(), tc.out) {
				t.Fatalf("kstreamd %s = %d:\n%s\nwant %d with %q", strings.Join(tc.args, " "), code, out.String(), tc.code, tc.out)
			}
		})
	}
}
