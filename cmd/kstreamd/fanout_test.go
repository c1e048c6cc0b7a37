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
	// A sink's records become readable (read_committed) only when the
	// checkpoint covering them completes: poll each topic until it holds
	// what it must, rather than reading it once.
	for _, c := range []struct {
		topic, why string
		want       []string
	}{
		{"raw-out", " (the keyed branch's refusal must not drop it here)", []string{`{"k":"a"}`, `{"k":"b"}`, `{"nok":1}`}},
		{"counts-out", "", []string{`{"count":1,"key":"a"}`, `{"count":1,"key":"b"}`}},
		{"shouted", " (string values stay strings)", []string{`"12!"`, `"{\"A\":1}!"`}},
	} {
		var got []string
		testkit.Poll(30*time.Second, func() bool { got = values(c.topic); return slices.Equal(got, c.want) })
		if !slices.Equal(got, c.want) {
			t.Errorf("%s = %q, want %q%s", c.topic, got, c.want, c.why)
		}
	}
	if got, err := testkit.Scrape(d.url(), "kstreamd_source_records_skipped_total", map[string]string{"source": "ev", "reason": "missing_key"}); err != nil || got != 1 {
		t.Errorf("skipped missing_key = %v (%v), want 1", got, err)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}
