package sdk

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/demo"
	"github.com/kstreamd/kstreamd/internal/embedded"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/pipeline"
)

// Version is what `kstreamd version` prints; set it at build time with
// -ldflags "-X github.com/kstreamd/kstreamd/sdk.Version=...".
var Version = "dev"

const usage = `usage: kstreamd <command> [flags]

commands:
  run --config FILE [--from-savepoint DIR]
                          run the job until SIGINT or SIGTERM; restores the
                          latest checkpoint, or the savepoint given
  validate --config FILE  check the pipeline file and exit
  savepoint [--address HOST:PORT] [--dir DIR] [--stop] [--token-env NAME]
                          ask a running daemon for a savepoint and print its
                          path; --stop stops the job after it
  checkpoints list --dir DIR
                          list the checkpoints in a job's checkpoint directory
                          (<checkpoints.dir>/<job>)
  checkpoints verify DIR  check the checkpoint or savepoint in DIR as a restore
                          would, without restoring it: exit 0 when consistent,
                          1 listing every problem
  broker --config FILE    run only the development broker of kafka.embedded
                          (address, data_dir, partitions) with the pipeline's
                          topics, in its own process, until SIGINT or SIGTERM
  version                 print the version
`

// Main runs the kstreamd command line (run, validate, savepoint,
// checkpoints list, checkpoints verify, broker, version) with os.Args, stdout and stderr, the
// operator types of reg, and SIGINT/SIGTERM as the soft stop; it returns the
// exit status for os.Exit: 0 success, 1 the job or command failed, 2 a usage
// or config error. A program of one's own is
//
//	func main() { os.Exit(sdk.Main(reg)) }
//
// with reg from NewRegistry plus its own Register calls.
func Main(reg *Registry) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, os.Args[1:], os.Stdout, os.Stderr, reg)
}

// Run is Main without the process: args without the program name, the
// streams to write to, and ctx as the soft stop (its end stops the job
// cleanly). It returns the exit status.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, reg *Registry) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("kstreamd "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	switch args[0] {
	case "run", "validate":
		path := fs.String("config", "", "pipeline `FILE` (YAML)")
		from := fs.String("from-savepoint", "", "restore the savepoint (or checkpoint) in `DIR` instead of the latest checkpoint")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if *path == "" || fs.NArg() > 0 {
			fmt.Fprintf(stderr, "kstreamd %s: --config FILE is required and takes no arguments\n", args[0])
			return 2
		}
		cfg, err := pipeline.Load(*path, reg)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		if args[0] == "validate" {
			fmt.Fprintf(stdout, "%s: ok\n", *path)
			return 0
		}
		logger := newLogger(cfg, stderr)
		if err := runJob(ctx, cfg, *from, logger); err != nil {
			logger.Error("job failed", "err", err)
			return 1
		}
		return 0
	case "savepoint":
		addr := fs.String("address", "127.0.0.1:9249", "the daemon's metrics.address")
		dir := fs.String("dir", "", "write the savepoint under `DIR` instead of checkpoints.savepoint_dir")
		stop := fs.Bool("stop", false, "stop the job right after the savepoint")
		tokenEnv := fs.String("token-env", "", "send the bearer token held by environment variable `NAME`")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "kstreamd savepoint: unexpected argument %q (flags only)\n", fs.Arg(0))
			return 2
		}
		token := ""
		if *tokenEnv != "" {
			if token = os.Getenv(*tokenEnv); token == "" {
				fmt.Fprintf(stderr, "kstreamd savepoint: environment variable %s is unset or empty\n", *tokenEnv)
				return 2
			}
		}
		path, err := requestSavepoint(ctx, *addr, token, *dir, *stop)
		if err != nil {
			fmt.Fprintln(stderr, "kstreamd savepoint:", err)
			return 1
		}
		fmt.Fprintln(stdout, path)
		return 0
	case "checkpoints":
		return checkpointsCommand(args[1:], stdout, stderr)
	case "broker":
		path := fs.String("config", "", "pipeline `FILE` whose kafka.embedded section describes the broker")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if *path == "" || fs.NArg() > 0 {
			fmt.Fprint(stderr, "usage: kstreamd broker --config FILE\n")
			return 2
		}
		cfg, err := pipeline.Load(*path, reg)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		logger := newLogger(cfg, stderr)
		if err := runBroker(ctx, cfg, logger); err != nil {
			logger.Error("broker failed", "err", err)
			return 1
		}
		return 0
	case "version":
		fmt.Fprintf(stdout, "kstreamd %s\n", Version)
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "kstreamd: unknown command %q\n%s", args[0], usage)
	return 2
}

const checkpointsUsage = `usage: kstreamd checkpoints list --dir DIR
       kstreamd checkpoints verify DIR
`

