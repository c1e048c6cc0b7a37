package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// The tests in this file run the real kstreamd binary as a child process, as
// a user would, and talk to its embedded broker with Debian's kcat.

// requireKcat fails the test (never skips it) when kcat is missing.
func requireKcat(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Fatalf("kcat is not on PATH (%v): this test drives the daemon with Debian's kcat as an outside client; "+
			"`scripts/test` installs it, or run `sudo apt-get install kcat`", err)
	}
}

// kcat runs kcat with args and stdin, bounded by 20 s, and returns stdout.
func kcat(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kcat", args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat %s: %v\nstdin:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdin, stderr.String())
	}
	return stdout.String()
}

// kcatProduce writes lines (KEY|VALUE each) to topic; a line "KEY|" is a
// null value (a tombstone).
func kcatProduce(t *testing.T, broker, topic string, lines ...string) {
	t.Helper()
	kcat(t, strings.Join(lines, "\n")+"\n", "-P", "-b", broker, "-t", topic, "-K", "|", "-Z")
}

// kcatMatches reads the whole matches topic with kcat and renders it as
// matchStrings does.
func kcatMatches(t *testing.T, broker string) []string {
	t.Helper()
	out := kcat(t, "", "-C", "-b", broker, "-t", "matches", "-o", "beginning", "-e", "-q", "-f", "%k\t%s\n")
	var recs []*kgo.Record
	for line := range strings.Lines(out) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("kcat output line %q has no key/value tab", line)
		}
		recs = append(recs, &kgo.Record{Key: []byte(k), Value: []byte(v)})
	}
	return matchStrings(t, recs)
}

func processItem(id int, color, shape string) string {
	return fmt.Sprintf(`%s|{"id":%d,"color":%q,"shape":%q}`, color, id, color, shape)
}

func processRule(name, first, second string) string {
	return fmt.Sprintf(`%s|{"name":%q,"first":%q,"second":%q}`, name, name, first, second)
}

