package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// filterProjectConfig reads configs/examples/filter_project.yaml and points
// it at dir, its embedded broker at broker and /metrics at metrics, with
// checkpoints every 100 ms; each replaced line must be in the file, so the
// test runs the example as it is written.
func filterProjectConfig(t *testing.T, dir, broker, metrics string) string {
	t.Helper()
	const name = "filter_project.yaml"
	raw, err := os.ReadFile(filepath.Join("..", "..", "configs", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(raw)
	for _, r := range []struct{ old, new string }{
		{"\ndata_dir: ./data ", "\ndata_dir: " + dir + " "},
		{"    address: 127.0.0.1:9092 ", "    address: " + broker + " "},
		{"  address: 127.0.0.1:9249 ", "  address: " + metrics + " "},
		{"  interval: 1s ", "  interval: 100ms "},
	} {
		if !strings.Contains(cfg, r.old) {
			t.Fatalf("%s has no line %q to override", name, r.old)
		}
		cfg = strings.Replace(cfg, r.old, r.new, 1)
	}
	return cfg
}

// TestFilterProjectExample is issue 9's acceptance test of the stateless
// built-ins, run on configs/examples/filter_project.yaml: 1,000 events with
// amounts 0..999 and, in the middle, one whose amount is a string go
// through filter amount > 100 and map {"id": id, "amount": amount} to an
// exactly-once sink. A read_committed reader sees exactly the 899 events
// above 100, each holding exactly id and amount; the bad event is in
// events-dlq with a kstreamd.error header giving eval_error and the
// expression, and the events after it (on its partition too) still flow.
func TestFilterProjectExample(t *testing.T) {
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	d := startDaemon(t, dir, filterProjectConfig(t, dir, broker, metrics), broker, metrics)
	cl := newClient(t, broker, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	event := func(i int) *kgo.Record {
		return &kgo.Record{Topic: "events", Partition: int32(i % 4), Value: fmt.Appendf(nil, `{"id":%d,"amount":%d,"note":"x"}`, i, i)}
	}
	bad := &kgo.Record{Topic: "events", Partition: 1, Value: []byte(`{"id":5000,"amount":"a lot","note":"x"}`)}
	var recs []*kgo.Record
	for i := range 500 {
		recs = append(recs, event(i))
	}
	recs = append(recs, bad)
	for i := 500; i < 1000; i++ {
		recs = append(recs, event(i))
	}
	produce(t, cl, recs...)

	testkit.WaitMetric(t, 20*time.Second, d.url(), "kstreamd_source_records_dead_lettered_total", map[string]string{"source": "events"}, 1)
	var out []*kgo.Record
	ok := testkit.Poll(30*time.Second, func() bool {
		out = testkit.ReadTopic(t, []string{broker}, "big-payments", 10*time.Second)
		return len(out) >= 899
	})
	if !ok || len(out) != 899 {
		t.Fatalf("read_committed big-payments holds %d records, want 899", len(out))
	}
	seen := map[int64]bool{}
	for _, r := range out {
		var v map[string]any
		dec := json.NewDecoder(strings.NewReader(string(r.Value)))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("output %q is not a JSON object: %v", r.Value, err)
		}
		id, _ := v["id"].(json.Number).Int64()
		amount, _ := v["amount"].(json.Number).Int64()
		if len(v) != 2 || id != amount || id <= 100 || id > 999 || seen[id] {
			t.Fatalf("output %s: want exactly {\"amount\":i,\"id\":i} once for each 100 < i < 1000", r.Value)
		}
		if want := fmt.Sprintf(`{"amount":%d,"id":%d}`, id, id); string(r.Value) != want {
			t.Fatalf("output %s, want %s", r.Value, want)
		}
		seen[id] = true
	}
	after := 0 // events above 100 on the bad event's partition, after it
	for i := 501; i < 1000; i += 4 {
		if seen[int64(i)] {
			after++
		}
	}
	if after != 125 {
		t.Fatalf("%d of the 125 events after the bad one on its partition reached the sink", after)
	}

	dlq := testkit.ReadTopic(t, []string{broker}, "events-dlq", 10*time.Second)
	if len(dlq) != 1 || string(dlq[0].Value) != string(bad.Value) {
		t.Fatalf("events-dlq = %d records, want the bad event %s", len(dlq), bad.Value)
	}
	h := map[string]string{}
	for _, kv := range dlq[0].Headers {
		h[kv.Key] = string(kv.Value)
	}
	if e := h["kstreamd.error"]; !strings.HasPrefix(e, "eval_error: ") || !strings.Contains(e, `expression "amount > 100"`) {
		t.Errorf("kstreamd.error = %q, want eval_error naming the expression amount > 100", e)
	}
	if h["kstreamd.source.topic"] != "events" || h["kstreamd.source.partition"] != "1" || h["kstreamd.source.offset"] != fmt.Sprint(bad.Offset) {
		t.Errorf("dead-letter headers %v, want events/1@%d", h, bad.Offset)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}

// TestNoOperatorCopy runs a pipeline without operators: the sink copies
// the source, each record's key, value, headers (in order, repeated keys
// kept) and timestamp unchanged.
func TestNoOperatorCopy(t *testing.T) {
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cfg := jobHead("copy", 2, dir, embeddedKafka(broker), metrics, "info") + `sources:
  - name: in
    topic: in
sinks:
  - name: out
    input: in
    topic: out
`
	d := startDaemon(t, dir, cfg, broker, metrics)
	cl := newClient(t, broker, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ts := time.UnixMilli(1_600_000_000_123)
	in := []*kgo.Record{
		{Topic: "in", Partition: 2, Key: []byte("a"), Value: []byte(`{"n":1}`), Timestamp: ts,
			Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t-1")}, {Key: "tenant", Value: []byte("acme")}, {Key: "trace", Value: []byte("t-2")}}},
		{Topic: "in", Partition: 2, Value: []byte(`{"n":2}`), Timestamp: ts.Add(time.Second)},
	}
	produce(t, cl, in...)
	testkit.WaitMetric(t, 20*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "out"}, 2)
	out := testkit.ReadTopic(t, []string{broker}, "out", 10*time.Second)
	type rec struct {
		key, value string
		headers    []string
		ts         int64
	}
	flat := func(rs []*kgo.Record) []rec {
		var fs []rec
		for _, r := range rs {
			f := rec{key: string(r.Key), value: string(r.Value), ts: r.Timestamp.UnixMilli()}
			if r.Key == nil {
				f.key = "<nil>"
			}
			for _, h := range r.Headers {
				f.headers = append(f.headers, h.Key+"="+string(h.Value))
			}
			fs = append(fs, f)
		}
		return fs
	}
	got, want := flat(out), flat(in)
	if !slices.EqualFunc(got, want, func(a, b rec) bool {
		return a.key == b.key && a.value == b.value && a.ts == b.ts && slices.Equal(a.headers, b.headers)
	}) {
		t.Fatalf("out = %+v, want %+v", got, want)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}
