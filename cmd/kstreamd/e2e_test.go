package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// daemon is a kstreamd run started in-process by a test.
type daemon struct {
	broker, metrics string
	out             *syncBuffer
	cancel          context.CancelFunc
	done            chan int
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// referenceConfig is the reference job on an embedded broker at broker with
// /metrics at metrics, its data under dir.
func referenceConfig(dir, broker, metrics string, parallelism int) string {
	return fmt.Sprintf(`job:
  name: colorshape
  parallelism: %d
data_dir: %s
kafka:
  embedded:
    enabled: true
    address: %s
    partitions: 4
metrics:
  address: %s
log:
  level: info
sources:
  - name: items
    topic: items
  - name: rules
    topic: rules
    parallelism: 1
operators:
  - name: matcher
    type: shape_pair_matcher
    input: items
    key_by: color
    broadcast: rules
sinks:
  - name: matches
    input: matcher
    topic: matches
`, parallelism, dir, broker, metrics)
}

// startDaemon runs `kstreamd run` on cfg and waits until /healthz answers.
func startDaemon(t *testing.T, dir, cfg, broker, metrics string) *daemon {
	t.Helper()
	path := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{broker: broker, metrics: metrics, out: &syncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() { d.done <- run(ctx, []string{"run", "--config", path}, d.out, d.out) }()
	t.Cleanup(func() {
		d.cancel()
		select {
		case <-d.done:
		case <-time.After(20 * time.Second):
			t.Errorf("daemon did not stop")
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", d.out.String())
		}
	})
	ok := testkit.Poll(20*time.Second, func() bool {
		v, err := testkit.Scrape("http://"+metrics+"/metrics", "kstreamd_broadcast_rules", nil)
		_ = v
		return err == nil && strings.Contains(d.out.String(), "job running")
	})
	if !ok {
		t.Fatalf("daemon did not start:\n%s", d.out.String())
	}
	return d
}

// stop cancels the daemon (as SIGTERM does) and returns its exit status.
func (d *daemon) stop(t *testing.T) int {
	t.Helper()
	d.cancel()
	select {
	case code := <-d.done:
		d.done <- code
		return code
	case <-time.After(15 * time.Second):
		t.Fatalf("daemon did not stop within 15s:\n%s", d.out.String())
	}
	return -1
}

func (d *daemon) url() string { return "http://" + d.metrics + "/metrics" }

func produce(t *testing.T, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

func item(id int, color, shape string) *kgo.Record {
	v := fmt.Sprintf(`{"id":%d,"color":%q,"shape":%q}`, id, color, shape)
	return &kgo.Record{Topic: "items", Key: []byte(color), Value: []byte(v)}
}

func rule(name, first, second string) *kgo.Record {
	if first == "" {
		return &kgo.Record{Topic: "rules", Key: []byte(name)} // null value: delete
	}
	v := fmt.Sprintf(`{"name":%q,"first":%q,"second":%q}`, name, first, second)
	return &kgo.Record{Topic: "rules", Key: []byte(name), Value: []byte(v)}
}

// matchStrings renders each match as "rule key first.id,second.id", sorted.
func matchStrings(t *testing.T, recs []*kgo.Record) []string {
	t.Helper()
	var out []string
	for _, r := range recs {
		var m struct {
			Rule, Key     string
			First, Second struct {
				ID    int
				Color string
			}
		}
		if err := json.Unmarshal(r.Value, &m); err != nil {
			t.Fatalf("match %s: %v", r.Value, err)
		}
		if string(r.Key) != m.Key || m.First.Color != m.Key || m.Second.Color != m.Key {
			t.Errorf("match %s has Kafka key %q", r.Value, r.Key)
		}
		out = append(out, fmt.Sprintf("%s %s %d,%d", m.Rule, m.Key, m.First.ID, m.Second.ID))
	}
	slices.Sort(out)
	return out
}

// TestReferenceJobEndToEnd is issue 2's acceptance scenario on the embedded
// broker at parallelism 1, 2 and 4.
func TestReferenceJobEndToEnd(t *testing.T) {
	for _, p := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("parallelism=%d", p), func(t *testing.T) {
			dir := t.TempDir()
			broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
			d := startDaemon(t, dir, referenceConfig(dir, broker, metrics, p), broker, metrics)
			cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			rules := func(want int) {
				t.Helper()
				testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", map[string]string{"operator": "matcher"}, float64(want*p))
			}
			matcherIn := func(want int) {
				t.Helper()
				testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_in_total", map[string]string{"operator": "matcher"}, float64(want))
			}
			produce(t, cl, rule("R1", "RECTANGLE", "TRIANGLE"))
			rules(1)
			produce(t, cl, item(1, "blue", "RECTANGLE"), item(2, "red", "RECTANGLE"), item(3, "blue", "TRIANGLE"),
				item(4, "red", "CIRCLE"), item(5, "red", "TRIANGLE"), item(6, "blue", "TRIANGLE"))
			matcherIn(6 + 1*p)
			testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "matches"}, 2)
			got := matchStrings(t, testkit.ReadTopic(t, []string{broker}, "matches", 10*time.Second))
			if want := []string{"R1 blue 1,3", "R1 red 2,5"}; !slices.Equal(got, want) {
				t.Fatalf("phase 1 matches = %q, want %q", got, want)
			}

			produce(t, cl, rule("R2", "CIRCLE", "CIRCLE"))
			rules(2)
			produce(t, cl, rule("R1", "", ""))
			rules(1)
			produce(t, cl, item(7, "green", "CIRCLE"), item(8, "green", "CIRCLE"), item(9, "green", "CIRCLE"))
			matcherIn(9 + 3*p)
			testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "matches"}, 4)
			got = matchStrings(t, testkit.ReadTopic(t, []string{broker}, "matches", 10*time.Second))
			if want := []string{"R1 blue 1,3", "R1 red 2,5", "R2 green 7,8", "R2 green 8,9"}; !slices.Equal(got, want) {
				t.Fatalf("all matches = %q, want %q", got, want)
			}
			if code := d.stop(t); code != 0 {
				t.Fatalf("exit status %d, want 0:\n%s", code, d.out.String())
			}
			if !strings.Contains(d.out.String(), "job stopped cleanly") {
				t.Fatalf("no clean stop in the log:\n%s", d.out.String())
			}
		})
	}
}

