package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// The tests in this file are issue 9's acceptance test of a two-stage,
// re-keyed pipeline: clicks {"user": "u<k>"} are counted per user
// (keyed_count by user, emitting {"key": "u<k>", "count": n}), and those
// counts are re-keyed by their count and counted again (keyed_count by
// count): per count value c, how many users reached c clicks. The
// exactly-once sink writes the second stage, so the read_committed output
// holds, for each c, the pairs (c, 1) ... (c, N_c) exactly once, N_c being
// the number of users with at least c clicks, whatever the order in which
// the users' counts reach the second stage.

const (
	twoStageUsers = 60 // user u<k> clicks k times, k in 1..60: 1830 clicks
	twoStageGroup = "kstreamd-twostage"
)

// twoStageConfig is the two-stage job on the broker at broker, at job
// parallelism p, checkpoints every 200 ms, Pebble state.
func twoStageConfig(dir, broker, metrics string, p int) string {
	raw, err := os.ReadFile(filepath.Join("..", "..", "configs", "examples", "two_stage.yaml"))
	if err != nil {
		panic(err)
	}
	cfg := string(raw)
	for _, r := range [][2]string{
		{"  parallelism: 2 ", "  parallelism: " + strconv.Itoa(p) + " "},
		{"\ndata_dir: ./data ", "\ndata_dir: " + dir + " "},
		{"  # brokers: [kafka-1:9092]", "  brokers: [" + broker + "] #"},
		{"    enabled: true\n", "    enabled: false\n"},
		{"  address: 127.0.0.1:9249", "  address: " + metrics},
		{"  interval: 1s ", "  interval: 200ms "},
	} {
		if !strings.Contains(cfg, r[0]) {
			panic("two_stage.yaml has no line " + strconv.Quote(r[0]) + " to override")
		}
		cfg = strings.Replace(cfg, r[0], r[1], 1)
	}
	return cfg
}

// twoStageClicks returns the clicks in rounds: round r has one click of
// every user with at least r clicks, so the users' counts interleave.
func twoStageClicks() []*kgo.Record {
	var recs []*kgo.Record
	for r := 1; r <= twoStageUsers; r++ {
		for k := r; k <= twoStageUsers; k++ {
			u := fmt.Sprintf("u%d", k)
			recs = append(recs, &kgo.Record{Topic: "clicks", Key: []byte(u), Value: fmt.Appendf(nil, `{"user":%q}`, u)})
		}
	}
	return recs
}

// twoStageExpected computes the expected second-stage output from the
// clicks alone: the clicks per user, then for each count value c the
// number N_c of users with at least c clicks; the pairs are "c n" for n in
// 1..N_c, sorted, and final maps c to N_c.
func twoStageExpected(t *testing.T, clicks []*kgo.Record) (pairs []string, final map[string]int) {
	t.Helper()
	perUser := map[string]int{}
	for _, r := range clicks {
		var c struct{ User string }
		if err := json.Unmarshal(r.Value, &c); err != nil {
			t.Fatal(err)
		}
		perUser[c.User]++
	}
	final = map[string]int{}
	for _, n := range perUser {
		for c := 1; c <= n; c++ {
			final[strconv.Itoa(c)]++
		}
	}
	for c, n := range final {
		for i := 1; i <= n; i++ {
			pairs = append(pairs, fmt.Sprintf("%s %d", c, i))
		}
	}
	slices.Sort(pairs)
	return pairs, final
}

