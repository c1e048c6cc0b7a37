package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// multiTopicConfig is a job reading every topic matching orders-.* (new
// ones looked for every 200 ms), tagging each order with the topic it came
// from (the expression name topic) and writing it exactly-once to tagged,
// checkpointing every 100 ms.
func multiTopicConfig(dir, broker, metrics string) string {
	return jobHead("multitopic", 2, dir, brokersKafka(broker), metrics, "info") + `sources:
  - name: orders
    topic_pattern: "orders-.*"
    partition_discovery_interval: 200ms
operators:
  - name: tag
    type: map
    input: orders
    params:
      value: '{"id": id, "topic": topic}'
sinks:
  - name: tagged
    input: tag
    topic: tagged
    delivery: exactly-once
checkpoints:
  interval: 100ms
`
}

// produceOrders writes orders ids from..to-1 to topic, spread over its
// partitions, and returns what the job must write for them.
func produceOrders(t *testing.T, cl *kgo.Client, topic string, from, to int) []string {
	t.Helper()
	var recs []*kgo.Record
	var want []string
	for id := from; id < to; id++ {
		recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", id), Value: fmt.Appendf(nil, `{"id":%d}`, id)})
		want = append(want, fmt.Sprintf("%s %d", topic, id))
	}
	produce(t, cl, recs...)
	return want
}

// readTagged reads tagged (read_committed) as "topic id" strings, sorted.
func readTagged(broker string) ([]string, error) {
	recs, err := testkit.TryReadTopic([]kgo.Opt{kgo.SeedBrokers(broker)}, kgo.ReadCommitted(), "tagged", 5*time.Second)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range recs {
		var v struct {
			ID    int    `json:"id"`
			Topic string `json:"topic"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			return nil, fmt.Errorf("tagged value %q: %w", r.Value, err)
		}
		out = append(out, fmt.Sprintf("%s %d", v.Topic, v.ID))
	}
	slices.Sort(out)
	return out, nil
}

// waitTagged waits (at most limit) until tagged holds exactly want (sorted
// in place), failing with what it holds otherwise.
func waitTagged(t *testing.T, broker string, want []string, limit time.Duration) {
	t.Helper()
	slices.Sort(want)
	var got []string
	var err error
	if !testkit.Poll(limit, func() bool {
		got, err = readTagged(broker)
		return err == nil && len(got) >= len(want)
	}) || !slices.Equal(got, want) {
		t.Fatalf("tagged holds %d records %q (err %v), want exactly %d: %q", len(got), got, err, len(want), want)
	}
}

// TestTopicPatternSourceDiscoversTopicsAndRestores checks a topic_pattern
// source against kfake: the topics matching at start are read; a matching
// topic created while the job runs is read from its start (records
// produced before the discovery included) within the discovery interval,
// bounded here by 20 s; a topic not matching is not read; each record's
// topic is what the expression topic saw; and after a stop and restore the
// offsets of every topic, the discovered one included, hold: the
// exactly-once output read_committed holds every record exactly once.
func TestTopicPatternSourceDiscoversTopicsAndRestores(t *testing.T) {
	_, broker := startKfake(t, []string{"orders-eu", "other", "tagged"})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cfg := multiTopicConfig(dir, broker, metrics)
	cl := newClient(t, broker)
	adm := kadm.NewClient(cl)

	want := produceOrders(t, cl, "orders-eu", 0, 40)
	produceOrders(t, cl, "other", 1000, 1010) // not matched: never read
	d := launchDaemon(t, dir, cfg, broker, metrics)
	waitTagged(t, broker, want, 30*time.Second)

	// A topic created while the job runs, its records written before the
	// job can have seen it: read from its start.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if resp, err := adm.CreateTopics(ctx, 3, 1, nil, "orders-us"); err != nil || resp.Error() != nil {
		t.Fatalf("create orders-us: %v %v", err, resp.Error())
	}
	want = append(want, produceOrders(t, cl, "orders-us", 100, 130)...)
	want = append(want, produceOrders(t, cl, "orders-eu", 40, 50)...)
	waitTagged(t, broker, want, 20*time.Second)
	waitCheckpointAfter(t, d, 0)
	if code := d.stopWithin(t, 20*time.Second); code != 0 {
		t.Fatalf("exit status %d", code)
	}

	// While the job is down: more in both topics. The restored job reads
	// from the checkpointed offsets of each: nothing twice, nothing lost.
	want = append(want, produceOrders(t, cl, "orders-us", 130, 140)...)
	want = append(want, produceOrders(t, cl, "orders-eu", 50, 60)...)
	d = launchDaemon(t, dir, cfg, broker, metrics)
	want = append(want, produceOrders(t, cl, "orders-us", 140, 145)...)
	waitTagged(t, broker, want, 30*time.Second)
	if lines := restoreLines(d.out.String()); len(lines) != 1 {
		t.Fatalf("restart: \"restoring\" lines %q, want one", lines)
	}
	if code := d.stopWithin(t, 20*time.Second); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}
