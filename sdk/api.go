package sdk

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/pipeline"
)

// server is the HTTP listener on metrics.address: /metrics, /healthz,
// /readyz, the job API under /api/v1/ and the web UI under /ui/ (ui.go).
type server struct {
	reg    *prometheus.Registry
	logger *slog.Logger
	token  string // required as "Authorization: Bearer <token>" on /api/v1/ when not empty
	// allowOpenControl is metrics.allow_unauthenticated_control: the
	// mutating endpoints answer without a token on any listener.
	allowOpenControl bool
	// exposed is set by serve when the listener is not loopback (0.0.0.0,
	// an interface address): without a token the mutating endpoints are
	// then refused unless allowOpenControl.
	exposed bool

	// cluster is true for a cluster-mode daemon (cluster.enabled), which
	// takes only stop-with-savepoints (pipeline.ClusterSavepointsRefused
	// answers the others), through clusterStop.
	cluster bool
	// clusterStop stops the cluster job with a savepoint under dir ("":
	// checkpoints.savepoint_dir) and returns its directory
	// (job.StopClusterWithSavepoint); nil until the member runs.
	// clusterStops counts the ones in flight (awaitClusterStop).
	clusterStop  func(ctx context.Context, dir string) (string, error)
	clusterStops sync.WaitGroup

	mu      sync.Mutex  // guards job, started and member
	job     *job.Job    // the running attempt; nil before the first and while restarting
	started bool        // an attempt ran: a nil job means restarting
	member  *job.Member // cluster mode: this daemon's membership; nil otherwise
}

// setJob makes j the current attempt (job.WithAttemptHook); nil while the
// job restarts or after it stopped.
func (s *server) setJob(j *job.Job) {
	s.mu.Lock()
	s.job = j
	s.started = s.started || j != nil
	s.mu.Unlock()
}

// setMember marks a cluster member as alive (/healthz answers ok) although
// it runs no single job; /readyz and /api/v1/job then answer for m.
func (s *server) setMember(m *job.Member) {
	s.mu.Lock()
	s.started, s.member = true, m
	s.mu.Unlock()
}

// currentMember returns the cluster membership, nil outside cluster mode.
func (s *server) currentMember() *job.Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.member
}

// restarting reports whether no attempt runs now although one ran before.
func (s *server) restarting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started && s.job == nil
}

func (s *server) current() (*job.Job, *checkpoint.Storage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.job == nil {
		return nil, nil
	}
	return s.job, s.job.Storage()
}

// authorized wraps an API handler with the bearer-token check.
func (s *server) authorized(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+s.token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kstreamd"`)
			writeJSON(w, http.StatusUnauthorized, SavepointResponse{Error: "missing or wrong bearer token"})
			return
		}
		h(w, r)
	}
}

// control wraps a mutating API handler (savepoint, stop): after the token
// check it refuses the request with 403 while the listener is not loopback,
// no token is configured and metrics.allow_unauthenticated_control is not
// set, so that nothing else on the network can stop the job.
func (s *server) control(h http.HandlerFunc) http.HandlerFunc {
	return s.authorized(func(w http.ResponseWriter, r *http.Request) {
		if s.controlRefused() {
			writeJSON(w, http.StatusForbidden, SavepointResponse{Error: errOpenControl})
			return
		}
		h(w, r)
	})
}

// errOpenControl is the answer of a refused mutating request.
const errOpenControl = "savepoints and stop are refused: the API listens on a non-loopback address without a bearer token; " +
	"set metrics.bearer_token_env or metrics.bearer_token_file, or metrics.allow_unauthenticated_control: true"

