package sdk

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/checkpoint/s3store"
	"github.com/kstreamd/kstreamd/internal/demo"
	"github.com/kstreamd/kstreamd/internal/embedded"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/pipeline"
)

// Version is the first line of `kstreamd version`; set it at build time
// with -ldflags "-X github.com/kstreamd/kstreamd/sdk.Version=...". The
// module version and the VCS revision the go command stamps follow it.
var Version = "dev"

const usage = `usage: kstreamd <command> [flags]

commands:
  run --config FILE [--from-savepoint DIR] [--allow-non-restored-state]
      [--cpuprofile FILE]
                          run the job until SIGINT or SIGTERM; restores the
                          latest checkpoint, or the savepoint given;
                          --allow-non-restored-state drops the state of
                          operators (by uid) the pipeline no longer has;
                          --cpuprofile writes a CPU profile of the run
  validate --config FILE  check the pipeline file and exit
  savepoint [--address HOST:PORT] [--dir DIR] [--stop]
            [--token-env NAME | --token-file FILE]
                          ask a running daemon for a savepoint and print its
                          path; --stop stops the job after it
  checkpoints list --dir DIR
                          list the checkpoints in a job's checkpoint directory
                          (<checkpoints.dir>/<job>) with its latest savepoint,
                          the savepoints in a savepoint directory, or the one
                          checkpoint or savepoint DIR is
  checkpoints verify DIR  check the checkpoint or savepoint in DIR as a restore
                          would, without restoring it: exit 0 when consistent,
                          1 listing every problem
  state ls|dump|count [flags] DIR
                          read the checkpoint or savepoint in DIR as a
                          restore would: list its operators and states, dump
                          keyed state as JSON lines, count entries and bytes
                          per key group (kstreamd state -h)
  cluster gc --config FILE [--delete]
                          list the repartition topics and store namespaces
                          of a cluster job no graph in use references;
                          --delete removes them (kstreamd cluster -h)
  broker --config FILE [--force-unclean]
                          run only the development broker of kafka.embedded
                          (address, data_dir, partitions) with the pipeline's
                          topics, in its own process, until SIGINT or SIGTERM;
                          it refuses a data_dir not closed cleanly (kill -9)
                          unless --force-unclean
  schema-registry [--config FILE] [--address HOST:PORT] [--data-dir DIR]
                          run only the development Schema Registry of
                          schema_registry.embedded (address, data_dir; the
                          flags override), until SIGINT or SIGTERM
  bench [--scenario NAME | --all] [--delivery D] [--records N] [--keys K] ...
                          benchmark a scenario as a real job against the
                          broker's own limit and print one table
                          (kstreamd bench -h; BENCHMARKS.md)
  version                 print the version, the module version and the VCS
                          revision (also --version)

kstreamd COMMAND --help prints the command's flags.
`

