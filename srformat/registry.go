package srformat

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/sr"
)

// ErrSchemaNotFound is returned (wrapped) by Registry.SchemaByID for an id
// the registry answers it does not know (HTTP 404, error code 40403).
var ErrSchemaNotFound = errors.New("schema not found")

// RegistryConfig configures a Registry: the schema_registry section.
type RegistryConfig struct {
	// URLs are the registry's base URLs, tried in order on each request
	// (at least one).
	URLs []string
	// TLS, if not nil, is the client TLS configuration (https URLs).
	TLS *tls.Config
	// Username and Password, if Username is set, are sent as HTTP basic
	// auth.
	Username, Password string
	// BearerToken, if set, is sent as "Authorization: Bearer <token>";
	// exclusive with Username.
	BearerToken string
	// Timeout bounds one HTTP request; 0 means DefaultTimeout.
	Timeout time.Duration
	// CacheSize bounds the number of schemas (by id) kept compiled; 0
	// means DefaultCacheSize. A schema id is immutable in a registry, so
	// entries never expire; the least recently added is evicted first.
	CacheSize int
	// NotFoundTTL is how long an id the registry answered "not found" for
	// is remembered as missing before it is asked again (so a topic full
	// of unknown ids does not ask once per record); 0 means
	// DefaultNotFoundTTL.
	NotFoundTTL time.Duration
	// MinBackoff and MaxBackoff bound the back-off between retries of a
	// registry that does not answer (doubling from MinBackoff); 0 means
	// DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Metrics, if not nil, counts requests retried.
	Metrics *Metrics
	// Logger receives a warning per failed attempt; nil discards.
	Logger *slog.Logger
}

// Defaults of RegistryConfig.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultCacheSize   = 1000
	DefaultNotFoundTTL = 30 * time.Second
	DefaultMinBackoff  = 100 * time.Millisecond
	DefaultMaxBackoff  = 10 * time.Second
)

// Metrics are the Schema Registry client metrics of a process.
type Metrics struct {
	// Retries counts registry requests that failed and are retried
	// (kstreamd_schema_registry_retries_total).
	Retries prometheus.Counter
	// Up is 1 while the last registry request succeeded and 0 while the
	// registry is failing (kstreamd_schema_registry_up).
	Up prometheus.Gauge
	// Lookups counts schemas fetched from the registry by id, cache
	// misses only (kstreamd_schema_registry_lookups_total).
	Lookups prometheus.Counter
}

// NewMetrics registers Metrics with reg (nil: unregistered). Collectors
// reg already holds (a job built again after a restart) are reused.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Retries: prometheus.NewCounter(prometheus.CounterOpts{Name: "kstreamd_schema_registry_retries_total",
			Help: "Schema Registry requests that failed (registry unreachable or erroring) and are retried with back-off."}),
		Up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kstreamd_schema_registry_up",
			Help: "1 while the last Schema Registry request succeeded, 0 while the registry is failing."}),
		Lookups: prometheus.NewCounter(prometheus.CounterOpts{Name: "kstreamd_schema_registry_lookups_total",
			Help: "Schemas fetched from the Schema Registry by id (cache misses)."}),
	}
	if reg != nil {
		m.Retries = registerCollector(reg, m.Retries)
		m.Up = registerCollector(reg, m.Up)
		m.Lookups = registerCollector(reg, m.Lookups)
	}
	return m
}

