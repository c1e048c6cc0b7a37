package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// exampleConfig reads configs/examples/<name> and points it at this test:
// the broker, data_dir and metrics address replaced, checkpoints every
// 200ms instead of 5s. It fails the test when a line to replace is missing,
// so the example and this test cannot drift apart unnoticed.
func exampleConfig(t *testing.T, name, dir, broker, metrics string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "configs", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	for _, r := range [][2]string{
		{"  # brokers: [kafka-1:9092]", "  brokers: [" + broker + "] #"},
		{"    enabled: true\n", "    enabled: false\n"},
		{"data_dir: ./data", "data_dir: " + dir},
		{"address: 127.0.0.1:9249", "address: " + metrics},
		{"interval: 5s", "interval: 200ms"},
	} {
		if !strings.Contains(cfg, r[0]) {
			t.Fatalf("%s has no %q line to replace", name, r[0])
		}
		cfg = strings.Replace(cfg, r[0], r[1], 1)
	}
	return cfg
}

// runExample runs configs/examples/<name> on a kfake broker holding topics,
// produces in (keyed by key, value as given) to the input topic, and
// returns the values read_committed from the output topic grouped by record
// key (each key's in order), once the sink (named as its topic) wrote want
// records and a checkpoint after them completed.
func runExample(t *testing.T, name, input, output string, in [][2]string, want int) map[string][]string {
	t.Helper()
	_, broker := startKfake(t, []string{input, output})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	d := startDaemon(t, dir, exampleConfig(t, name, dir, broker, metrics), broker, metrics)
	recs := make([]*kgo.Record, len(in))
	for i, kv := range in {
		recs[i] = &kgo.Record{Topic: input, Key: []byte(kv[0]), Value: []byte(kv[1])}
	}
	produce(t, newClient(t, broker), recs...)
	// Every output reached the sink, then a checkpoint completed after it:
	// its transaction is committed.
	testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": output}, float64(want))
	last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	waitCheckpointAfter(t, d, last)
	got := map[string][]string{}
	for _, r := range testkit.ReadTopic(t, []string{broker}, output, 10*time.Second) {
		got[string(r.Key)] = append(got[string(r.Key)], string(r.Value))
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	return got
}

// TestExampleRunningSum runs configs/examples/running_sum.yaml: the
// read_committed output is exactly each customer's running total, count
// and average after each of its payments, in order; a payment whose amount
// is no number is skipped (on_error: skip) and changes nothing.
func TestExampleRunningSum(t *testing.T) {
	t.Parallel()
	in := [][2]string{
		{"alice", `{"customer":"alice","amount":10}`},
		{"bob", `{"customer":"bob","amount":5}`},
		{"alice", `{"customer":"alice","amount":20}`},
		{"carol", `{"customer":"carol","amount":7.5}`},
		{"alice", `{"customer":"alice","amount":"ten"}`},
		{"bob", `{"customer":"bob","amount":15}`},
		{"alice", `{"customer":"alice","amount":30}`},
		{"carol", `{"customer":"carol","amount":2}`},
	}
	want := map[string][]string{
		"alice": {
			`{"key":"alice","total":10,"payments":1,"average":10}`,
			`{"key":"alice","total":30,"payments":2,"average":15}`,
			`{"key":"alice","total":60,"payments":3,"average":20}`,
		},
		"bob": {
			`{"key":"bob","total":5,"payments":1,"average":5}`,
			`{"key":"bob","total":20,"payments":2,"average":10}`,
		},
		"carol": {
			`{"key":"carol","total":7.5,"payments":1,"average":7.5}`,
			`{"key":"carol","total":9.5,"payments":2,"average":4.75}`,
		},
	}
	if got := runExample(t, "running_sum.yaml", "payments", "customer-totals", in, 7); !reflect.DeepEqual(got, want) {
		t.Fatalf("read_committed customer-totals:\n%v\nwant exactly\n%v", got, want)
	}
}

// TestExampleDedup runs configs/examples/dedup.yaml: of events repeated
// within the 10 minute ttl, the read_committed output is exactly the first
// record of each event_id, unchanged; an event without event_id is skipped.
func TestExampleDedup(t *testing.T) {
	t.Parallel()
	in := [][2]string{
		{"", `{"event_id":"e1","n":1}`},
		{"", `{"event_id":"e2","n":2}`},
		{"", `{"event_id":"e1","n":3}`},
		{"", `{"n":4}`},
		{"", `{"event_id":"e3","n":5}`},
		{"", `{"event_id":"e2","n":6}`},
		{"", `{"event_id":"e1","n":7}`},
	}
	want := map[string][]string{
		"e1": {`{"event_id":"e1","n":1}`},
		"e2": {`{"event_id":"e2","n":2}`},
		"e3": {`{"event_id":"e3","n":5}`},
	}
	if got := runExample(t, "dedup.yaml", "events", "events-unique", in, 3); !reflect.DeepEqual(got, want) {
		t.Fatalf("read_committed events-unique:\n%v\nwant exactly\n%v", got, want)
	}
}
