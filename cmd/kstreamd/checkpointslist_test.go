package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/sdk"
)

// listRow is one line of `kstreamd checkpoints list`.
type listRow struct {
	id    int64
	state string
	time  time.Time
	bytes int64
	dir   string
}

// parseCheckpointsList parses the table `kstreamd checkpoints list` prints,
// checking its header.
func parseCheckpointsList(t *testing.T, out string) []listRow {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) == 0 || !slicesEqual(strings.Fields(lines[0]), []string{"ID", "STATE", "TIME", "BYTES", "DIR"}) {
		t.Fatalf("checkpoints list header %q, want ID STATE TIME BYTES DIR; output:\n%s", lines[0], out)
	}
	var rows []listRow
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 5 {
			t.Fatalf("checkpoints list line %q: %d fields, want 5", l, len(f))
		}
		id, err1 := strconv.ParseInt(f[0], 10, 64)
		ts, err2 := time.Parse(time.RFC3339, f[2])
		n, err3 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("checkpoints list line %q: id %v, time %v, bytes %v", l, err1, err2, err3)
		}
		rows = append(rows, listRow{id: id, state: f[1], time: ts, bytes: n, dir: f[4]})
	}
	return rows
}

func slicesEqual(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00")
}

// holdProduce makes the broker hold every produce request to topic until
// the returned release is called; held counts the requests held.
func holdProduce(t *testing.T, c *kfake.Cluster, broker, topic string) (held *atomic.Int32, release func()) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	details, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil || details[topic].Err != nil {
		t.Fatalf("list topic %s: %v %v", topic, err, details[topic].Err)
	}
	id := details[topic].ID
	held = &atomic.Int32{}
	ch := make(chan struct{})
	var once sync.Once
	var released atomic.Bool
	release = func() { once.Do(func() { released.Store(true); close(ch) }) }
	t.Cleanup(release)
	c.ControlKey(kmsg.Produce.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if released.Load() {
			c.DropControl()
			return nil, nil, false
		}
		for _, pt := range r.(*kmsg.ProduceRequest).Topics {
			if pt.Topic == topic || pt.TopicID == [16]byte(id) {
				held.Add(1)
				c.SleepControl(func() { <-ch })
				break
			}
		}
		return nil, nil, false
	})
	return held, release
}

