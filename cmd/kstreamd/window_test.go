package main

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// t0 is the event time the window tests start at: a multiple of 10s.
const t0 = int64(1_700_000_000_000)

func click(partition int32, user string, sec float64, page string) *kgo.Record {
	ts := t0 + int64(sec*1000)
	return &kgo.Record{Topic: "clicks", Partition: partition, Value: fmt.Appendf(nil, `{"user":%q,"ts":%d,"page":%q}`, user, ts, page)}
}

func windowJSON(user string, startSec, endSec int64, clicks, pages int) string {
	f := func(s int64) string { return time.UnixMilli(t0 + s*1000).UTC().Format(time.RFC3339) }
	return fmt.Sprintf(`{"key":%q,"window_start":%q,"window_end":%q,"clicks":%d,"pages":%d}`, user, f(startSec), f(endSec), clicks, pages)
}

// TestExampleTumblingWindow runs configs/examples/tumbling_window.yaml
// (10s windows, 2s out-of-orderness, 5s idleness) over two partitions, the
// second of which goes quiet at event time 12s while the first reaches 35s:
// every window up to [20s, 30s) closes with its exact counts once the quiet
// partition is idle, the window [30s, 40s) never closes (the watermark is
// 32.999s), each window is emitted once, and a click arriving after its
// window closed goes unchanged to the late side output.
func TestExampleTumblingWindow(t *testing.T) {
	t.Parallel()
	_, broker := startKfake(t, []string{"clicks-per-window", "late-clicks"}, kfake.SeedTopics(2, "clicks"))
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	d := startDaemon(t, dir, exampleConfig(t, "tumbling_window.yaml", dir, broker, metrics), broker, metrics)
	cl := newClient(t, broker, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce(t, cl,
		click(0, "alice", 1, "a"), click(0, "alice", 3, "b"), click(0, "bob", 8, "a"), click(0, "alice", 11, "a"),
		click(0, "bob", 15, "a"), click(0, "bob", 16, "b"), click(0, "alice", 25, "a"), click(0, "carol", 35, "a"),
		click(1, "alice", 5, "a"), click(1, "bob", 2, "c"), click(1, "bob", 12, "a"),
	)
	want := []string{
		windowJSON("alice", 0, 10, 3, 2), windowJSON("alice", 10, 20, 1, 1), windowJSON("alice", 20, 30, 1, 1),
		windowJSON("bob", 0, 10, 2, 2), windowJSON("bob", 10, 20, 3, 2),
	}
	testkit.WaitMetric(t, 60*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "clicks-per-window"}, float64(len(want)))
	late := click(0, "dave", 21, "z") // [20s, 30s) closed: the watermark is 32.999s
	produce(t, cl, late)
	testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "late-clicks"}, 1)
	last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	waitCheckpointAfter(t, d, last)
	var got []string
	for _, r := range testkit.ReadTopic(t, []string{broker}, "clicks-per-window", 10*time.Second) {
		got = append(got, string(r.Value))
	}
	slices.Sort(got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read_committed clicks-per-window:\n%q\nwant exactly\n%q", got, want)
	}
	lateGot := testkit.ReadTopic(t, []string{broker}, "late-clicks", 10*time.Second)
	if len(lateGot) != 1 || string(lateGot[0].Value) != string(late.Value) {
		t.Fatalf("read_committed late-clicks: %d records (%v), want exactly %s", len(lateGot), lateGot, late.Value)
	}
	wm, err := testkit.Scrape(d.url(), "kstreamd_operator_watermark_seconds", map[string]string{"operator": "per_window", "subtask": "0"})
	if err != nil || wm != float64(t0+32_999)/1000 {
		t.Fatalf("per_window watermark %v (%v), want %v", wm, err, float64(t0+32_999)/1000)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}
