package main

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// TestKeyByRefusalKeepsOtherBranches: a record a keyed branch cannot key
// (missing_key) still reaches a sink reading the same source, and a string
// source's values reach expressions as strings, never decoded as JSON.
func TestKeyByRefusalKeepsOtherBranches(t *testing.T) {
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cfg := jobHead("fanout", 1, dir, embeddedKafka(broker), metrics, "info") + `sources:
  - name: ev
    topic: ev
  - name: lines
    topic: lines
    format: string
operators:
  - name: counts
    type: keyed_count
    input: ev
    key_by: k
  - name: shout
    type: map
    input: lines
    params:
      value: "value.upperAscii() + '!'"
sinks:
  - name: raw
    input: ev
    topic: raw-out
  - name: counted
    input: counts
    topic: counts-out
  - name: shouted
    input: shout
    topic: shouted
`
	d := startDaemon(t, dir, cfg, broker, metrics)
	cl := newClient(t, broker, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce(t, cl,
		&kgo.Record{Topic: "ev", Value: []byte(`{"k":"a"}`)},
		&kgo.Record{Topic: "ev", Value: []byte(`{"nok":1}`)},
		&kgo.Record{Topic: "ev", Value: []byte(`{"k":"b"}`)},
		&kgo.Record{Topic: "lines", Value: []byte(`{"a":1}`)},
		&kgo.Record{Topic: "lines", Value: []byte(`12`)},
	)
	testkit.WaitMetric(t, 20*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "raw"}, 3)
	testkit.WaitMetric(t, 20*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "shouted"}, 2)
	values := func(topic string) []string {
		var out []string
		for _, r := range testkit.ReadTopic(t, []string{broker}, topic, 10*time.Second) {
			out = append(out, string(r.Value))
		}
		slices.Sort(out)
		return out
	}
	if got, want := values("raw-out"), []string{`{"k":"a"}`, `{"k":"b"}`, `{"nok":1}`}; !slices.Equal(got, want) {
		t.Errorf("raw-out = %q, want every record %q (the keyed branch's refusal must not drop it here)", got, want)
	}
	if got, want := values("counts-out"), []string{`{"count":1,"key":"a"}`, `{"count":1,"key":"b"}`}; !slices.Equal(got, want) {
		t.Errorf("counts-out = %q, want %q", got, want)
	}
	if got, want := values("shouted"), []string{`"12!"`, `"{\"A\":1}!"`}; !slices.Equal(got, want) {
		t.Errorf("shouted = %q, want %q (string values stay strings)", got, want)
	}
	if got, err := testkit.Scrape(d.url(), "kstreamd_source_records_skipped_total", map[string]string{"source": "ev", "reason": "missing_key"}); err != nil || got != 1 {
		t.Errorf("skipped missing_key = %v (%v), want 1", got, err)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}
