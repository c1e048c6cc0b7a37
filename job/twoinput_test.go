package job_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/pipeline"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// coCount is a two-input keyed function: per key it counts the records
// of each input in keyed state and emits {"side", "n", "other"} with every
// record (n: this input's count so far, other: the other input's).
type coCount struct {
	counts [2]state.ValueState[int64]
}

func (c *coCount) Open(ctx operators.OpenContext) error {
	for i, name := range []string{"left", "right"} {
		s, err := state.GetValueState(ctx.Backend, state.ValueStateDescriptor[int64]{Name: name, Serializer: state.Int64Serializer{}})
		if err != nil {
			return err
		}
		c.counts[i] = s
	}
	return nil
}

func (c *coCount) process(side int, rec runtime.Record, out operators.Collector) error {
	n, _, err := c.counts[side].Value()
	if err != nil {
		return err
	}
	n++
	if err := c.counts[side].Update(n); err != nil {
		return err
	}
	other, _, err := c.counts[1-side].Value()
	if err != nil {
		return err
	}
	v, _ := json.Marshal(map[string]any{"side": side, "n": n, "other": other})
	return out.Collect(runtime.Record{Key: rec.Key, Value: v, Timestamp: rec.Timestamp})
}

func (c *coCount) ProcessElement1(_ context.Context, rec runtime.Record, out operators.Collector) error {
	return c.process(0, rec, out)
}

func (c *coCount) ProcessElement2(_ context.Context, rec runtime.Record, out operators.Collector) error {
	return c.process(1, rec, out)
}

// coCountRegistry is the built-ins plus co_count, a two-input keyed type
// with roles left and right.
func coCountRegistry(t *testing.T) *operators.Registry {
	reg := operators.NewBuiltinRegistry()
	if err := reg.Register(operators.Factory{
		Type: "co_count", Doc: "test", Traits: operators.Traits{Keyed: true, Inputs: [2]string{"left", "right"}},
		New: func(operators.FactoryContext) (any, error) { return &coCount{}, nil },
	}); err != nil {
		t.Fatal(err)
	}
	return reg
}

const coCountYAML = `
job:
  name: co
  parallelism: %d
  max_parallelism: 16
kafka:
  brokers: [localhost:9092]
checkpoints:
  interval: 100ms
  timeout: 1m
sources:
  - {name: orders, topic: orders}
  - {name: payments, topic: payments}
operators:
  - name: both
    type: co_count
    inputs:
      left: {from: orders, key_by: k}
      right: {from: payments, key_by: id}
sinks:
  - {name: out, input: both, topic: out, delivery: exactly-once}
`

