package sdk

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/pipeline"
)

// TestClusterSavepointAPI: in cluster mode a savepoint stops the job.
// `kstreamd savepoint` without --stop against a cluster-mode daemon is
// answered 409 with the reason and what to do instead; with --stop it is
// 503 until the member runs, then the member's stop-with-savepoint
// answers (its path, or 500 with its error); `run --from-savepoint` with
// cluster.enabled is no longer refused as such: a missing directory exits
// 2 naming it, before anything starts.
func TestClusterSavepointAPI(t *testing.T) {
	const why = "in cluster mode a savepoint stops the job: every unit's final checkpoint is gathered once the repartition topics are drained (docs/scale-out.md); " +
		"ask for it with stop (kstreamd savepoint --stop), then start a new job from it with run --from-savepoint"
	if pipeline.ClusterSavepointsRefused != why {
		t.Errorf("refusal %q, want %q", pipeline.ClusterSavepointsRefused, why)
	}
	s := &server{reg: prometheus.NewRegistry(), logger: slog.New(slog.DiscardHandler), cluster: true}
	hs := httptest.NewServer(s.handler())
	defer hs.Close()
	addr := strings.TrimPrefix(hs.URL, "http://")
	ctx := context.Background()
	if _, err := requestSavepoint(ctx, addr, "", "", false); err == nil || err.Error() != "savepoint: 409 Conflict: this daemon runs in cluster mode (cluster.enabled: true): "+why {
		t.Errorf("savepoint without stop of a member:\n%v\nwant the 409 with\n%s", err, why)
	}
	if _, err := requestSavepoint(ctx, addr, "", "", true); err == nil || err.Error() != "savepoint: 503 Service Unavailable: the cluster member is not running yet" {
		t.Errorf("stop with savepoint before the member runs: %v", err)
	}
	var (
		mu    sync.Mutex
		asked []string
	)
	s.setClusterStop(func(_ context.Context, dir string) (string, error) {
		mu.Lock()
		asked = append(asked, dir)
		mu.Unlock()
		if dir == "/bad" {
			return "", errors.New("job: stop with savepoint: stage 1: unit 0: boom")
		}
		return dir + "/savepoint-9-1700000000", nil
	})
	if path, err := requestSavepoint(ctx, addr, "", "/backups", true); err != nil || path != "/backups/savepoint-9-1700000000" {
		t.Errorf("stop with savepoint: %q, %v", path, err)
	}
	if _, err := requestSavepoint(ctx, addr, "", "/bad", true); err == nil || err.Error() != "savepoint: 500 Internal Server Error: job: stop with savepoint: stage 1: unit 0: boom" {
		t.Errorf("a failed stop with savepoint: %v", err)
	}
	s.awaitClusterStop()
	mu.Lock()
	if strings.Join(asked, ",") != "/backups,/bad" {
		t.Errorf("stops asked %v", asked)
	}
	mu.Unlock()

	dir := t.TempDir()
	cfg := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cfg, []byte(`job:
  name: colorshape
kafka:
  brokers: [127.0.0.1:1]
data_dir: `+dir+`
checkpoints:
  interval: 10s
cluster:
  enabled: true
  units: 4
  store:
    dir: `+filepath.Join(dir, "store")+`
sources:
  - name: items
    topic: items
sinks:
  - name: copy
    input: items
    topic: copy
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	code := Run(context.Background(), []string{"run", "--config", cfg, "--from-savepoint", "/backups/sp-1"}, &stdout, &stderr, NewRegistry())
	if want := "kstreamd run: --from-savepoint /backups/sp-1: no such directory\n"; code != 2 || stdout.Len() > 0 || stderr.String() != want {
		t.Errorf("run --from-savepoint of a missing directory in cluster mode: exit %d, stdout %q, stderr\n%q\nwant 2 and\n%q", code, stdout.String(), stderr.String(), want)
	}
	if _, err := os.Stat(filepath.Join(dir, "store")); !os.IsNotExist(err) {
		t.Errorf("the refused run touched the store (%v)", err)
	}
}
