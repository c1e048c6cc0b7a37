package sdk

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/checkpoint"
)

// TestUIServed: /ui/ serves the embedded page, script and style sheet
// without the bearer token (they hold no job data), each with its content
// type and a Content-Security-Policy that allows nothing but the daemon
// itself; /ui redirects to /ui/; the API behind it still wants the token.
func TestUIServed(t *testing.T) {
	s := &server{reg: prometheus.NewRegistry(), logger: slog.New(slog.DiscardHandler), token: "t0k"}
	h := s.handler()
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec
	}
	for path, want := range map[string]struct{ ctype, contains string }{
		"/ui/":          {"text/html; charset=utf-8", `<script src="app.js" defer></script>`},
		"/ui/app.js":    {"text/javascript; charset=utf-8", `new URL("../api/v1/", location.href)`},
		"/ui/style.css": {"text/css; charset=utf-8", ".vertex-box"},
	} {
		rec := get(path)
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != want.ctype || !strings.Contains(string(body), want.contains) {
			t.Errorf("GET %s = %d %q, body has %q: %v; want 200 %q", path, rec.Code, rec.Header().Get("Content-Type"), want.contains,
				strings.Contains(string(body), want.contains), want.ctype)
		}
		if got := rec.Header().Get("Content-Security-Policy"); got != uiPolicy || !strings.Contains(got, "connect-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q, want %q", path, got, uiPolicy)
		}
	}
	if rec := get("/ui"); rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/ui/" {
		t.Errorf("GET /ui = %d to %q, want 301 to /ui/", rec.Code, rec.Header().Get("Location"))
	}
	if rec := get("/ui/missing.js"); rec.Code != http.StatusNotFound {
		t.Errorf("GET /ui/missing.js = %d, want 404", rec.Code)
	}
	if rec := get("/api/v1/job"); rec.Code != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/job without the token = %d, want 401", rec.Code)
	}
}

// TestCheckpointHistoryMerge: GET /api/v1/checkpoints merges the
// checkpoints on disk with the running attempt's history: the history's
// state, duration, alignment and failure win for an id in both; a
// savepoint stored elsewhere and a failed checkpoint no longer on disk are
// added, a completed one no longer on disk marked discarded (retention
// deleted it); the restored-from checkpoint is marked; ascending by id.
func TestCheckpointHistoryMerge(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	infos := []checkpoint.Info{
		{ID: 1, Dir: "/d/job/chk-1", State: checkpoint.StateCompleted, Time: at, Bytes: 100},
		{ID: 3, Dir: "/d/job/chk-3", State: checkpoint.StateIncomplete, Time: at.Add(3 * time.Second), Bytes: 7},
		{ID: 5, Dir: "/d/job/chk-5", State: checkpoint.StateCompleted, Time: at.Add(5 * time.Second), Bytes: 500},
	}
	hist := []checkpoint.CheckpointStats{
		{ID: 0, Status: checkpoint.StatusCompleted, Triggered: at.Add(-time.Second), Duration: 30 * time.Millisecond, Bytes: 90, Dir: "/d/job/chk-0"},
		{ID: 2, Status: checkpoint.StatusFailed, Triggered: at.Add(2 * time.Second), Duration: 40 * time.Millisecond, Dir: "/d/job/chk-2", Failure: "timed out after 10m0s"},
		{ID: 3, Status: checkpoint.StatusFailed, Triggered: at.Add(3 * time.Second), Duration: 10 * time.Millisecond, Dir: "/d/job/chk-3", Failure: "declined by counts[1]: disk full"},
		{ID: 4, Savepoint: true, Status: checkpoint.StatusCompleted, Triggered: at.Add(4 * time.Second), Duration: 1500 * time.Millisecond,
			Bytes: 400, Alignment: 12 * time.Millisecond, Dir: "/sp/savepoint-4-1"},
		{ID: 5, Status: checkpoint.StatusCompleted, Triggered: at.Add(5 * time.Second), Duration: 250 * time.Millisecond, Bytes: 500, Alignment: 3 * time.Millisecond, Dir: "/d/job/chk-5"},
		{ID: 6, Status: checkpoint.StatusInProgress, Triggered: at.Add(6 * time.Second), Duration: 90 * time.Millisecond, Dir: "/d/job/chk-6"},
	}
	got, err := json.Marshal(checkpointHistory(infos, hist, "/d/job/./chk-1"))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"id":0,"state":"completed","time":"2026-12-06T09:59:59Z","bytes":90,"dir":"/d/job/chk-0","duration_ms":30,"alignment_ms":0,"discarded":true},` +
		`{"id":1,"state":"completed","time":"2026-12-06T10:00:00Z","bytes":100,"dir":"/d/job/chk-1","restored":true},` +
		`{"id":2,"state":"failed","time":"2026-12-06T10:00:02Z","bytes":0,"dir":"/d/job/chk-2","duration_ms":40,"alignment_ms":0,"failure":"timed out after 10m0s"},` +
		`{"id":3,"state":"failed","time":"2026-12-06T10:00:03Z","bytes":7,"dir":"/d/job/chk-3","duration_ms":10,"alignment_ms":0,"failure":"declined by counts[1]: disk full"},` +
		`{"id":4,"state":"completed","time":"2026-12-06T10:00:04Z","bytes":400,"dir":"/sp/savepoint-4-1","savepoint":true,"duration_ms":1500,"alignment_ms":12},` +
		`{"id":5,"state":"completed","time":"2026-12-06T10:00:05Z","bytes":500,"dir":"/d/job/chk-5","duration_ms":250,"alignment_ms":3},` +
		`{"id":6,"state":"in_progress","time":"2026-12-06T10:00:06Z","bytes":0,"dir":"/d/job/chk-6","duration_ms":90,"alignment_ms":0}]`
	if string(got) != want {
		t.Errorf("merged history\n%s\nwant\n%s", got, want)
	}

	// Restored from a savepoint in neither list: added from its metadata.
	sp := filepath.Join(t.TempDir(), "savepoint-3-1")
	meta, _ := json.Marshal(checkpoint.Metadata{Version: checkpoint.MetadataVersion, Job: "j", CheckpointID: 3, Savepoint: true, Timestamp: at, Bytes: 300})
	if err := os.MkdirAll(sp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sp, checkpoint.MetadataFile), meta, 0o644); err != nil {
		t.Fatal(err)
	}
	got, _ = json.Marshal(checkpointHistory(infos[2:], nil, sp))
	want = `[{"id":3,"state":"completed","time":"2026-12-06T10:00:00Z","bytes":300,"dir":"` + sp + `","savepoint":true,"restored":true},` +
		`{"id":5,"state":"completed","time":"2026-12-06T10:00:05Z","bytes":500,"dir":"/d/job/chk-5"}]`
	if string(got) != want {
		t.Errorf("restored from a savepoint elsewhere\n%s\nwant\n%s", got, want)
	}
}
