package main

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
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
	// Issue 22: the late click is counted as routed, none dropped; five
	// windows fired and carol's [30s, 40s) is the one still open.
	pw := map[string]string{"operator": "per_window"}
	for metric, want := range map[string]float64{
		"kstreamd_operator_late_records_routed_total": 1, "kstreamd_operator_late_records_dropped_total": 0,
		"kstreamd_window_fired_total": float64(len(want)), "kstreamd_window_open_windows": 1,
	} {
		if got, n, err := testkit.ScrapeSeries(d.url(), metric, pw); err != nil || n == 0 || got != want {
			t.Errorf("%s{operator=per_window} = %v over %d series (%v), want %v", metric, got, n, err, want)
		}
	}
	wm, err := testkit.Scrape(d.url(), "kstreamd_operator_watermark_seconds", map[string]string{"operator": "per_window", "subtask": "0"})
	if err != nil || wm != float64(t0+32_999)/1000 {
		t.Fatalf("per_window watermark %v (%v), want %v", wm, err, float64(t0+32_999)/1000)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}

// timersConfig is a tumbling 10s event-time window counting each user's
// events, at job parallelism p, checkpoints every 200ms, Pebble state.
func timersConfig(dir, broker, metrics string, p int) string {
	return jobHead("timers", p, dir, brokersKafka(broker), metrics, "info") + `state:
  backend: pebble
checkpoints:
  interval: 200ms
sources:
  - name: events
    topic: events
    timestamp: {expression: ts}
operators:
  - name: per_user
    type: window
    input: events
    key_by: user
    params:
      kind: tumbling
      size: 10s
      aggregates: [{name: n, fn: count}]
sinks:
  - name: out
    input: per_user
    topic: out
    delivery: exactly-once
    transaction_timeout: 1m
`
}

// TestTimersSurviveKillAndRescale: 1,000 users each send one event at
// event time 1s, so each registers the event-time timer of its window's end;
// the job (parallelism 2) is killed with SIGKILL once a checkpoint holds all
// of them and is restarted at parallelism 4, which restores the timers by
// key group. Nothing fires before the watermark moves; then one event at
// 20s on every partition moves it past 10s, and the read_committed output
// holds exactly 1,000 firings, one per user, none twice.
func TestTimersSurviveKillAndRescale(t *testing.T) {
	const users = 1000
	_, broker := startKfake(t, []string{"events", "out"})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cl := newClient(t, broker, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	d := startProc(t, dir, timersConfig(dir, broker, metrics, 2), broker, metrics)
	recs := make([]*kgo.Record, users)
	for i := range recs {
		u := fmt.Sprintf("u%04d", i)
		recs[i] = &kgo.Record{Topic: "events", Partition: int32(i % 4), Key: []byte(u), Value: fmt.Appendf(nil, `{"user":%q,"ts":%d}`, u, t0+1000)}
	}
	produce(t, cl, recs...)
	in := map[string]string{"operator": "per_user"}
	var read, after float64
	if !testkit.Poll(60*time.Second, func() bool {
		if d.exited() {
			return true
		}
		var err error
		if read, err = testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", in); err != nil || read < users {
			return false
		}
		if after == 0 {
			after, _ = testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
		}
		id, err := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
		return err == nil && id > after+1
	}) || d.exited() {
		t.Fatalf("before the kill: %v events read (want %d) and no checkpoint after them, exited %v:\n%s", read, users, d.exited(), d.out.String())
	}
	d.kill(t)

	d = startProc(t, dir, timersConfig(dir, broker, metrics, 4), broker, metrics)
	if lines := restoreLines(d.out.String()); len(lines) != 1 {
		t.Fatalf("restart: \"restoring\" lines %q, want one", lines)
	}
	// The restored job checkpoints with its timers pending: none fired.
	first := -1.0
	if !testkit.Poll(30*time.Second, func() bool {
		id, err := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
		if err != nil {
			return false
		}
		if first < 0 {
			first = id
		}
		return id > first+1
	}) {
		t.Fatalf("the restored job completes no checkpoint:\n%s", d.out.String())
	}
	if n, _ := testkit.Scrape(d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "per_user"}); n != 0 {
		t.Fatalf("%v windows fired after the restore before the watermark moved", n)
	}
	var ticks []*kgo.Record
	for p := range int32(4) {
		ticks = append(ticks, &kgo.Record{Topic: "events", Partition: p, Value: fmt.Appendf(nil, `{"user":"tick","ts":%d}`, t0+20_000)})
	}
	produce(t, cl, ticks...)
	testkit.WaitMetric(t, 60*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "out"}, users)
	last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	if !testkit.Poll(30*time.Second, func() bool {
		id, err := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
		return err == nil && id > last+1
	}) {
		t.Fatal("no checkpoint after the firings")
	}
	seen := map[string]int{}
	for _, r := range testkit.ReadTopic(t, []string{broker}, "out", 15*time.Second) {
		seen[string(r.Value)]++
	}
	if len(seen) != users {
		t.Fatalf("read_committed out: %d distinct firings, want %d", len(seen), users)
	}
	for v, n := range seen {
		want := fmt.Sprintf(`,"window_start":%q,"window_end":%q,"n":1}`, time.UnixMilli(t0).UTC().Format(time.RFC3339), time.UnixMilli(t0+10_000).UTC().Format(time.RFC3339))
		if n != 1 || len(v) < len(want) || v[len(v)-len(want):] != want {
			t.Fatalf("firing %s seen %d times (want once, ending %s)", v, n, want)
		}
	}
}

// TestWindowLateRecordsDroppedCounted is issue 22's acceptance test of late
// records with no late sink, on the real job wiring: a tumbling window
// whose <op>.late no vertex reads gets 3 late records; they are counted in
// kstreamd_operator_late_records_dropped_total (3; routed 0) and the log
// has exactly one "dropped a late record" line, naming the side output,
// a record time and the watermark.
func TestWindowLateRecordsDroppedCounted(t *testing.T) {
	t.Parallel()
	_, broker := startKfake(t, []string{"events", "out"})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cl := newClient(t, broker, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	d := startProc(t, dir, timersConfig(dir, broker, metrics, 2), broker, metrics)
	event := func(p int32, user string, ms int64) *kgo.Record {
		return &kgo.Record{Topic: "events", Partition: p, Value: fmt.Appendf(nil, `{"user":%q,"ts":%d}`, user, t0+ms)}
	}
	var recs []*kgo.Record
	for p := range int32(4) { // every partition passes 20s: the watermark passes [0s, 10s)
		recs = append(recs, event(p, "alice", 1000), event(p, "tick", 20_000))
	}
	produce(t, cl, recs...)
	testkit.WaitMetric(t, 60*time.Second, d.url(), "kstreamd_window_fired_total", map[string]string{"operator": "per_user"}, 1)
	produce(t, cl, event(0, "bob", 2000), event(1, "bob", 3000), event(2, "carol", 9999))
	pu := map[string]string{"operator": "per_user"}
	testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_late_records_dropped_total", pu, 3)
	if n, _ := testkit.Scrape(d.url(), "kstreamd_operator_late_records_routed_total", pu); n != 0 {
		t.Fatalf("late records routed %v with no late sink, want 0", n)
	}
	var lines []string
	for _, l := range strings.Split(d.out.String(), "\n") {
		if strings.Contains(l, "dropped a late record") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "side_output=per_user.late") || !strings.Contains(lines[0], "record_time=") || !strings.Contains(lines[0], "watermark=") {
		t.Fatalf("log lines about dropped late records %q, want one naming per_user.late, the record time and the watermark", lines)
	}
	if code, _ := d.terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}
