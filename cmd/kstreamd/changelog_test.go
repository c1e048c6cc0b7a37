package main

import (
	"encoding/json"
	"fmt"
	"maps"
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
	"github.com/kstreamd/kstreamd/runtime"
)

// The tests in this file are issue 23's acceptance test of changelog
// streams: configs/examples/clicks_by_country.yaml counts clicks per user
// (with the user's latest country) and re-keys those counts by country to
// sum them. Users move between countries, so the second aggregate must
// retract a user's old count from their old country: without retraction
// it sums running totals (NL 9 where the truth is 5).

// countryClicks are the clicks, keyed by user (one user's clicks stay in
// order): u2 clicks in BE, then DE, then NL; u1 twice in NL; u4 once in
// DE. The truth: NL 5 (u1's 2 and u2's 3), DE 1 (u4), BE no user left.
func countryClicks() []*kgo.Record {
	var recs []*kgo.Record
	for _, c := range [][2]string{{"u2", "BE"}, {"u1", "NL"}, {"u4", "DE"}, {"u2", "DE"}, {"u1", "NL"}, {"u2", "NL"}} {
		recs = append(recs, &kgo.Record{Topic: "clicks", Key: []byte(c[0]), Value: fmt.Appendf(nil, `{"user":%q,"country":%q}`, c[0], c[1])})
	}
	return recs
}

// countryTruth computes the expected table from the clicks alone: each
// user's clicks counted in the user's last country.
func countryTruth(t *testing.T, clicks []*kgo.Record) map[string]int {
	t.Helper()
	n, last := map[string]int{}, map[string]string{}
	for _, r := range clicks {
		var c struct{ User, Country string }
		if err := json.Unmarshal(r.Value, &c); err != nil {
			t.Fatal(err)
		}
		n[c.User]++
		last[c.User] = c.Country
	}
	out := map[string]int{}
	for u, k := range n {
		out[last[u]] += k
	}
	return out
}

// clicksByCountryConfig is configs/examples/clicks_by_country.yaml on the
// broker at broker, at job parallelism p, checkpoints every 200 ms.
func clicksByCountryConfig(dir, broker, metrics string, p int) string {
	raw, err := os.ReadFile(filepath.Join("..", "..", "configs", "examples", "clicks_by_country.yaml"))
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
			panic("clicks_by_country.yaml has no line " + strconv.Quote(r[0]) + " to override")
		}
		cfg = strings.Replace(cfg, r[0], r[1], 1)
	}
	return cfg
}

// compactedView returns what a compacted topic keeps of recs: per key the
// last value, a key whose last record is a tombstone left out (and listed
// in tombstoned); each value must be {"key": <its Kafka key>, "clicks": n}.
func compactedView(t *testing.T, recs []*kgo.Record) (view map[string]int, tombstoned []string) {
	t.Helper()
	last := map[string][]byte{}
	for _, r := range recs {
		last[string(r.Key)] = r.Value
	}
	view = map[string]int{}
	for k, v := range last {
		if v == nil {
			tombstoned = append(tombstoned, k)
			continue
		}
		var row struct {
			Key    string `json:"key"`
			Clicks int    `json:"clicks"`
		}
		if err := json.Unmarshal(v, &row); err != nil || row.Key != k {
			t.Fatalf("record of key %q: %s (%v)", k, v, err)
		}
		view[k] = row.Clicks
	}
	return view, tombstoned
}

// waitCountryView waits until the read_committed country-clicks topic's
// compacted view equals want, with every key in wantGone tombstoned, and
// the view still holds after two more checkpoints (a late duplicate or
// stale upsert would show); it returns the records read last. wantGone
// nil: the tombstones are not checked (with mini_batch a key inserted and
// deleted within one batch never had a row, so it needs none).
func waitCountryView(t *testing.T, broker, url string, want map[string]int, wantGone []string, exited func() bool, log func() string) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	var view map[string]int
	var gone []string
	matches := func() bool {
		out = testkit.ReadTopic(t, []string{broker}, "country-clicks", 5*time.Second)
		view, gone = compactedView(t, out)
		return maps.Equal(view, want) && (wantGone == nil || fmt.Sprint(sortedStrings(gone)) == fmt.Sprint(sortedStrings(wantGone)))
	}
	if !testkit.Poll(30*time.Second, func() bool { return exited() || matches() }) || exited() {
		t.Fatalf("read_committed country-clicks: view %v, tombstoned %q; want %v, tombstoned %q (exited %v):\n%s", view, gone, want, wantGone, exited(), log())
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
	if !matches() {
		t.Fatalf("after two more checkpoints: view %v, tombstoned %q; want %v, tombstoned %q", view, gone, want, wantGone)
	}
	return out
}