// controlRefused reports whether the mutating endpoints are refused.
func (s *server) controlRefused() bool { return s.exposed && s.token == "" && !s.allowOpenControl }

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		// Alive while it runs or restarts inside the process.
		if j, _ := s.current(); j == nil && !s.restarting() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if m := s.currentMember(); m != nil {
			// Cluster mode: joined, and every assigned unit runs.
			if ok, reason := m.Readiness(); !ok {
				http.Error(w, "not ready: "+reason, http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ready")
			return
		}
		if s.restarting() {
			http.Error(w, "not ready: restarting after a task failure", http.StatusServiceUnavailable)
			return
		}
		j, _ := s.current()
		if j == nil {
			http.Error(w, "not ready: building the job (restoring state)", http.StatusServiceUnavailable)
			return
		}
		// Ready once the rules are bootstrapped and every source subtask
		// reads all its partitions; the body names what is missing (a
		// source subtask not reading yet, a partition unavailable).
		if ok, reason := j.Readiness(); !ok {
			http.Error(w, "not ready: "+reason, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /api/v1/job", s.authorized(s.jobStatus))
	mux.HandleFunc("POST /api/v1/savepoints", s.control(s.savepoint))
	mux.HandleFunc("GET /api/v1/checkpoints", s.authorized(s.checkpoints))
	mux.HandleFunc("GET /api/v1/rules", s.authorized(s.rules))
	mux.HandleFunc("GET /api/v1/checkpoints/{id}", s.authorized(s.checkpointDetails))
	s.routeUI(mux)
	mux.HandleFunc("GET /api/v1/state/{operator}/{state}", s.stateReads(s.queryState)) // state_api.go
	mux.HandleFunc("/api/v1/", s.authorized(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, SavepointResponse{Error: "no API endpoint " + r.Method + " " + r.URL.Path})
	}))
	return mux
}

// SavepointRequest is the body of POST /api/v1/savepoints (optional).
type SavepointRequest struct {
	// Dir overrides checkpoints.savepoint_dir.
	Dir string `json:"dir"`
	// Stop stops the job right after the savepoint (stop-with-savepoint).
	Stop bool `json:"stop"`
}

// SavepointResponse is the answer of POST /api/v1/savepoints: the savepoint's directory, or what went wrong.
type SavepointResponse struct {
	Path  string `json:"path,omitempty"`
	Error string `json:"error,omitempty"`
}

func (s *server) savepoint(w http.ResponseWriter, r *http.Request) {
	req, err := decodeSavepointRequest(io.LimitReader(r.Body, 1<<16))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, SavepointResponse{Error: "bad request body: " + err.Error()})
		return
	}
	if s.cluster {
		s.clusterSavepoint(w, r, req)
		return
	}
	j, _ := s.current()
	if j == nil {
		writeJSON(w, http.StatusServiceUnavailable, SavepointResponse{Error: s.notRunning()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Minute)
	defer cancel()
	path, err := j.TriggerSavepoint(ctx, req.Dir, req.Stop)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, SavepointResponse{Error: err.Error()})
		return
	}
	s.logger.Info("savepoint taken", "path", path, "stop", req.Stop)
	writeJSON(w, http.StatusOK, SavepointResponse{Path: path})
}

// setClusterStop sets the cluster-mode daemon's stop-with-savepoint
// (job.StopClusterWithSavepoint).
func (s *server) setClusterStop(stop func(ctx context.Context, dir string) (string, error)) {
	s.mu.Lock()
	s.clusterStop = stop
	s.mu.Unlock()
}

// awaitClusterStop waits for the stop-with-savepoint asked of this daemon,
// if any, to be answered: the daemon's member stops first (the stop
// request reaches it as every member), the drain and gathering run after.
func (s *server) awaitClusterStop() { s.clusterStops.Wait() }

// clusterSavepoint answers POST /api/v1/savepoints on a cluster-mode
// daemon: with stop, the whole job stops with one savepoint
// (docs/scale-out.md, "Savepoints across the cluster"), 200 with its
// path once every unit was drained and gathered; without stop 409
// (pipeline.ClusterSavepointsRefused), and 503 before the member runs.
func (s *server) clusterSavepoint(w http.ResponseWriter, r *http.Request, req SavepointRequest) {
	if !req.Stop {
		writeJSON(w, http.StatusConflict, SavepointResponse{Error: errClusterSavepoint})
		return
	}
	s.mu.Lock()
	stop := s.clusterStop
	if stop != nil {
		s.clusterStops.Add(1)
	}
	s.mu.Unlock()
	if stop == nil {
		writeJSON(w, http.StatusServiceUnavailable, SavepointResponse{Error: "the cluster member is not running yet"})
		return
	}
	defer s.clusterStops.Done()
	// Not bound by the request: a client that hangs up must not leave the
	// job half stopped.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), clusterStopTimeout)
	defer cancel()
	s.logger.Info("stop-with-savepoint of the cluster job requested", "dir", req.Dir)
	path, err := stop(ctx, req.Dir)
	if err != nil {
		s.logger.Error("stop-with-savepoint of the cluster job failed", "err", err)
		writeJSON(w, http.StatusInternalServerError, SavepointResponse{Error: err.Error()})
		return
	}
	s.logger.Info("cluster job stopped with savepoint", "path", path)
	writeJSON(w, http.StatusOK, SavepointResponse{Path: path})
}

