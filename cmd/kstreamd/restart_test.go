package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/sdk"
)

// The tests in this file are issue 14's acceptance tests of the restart
// strategy. The job runs in the test process (sdk.Run, as a binary of
// one's own would) with a registry holding a test-only operator type,
// fail_n_times, that fails its task on a poison record while a counter
// shared by every attempt of the job is above 0; the restored attempts
// read the poison record again and fail again until the counter is 0.

// failNTimes is the test-only pass-through operator type fail_n_times: it
// fails on a record whose value has "poison": true while left > 0.
func failNTimes(left *atomic.Int64) sdk.Factory {
	return sdk.Factory{
		Type: "fail_n_times", Doc: "test only: fails the task on a poison record while failures are left",
		New: func(sdk.FactoryContext) (any, error) { return &poisonFn{left: left}, nil },
	}
}

type poisonFn struct{ left *atomic.Int64 }

func (*poisonFn) Open(sdk.OpenContext) error { return nil }

func (p *poisonFn) ProcessElement(_ context.Context, rec sdk.Record, out sdk.Collector) error {
	if bytes.Contains(rec.Value, []byte(`"poison":true`)) {
		if n := p.left.Add(-1); n >= 0 {
			return fmt.Errorf("fail_n_times: injected failure (%d left) on key %s", n, rec.Key)
		}
	}
	return out.Collect(rec)
}

// restartCountConfig is a keyed count over events, exactly once, with a
// fail_n_times operator before the count and restart (the restart
// section's lines, indented by 2).
func restartCountConfig(dir, broker, metrics, restart string) string {
	return jobHead("restarts", 2, dir, brokersKafka(broker), metrics, "info") + `checkpoints:
  interval: 100ms
restart:
` + restart + `sources:
  - name: events
    topic: events
operators:
  - name: poison
    type: fail_n_times
    input: events
  - name: counts
    type: keyed_count
    input: poison
    key_by: key
sinks:
  - name: counted
    input: counts
    topic: counts
    delivery: exactly-once
    transaction_timeout: 1m
`
}

// inProc is a job run by sdk.Run in the test process.
type inProc struct {
	out     *testkit.SyncBuffer
	done    chan struct{} // closed when sdk.Run returned
	code    int           // its exit status, once done
	stop    context.CancelFunc
	metrics string
}

// runInProcess writes cfg to dir/job.yaml and runs `run --config` on it
// with reg in a goroutine; the test's end stops it (the soft stop).
func runInProcess(t *testing.T, reg *sdk.Registry, dir, cfg, metrics string) *inProc {
	t.Helper()
	path := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	p := &inProc{out: &testkit.SyncBuffer{}, done: make(chan struct{}), stop: stop, metrics: metrics}
	go func() {
		p.code = sdk.Run(ctx, []string{"run", "--config", path}, p.out, p.out, reg)
		close(p.done)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Errorf("the job did not stop within 30s")
		}
		if t.Failed() {
			t.Logf("job log:\n%s", p.out.String())
		}
	})
	return p
}

func (p *inProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for sdk.Run to return and returns its exit status.
func (p *inProc) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(limit):
		t.Fatalf("the job did not exit within %v", limit)
		return -1
	}
}

func (p *inProc) url() string { return "http://" + p.metrics + "/metrics" }

// keyedCountJob is the config of job name at parallelism 2 on the broker
// at addr: a keyed_count of topic events by key, written exactly-once to
// topic counts, checkpoints every 200ms.
func keyedCountJob(name, dir, addr, metrics string) string {
	return jobHead(name, 2, dir, brokersKafka(addr), metrics, "info") + `checkpoints:
  interval: 200ms
sources:
  - name: events
    topic: events
operators:
  - name: counts
    type: keyed_count
    input: events
    key_by: key
sinks:
  - name: counted
    input: counts
    topic: counts
    delivery: exactly-once
    transaction_timeout: 2m
`
}

// countRecords returns the records of n events per key over keys keys,
// starting at event i (n counts every event of the key).
func countRecords(keys int) func(i, j int) []*kgo.Record {
	return func(i, j int) []*kgo.Record {
		recs := make([]*kgo.Record, 0, j-i)
		for n := i; n < j; n++ {
			k := fmt.Sprintf("k%03d", n%keys)
			recs = append(recs, &kgo.Record{Topic: "events", Key: []byte(k), Value: fmt.Appendf(nil, `{"key":%q,"n":%d}`, k, n)})
		}
		return recs
	}
}

