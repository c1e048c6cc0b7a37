package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// The test in this file runs the broker in the test process (kfake), so
// that it outlives the kstreamd child processes it kills.

// crashCountConfig is a keyed count job on the broker at broker: source
// events (topic events), operator counts (keyed_count by key), sink counted
// (topic counts, at-least-once), checkpoints every 100 ms, Pebble state.
func crashCountConfig(dir, broker, metrics string, incremental bool) string {
	return jobHead("crashcount", 2, dir, brokersKafka(broker), metrics, "info") + fmt.Sprintf(`state:
  backend: pebble
checkpoints:
  interval: 100ms
  incremental: %t
sources:
  - name: events
    topic: events
operators:
  - name: counts
    type: keyed_count
    input: events
    key_by: key
sinks:
  - name: counted
    input: counts
    topic: counts
    delivery: at-least-once
`, incremental)
}

// TestCrashRecoveryKeyedCount is issue 4's crash-recovery acceptance test:
// a keyed count over 200,000 records on 1,000 keys; the daemon is killed with
// SIGKILL at three random moments while it processes and restarted each time
// on the same data directory, restoring its latest checkpoint. In the end
// every key's count is exactly 200: the highest count emitted per key is 200
// (a lost record would leave it short, a record counted twice would push it
// over), and every count 1..200 was emitted (at-least-once output). It runs
// with full and with incremental Pebble checkpoints.
func TestCrashRecoveryKeyedCount(t *testing.T) {
	for _, incremental := range []bool{false, true} {
		t.Run(fmt.Sprintf("incremental=%t", incremental), func(t *testing.T) { crashRecovery(t, incremental) })
	}
}

func crashRecovery(t *testing.T, incremental bool) {
	const (
		keys    = 1000
		records = 200_000
		perKey  = records / keys
		batch   = 1000
	)
	start := time.Now()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	t.Logf("seed %d", seed)

	_, broker := startKfake(t, []string{"events", "counts"})
	dir := t.TempDir()
	metrics := testkit.FreeAddr(t)
	cfg := crashCountConfig(dir, broker, metrics, incremental)

	cl := newClient(t, broker, kgo.DefaultProduceTopic("events"))
	adm := kadm.NewClient(cl)

	newRecords := func(i, j int) []*kgo.Record {
		recs := make([]*kgo.Record, 0, j-i)
		for n := i; n < j; n++ {
			k := fmt.Sprintf("k%04d", n%keys)
			recs = append(recs, &kgo.Record{Key: []byte(k), Value: fmt.Appendf(nil, `{"key":%q,"n":%d}`, k, n)})
		}
		return recs
	}

	in := map[string]string{"operator": "events"}
	completed := map[string]string{"kind": "checkpoint", "result": "completed"}
	d := startProc(t, dir, cfg, broker, metrics)
	// The producer writes the records at a steady pace while the daemon
	// runs, is killed and restarts: 200 batches of 1,000 records, one batch
	// every 40 ms (about 8 s in all).
	prod := producePaced(t, cl, records, batch, 40*time.Millisecond, newRecords)
	for kill := 1; kill <= 3; kill++ {
		// Kill at a random moment of the k-th third of the production, once
		// this process read a random number of records; the second and
		// third kills also wait for two checkpoints of this process, so at
		// least two land after checkpoints completed.
		third := int64(records / 3)
		after := int64(kill-1)*third + rng.Int64N(third/2)
		threshold := float64(2000 + rng.IntN(12000))
		wantCheckpoints := 0.0
		if kill > 1 {
			wantCheckpoints = 2
		}
		var read, chk float64
		ok := testkit.Poll(30*time.Second, func() bool {
			if d.exited() {
				return true
			}
			var err1, err2 error
			read, err1 = testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", in)
			chk, err2 = testkit.Scrape(d.url(), "kstreamd_checkpoints_total", completed)
			return err1 == nil && err2 == nil && read >= threshold && chk >= wantCheckpoints && prod.produced.Load() >= after
		})
		if d.exited() {
			t.Fatalf("kstreamd exited on its own before kill %d:\n%s", kill, d.out.String())
		}
		if !ok {
			t.Fatalf("kill %d: after 30s this process read %v records (want >= %v) and completed %v checkpoints (want >= %v); %d produced (want >= %d)",
				kill, read, threshold, chk, wantCheckpoints, prod.produced.Load(), after)
		}
		last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
		d.kill(t)
		t.Logf("kill %d at %v: this process had read %v records (threshold %v), completed %v checkpoints (last id %v); %d records produced",
			kill, time.Since(start).Round(time.Millisecond), read, threshold, chk, last, prod.produced.Load())
		d = startProc(t, dir, cfg, broker, metrics)
		// The restart restores the latest completed checkpoint: the one
		// seen last, or a later one that completed before the kill.
		if last > 0 {
			lines := restoreLines(d.out.String())
			var id float64
			if len(lines) == 1 {
				id, _ = strconv.ParseFloat(logField(lines[0], "checkpoint_id"), 64)
			}
			if id < last {
				t.Fatalf("restart after kill %d: \"restoring\" lines %q, want one restoring checkpoint %v or later", kill, lines, last)
			}
			t.Logf("restart %d restores checkpoint %v", kill, id)
		}
	}

	prod.wait(t, 30*time.Second)
	t.Logf("all %d records produced at %v", records, time.Since(start).Round(time.Millisecond))

	// Done when a completed checkpoint covers every record: the monitoring
	// group's offsets, committed on checkpoint completion, reach the end
	// offsets; the at-least-once sink flushed everything before it.
	ends := topicEnds(t, adm, "events", records)
	waitGroupAt(t, adm, "kstreamd-crashcount", "events", ends, 45*time.Second, d)
	t.Logf("a checkpoint covering every record completed at %v", time.Since(start).Round(time.Millisecond))

	out := testkit.ReadTopic(t, []string{broker}, "counts", 30*time.Second)
	maxCount := map[string]int{}
	seen := map[string][]bool{}
	for _, r := range out {
		var c struct {
			Key   string `json:"key"`
			Count int    `json:"count"`
		}
		if err := json.Unmarshal(r.Value, &c); err != nil {
			t.Fatalf("counts record %q: %v", r.Value, err)
		}
		if string(r.Key) != c.Key {
			t.Fatalf("counts record %s has Kafka key %q", r.Value, r.Key)
		}
		if c.Count < 1 {
			t.Fatalf("counts record %s: count < 1", r.Value)
		}
		maxCount[c.Key] = max(maxCount[c.Key], c.Count)
		if seen[c.Key] == nil {
			seen[c.Key] = make([]bool, perKey+1)
		}
		if c.Count <= perKey {
			seen[c.Key][c.Count] = true
		}
	}
	t.Logf("%d count records for %d keys (%d duplicates from replays)", len(out), len(maxCount), len(out)-records)
	if len(maxCount) != keys {
		t.Errorf("%d keys in the counts topic, want %d", len(maxCount), keys)
	}
	bad := 0
	for i := 0; i < keys; i++ {
		k := fmt.Sprintf("k%04d", i)
		if got := maxCount[k]; got != perKey {
			if bad++; bad <= 20 {
				t.Errorf("key %s: highest count %d, want exactly %d", k, got, perKey)
			}
			continue
		}
		for n := 1; n <= perKey; n++ {
			if !seen[k][n] {
				if bad++; bad <= 20 {
					t.Errorf("key %s: count %d never emitted (at-least-once output lost it)", k, n)
				}
				break
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d keys wrong", bad, keys)
	}
	t.Logf("finished in %v", time.Since(start).Round(time.Millisecond))
}