// TestProcessKcatOutsideClient is issue 2's acceptance scenario driven from
// outside: the built binary with its embedded broker, rules and items
// produced with kcat, matches read back with kcat.
func TestProcessKcatOutsideClient(t *testing.T) {
	t.Parallel()
	requireKcat(t)
	const p = 2
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	d := startProc(t, dir, referenceConfig(dir, broker, metrics, p), broker, metrics)
	matcher := map[string]string{"operator": "matcher"}
	sink := map[string]string{"operator": "matches"}

	kcatProduce(t, broker, "rules", processRule("R1", "RECTANGLE", "TRIANGLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", matcher, 1*p)
	kcatProduce(t, broker, "items",
		processItem(1, "blue", "RECTANGLE"), processItem(2, "red", "RECTANGLE"), processItem(3, "blue", "TRIANGLE"),
		processItem(4, "red", "CIRCLE"), processItem(5, "red", "TRIANGLE"), processItem(6, "blue", "TRIANGLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_in_total", matcher, 6+1*p)
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_out_total", sink, 2)
	if got, want := kcatMatches(t, broker), []string{"R1 blue 1,3", "R1 red 2,5"}; !slices.Equal(got, want) {
		t.Fatalf("phase 1 matches read with kcat = %q, want %q", got, want)
	}

	kcatProduce(t, broker, "rules", processRule("R2", "CIRCLE", "CIRCLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", matcher, 2*p)
	kcatProduce(t, broker, "rules", "R1|") // -Z: an empty value is a null value, which deletes R1
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", matcher, 1*p)
	kcatProduce(t, broker, "items",
		processItem(7, "green", "CIRCLE"), processItem(8, "green", "CIRCLE"), processItem(9, "green", "CIRCLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_in_total", matcher, 9+3*p)
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_out_total", sink, 4)
	want := []string{"R1 blue 1,3", "R1 red 2,5", "R2 green 7,8", "R2 green 8,9"}
	if got := kcatMatches(t, broker); !slices.Equal(got, want) {
		t.Fatalf("all matches read with kcat = %q, want %q", got, want)
	}

	if code, _ := d.terminate(t, 10*time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0:\n%s", code, d.out.String())
	}
}

// TestProcessSIGTERMWhileRecordsFlow stops the binary with SIGTERM while the
// demo producer writes 500 items a second: it must exit 0 within 10 s, say
// so in the log, and close every Pebble instance so that it reopens.
func TestProcessSIGTERMWhileRecordsFlow(t *testing.T) {
	t.Parallel()
	const p = 2
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cfg := referenceConfig(dir, broker, metrics, p) + `demo:
  enabled: true
  items_topic: items
  rules_topic: rules
  items_per_second: 500
`
	d := startProc(t, dir, cfg, broker, metrics)
	items := map[string]string{"operator": "items"}
	if !testkit.Poll(20*time.Second, func() bool {
		v, err := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", items)
		return err == nil && v >= 500
	}) {
		t.Fatalf("items source read %v records after 20s, want >= 500:\n%s",
			d.scrape(t, "kstreamd_operator_records_in_total", items), d.out.String())
	}
	// Records are flowing right now: the count grows within a second, and the
	// matcher has written matches.
	before := d.scrape(t, "kstreamd_operator_records_in_total", items)
	if !testkit.Poll(time.Second, func() bool {
		v, err := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", items)
		return err == nil && v > before
	}) {
		t.Fatalf("records stopped flowing before SIGTERM (items read: %v)", before)
	}
	if out := d.scrape(t, "kstreamd_operator_records_out_total", map[string]string{"operator": "matches"}); out == 0 {
		t.Fatalf("no matches written before SIGTERM:\n%s", d.out.String())
	}

	code, took := d.terminate(t, 10*time.Second)
	log := d.out.String()
	if code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0:\n%s", code, log)
	}
	t.Logf("exited %v after SIGTERM", took)
	if !strings.Contains(log, "job stopped cleanly") {
		t.Errorf("log lacks \"job stopped cleanly\"")
	}
	for _, bad := range []string{"level=ERROR", "job failed"} {
		if strings.Contains(log, bad) {
			t.Errorf("log contains %q", bad)
		}
	}
	if n := strings.Count(log, `msg="keyed state backend opened"`); n != p {
		t.Errorf("%d state backends opened, want %d", n, p)
	}
	if n := strings.Count(log, `msg="keyed state backend closed"`); n != p {
		t.Errorf("%d state backends closed, want %d", n, p)
	}
	if t.Failed() {
		t.FailNow()
	}

	// Each subtask's Pebble DB was closed cleanly: it reopens, restoring the
	// state the matcher registered.
	maxP := keygroup.DefaultMaxParallelism(p)
	for sub := range p {
		dbDir := filepath.Join(dir, "state", "colorshape", "matcher", fmt.Sprintf("subtask-%d", sub))
		if _, err := os.Stat(dbDir); err != nil {
			t.Fatalf("pebble dir of subtask %d: %v", sub, err)
		}
		var buf bytes.Buffer
		b, err := state.OpenBackend(state.BackendConfig{
			Kind: state.KindPebble, Dir: dbDir, MaxParallelism: maxP,
			KeyGroupRange: keygroup.RangeFor(maxP, p, sub),
			Logger:        slog.New(slog.NewTextHandler(&buf, nil)),
		})
		if err != nil {
			t.Fatalf("reopen pebble of subtask %d: %v", sub, err)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("close reopened pebble of subtask %d: %v", sub, err)
		}
		if !strings.Contains(buf.String(), "restored=true") || strings.Contains(buf.String(), "states=0") {
			t.Errorf("reopened pebble of subtask %d holds no matcher state: %s", sub, buf.String())
		}
	}
}

// processBaseConfig is a valid pipeline whose line numbers the config error
// cases below refer to.
const processBaseConfig = `job:
  name: colorshape
  parallelism: 2
kafka:
  embedded:
    enabled: true
sources:
  - name: items
    topic: items
  - name: rules
    topic: rules
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
`

// TestProcessConfigErrors runs `kstreamd validate` and `kstreamd run` on bad
// files: both exit 2 and name the file, line, column and field.
func TestProcessConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := []struct {
		name, old, new string
		// prefix follows the file name in the first line of stderr.
		prefix string
	}{
		{"unknown field", "    key_by: color\n", "    key_by: color\n    keyby: color\n",
			":17:5: operators[0].keyby: unknown field"},
		{"missing topic", "    topic: rules\n", "",
			":10:5: sources[1].topic: required field is missing"},
		{"parallelism 0", "  parallelism: 2\n", "  parallelism: 0\n",
			":3:3: job.parallelism: must be >= 1, got 0"},
		// yaml.v3 gives no column and no field for a syntax error.
		{"bad yaml", "    topic: items\n", "    topic: items: x\n",
			":9: yaml syntax: mapping values are not allowed in this context"},
	}
	for _, c := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".yaml")
		cfg := strings.Replace(processBaseConfig, c.old, c.new, 1)
		if cfg == processBaseConfig {
			t.Fatalf("%s: replacement did not apply", c.name)
		}
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"validate", "run"} {
			code, stdout, stderr := runBinary(t, cmd, "--config", path)
			if code != 2 {
				t.Errorf("%s: kstreamd %s exit status %d, want 2 (stderr %q)", c.name, cmd, code, stderr)
			}
			if want := path + c.prefix; !strings.HasPrefix(stderr, want) {
				t.Errorf("%s: kstreamd %s stderr = %q, want it to start with %q", c.name, cmd, stderr, want)
			}
			if stdout != "" {
				t.Errorf("%s: kstreamd %s stdout = %q, want nothing", c.name, cmd, stdout)
			}
		}
	}

	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(processBaseConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := filepath.Join("..", "..", "configs", "colorshape.yaml")
	for _, path := range []string{good, ref} {
		code, stdout, stderr := runBinary(t, "validate", "--config", path)
		if code != 0 || stdout != path+": ok\n" || stderr != "" {
			t.Errorf("kstreamd validate --config %s: exit %d, stdout %q, stderr %q; want 0, %q, nothing",
				path, code, stdout, stderr, path+": ok\n")
		}
	}
}