// Main runs the kstreamd command line (run, validate, savepoint,
// checkpoints list, checkpoints verify, state, cluster gc, broker, schema-registry, bench, version) with os.Args, stdout and stderr, the
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
	fs.Usage = func() {}
	// parse parses the command's flags; on --help it prints the usage to
	// stdout (exit 0), on a bad flag to stderr (exit 2).
	parse := func(synopsis string, args []string) (int, bool) {
		err := fs.Parse(args)
		switch {
		case err == nil:
			return 0, true
		case errors.Is(err, flag.ErrHelp):
			printUsage(fs, stdout, synopsis)
			return 0, false
		}
		printUsage(fs, stderr, synopsis)
		return 2, false
	}
	switch args[0] {
	case "run", "validate":
		path := fs.String("config", "", "pipeline `FILE` (YAML)")
		synopsis := "kstreamd validate --config FILE"
		if args[0] == "run" {
			fs.String("from-savepoint", "", "restore the savepoint (or checkpoint) in `DIR` instead of the latest checkpoint")
			fs.String("cpuprofile", "", "write a CPU profile of the whole run to `FILE`")
			fs.Bool("allow-non-restored-state", false, "drop, logging each, the state of operators the pipeline no longer has instead of refusing the checkpoint (checkpoints.allow_non_restored_state)")
			synopsis = "kstreamd run --config FILE [--from-savepoint DIR] [--allow-non-restored-state] [--cpuprofile FILE]"
		}
		if code, ok := parse(synopsis, args[1:]); !ok {
			return code
		}
		from := ""
		if f := fs.Lookup("from-savepoint"); f != nil {
			from = f.Value.String()
		}
		if *path == "" || fs.NArg() > 0 {
			fmt.Fprintf(stderr, "kstreamd %s: --config FILE is required and takes no arguments\n", args[0])
			return 2
		}
		cfg, err := pipeline.LoadWith(*path, reg.pipelineRegistries())
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		if args[0] == "validate" {
			fmt.Fprintf(stdout, "%s: ok\n", *path)
			return 0
		}
		if f := fs.Lookup("allow-non-restored-state"); f != nil && f.Value.String() == "true" {
			cfg.Checkpoints.AllowNonRestoredState = true
		}
		if from != "" {
			if code, err := checkSavepointDir(from); err != nil {
				fmt.Fprintf(stderr, "kstreamd run: --from-savepoint %s: %v\n", from, err)
				return code
			}
		}
		logger := newLogger(cfg, stderr)
		cpuprofile := ""
		if f := fs.Lookup("cpuprofile"); f != nil {
			cpuprofile = f.Value.String()
		}
		stopProfile, err := startCPUProfile(cpuprofile)
		if err != nil {
			fmt.Fprintln(stderr, "kstreamd run:", err)
			return 1
		}
		defer stopProfile()
		if err := runJob(ctx, cfg, from, logger); err != nil {
			logger.Error("job failed", "err", err)
			return 1
		}
		return 0
	case "savepoint":
		addr := fs.String("address", "127.0.0.1:9249", "the daemon's metrics.address")
		dir := fs.String("dir", "", "write the savepoint under `DIR` instead of checkpoints.savepoint_dir")
		stop := fs.Bool("stop", false, "stop the job right after the savepoint (in cluster mode required: every daemon stops, the units are drained and gathered into one savepoint)")
		tokenEnv := fs.String("token-env", "", "send the bearer token held by environment variable `NAME`")
		tokenFile := fs.String("token-file", "", "send the bearer token held by `FILE` (a trailing newline is ignored)")
		if code, ok := parse("kstreamd savepoint [--address HOST:PORT] [--dir DIR] [--stop] [--token-env NAME | --token-file FILE]", args[1:]); !ok {
			return code
		}
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "kstreamd savepoint: unexpected argument %q (flags only)\n", fs.Arg(0))
			return 2
		}
		token, err := pipeline.ReadBearerToken(*tokenEnv, *tokenFile)
		if err != nil {
			fmt.Fprintln(stderr, "kstreamd savepoint:", err)
			return 2
		}
		path, err := requestSavepoint(ctx, *addr, token, *dir, *stop)
		if err != nil {
			fmt.Fprintln(stderr, "kstreamd savepoint:", err)
			return 1
		}
		fmt.Fprintln(stdout, path)
		return 0
	case "checkpoints":
		if len(args) == 2 && isHelp(args[1]) {
			fmt.Fprint(stdout, checkpointsUsage)
			return 0
		}
		if len(args) >= 2 && args[1] == "verify" {
			fs = flag.NewFlagSet("kstreamd checkpoints verify", flag.ContinueOnError)
			fs.SetOutput(stderr)
			fs.Usage = func() {}
			if code, ok := parse("kstreamd checkpoints verify DIR", args[2:]); !ok {
				return code
			}
			if fs.NArg() != 1 {
				printUsage(fs, stderr, "kstreamd checkpoints verify DIR   (a chk-<n> or savepoint directory)")
				return 2
			}
			return verifyCheckpoint(stdout, stderr, fs.Arg(0))
		}
		if len(args) < 2 || args[1] != "list" {
			fmt.Fprint(stderr, checkpointsUsage)
			return 2
		}
		fs = flag.NewFlagSet("kstreamd checkpoints list", flag.ContinueOnError)
		fs.SetOutput(stderr)
		fs.Usage = func() {}
		dir := fs.String("dir", "", "a job's checkpoint `DIR` (<checkpoints.dir>/<job>), a savepoint directory, or one checkpoint or savepoint")
		if code, ok := parse("kstreamd checkpoints list --dir DIR", args[2:]); !ok {
			return code
		}
		if *dir == "" || fs.NArg() > 0 {
			printUsage(fs, stderr, "kstreamd checkpoints list --dir DIR")
			return 2
		}
		if err := printCheckpoints(stdout, *dir); err != nil {
			fmt.Fprintln(stderr, "kstreamd checkpoints list:", err)
			return 1
		}
		return 0
	case "state":
		return runState(args[1:], stdout, stderr, reg)
	case "cluster":
		return runCluster(ctx, args[1:], stdout, stderr, reg)
	case "broker":
		path := fs.String("config", "", "pipeline `FILE` whose kafka.embedded section describes the broker")
		force := fs.Bool("force-unclean", false, "open a data dir that was not closed cleanly (kill -9, a crash) as it is: transactions open at the crash are aborted and committed output of a restarted exactly-once job may be missing")
		if code, ok := parse("kstreamd broker --config FILE [--force-unclean]", args[1:]); !ok {
			return code
		}
		if *path == "" || fs.NArg() > 0 {
			fmt.Fprint(stderr, "usage: kstreamd broker --config FILE [--force-unclean]\n")
			return 2
		}
		cfg, err := pipeline.LoadWith(*path, reg.pipelineRegistries())
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		logger := newLogger(cfg, stderr)
		if err := runBroker(ctx, cfg, *force, logger); err != nil {
			logger.Error("broker failed", "err", err)
			return 1
		}
		return 0
	case "schema-registry":
		const synopsis = "kstreamd schema-registry [--config FILE] [--address HOST:PORT] [--data-dir DIR]"
		path := fs.String("config", "", "pipeline `FILE` whose schema_registry.embedded section describes the registry")
		addr := fs.String("address", "", "`HOST:PORT` to listen on (default schema_registry.embedded.address, 127.0.0.1:8081)")
		dir := fs.String("data-dir", "", "`DIR` keeping the schemas across restarts (default schema_registry.embedded.data_dir, <data_dir>/schema-registry)")
		if code, ok := parse(synopsis, args[1:]); !ok {
			return code
		}
		if fs.NArg() > 0 {
			printUsage(fs, stderr, synopsis)
			return 2
		}
		cfg := pipeline.Default()
		if *path != "" {
			var err error
			if cfg, err = pipeline.LoadWith(*path, reg.pipelineRegistries()); err != nil {
				fmt.Fprintln(stderr, err)
				return 2
			}
		}
		address, dataDir := cfg.SchemaRegistry.Embedded.Address, cfg.EmbeddedSchemaRegistryDataDir()
		if *addr != "" {
			address = *addr
		}
		if *dir != "" {
			dataDir = *dir
		}
		logger := newLogger(cfg, stderr)
		r, err := embedded.StartSchemaRegistry(logger.With("component", "embedded-schema-registry"), address, dataDir)
		if err != nil {
			logger.Error("schema registry failed", "err", err)
			return 1
		}
		fmt.Fprintln(stdout, r.URL())
		<-ctx.Done()
		if err := r.Close(); err != nil {
			logger.Error("schema registry stop", "err", err)
			return 1
		}
		logger.Info("schema registry stopped")
		return 0
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr, reg)
	case "version", "--version", "-version":
		if code, ok := parse("kstreamd version", args[1:]); !ok {
			return code
		}
		if fs.NArg() > 0 {
			printUsage(fs, stderr, "kstreamd version")
			return 2
		}
		bi, _ := debug.ReadBuildInfo()
		fmt.Fprint(stdout, versionText(Version, bi))
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "kstreamd: unknown command %q\n%s", args[0], usage)
	return 2
}