// clusterStopTimeout bounds a cluster stop-with-savepoint: the members'
// final checkpoints and leave, then the drain of every stage.
const clusterStopTimeout = 10 * time.Minute

// errClusterSavepoint is the answer of POST /api/v1/savepoints without
// stop on a cluster-mode daemon (409 Conflict).
const errClusterSavepoint = "this daemon runs in cluster mode (cluster.enabled: true): " + pipeline.ClusterSavepointsRefused

// decodeSavepointRequest decodes the body of POST /api/v1/savepoints as
// strictly as the config decoder: an empty body is the zero request; an
// unknown field, a wrong type or anything after the one JSON object is an
// error.
func decodeSavepointRequest(body io.Reader) (SavepointRequest, error) {
	var req SavepointRequest
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); errors.Is(err, io.EOF) {
		return SavepointRequest{}, nil
	} else if err != nil {
		return SavepointRequest{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return SavepointRequest{}, errors.New("more than one JSON value")
	}
	return req, nil
}

// RulesResponse is the body of GET /api/v1/rules: per subtask of every
// rules operator (both its stages), the rules it holds with their counts
// since the subtask started. Per-rule counts live here, not in /metrics:
// a rule id is an unbounded label.
type RulesResponse struct {
	Subtasks []job.SubtaskRules `json:"subtasks"`
}

func (s *server) rules(w http.ResponseWriter, _ *http.Request) {
	j, _ := s.current()
	if j == nil {
		writeJSON(w, http.StatusServiceUnavailable, SavepointResponse{Error: "no job running"})
		return
	}
	writeJSON(w, http.StatusOK, RulesResponse{Subtasks: j.Rules()})
}

func (s *server) jobStatus(w http.ResponseWriter, r *http.Request) {
	if m := s.currentMember(); m != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		writeJSON(w, http.StatusOK, m.Status(ctx))
		return
	}
	j, _ := s.current()
	if j == nil {
		writeJSON(w, http.StatusServiceUnavailable, SavepointResponse{Error: "job not running"})
		return
	}
	writeJSON(w, http.StatusOK, j.Status())
}

// checkpointDetails answers GET /api/v1/checkpoints/{id} with the summary
// of checkpoint id, or of the job's newest savepoint when it has that id
// (job.CheckpointSummary, `kstreamd state ls --json`): the metadata and
// per operator its states, read as a restore reads them, with entry
// counts and sizes and readable operator state entries instead of base64.
func (s *server) checkpointDetails(w http.ResponseWriter, r *http.Request) {
	_, st := s.current()
	if st == nil {
		writeJSON(w, http.StatusServiceUnavailable, SavepointResponse{Error: "job not running"})
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeJSON(w, http.StatusBadRequest, SavepointResponse{Error: "checkpoint id must be a positive integer"})
		return
	}
	dir := st.CheckpointDir(id)
	_, err = checkpoint.ReadMetadata(dir)
	if errors.Is(err, fs.ErrNotExist) {
		// Savepoints share the id sequence; the newest one is recorded.
		if sdir, perr := st.LatestSavepoint(); perr == nil {
			if sm, serr := checkpoint.ReadMetadata(sdir); serr == nil && sm.CheckpointID == id {
				dir, err = sdir, nil
			}
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		writeJSON(w, http.StatusNotFound, SavepointResponse{Error: fmt.Sprintf("no completed checkpoint %d", id)})
		return
	}
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, SavepointResponse{Error: err.Error()})
		return
	}
	sum, err := job.CheckpointReader{RemoteStore: st.RemoteStore()}.Summarize(dir)
	if errors.Is(err, fs.ErrNotExist) {
		// Retention removed it meanwhile.
		writeJSON(w, http.StatusNotFound, SavepointResponse{Error: fmt.Sprintf("no completed checkpoint %d", id)})
		return
	}
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, SavepointResponse{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, sum)
}