// checkTwoStage compares the read_committed second-stage output with the
// expectation: no (key, count) pair twice, none missing, none unexpected,
// and per count value the highest count equal to N_c.
func checkTwoStage(t *testing.T, out []*kgo.Record, pairs []string, final map[string]int) {
	t.Helper()
	seen := map[string]int{}
	highest := map[string]int{}
	for _, r := range out {
		var v struct {
			Key   string `json:"key"`
			Count int    `json:"count"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("reached record %q: %v", r.Value, err)
		}
		if string(r.Key) != v.Key {
			t.Errorf("reached record %s has Kafka key %q", r.Value, r.Key)
		}
		seen[fmt.Sprintf("%s %d", v.Key, v.Count)]++
		highest[v.Key] = max(highest[v.Key], v.Count)
	}
	var dups, missing, extra []string
	for p, n := range seen {
		if n > 1 {
			dups = append(dups, fmt.Sprintf("%s (x%d)", p, n))
		}
		if _, ok := slices.BinarySearch(pairs, p); !ok {
			extra = append(extra, p)
		}
	}
	for _, p := range pairs {
		if seen[p] == 0 {
			missing = append(missing, p)
		}
	}
	slices.Sort(dups)
	slices.Sort(missing)
	slices.Sort(extra)
	if len(dups)+len(missing)+len(extra) > 0 {
		t.Errorf("%d records read, %d expected; twice: %q; missing: %q; unexpected: %q",
			len(out), len(pairs), head(dups), head(missing), head(extra))
	}
	for c, n := range final {
		if highest[c] != n {
			t.Errorf("count %s: highest second-stage count %d, want %d users", c, highest[c], n)
		}
	}
	if len(highest) != len(final) {
		t.Errorf("%d count values in the output, want %d", len(highest), len(final))
	}
}

// head returns at most the first 10 of s.
func head(s []string) []string { return s[:min(len(s), 10)] }

// waitTwoStage waits until a completed checkpoint covers every click (the
// monitoring group's offsets reach the clicks' end offsets ends), then
// until the read_committed output holds want records, and returns it read
// once more after two further checkpoints (so that a late duplicate would
// show). url is the daemon's /metrics, exited reports whether it stopped,
// log returns its log.
func waitTwoStage(t *testing.T, adm *kadm.Client, broker, url string, ends map[int32]int64, want int, exited func() bool, log func() string) []*kgo.Record {
	t.Helper()
	var committed map[int32]int64
	if !testkit.Poll(30*time.Second, func() bool {
		if exited() {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if committed, err = groupOffsets(ctx, adm, twoStageGroup, "clicks"); err != nil {
			return false
		}
		for p, o := range ends {
			if committed[p] != o {
				return false
			}
		}
		return true
	}) || exited() {
		t.Fatalf("group %s committed %v, want the end offsets %v (exited: %v):\n%s", twoStageGroup, committed, ends, exited(), log())
	}
	var out []*kgo.Record
	if !testkit.Poll(15*time.Second, func() bool {
		out = testkit.ReadTopic(t, []string{broker}, "reached", 10*time.Second)
		return len(out) >= want
	}) {
		t.Fatalf("read_committed reached holds %d records, want %d:\n%s", len(out), want, log())
	}
	last, err := testkit.Scrape(url, "kstreamd_checkpoint_last_completed_id", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !testkit.Poll(10*time.Second, func() bool {
		v, err := testkit.Scrape(url, "kstreamd_checkpoint_last_completed_id", nil)
		return err == nil && v >= last+2
	}) {
		t.Fatalf("no two checkpoints after %v:\n%s", last, log())
	}
	return testkit.ReadTopic(t, []string{broker}, "reached", 10*time.Second)
}

// TestTwoStageRekeyed runs the two-stage job in-process at job parallelism
// 1, 2 and 4 on all the clicks and checks the exact read_committed output.
func TestTwoStageRekeyed(t *testing.T) {
	for _, p := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("parallelism=%d", p), func(t *testing.T) {
			clicks := twoStageClicks() // fresh records: producing sets their fields
			pairs, final := twoStageExpected(t, clicks)
			_, broker := startKfake(t, []string{"clicks", "reached"})
			dir, metrics := t.TempDir(), testkit.FreeAddr(t)
			cl := newClient(t, broker)
			adm := kadm.NewClient(cl)
			d := startDaemon(t, dir, twoStageConfig(dir, broker, metrics, p), broker, metrics)
			produce(t, cl, clicks...)
			ends := topicEnds(t, adm, "clicks", int64(len(clicks)))
			out := waitTwoStage(t, adm, broker, d.url(), ends, len(pairs), d.exited, d.out.String)
			checkTwoStage(t, out, pairs, final)
			if code := d.stop(t); code != 0 {
				t.Fatalf("exit status %d, want 0:\n%s", code, d.out.String())
			}
		})
	}
}

// TestTwoStageCrashRescale: the two-stage job runs as a child process at
// parallelism 2 while the first half of the clicks is produced, is killed
// with SIGKILL once checkpoints completed and part of the half was read,
// and is restarted at parallelism 4 on the same data directory (restoring
// the latest checkpoint, its keyed state split by key group over twice the
// subtasks); the second half is produced then. The read_committed output
// is exactly what the clicks imply: nothing missing, nothing twice.
func TestTwoStageCrashRescale(t *testing.T) {
	start := time.Now()
	clicks := twoStageClicks()
	pairs, final := twoStageExpected(t, clicks)
	half := len(clicks) / 2

	_, broker := startKfake(t, []string{"clicks", "reached"})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cl := newClient(t, broker)
	adm := kadm.NewClient(cl)

	d := startProc(t, dir, twoStageConfig(dir, broker, metrics, 2), broker, metrics)
	const batch = 15 // half = 915 = 61 batches, one each 30 ms: about 1.8 s
	prod := producePaced(t, cl, half, batch, 30*time.Millisecond, func(i, j int) []*kgo.Record { return clicks[i:j] })
	in := map[string]string{"operator": "per_user"}
	completed := map[string]string{"kind": "checkpoint", "result": "completed"}
	var read, chk float64
	if !testkit.Poll(20*time.Second, func() bool {
		if d.exited() {
			return true
		}
		var err1, err2 error
		read, err1 = testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", in)
		chk, err2 = testkit.Scrape(d.url(), "kstreamd_checkpoints_total", completed)
		return err1 == nil && err2 == nil && read >= 300 && chk >= 2
	}) || d.exited() {
		t.Fatalf("before the kill: read %v clicks (want >= 300), %v checkpoints completed (want >= 2), exited %v:\n%s",
			read, chk, d.exited(), d.out.String())
	}
	last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	d.kill(t)
	t.Logf("killed at %v: %v clicks read, %v checkpoints completed (last id %v), %d of %d produced",
		time.Since(start).Round(time.Millisecond), read, chk, last, prod.produced.Load(), half)
	prod.wait(t, 20*time.Second)

	d = startProc(t, dir, twoStageConfig(dir, broker, metrics, 4), broker, metrics)
	lines := restoreLines(d.out.String())
	var id float64
	if len(lines) == 1 {
		id, _ = strconv.ParseFloat(logField(lines[0], "checkpoint_id"), 64)
	}
	if id < last || last < 1 {
		t.Fatalf("restart: \"restoring\" lines %q, want one restoring checkpoint %v or later", lines, last)
	}
	produce(t, cl, clicks[half:]...)
	ends := topicEnds(t, adm, "clicks", int64(len(clicks)))
	out := waitTwoStage(t, adm, broker, d.url(), ends, len(pairs), d.exited, d.out.String)
	checkTwoStage(t, out, pairs, final)
	if n := len(readUncommitted(t, broker, "reached")); n > len(out) {
		t.Logf("%d records of aborted transactions (the killed run's open epochs) left out by read_committed", n-len(out))
	}
	t.Logf("restored checkpoint %v at parallelism 4; %d records read back exactly; finished in %v",
		id, len(out), time.Since(start).Round(time.Millisecond))
}
