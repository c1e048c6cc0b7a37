package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/state"
)

// remoteChaosConfig is a keyed count and a tumbling 1 s event-time window
// count over one source, both keyed by key, exactly-once sinks, at job
// parallelism p, checkpoints every 150 ms, on the disaggregated pebble
// backend whose tables live on the S3 store at s3addr.
func remoteChaosConfig(dir, broker, metrics, s3addr string, p int) string {
	return jobHead("remotechaos", p, dir, brokersKafka(broker), metrics, "info") + `state:
  backend: pebble
  remote:
    cache_bytes: 1048576
    store: s3
    s3:
      endpoint: ` + s3addr + `
      bucket: state
      prefix: chaos/
      tls: false
checkpoints:
  interval: 150ms
sources:
  - name: events
    topic: events
    timestamp: {expression: ts}
operators:
  - name: counts
    type: keyed_count
    input: events
    key_by: key
  - name: windows
    type: window
    input: events
    key_by: key
    params:
      kind: tumbling
      size: 1s
      aggregates: [{name: n, fn: count}]
sinks:
  - name: counted
    input: counts
    topic: counts
    delivery: exactly-once
    transaction_timeout: 1m
  - name: windowed
    input: windows
    topic: windows
    delivery: exactly-once
    transaction_timeout: 1m
`
}

