// Command kstreamd is the kstreamd daemon: it runs a stream-processing job
// described by a YAML pipeline file.
//
//	kstreamd run --config FILE       run the job until SIGINT or SIGTERM
//	kstreamd validate --config FILE  check the file and exit
//	kstreamd version                 print the version
//
// Exit status: 0 after a clean stop or a valid file, 1 when the job fails,
// 2 for a bad command line or config file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/kstreamd/kstreamd/internal/demo"
	"github.com/kstreamd/kstreamd/internal/embedded"
	"github.com/kstreamd/kstreamd/pipeline"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage: kstreamd <command> [flags]

commands:
  run --config FILE       run the job until SIGINT or SIGTERM
  validate --config FILE  check the pipeline file and exit
  version                 print the version
`

// run is main without the process: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run", "validate":
		fs := flag.NewFlagSet("kstreamd "+args[0], flag.ContinueOnError)
		fs.SetOutput(stderr)
		path := fs.String("config", "", "pipeline `FILE` (YAML)")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if *path == "" || fs.NArg() > 0 {
			fmt.Fprintf(stderr, "kstreamd %s: --config FILE is required and takes no arguments\n", args[0])
			return 2
		}
		cfg, err := pipeline.Load(*path)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		if args[0] == "validate" {
			fmt.Fprintf(stdout, "%s: ok\n", *path)
			return 0
		}
		logger := newLogger(cfg, stderr)
		if err := runJob(ctx, cfg, logger); err != nil {
			logger.Error("job failed", "err", err)
			return 1
		}
		return 0
	case "version":
		fmt.Fprintf(stdout, "kstreamd %s\n", version)
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "kstreamd: unknown command %q\n%s", args[0], usage)
	return 2
}

func newLogger(cfg *pipeline.Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.Log.Level.SlogLevel()}
	if cfg.Log.Format == pipeline.LogFormatJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// kafkaLogger is the logger of franz-go's clients: franz-go logs every
// connection and metadata refresh at info, so below debug only its warnings
// and errors are kept.
func kafkaLogger(cfg *pipeline.Config, logger *slog.Logger) *slog.Logger {
	l := logger.With("component", "kafka-client")
	if cfg.Log.Level == pipeline.LogLevelDebug {
		return l
	}
	return slog.New(minLevel{l.Handler(), slog.LevelWarn})
}

// minLevel drops records below level.
type minLevel struct {
	slog.Handler
	level slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.level && m.Handler.Enabled(ctx, l)
}
func (m minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return minLevel{m.Handler.WithAttrs(a), m.level}
}
func (m minLevel) WithGroup(n string) slog.Handler { return minLevel{m.Handler.WithGroup(n), m.level} }

// runJob starts the embedded broker (if enabled), the HTTP listener, the
// demo producer (if enabled) and the job, and stops them in reverse order
// when ctx ends or the job fails.
func runJob(ctx context.Context, cfg *pipeline.Config, logger *slog.Logger) error {
	logger.Info("starting kstreamd", "version", version, "job", cfg.Job.Name)
	if cfg.Kafka.Embedded.Enabled {
		b, err := embedded.Start(ctx, logger.With("component", "embedded-kafka"), cfg.Kafka.Embedded.Address,
			cfg.EmbeddedDataDir(), cfg.Kafka.Embedded.Partitions, cfg.Topics())
		if err != nil {
			return err
		}
		defer b.Close()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var ready health
	stopHTTP, err := serveHTTP(cfg.Metrics.Address, reg, &ready, logger)
	if err != nil {
		return err
	}
	defer stopHTTP()

	opts := append(cfg.ClientOptions(), kgo.WithLogger(kslog.New(kafkaLogger(cfg, logger))))
	job, err := pipeline.Build(ctx, cfg, pipeline.Deps{Logger: logger, Registerer: reg, ClientOpts: opts})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	demoCtx, stopDemo := context.WithCancel(ctx)
	defer func() { stopDemo(); wg.Wait() }()
	if cfg.Demo.Enabled {
		var watch []string
		for _, s := range cfg.Sinks {
			watch = append(watch, s.Topic)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := demo.Run(demoCtx, demo.Config{
				ClientOpts: cfg.ClientOptions(), ItemsTopic: cfg.Demo.ItemsTopic, RulesTopic: cfg.Demo.RulesTopic,
				ItemsPerSecond: cfg.Demo.ItemsPerSecond, WatchTopics: watch, Logger: logger.With("component", "demo"),
			}); err != nil {
				logger.Warn("demo producer stopped", "err", err)
			}
		}()
	}
	ready.set(true)
	logger.Info("job running", "job", cfg.Job.Name, "data_dir", filepath.Clean(cfg.DataDir))
	err = job.Run(ctx)
	ready.set(false)
	if err == nil {
		logger.Info("job stopped cleanly", "job", cfg.Job.Name)
	}
	return err
}

// health is the state /healthz reports.
type health struct {
	mu sync.Mutex // guards ok
	ok bool
}

func (h *health) set(ok bool) { h.mu.Lock(); h.ok = ok; h.mu.Unlock() }
func (h *health) get() bool   { h.mu.Lock(); defer h.mu.Unlock(); return h.ok }

// serveHTTP serves /metrics and /healthz on addr ("" disables it) and
// returns the function that shuts the listener down.
func serveHTTP(addr string, reg *prometheus.Registry, h *health, logger *slog.Logger) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !h.get() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics listener failed", "err", err)
		}
	}()
	logger.Info("serving /metrics and /healthz", "address", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