// CheckpointInfo is one entry of the HTTP API's GET /api/v1/checkpoints: a
// checkpoint or savepoint id, its state, when it was triggered, its size
// in bytes and its directory; for one the running attempt triggered
// (checkpoint.Coordinator.History) also its duration, longest barrier
// alignment and failure reason (checkpointHistory).
type CheckpointInfo struct {
	ID int64 `json:"id"`
	// State is completed or incomplete (on disk), failed or in_progress
	// (the running attempt's).
	State string    `json:"state"`
	Time  time.Time `json:"time"`
	Bytes int64     `json:"bytes"`
	Dir   string    `json:"dir"`
	// Savepoint marks a savepoint; Restored the checkpoint or savepoint
	// the running attempt restored from.
	Savepoint bool `json:"savepoint,omitempty"`
	Restored  bool `json:"restored,omitempty"`
	// DurationMS (trigger to commit or abort; so far while in progress)
	// and AlignmentMS (the longest alignment of a subtask) are
	// milliseconds, omitted for a checkpoint of an earlier attempt.
	DurationMS  *int64 `json:"duration_ms,omitempty"`
	AlignmentMS *int64 `json:"alignment_ms,omitempty"`
	// Failure is why a failed checkpoint failed.
	Failure string `json:"failure,omitempty"`
	// Discarded marks a completed checkpoint of the running attempt's
	// history that retention has deleted since (no longer on disk: it
	// cannot be restored); Flink's checkpoint statistics' discarded.
	Discarded bool `json:"discarded,omitempty"`
}

func (s *server) checkpoints(w http.ResponseWriter, _ *http.Request) {
	j, st := s.current()
	if st == nil {
		writeJSON(w, http.StatusServiceUnavailable, SavepointResponse{Error: "job not running"})
		return
	}
	infos, err := st.List()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, SavepointResponse{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, checkpointHistory(infos, j.Coordinator().History(), j.RestoredFrom()))
}

// notRunning says why no attempt answers: starting or restarting.
func (s *server) notRunning() string {
	if s.restarting() {
		return "job restarting"
	}
	return "job not running"
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// serve listens on addr ("" disables it) and returns the function that
// shuts the listener down.
func (s *server) serve(addr string) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	s.exposed = !isLoopback(ln.Addr())
	if s.controlRefused() {
		s.logger.Warn("savepoints and stop over the API are refused: the listener is not loopback and no bearer token is configured",
			"address", ln.Addr().String(), "fix", "metrics.bearer_token_env, metrics.bearer_token_file or metrics.allow_unauthenticated_control")
	}
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("metrics listener failed", "err", err)
		}
	}()
	s.logger.Info("serving /metrics, /healthz, /readyz, /api/v1 and the web UI at /ui/", "address", ln.Addr().String(), "ui", "http://"+ln.Addr().String()+"/ui/")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// isLoopback reports whether a listener's address is a loopback one
// (127.0.0.0/8, ::1); the unspecified address (0.0.0.0, ::) is not.
func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// printCheckpoints writes the checkpoints and savepoints of dir (a job's
// checkpoint directory, a savepoint directory, or one checkpoint or
// savepoint; see checkpoint.ListAll) as a table.
func printCheckpoints(w io.Writer, dir string) error {
	if st, err := os.Stat(dir); err != nil {
		return err
	} else if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	infos, err := checkpoint.ListAll(dir)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTIME\tBYTES\tDIR")
	for _, in := range infos {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\n", in.ID, in.State, in.Time.UTC().Format(time.RFC3339), in.Bytes, in.Dir)
	}
	return tw.Flush()
}

// requestSavepoint asks the daemon at addr for a savepoint and returns its
// path.
func requestSavepoint(ctx context.Context, addr, token, dir string, stop bool) (string, error) {
	if dir != "" {
		// The daemon resolves paths against its own working directory.
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", err
		}
		dir = abs
	}
	body, _ := json.Marshal(SavepointRequest{Dir: dir, Stop: stop})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/api/v1/savepoints", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("savepoint: %w", err)
	}
	defer resp.Body.Close()
	var out SavepointResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", fmt.Errorf("savepoint: %s: bad answer: %w", resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("savepoint: %s: %s", resp.Status, out.Error)
	}
	return out.Path, nil
}