// TestRemoteStateChaos is issue 27's chaos acceptance test: the keyed
// count and the window job of remoteChaosConfig on remote state (tables on
// an in-process S3 server that outlives the daemons, like the kfake
// broker) over 12,000 records on 40 keys, event times t0 + n ms; the
// daemon is killed with SIGKILL 20 times at random points
// (kill9Restarts: after a random number of records and 0 to 2
// checkpoints) and restarted each time with another parallelism (1 to 4),
// restoring and rescaling by reference. Once every record is covered by a
// checkpoint and a tick on every partition moved the watermark past the
// last window, the read_committed output is exact: each key's counts are
// 1..300, each once; each key's windows are the 12 windows of 1 s, each
// once with n = 25; the store holds markers of the live run's instances
// only (the restarts released the killed runs'). (About 60 to 90 s on a loaded machine: each of the 21
// runs starts a process and restores by reference.)
func TestRemoteStateChaos(t *testing.T) {
	const (
		records = 12_000
		keys    = 40
		batch   = 100
		kills   = 20
		windows = records / 1000
	)
	start := time.Now()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	t.Logf("seed %d", seed)

	_, broker := startKfake(t, []string{"events", "counts", "windows"})
	s3addr := testkit.S3Server(t, "state", true)
	env := []string{"AWS_ACCESS_KEY_ID=" + testkit.S3AccessKey, "AWS_SECRET_ACCESS_KEY=" + testkit.S3SecretKey}
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cl := newClient(t, broker, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	key := func(n int) string { return fmt.Sprintf("k%02d", n%keys) }
	partition := func(n int) int32 { return int32(n % keys % 4) }

	d, prod := kill9Restarts{rng: rng, kills: kills, operator: "counts", spread: 600,
		start: func(p int) *proc {
			return startProcEnv(t, dir, remoteChaosConfig(dir, broker, metrics, s3addr, p), broker, metrics, env)
		},
		produce: func() *pacedProducer {
			return producePaced(t, cl, records, batch, 150*time.Millisecond, func(i, j int) []*kgo.Record {
				recs := make([]*kgo.Record, 0, j-i)
				for n := i; n < j; n++ {
					k := key(n)
					recs = append(recs, &kgo.Record{Topic: "events", Partition: partition(n), Key: []byte(k),
						Value: fmt.Appendf(nil, `{"key":%q,"n":%d,"ts":%d}`, k, n, t0+int64(n))})
				}
				return recs
			})
		},
		killed:    func(int) string { return "" },
		restarted: func(int) {},
	}.run(t, records)
	prod.wait(t, 60*time.Second)
	ends := topicEnds(t, adm, "events", records)
	var ticks []*kgo.Record
	for p := range int32(4) {
		ticks = append(ticks, &kgo.Record{Topic: "events", Partition: p, Key: []byte("tick"), Value: fmt.Appendf(nil, `{"key":"tick","n":-1,"ts":%d}`, t0+records+5000)})
		ends[p]++
	}
	produce(t, cl, ticks...)
	waitGroupAt(t, adm, "kstreamd-remotechaos", "events", ends, 60*time.Second, d)
	t.Logf("a checkpoint covering every record completed at %v", time.Since(start).Round(time.Millisecond))

	// The keyed count: per key the counts 1..300 (tick: 1..4), each once.
	perKey := records / keys
	var counts map[string][]int
	var windowed map[string][]string
	read := func() bool {
		counts = map[string][]int{}
		for _, r := range testkit.ReadTopic(t, []string{broker}, "counts", 10*time.Second) {
			var c struct {
				Key   string `json:"key"`
				Count int    `json:"count"`
			}
			if err := json.Unmarshal(r.Value, &c); err != nil {
				t.Fatalf("counts record %q: %v", r.Value, err)
			}
			counts[c.Key] = append(counts[c.Key], c.Count)
		}
		windowed = map[string][]string{}
		for _, r := range testkit.ReadTopic(t, []string{broker}, "windows", 10*time.Second) {
			var w struct {
				Key   string `json:"key"`
				Start string `json:"window_start"`
				N     int    `json:"n"`
			}
			if err := json.Unmarshal(r.Value, &w); err != nil {
				t.Fatalf("windows record %q: %v", r.Value, err)
			}
			windowed[w.Key] = append(windowed[w.Key], fmt.Sprintf("%s=%d", w.Start, w.N))
		}
		n := 0
		for _, c := range counts {
			n += len(c)
		}
		m := 0
		for _, w := range windowed {
			m += len(w)
		}
		return n >= records+1 && m >= keys*windows
	}
	if !testkit.Poll(30*time.Second, read) {
		t.Logf("read_committed output short after 30s")
	}
	wantCounts := make([]int, perKey)
	for i := range wantCounts {
		wantCounts[i] = i + 1
	}
	var wantWindows []string
	for w := range windows {
		wantWindows = append(wantWindows, fmt.Sprintf("%s=%d", time.UnixMilli(t0+int64(w)*1000).UTC().Format(time.RFC3339), 1000/keys))
	}
	bad := 0
	for i := range keys {
		k := key(i)
		if got := slices.Sorted(slices.Values(counts[k])); !slices.Equal(got, wantCounts) {
			if bad++; bad <= 5 {
				t.Errorf("key %s: %d counts %v, want 1..%d once each", k, len(got), got, perKey)
			}
		}
		if got := slices.Sorted(slices.Values(windowed[k])); !slices.Equal(got, wantWindows) {
			if bad++; bad <= 5 {
				t.Errorf("key %s: windows %v, want %v", k, got, wantWindows)
			}
		}
	}
	if tick := slices.Sorted(slices.Values(counts["tick"])); len(counts) != keys+1 || !slices.Equal(tick, []int{1, 2, 3, 4}) {
		t.Errorf("count keys %d (want %d), tick counts %v (want 1..4: one tick per partition)", len(counts), keys+1, tick)
	}
	if len(windowed) != keys {
		t.Errorf("window keys %d, want %d (the tick's window never closes)", len(windowed), keys)
	}
	checkNoLoss(t, d)
	if log := d.out.String(); !strings.Contains(log, "restor") {
		t.Errorf("the last daemon restored nothing:\n%s", log)
	}
	// The killed runs' reference markers were released by the restarts
	// (state.ReleaseDeadRemoteInstances): the store's markers belong to
	// the live run's instances only, at most one per keyed subtask (2
	// operators at parallelism <= 4).
	mc, err := minio.New(s3addr, &minio.Options{Creds: credentials.NewStaticV4(testkit.S3AccessKey, testkit.S3SecretKey, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	names, err := state.NewRemoteS3Store(mc, "state", "chaos/").List("", "")
	if err != nil {
		t.Fatal(err)
	}
	creators := map[string]bool{}
	for _, n := range names {
		if _, rest, ok := strings.Cut(n, ".ref."); ok {
			creators[strings.SplitN(rest, ".", 2)[0]] = true
		}
	}
	if len(creators) == 0 || len(creators) > 8 {
		t.Errorf("the store holds markers of %d instances, want 1 to 8 (the live run's): killed runs' markers were not released", len(creators))
	}
	t.Logf("store: %d names, markers of %d instances", len(names), len(creators))
	t.Logf("finished in %v", time.Since(start).Round(time.Millisecond))
}