// TestProcessMalformedItems produces bad items between good ones with kcat:
// the job skips and counts them, and the later good items still match.
func TestProcessMalformedItems(t *testing.T) {
	t.Parallel()
	requireKcat(t)
	const p = 2
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	d := startProc(t, dir, referenceConfig(dir, broker, metrics, p), broker, metrics)
	matcher := map[string]string{"operator": "matcher"}

	kcatProduce(t, broker, "rules", processRule("R1", "RECTANGLE", "TRIANGLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", matcher, 1*p)
	// One Kafka key, so one partition: the bad items sit between the good
	// ones in the log.
	kcatProduce(t, broker, "items",
		processItem(1, "red", "RECTANGLE"),
		`red|{not json`,
		processItem(2, "red", "TRIANGLE"),
		`red|[1,2]`,
		processItem(3, "red", "RECTANGLE"),
		`red|{"id":99,"shape":"TRIANGLE"}`,
		processItem(4, "red", "TRIANGLE"))

	skipped := "kstreamd_source_records_skipped_total"
	testkit.WaitMetric(t, 10*time.Second, d.url(), skipped, map[string]string{"source": "items"}, 3)
	for _, reason := range []string{"malformed_json", "not_object", "missing_key"} {
		if v := d.scrape(t, skipped, map[string]string{"source": "items", "reason": reason}); v != 1 {
			t.Errorf("%s{source=items,reason=%s} = %v, want 1", skipped, reason, v)
		}
	}
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_in_total", matcher, 4+1*p)
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "matches"}, 2)
	if got, want := kcatMatches(t, broker), []string{"R1 red 1,2", "R1 red 3,4"}; !slices.Equal(got, want) {
		t.Fatalf("matches = %q, want %q", got, want)
	}
	if d.exited() {
		t.Fatalf("kstreamd exited after malformed items:\n%s", d.out.String())
	}
	log := d.out.String()
	// Skips are logged at most once a second per subtask: the first one is.
	if !strings.Contains(log, `msg="skipped bad record"`) || !strings.Contains(log, "topic=items partition=") ||
		!strings.Contains(log, "offset=1 reason=malformed_json") {
		t.Errorf("no \"skipped bad record\" log line with topic, partition, offset 1 and reason malformed_json")
	}
	if code, _ := d.terminate(t, 10*time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0:\n%s", code, d.out.String())
	}
}
