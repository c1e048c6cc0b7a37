package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// apiGet GETs path from the daemon's API with token (if any) and decodes
// the JSON answer into v; it returns the status code.
func apiGet(t *testing.T, d *daemon, path, token string, v any) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+d.metrics+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	return resp.StatusCode
}

// TestJobAPI checks the job status, checkpoint list and details, and the
// bearer token on /api/v1/.
func TestJobAPI(t *testing.T) {
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	t.Setenv("KSTREAMD_TEST_TOKEN", "s3cret-token")
	cfg := checkpointedConfig(dir, broker, metrics, 2, "pebble")
	cfg = strings.Replace(cfg, "metrics:\n  address: "+metrics+"\n", "metrics:\n  address: "+metrics+"\n  bearer_token_env: KSTREAMD_TEST_TOKEN\n", 1)
	d := startDaemon(t, dir, cfg, broker, metrics)
	id := waitCheckpointAfter(t, d, 0)

	if code := apiGet(t, d, "/api/v1/job", "", nil); code != http.StatusUnauthorized {
		t.Fatalf("GET /api/v1/job without token = %d, want 401", code)
	}
	if code := apiGet(t, d, "/api/v1/job", "wrong", nil); code != http.StatusUnauthorized {
		t.Fatalf("GET /api/v1/job with a wrong token = %d, want 401", code)
	}
	var st struct {
		Name           string
		Ready          bool
		MaxParallelism int `json:"max_parallelism"`
		Operators      []struct {
			Name, Kind  string
			Parallelism int
		}
		LastCheckpointID int64 `json:"last_checkpoint_id"`
	}
	if code := apiGet(t, d, "/api/v1/job", "s3cret-token", &st); code != http.StatusOK {
		t.Fatalf("GET /api/v1/job = %d", code)
	}
	var ops []string
	for _, o := range st.Operators {
		ops = append(ops, fmt.Sprintf("%s/%s/%d", o.Name, o.Kind, o.Parallelism))
	}
	if st.Name != "colorshape" || !st.Ready || st.MaxParallelism != 128 || st.LastCheckpointID < int64(id) ||
		strings.Join(ops, " ") != "items/source/2 rules/source/1 matcher/operator/2 matches/sink/2" {
		t.Fatalf("job status = %+v (%s)", st, ops)
	}
	var list []struct {
		ID    int64
		State string
		Bytes int64
	}
	if code := apiGet(t, d, "/api/v1/checkpoints", "s3cret-token", &list); code != http.StatusOK || len(list) == 0 {
		t.Fatalf("GET /api/v1/checkpoints = %d, %+v", code, list)
	}
	var meta struct {
		CheckpointID int64 `json:"checkpoint_id"`
		Job          string
		Operators    map[string]struct{ Parallelism int }
	}
	done := list[0]
	for _, c := range list {
		if c.State == "completed" {
			done = c
		}
	}
	if code := apiGet(t, d, fmt.Sprintf("/api/v1/checkpoints/%d", done.ID), "s3cret-token", &meta); code != http.StatusOK ||
		meta.CheckpointID != done.ID || meta.Job != "colorshape" || meta.Operators["matcher"].Parallelism != 2 {
		t.Fatalf("GET checkpoint %d = %d, %+v", done.ID, code, meta)
	}
	if code := apiGet(t, d, "/api/v1/checkpoints/999999", "s3cret-token", nil); code != http.StatusNotFound {
		t.Fatalf("GET a missing checkpoint = %d, want 404", code)
	}
	// /metrics and the health endpoints stay open.
	if code := apiGet(t, d, "/readyz", "", nil); code != http.StatusOK {
		t.Fatalf("GET /readyz = %d", code)
	}
}

