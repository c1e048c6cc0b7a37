package deploy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// TestReferenceJobShowcase checks that the reference job the README runs
// (configs/colorshape.yaml, see referenceConfig) does what the README and
// the dashboard show: it checkpoints, commits the exactly-once sink's
// transactions (read_committed readers see the matches once), and writes
// the malformed item and the undecodable rule produceBadRecords sent to the
// dead-letter topics, with the headers naming where they came from.
func TestReferenceJobShowcase(t *testing.T) {
	d := sharedDaemon(t)
	url := "http://" + d.metrics + "/metrics"

	for _, c := range []struct {
		metric string
		labels map[string]string
	}{
		{"kstreamd_checkpoints_total", map[string]string{"kind": "checkpoint", "result": "completed"}},
		{"kstreamd_checkpoint_last_completed_id", nil},
		{"kstreamd_sink_transactions_total", map[string]string{"sink": "matches", "result": "committed"}},
		{"kstreamd_state_size_bytes", map[string]string{"operator": "matcher"}},
	} {
		var v float64
		var err error
		if !testkit.Poll(15*time.Second, func() bool {
			v, err = testkit.Scrape(url, c.metric, c.labels)
			return err == nil && v > 0
		}) {
			t.Fatalf("%s%v = %v (err %v) after 15s, want > 0\ndaemon log:\n%s", c.metric, c.labels, v, err, d.logTail())
		}
		t.Logf("%s %v = %v", c.metric, c.labels, v)
	}
	testkit.WaitMetric(t, 15*time.Second, url, "kstreamd_source_records_dead_lettered_total", map[string]string{"source": "items", "reason": "malformed_json"}, 1)
	testkit.WaitMetric(t, 15*time.Second, url, "kstreamd_source_records_dead_lettered_total", map[string]string{"source": "rules", "reason": "invalid"}, 1)
	for _, m := range []string{"kstreamd_source_records_skipped_total", "kstreamd_broadcast_rules_rejected_total"} {
		if v, err := testkit.Scrape(url, m, nil); err != nil || v != 0 {
			t.Errorf("%s = %v (err %v), want 0: the reference job dead-letters bad records", m, v, err)
		}
	}
	if v, err := testkit.Scrape(url, "kstreamd_sink_transactions_total", map[string]string{"result": "lost"}); err != nil || v != 0 {
		t.Errorf("kstreamd_sink_transactions_total{result=\"lost\"} = %v (err %v), want 0", v, err)
	}

	brokers := []string{d.broker}
	t.Run("dead-letter topics", func(t *testing.T) {
		for _, c := range []struct {
			topic string
			sent  *kgo.Record
		}{
			{"items-dlq", badItem},
			{"rules-dlq", badRule},
		} {
			recs := testkit.ReadTopic(t, brokers, c.topic, 15*time.Second)
			if len(recs) != 1 {
				t.Errorf("%s holds %d records, want 1 (the bad record sent to %s)", c.topic, len(recs), c.sent.Topic)
				continue
			}
			r := recs[0]
			if !bytes.Equal(r.Key, c.sent.Key) || !bytes.Equal(r.Value, c.sent.Value) {
				t.Errorf("%s record key %q value %q, want the original key %q value %q", c.topic, r.Key, r.Value, c.sent.Key, c.sent.Value)
			}
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			if h["kstreamd.error"] == "" || h["kstreamd.source.topic"] != c.sent.Topic {
				t.Errorf("%s record headers %v: want kstreamd.error and kstreamd.source.topic=%s", c.topic, h, c.sent.Topic)
			}
			for _, k := range []string{"kstreamd.source.partition", "kstreamd.source.offset"} {
				if _, err := strconv.ParseInt(h[k], 10, 64); err != nil {
					t.Errorf("%s record header %s = %q, want a number", c.topic, k, h[k])
				}
			}
		}
	})

	t.Run("read_committed matches", func(t *testing.T) {
		recs := testkit.ReadTopic(t, brokers, "matches", 30*time.Second)
		if len(recs) == 0 {
			t.Fatal("no committed record on topic matches")
		}
		// One run of the demo numbers its items 1, 2, ...: every match is a
		// distinct pair, so a value seen twice is a duplicate.
		seen := map[string]bool{}
		for _, r := range recs {
			var m struct {
				Rule string `json:"rule"`
				Key  string `json:"key"`
			}
			if err := json.Unmarshal(r.Value, &m); err != nil || m.Rule == "" || m.Key != string(r.Key) {
				t.Fatalf("matches record key %q value %q: want {\"rule\", \"key\" = the Kafka key, ...} (%v)", r.Key, r.Value, err)
			}
			if seen[string(r.Value)] {
				t.Errorf("duplicate match at partition %d offset %d: %s", r.Partition, r.Offset, r.Value)
			}
			seen[string(r.Value)] = true
		}
		t.Logf("%d committed matches, no duplicate", len(recs))
	})

	t.Run("readyz and job API", func(t *testing.T) {
		resp, err := http.Get("http://" + d.metrics + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("/readyz: %s, want 200", resp.Status)
		}
		resp, err = http.Get("http://" + d.metrics + "/api/v1/job")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var job struct {
			Name      string `json:"name"`
			Ready     bool   `json:"ready"`
			Operators []struct {
				Name string `json:"name"`
				Kind string `json:"kind"`
				Type string `json:"type"`
			} `json:"operators"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&job); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/api/v1/job: %s: %v", resp.Status, err)
		}
		sinkType := ""
		for _, op := range job.Operators {
			if op.Kind == "sink" && op.Name == "matches" {
				sinkType = op.Type
			}
		}
		if job.Name != "colorshape" || !job.Ready || sinkType != "exactly-once" {
			t.Errorf("/api/v1/job = %+v, want job colorshape, ready, sink matches exactly-once", job)
		}
	})
}
