package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/source"
)

// Issue 22's acceptance tests of items 9 and 10: one partition without a
// leader does not stop the others, and /readyz tells whether every source
// subtask reads its partitions.

// readyz returns /readyz's status and body (0 when it does not answer).
func readyz(metrics string) (int, string) {
	resp, err := http.Get("http://" + metrics + "/readyz")
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// copyConfig is an exactly-once job copying topic events to topic out,
// checkpointing every 200 ms.
func copyConfig(dir, broker, metrics string) string {
	return jobHead("copy", 2, dir, brokersKafka(broker), metrics, "info") + `checkpoints:
  interval: 200ms
sources:
  - name: events
    topic: events
sinks:
  - name: copied
    input: events
    topic: out
    delivery: exactly-once
`
}

// idRecords are the records with ids [from, to) of topic events, id i in
// partition i%4.
func idRecords(from, to int) []*kgo.Record {
	var out []*kgo.Record
	for i := from; i < to; i++ {
		out = append(out, &kgo.Record{Topic: "events", Partition: int32(i % 4), Value: fmt.Appendf(nil, `{"id":%d}`, i)})
	}
	return out
}

// outputIDs reads topic out read_committed and returns how many times each
// id was written.
func outputIDs(t *testing.T, broker string) map[int]int {
	t.Helper()
	out := map[int]int{}
	for _, r := range testkit.ReadTopic(t, []string{broker}, "out", 30*time.Second) {
		var v struct {
			ID int `json:"id"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("output record %q: %v", r.Value, err)
		}
		out[v.ID]++
	}
	return out
}

// checkIDs fails the test unless got holds exactly the ids in want, once
// each.
func checkIDs(t *testing.T, got map[int]int, want func(id int) bool, n int) {
	t.Helper()
	bad := 0
	for id, c := range got {
		if c != 1 || !want(id) {
			if bad++; bad <= 10 {
				t.Errorf("id %d written %d times, want %v", id, c, map[bool]int{true: 1, false: 0}[want(id)])
			}
		}
	}
	if len(got) != n {
		t.Errorf("%d distinct ids in the output, want %d", len(got), n)
	}
}

// TestUnavailablePartitionAtRestore: an exactly-once copy of a 4-partition
// topic (parallelism 2) is stopped after its first 100 records and
// restored while partition 2 has no leader (kfake answers Metadata,
// ListOffsets and Fetch for it with LEADER_NOT_AVAILABLE, for every client).
// The other partitions' 75 new records reach the sink, checkpoints keep
// completing with partition 2 at its restored offset 25, /readyz answers 503
// naming events/2 and kstreamd_source_partitions_unavailable{source="events"}
// is 1. Once the partition has its leader back, its 25 records flow,
// /readyz is 200, the gauge 0, and the read_committed output holds ids
// 0..199 once each.
func TestUnavailablePartitionAtRestore(t *testing.T) {
	c, addr := startKfake(t, []string{"events", "out"})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cl := newClient(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce(t, cl, idRecords(0, 100)...)

	d := launchDaemon(t, dir, copyConfig(dir, addr, metrics), addr, metrics)
	if !testkit.Poll(60*time.Second, func() bool { return d.exited() || len(outputIDs(t, addr)) >= 100 }) || d.exited() {
		t.Fatalf("the first 100 records did not reach the sink within 60s (exited: %v)", d.exited())
	}
	waitCheckpointAfter(t, d, 0)
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	store := checkpoint.NewStorage(filepath.Join(dir, "checkpoints"), "copy", 0, nil)
	_, meta, err := store.Latest()
	if err != nil || meta == nil {
		t.Fatalf("no checkpoint after the first run: %v", err)
	}
	if got := splitOffsets(t, meta); !maps.Equal(got, map[int32]int64{0: 25, 1: 25, 2: 25, 3: 25}) {
		t.Fatalf("the first run's last checkpoint holds offsets %v, want 25 in every partition", got)
	}
	firstID := meta.CheckpointID

	produce(t, cl, idRecords(100, 200)...)
	fault := c.Fault(kfake.Fault{
		Keys:  []kmsg.Key{kmsg.Metadata, kmsg.ListOffsets, kmsg.Fetch},
		Topic: "events", Partitions: []int32{2}, Err: kerr.LeaderNotAvailable, Count: -1,
	})
	restored := false
	defer func() {
		if !restored {
			fault.Remove()
		}
	}()
	d = launchDaemon(t, dir, copyConfig(dir, addr, metrics), addr, metrics)
	others := func(id int) bool { return id < 100 || id%4 != 2 }
	if !testkit.Poll(60*time.Second, func() bool { return d.exited() || len(outputIDs(t, addr)) >= 175 }) || d.exited() {
		t.Fatalf("the other partitions' records did not reach the sink within 60s (exited: %v)", d.exited())
	}
	checkIDs(t, outputIDs(t, addr), others, 175)

	var code int
	var body string
	if !testkit.Poll(20*time.Second, func() bool {
		code, body = readyz(metrics)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "partition events/2 unavailable")
	}) {
		t.Fatalf("/readyz %d %q while events/2 has no leader, want 503 naming events/2", code, body)
	}
	t.Logf("/readyz while events/2 has no leader: %d %s", code, strings.TrimSpace(body))
	if g, _ := testkit.Scrape(d.url(), "kstreamd_source_partitions_unavailable", map[string]string{"source": "events"}); g != 1 {
		t.Errorf("kstreamd_source_partitions_unavailable{source=events} = %v, want 1", g)
	}
	// Checkpoints complete, holding partition 2 at its restored offset.
	last := waitCheckpointAfter(t, d, waitCheckpointAfter(t, d, float64(firstID)))
	_, meta, err = store.Latest()
	if err != nil || meta == nil || float64(meta.CheckpointID) < last {
		t.Fatalf("latest checkpoint %v (err %v), want at least %v", meta, err, last)
	}
	if got := splitOffsets(t, meta); !maps.Equal(got, map[int32]int64{0: 50, 1: 50, 2: 25, 3: 50}) {
		t.Fatalf("checkpoint %d holds offsets %v while events/2 has no leader, want 50, 50, 25 (as restored), 50", meta.CheckpointID, got)
	}
	if !strings.Contains(d.out.String(), "partition unavailable") || !strings.Contains(d.out.String(), "partition=2") {
		t.Errorf("no log line names the unavailable partition")
	}

	fault.Remove()
	restored = true
	if !testkit.Poll(60*time.Second, func() bool { return d.exited() || len(outputIDs(t, addr)) >= 200 }) || d.exited() {
		t.Fatalf("events/2's records did not reach the sink within 60s of its leader's return (exited: %v)", d.exited())
	}
	if !testkit.Poll(20*time.Second, func() bool { code, body = readyz(metrics); return code == http.StatusOK }) {
		t.Fatalf("/readyz %d %q after events/2 is back, want 200", code, body)
	}
	if g, _ := testkit.Scrape(d.url(), "kstreamd_source_partitions_unavailable", map[string]string{"source": "events"}); g != 0 {
		t.Errorf("kstreamd_source_partitions_unavailable{source=events} = %v after events/2 is back, want 0", g)
	}
	waitCheckpointAfter(t, d, last)
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	checkIDs(t, outputIDs(t, addr), func(id int) bool { return id < 200 }, 200)
}

// TestReadyzWaitsForSources: a fresh job whose source cannot list the
// start offsets of its partitions (kfake answers ListOffsets for topic
// events with LEADER_NOT_AVAILABLE) is running, but /readyz answers 503
// naming the partitions while no source reads them; once the offsets can
// be listed, /readyz answers 200 and the records flow. (It answered 200
// at once: only broadcast sources were waited for.)
func TestReadyzWaitsForSources(t *testing.T) {
	c, addr := startKfake(t, []string{"events", "out"})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cl := newClient(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce(t, cl, idRecords(0, 40)...)
	fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: "events", Err: kerr.LeaderNotAvailable, Count: -1})
	removed := false
	defer func() {
		if !removed {
			fault.Remove()
		}
	}()
	d := launchDaemon(t, dir, copyConfig(dir, addr, metrics), addr, metrics)
	if !testkit.Poll(30*time.Second, func() bool { return d.exited() || strings.Contains(d.out.String(), "job running") }) || d.exited() {
		t.Fatalf("the job is not running within 30s")
	}
	var code int
	var body string
	if !testkit.Poll(20*time.Second, func() bool {
		code, body = readyz(metrics)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "events/0") && strings.Contains(body, "events/3")
	}) {
		t.Fatalf("/readyz %d %q while no start offset can be listed, want 503 naming the partitions", code, body)
	}
	t.Logf("/readyz before the sources read: %d %s", code, strings.TrimSpace(body))
	for i := 0; i < 5; i++ {
		if code, body = readyz(metrics); code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz %d %q while no source reads, want 503", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := outputIDs(t, addr); len(got) != 0 {
		t.Fatalf("%d records in the output before the start offsets are known", len(got))
	}
	fault.Remove()
	removed = true
	if !testkit.Poll(30*time.Second, func() bool { code, body = readyz(metrics); return code == http.StatusOK }) {
		t.Fatalf("/readyz %d %q 30s after the offsets can be listed, want 200", code, body)
	}
	if strings.TrimSpace(body) != "ready" {
		t.Errorf("/readyz body %q, want ready", body)
	}
	if !testkit.Poll(60*time.Second, func() bool { return len(outputIDs(t, addr)) >= 40 }) {
		t.Fatalf("the records did not reach the sink within 60s of the sources reading")
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	checkIDs(t, outputIDs(t, addr), func(id int) bool { return id < 40 }, 40)
}

// splitOffsets returns the offset of every split of source events in m.
func splitOffsets(t *testing.T, m *checkpoint.Metadata) map[int32]int64 {
	t.Helper()
	states, err := checkpoint.DecodeTaskStates(m.Operators["events"])
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	for _, ts := range states {
		for _, e := range ts.Operator[source.SplitsState].Entries {
			var sp source.Split
			if err := json.Unmarshal(e, &sp); err != nil {
				t.Fatal(err)
			}
			out[sp.Partition] = sp.Offset
		}
	}
	return out
}