// checkpointsCommand runs `kstreamd checkpoints list|verify` with args
// after "checkpoints" and returns the exit status.
func checkpointsCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, checkpointsUsage)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, checkpointsUsage)
		return 0
	case "list":
		fs := flag.NewFlagSet("kstreamd checkpoints list", flag.ContinueOnError)
		fs.SetOutput(stderr)
		dir := fs.String("dir", "", "a job's checkpoint `DIR` (<checkpoints.dir>/<job>)")
		if err := fs.Parse(args[1:]); err != nil || *dir == "" || fs.NArg() > 0 {
			fmt.Fprint(stderr, "usage: kstreamd checkpoints list --dir DIR\n")
			return 2
		}
		if err := printCheckpoints(stdout, *dir); err != nil {
			fmt.Fprintln(stderr, "kstreamd checkpoints list:", err)
			return 1
		}
		return 0
	case "verify":
		fs := flag.NewFlagSet("kstreamd checkpoints verify", flag.ContinueOnError)
		fs.SetOutput(stderr)
		if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 1 {
			fmt.Fprint(stderr, "usage: kstreamd checkpoints verify DIR   (a chk-<n> or savepoint directory)\n")
			return 2
		}
		return verifyCheckpoint(stdout, stderr, fs.Arg(0))
	}
	fmt.Fprint(stderr, checkpointsUsage)
	return 2
}

// verifyCheckpoint prints whether the checkpoint in dir is consistent:
// `DIR: ok: checkpoint N (job J, K operators)` with status 0, or
// `DIR: checkpoint N is inconsistent:` and one indented line per problem
// with status 1 (also when the metadata cannot be read).
func verifyCheckpoint(stdout, stderr io.Writer, dir string) int {
	m, err := job.VerifyCheckpoint(dir)
	if m == nil {
		fmt.Fprintf(stderr, "kstreamd checkpoints verify: %v\n", err)
		return 1
	}
	kind := "checkpoint"
	if m.Savepoint {
		kind = "savepoint"
	}
	var ie *checkpoint.InconsistentError
	if errors.As(err, &ie) {
		fmt.Fprintf(stdout, "%s: %s %d of job %s is inconsistent:\n", dir, kind, m.CheckpointID, m.Job)
		for _, p := range ie.Problems {
			fmt.Fprintf(stdout, "  %s\n", p)
		}
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "kstreamd checkpoints verify: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok: %s %d of job %s (metadata version %d, %d operators, %d shared files)\n",
		dir, kind, m.CheckpointID, m.Job, m.Version, len(m.Operators), len(m.SharedFiles))
	return 0
}

func newLogger(cfg *pipeline.Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.Log.Level.SlogLevel()}
	if cfg.Log.Format == pipeline.LogFormatJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// runBroker runs the embedded development broker of cfg in this process
// until ctx ends. A daemon killed with SIGKILL takes an in-process broker
// with it, and the broker does not recover transactions that were open;
// in its own process the broker survives the daemon's crashes.
func runBroker(ctx context.Context, cfg *pipeline.Config, logger *slog.Logger) error {
	b, err := embedded.Start(ctx, logger.With("component", "embedded-kafka"), cfg.Kafka.Embedded.Address,
		cfg.EmbeddedDataDir(), cfg.Kafka.Embedded.Partitions, cfg.Topics())
	if err != nil {
		return err
	}
	<-ctx.Done()
	b.Close()
	logger.Info("broker stopped")
	return nil
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
// when ctx ends, the job stops itself (stop-with-savepoint) or fails.
func runJob(ctx context.Context, cfg *pipeline.Config, fromSavepoint string, logger *slog.Logger) error {
	logger.Info("starting kstreamd", "version", Version, "job", cfg.Job.Name)
	cfg.LogSecurity(logger.With("component", "kafka-client"))
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

	token, err := cfg.BearerToken()
	if err != nil {
		return err
	}
	srv := &server{reg: reg, logger: logger, token: token}
	stopHTTP, err := srv.serve(cfg.Metrics.Address)
	if err != nil {
		return err
	}
	defer stopHTTP()

	opts := append(cfg.ClientOptions(), kgo.WithLogger(kslog.New(kafkaLogger(cfg, logger))))
	j, err := pipeline.Build(ctx, cfg, pipeline.Deps{Logger: logger, Registerer: reg, ClientOpts: opts, FromSavepoint: fromSavepoint})
	if err != nil {
		if ctx.Err() != nil {
			// SIGINT/SIGTERM while waiting for the brokers: a clean stop.
			logger.Info("stopped before the job started", "reason", err)
			return nil
		}
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
				ItemsPerSecond: cfg.Demo.ItemsPerSecond, Kind: cfg.Demo.Kind, WatchTopics: watch, Logger: logger.With("component", "demo"),
			}); err != nil {
				logger.Warn("demo producer stopped", "err", err)
			}
		}()
	}
	srv.setJob(j)
	logger.Info("job running", "job", cfg.Job.Name, "data_dir", filepath.Clean(cfg.DataDir), "restored_from", j.RestoredFrom())
	err = j.Run(ctx)
	srv.setJob(nil)
	if err == nil {
		logger.Info("job stopped cleanly", "job", cfg.Job.Name)
	}
	return err
}
