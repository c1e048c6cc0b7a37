package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// TestClusterStopWithSavepoint is issue 28 item 6 end to end through the
// command line, with daemons run in this process (launchDaemon: `kstreamd
// run` as the binary runs it): three daemons of a keyed count, 3 units per
// stage, count 4 clicks per user; `kstreamd savepoint --stop` against one
// of them prints the savepoint's path after every daemon exited 0; 4 more
// clicks per user arrive. Two daemons of the job under another name with
// 2 units per stage, started with `--from-savepoint`, count them: the
// read_committed counts topic holds per user exactly 1..8 (nothing twice);
// a single process started with `--from-savepoint` writes exactly 5..8 per
// user to its own topic.
func TestClusterStopWithSavepoint(t *testing.T) {
	_, broker := startKfake(t, []string{"clicks", "counts", "single"})
	const users = 5
	root := t.TempDir()
	job := clusterJob{Units: 3}
	storeYAML := "    dir: " + filepath.Join(root, "store")
	start := func(member, cfg string, extra ...string) *daemon {
		t.Helper()
		dir := filepath.Join(root, member)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		addr := testkit.FreeAddr(t)
		cfg = strings.ReplaceAll(cfg, "@DIR@", dir)
		cfg = strings.ReplaceAll(cfg, "@ADDR@", addr)
		cfg = strings.ReplaceAll(cfg, "@MEMBER@", member)
		return launchDaemon(t, dir, cfg, broker, addr, extra...)
	}
	cfg := job.config("@DIR@", storeYAML, broker, "@ADDR@", "@MEMBER@")
	cl := newClient(t, broker)
	clicks := func(from, to int) {
		for i := from * users; i < to*users; i++ {
			produce(t, cl, clickRecord(i, users))
		}
	}
	read := func(topic string) []*kgo.Record {
		return testkit.ReadTopicWith(t, []kgo.Opt{kgo.SeedBrokers(broker)}, kgo.ReadCommitted(), topic, 10*time.Second)
	}
	clicks(0, 4)
	var first []*daemon
	for _, m := range []string{"a", "b", "c"} {
		first = append(first, start(m, cfg))
	}
	if !testkit.Poll(time.Minute, func() bool { return len(read("counts")) >= users*4 }) {
		t.Fatalf("the first 4 clicks per user were never counted: %d records", len(read("counts")))
	}
	var stdout, stderr strings.Builder
	spDir := filepath.Join(root, "savepoints")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if code := run(ctx, []string{"savepoint", "--stop", "--address", first[0].metrics, "--dir", spDir}, &stdout, &stderr); code != 0 {
		t.Fatalf("kstreamd savepoint --stop: exit %d: %s", code, stderr.String())
	}
	sp := strings.TrimSpace(stdout.String())
	if filepath.Dir(sp) != spDir {
		t.Fatalf("savepoint path %q, want one under %s", sp, spDir)
	}
	for i, d := range first {
		select {
		case code := <-d.done:
			d.done <- code
			if code != 0 {
				t.Errorf("daemon %d exited %d after the stop, want 0", i, code)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("daemon %d still runs after the stop with savepoint", i)
		}
	}
	stdout.Reset()
	stderr.Reset()
	if code := run(ctx, []string{"checkpoints", "verify", sp}, &stdout, &stderr); code != 0 {
		t.Errorf("checkpoints verify %s: exit %d: %s%s", sp, code, stdout.String(), stderr.String())
	}
	clicks(4, 8)

	renamed := strings.Replace(cfg, "name: clicks\n", "name: clicks2\n", 1)
	renamed = strings.Replace(renamed, "units: 3\n", "units: 2\n", 1)
	start("d", renamed, "--from-savepoint", sp)
	start("e", renamed, "--from-savepoint", sp)
	if !testkit.Poll(time.Minute, func() bool { return len(read("counts")) >= users*8 }) {
		t.Fatalf("the restored cluster never counted the next 4 clicks per user: %d records", len(read("counts")))
	}
	time.Sleep(time.Second) // a few more checkpoints: nothing else may be committed
	checkExactCounts(t, read("counts"), users, 8)

	single := strings.Replace(cfg, "  enabled: true\n", "  enabled: false\n", 1)
	single = strings.Replace(single, "topic: counts\n", "topic: single\n", 1)
	start("s", single, "--from-savepoint", sp)
	if !testkit.Poll(time.Minute, func() bool { return len(read("single")) >= users*4 }) {
		t.Fatalf("the single process never counted the clicks after the savepoint: %d records", len(read("single")))
	}
	time.Sleep(time.Second)
	got := map[string][]int{}
	out := read("single")
	for _, r := range out {
		var c struct {
			Key   string `json:"key"`
			Count int    `json:"count"`
		}
		if err := json.Unmarshal(r.Value, &c); err != nil {
			t.Fatal(err)
		}
		got[c.Key] = append(got[c.Key], c.Count)
	}
	for u := range users {
		if key := fmt.Sprintf("u%d", u); fmt.Sprint(got[key]) != "[5 6 7 8]" {
			t.Errorf("single process from the cluster savepoint: key %s: counts %v, want [5 6 7 8]", key, got[key])
		}
	}
	if len(out) != users*4 {
		t.Errorf("single process from the cluster savepoint: %d records, want %d", len(out), users*4)
	}
}