// savepointCLI runs `kstreamd savepoint` in-process with args and returns
// its exit status, stdout and stderr.
func savepointCLI(args ...string) (int, string, string) {
	var stdout, stderr strings.Builder
	code := run(context.Background(), append([]string{"savepoint"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestControlOnOpenListener is the acceptance of "no open door to stop the
// job": on a listener that is not loopback (0.0.0.0) and without a token,
// POST /api/v1/savepoints (also with stop) answers 403 and the job keeps
// running and checkpointing; with a token in a file (metrics.
// bearer_token_file, `savepoint --token-file`) the savepoint and the stop
// work; and metrics.allow_unauthenticated_control: true opens it on
// purpose.
func TestControlOnOpenListener(t *testing.T) {
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	_, port, _ := net.SplitHostPort(metrics)
	open := net.JoinHostPort("0.0.0.0", port)
	cfgOf := func(metricsLines string) string {
		cfg := checkpointedConfig(dir, broker, open, 2, "hashmap")
		return strings.Replace(cfg, "metrics:\n  address: "+open+"\n", "metrics:\n  address: "+open+"\n"+metricsLines, 1)
	}

	// No token: refused, and the job goes on.
	d := startDaemon(t, dir, cfgOf(""), broker, metrics)
	if !strings.Contains(d.out.String(), "savepoints and stop over the API are refused") {
		t.Errorf("no startup warning about the refused control endpoints:\n%s", d.out.String())
	}
	last := waitCheckpointAfter(t, d, 0)
	resp, err := http.Post("http://"+metrics+"/api/v1/savepoints", "application/json", strings.NewReader(`{"stop": true}`))
	if err != nil {
		t.Fatal(err)
	}
	var answer struct{ Path, Error string }
	if err := jsonDecode(resp, &answer); err != nil || resp.StatusCode != http.StatusForbidden || answer.Path != "" ||
		!strings.HasPrefix(answer.Error, "savepoints and stop are refused: the API listens on a non-loopback address without a bearer token") {
		t.Fatalf("POST /api/v1/savepoints = %d %+v (%v), want 403 naming the missing token", resp.StatusCode, answer, err)
	}
	if code, stdout, stderr := savepointCLI("--address", metrics, "--stop"); code != 1 || stdout != "" ||
		!strings.HasPrefix(stderr, "kstreamd savepoint: savepoint: 403 Forbidden: savepoints and stop are refused") {
		t.Fatalf("kstreamd savepoint --stop: exit %d, stdout %q, stderr %q; want 1 and the 403", code, stdout, stderr)
	}
	waitCheckpointAfter(t, d, last)
	if d.exited() {
		t.Fatalf("the job stopped after a refused stop:\n%s", d.out.String())
	}
	if code := apiGet(t, d, "/readyz", "", nil); code != http.StatusOK {
		t.Fatalf("GET /readyz = %d, want 200 (health stays open)", code)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit %d", code)
	}

	// A token from a file: the CLI reads it with --token-file.
	tokenFile := filepath.Join(dir, "api-token")
	if err := os.WriteFile(tokenFile, []byte("f1le-t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d = startDaemon(t, dir, cfgOf("  bearer_token_file: "+tokenFile+"\n"), broker, metrics)
	if code, _, stderr := savepointCLI("--address", metrics); code != 1 || !strings.Contains(stderr, "401 Unauthorized") {
		t.Fatalf("kstreamd savepoint without the token: exit %d, stderr %q; want 1 and 401", code, stderr)
	}
	code, stdout, stderr := savepointCLI("--address", metrics, "--token-file", tokenFile, "--stop")
	if code != 0 || stderr != "" || !savepointNameRE.MatchString(filepath.Base(strings.TrimSpace(stdout))) {
		t.Fatalf("kstreamd savepoint --token-file --stop: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code := d.waitExit(t, 20*time.Second); code != 0 {
		t.Fatalf("stop-with-savepoint exit %d, want 0", code)
	}

	// Opened on purpose.
	d = startDaemon(t, dir, cfgOf("  allow_unauthenticated_control: true\n"), broker, metrics)
	if code, stdout, stderr := savepointCLI("--address", metrics); code != 0 || stderr != "" || stdout == "" {
		t.Fatalf("kstreamd savepoint with allow_unauthenticated_control: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if strings.Contains(d.out.String(), "savepoints and stop over the API are refused") {
		t.Errorf("the refusal warning was logged with allow_unauthenticated_control: true")
	}
}
