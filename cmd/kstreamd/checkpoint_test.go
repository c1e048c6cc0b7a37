package main

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// TestCheckpointRestoreAndRescale runs the reference job with checkpoints,
// stops it after a checkpoint that covers every record, and restarts it at
// another parallelism: rules (broadcast state), stored items (keyed state)
// and offsets (operator state) come back, so an item produced after the
// restart completes a pair begun before it, and nothing is read twice.
func TestCheckpointRestoreAndRescale(t *testing.T) {
	for _, backend := range []string{"pebble", "hashmap"} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
			d := startDaemon(t, dir, checkpointedConfig(dir, broker, metrics, 2, backend), broker, metrics)
			cl := newClient(t, broker)
			produce(t, cl, rule("R1", "RECTANGLE", "TRIANGLE"), rule("R2", "CIRCLE", "CIRCLE"))
			testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", map[string]string{"operator": "matcher"}, 4)
			var items []*kgo.Record
			colors := []string{"red", "blue", "green", "yellow", "black", "white"}
			for i, c := range colors {
				items = append(items, item(i+1, c, "RECTANGLE"))
			}
			items = append(items, item(100, "red", "CIRCLE"))
			produce(t, cl, items...)
			testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_in_total", map[string]string{"operator": "matcher"}, float64(len(items)+2*2))
			last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
			waitCheckpointAfter(t, d, last)
			if code := d.stop(t); code != 0 {
				t.Fatalf("exit %d", code)
			}

			for _, p := range []int{3, 1, 4} {
				d = startDaemon(t, dir, checkpointedConfig(dir, broker, metrics, p, backend), broker, metrics)
				testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", map[string]string{"operator": "matcher"}, float64(2*p))
				if p == 4 {
					var more []*kgo.Record
					for i, c := range colors {
						more = append(more, item(200+i, c, "TRIANGLE"))
					}
					more = append(more, item(300, "red", "CIRCLE"))
					produce(t, cl, more...)
					testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "matches"}, float64(len(colors)+1))
				}
				last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
				waitCheckpointAfter(t, d, last)
				if in, _ := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", map[string]string{"operator": "items"}); p != 4 && in != 0 {
					t.Fatalf("parallelism %d re-read %v items: offsets not restored", p, in)
				}
				if p == 4 {
					break // keep the last daemon (and its embedded broker) up to read the output
				}
				if code := d.stop(t); code != 0 {
					t.Fatalf("exit %d", code)
				}
			}
			got := matchStrings(t, testkit.ReadTopic(t, []string{broker}, "matches", 10*time.Second))
			var want []string
			for i, c := range colors {
				want = append(want, fmt.Sprintf("R1 %s %d,%d", c, i+1, 200+i))
			}
			want = append(want, "R2 red 100,300")
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("matches after restores at 3, 1, 4 = %q, want %q", got, want)
			}
		})
	}
}
