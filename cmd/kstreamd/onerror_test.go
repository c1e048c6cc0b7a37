package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// onErrorConfig is the reference job whose sources use the policy, with a
// 200-byte record limit and dead-letter topics.
func onErrorConfig(dir, broker, metrics, policy string) string {
	cfg := referenceConfig(dir, broker, metrics, 2)
	cfg = strings.Replace(cfg, "  - name: items\n    topic: items\n",
		fmt.Sprintf("  - name: items\n    topic: items\n    on_error: %s\n    dead_letter_topic: items-dlq\n    max_record_bytes: 200\n", policy), 1)
	return strings.Replace(cfg, "  - name: rules\n    topic: rules\n",
		fmt.Sprintf("  - name: rules\n    topic: rules\n    on_error: %s\n    dead_letter_topic: rules-dlq\n", policy), 1)
}

// badItems are one bad record of each kind, all keyed red (one partition,
// in order), between two good red items that make a match.
func badItems() []*kgo.Record {
	rec := func(v []byte) *kgo.Record { return &kgo.Record{Topic: "items", Key: []byte("red"), Value: v} }
	big := fmt.Sprintf(`{"id":99,"color":"red","shape":"CIRCLE","pad":%q}`, strings.Repeat("x", 300))
	return []*kgo.Record{
		item(1, "red", "RECTANGLE"),
		rec([]byte(`{not json`)),
		rec([]byte(`{"id":2,"color":{"name":"red"},"shape":"CIRCLE"}`)),
		rec([]byte{}),
		rec([]byte(big)),
		item(6, "red", "TRIANGLE"),
	}
}

var badReasons = []string{"malformed_json", "wrong_type", "empty_value", "too_large"}

// badErrors are the kstreamd.error headers of badItems[1:5] dead-lettered:
// each reason with its detail.
func badErrors() []string {
	return []string{
		"malformed_json: invalid character 'n' looking for beginning of object key string at offset 2",
		"wrong_type: key_by color: color is a JSON object, not a string or number",
		"empty_value: the value is 0 bytes",
		fmt.Sprintf("too_large: %d bytes, limit 200", len(badItems()[4].Value)),
	}
}

func TestOnErrorSkip(t *testing.T) {
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	d := startDaemon(t, dir, onErrorConfig(dir, broker, metrics, "skip"), broker, metrics)
	cl := newClient(t, broker)
	produce(t, cl, rule("R1", "RECTANGLE", "TRIANGLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", map[string]string{"operator": "matcher"}, 2)
	produce(t, cl, badItems()...)
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "matches"}, 1)
	for _, r := range badReasons {
		testkit.WaitMetric(t, 5*time.Second, d.url(), "kstreamd_source_records_skipped_total", map[string]string{"source": "items", "reason": r}, 1)
	}
	if got := matchStrings(t, testkit.ReadTopic(t, []string{broker}, "matches", 10*time.Second)); !slices.Equal(got, []string{"R1 red 1,6"}) {
		t.Fatalf("matches = %q", got)
	}
}

func TestOnErrorDeadLetter(t *testing.T) {
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	d := startDaemon(t, dir, onErrorConfig(dir, broker, metrics, "dead-letter"), broker, metrics)
	cl := newClient(t, broker)
	badRule := &kgo.Record{Topic: "rules", Key: []byte("R9"), Value: []byte(`{"name":"R9","first":"CIRCLE"}`)}
	produce(t, cl, badRule, rule("R1", "RECTANGLE", "TRIANGLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", map[string]string{"operator": "matcher"}, 2)
	bad := badItems()
	produce(t, cl, bad...)
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "matches"}, 1)
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_source_records_dead_lettered_total", map[string]string{"source": "items"}, 4)
	if got := matchStrings(t, testkit.ReadTopic(t, []string{broker}, "matches", 10*time.Second)); !slices.Equal(got, []string{"R1 red 1,6"}) {
		t.Fatalf("matches = %q", got)
	}
	dlq := testkit.ReadTopic(t, []string{broker}, "items-dlq", 10*time.Second)
	if len(dlq) != 4 {
		t.Fatalf("%d dead-lettered items, want 4", len(dlq))
	}
	part := bad[1].Partition
	for i, r := range dlq {
		h := map[string]string{}
		for _, kv := range r.Headers {
			h[kv.Key] = string(kv.Value)
		}
		if string(r.Value) != string(bad[i+1].Value) || string(r.Key) != "red" {
			t.Errorf("dead-letter %d holds %q, want the original %q", i, r.Value, bad[i+1].Value)
		}
		if h["kstreamd.error"] != badErrors()[i] || h["kstreamd.source.topic"] != "items" ||
			h["kstreamd.source.partition"] != fmt.Sprint(part) || h["kstreamd.source.offset"] != fmt.Sprint(bad[i+1].Offset) {
			t.Errorf("dead-letter %d headers = %v, want kstreamd.error %q at items/%d@%d", i, h, badErrors()[i], part, bad[i+1].Offset)
		}
	}
	// The undecodable rule was dead-lettered and never reached broadcast state.
	rdlq := testkit.ReadTopic(t, []string{broker}, "rules-dlq", 10*time.Second)
	if len(rdlq) != 1 || string(rdlq[0].Key) != "R9" {
		t.Fatalf("rules dead-letter topic = %d records, want the bad rule R9", len(rdlq))
	}
	if v, _ := testkit.Scrape(d.url(), "kstreamd_broadcast_rules", map[string]string{"operator": "matcher"}); v != 2 {
		t.Fatalf("rules held = %v, want 1 per subtask (R1 only)", v)
	}
}

func TestOnErrorFail(t *testing.T) {
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	d := startDaemon(t, dir, onErrorConfig(dir, broker, metrics, "fail"), broker, metrics)
	cl := newClient(t, broker)
	produce(t, cl, rule("R1", "RECTANGLE", "TRIANGLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", map[string]string{"operator": "matcher"}, 2)
	bad := badItems()
	produce(t, cl, bad[0], bad[1])
	var code int
	select {
	case code = <-d.done:
		d.done <- code
	case <-time.After(15 * time.Second):
		t.Fatal("the job did not stop on a bad record with on_error: fail")
	}
	want := fmt.Sprintf("source items: bad record at items/%d@%d: %s (on_error: fail)", bad[1].Partition, bad[1].Offset, badErrors()[0])
	if code != 1 || !strings.Contains(d.out.String(), want) {
		t.Fatalf("exit %d, want 1 with %q in the log:\n%s", code, want, d.out.String())
	}
	if !strings.Contains(d.out.String(), `msg="job failed"`) {
		t.Fatalf("no job failure logged")
	}
}
