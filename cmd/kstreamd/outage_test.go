package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// The test in this file is issue 14's broker-outage acceptance test: the
// development broker runs in its own process (`kstreamd broker`), so that
// it can be paused with SIGSTOP and stopped and started again on its data
// directory while the job, another process, runs.

// brokerProc is a `kstreamd broker` child process.
type brokerProc struct {
	cmd  *exec.Cmd
	out  *testkit.SyncBuffer
	done chan struct{}
}

// startBrokerProc writes a config whose kafka.embedded section is a broker
// at addr with its log in dataDir and topics events and counts, runs
// `kstreamd broker` on it and waits until the broker accepts connections.
func startBrokerProc(t *testing.T, dir, addr, dataDir string) *brokerProc {
	t.Helper()
	b := launchBrokerProc(t, dir, addr, dataDir)
	// The broker listens before it has created its topics: wait for the
	// line it logs once they exist, or a job started at once finds no topic.
	if !testkit.Poll(20*time.Second, func() bool {
		return strings.Contains(b.out.String(), "embedded kafka broker started")
	}) {
		t.Fatalf("the broker on %s did not start within 20s:\n%s", addr, b.out.String())
	}
	return b
}

// launchBrokerProc is startBrokerProc with extra flags for `kstreamd
// broker`, without waiting for the broker to start.
func launchBrokerProc(t *testing.T, dir, addr, dataDir string, extra ...string) *brokerProc {
	t.Helper()
	cfg := jobHead("broker", 1, dir, "  embedded:\n    enabled: true\n    address: "+addr+"\n    data_dir: "+dataDir+"\n    partitions: 4", `""`, "info") + `sources:
  - name: events
    topic: events
sinks:
  - name: counted
    input: events
    topic: counts
`
	path := filepath.Join(dir, "broker.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &brokerProc{out: &testkit.SyncBuffer{}, done: make(chan struct{})}
	b.cmd = exec.Command(kstreamdBinary(t), append([]string{"broker", "--config", path}, extra...)...)
	b.cmd.Dir = dir
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = b.cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		_ = b.cmd.Process.Signal(syscall.SIGCONT)
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(15 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.done
		}
		if t.Failed() {
			t.Logf("broker log:\n%s", b.out.String())
		}
	})
	return b
}

func (b *brokerProc) signal(t *testing.T, s syscall.Signal) {
	t.Helper()
	if err := b.cmd.Process.Signal(s); err != nil {
		t.Fatalf("broker: %v: %v", s, err)
	}
}

// stop sends SIGTERM and waits for the broker to exit (it persists its log).
func (b *brokerProc) stop(t *testing.T) {
	t.Helper()
	b.signal(t, syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the broker did not stop within 20s of SIGTERM:\n%s", b.out.String())
	}
}

// TestBrokerOutages: an exactly-once keyed count runs against the
// development broker in its own process while records are in flight; the
// broker is paused (SIGSTOP) for 15 s, and later stopped and started again
// on its data directory after 10 s. The job never exits, the retries (and
// any restarts) are counted, and the read_committed output is exact: per
// key the counts 1..n, no gap, no repeat.
func TestBrokerOutages(t *testing.T) {
	const (
		keys   = 100
		perKey = 90 // three phases of 30 per key
		phase  = keys * perKey / 3
	)
	dir := t.TempDir()
	addr, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	dataDir := filepath.Join(dir, "kafka")
	b := startBrokerProc(t, dir, addr, dataDir)

	cfg := keyedCountJob("outages", dir, addr, metrics)
	p := startProc(t, dir, cfg, addr, metrics)
	cl := newClient(t, addr)
	recs := countRecords(keys)
	in := map[string]string{"operator": "counts"}
	countsAtLeast := func(n float64, limit time.Duration) {
		t.Helper()
		var got float64
		if !testkit.Poll(limit, func() bool {
			got, _ = testkit.Scrape(p.url(), "kstreamd_operator_records_in_total", in)
			return p.exited() || got >= n
		}) || p.exited() {
			t.Fatalf("the job counted %v records after %v, want >= %v (exited: %v)", got, limit, n, p.exited())
		}
	}

	// Phase 1, then a 15 s pause while records are in flight.
	produce(t, cl, recs(0, phase)...)
	countsAtLeast(phase/4, 60*time.Second)
	b.signal(t, syscall.SIGSTOP)
	t.Logf("broker paused")
	time.Sleep(15 * time.Second)
	b.signal(t, syscall.SIGCONT)
	t.Logf("broker resumed")
	if p.exited() {
		t.Fatalf("the job exited during the pause:\n%s", p.out.String())
	}
	countsAtLeast(phase, 90*time.Second)

	// Phase 2, then the broker stopped for 10 s and started again.
	produce(t, cl, recs(phase, 2*phase)...)
	countsAtLeast(phase+phase/4, 60*time.Second)
	b.stop(t)
	t.Logf("broker stopped")
	time.Sleep(10 * time.Second)
	if p.exited() {
		t.Fatalf("the job exited while the broker was down:\n%s", p.out.String())
	}
	b = startBrokerProc(t, dir, addr, dataDir)
	t.Logf("broker started again")

	// Phase 3 on the restarted broker.
	cl = newClient(t, addr)
	produce(t, cl, recs(2*phase, 3*phase)...)

	want := keys * perKey
	var out []*kgo.Record
	if !testkit.Poll(120*time.Second, func() bool {
		if p.exited() {
			return true
		}
		out = testkit.ReadTopic(t, []string{addr}, "counts", 30*time.Second)
		return len(out) >= want
	}) || p.exited() {
		t.Fatalf("read_committed output has %d records after 120s, want %d (exited: %v)", len(out), want, p.exited())
	}
	checkExactCounts(t, out, keys, perKey)
	// Counted: failed connections to the broker (it was down 10 s),
	// retried Kafka operations and restarts (either may be 0: franz-go
	// retries much by itself, and a checkpoint that waited out the pause
	// needs no retry).
	connects := p.scrape(t, "kstreamd_kafka_connect_errors_total", map[string]string{"broker": addr})
	retries := p.scrape(t, "kstreamd_kafka_retries_total", nil)
	restarts := p.scrape(t, "kstreamd_job_restarts_total", nil)
	t.Logf("failed connections to %s: %v; retries: %v (commit %v); restarts: %v", addr, connects, retries,
		p.scrape(t, "kstreamd_kafka_retries_total", map[string]string{"operation": "commit"}), restarts)
	if connects == 0 {
		t.Errorf("kstreamd_kafka_connect_errors_total{broker=%q} = 0 after the broker was down for 10s", addr)
	}
	if running := p.scrape(t, "kstreamd_job_state", map[string]string{"state": "running"}); running != 1 {
		t.Errorf("kstreamd_job_state{state=running} = %v, want 1", running)
	}
	for _, l := range strings.Split(p.out.String(), "\n") {
		if strings.Contains(l, "retrying") || strings.Contains(l, "restart") {
			t.Logf("%.400s", l)
		}
	}
	if code, _ := p.terminate(t, 30*time.Second); code != 0 {
		t.Errorf("exit status after SIGTERM %d, want 0", code)
	}
}
