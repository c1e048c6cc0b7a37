package sdk

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/pipeline"
)

// TestClusterSavepointRefused: savepoints do not know units. `kstreamd
// savepoint` against a cluster-mode daemon is answered 409 with the reason
// and what to do instead (before: 503 "job not running", as a member runs
// no single job), and `run --from-savepoint` with cluster.enabled exits 2
// before anything starts (before: the flag was ignored).
func TestClusterSavepointRefused(t *testing.T) {
	const why = "savepoints do not know units in cluster mode: each unit restores from its own HEAD chain in cluster.store (docs/scale-out.md); " +
		"to stop and resume the job, stop the daemons with SIGTERM (each unit takes a final checkpoint) and start them again"
	if pipeline.ClusterSavepointsRefused != why {
		t.Errorf("refusal %q, want %q", pipeline.ClusterSavepointsRefused, why)
	}
	s := &server{reg: prometheus.NewRegistry(), logger: slog.New(slog.DiscardHandler), cluster: true}
	hs := httptest.NewServer(s.handler())
	defer hs.Close()
	_, err := requestSavepoint(context.Background(), strings.TrimPrefix(hs.URL, "http://"), "", "", true)
	if want := "savepoint: 409 Conflict: this daemon runs in cluster mode (cluster.enabled: true): " + why; err == nil || err.Error() != want {
		t.Errorf("savepoint of a member:\n%v\nwant\n%s", err, want)
	}

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
	if want := "kstreamd run: --from-savepoint /backups/sp-1 is refused: " + cfg + " has cluster.enabled: true, and " + why + "\n"; code != 2 || stdout.Len() > 0 || stderr.String() != want {
		t.Errorf("run --from-savepoint in cluster mode: exit %d, stdout %q, stderr\n%q\nwant 2 and\n%q", code, stdout.String(), stderr.String(), want)
	}
	if _, err := os.Stat(filepath.Join(dir, "store")); !os.IsNotExist(err) {
		t.Errorf("the refused run touched the store (%v)", err)
	}
}