// registerCollector registers c with reg, or returns the collector reg already has
// under its name.
func registerCollector[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

// Registry is a caching Schema Registry client shared by every Decoder and
// Encoder of a job (safe for concurrent use). Requests that fail for any
// reason other than a definite "not found" are retried with back-off until
// they succeed or the context ends: a registry that is down stalls the
// records that need it, it never makes them skipped.
type Registry struct {
	cfg RegistryConfig
	cl  *sr.Client

	mu       sync.Mutex
	schemas  map[int]sr.Schema
	order    []int // ids in the order they were cached (eviction)
	notFound map[int]time.Time
	now      func() time.Time
}

// NewRegistry returns a Registry for cfg; it contacts nothing yet.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("schema registry: no urls")
	}
	if cfg.Username != "" && cfg.BearerToken != "" {
		return nil, errors.New("schema registry: basic auth and a bearer token are exclusive")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	if cfg.NotFoundTTL <= 0 {
		cfg.NotFoundTTL = DefaultNotFoundTTL
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = cfg.MinBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.TLS != nil {
		tr.TLSClientConfig = cfg.TLS
	}
	opts := []sr.ClientOpt{sr.URLs(cfg.URLs...), sr.HTTPClient(&http.Client{Timeout: cfg.Timeout, Transport: tr}), sr.UserAgent("kstreamd")}
	if cfg.Username != "" {
		opts = append(opts, sr.BasicAuth(cfg.Username, cfg.Password))
	}
	if cfg.BearerToken != "" {
		opts = append(opts, sr.BearerToken(cfg.BearerToken))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("schema registry: %w", err)
	}
	return &Registry{cfg: cfg, cl: cl, schemas: map[int]sr.Schema{}, notFound: map[int]time.Time{}, now: time.Now}, nil
}

// Client returns the underlying franz-go client.
func (r *Registry) Client() *sr.Client { return r.cl }

// SchemaByID returns the schema registered under id, from the cache or the
// registry. An id the registry does not know returns an error wrapping
// ErrSchemaNotFound (remembered for NotFoundTTL); any other failure is
// retried with back-off until ctx ends (then ctx's error).
func (r *Registry) SchemaByID(ctx context.Context, id int) (sr.Schema, error) {
	r.mu.Lock()
	if s, ok := r.schemas[id]; ok {
		r.mu.Unlock()
		return s, nil
	}
	if at, ok := r.notFound[id]; ok && r.now().Sub(at) < r.cfg.NotFoundTTL {
		r.mu.Unlock()
		return sr.Schema{}, fmt.Errorf("schema id %d: %w", id, ErrSchemaNotFound)
	}
	r.mu.Unlock()
	var s sr.Schema
	err := r.retry(ctx, fmt.Sprintf("get schema id %d", id), func(ctx context.Context) error {
		var err error
		s, err = r.cl.SchemaByID(ctx, id)
		return err
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if errors.Is(err, ErrSchemaNotFound) {
		r.notFound[id] = r.now()
		return sr.Schema{}, fmt.Errorf("schema id %d: %w", id, ErrSchemaNotFound)
	}
	if err != nil {
		return sr.Schema{}, err
	}
	if r.cfg.Metrics != nil {
		r.cfg.Metrics.Lookups.Inc()
	}
	delete(r.notFound, id)
	if _, ok := r.schemas[id]; !ok {
		if len(r.order) >= r.cfg.CacheSize {
			delete(r.schemas, r.order[0])
			r.order = r.order[1:]
		}
		r.order = append(r.order, id)
	}
	r.schemas[id] = s
	return s, nil
}

// Do runs fn, a request to the registry, retrying with back-off while it
// fails with anything but a definite answer: a 404 returns an error
// wrapping ErrSchemaNotFound, another 4xx answer (bad request, conflict,
// incompatible schema, 422) returns the registry's error at once, and
// everything else (connection refused, timeout, 5xx, 401/403 while the
// credentials are being fixed) is logged, counted and retried until ctx
// ends. what names the request in logs.
func (r *Registry) Do(ctx context.Context, what string, fn func(context.Context) error) error {
	return r.retry(ctx, what, fn)
}

func (r *Registry) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	backoff := r.cfg.MinBackoff
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil || definite(err) {
			if r.cfg.Metrics != nil {
				r.cfg.Metrics.Up.Set(1)
			}
			if isNotFound(err) {
				return fmt.Errorf("%w: %v", ErrSchemaNotFound, err)
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if r.cfg.Metrics != nil {
			r.cfg.Metrics.Retries.Inc()
			r.cfg.Metrics.Up.Set(0)
		}
		r.cfg.Logger.Warn("schema registry request failed; retrying", "request", what, "attempt", attempt, "backoff", backoff, "error", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, r.cfg.MaxBackoff)
	}
}

// definite reports whether err is the registry's definite answer (a 4xx
// other than 401, 403, 408 and 429), which retrying cannot change.
func definite(err error) bool {
	var re *sr.ResponseError
	if !errors.As(err, &re) {
		return false
	}
	switch re.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout, http.StatusTooManyRequests:
		return false
	}
	return re.StatusCode >= 400 && re.StatusCode < 500
}

func isNotFound(err error) bool {
	var re *sr.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}