// TestCheckpointsList runs the reference job with checkpoints every 50 ms
// and two retained and lists the job's checkpoints with `kstreamd
// checkpoints list` after it stopped, with a directory without metadata added
// by hand: the two retained checkpoints are listed as completed, with their
// time and size, the hand-made one as incomplete, and nothing else. The job
// is stopped while a checkpoint is in flight (the broker holds the sink's
// writes, so the sink cannot flush for the barrier): that checkpoint is
// aborted, and an aborted checkpoint leaves nothing behind (Flink discards
// its directory). GET /api/v1/checkpoints lists the checkpoints while the job
// runs.
func TestCheckpointsList(t *testing.T) {
	c, broker := startKfake(t, referenceTopics)
	dir := t.TempDir()
	metrics := testkit.FreeAddr(t)
	cfg := externalReferenceConfig(dir, broker, metrics, 2) + `state:
  backend: pebble
checkpoints:
  interval: 50ms
  retained: 2
`
	start := time.Now().Add(-time.Second).Truncate(time.Second)
	d := startDaemon(t, dir, cfg, broker, metrics)
	lastID := func() int64 {
		v, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
		return int64(v)
	}
	if !testkit.Poll(15*time.Second, func() bool { return lastID() >= 5 }) {
		t.Fatalf("last completed checkpoint %d after 15s, want >= 5", lastID())
	}
	jobDir := filepath.Join(dir, "checkpoints", "colorshape")

	// The HTTP API lists the checkpoints while the job runs.
	resp, err := http.Get("http://" + metrics + "/api/v1/checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	var infos []sdk.CheckpointInfo
	if err := jsonDecode(resp, &infos); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/checkpoints: %s, decode %v", resp.Status, err)
	}
	completed := 0
	for _, in := range infos {
		if in.State == "completed" && !in.Discarded { // discarded: in the history, deleted by retention
			completed++
			if in.Bytes <= 0 || in.Time.Before(start) || in.Dir != filepath.Join(jobDir, fmt.Sprintf("chk-%d", in.ID)) {
				t.Errorf("GET /api/v1/checkpoints entry %+v: want bytes > 0, time after %v, dir %s/chk-<id>", in, start, jobDir)
			}
		}
	}
	// Retention runs after each commit (the new metadata is written first,
	// then the oldest checkpoint deleted, so that a crash never leaves
	// fewer), and the API lists the directory: at most retained completed
	// checkpoints exist, plus the newest while the GET falls between its
	// commit and the retention that follows; and at least one.
	if completed < 1 || completed > 2+1 {
		b, _ := json.Marshal(infos)
		t.Errorf("GET /api/v1/checkpoints lists %d completed checkpoints, want 1 to 3 (2 retained, and the newest before retention): %s", completed, b)
	}

	// A match the sink cannot write: the next barrier waits at the sink.
	held, release := holdProduce(t, c, broker, "matches")
	cl := newClient(t, broker)
	produce(t, cl, rule("R1", "RECTANGLE", "TRIANGLE"))
	testkit.WaitMetric(t, 10*time.Second, d.url(), "kstreamd_broadcast_rules", map[string]string{"operator": "matcher"}, 2)
	produce(t, cl, item(1, "red", "RECTANGLE"), item(2, "red", "TRIANGLE"))
	if !testkit.Poll(10*time.Second, func() bool { return held.Load() > 0 }) {
		t.Fatalf("the sink wrote no match within 10s")
	}
	// A checkpoint is stuck when its directory exists and no checkpoint
	// completes for 1 s (20 intervals) and at least 5 polls. Counted in
	// time, not polls: each poll scrapes /metrics, which took over 300 ms
	// a poll at load 50, so 50 polls no longer fitted the window.
	var stuck int64
	same, since := 0, time.Now()
	if !testkit.Poll(30*time.Second, func() bool {
		id := lastID()
		if _, err := os.Stat(filepath.Join(jobDir, fmt.Sprintf("chk-%d", id+1))); err != nil || id != stuck {
			stuck, same, since = id, 0, time.Now()
			return false
		}
		same++
		return same >= 5 && time.Since(since) >= time.Second
	}) {
		t.Fatalf("no checkpoint stuck behind the held sink write (last completed %d)", lastID())
	}
	d.cancel()
	abortRE := regexp.MustCompile(`msg="checkpoint failed" component=checkpoint checkpoint_id=([0-9]+) savepoint=false err="job stopping"`)
	var aborts [][]string
	if !testkit.Poll(10*time.Second, func() bool {
		aborts = abortRE.FindAllStringSubmatch(d.out.String(), -1)
		return len(aborts) > 0
	}) {
		t.Fatalf("no checkpoint aborted at stop (checkpoint %d looked in flight)", stuck+1)
	}
	inFlight, _ := strconv.ParseInt(aborts[0][1], 10, 64)
	if len(aborts) != 1 || inFlight != stuck+1 {
		t.Fatalf("checkpoints aborted at stop: %q, want checkpoint %d only", aborts, stuck+1)
	}
	t.Logf("checkpoint %d in flight at stop, aborted; %d completed", inFlight, stuck)
	release()
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	end := time.Now()

	handMade := filepath.Join(jobDir, "chk-999")
	if err := os.MkdirAll(handMade, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(handMade, "part"), make([]byte, 123), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runBinary(t, "checkpoints", "list", "--dir", jobDir)
	if code != 0 || stderr != "" {
		t.Fatalf("kstreamd checkpoints list: exit %d, stderr %q", code, stderr)
	}
	t.Logf("kstreamd checkpoints list --dir %s:\n%s", jobDir, stdout)
	rows := parseCheckpointsList(t, stdout)
	if len(rows) != 3 {
		t.Errorf("%d checkpoints listed, want 3: the 2 retained (checkpoints.retained) and the hand-made chk-999", len(rows))
	}
	var done []listRow
	for _, r := range rows {
		switch {
		case r.state == "completed":
			done = append(done, r)
			if r.bytes <= 0 || r.time.Before(start) || r.time.After(end) || r.dir != filepath.Join(jobDir, fmt.Sprintf("chk-%d", r.id)) {
				t.Errorf("completed checkpoint %+v: want bytes > 0, time in [%v, %v], dir %s/chk-%d", r, start, end, jobDir, r.id)
			}
		case r.id == 999:
			if r.state != "incomplete" || r.bytes != 123 || r.dir != handMade || r.time.Before(end.Truncate(time.Second)) {
				t.Errorf("hand-made checkpoint listed as %+v, want incomplete, 123 bytes, dir %s, time of its creation", r, handMade)
			}
		case r.id == inFlight:
			t.Errorf("checkpoint %d, aborted at stop, is still listed (%s, %d bytes): its directory %s was not discarded", r.id, r.state, r.bytes, r.dir)
		default:
			t.Errorf("unexpected checkpoint listed: %+v", r)
		}
	}
	if len(done) != 2 || done[0].id != stuck-1 || done[1].id != stuck {
		t.Errorf("completed checkpoints %+v, want %d and %d", done, stuck-1, stuck)
	}
	if rows[len(rows)-1].id != 999 {
		t.Errorf("checkpoints not listed by id: last is %d", rows[len(rows)-1].id)
	}
}