// sortedStrings returns a sorted copy of s.
func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// TestChangelogTwoStage runs clicks_by_country.yaml in-process at job
// parallelism 1, 2 and 4: the read_committed compacted view of
// country-clicks is exactly NL 5, DE 1 (computed from the clicks by
// countryTruth, and checked against the numbers), with BE's last
// record a tombstone (its only user moved away), and stays so after two
// more checkpoints.
func TestChangelogTwoStage(t *testing.T) {
	for _, p := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("parallelism=%d", p), func(t *testing.T) {
			clicks := countryClicks()
			want := countryTruth(t, clicks)
			if !maps.Equal(want, map[string]int{"NL": 5, "DE": 1}) {
				t.Fatalf("truth %v, want NL 5 and DE 1", want)
			}
			_, broker := startKfake(t, []string{"clicks", "country-clicks"})
			dir, metrics := t.TempDir(), testkit.FreeAddr(t)
			cl := newClient(t, broker)
			d := startDaemon(t, dir, clicksByCountryConfig(dir, broker, metrics, p), broker, metrics)
			produce(t, cl, clicks...)
			waitCountryView(t, broker, d.url(), want, []string{"BE"}, d.exited, d.out.String)
			if code := d.stop(t); code != 0 {
				t.Fatalf("exit status %d, want 0:\n%s", code, d.out.String())
			}
		})
	}
}

// TestChangelogTwoStageCrashRescale: the job runs as a child process at
// parallelism 2; the first three clicks (u2 in BE, u1 in NL, u4 in DE) are
// produced and covered by a completed checkpoint; then the fourth (u2
// moves to DE, whose retraction from BE deletes it) is produced and the
// process is killed with SIGKILL at once, before or after that click's
// output was committed. It restarts at parallelism 4 on the same data
// directory (the two aggregates' state, the per-user rows the retractions
// need included, split by key group over twice the subtasks), the last two
// clicks are produced, and the read_committed view is exactly NL 5, DE 1,
// BE tombstoned. Then it is killed again and restored at parallelism 1,
// and one more click (u4 moves to NL) gives NL 7 (u4's two clicks moved
// with them), DE tombstoned.
func TestChangelogTwoStageCrashRescale(t *testing.T) {
	changelogCrashRescale(t, clicksByCountryConfig)
}

// miniBatchConfig returns clicksByCountryConfig with mini_batch of size
// on the aggregates named in ops (per_user, per_country).
func miniBatchConfig(size int, ops ...string) func(dir, broker, metrics string, p int) string {
	return miniBatchSpecConfig("size: "+strconv.Itoa(size), ops...)
}

// miniBatchSpecConfig returns clicksByCountryConfig with mini_batch: {spec}
// on the aggregates named in ops.
func miniBatchSpecConfig(spec string, ops ...string) func(dir, broker, metrics string, p int) string {
	return func(dir, broker, metrics string, p int) string {
		cfg := clicksByCountryConfig(dir, broker, metrics, p)
		for _, op := range ops {
			from := "  - name: " + op
			i := strings.Index(cfg, from)
			j := strings.Index(cfg[i:], "    params:\n")
			if i < 0 || j < 0 {
				panic("clicks_by_country.yaml has no params of " + op)
			}
			at := i + j + len("    params:\n")
			cfg = cfg[:at] + "      mini_batch: {" + spec + "}\n" + cfg[at:]
		}
		return cfg
	}
}