// TestTwoInputKeyedRescale runs a two-input keyed operator (co_count)
// over two sources keyed by different fields, exactly-once, at
// parallelism 2; then, after more input, restores its checkpoint at
// parallelism 3. Both inputs of one key meet in one key's state across
// the rescale: per key and input, the counts emitted are exactly 1..N once
// each (no record lost, none counted twice), and every record of the other
// input counted before is seen.
func TestTwoInputKeyedRescale(t *testing.T) {
	_, opts := newKafka(t, kfake.SeedTopics(2, "orders", "payments", "out"))
	reg := coCountRegistry(t)
	dir := t.TempDir()
	build := func(p int, log *testkit.SyncBuffer) *job.Job {
		cfg, err := pipeline.Parse("co.yaml", fmt.Appendf(nil, coCountYAML, p), reg)
		if err != nil {
			t.Fatal(err)
		}
		g, err := cfg.Plan()
		if err != nil {
			t.Fatal(err)
		}
		set := cfg.Settings()
		set.CheckpointDir, set.StateDir, set.StateBackend = dir+"/chk", dir+"/state", "hashmap"
		j, err := job.Build(context.Background(), g, set, job.Deps{ClientOpts: opts, DrainTimeout: runtime.DefaultDrainTimeout,
			Logger: slog.New(slog.NewJSONHandler(log, nil))})
		if err != nil {
			t.Fatalf("build: %v", err)
		}
		return j
	}
	produceHalf := func(half int) {
		produceEach(t, opts, "orders", half*100, half*100+100, func(i int) []byte { return fmt.Appendf(nil, `{"k":"k%d","i":%d}`, i%10, i) })
		produceEach(t, opts, "payments", half*50, half*50+50, func(i int) []byte { return fmt.Appendf(nil, `{"id":"k%d","i":%d}`, i%10, i) })
	}
	committed := func() []*kgo.Record {
		return testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "out", 5*time.Second)
	}
	run := func(p, want int) *job.Job {
		log := &testkit.SyncBuffer{}
		j := build(p, log)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- j.Run(ctx) }()
		if !testkit.Poll(time.Minute, func() bool { return len(committed()) >= want }) {
			t.Fatalf("parallelism %d: %d committed outputs, want %d\n%s", p, len(committed()), want, log.String())
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("parallelism %d: %v", p, err)
		}
		return j
	}
	produceHalf(0)
	run(2, 150)
	produceHalf(1)
	if run(3, 300).RestoredFrom() == "" {
		t.Fatal("the job at parallelism 3 restored no checkpoint")
	}

	out := committed()
	if len(out) != 300 {
		t.Fatalf("%d committed outputs, want 300 (one per input record, none twice)", len(out))
	}
	ns := map[string][]int64{}   // key/side -> counts emitted
	others := map[string]int64{} // key/side -> largest other count seen
	for _, r := range out {
		var v struct{ Side, N, Other int64 }
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatal(err)
		}
		k := fmt.Sprintf("%s/%d", r.Key, v.Side)
		ns[k] = append(ns[k], v.N)
		others[k] = max(others[k], v.Other)
	}
	for i := range 10 {
		for side, total := range []int64{20, 10} {
			k := fmt.Sprintf("k%d/%d", i, side)
			got := slices.Sorted(slices.Values(ns[k]))
			want := make([]int64, total)
			for j := range want {
				want[j] = int64(j + 1)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: counts %v, want 1..%d once each", k, got, total)
			}
			if other := []int64{10, 20}[side]; others[k] > other {
				t.Errorf("%s: saw %d records of the other input, there are %d", k, others[k], other)
			}
		}
	}
}

const coCountUnitsYAML = `
job:
  name: co
  max_parallelism: 16
kafka:
  brokers: [localhost:9092]
checkpoints:
  interval: 100ms
  timeout: 1m
cluster:
  enabled: true
  units: 3
  purge_repartitions: false
  store:
    dir: /unused
sources:
  - {name: orders, topic: orders}
  - {name: payments, topic: payments}
operators:
  - name: both
    type: co_count
    inputs:
      left: {from: orders, key_by: k}
      right: {from: payments, key_by: id}
sinks:
  - {name: out, input: both, topic: out, delivery: exactly-once, transaction_timeout: 10m}
`

