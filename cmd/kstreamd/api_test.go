package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

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
