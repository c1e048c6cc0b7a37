package main

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// waitGroupAtEnd waits until the monitoring group of job colorshape has
// committed, for each of topics, exactly the topic's end offsets on every
// partition (the source positions once everything was read), and returns
// them.
func waitGroupAtEnd(t *testing.T, adm *kadm.Client, topics ...string) map[string]map[int32]int64 {
	t.Helper()
	var got, want map[string]map[int32]int64
	var err error
	ok := testkit.Poll(15*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, want, err = map[string]map[int32]int64{}, map[string]map[int32]int64{}, nil
		resp, ferr := adm.FetchOffsets(ctx, "kstreamd-colorshape")
		if ferr != nil {
			err = ferr
			return false
		}
		if err = resp.Error(); err != nil {
			return false
		}
		resp.Each(func(o kadm.OffsetResponse) {
			if got[o.Topic] == nil {
				got[o.Topic] = map[int32]int64{}
			}
			got[o.Topic][o.Partition] = o.At
		})
		for _, topic := range topics {
			if want[topic], err = endOffsets(ctx, adm, topic); err != nil {
				return false
			}
		}
		return maps.EqualFunc(got, want, func(a, b map[int32]int64) bool { return maps.Equal(a, b) })
	})
	if !ok {
		t.Fatalf("group kstreamd-colorshape committed %v (err %v), want the end offsets %v", got, err, want)
	}
	return got
}

// TestSourceOffsetsInMonitoringGroupAndNewPartitions checks that the
// sources commit the offsets of each completed checkpoint to the consumer
// group kstreamd-<job> (for lag monitoring), equal to their positions, and
// that partitions added to the items topic while the job does not look for
// them (partition_discovery_interval keeps its default, 30 s) are read from
// the earliest offset by the restored job (the checkpoint does not know
// them), exactly once.
func TestSourceOffsetsInMonitoringGroupAndNewPartitions(t *testing.T) {
	const p = 2
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cfg := checkpointedConfig(dir, broker, metrics, p, "pebble")
	d := startDaemon(t, dir, cfg, broker, metrics)
	cl := newClient(t, broker)
	adm := kadm.NewClient(cl)
	matcher := map[string]string{"operator": "matcher"}
	itemsIn := map[string]string{"operator": "items"}

	produce(t, cl, rule("R1", "RECTANGLE", "TRIANGLE"), rule("R2", "CIRCLE", "CIRCLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", matcher, 2*p)
	var items []*kgo.Record
	for i, c := range []string{"red", "blue", "green", "yellow", "black", "white", "pink", "grey"} {
		items = append(items, item(i+1, c, "RECTANGLE"))
	}
	items = append(items, item(100, "green", "CIRCLE"))
	produce(t, cl, items...)
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_in_total", itemsIn, float64(len(items)))
	got := waitGroupAtEnd(t, adm, "items", "rules")
	var total int64
	for _, o := range got["items"] {
		total += o
	}
	if len(got["items"]) != 4 || len(got["rules"]) != 4 || total != int64(len(items)) {
		t.Fatalf("group offsets %v: want the 4 partitions of items and of rules, items summing to %d", got, len(items))
	}
	t.Logf("group offsets after the first checkpoints: %v", got)

	// Two partitions more for items, each with one record.
	addPartitions(t, adm, 2, "items")
	manual := newClient(t, broker, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	r4, r5 := item(200, "red", "TRIANGLE"), item(201, "green", "CIRCLE")
	r4.Partition, r5.Partition = 4, 5
	produce(t, manual, r4, r5)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := endOffsets(ctx, adm, "items")
	if err != nil {
		t.Fatal(err)
	}
	if len(ends) != 6 || ends[4] != 1 || ends[5] != 1 {
		t.Fatalf("items end offsets %v, want 6 partitions with one record in 4 and 5", ends)
	}
	// Partition discovery runs every 30 s: the running job has not seen
	// the new partitions yet.
	if v, _ := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", itemsIn); v != float64(len(items)) {
		t.Fatalf("items read before the restart: %v, want %d", v, len(items))
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}

	d = startDaemon(t, dir, cfg, broker, metrics)
	restoreLine := restoreLines(d.out.String())
	if len(restoreLine) != 1 {
		t.Fatalf("restart: \"restoring\" lines %q, want one", restoreLine)
	}
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "matches"}, 2)
	if v, _ := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", itemsIn); v != 2 {
		t.Fatalf("items read after the restart: %v, want 2 (the records of the new partitions only)", v)
	}
	want := []string{"R1 red 1,200", "R2 green 100,201"}
	if got := matchStrings(t, testkit.ReadTopic(t, []string{broker}, "matches", 10*time.Second)); !slices.Equal(got, want) {
		t.Fatalf("matches = %q, want %q", got, want)
	}
	got = waitGroupAtEnd(t, adm, "items", "rules")
	if len(got["items"]) != 6 || got["items"][4] != 1 || got["items"][5] != 1 {
		t.Fatalf("group offsets of items %v, want 6 partitions, 1 in partitions 4 and 5", got["items"])
	}
	if log := d.out.String(); !strings.Contains(log, `msg="new partitions since the checkpoint; reading them from the earliest offset"`) {
		t.Errorf("no \"new partitions since the checkpoint\" log line")
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}

// produceTo produces recs to the partitions they name, with a new client
// (whose metadata knows partitions just added).
func produceTo(t *testing.T, broker string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce(t, cl, recs...)
}

// addPartitions adds n partitions to topic.
func addPartitions(t *testing.T, adm *kadm.Client, n int, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cp, err := adm.CreatePartitions(ctx, n, topic)
	if err == nil {
		err = cp.Error()
	}
	if err != nil {
		t.Fatalf("create partitions: %v", err)
	}
}

