package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/sdk"
)

// savepointNameRE is the base name of a savepoint directory.
var savepointNameRE = regexp.MustCompile(`^savepoint-[0-9]+-[0-9]+$`)

// checkSavepoint checks that path is a savepoint directory under parent with
// committed metadata of job colorshape, and returns the metadata.
func checkSavepoint(t *testing.T, path, parent string) *checkpoint.Metadata {
	t.Helper()
	if filepath.Dir(path) != filepath.Clean(parent) || !savepointNameRE.MatchString(filepath.Base(path)) {
		t.Fatalf("savepoint path %q, want %s/savepoint-<id>-<unix time>", path, parent)
	}
	if st, err := os.Stat(filepath.Join(path, "_metadata")); err != nil || st.Size() == 0 {
		t.Fatalf("savepoint %s has no _metadata: %v", path, err)
	}
	m, err := checkpoint.ReadMetadata(path)
	if err != nil {
		t.Fatalf("read savepoint metadata: %v", err)
	}
	if !m.Savepoint || m.Job != "colorshape" || m.MaxParallelism != 128 {
		t.Fatalf("savepoint metadata: savepoint %v, job %q, max parallelism %d; want true, colorshape, 128", m.Savepoint, m.Job, m.MaxParallelism)
	}
	return m
}

// restoringFrom checks that the daemon's log has a "restoring" line naming
// dir.
func restoringFrom(t *testing.T, log, dir string) {
	t.Helper()
	lines := restoreLines(log)
	if len(lines) != 1 || !strings.Contains(lines[0], " dir="+dir+" ") {
		t.Fatalf("\"restoring\" log lines %q, want one with dir=%s", lines, dir)
	}
}