// TestUnitsTwoInput runs a user's two-input keyed function (co_count, a
// KeyedCoProcessFunction) in cluster mode: 3 units per stage in one
// process, stage 0 writing the orders keyed by k and the payments keyed by
// id to one repartition topic each, stage 1's units each reading their
// partition of both. Member a runs every unit over the first half of the
// input and stops; member b, with empty local directories, takes every unit
// over from the store (its stage-1 units restore their checkpoints) and
// runs the second half. Read_committed, per key and input the counts
// emitted are exactly 1..N once each (both inputs of a key met in one
// unit's keyed state, across the takeover), no count of the other input
// above its total; each repartition topic holds each record of its input
// once, in the partition of the unit owning its key group. Member c then
// runs with the purge on: every partition of both topics is purged past
// the records read, and kstreamd_cluster_repartition_start_offset reports
// each topic's start offset under its own topic label.
func TestUnitsTwoInput(t *testing.T) {
	_, opts := newKafka(t, kfake.SeedTopics(2, "orders", "payments", "out"))
	cfg, err := pipeline.Parse("co.yaml", []byte(coCountUnitsYAML), coCountRegistry(t))
	if err != nil {
		t.Fatal(err)
	}
	st, err := cfg.PlanStages()
	if err != nil {
		t.Fatal(err)
	}
	if err := job.EnsureRepartitionTopics(context.Background(), opts, st); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	set := cfg.Settings()
	set.StateBackend, set.Store = "hashmap", checkpoint.FileStore{Root: dir + "/store"}
	var logs testkit.SyncBuffer
	committed := func() []*kgo.Record {
		return testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "out", 5*time.Second)
	}
	produceHalf := func(half int) {
		produceEach(t, opts, "orders", half*100, half*100+100, func(i int) []byte { return fmt.Appendf(nil, `{"k":"k%d","i":%d}`, i%10, i) })
		produceEach(t, opts, "payments", half*50, half*50+50, func(i int) []byte { return fmt.Appendf(nil, `{"id":"k%d","i":%d}`, i%10, i) })
	}
	outputs := func(n int) func() bool { return func() bool { return len(committed()) >= n } }
	produceHalf(0)
	runUnits(t, st, set, dir, "a", opts, nil, &logs, outputs(150))
	produceHalf(1)
	checkRestoredFrom(t, runUnits(t, st, set, dir, "b", opts, nil, &logs, outputs(300)), dir, "b", "co")
	out := committed()
	if len(out) != 300 {
		t.Fatalf("%d committed outputs, want 300 (one per input record, none twice)", len(out))
	}
	ns := map[string][]int64{}   // key/side -> counts emitted
	others := map[string]int64{} // key/side -> largest other count seen
	for _, r := range out {
		var v struct{ Side, N, Other int64 }
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatal(err)
		}
		k := fmt.Sprintf("%s/%d", r.Key, v.Side)
		ns[k] = append(ns[k], v.N)
		others[k] = max(others[k], v.Other)
	}
	for i := range 10 {
		for side, total := range []int64{20, 10} {
			k := fmt.Sprintf("k%d/%d", i, side)
			got := slices.Sorted(slices.Values(ns[k]))
			want := make([]int64, total)
			for j := range want {
				want[j] = int64(j + 1)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: counts %v, want 1..%d once each", k, got, total)
			}
			if other := []int64{10, 20}[side]; others[k] > other {
				t.Errorf("%s: saw %d records of the other input, there are %d", k, others[k], other)
			}
		}
	}
	held := map[string]map[int32]int64{} // topic -> partition -> the offset after its last data record
	for topic, n := range map[string]int{"co-1-left-repartition": 200, "co-1-right-repartition": 100} {
		rep := testkit.WithoutMarkers(testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), topic, 5*time.Second))
		if len(rep) != n {
			t.Errorf("%s holds %d records, want %d", topic, len(rep), n)
		}
		held[topic] = map[int32]int64{}
		for _, r := range rep {
			held[topic][r.Partition] = max(held[topic][r.Partition], r.Offset+1) // records travel in exchange batches
			if want := keygroup.OperatorIndex(keygroup.Assign(r.Key, 16), 16, 3); int(r.Partition) != want {
				t.Errorf("%s: record with key %s in partition %d, want %d", topic, r.Key, r.Partition, want)
			}
		}
	}

	// Member c runs with the purge on: after its checkpoints each stage-1
	// unit deletes the records of its partition of both topics, and
	// reports each topic's log start offset under its own topic label.
	reg := prometheus.NewRegistry()
	m, err := job.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	purging := set
	purging.PurgeRepartitions = true
	adm := newAdmin(t, opts)
	topics := []string{"co-1-left-repartition", "co-1-right-repartition"}
	var starts kadm.ListedOffsets
	purged := func() bool {
		if starts, err = adm.ListStartOffsets(context.Background(), topics...); err != nil || starts.Error() != nil {
			return false
		}
		ok := true
		starts.Each(func(o kadm.ListedOffset) {
			l := map[string]string{"stage": "1", "unit": fmt.Sprint(o.Partition), "topic": o.Topic}
			if o.Offset == 0 || counterSum(t, reg, "kstreamd_cluster_repartition_start_offset", l) != float64(o.Offset) {
				ok = false
			}
		})
		return ok
	}
	runUnits(t, st, purging, dir, "c", opts, m, &logs, purged)
	starts.Each(func(o kadm.ListedOffset) {
		if o.Offset < held[o.Topic][o.Partition] {
			t.Errorf("%s/%d starts at %d after the purge, before the end of the first two members' records at %d", o.Topic, o.Partition, o.Offset, held[o.Topic][o.Partition])
		}
	})
}
