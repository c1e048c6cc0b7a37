package main

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// exactlyOnceConfig is the reference job with checkpoints every 100 ms and
// an exactly-once sink.
func exactlyOnceConfig(dir, broker, metrics string, p int) string {
	return referenceConfig(dir, broker, metrics, p) + `    delivery: exactly-once
    transaction_timeout: 1m
checkpoints:
  interval: 100ms
`
}

// TestExactlyOnceSinkAcrossRestarts runs the reference job with an
// exactly-once sink, stops it mid-stream and restarts it twice: a
// read_committed reader sees every match exactly once.
func TestExactlyOnceSinkAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cfg := exactlyOnceConfig(dir, broker, metrics, 2)
	d := startDaemon(t, dir, cfg, broker, metrics)
	cl := newClient(t, broker)
	produce(t, cl, rule("R1", "RECTANGLE", "TRIANGLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", map[string]string{"operator": "matcher"}, 2)
	colors := []string{"red", "blue", "green", "yellow"}
	var want []string
	id := 0
	round := func(d *daemon) {
		var recs []*kgo.Record
		for _, c := range colors {
			id += 2
			recs = append(recs, item(id-1, c, "RECTANGLE"), item(id, c, "TRIANGLE"))
			want = append(want, fmt.Sprintf("R1 %s %d,%d", c, id-1, id))
		}
		produce(t, cl, recs...)
	}
	for r := 0; r < 3; r++ {
		round(d)
		// Stop right away: some matches are in an open or pre-committed
		// transaction; the restart commits or replays them.
		if code := d.stop(t); code != 0 {
			t.Fatalf("exit %d", code)
		}
		d = startDaemon(t, dir, cfg, broker, metrics)
	}
	slices.Sort(want)
	var got []string
	ok := testkit.Poll(20*time.Second, func() bool {
		got = matchStrings(t, testkit.ReadTopic(t, []string{broker}, "matches", 10*time.Second))
		return len(got) >= len(want)
	})
	if !ok || !slices.Equal(got, want) {
		t.Fatalf("read_committed matches = %q, want %q", got, want)
	}
}
