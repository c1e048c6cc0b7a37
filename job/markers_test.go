package job_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/runtime"
)

const windowUnitsYAML = `
job:
  name: wclicks
  max_parallelism: 12
kafka:
  brokers: [localhost:9092]
checkpoints:
  interval: 200ms
  timeout: 1m
cluster:
  enabled: true
  units: 3
  store:
    dir: /unused
sources:
  - name: clicks
    topic: clicks
    timestamp:
      expression: ts
      unit: ms
    watermark:
      idleness: 5s
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
sinks:
  - name: windows
    input: per_window
    topic: windows
    delivery: exactly-once
    transaction_timeout: 10m
  - name: late
    input: per_window.late
    topic: late
    delivery: exactly-once
    transaction_timeout: 10m
`

// TestUnitsEventTimeWindowsAcrossStages runs an event-time tumbling window
// count after a key edge as 6 units (3 per stage) over an input of 2
// partitions: stage-0 unit 2 reads no partition (idle from the start) and
// partition 1 has records in the first two windows only, then goes idle.
// Time crosses the exchange only as markers: every window closes exactly
// once with its exact count (read_committed), no record is late, and after
// the stage-1 units are stopped and rebuilt from their checkpoints (whose
// per-upstream state says units 0/1 and 0/2 are idle: they never write
// again) the remaining windows close once, none twice or early. The
// repartition topic holds each input record once and, in every
// partition, the idle marker of unit 0/2. Every record is produced while
// its partition is active; the idleness (5s) only has to exceed the time a
// source takes to fetch a partition it was just assigned.
func TestUnitsEventTimeWindowsAcrossStages(t *testing.T) {
	f := newUnitFixture(t, "wclicks.yaml", windowUnitsYAML, kfake.SeedTopics(2, "clicks"), kfake.SeedTopics(1, "windows", "late"))
	opts, st, set := f.opts, f.st, f.set
	f.ensureRepartitions(t)
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("clicks"), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	// Event time: window w is [t0+10s*w, t0+10s*(w+1)); in each partition
	// the timestamps only grow (seq), so no record is behind its own
	// partition's watermark.
	const t0, users = int64(1700000000000), 3
	want := map[string]int{} // "<user> <window>" -> count
	seq := map[int32]int64{}
	var produced int
	produce := func(p int32, user string, window int, n int) {
		t.Helper()
		for range n {
			seq[p]++
			ts := t0 + int64(window)*10000 + 5000*int64(p) + seq[p]*10
			if ts >= t0+int64(window+1)*10000 {
				t.Fatalf("timestamp %d beyond window %d", ts, window)
			}
			rec := &kgo.Record{Partition: p, Value: fmt.Appendf(nil, `{"user":%q,"ts":%d}`, user, ts)}
			if err := prod.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
			want[fmt.Sprintf("%s %d", user, window)]++
			produced++
		}
	}
	// Phase 1, before any unit starts: partition 0 in windows 0..2,
	// partition 1 in windows 0..1 only.
	for w := range 3 {
		seq[0] = 0
		for u := range users {
			produce(0, fmt.Sprintf("u%d", u), w, u+1)
		}
	}
	for w := range 2 {
		seq[1] = 0
		for u := range users {
			produce(1, fmt.Sprintf("u%d", u), w, 2)
		}
	}

	set.PurgeRepartitions = false // the test reads the whole repartition topic
	errs := make(chan error, 16)
	type running struct {
		cancel context.CancelFunc
		wg     sync.WaitGroup
		once   sync.Once
	}
	start := func(stage int) *running {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		r := &running{cancel: cancel}
		for u := range st.Units {
			s := set
			s.Unit = &job.Unit{Stage: stage, Index: u, Units: st.Units, Member: "m", Fingerprint: st.Fingerprint}
			j, err := job.Build(ctx, st.Stages[stage].Graph, s, job.Deps{ClientOpts: opts})
			if err != nil {
				cancel()
				t.Fatalf("build stage %d unit %d: %v", stage, u, err)
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				if err := j.Run(ctx); err != nil {
					errs <- fmt.Errorf("stage %d unit %d: %w", stage, u, err)
				}
			}()
		}
		return r
	}
	stop := func(r *running) { r.once.Do(func() { r.cancel(); r.wg.Wait() }) }
	type window struct {
		Key    string `json:"key"`
		Start  string `json:"window_start"`
		Clicks int    `json:"clicks"`
	}
	read := func() map[string][]int {
		got := map[string][]int{}
		for _, r := range testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "windows", 10*time.Second) {
			var w window
			if err := json.Unmarshal(r.Value, &w); err != nil {
				t.Fatalf("output %s: %v", r.Value, err)
			}
			start, err := time.Parse(time.RFC3339, w.Start)
			if err != nil {
				t.Fatalf("output %s: %v", r.Value, err)
			}
			k := fmt.Sprintf("%s %d", w.Key, (start.UnixMilli()-t0)/10000)
			got[k] = append(got[k], w.Clicks)
		}
		return got
	}
	check := func(phase string, got map[string][]int, windows []int) {
		t.Helper()
		n := 0
		for u := range users {
			for _, w := range windows {
				k := fmt.Sprintf("u%d %d", u, w)
				n++
				if c := got[k]; len(c) != 1 || c[0] != want[k] {
					t.Errorf("%s: window %q fired with counts %v, want once with %d", phase, k, c, want[k])
				}
			}
		}
		if len(got) != n {
			t.Errorf("%s: %d windows fired, want %d: %v", phase, len(got), n, got)
		}
	}

	stage0, stage1 := start(0), start(1)
	defer func() { stop(stage0); stop(stage1) }()
	// Windows 0 and 1 close once partition 1 (unit 0/1) and unit 0/2 are
	// idle; window 2 stays open: partition 0's watermark is inside it.
	var got map[string][]int
	if !testkit.Poll(2*time.Minute, func() bool { got = read(); return len(got) >= 2*users }) {
		t.Fatalf("phase 1: windows fired %v, want windows 0 and 1 of %d users", got, users)
	}
	stop(stage1)
	check("phase 1", read(), []int{0, 1})

	// The stage-1 units restart from their checkpoints; partition 0
	// resumes (unit 0/0 active again) with the rest of window 2, windows
	// 3 and 4 and a record of window 5 that moves time past window 4.
	stage1 = start(1)
	seq[0] = 500
	for u := range users {
		produce(0, fmt.Sprintf("u%d", u), 2, 1)
	}
	for w := 3; w < 5; w++ {
		seq[0] = 0
		for u := range users {
			produce(0, fmt.Sprintf("u%d", u), w, u+1)
		}
	}
	seq[0] = 0
	produce(0, "closer", 5, 1)
	if !testkit.Poll(2*time.Minute, func() bool { got = read(); return len(got) >= 5*users }) {
		t.Fatalf("phase 2: windows fired %v, want windows 0..4 of %d users", got, users)
	}
	stop(stage1)
	stop(stage0)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	check("phase 2", read(), []int{0, 1, 2, 3, 4})
	if late := testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "late", 10*time.Second); len(late) != 0 {
		t.Errorf("%d late records, want none: %s", len(late), late[0].Value)
	}

	rep := testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), st.Repartitions[0].Topic, 10*time.Second)
	data := testkit.WithoutMarkers(rep)
	if len(data) != produced {
		t.Errorf("repartition topic holds %d data records, want %d", len(data), produced)
	}
	idle2 := map[int32]bool{}
	markers := 0
	for _, r := range rep {
		var headers []runtime.Header
		for _, h := range r.Headers {
			headers = append(headers, runtime.Header{Key: h.Key, Value: h.Value})
		}
		if runtime.IsExchangeBatch(headers) {
			continue // data records (testkit.WithoutMarkers counted them)
		}
		m, ok, err := runtime.DecodeMarker(headers, r.Value)
		if ok {
			markers++
		}
		if err != nil {
			t.Errorf("partition %d offset %d: %v", r.Partition, r.Offset, err)
		}
		if ok && m.Unit == "0/2" {
			if m.Kind != runtime.MarkerIdle {
				t.Errorf("unit 0/2 reads no partition, yet wrote a %s marker", m.Kind)
			}
			idle2[r.Partition] = true
		}
	}
	t.Logf("repartition topic: %d data records in %d Kafka records, %d markers", len(data), len(rep)-markers, markers)
	if parts := slices.Sorted(maps.Keys(idle2)); fmt.Sprint(parts) != "[0 1 2]" {
		t.Errorf("unit 0/2's idle marker is in partitions %v, want [0 1 2]", parts)
	}
}