// checkpointsUsage is the usage of `kstreamd checkpoints`.
const checkpointsUsage = `usage: kstreamd checkpoints <command> [flags]

commands:
  list --dir DIR          list the checkpoints in a job's checkpoint directory
                          (<checkpoints.dir>/<job>) with its latest savepoint,
                          the savepoints in a savepoint directory, or the one
                          checkpoint or savepoint DIR is
  verify DIR              check the checkpoint or savepoint in DIR as a restore
                          would: exit 0 when consistent, 1 listing every problem
`

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// printUsage writes "usage: synopsis" and the flags of fs to w.
func printUsage(fs *flag.FlagSet, w io.Writer, synopsis string) {
	fmt.Fprintf(w, "usage: %s\n", synopsis)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprintln(w, "\nflags:")
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

// versionText is what `kstreamd version` prints: version (Version), then
// from the build info the go command stamps the main module and its
// version, the kstreamd module's when it is a dependency (a daemon built
// with package sdk), the VCS revision with its commit time and whether the
// tree was modified, and the Go version. bi may be nil (no build info).
func versionText(version string, bi *debug.BuildInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "kstreamd %s\n", version)
	if bi == nil {
		b.WriteString("module unknown (no build information)\n")
		return b.String()
	}
	fmt.Fprintf(&b, "module %s\n", strings.TrimSpace(bi.Main.Path+" "+bi.Main.Version))
	const self = "github.com/kstreamd/kstreamd"
	if bi.Main.Path != self {
		for _, d := range bi.Deps {
			if d.Path == self {
				if d.Replace != nil {
					d = d.Replace
				}
				fmt.Fprintf(&b, "kstreamd module %s\n", strings.TrimSpace(d.Path+" "+d.Version)) // a local replace has no version
			}
		}
	}
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	if rev := vcs["vcs.revision"]; rev != "" {
		fmt.Fprintf(&b, "revision %s", rev)
		if t := vcs["vcs.time"]; t != "" {
			fmt.Fprintf(&b, " (%s)", t)
		}
		if vcs["vcs.modified"] == "true" {
			b.WriteString(" modified")
		}
		b.WriteString("\n")
	} else {
		b.WriteString("revision unknown (built without VCS information)\n")
	}
	if bi.GoVersion != "" {
		fmt.Fprintf(&b, "%s\n", bi.GoVersion)
	}
	return b.String()
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
// with it; in its own process the broker survives the daemon's crashes.
// The broker refuses a data dir that was not closed cleanly (a SIGKILLed
// broker or daemon) unless forceUnclean (embedded.UncleanDataDirError).
func runBroker(ctx context.Context, cfg *pipeline.Config, forceUnclean bool, logger *slog.Logger) error {
	var opts []embedded.Option
	if forceUnclean {
		opts = append(opts, embedded.ForceUnclean())
	}
	b, err := embedded.Start(ctx, logger.With("component", "embedded-kafka"), cfg.Kafka.Embedded.Address,
		cfg.EmbeddedDataDir(), cfg.Kafka.Embedded.Partitions, cfg.Topics(), opts...)
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

// processSettings returns the Go runtime's GC percent (-1: off) and soft
// memory limit (math.MaxInt64: none) in effect.
func processSettings() (gcPercent int64, memoryLimit int64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64()), int64(s[1].Value.Uint64())
}

// checkSavepointDir checks, before anything starts (the embedded broker,
// topics, the data dir), that dir is a savepoint or checkpoint directory:
// it exists, is a directory and holds readable metadata
// (checkpoint.ReadMetadata); the restore verifies the rest. A dir that is
// no savepoint at all (missing, a file, no _metadata) is a bad command
// line, exit code 2; unreadable or corrupt metadata is a savepoint the job
// cannot start from, exit code 1 (README, Exit status).
func checkSavepointDir(dir string) (code int, err error) {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return 2, errors.New("no such directory")
	case err != nil:
		return 1, err
	case !fi.IsDir():
		return 2, errors.New("not a directory; want a savepoint or checkpoint (chk-<n>) directory")
	}
	if _, err := checkpoint.ReadMetadata(dir); errors.Is(err, os.ErrNotExist) {
		return 2, fmt.Errorf("not a savepoint or checkpoint directory: it has no %s file", checkpoint.MetadataFile)
	} else if err != nil {
		return 1, err
	}
	return 0, nil
}

