package main

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/internal/bench"
)

// benchColumns are the columns `kstreamd bench` prints, in order.
var benchColumns = []string{"scenario", "delivery", "records/s", "vs_pipe", "proc_rec/s", "vs_pipe_proc", "cpu_s/M", "peak_rss_MiB",
	"chk_p50_ms", "chk_max_ms", "chk_p50_KiB", "chk_max_KiB", "lat_rate/s", "lat_p50_ms", "lat_p99_ms", "outputs", "expected"}

// checkBenchTable checks a bench table: the header, the rows named, every
// number positive (the pipe has no checkpoints: "-"), and the committed
// outputs equal to the expected count.
func checkBenchTable(t *testing.T, table string, rows ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != len(rows)+1 || strings.Join(strings.Fields(lines[0]), " ") != strings.Join(benchColumns, " ") {
		t.Fatalf("table:\n%s\nwant the header %v and %d rows", table, benchColumns, len(rows))
	}
	for i, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != len(benchColumns) || f[0]+"/"+f[1] != rows[i] {
			t.Fatalf("row %q, want %s with %d columns", l, rows[i], len(benchColumns))
		}
		for j, v := range f[2:] {
			col := benchColumns[j+2]
			if v == "-" && f[0] == "pipe" && strings.HasPrefix(col, "chk_") {
				continue
			}
			if x, err := strconv.ParseFloat(v, 64); err != nil || x <= 0 {
				t.Errorf("%s: %s = %q, want a positive number", rows[i], col, v)
			}
		}
		if out, exp := f[len(f)-2], f[len(f)-1]; out != exp {
			t.Errorf("%s: %s outputs committed, %s expected", rows[i], out, exp)
		}
	}
}

// TestBenchCommand runs `kstreamd bench` on 2,000 records against a kfake
// broker (--brokers) and checks its table.
func TestBenchCommand(t *testing.T) {
	_, broker := startKfake(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"bench", "--scenario", "keyed-count-hashmap", "--records", "2000", "--keys", "50", "--zipf", "1.2",
		"--latency-duration", "1s", "--brokers", broker, "--dir", t.TempDir()}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	checkBenchTable(t, stdout.String(), "pipe/exactly-once", "keyed-count-hashmap/exactly-once")
}

// TestBenchNexmark runs `kstreamd bench --scenario nexmark-q0` on 2,000
// generated Nexmark events against a kfake broker: the table's row, the
// header naming the events and their rate, and the committed values equal
// to the model's.
func TestBenchNexmark(t *testing.T) {
	_, broker := startKfake(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"bench", "--scenario", "nexmark-q0", "--records", "2000", "--nexmark-rate", "1000",
		"--latency-duration", "1s", "--brokers", broker, "--dir", t.TempDir()}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	checkBenchTable(t, stdout.String(), "pipe/exactly-once", "nexmark-q0/exactly-once")
	for _, want := range []string{"2000 Nexmark events at 1000 events/s of event time", "nexmark-q0 exactly-once: ", "values equal to the model's"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestBenchSpawnsBroker runs the binary's bench without --brokers: it
// starts the embedded broker in a child process, and stops it at the end.
func TestBenchSpawnsBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kstreamdBinary(t), "bench", "--scenario", "copy", "--delivery", "at-least-once",
		"--records", "2000", "--latency-duration", "1s", "--dir", t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kstreamd bench: %v\n%s", err, stderr.String())
	}
	checkBenchTable(t, stdout.String(), "pipe/at-least-once", "copy/at-least-once")
}

// TestBenchUsage: unknown scenarios and deliveries and values bench cannot
// honour are a bad command line (exit 2), refused before anything starts,
// with one "kstreamd bench:" prefix.
func TestBenchUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		// The list comes from the scenario registry (bench.ScenarioNames), in
		// its order, then the scenarios outside --all.
		{[]string{"bench", "--scenario", "nope", "--brokers", "127.0.0.1:1"}, 2, `kstreamd bench: --scenario "nope": unknown (known: ` + bench.ScenarioNames() + `, state-scaling, ttl-cleanup, cluster)` + "\n"},
		{[]string{"bench", "--delivery", "twice", "--brokers", "127.0.0.1:1"}, 2, `kstreamd bench: --delivery "twice": want exactly-once, at-least-once or both` + "\n"},
		{[]string{"bench", "--records", "0", "--brokers", "127.0.0.1:1"}, 2, `kstreamd bench: --records 0: want a positive count` + "\n"},
		{[]string{"bench", "--zipf", "0.8", "--brokers", "127.0.0.1:1"}, 2, `kstreamd bench: --zipf 0.8: want an exponent > 1, or 0 for uniform keys` + "\n"},
		{[]string{"bench", "--scenario", "nexmark-q1", "--nexmark-rate", "0", "--brokers", "127.0.0.1:1"}, 2, `kstreamd bench: --nexmark-rate 0: want a positive rate` + "\n"},
		{[]string{"bench", "--scenario", "postgres-sink", "--brokers", "127.0.0.1:1"}, 2, `kstreamd bench: --scenario postgres-sink needs --postgres-dsn (a PostgreSQL database, e.g. postgres://user@127.0.0.1:5432/bench)` + "\n"},
		{[]string{"bench", "extra"}, 2, `kstreamd bench: unexpected argument "extra" (flags only)`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) || strings.Contains(stderr.String(), "bench: bench:") {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}
