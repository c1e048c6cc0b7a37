package job_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/pipeline"
	"github.com/kstreamd/kstreamd/runtime"
)

// throttledSink is the test sink type throttled: it sleeps per record
// while slow is set (a sink writing to a slow system) and counts what it
// got.
type throttledSink struct {
	slow *atomic.Bool
	got  *atomic.Int64
}

func (throttledSink) Open(context.Context) error { return nil }
func (s throttledSink) ProcessRecord(context.Context, int, runtime.Record) error {
	if s.slow.Load() {
		time.Sleep(time.Millisecond)
	}
	s.got.Add(1)
	return nil
}
func (throttledSink) EndInput(context.Context) error { return nil }
func (throttledSink) Close() error                   { return nil }

const signalsYAML = `
job:
  name: signals
kafka:
  brokers: [localhost:9092]
sources:
  - name: in
    topic: in
    format: json
    parallelism: 2
    timestamp: {expression: ts}
operators:
  - name: big
    type: filter
    input: in
    params: {condition: "amount >= 0"}
  - name: project
    type: map
    input: big
    params: {value: '{"amount": amount}'}
sinks:
  - name: slow
    type: throttled
    input: project
    parallelism: 1
`

// TestBackPressureSignals is issue 26's backpressure acceptance: a job
// in (2 subtasks) -> big -> project (big and project chained to the source) -> slow, a sink that
// takes 1 ms per record.
//
// First 10 records per partition go through with the sink fast, then
// the job waits for input: every subtask of every vertex shows idle time
// above 700 ms/s, busy and back-pressured below 300, in the API and in the
// kstreamd_operator_*_time_ms_per_second gauges, and each vertex's
// watermark is exactly the lowest partition's largest ts minus 1 ms
// (1008; source subtasks 1008 and 2008). The graph has the vertex ids and
// the edges forward, chain and rebalance.
//
// Then 20,000 records arrive with the sink slow: the upstream subtasks
// (both of in, both of the big->project chain) show back-pressured time
// above 700 ms/s and the sink busy time above 700 ms/s (and it is never
// back-pressured: it has no output), in the API and the gauges; the
// sink's records in per second is between 1 and 1,000 (1 ms each).
func TestBackPressureSignals(t *testing.T) {
	var slow atomic.Bool
	var got atomic.Int64
	reg := job.NewBuiltinConnectors()
	if err := reg.RegisterSink(connector.SinkFactory{
		Type: "throttled", Doc: "test: sleeps 1 ms per record while slow", Deliveries: []graph.Delivery{graph.DeliveryAtLeastOnce},
		New: func(connector.SinkContext) (runtime.Operator, error) {
			return throttledSink{slow: &slow, got: &got}, nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	_, opts := newKafka(t, kfake.SeedTopics(2, "in"))
	cfg, err := pipeline.ParseWith("signals.yaml", []byte(signalsYAML), pipeline.Registries{Connectors: reg})
	if err != nil {
		t.Fatal(err)
	}
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	set := cfg.Settings()
	set.CheckpointDir, set.StateDir, set.StateBackend = filepath.Join(dir, "chk"), filepath.Join(dir, "state"), "hashmap"
	prom := prometheus.NewRegistry()
	deps := job.Deps{ClientOpts: opts, Connectors: cfg.Connectors(), Registerer: prom, SignalWindow: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, err := job.Build(ctx, g, set, deps)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- j.Run(runCtx) }()
	var stopOnce sync.Once
	finish := func() {
		stopOnce.Do(func() {
			slow.Store(false)
			stop()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	defer finish()

	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("in"), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(part int32, from, n int) {
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			recs = append(recs, &kgo.Record{Partition: part, Value: fmt.Appendf(nil, `{"amount":%d,"ts":%d}`, i, i)})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// Idle.
	produce(0, 1000, 10)
	produce(1, 2000, 10)
	if !testkit.Poll(30*time.Second, func() bool { return got.Load() == 20 }) {
		t.Fatalf("sink got %d records, want 20", got.Load())
	}
	var st job.Status
	allIdle := func() bool {
		st = j.Status()
		for _, v := range st.Operators {
			for _, s := range v.Subtasks {
				if s.IdleMsPerS <= 700 || s.BusyMsPerS >= 300 || s.BackPressuredMsPerS >= 300 {
					return false
				}
			}
			if v.WatermarkMs == nil || *v.WatermarkMs != 1008 {
				return false
			}
		}
		return true
	}
	if !testkit.Poll(20*time.Second, allIdle) {
		t.Fatalf("not every subtask idle with watermark 1008: %s", statusJSON(st))
	}
	checkGraph(t, st)
	checkContract(t, st)
	if wms := subtaskWatermarks(st, "in"); !slices.Equal(wms, []int64{1008, 2008}) {
		t.Fatalf("source subtask watermarks %v, want 1008 and 2008", wms)
	}
	checkGauges(t, prom, func(op string, busy, bp, idle float64) error {
		if idle <= 700 || busy >= 300 || bp >= 300 {
			return fmt.Errorf("busy %v, back-pressured %v, idle %v ms/s: want idle > 700", busy, bp, idle)
		}
		return nil
	})

	// Back-pressure.
	slow.Store(true)
	produce(0, 10_000, 10_000)
	produce(1, 20_000, 10_000)
	upstream := []string{"in", "big", "project"}
	pressured := func() bool {
		st = j.Status()
		for _, v := range st.Operators {
			for _, s := range v.Subtasks {
				if slices.Contains(upstream, v.Name) && s.BackPressuredMsPerS <= 700 {
					return false
				}
				if v.Name == "slow" && (s.BusyMsPerS <= 700 || s.BackPressuredMsPerS != 0) {
					return false
				}
			}
		}
		return true
	}
	if !testkit.Poll(30*time.Second, pressured) {
		t.Fatalf("want the upstream subtasks back-pressured > 700 ms/s and the sink busy > 700: %s", statusJSON(st))
	}
	sink := vertex(st, "slow")
	if sink.RecordsInPerS <= 0 || sink.RecordsInPerS > 1000 || sink.BusyMsPerS <= 700 {
		t.Fatalf("sink %s: want 1..1000 records/s in and busy > 700", statusJSON(sink))
	}
	if v := vertex(st, "in"); v.BackPressuredMsPerS <= 700 || v.RecordsOutPerS <= 0 {
		t.Fatalf("source %s: want back-pressured > 700 and records going out", statusJSON(v))
	}
	checkGauges(t, prom, func(op string, busy, bp, idle float64) error {
		if slices.Contains(upstream, op) && bp <= 700 {
			return fmt.Errorf("back-pressured %v ms/s, want > 700", bp)
		}
		if op == "slow" && busy <= 700 {
			return fmt.Errorf("busy %v ms/s, want > 700", busy)
		}
		return nil
	})
	// The time counters, once the job stopped: the chained project
	// counts its task's time, as big does; the sink's busy seconds grew.
	finish()
	bp := counters(t, prom, "kstreamd_operator_backpressured_seconds_total")
	for _, sub := range []string{"0", "1"} {
		if b, p := bp["big/"+sub], bp["project/"+sub]; b <= 0 || b != p {
			t.Errorf("back-pressured seconds of subtask %s: big %v, project %v; want equal and above 0", sub, b, p)
		}
	}
	if busy := counters(t, prom, "kstreamd_operator_busy_seconds_total")["slow/0"]; busy <= 0 {
		t.Errorf("busy seconds of the sink %v, want above 0", busy)
	}
}

// counters returns the values of counter name per "operator/subtask".
func counters(t *testing.T, prom *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var op, sub string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "operator":
					op = l.GetValue()
				case "subtask":
					sub = l.GetValue()
				}
			}
			out[op+"/"+sub] = m.GetCounter().GetValue()
		}
	}
	return out
}

// checkGraph asserts the vertex ids, parallelism and edges of the
// signals job.
func checkGraph(t *testing.T, st job.Status) {
	t.Helper()
	var ids []string
	for _, v := range st.Operators {
		ids = append(ids, fmt.Sprintf("%s:%d:%d", v.ID, v.Parallelism, len(v.Subtasks)))
	}
	if want := []string{"in:2:2", "big:2:2", "project:2:2", "slow:1:1"}; !slices.Equal(ids, want) {
		t.Fatalf("vertices (id:parallelism:subtasks) %v, want %v", ids, want)
	}
	var edges []string
	for _, e := range st.Edges {
		edges = append(edges, e.From+"-"+e.Kind+"->"+e.To)
	}
	slices.Sort(edges)
	if want := []string{"big-chain->project", "in-chain->big", "project-rebalance->slow"}; !slices.Equal(edges, want) {
		t.Fatalf("edges %v, want %v", edges, want)
	}
}

// checkContract asserts the JSON names of GET /api/v1/job's graph (the
// shared API contract the web UI reads): every vertex has id, subtasks
// and the totals, every subtask its figures, every edge from, to and
// kind; with every subtask's watermark set, watermark_ms is everywhere.
func checkContract(t *testing.T, st job.Status) {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Operators []map[string]json.RawMessage `json:"operators"`
		Edges     []map[string]json.RawMessage `json:"edges"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	has := func(what string, m map[string]json.RawMessage, keys ...string) {
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				t.Fatalf("%s has no %q: %s", what, k, b)
			}
		}
	}
	for _, v := range doc.Operators {
		has("vertex", v, "id", "name", "kind", "parallelism", "subtasks", "records_in_per_s", "records_out_per_s", "busy_ms_per_s", "backpressured_ms_per_s", "watermark_ms")
		var subs []map[string]json.RawMessage
		if err := json.Unmarshal(v["subtasks"], &subs); err != nil || len(subs) == 0 {
			t.Fatalf("subtasks %s: %v", v["subtasks"], err)
		}
		for _, s := range subs {
			has("subtask", s, "index", "busy_ms_per_s", "backpressured_ms_per_s", "idle_ms_per_s", "records_in_per_s", "records_out_per_s", "watermark_ms")
		}
	}
	if len(doc.Edges) != 3 {
		t.Fatalf("edges %s", b)
	}
	for _, e := range doc.Edges {
		has("edge", e, "from", "to", "kind")
	}
}

// subtaskWatermarks returns the watermarks of vertex name's subtasks,
// sorted (-1 for none).
func subtaskWatermarks(st job.Status, name string) []int64 {
	var out []int64
	for _, s := range vertex(st, name).Subtasks {
		w := int64(-1)
		if s.WatermarkMs != nil {
			w = *s.WatermarkMs
		}
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}

func vertex(st job.Status, name string) job.VertexStatus {
	for _, v := range st.Operators {
		if v.Name == name {
			return v
		}
	}
	return job.VertexStatus{}
}

func statusJSON(v any) string {
	b, _ := json.MarshalIndent(v, "", " ")
	return string(b)
}

// checkGauges gathers the kstreamd_operator_*_time_ms_per_second gauges
// of every subtask of the signals job from prom and fails the test when
// check refuses one's figures or a subtask has none.
func checkGauges(t *testing.T, prom *prometheus.Registry, check func(op string, busy, bp, idle float64) error) {
	t.Helper()
	mfs, err := prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ op, sub string }
	vals := map[key]map[string]float64{}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "kstreamd_operator_") || !strings.HasSuffix(name, "_time_ms_per_second") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var k key
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "operator":
					k.op = l.GetValue()
				case "subtask":
					k.sub = l.GetValue()
				}
			}
			if vals[k] == nil {
				vals[k] = map[string]float64{}
			}
			vals[k][name] = m.GetGauge().GetValue()
		}
	}
	want := []key{{"in", "0"}, {"in", "1"}, {"big", "0"}, {"big", "1"}, {"project", "0"}, {"project", "1"}, {"slow", "0"}}
	if len(vals) != len(want) {
		t.Fatalf("gauges of %d subtasks %v, want %v", len(vals), vals, want)
	}
	for _, k := range want {
		v, ok := vals[k]
		if !ok || len(v) != 3 {
			t.Fatalf("%s[%s]: gauges %v, want busy, back-pressured and idle", k.op, k.sub, v)
		}
		if err := check(k.op, v["kstreamd_operator_busy_time_ms_per_second"], v["kstreamd_operator_backpressured_time_ms_per_second"], v["kstreamd_operator_idle_time_ms_per_second"]); err != nil {
			t.Fatalf("%s[%s] gauges: %v", k.op, k.sub, err)
		}
	}
}