// checkExactCounts checks read_committed keyed_count output: each of keys
// keys has exactly the counts 1..perKey, in order, once each.
func checkExactCounts(t *testing.T, recs []*kgo.Record, keys, perKey int) {
	t.Helper()
	next := map[string]int{}
	bad := 0
	for _, r := range recs {
		var c struct {
			Key   string `json:"key"`
			Count int    `json:"count"`
		}
		if err := json.Unmarshal(r.Value, &c); err != nil {
			t.Fatalf("counts record %q: %v", r.Value, err)
		}
		if c.Count != next[c.Key]+1 {
			if bad++; bad <= 10 {
				t.Errorf("key %s: count %d follows %d (a gap or a repeat)", c.Key, c.Count, next[c.Key])
			}
		}
		next[c.Key] = c.Count
	}
	if len(next) != keys {
		t.Errorf("%d keys in the output, want %d", len(next), keys)
	}
	for k, n := range next {
		if n != perKey {
			if bad++; bad <= 20 {
				t.Errorf("key %s: last count %d, want %d", k, n, perKey)
			}
		}
	}
	if len(recs) != keys*perKey {
		t.Errorf("%d count records, want exactly %d", len(recs), keys*perKey)
	}
}

// TestRestartStrategyRestoresEachFailure: with restart fixed-delay
// attempts 3, a task made to fail three times in a row (on the same
// poison record, read again after each restore) restores the latest
// checkpoint each time, the process keeps running, restarts are counted
// and logged with attempt numbers, /healthz stays 200 while /readyz is 503
// during each back-off, and the read_committed output is exact: counts
// 1..n per key, no gap, no repeat. A fourth failure exits 1 naming the
// strategy and the cause.
func TestRestartStrategyRestoresEachFailure(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures int64
	}{
		{"three failures restart", 3},
		{"a fourth failure gives up", 4},
	} {
		t.Run(tc.name, func(t *testing.T) { restartAfterFailures(t, tc.failures) })
	}
}

