package sdk

import (
	"cmp"
	"embed"
	"io/fs"
	"net/http"
	"path/filepath"
	"slices"

	"github.com/kstreamd/kstreamd/checkpoint"
)

// uiFiles are the web UI's static assets (sdk/ui: one HTML page, one
// script, one style sheet; no build step, nothing fetched from elsewhere).
//
//go:embed ui
var uiFiles embed.FS

// uiPolicy is the Content-Security-Policy of the UI's assets: the page may
// load scripts, styles and data only from the daemon itself, so it works
// without a network and nothing else can be pulled in.
const uiPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// routeUI serves the web UI under /ui/ (GET /ui redirects there). The
// assets hold no job data and are served without the bearer token; the
// page reads /api/v1/ with the token the user gives it (kept in the
// browser tab's sessionStorage), and shows the savepoint and stop controls
// only then.
func (s *server) routeUI(mux *http.ServeMux) {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded directory exists: a build error, not a run-time one
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	mux.Handle("GET /ui/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", uiPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}))
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
}

// checkpointHistory is the body of GET /api/v1/checkpoints: the
// checkpoints on disk (infos, ascending by id) merged with the running
// attempt's history (hist: Coordinator.History), ascending by id. An id
// in both gets the history's status (completed, failed, in_progress; a
// failed one is "incomplete" on disk), duration, alignment and failure; a
// history entry not on disk (a savepoint in checkpoints.savepoint_dir, a
// failed checkpoint retention removed) is added. The checkpoint or
// savepoint in restored (the job's restored-from directory; "" for a
// fresh start) is marked Restored, and added from its metadata when it is
// in neither list.
func checkpointHistory(infos []checkpoint.Info, hist []checkpoint.CheckpointStats, restored string) []CheckpointInfo {
	out := make([]CheckpointInfo, 0, len(infos)+len(hist))
	at := map[int64]int{}
	for _, in := range infos {
		at[in.ID] = len(out)
		out = append(out, CheckpointInfo{ID: in.ID, State: in.State, Time: in.Time, Bytes: in.Bytes, Dir: in.Dir, Savepoint: in.Savepoint})
	}
	for _, h := range hist {
		i, ok := at[h.ID]
		if !ok {
			at[h.ID], i = len(out), len(out)
			// A completed checkpoint missing from the checkpoint directory
			// was deleted by retention (a savepoint lives elsewhere).
			out = append(out, CheckpointInfo{ID: h.ID, Time: h.Triggered, Bytes: h.Bytes, Dir: h.Dir,
				Discarded: h.Status == checkpoint.StatusCompleted && !h.Savepoint})
		}
		c := &out[i]
		dur, align := h.Duration.Milliseconds(), h.Alignment.Milliseconds()
		c.State, c.Savepoint, c.DurationMS, c.AlignmentMS, c.Failure = h.Status, h.Savepoint, &dur, &align, h.Failure
		if h.Status == checkpoint.StatusCompleted {
			c.Bytes = h.Bytes
		}
	}
	if restored != "" {
		found := false
		for i := range out {
			if filepath.Clean(out[i].Dir) == filepath.Clean(restored) {
				out[i].Restored, found = true, true
			}
		}
		if m, err := checkpoint.ReadMetadata(restored); !found && err == nil {
			out = append(out, CheckpointInfo{ID: m.CheckpointID, State: checkpoint.StateCompleted, Time: m.Timestamp, Bytes: m.Bytes,
				Dir: restored, Savepoint: m.Savepoint, Restored: true})
		}
	}
	slices.SortStableFunc(out, func(a, b CheckpointInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