// TestChangelogTwoStageMiniBatch is TestChangelogTwoStage (parallelism 2)
// with mini_batch on the per-user aggregate, the per-country one and
// both, of size 2 (the size ends batches too) and 1000 (only
// checkpoints, watermarks and the end of input end them): the
// read_committed view is exactly NL 5, DE 1. BE is absent; whether it has
// a tombstone depends on where batches end (u2's BE and DE clicks in one
// batch of per_user: per_country never sees BE; its +I and -D in one batch
// of per_country: it emits nothing for BE), so it is not checked.
func TestChangelogTwoStageMiniBatch(t *testing.T) {
	for _, ops := range [][]string{{"per_user"}, {"per_country"}, {"per_user", "per_country"}} {
		for _, size := range []int{2, 1000} {
			t.Run(fmt.Sprintf("%s/size=%d", strings.Join(ops, "+"), size), func(t *testing.T) {
				clicks := countryClicks()
				_, broker := startKfake(t, []string{"clicks", "country-clicks"})
				dir, metrics := t.TempDir(), testkit.FreeAddr(t)
				cl := newClient(t, broker)
				cfg := miniBatchConfig(size, ops...)(dir, broker, metrics, 2)
				if strings.Count(cfg, "mini_batch:") != len(ops) {
					t.Fatalf("config holds %d mini_batch, want %d:\n%s", strings.Count(cfg, "mini_batch:"), len(ops), cfg)
				}
				d := startDaemon(t, dir, cfg, broker, metrics)
				produce(t, cl, clicks...)
				waitCountryView(t, broker, d.url(), map[string]int{"NL": 5, "DE": 1}, nil, d.exited, d.out.String)
				if code := d.stop(t); code != 0 {
					t.Fatalf("exit status %d, want 0:\n%s", code, d.out.String())
				}
			})
		}
	}
}

// TestChangelogTwoStageCrashRescaleMiniBatch is
// TestChangelogTwoStageCrashRescale with mini_batch (size 1000: batches
// end at checkpoint barriers and watermarks) on both aggregates: kill -9
// with records buffered or just emitted, restores at parallelism 4 and 1;
// the read_committed view is exact each time.
func TestChangelogTwoStageCrashRescaleMiniBatch(t *testing.T) {
	changelogCrashRescale(t, miniBatchConfig(1000, "per_user", "per_country"))
}

// TestChangelogTwoStageCrashRescaleMiniBatchLatency is
// TestChangelogTwoStageCrashRescaleMiniBatch with allow_latency on both
// aggregates: 5ms (batches end by the wall clock, from the task's
// mailbox, between and across checkpoints, watermarks held meanwhile)
// and 1h (only barriers and end of input end them; every watermark is
// held to the next barrier). kill -9 with batches open and watermarks
// held, restores at parallelism 4 and 1: the read_committed view is
// exactly NL 5, DE 1, then NL 7.
func TestChangelogTwoStageCrashRescaleMiniBatchLatency(t *testing.T) {
	for _, latency := range []string{"5ms", "1h"} {
		t.Run("allow_latency="+latency, func(t *testing.T) {
			changelogCrashRescale(t, miniBatchSpecConfig("size: 1000, allow_latency: "+latency, "per_user", "per_country"))
		})
	}
}

// changelogCrashRescale is TestChangelogTwoStageCrashRescale's run with
// the config config.
func changelogCrashRescale(t *testing.T, config func(dir, broker, metrics string, p int) string) {
	clicks := countryClicks()
	_, broker := startKfake(t, []string{"clicks", "country-clicks"})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cl := newClient(t, broker)
	adm := kadm.NewClient(cl)

	d := startProc(t, dir, config(dir, broker, metrics, 2), broker, metrics)
	produce(t, cl, clicks[:3]...)
	waitGroupAt(t, adm, "kstreamd-clicks-by-country", "clicks", topicEnds(t, adm, "clicks", 3), 30*time.Second, d)
	produce(t, cl, clicks[3])
	last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	d.kill(t)

	restart := func(p int, last float64) *proc {
		t.Helper()
		d := startProc(t, dir, config(dir, broker, metrics, p), broker, metrics)
		lines := restoreLines(d.out.String())
		var id float64
		if len(lines) == 1 {
			id, _ = strconv.ParseFloat(logField(lines[0], "checkpoint_id"), 64)
		}
		if id < last || last < 1 {
			t.Fatalf("restart at parallelism %d: \"restoring\" lines %q, want one restoring checkpoint %v or later", p, lines, last)
		}
		return d
	}
	d = restart(4, last)
	produce(t, cl, clicks[4:]...)
	want := countryTruth(t, clicks)
	if !maps.Equal(want, map[string]int{"NL": 5, "DE": 1}) {
		t.Fatalf("truth %v, want NL 5 and DE 1", want)
	}
	waitCountryView(t, broker, d.url(), want, []string{"BE"}, d.exited, d.out.String)
	waitGroupAt(t, adm, "kstreamd-clicks-by-country", "clicks", topicEnds(t, adm, "clicks", int64(len(clicks))), 30*time.Second, d)
	last, _ = testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	d.kill(t)

	d = restart(1, last)
	more := append(clicks, &kgo.Record{Topic: "clicks", Key: []byte("u4"), Value: []byte(`{"user":"u4","country":"NL"}`)})
	produce(t, cl, more[len(clicks)])
	want = countryTruth(t, more)
	if !maps.Equal(want, map[string]int{"NL": 7}) {
		t.Fatalf("truth %v, want NL 7", want)
	}
	waitCountryView(t, broker, d.url(), want, []string{"BE", "DE"}, d.exited, d.out.String)
}