func restartAfterFailures(t *testing.T, failures int64) {
	const (
		keys   = 50
		perKey = 40
	)
	_, broker := startKfake(t, []string{"events", "counts"})
	var left atomic.Int64
	left.Store(failures)
	reg := sdk.NewRegistry()
	if err := reg.Register(failNTimes(&left)); err != nil {
		t.Fatal(err)
	}
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	p := runInProcess(t, reg, dir, restartCountConfig(dir, broker, metrics, "  strategy: fixed-delay\n  attempts: 3\n  delay: 1s\n"), metrics)
	cl := newClient(t, broker)
	recs := countRecords(keys)

	// The first half, covered by a completed checkpoint before the poison.
	half := keys * perKey / 2
	produce(t, cl, recs(0, half)...)
	completed := map[string]string{"kind": "checkpoint", "result": "completed"}
	in := map[string]string{"operator": "counts"}
	if !testkit.Poll(60*time.Second, func() bool {
		read, err1 := testkit.Scrape(p.url(), "kstreamd_operator_records_in_total", in)
		chk, err2 := testkit.Scrape(p.url(), "kstreamd_checkpoints_total", completed)
		return p.exited() || err1 == nil && err2 == nil && read >= float64(half) && chk >= 2
	}) || p.exited() {
		t.Fatalf("the first %d records were not counted and checkpointed within 60s (exited: %v)", half, p.exited())
	}
	// The poison record is one more event of key k000 (so k000 counts
	// perKey+1), then the second half.
	produce(t, cl, &kgo.Record{Topic: "events", Key: []byte("k000"), Value: []byte(`{"key":"k000","poison":true}`)})
	produce(t, cl, recs(half, keys*perKey)...)

	// While it restarts (each back-off lasts 1s) the job is alive but not
	// ready, and says so.
	healthz := 0
	if !testkit.Poll(60*time.Second, func() bool {
		if p.exited() {
			return true
		}
		if st, _ := testkit.Scrape(p.url(), "kstreamd_job_state", map[string]string{"state": "restarting"}); st != 1 {
			return false
		}
		if code, body := httpGet("http://" + metrics + "/readyz"); code != 503 || body != "not ready: restarting after a task failure\n" {
			return false
		}
		healthz, _ = httpGet("http://" + metrics + "/healthz")
		return true
	}) || p.exited() {
		t.Fatal("never saw kstreamd_job_state{state=restarting} 1 with /readyz 503 \"not ready: restarting after a task failure\" within 60s")
	}
	if healthz != 200 {
		t.Errorf("/healthz while restarting: %d, want 200", healthz)
	}

	if failures > 3 {
		{
			code := p.wait(t, 90*time.Second)
			out := p.out.String()
			if code != 1 {
				t.Fatalf("exit status %d, want 1", code)
			}
			want := "job: the restart strategy gave up after 3 restarts (fixed-delay (attempts 3, delay 1s)); last failure: "
			line := ""
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, `msg="job failed"`) {
					line = l
				}
			}
			t.Logf("%s", line)
			if !strings.Contains(line, want) || !strings.Contains(line, "fail_n_times: injected failure (0 left) on key k000") {
				t.Fatalf("last \"job failed\" line %q; want it to say %q and name the injected failure", line, want)
			}
			if n := logCount(out, "job failed; restarting"); n != 3 {
				t.Errorf("%d restarts logged, want 3", n)
			}
		}
		return
	}

	// Done when every record's count is committed: 1 + keys*perKey records
	// of output.
	want := keys*perKey + 1
	var out []*kgo.Record
	if !testkit.Poll(90*time.Second, func() bool {
		if p.exited() {
			return true
		}
		out = testkit.ReadTopic(t, []string{broker}, "counts", 30*time.Second)
		return len(out) >= want
	}) || p.exited() {
		t.Fatalf("read_committed output has %d records after 90s, want %d (exited: %v)", len(out), want, p.exited())
	}
	// k000 has one more event (the poison record): check it apart.
	var k000, rest []*kgo.Record
	for _, r := range out {
		if string(r.Key) == "k000" {
			k000 = append(k000, r)
		} else {
			rest = append(rest, r)
		}
	}
	checkExactCounts(t, rest, keys-1, perKey)
	checkExactCounts(t, k000, 1, perKey+1)

	logOut := p.out.String()
	for attempt := 1; attempt <= 3; attempt++ {
		if logCount(logOut, "job failed; restarting", fmt.Sprintf("attempt=%d ", attempt), "fail_n_times: injected failure") != 1 {
			t.Errorf("restart attempt %d not logged once with its cause", attempt)
		}
	}
	for _, l := range restoreLines(logOut) {
		t.Logf("%s", l)
	}
	if n := len(restoreLines(logOut)); n != 3 {
		t.Errorf("%d restores logged, want 3 (one per restart)", n)
	}
	if got, _ := testkit.Scrape(p.url(), "kstreamd_job_restarts_total", nil); got != 3 {
		t.Errorf("kstreamd_job_restarts_total = %v, want 3", got)
	}
	// The API lists the three restarts with their causes (the web UI's
	// restarts table).
	var st struct {
		Restarts []struct {
			Time  time.Time `json:"time"`
			Cause string    `json:"cause"`
		} `json:"restarts"`
	}
	if resp, err := http.Get("http://" + metrics + "/api/v1/job"); err != nil {
		t.Errorf("GET /api/v1/job: %v", err)
	} else if err := jsonDecode(resp, &st); err != nil {
		t.Errorf("GET /api/v1/job: %v", err)
	}
	if len(st.Restarts) != 3 {
		t.Errorf("/api/v1/job lists %d restarts, want 3: %+v", len(st.Restarts), st.Restarts)
	}
	for i, r := range st.Restarts {
		if !strings.Contains(r.Cause, "fail_n_times: injected failure") || r.Time.IsZero() || i > 0 && r.Time.Before(st.Restarts[i-1].Time) {
			t.Errorf("restart %d: %+v; want a time in order and the injected failure as its cause", i+1, r)
		}
	}
	for state, want := range map[string]float64{"running": 1, "restarting": 0, "failed": 0} {
		if got, _ := testkit.Scrape(p.url(), "kstreamd_job_state", map[string]string{"state": state}); got != want {
			t.Errorf("kstreamd_job_state{state=%q} = %v, want %v", state, got, want)
		}
	}
	p.stop()
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Errorf("exit status after the stop %d, want 0", code)
	}
}

// httpGet returns the status code and body of GET url (0 when it fails).
func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
