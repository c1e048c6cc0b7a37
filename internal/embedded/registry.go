package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/kstreamd/kstreamd/internal/atomicfile"
)

// SchemasFile is the file, in a SchemaRegistry's data dir, that holds every
// registered schema (JSON: the registry's GET /schemas answer), rewritten
// atomically after every change and read back at start, so schema ids
// survive a restart as the embedded broker's topics do.
const SchemasFile = "schemas.json"

// SchemaRegistry is an embedded, in-memory Confluent-compatible Schema
// Registry for development and tests (franz-go's pkg/sr/srfake served on a
// TCP listener): the REST API of subjects, versions, schema ids, config
// and compatibility, without auth. With a data dir its schemas persist.
type SchemaRegistry struct {
	fake   *srfake.Registry
	srv    *http.Server
	ln     net.Listener
	dir    string
	logger *slog.Logger
	mu     sync.Mutex // serialises writes of SchemasFile
	done   chan struct{}
}

// StartSchemaRegistry serves an embedded registry on address (host:port;
// port 0 picks a free one). dataDir, if not empty, is created if missing
// and holds SchemasFile: the schemas in it are registered again, under the
// same subjects, versions and ids, before the listener opens.
func StartSchemaRegistry(logger *slog.Logger, address, dataDir string) (*SchemaRegistry, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &SchemaRegistry{fake: srfake.NewRegistry(), dir: dataDir, logger: logger, done: make(chan struct{})}
	if dataDir != "" {
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			return nil, fmt.Errorf("embedded schema registry: %w", err)
		}
		n, err := r.load()
		if err != nil {
			return nil, fmt.Errorf("embedded schema registry: %s: %w", filepath.Join(dataDir, SchemasFile), err)
		}
		if n > 0 {
			logger.Info("embedded schema registry: schemas restored", "schemas", n, "dir", dataDir)
		}
	}
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("embedded schema registry: %w", err)
	}
	r.ln = ln
	r.srv = &http.Server{Handler: r.handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(r.done)
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("embedded schema registry stopped", "err", err)
		}
	}()
	logger.Info("embedded schema registry listening", "url", r.URL())
	return r, nil
}

// URL is the registry's base URL, e.g. "http://127.0.0.1:8081".
func (r *SchemaRegistry) URL() string { return "http://" + r.ln.Addr().String() }

// Fake returns the underlying srfake registry (tests seed it directly).
func (r *SchemaRegistry) Fake() *srfake.Registry { return r.fake }

// Close stops serving, waiting up to 5s for requests in flight.
func (r *SchemaRegistry) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := r.srv.Shutdown(ctx)
	<-r.done
	return err
}

// handler serves the fake and, after every successful change (POST, PUT,
// DELETE), rewrites SchemasFile.
func (r *SchemaRegistry) handler() http.Handler {
	inner := r.fake.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.dir == "" || req.Method == http.MethodGet || req.Method == http.MethodHead {
			inner.ServeHTTP(w, req)
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		inner.ServeHTTP(rec, req)
		if rec.status < 300 {
			if err := r.save(); err != nil {
				r.logger.Error("embedded schema registry: cannot persist the schemas", "err", err)
			}
		}
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// save writes every live schema (GET /schemas) to SchemasFile atomically.
func (r *SchemaRegistry) save() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := httptest.NewRecorder()
	r.fake.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/schemas", nil))
	if rec.Code != http.StatusOK {
		return fmt.Errorf("GET /schemas: %d %s", rec.Code, bytes.TrimSpace(rec.Body.Bytes()))
	}
	return atomicfile.WriteFile(filepath.Join(r.dir, SchemasFile), rec.Body.Bytes(), atomicfile.Options{Perm: 0o644})
}

// load registers the schemas of SchemasFile again; it returns how many.
func (r *SchemaRegistry) load() (int, error) {
	b, err := os.ReadFile(filepath.Join(r.dir, SchemasFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var all []sr.SubjectSchema
	if err := json.Unmarshal(b, &all); err != nil {
		return 0, err
	}
	for _, s := range all {
		r.fake.SeedSchema(s.Subject, s.Version, s.ID, s.Schema)
	}
	return len(all), nil
}