// TestPartitionDiscoveryWhileRunning adds partitions to the items topic of a
// running job that looks for new partitions every 200 ms: their records are
// read from the earliest offset within a few intervals, the monitoring group
// gets their offsets after the next checkpoint, and a restart restores them
// as ordinary splits. Partitions are added twice, the second time right
// after the records of the first ones were read.
func TestPartitionDiscoveryWhileRunning(t *testing.T) {
	const p = 2
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	itemsSource := "  - name: items\n    topic: items\n"
	cfg := checkpointedConfig(dir, broker, metrics, p, "pebble")
	if !strings.Contains(cfg, itemsSource) {
		t.Fatalf("no items source %q in\n%s", itemsSource, cfg)
	}
	cfg = strings.Replace(cfg, itemsSource, itemsSource+"    partition_discovery_interval: 200ms\n", 1)
	d := startDaemon(t, dir, cfg, broker, metrics)
	cl := newClient(t, broker)
	adm := kadm.NewClient(cl)
	matcher := map[string]string{"operator": "matcher"}
	itemsIn := map[string]string{"operator": "items"}
	matchesOut := map[string]string{"operator": "matches"}

	produce(t, cl, rule("R1", "RECTANGLE", "TRIANGLE"), rule("R2", "CIRCLE", "CIRCLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", matcher, 2*p)
	produce(t, cl, item(1, "red", "RECTANGLE"), item(2, "green", "CIRCLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_in_total", itemsIn, 2)

	// Round 1: partitions 4 and 5.
	addPartitions(t, adm, 2, "items")
	r4, r5 := item(10, "red", "TRIANGLE"), item(11, "green", "CIRCLE")
	r4.Partition, r5.Partition = 4, 5
	added := time.Now()
	produceTo(t, broker, r4, r5)
	testkit.WaitMetric(t, 15*time.Second, d.url(), "kstreamd_operator_records_out_total", matchesOut, 2)
	first := time.Since(added)
	// Round 2, at once: partition 6.
	addPartitions(t, adm, 1, "items")
	r6 := item(12, "blue", "RECTANGLE")
	r6.Partition = 6
	added = time.Now()
	produceTo(t, broker, r6)
	if !testkit.Poll(15*time.Second, func() bool {
		v, err := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", itemsIn)
		return err == nil && v == 5
	}) {
		t.Fatalf("the record of partition 6 was not read within 15s")
	}
	second := time.Since(added)
	t.Logf("records of new partitions read %v (partitions 4, 5) and %v (partition 6) after they were produced", first.Round(time.Millisecond), second.Round(time.Millisecond))
	for i, took := range []time.Duration{first, second} {
		if took > 3*time.Second {
			t.Errorf("round %d: the records of the new partitions were read %v after they were produced, want within 3s "+
				"(15 discovery intervals of 200ms)", i+1, took.Round(time.Millisecond))
		}
	}
	want := []string{"R1 red 1,10", "R2 green 2,11"}
	if got := matchStrings(t, testkit.ReadTopic(t, []string{broker}, "matches", 10*time.Second)); !slices.Equal(got, want) {
		t.Fatalf("matches = %q, want %q", got, want)
	}
	got := waitGroupAtEnd(t, adm, "items", "rules")
	if len(got["items"]) != 7 || got["items"][4] != 1 || got["items"][5] != 1 || got["items"][6] != 1 {
		t.Fatalf("group offsets of items %v, want 7 partitions, 1 in partitions 4, 5 and 6", got["items"])
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}

	// The restored job knows the seven partitions: it reads nothing again,
	// and goes on reading partition 5 at its restored offset.
	d = startDaemon(t, dir, cfg, broker, metrics)
	if lines := restoreLines(d.out.String()); len(lines) != 1 {
		t.Fatalf("restart: \"restoring\" lines %q, want one", lines)
	}
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", matcher, 2*p)
	r5 = item(13, "green", "CIRCLE")
	r5.Partition = 5
	produceTo(t, broker, r5)
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_out_total", matchesOut, 1)
	if v, _ := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", itemsIn); v != 1 {
		t.Fatalf("items read after the restart: %v, want 1 (only the new record)", v)
	}
	if strings.Contains(d.out.String(), "new partitions since the checkpoint") {
		t.Errorf("the restored job treated partitions of the checkpoint as new")
	}
	want = append(want, "R2 green 11,13")
	slices.Sort(want)
	if got := matchStrings(t, testkit.ReadTopic(t, []string{broker}, "matches", 10*time.Second)); !slices.Equal(got, want) {
		t.Fatalf("matches after the restart = %q, want %q", got, want)
	}
}

// TestDiscoveryOffLogsOnce: a source with partition_discovery_interval: 0
// logs once (not once per subtask) that partitions added later will not be
// read; a source with discovery on logs nothing of the kind.
func TestDiscoveryOffLogsOnce(t *testing.T) {
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cfg := strings.Replace(referenceConfig(dir, broker, metrics, 2), "  - name: items\n    topic: items\n",
		"  - name: items\n    topic: items\n    partition_discovery_interval: 0\n", 1)
	d := startDaemon(t, dir, cfg, broker, metrics)
	var off []string
	for _, l := range strings.Split(d.out.String(), "\n") {
		if strings.Contains(l, "partition discovery is off") {
			off = append(off, l)
		}
	}
	if len(off) != 1 || logField(off[0], "source") != "items" || logField(off[0], "topic") != "items" || logField(off[0], "level") != "WARN" {
		t.Fatalf("discovery-off log lines %q, want one WARN for source items (2 subtasks), none for rules", off)
	}
}
