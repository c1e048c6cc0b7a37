package main

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// eventTimeConfig is a tumbling 10s event-time window over topic clicks
// (one partition, no out-of-orderness: the watermark is the largest good
// ts minus 1ms) counting and summing each user's clicks, event time from
// ts in ms, bad records dead-lettered to clicks-dlq, max_ahead 1h.
func eventTimeConfig(dir, broker, metrics string) string {
	return jobHead("eventtime", 1, dir, brokersKafka(broker), metrics, "info") + `checkpoints:
  interval: 200ms
sources:
  - name: clicks
    topic: clicks
    on_error: dead-letter
    dead_letter_topic: clicks-dlq
    timestamp:
      expression: ts
      unit: ms
      max_ahead: 1h
operators:
  - name: per_window
    type: window
    input: clicks
    key_by: user
    params:
      kind: tumbling
      size: 10s
      aggregates:
        - {name: clicks, fn: count}
        - {name: total, fn: sum, of: amount}
sinks:
  - name: out
    input: per_window
    topic: out
    delivery: exactly-once
    transaction_timeout: 1m
`
}

// TestEventTimeOutOfRangeDeadLettered is issue 22's acceptance test of item
// 2, through the daemon with a kfake broker: among millisecond clicks, one
// stamped in microseconds, one at int64's maximum and one at its minimum
// (and one two days ahead of the wall clock, past max_ahead 1h) are
// dead-lettered with reason event_time_out_of_range, unchanged, naming
// their offsets; the watermark (of the source and of the window) is the
// largest good ts minus 1ms after them, and no sample of it taken every
// 10ms while they passed exceeded that (nor could it have: it never goes
// back); no window fires on them; each window fires only when a good
// click passes its end, with its exact count, and its integer sum exact
// past int64 (9223372036854775000 + 9000 = 9223372036854784000, issue 22
// item 5).
func TestEventTimeOutOfRangeDeadLettered(t *testing.T) {
	t.Parallel()
	_, broker := startKfake(t, []string{"out", "clicks-dlq"}, kfake.SeedTopics(1, "clicks"))
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	d := startDaemon(t, dir, eventTimeConfig(dir, broker, metrics), broker, metrics)
	cl := newClient(t, broker, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	rec := func(user string, ts int64, amount int64) *kgo.Record {
		return &kgo.Record{Topic: "clicks", Value: fmt.Appendf(nil, `{"user":%q,"ts":%d,"amount":%d}`, user, ts, amount)}
	}
	ahead := time.Now().Add(48 * time.Hour).UnixMilli()
	bad := []*kgo.Record{rec("mallory", (t0+6_000)*1000, 1), rec("mallory", math.MaxInt64, 1), rec("mallory", math.MinInt64, 1), rec("mallory", ahead, 1)}
	wmLabels := map[string]map[string]string{
		"source": {"operator": "clicks", "subtask": "0"},
		"window": {"operator": "per_window", "subtask": "0"},
	}
	// Sample both watermark gauges every 10ms while the bad records pass,
	// keeping the largest value seen.
	stop, sampled := make(chan struct{}), make(chan float64)
	go func() {
		highest := 0.0
		for {
			for _, l := range wmLabels {
				if v, err := testkit.Scrape(d.url(), "kstreamd_operator_watermark_seconds", l); err == nil {
					highest = max(highest, v)
				}
			}
			select {
			case <-stop:
				sampled <- highest
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	produce(t, cl, rec("alice", t0+1_000, 9223372036854775000), rec("alice", t0+3_000, 9000), rec("bob", t0+5_000, 1))
	produce(t, cl, bad...)
	produce(t, cl, rec("alice", t0+7_000, 0))
	waitWatermark := func(ms int64) {
		t.Helper()
		for _, l := range wmLabels {
			testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_watermark_seconds", l, float64(ms)/1000)
		}
	}
	testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_source_records_dead_lettered_total",
		map[string]string{"source": "clicks", "reason": "event_time_out_of_range"}, 4)
	waitWatermark(t0 + 6_999)
	close(stop)
	if highest := <-sampled; highest > float64(t0+6_999)/1000 {
		t.Fatalf("a watermark gauge reached %v, past the largest good ts - 1ms %v", highest, float64(t0+6_999)/1000)
	}
	if n, _ := testkit.Scrape(d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "out"}); n != 0 {
		t.Fatalf("%v window results before any window end was passed, want 0", n)
	}
	// A good click at 12s passes [0s, 10s): alice's and bob's windows fire.
	produce(t, cl, rec("alice", t0+12_000, 5))
	testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "out"}, 2)
	waitWatermark(t0 + 11_999)
	// One at 25s passes [10s, 20s): alice's second window fires.
	produce(t, cl, rec("carol", t0+25_000, 2))
	testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "out"}, 3)
	waitWatermark(t0 + 24_999)

	last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	waitCheckpointAfter(t, d, last)
	win := func(user string, startSec int64, clicks int, total string) string {
		f := func(s int64) string { return time.UnixMilli(t0 + s*1000).UTC().Format(time.RFC3339) }
		return fmt.Sprintf(`{"key":%q,"window_start":%q,"window_end":%q,"clicks":%d,"total":%s}`, user, f(startSec), f(startSec+10), clicks, total)
	}
	want := []string{win("alice", 0, 3, "9223372036854784000"), win("alice", 10, 1, "5"), win("bob", 0, 1, "1")}
	var got []string
	for _, r := range testkit.ReadTopic(t, []string{broker}, "out", 10*time.Second) {
		got = append(got, string(r.Value))
	}
	slices.Sort(got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read_committed window results:\n%q\nwant exactly\n%q", got, want)
	}

	dlq := testkit.ReadTopic(t, []string{broker}, "clicks-dlq", 10*time.Second)
	if len(dlq) != len(bad) {
		t.Fatalf("%d dead letters, want %d", len(dlq), len(bad))
	}
	slices.SortFunc(dlq, func(a, b *kgo.Record) int {
		return strings.Compare(header(a, "kstreamd.source.offset"), header(b, "kstreamd.source.offset"))
	})
	wantErr := []string{
		fmt.Sprintf(`event_time_out_of_range: timestamp expression "ts" gave %d ms, outside [0, 253402300799999] ms since the epoch (1970-01-01 to 9999-12-31 UTC): a time in µs or ns given as ms?`, (t0+6_000)*1000),
		`event_time_out_of_range: timestamp expression "ts" gave 9223372036854775807 ms, outside [0, 253402300799999] ms since the epoch (1970-01-01 to 9999-12-31 UTC): a time in µs or ns given as ms?`,
		`event_time_out_of_range: timestamp expression "ts" gave -9223372036854775808 ms, outside [0, 253402300799999] ms since the epoch (1970-01-01 to 9999-12-31 UTC): a time in µs or ns given as ms?`,
		fmt.Sprintf(`event_time_out_of_range: the timestamp expression gave %d ms (`, ahead),
	}
	for i, r := range dlq {
		e := header(r, "kstreamd.error")
		if string(r.Value) != string(bad[i].Value) || header(r, "kstreamd.source.offset") != strconv.Itoa(3+i) || !strings.HasPrefix(e, wantErr[i]) {
			t.Errorf("dead letter %d: %s at offset %s, error %q; want %s at offset %d, error %q", i, r.Value, header(r, "kstreamd.source.offset"), e, bad[i].Value, 3+i, wantErr[i])
		}
	}
	if e := header(dlq[3], "kstreamd.error"); !strings.Contains(e, "more than timestamp.max_ahead 1h0m0s") {
		t.Errorf("dead letter ahead: error %q, want it to name max_ahead 1h0m0s", e)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}

// header returns the value of r's header key ("" when absent).
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