// clusterChangelogPipeline is clicks_by_country's pipeline for a
// cluster-mode test (clusterJob.Pipeline): three stages (the source, the
// per-user aggregate, the per-country aggregate and the sink), joined by
// two repartition topics.
const clusterChangelogPipeline = `sources:
  - name: clicks
    topic: clicks
operators:
  - name: per_user
    type: aggregate
    input: clicks
    key_by: user
    params:
      aggregates: [{name: clicks, fn: count}, {name: country, fn: last, of: country}]
  - name: per_country
    type: aggregate
    input: per_user
    key_by: country
    params:
      aggregates: [{name: clicks, fn: sum, of: clicks}]
sinks:
  - name: country-clicks
    input: per_country
    topic: country-clicks
    delivery: exactly-once
    transaction_timeout: 2m
`

// TestClusterChangelog runs the changelog job in cluster mode on two
// daemons (2 units per stage): the per-user changelog crosses the
// repartition topic clicks-2-repartition to the per-country units, each
// record's kind in its kstreamd-change header (read_committed there: 3
// +I, 3 -U, 3 +U for the six clicks of three users), and the compacted
// view of country-clicks is exactly NL 5, DE 1, BE tombstoned. Daemon a is
// then killed with SIGKILL, b takes its units over (restoring their
// state), and one more click (u4 moves to NL) gives NL 7, DE tombstoned.
func TestClusterChangelog(t *testing.T) {
	t.Parallel()
	tb := startTestBroker(t, map[string]int{"clicks": 4, "country-clicks": 4})
	c := newCluster(t, clusterJob{Units: 2, Pipeline: clusterChangelogPipeline, Output: "country-clicks"}, tb.addr)
	a, b := c.start("a"), c.start("b")
	cl := newClient(t, tb.addr)
	clicks := countryClicks()
	produce(t, cl, clicks...)
	exited := func() bool { return a.exited() || b.exited() }
	waitCountryView(t, tb.addr, b.url(), map[string]int{"NL": 5, "DE": 1}, []string{"BE"}, exited, c.logs)

	kinds := map[string]int{}
	recs, err := testkit.TryReadTopic([]kgo.Opt{kgo.SeedBrokers(tb.addr)}, kgo.ReadCommitted(), "clicks-2-repartition", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range testkit.WithoutMarkers(recs) {
		k := "none"
		for _, h := range r.Headers {
			if h.Key == "kstreamd-change" {
				k = string(h.Value)
			}
		}
		kinds[k]++
	}
	if want := map[string]int{"+I": 3, "-U": 3, "+U": 3}; !maps.Equal(kinds, want) {
		t.Fatalf("clicks-2-repartition holds kinds %v, want %v", kinds, want)
	}

	c.kill("a")
	produce(t, cl, &kgo.Record{Topic: "clicks", Key: []byte("u4"), Value: []byte(`{"user":"u4","country":"NL"}`)})
	waitCountryView(t, tb.addr, b.url(), map[string]int{"NL": 7}, []string{"BE", "DE"}, b.exited, c.logs)
}

// TestExampleTopBids runs configs/examples/top_bids.yaml (top 3 bids per
// auction and 1-minute window, Nexmark q19) on 400 bids of 5 auctions over
// 4 minutes with pseudo-random prices (ties included): the compacted view
// of the read_committed top-bids topic (per key the last row) equals the
// final ranking computed here independently (per auction and window the
// bids sorted by price, highest first, equal prices in arrival order, the
// first 3), row for row.
func TestExampleTopBids(t *testing.T) {
	t.Parallel()
	_, broker := startKfake(t, []string{"bids", "top-bids"})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	d := startDaemon(t, dir, exampleConfig(t, "top_bids.yaml", dir, broker, metrics), broker, metrics)
	const t0 = int64(1_699_999_980_000) // a minute boundary
	type bidRow struct {
		auction string
		price   int
		value   string
	}
	var recs []*kgo.Record
	perWindow := map[string][]bidRow{} // "<auction>@<start>" -> bids in arrival order
	seed := uint32(7)
	for i := range 400 {
		seed = seed*1664525 + 1013904223
		auction := fmt.Sprintf("a%d", i%5)
		price := int(seed>>16) % 50
		ts := t0 + int64(i)*600 // 400 bids over 240 s: 4 windows
		v := fmt.Sprintf(`{"auction":%q,"bidder":"b%d","price":%d,"ts":%d}`, auction, i, price, ts)
		recs = append(recs, &kgo.Record{Topic: "bids", Key: []byte(auction), Value: []byte(v)})
		start := ts - ts%60000
		k := fmt.Sprintf("%s@%d", auction, start)
		perWindow[k] = append(perWindow[k], bidRow{auction, price, v})
	}
	want := map[string]string{}
	for k, bids := range perWindow {
		slices.SortStableFunc(bids, func(a, b bidRow) int { return b.price - a.price })
		auction, startText, _ := strings.Cut(k, "@")
		start, _ := strconv.ParseInt(startText, 10, 64)
		for r := range min(3, len(bids)) {
			want[fmt.Sprintf("%s#%d", k, r+1)] = fmt.Sprintf(`{"key":%q,"rank":%d,"window_start":%d,"window_end":%d,"row":%s}`,
				auction, r+1, start, start+60000, bids[r].value)
		}
	}
	if len(want) != 5*4*3 {
		t.Fatalf("expected table has %d rows, want 60", len(want))
	}
	produce(t, newClient(t, broker), recs...)
	var view map[string]string
	read := func() {
		view = map[string]string{}
		for _, r := range testkit.ReadTopic(t, []string{broker}, "top-bids", 5*time.Second) {
			view[string(r.Key)] = string(r.Value)
			if r.Value == nil {
				delete(view, string(r.Key))
			}
		}
	}
	if !testkit.Poll(30*time.Second, func() bool { read(); return maps.Equal(view, want) }) {
		for k, v := range want {
			if view[k] != v {
				t.Errorf("%s: %s, want %s", k, view[k], v)
			}
		}
		t.Fatalf("compacted view has %d rows, want %d:\n%s", len(view), len(want), d.out.String())
	}
	last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	waitCheckpointAfter(t, d, last+1)
	if read(); !maps.Equal(view, want) {
		t.Fatalf("after two more checkpoints the view changed: %d rows", len(view))
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}

// upsertHeaderConfig is a job that writes the users table (a compacted
// topic read with table: true) through a changelog: header sink to topic
// users-h and reads users-h back with sources[].changelog: mode, counting
// users per country with ops (operators reading source "back"; the
// counting one is named per_country), checkpoints every 200 ms, no
// restart after a failure.
func upsertHeaderConfig(dir, broker, metrics, mode, ops string) string {
	return jobHead("users-by-country", 2, dir, brokersKafka(broker), metrics, "info") + `checkpoints:
  interval: 200ms
restart:
  strategy: none
sources:
  - name: users
    topic: users
    table: true
  - name: back
    topic: users-h
    changelog: ` + mode + `
operators:
` + ops + `sinks:
  - {name: users-h, input: users, topic: users-h, changelog: header, delivery: exactly-once, transaction_timeout: 1m}
  - {name: country-counts, input: per_country, topic: country-counts, delivery: exactly-once, transaction_timeout: 1m}
`
}

// TestUpsertHeaderTable: a table's upserts written by a changelog: header
// sink are an upsert changelog (+U without the -U of the row each
// replaces, -D with a null value). The users u1 NL, u2 NL, u1 DE, u3 DE,
// u2 deleted leave DE 2 and no user in NL; read back as a full changelog
// (changelog: header) an aggregate counted every upsert without
// retracting (NL 2, DE 2: u1 twice). Now the header sink marks each
// record (kstreamd-changelog: upsert, checked on the topic), the
// changelog: header job fails naming upsert_header instead of counting,
// and read with changelog: upsert_header through changelog_normalize the
// read_committed compacted view is exactly DE 2 with NL tombstoned.
func TestUpsertHeaderTable(t *testing.T) {
	t.Parallel()
	users := func() []*kgo.Record { // fresh records per broker: a produced record keeps its client's context
		return []*kgo.Record{
			{Topic: "users", Key: []byte("u1"), Value: []byte(`{"country":"NL"}`)},
			{Topic: "users", Key: []byte("u2"), Value: []byte(`{"country":"NL"}`)},
			{Topic: "users", Key: []byte("u1"), Value: []byte(`{"country":"DE"}`)},
			{Topic: "users", Key: []byte("u3"), Value: []byte(`{"country":"DE"}`)},
			{Topic: "users", Key: []byte("u2")},
		}
	}
	count := `  - name: per_country
    type: aggregate
    input: %s
    key_by: country
    params:
      aggregates: [{name: users, fn: count}]
`
	t.Run("header", func(t *testing.T) {
		_, broker := startKfake(t, []string{"users", "users-h", "country-counts"})
		dir, metrics := t.TempDir(), testkit.FreeAddr(t)
		d := startDaemon(t, dir, upsertHeaderConfig(dir, broker, metrics, "header", fmt.Sprintf(count, "back")), broker, metrics)
		produce(t, newClient(t, broker), users()...)
		if !testkit.Poll(20*time.Second, d.exited) {
			var view []string
			for _, r := range testkit.ReadTopic(t, []string{broker}, "country-counts", 5*time.Second) {
				view = append(view, string(r.Key)+" "+string(r.Value))
			}
			t.Fatalf("the job runs, counting upserts as updates (country-counts: %q); want it to fail on the upsert changelog", view)
		}
		if code := d.waitExit(t, time.Second); code == 0 {
			t.Fatalf("exit status 0, want the job to fail on the upsert changelog:\n%s", d.out.String())
		}
		if log := d.out.String(); !strings.Contains(log, "is an upsert changelog's") || !strings.Contains(log, "read it with changelog: upsert_header") {
			t.Fatalf("log does not name the upsert changelog and upsert_header:\n%s", log)
		}
		for _, r := range testkit.ReadTopic(t, []string{broker}, "country-counts", 5*time.Second) {
			t.Errorf("country-counts has %s = %s, want nothing committed", r.Key, r.Value)
		}
	})
	t.Run("upsert_header", func(t *testing.T) {
		_, broker := startKfake(t, []string{"users", "users-h", "country-counts"})
		dir, metrics := t.TempDir(), testkit.FreeAddr(t)
		ops := "  - {name: normalized, type: changelog_normalize, input: back, key_by: key}\n" + fmt.Sprintf(count, "normalized")
		d := startDaemon(t, dir, upsertHeaderConfig(dir, broker, metrics, "upsert_header", ops), broker, metrics)
		produce(t, newClient(t, broker), users()...)
		var view map[string]string
		var gone []string
		if !testkit.Poll(30*time.Second, func() bool {
			view, gone = map[string]string{}, nil
			for _, r := range testkit.ReadTopic(t, []string{broker}, "country-counts", 5*time.Second) {
				view[string(r.Key)] = string(r.Value)
			}
			for k, v := range view {
				if v == "" {
					delete(view, k)
					gone = append(gone, k)
				}
			}
			return d.exited() || (maps.Equal(view, map[string]string{"DE": `{"key":"DE","users":2}`}) && slices.Equal(gone, []string{"NL"}))
		}) || d.exited() {
			t.Fatalf("read_committed country-counts: view %v, tombstoned %q; want DE 2, NL tombstoned (exited %v)", view, gone, d.exited())
		}
		written := testkit.ReadTopic(t, []string{broker}, "users-h", 5*time.Second)
		if len(written) != len(users()) {
			t.Fatalf("users-h holds %d records, want %d", len(written), len(users()))
		}
		for _, r := range written {
			marks := 0
			for _, h := range r.Headers {
				if h.Key == runtime.ChangelogModeHeader && string(h.Value) == runtime.UpsertChangelogMode {
					marks++
				}
			}
			if marks != 1 {
				t.Errorf("users-h record %s: headers %v, want one %s: %s", r.Key, r.Headers, runtime.ChangelogModeHeader, runtime.UpsertChangelogMode)
			}
		}
		if code := d.stop(t); code != 0 {
			t.Fatalf("exit status %d, want 0", code)
		}
	})
}
