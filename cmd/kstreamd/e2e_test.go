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

// TestReferenceJobEndToEnd is issue 2's acceptance scenario on the embedded
// broker at parallelism 1, 2 and 4.
func TestReferenceJobEndToEnd(t *testing.T) {
	for _, p := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("parallelism=%d", p), func(t *testing.T) {
			dir := t.TempDir()
			broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
			d := startDaemon(t, dir, referenceConfig(dir, broker, metrics, p), broker, metrics)
			cl := newClient(t, broker)
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
