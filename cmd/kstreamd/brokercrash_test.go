package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/internal/embedded"
	"github.com/kstreamd/kstreamd/internal/testkit"
)

// The test in this file is issue 22's acceptance test for the development
// broker after kill -9: kfake cannot recover the transactions open at an
// unclean stop exactly (internal/embedded's package comment says why), so
// `kstreamd broker` refuses the data dir, says why and what to do, and
// opens it only with --force-unclean.

// waitBrokerExit waits up to limit for a broker process to exit on its own
// and returns its exit status.
func (b *brokerProc) waitExit(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-b.done:
		return b.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		t.Fatalf("the broker did not exit within %v:\n%s", limit, b.out.String())
	}
	return -1
}

// TestBrokerKill9RefusesUncleanDataDir: an exactly-once keyed count runs
// against `kstreamd broker` in its own process; a second broker on the same
// data dir is refused while the first runs (exit 1, naming the holder's
// pid). The broker is SIGKILLed while the job writes transactions; a
// restart on its data dir exits 1 with a message that names the data dir,
// says it was not closed cleanly and why that cannot be recovered, and
// gives both ways on (remove the dir, or --force-unclean), and leaves the
// dir as it was. --force-unclean opens it (with a warning); its clean stop
// (SIGTERM) marks the dir clean, and a plain start then opens it.
func TestBrokerKill9RefusesUncleanDataDir(t *testing.T) {
	const keys, perKey = 50, 40
	dir := t.TempDir()
	addr, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	dataDir := filepath.Join(dir, "kafka")
	b := startBrokerProc(t, dir, addr, dataDir)

	// A second broker on the same data dir, another address: refused.
	second := launchBrokerProc(t, t.TempDir(), testkit.FreeAddr(t), dataDir)
	if code := second.waitExit(t, 20*time.Second); code != 1 {
		t.Fatalf("a second broker on the data dir in use exited %d, want 1:\n%s", code, second.out.String())
	}
	if want := "data dir " + dataDir + " is in use by another broker (pid " + strconv.Itoa(b.cmd.Process.Pid) + ")"; !strings.Contains(second.out.String(), want) {
		t.Fatalf("the second broker's refusal does not say %q:\n%s", want, second.out.String())
	}

	cfg := keyedCountJob("brokerkill", dir, addr, metrics)
	p := startProc(t, dir, cfg, addr, metrics)
	cl := newClient(t, addr)
	recs := countRecords(keys)
	produce(t, cl, recs(0, keys*perKey/2)...)
	// Kill once checkpoints committed output and the job is still writing
	// transactions: the second half goes in while the first is counted.
	if !testkit.Poll(30*time.Second, func() bool {
		id, err := testkit.Scrape(p.url(), "kstreamd_checkpoint_last_completed_id", nil)
		return p.exited() || (err == nil && id >= 3)
	}) || p.exited() {
		t.Fatalf("no third checkpoint within 30s (exited: %v)", p.exited())
	}
	produce(t, cl, recs(keys*perKey/2, keys*perKey)...)
	cl.Close()
	b.signal(t, syscall.SIGKILL)
	if code := b.waitExit(t, 10*time.Second); code != -1 {
		t.Fatalf("the SIGKILLed broker's exit status = %d, want -1 (killed)", code)
	}
	p.kill(t) // the job is not under test from here on
	t.Logf("broker killed; job killed")

	before := dataDirFiles(t, dataDir)
	if len(before) == 0 || !hasPrefix(before, "meta.json") || !hasPrefix(before, "partitions/counts-") {
		t.Fatalf("the killed broker's data dir holds no log: %q", before)
	}

	// The restart on the data dir is refused.
	start := time.Now()
	refused := launchBrokerProc(t, dir, addr, dataDir)
	if code := refused.waitExit(t, 20*time.Second); code != 1 {
		t.Fatalf("the broker restarted on the killed broker's data dir exited %d, want 1:\n%s", code, refused.out.String())
	}
	t.Logf("refused in %v", time.Since(start).Round(time.Millisecond))
	out := refused.out.String()
	for _, want := range []string{
		"data dir " + dataDir + " was not closed cleanly (kill -9",
		"the development broker cannot recover transactions exactly",
		"read_committed readers would miss committed records",
		"remove " + dataDir + " to start with an empty broker",
		"kstreamd broker --config FILE --force-unclean",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "embedded kafka broker started") {
		t.Errorf("the refused broker says it started:\n%s", out)
	}
	if after := dataDirFiles(t, dataDir); !slices.Equal(after, before) {
		t.Errorf("the refused start changed the data dir:\nbefore %q\nafter  %q", before, after)
	}

	// The way on that keeps the log: --force-unclean, then a clean stop.
	forced := launchBrokerProc(t, dir, addr, dataDir, "--force-unclean")
	if !testkit.Poll(20*time.Second, func() bool {
		return strings.Contains(forced.out.String(), "embedded kafka broker started")
	}) {
		t.Fatalf("the broker with --force-unclean did not start within 20s:\n%s", forced.out.String())
	}
	if !strings.Contains(forced.out.String(), "opening a data dir that was not closed cleanly (--force-unclean)") {
		t.Errorf("the forced broker does not warn:\n%s", forced.out.String())
	}
	forced.stop(t)
	if code := forced.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the forced broker's exit status after SIGTERM = %d, want 0", code)
	}
	if _, err := os.Stat(filepath.Join(dataDir, embedded.CleanShutdownFile)); err != nil {
		t.Fatalf("no clean-shutdown marker after the forced broker's clean stop: %v", err)
	}
	startBrokerProc(t, dir, addr, dataDir).stop(t)
}

// dataDirFiles lists the files under dir (but the lock file, whose content
// is the last broker's pid) with their sizes, sorted.
func dataDirFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !fi.IsDir() && fi.Name() != embedded.LockFile {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel+" "+strconv.FormatInt(fi.Size(), 10))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// hasPrefix reports whether an element of s starts with prefix.
func hasPrefix(s []string, prefix string) bool {
	return slices.ContainsFunc(s, func(e string) bool { return strings.HasPrefix(e, prefix) })
}

// TestDaemonKill9RefusesItsEmbeddedBrokerDataDir: the broker inside the
// daemon (kafka.embedded.enabled) dies with a SIGKILLed daemon, and the next
// `kstreamd run` refuses its data dir the same way: exit 1, naming the dir
// and the ways on, before the job starts.
func TestDaemonKill9RefusesItsEmbeddedBrokerDataDir(t *testing.T) {
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cfg := jobHead("inproc", 1, dir, embeddedKafka(broker), metrics, "info") + `checkpoints:
  interval: 200ms
sources:
  - name: events
    topic: events
sinks:
  - name: copied
    input: events
    topic: copies
    delivery: exactly-once
`
	p := startProc(t, dir, cfg, broker, metrics)
	cl := newClient(t, broker)
	produce(t, cl, countRecords(10)(0, 100)...)
	cl.Close()
	p.kill(t)

	dataDir := filepath.Join(dir, "kafka")
	code, stdout, stderr := runBinary(t, "run", "--config", filepath.Join(dir, "job.yaml"))
	if code != 1 {
		t.Fatalf("kstreamd run after its daemon was SIGKILLed exited %d, want 1:\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{"data dir " + dataDir + " was not closed cleanly", "--force-unclean", "remove " + dataDir} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "job running") {
		t.Errorf("the job ran on the refused broker:\n%s", stderr)
	}
}