// TestSavepointCLIAndStopWithSavepoint takes a savepoint of a running job
// with the `kstreamd savepoint` command, restores it at another parallelism
// with `run --from-savepoint`, then stops that job with a savepoint
// (`savepoint --stop`) and restores the latter at a third parallelism.
func TestSavepointCLIAndStopWithSavepoint(t *testing.T) {
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	d := startDaemon(t, dir, checkpointedConfig(dir, broker, metrics, 2, "pebble"), broker, metrics)
	cl := newClient(t, broker)
	matcher := map[string]string{"operator": "matcher"}
	itemsIn := map[string]string{"operator": "items"}
	produce(t, cl, rule("R1", "RECTANGLE", "TRIANGLE"), rule("R2", "CIRCLE", "CIRCLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", matcher, 2*2)
	// Pairs begun before the savepoint: red and blue wait for a TRIANGLE,
	// green for a second CIRCLE.
	produce(t, cl, item(1, "red", "RECTANGLE"), item(2, "blue", "RECTANGLE"), item(3, "green", "CIRCLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_in_total", matcher, 3+2*2)

	// `kstreamd savepoint` (the built binary) against the running daemon.
	code, stdout, stderr := runBinary(t, "savepoint", "--address", metrics)
	if code != 0 || stderr != "" {
		t.Fatalf("kstreamd savepoint: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	sp1 := strings.TrimSuffix(stdout, "\n")
	if strings.Contains(sp1, "\n") {
		t.Fatalf("kstreamd savepoint printed %q, want one path", stdout)
	}
	m := checkSavepoint(t, sp1, filepath.Join(dir, "savepoints"))
	t.Logf("savepoint %d at %s", m.CheckpointID, sp1)
	// `checkpoints list` lists it from the savepoint directory, from the
	// job's checkpoint directory (its latest-savepoint pointer) and alone.
	for _, listDir := range []string{filepath.Join(dir, "savepoints"), filepath.Join(dir, "checkpoints", "colorshape"), sp1} {
		var out, errOut strings.Builder
		if code := run(t.Context(), []string{"checkpoints", "list", "--dir", listDir}, &out, &errOut); code != 0 || errOut.Len() > 0 {
			t.Fatalf("checkpoints list --dir %s: exit %d, stderr %q", listDir, code, errOut.String())
		}
		rows := parseCheckpointsList(t, out.String())
		if !slices.ContainsFunc(rows, func(r listRow) bool {
			return r.id == m.CheckpointID && r.state == "completed" && r.dir == sp1 && r.bytes == m.Bytes
		}) {
			t.Errorf("checkpoints list --dir %s does not list savepoint %d at %s:\n%s", listDir, m.CheckpointID, sp1, out.String())
		}
	}
	if v, _ := testkit.Scrape(d.url(), "kstreamd_checkpoints_total", map[string]string{"kind": "savepoint", "result": "completed"}); v != 1 {
		t.Errorf("kstreamd_checkpoints_total{kind=savepoint,result=completed} = %v, want 1", v)
	}
	// An item after the savepoint: the later checkpoints cover it, the
	// savepoint does not, so a restore of the savepoint reads it again.
	produce(t, cl, item(4, "yellow", "RECTANGLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_in_total", matcher, 4+2*2)
	last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	waitCheckpointAfter(t, d, last)
	if code := d.stop(t); code != 0 {
		t.Fatalf("first run: exit status %d", code)
	}

	// Restore the savepoint at parallelism 3.
	d = startDaemon(t, dir, checkpointedConfig(dir, broker, metrics, 3, "pebble"), broker, metrics, "--from-savepoint", sp1)
	restoringFrom(t, d.out.String(), sp1)
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", matcher, 2*3)
	// Only the yellow item (after the savepoint) is read again.
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_in_total", itemsIn, 1)
	produce(t, cl, item(10, "red", "TRIANGLE"), item(11, "green", "CIRCLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "matches"}, 2)
	want := []string{"R1 red 1,10", "R2 green 3,11"}
	if got := matchStrings(t, testkit.ReadTopic(t, []string{broker}, "matches", 10*time.Second)); !slices.Equal(got, want) {
		t.Fatalf("matches after restoring the savepoint at parallelism 3 = %q, want %q", got, want)
	}
	if v, _ := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", itemsIn); v != 3 {
		t.Fatalf("items read after restoring the savepoint: %v, want 3 (yellow again, then 2 new)", v)
	}

	// Stop with a savepoint into another directory: the daemon exits 0 on
	// its own.
	spDir := filepath.Join(t.TempDir(), "stop-savepoints")
	code, stdout, stderr = runBinary(t, "savepoint", "--address", metrics, "--dir", spDir, "--stop")
	if code != 0 || stderr != "" {
		t.Fatalf("kstreamd savepoint --stop: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	sp2 := strings.TrimSuffix(stdout, "\n")
	checkSavepoint(t, sp2, spDir)
	if code := d.waitExit(t, 15*time.Second); code != 0 {
		t.Fatalf("stop-with-savepoint: exit status %d, want 0:\n%s", code, d.out.String())
	}
	if log := d.out.String(); !strings.Contains(log, "job stopped cleanly") {
		t.Fatalf("stop-with-savepoint: no clean stop in the log:\n%s", log)
	}

	// A plain run (no --from-savepoint) restores the stop-with-savepoint,
	// newer than every checkpoint, as the README says, here at parallelism
	// 1: rules and the blue pair come back, nothing is read twice.
	d = startDaemon(t, dir, checkpointedConfig(dir, broker, metrics, 1, "pebble"), broker, metrics)
	restoringFrom(t, d.out.String(), sp2)
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", matcher, 2*1)
	produce(t, cl, item(20, "blue", "TRIANGLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "matches"}, 1)
	if v, _ := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", itemsIn); v != 1 {
		t.Fatalf("items read after restoring the stop-with-savepoint: %v, want 1 (only the new one)", v)
	}
	want = []string{"R1 blue 2,20", "R1 red 1,10", "R2 green 3,11"}
	if got := matchStrings(t, testkit.ReadTopic(t, []string{broker}, "matches", 10*time.Second)); !slices.Equal(got, want) {
		t.Fatalf("matches after restoring the stop-with-savepoint at parallelism 1 = %q, want %q", got, want)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("last run: exit status %d", code)
	}
}

// TestSavepointHTTPAPI asks a job without periodic checkpoints for a
// savepoint with POST /api/v1/savepoints (dir in the body), moves the
// savepoint elsewhere (a savepoint is self-contained) and restores it.
func TestSavepointHTTPAPI(t *testing.T) {
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	// No checkpoints section: checkpoints.interval is 0.
	cfg := func(p int) string { return referenceConfig(dir, broker, metrics, p) }
	d := startDaemon(t, dir, cfg(2), broker, metrics)
	cl := newClient(t, broker)
	matcher := map[string]string{"operator": "matcher"}
	produce(t, cl, rule("R1", "RECTANGLE", "TRIANGLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", matcher, 1*2)
	produce(t, cl, item(1, "red", "RECTANGLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_in_total", matcher, 1+1*2)

	spDir := filepath.Join(t.TempDir(), "sp")
	body := fmt.Sprintf(`{"dir":%q}`, spDir)
	resp, err := http.Post("http://"+metrics+"/api/v1/savepoints", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var out sdk.SavepointResponse
	derr := jsonDecode(resp, &out)
	if resp.StatusCode != http.StatusOK || derr != nil || out.Error != "" {
		t.Fatalf("POST /api/v1/savepoints: %s, %+v (decode: %v)", resp.Status, out, derr)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	sp := out.Path
	checkSavepoint(t, sp, spDir)
	if !strings.Contains(d.out.String(), `msg="savepoint taken" path=`+sp+" stop=false") {
		t.Errorf("no \"savepoint taken\" log line for %s", sp)
	}
	// A bad body is refused with 400 and a JSON error.
	resp, err = http.Post("http://"+metrics+"/api/v1/savepoints", "application/json", strings.NewReader(`{"dir":`))
	if err != nil {
		t.Fatal(err)
	}
	out = sdk.SavepointResponse{}
	derr = jsonDecode(resp, &out)
	if resp.StatusCode != http.StatusBadRequest || derr != nil || !strings.HasPrefix(out.Error, "bad request body: ") {
		t.Errorf("POST /api/v1/savepoints with a bad body: %s, %+v (decode: %v); want 400 with \"bad request body: ...\"", resp.Status, out, derr)
	}
	if v, _ := testkit.Scrape(d.url(), "kstreamd_checkpoints_total", map[string]string{"kind": "checkpoint", "result": "completed"}); v != 0 {
		t.Errorf("%v periodic checkpoints completed with checkpoints.interval 0, want 0", v)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	// Without a daemon the command fails with exit status 1.
	if code, stdout, stderr := runBinary(t, "savepoint", "--address", metrics); code != 1 || stdout != "" || !strings.HasPrefix(stderr, "kstreamd savepoint: ") {
		t.Errorf("kstreamd savepoint without a daemon: exit %d, stdout %q, stderr %q; want 1, nothing, \"kstreamd savepoint: ...\"", code, stdout, stderr)
	}

	moved := filepath.Join(t.TempDir(), "moved-savepoint")
	if err := os.Rename(sp, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "checkpoints")); err != nil {
		t.Fatal(err)
	}
	d = startDaemon(t, dir, cfg(4), broker, metrics, "--from-savepoint", moved)
	restoringFrom(t, d.out.String(), moved)
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", matcher, 1*4)
	produce(t, cl, item(2, "red", "TRIANGLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "matches"}, 1)
	if got, want := matchStrings(t, testkit.ReadTopic(t, []string{broker}, "matches", 10*time.Second)), []string{"R1 red 1,2"}; !slices.Equal(got, want) {
		t.Fatalf("matches after restoring the savepoint at parallelism 4 = %q, want %q", got, want)
	}
}

// getStatus returns the status code of GET url, or 0 when it cannot connect.
func getStatus(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestReadyzBeforeAndAfterReady drives /healthz and /readyz through the
// daemon's start deterministically: while the broker is down `run` is still
// building the job (both 503); once it is up, fetches are held by the broker
// so the rules source cannot catch up with its 500 rules (healthz 200, readyz
// 503); once they are released the job is ready (both 200).
func TestReadyzBeforeAndAfterReady(t *testing.T) {
	const rules = 500
	brokerAddr := testkit.FreeAddr(t)
	var portN int
	if _, err := fmt.Sscanf(brokerAddr[strings.LastIndexByte(brokerAddr, ':')+1:], "%d", &portN); err != nil {
		t.Fatal(err)
	}
	// The broker's log is written first, then the broker is stopped.
	kdir := t.TempDir()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(portN), kfake.DataDir(kdir), kfake.SeedTopics(4, "items", "rules", "matches"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokerAddr))
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for i := 0; i < rules; i++ {
		recs = append(recs, rule(fmt.Sprintf("R%04d", i), "RECTANGLE", "TRIANGLE"))
	}
	produce(t, cl, recs...)
	cl.Close()
	c.Close()

	const p = 2
	dir := t.TempDir()
	metrics := testkit.FreeAddr(t)
	d := launchDaemon(t, dir, externalReferenceConfig(dir, brokerAddr, metrics, p), brokerAddr, metrics)
	out := d.out
	healthz, readyz := "http://"+metrics+"/healthz", "http://"+metrics+"/readyz"

	// Phase 1: the broker is down; run is discovering partitions.
	if !testkit.Poll(20*time.Second, func() bool {
		return strings.Contains(out.String(), "discover partitions failed; retrying") && getStatus(readyz) != 0
	}) {
		t.Fatalf("no partition discovery retry while the broker is down")
	}
	if h, r := getStatus(healthz), getStatus(readyz); h != http.StatusServiceUnavailable || r != http.StatusServiceUnavailable {
		t.Fatalf("while building: /healthz %d, /readyz %d; want 503, 503", h, r)
	}

	// Phase 2: the broker is up, but holds every fetch until released.
	release := make(chan struct{})
	var released atomic.Bool
	var held atomic.Int32
	c, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(portN), kfake.DataDir(kdir))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer func() {
		if released.CompareAndSwap(false, true) {
			close(release)
		}
	}()
	c.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		if released.Load() {
			c.DropControl()
			return nil, nil, false
		}
		held.Add(1)
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	if !testkit.Poll(20*time.Second, func() bool { return getStatus(healthz) == http.StatusOK && held.Load() > 0 }) {
		t.Fatalf("job not built (healthz %d) or no fetch held (%d) 20s after the broker came up", getStatus(healthz), held.Load())
	}
	t.Logf("job built; %d fetches held", held.Load())
	for i := 0; i < 5; i++ {
		if r := getStatus(readyz); r != http.StatusServiceUnavailable {
			t.Fatalf("while the rules cannot be read: /readyz %d, want 503", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v, err := testkit.Scrape("http://"+metrics+"/metrics", "kstreamd_broadcast_rules", map[string]string{"operator": "matcher"}); err != nil || v != 0 {
		t.Fatalf("rules loaded while fetches are held: %v (err %v), want 0", v, err)
	}

	// Phase 3: fetches flow; the rules bootstrap finishes and the job is
	// ready, and stays ready.
	released.Store(true)
	close(release)
	if !testkit.Poll(20*time.Second, func() bool { return getStatus(readyz) == http.StatusOK }) {
		t.Fatalf("/readyz not 200 within 20s of releasing the fetches")
	}
	t.Logf("ready after %d held fetches", held.Load())
	testkit.WaitMetric(t, 10*time.Second, "http://"+metrics+"/metrics", "kstreamd_broadcast_rules", map[string]string{"operator": "matcher"}, rules*p)
	if h, r := getStatus(healthz), getStatus(readyz); h != http.StatusOK || r != http.StatusOK {
		t.Fatalf("after the bootstrap: /healthz %d, /readyz %d; want 200, 200", h, r)
	}
	if code := d.stopWithin(t, 20*time.Second); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}
