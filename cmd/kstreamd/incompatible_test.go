package main

import (
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/sdk"
)

// The tests in this file are issue 22's acceptance tests of item 8: a
// restore refused because the restored state does not fit the job is a
// failure no restart can cure, so the daemon exits 1 at once with the
// refusal's message, with the default restart strategy (exponential-delay,
// which never gives up), instead of restoring the same checkpoint forever.

// incompatibleConfig is a keyed count (aggregate) over events with
// checkpoints every 100 ms and the default restart strategy; jobExtra goes
// into the job section, params into the aggregate's params.
func incompatibleConfig(dir, broker, metrics, jobExtra, params string) string {
	head := jobHead("incompatible", 2, dir, brokersKafka(broker), metrics, "info")
	head = strings.Replace(head, "  parallelism: 2\n", "  parallelism: 2\n"+jobExtra, 1)
	return head + `checkpoints:
  interval: 100ms
sources:
  - name: events
    topic: events
operators:
  - name: counts
    type: aggregate
    input: events
    key_by: key
    params:
      aggregates:
        - {name: n, fn: count}
` + params + `sinks:
  - name: counted
    input: counts
    topic: counts
`
}

// checkpointThenStop runs cfg until it counted n records and completed a
// checkpoint after them, then stops it softly (exit 0).
func checkpointThenStop(t *testing.T, dir, broker, metrics, cfg string, n int) {
	t.Helper()
	p := runInProcess(t, sdk.NewRegistry(), dir, cfg, metrics)
	produce(t, newClient(t, broker), countRecords(10)(0, n)...)
	completed := map[string]string{"kind": "checkpoint", "result": "completed"}
	if !testkit.Poll(60*time.Second, func() bool {
		read, err1 := testkit.Scrape(p.url(), "kstreamd_operator_records_in_total", map[string]string{"operator": "counts"})
		chk, err2 := testkit.Scrape(p.url(), "kstreamd_checkpoints_total", completed)
		return p.exited() || err1 == nil && err2 == nil && read >= float64(n) && chk >= 2
	}) || p.exited() {
		t.Fatalf("the first run did not count %d records and checkpoint within 60s (exited: %v)", n, p.exited())
	}
	p.stop()
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("the first run's soft stop exited %d, want 0", code)
	}
}

// TestIncompatibleRestoreExitsAtOnce: a job checkpoints keyed state, stops,
// and is started again on the same data dir with a change its state cannot
// take; the second run exits 1 on its first attempt (no restart logged,
// kstreamd_job_restarts_total never above 0) with a "job failed" line that
// names the refusal: the aggregate's state "aggregate" and its TTL for
// state_ttl switched on, both max parallelisms for a changed
// job.max_parallelism.
func TestIncompatibleRestoreExitsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name                string
		firstJob, secondJob string
		firstParams, second string
		want                []string
	}{
		{
			name:   "state_ttl switched on",
			second: "      state_ttl: {ttl: 1h}\n",
			want:   []string{"not restarted (a restart cannot cure this failure)", `state: state \"aggregate\": ttl was disabled when written but the descriptor has enabled`},
		},
		{
			name:     "max parallelism changed",
			firstJob: "  max_parallelism: 64\n", secondJob: "  max_parallelism: 32\n",
			want: []string{"the checkpoint has max parallelism 64, the config sets job.max_parallelism 32; it cannot change across a restore"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, broker := startKfake(t, []string{"events", "counts"})
			dir := t.TempDir()
			m1 := testkit.FreeAddr(t)
			checkpointThenStop(t, dir, broker, m1, incompatibleConfig(dir, broker, m1, tc.firstJob, tc.firstParams), 100)

			metrics := testkit.FreeAddr(t)
			p := runInProcess(t, sdk.NewRegistry(), dir, incompatibleConfig(dir, broker, metrics, tc.secondJob, tc.second), metrics)
			// The default back-off starts at 1s: a restart would be logged
			// long before this bound, and the loop would never exit.
			code := p.wait(t, 60*time.Second)
			out := p.out.String()
			if code != 1 {
				t.Fatalf("exit status %d, want 1", code)
			}
			line := ""
			for l := range strings.Lines(out) {
				if strings.Contains(l, `msg="job failed"`) {
					line = l
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("\"job failed\" line %q does not say %q", line, w)
				}
			}
			if n := logCount(out, "job failed; restarting"); n != 0 {
				t.Errorf("%d restarts logged, want 0", n)
			}
		})
	}
}