// runJob starts the embedded broker (if enabled), the HTTP listener, the
// demo producer (if enabled) and the job, and stops them in reverse order
// when ctx ends, the job stops itself (stop-with-savepoint) or fails.
func runJob(ctx context.Context, cfg *pipeline.Config, fromSavepoint string, logger *slog.Logger) error {
	logger.Info("starting kstreamd", "version", Version, "job", cfg.Job.Name)
	defer cfg.ApplyProcess()()
	gcPercent, memLimit := processSettings()
	logger.Info("go runtime", "gc_percent", gcPercent, "memory_limit_bytes", memLimit)
	cfg.LogSecurity(logger.With("component", "kafka-client"))
	if cfg.Kafka.Embedded.Enabled {
		b, err := embedded.Start(ctx, logger.With("component", "embedded-kafka"), cfg.Kafka.Embedded.Address,
			cfg.EmbeddedDataDir(), cfg.Kafka.Embedded.Partitions, cfg.Topics())
		if err != nil {
			return err
		}
		defer b.Close()
	}
	if cfg.SchemaRegistry.Embedded.Enabled {
		r, err := embedded.StartSchemaRegistry(logger.With("component", "embedded-schema-registry"),
			cfg.SchemaRegistry.Embedded.Address, cfg.EmbeddedSchemaRegistryDataDir())
		if err != nil {
			return err
		}
		defer r.Close()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	token, err := cfg.BearerToken()
	if err != nil {
		return err
	}
	srv := &server{reg: reg, logger: logger, token: token, allowOpenControl: cfg.Metrics.AllowUnauthenticatedControl, cluster: cfg.Cluster.Enabled}
	stopHTTP, err := srv.serve(cfg.Metrics.Address)
	if err != nil {
		return err
	}
	defer stopHTTP()

	opts := append(cfg.ClientOptions(), kgo.WithLogger(kslog.New(kafkaLogger(cfg, logger))))
	if cfg.Cluster.Enabled {
		return runMember(ctx, cfg, fromSavepoint, srv, reg, opts, logger)
	}
	var wg sync.WaitGroup
	demoCtx, stopDemo := context.WithCancel(ctx)
	defer func() { stopDemo(); wg.Wait() }()
	startDemo := func() {
		if !cfg.Demo.Enabled {
			return
		}
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
	ran := false
	runner, err := pipeline.NewRunner(cfg, pipeline.Deps{Logger: logger, Registerer: reg, ClientOpts: opts, FromSavepoint: fromSavepoint},
		job.WithAttemptHook(func(j *job.Job) {
			srv.setJob(j)
			if j == nil {
				return
			}
			if !ran {
				ran = true
				startDemo() // once the first attempt is built: the brokers answer
			}
			logger.Info("job running", "job", cfg.Job.Name, "data_dir", filepath.Clean(cfg.DataDir), "restored_from", j.RestoredFrom())
		}))
	if err != nil {
		return err
	}
	err = runner.Run(ctx)
	if err != nil && !ran && ctx.Err() != nil {
		// SIGINT/SIGTERM while waiting for the brokers: a clean stop.
		logger.Info("stopped before the job started", "reason", err)
		return nil
	}
	if err == nil {
		logger.Info("job stopped cleanly", "job", cfg.Job.Name)
	}
	return err
}

// clusterStore returns the units' shared store of cluster.store: a
// checkpoint.FileStore in cluster.store.dir, or an S3 store whose
// credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
// (getenv); it refuses to start naming the variables missing.
func clusterStore(cfg *pipeline.Config, getenv func(string) string) (checkpoint.Store, error) {
	st := cfg.Cluster.Store
	if st.Kind != pipeline.StoreS3 {
		return checkpoint.FileStore{Root: st.Dir}, nil
	}
	ak, sk := getenv(pipeline.EnvS3AccessKey), getenv(pipeline.EnvS3SecretKey)
	var missing []string
	if ak == "" {
		missing = append(missing, pipeline.EnvS3AccessKey)
	}
	if sk == "" {
		missing = append(missing, pipeline.EnvS3SecretKey)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("sdk: cluster.store.kind is s3 but the environment does not set %s: the credentials of bucket %s at %s come from %s and %s",
			strings.Join(missing, " and "), st.S3.Bucket, st.S3.Endpoint, pipeline.EnvS3AccessKey, pipeline.EnvS3SecretKey)
	}
	return s3store.New(s3store.Config{
		Endpoint: st.S3.Endpoint, Bucket: st.S3.Bucket, Prefix: st.S3.Prefix, Region: st.S3.Region,
		TLS: st.S3.TLS, PathStyle: st.S3.PathStyle, AccessKey: ak, SecretKey: sk,
	})
}

// runMember runs the daemon as a member of a cluster-mode job
// (docs/scale-out.md): it runs the units the group assigns to it
// (job.RunMember) until ctx ends.
func runMember(ctx context.Context, cfg *pipeline.Config, fromSavepoint string, srv *server, reg *prometheus.Registry, opts []kgo.Opt, logger *slog.Logger) error {
	st, err := cfg.PlanStages()
	if err != nil {
		return err
	}
	member := cfg.Cluster.MemberID
	if member == "" {
		if member, err = os.Hostname(); err != nil {
			return fmt.Errorf("sdk: cluster.member_id is empty and the host name is unknown: %w", err)
		}
	}
	set := cfg.Settings()
	if set.Store, err = clusterStore(cfg, os.Getenv); err != nil {
		return err
	}
	set.CheckpointDir = cfg.ClusterStagingDir()
	cl := cfg.Cluster
	logger.Info("joining the cluster", "group", cfg.ClusterGroupID(), "member", member, "stages", len(st.Stages), "units", st.Units, "fingerprint", st.Fingerprint)
	srv.setClusterStop(func(ctx context.Context, dir string) (string, error) {
		// The units are drained and gathered here once every member
		// (this one too) stopped: metrics of a registry of their own.
		return job.StopClusterWithSavepoint(ctx, st, set, job.Deps{Logger: logger, Registerer: prometheus.NewRegistry(), ClientOpts: opts, Connectors: cfg.Connectors()},
			job.ClusterSavepointConfig{GroupID: cfg.ClusterGroupID(), Member: member, Dir: cmp.Or(dir, cfg.Checkpoints.SavepointDir)})
	})
	defer srv.awaitClusterStop() // a stop-with-savepoint asked of this daemon finishes before it exits
	err = job.RunMember(ctx, st, set, job.Deps{Logger: logger, Registerer: reg, ClientOpts: opts, Connectors: cfg.Connectors(), FromSavepoint: fromSavepoint}, job.MemberConfig{
		GroupID: cfg.ClusterGroupID(), MemberID: member,
		SessionTimeout: cl.SessionTimeout, RebalanceTimeout: cl.RebalanceTimeout, RevokeTimeout: cl.RevokeTimeout,
		TakeoverTimeout: cl.TakeoverTimeout, OnJoined: srv.setMember,
	})
	if err == nil {
		logger.Info("member stopped cleanly", "job", cfg.Job.Name)
	}
	return err
}
