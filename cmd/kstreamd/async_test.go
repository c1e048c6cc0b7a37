package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// asyncStateConfig is a job whose two keyed operators use async state
// (operators[].async_state): count_window_average and keyed_count over one
// source, on the embedded broker, with checkpoints every 100 ms (each one
// drains the operators' in-flight records before snapshotting).
func asyncStateConfig(dir, broker, metrics, backend string) string {
	return jobHead("asyncjob", 2, dir, embeddedKafka(broker), metrics, "info") + fmt.Sprintf(`state:
  backend: %s
checkpoints:
  interval: 100ms
sources:
  - name: events
    topic: events
operators:
  - name: averages
    type: count_window_average
    input: events
    key_by: key
    async_state: true
  - name: counts
    type: keyed_count
    input: events
    key_by: key
    async_state: true
sinks:
  - name: averaged
    input: averages
    topic: averages
  - name: counted
    input: counts
    topic: counts
`, backend)
}

// TestAsyncStateOperatorsEndToEnd runs count_window_average and keyed_count
// with async_state: true through the pipeline on both backends: the seed
// example (1,3),(1,5),(1,7),(1,4),(1,2) emits exactly the averages 4 and 5,
// the per-key counts are those of the input, each key's in arrival order,
// and checkpoints (which drain the in-flight records first) complete.
func TestAsyncStateOperatorsEndToEnd(t *testing.T) {
	for _, backend := range []string{"pebble", "hashmap"} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
			d := startDaemon(t, dir, asyncStateConfig(dir, broker, metrics, backend), broker, metrics)
			cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.DefaultProduceTopic("events"))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			event := func(key string, v int) *kgo.Record {
				return &kgo.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"key":%q,"value":%d}`, key, v)}
			}
			var recs []*kgo.Record
			for _, v := range []int{3, 5, 7, 4, 2} {
				recs = append(recs, event("1", v))
			}
			wantCounts := map[string]int{"1": 5}
			for i := range 300 {
				k := fmt.Sprintf("k%02d", i%30)
				recs = append(recs, &kgo.Record{Key: []byte(k), Value: fmt.Appendf(nil, `{"key":%q}`, k)}) // no value: no average
				wantCounts[k]++
			}
			produce(t, cl, recs...)
			testkit.WaitMetric(t, 20*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "counted"}, float64(len(recs)))
			testkit.WaitMetric(t, 20*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "averaged"}, 2)

			var avgs []json.Number
			for _, r := range testkit.ReadTopic(t, []string{broker}, "averages", 10*time.Second) {
				var o struct {
					Key     string      `json:"key"`
					Average json.Number `json:"average"`
				}
				if err := json.Unmarshal(r.Value, &o); err != nil || o.Key != "1" {
					t.Fatalf("average record %s (%v), want key 1", r.Value, err)
				}
				avgs = append(avgs, o.Average)
			}
			if !slices.Equal(avgs, []json.Number{"4", "5"}) {
				t.Fatalf("averages = %v, want exactly [4 5]", avgs)
			}

			seen := map[string][]int{}
			for _, r := range testkit.ReadTopic(t, []string{broker}, "counts", 10*time.Second) {
				var o struct {
					Key   string `json:"key"`
					Count int    `json:"count"`
				}
				if err := json.Unmarshal(r.Value, &o); err != nil {
					t.Fatal(err)
				}
				seen[o.Key] = append(seen[o.Key], o.Count)
			}
			got := map[string]int{}
			for k, cs := range seen {
				for i, c := range cs {
					if c != i+1 {
						t.Fatalf("key %s: counts %v, want 1, 2, 3, ... in arrival order", k, cs)
					}
				}
				got[k] = len(cs)
			}
			if !reflect.DeepEqual(got, wantCounts) {
				t.Fatalf("final counts %v, want %v", got, wantCounts)
			}
			waitCheckpointAfter(t, d, 0) // snapshots of the async operators complete
			if code := d.stop(t); code != 0 {
				t.Fatalf("exit status %d, want 0:\n%s", code, d.out.String())
			}
		})
	}
}