// TestRestartBootstrapsRulesBeforeItems restarts the daemon on the same data
// directory: the embedded broker kept its topics, and the restarted job
// (which re-reads both topics from the earliest offset, as keyed state starts
// empty without checkpoints) loads every rule before judging any item, so it
// emits the same matches again.
func TestRestartBootstrapsRulesBeforeItems(t *testing.T) {
	const p = 4
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cfg := referenceConfig(dir, broker, metrics, p)
	d := startDaemon(t, dir, cfg, broker, metrics)
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for i := 0; i < 20; i++ { // rules R0..R19 all pair RECTANGLE then TRIANGLE
		recs = append(recs, rule(fmt.Sprintf("R%02d", i), "RECTANGLE", "TRIANGLE"))
	}
	produce(t, cl, recs...)
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", map[string]string{"operator": "matcher"}, 20*p)
	produce(t, cl, item(1, "blue", "RECTANGLE"), item(2, "blue", "TRIANGLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "matches"}, 20)
	cl.Close()
	if code := d.stop(t); code != 0 {
		t.Fatalf("first run exit status %d", code)
	}

	d2 := startDaemon(t, dir, cfg, broker, metrics)
	testkit.WaitMetric(t, 10*time.Second, d2.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "matches"}, 20)
	got := matchStrings(t, testkit.ReadTopic(t, []string{broker}, "matches", 10*time.Second))
	if len(got) != 40 {
		t.Fatalf("%d matches after restart, want 40 (20 rules, twice): %q", len(got), got)
	}
	for i := 0; i < 20; i++ {
		want := fmt.Sprintf("R%02d blue 1,2", i)
		if got[2*i] != want || got[2*i+1] != want {
			t.Fatalf("matches %d,%d = %q,%q, want %q twice", 2*i, 2*i+1, got[2*i], got[2*i+1], want)
		}
	}
	if code := d2.stop(t); code != 0 {
		t.Fatalf("second run exit status %d", code)
	}
}
