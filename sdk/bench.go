package sdk

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/kstreamd/kstreamd/internal/bench"
	"github.com/kstreamd/kstreamd/internal/embedded"
)

const benchUsage = `usage: kstreamd bench [--scenario NAME | --all] [flags]

Runs a benchmark scenario as a real job against the embedded broker (started
in a child process) or --brokers, and prints one table; BENCHMARKS.md
explains it. Scenarios: %s; state-scaling (Pebble checkpoints and
restore of --keys keys, not part of --all); ttl-cleanup (a dedup of
--records unique ids, default 1,000,000, with --ttl: peak state, time to
under 1%% of it after the input stops, CPU per record with and without
background TTL cleanup; in process, not part of --all); and cluster (a
two-stage keyed job in cluster mode on --daemons daemon processes, not part
of --all).

flags:
`

// runBench is `kstreamd bench`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer, reg *Registry) int {
	fs := flag.NewFlagSet("kstreamd bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help := false
	fs.Usage = func() {
		if help {
			return // --help: printed on stdout below
		}
		fmt.Fprintf(stderr, benchUsage, bench.ScenarioNames())
		fs.PrintDefaults()
	}
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" || a == "--h" {
			help = true
		}
	}
	scenario := fs.String("scenario", "keyed-count-pebble", "the scenario `NAME` to run, or several comma-separated (copy,avro-copy): one table, each against the same run's pipe")
	all := fs.Bool("all", false, "run every scenario (not state-scaling) and print one table")
	delivery := fs.String("delivery", bench.ExactlyOnce, "the sinks' delivery: exactly-once, at-least-once, or both")
	records := fs.Int("records", 500_000, "`N` records pre-loaded for the throughput phase")
	keys := fs.Int("keys", 10_000, "`K` distinct keys")
	zipf := fs.Float64("zipf", 0, "Zipf exponent `S` (> 1) of the key distribution; 0 draws keys uniformly")
	partitions := fs.Int("partitions", 4, "partitions of every topic the bench creates")
	parallelism := fs.Int("parallelism", 2, "the job's parallelism")
	brokers := fs.String("brokers", "", "comma-separated seed brokers `HOST:PORT,...`; empty starts the embedded broker in a child process")
	interval := fs.Duration("interval", time.Second, "checkpoint interval (and the pipe's transaction interval)")
	latency := fs.Duration("latency-duration", 10*time.Second, "how long the latency phase produces (tumbling-window: at least two windows, 2s)")
	dir := fs.String("dir", "", "work `DIR` (job data, checkpoints, the embedded broker's log); empty means a temporary directory, removed at the end")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of each run's throughput phase to `FILE` (with --all or several deliveries, one file per run: FILE with -<scenario>-<delivery> before the extension; cluster: one of each daemon's whole run, FILE with -<n>d-<member> before the extension)")
	changed := fs.Float64("changed", 0.01, "state-scaling: fraction of the keys changed between checkpoints")
	rounds := fs.Int("rounds", 5, "state-scaling: incremental checkpoints measured")
	remoteState := fs.Bool("remote", false, "state-scaling and the pebble scenarios: the disaggregated pebble backend (state.remote), tables on a directory store")
	remoteCache := fs.Int64("remote-cache-bytes", 0, "--remote: local cache of remote blocks, bytes (0: 64 MiB, -1: none)")
	readLatency := fs.Duration("read-latency", 0, "--remote: delay added to every store read")
	blockCache := fs.Int64("block-cache-bytes", 0, "the pebble scenarios: state.block_cache_bytes (0: the 64 MiB default)")
	writeCache := fs.Int64("write-cache-bytes", 0, "the pebble scenarios: state.write_cache_bytes (0: the 16 MiB default, -1: none)")
	alignment := fs.String("watermark-alignment", "", "the input source's watermark_alignment: `off`, or a max_drift (e.g. 20ms); empty: the scenario's (interval-join: 20ms, the others none)")
	preload := fs.Bool("preload-state", false, "the pebble scenarios: before the measured run, a first run of the job writes one record of each of the --keys keys (no added read latency) and stops after a checkpoint; the measured run restores it and its records read stored keys")
	ttl := fs.Duration("ttl", 5*time.Second, "ttl-cleanup: the dedup's ttl")
	nexmarkRate := fs.Float64("nexmark-rate", bench.DefaultNexmarkRate, "nexmark-q*: events per second of event time of the pre-loaded Nexmark events (the nexmark project's first-event.rate)")
	daemons := fs.String("daemons", "1,2,3", "cluster: the daemon counts to measure, comma-separated")
	units := fs.Int("units", 6, "cluster: work units per stage (cluster.units)")
	pgDSN := fs.String("postgres-dsn", "", "postgres-sink: the PostgreSQL database (a postgres:// URL) each run writes a table of its own to")
	serve := fs.Bool("serve-broker", false, "internal: run only the embedded broker for a parent bench, until stdin closes")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // the usage, on stdout, as every command's --help
			fmt.Fprintf(stdout, benchUsage, bench.ScenarioNames())
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kstreamd bench: unexpected argument %q (flags only)\n", fs.Arg(0))
		return 2
	}
	if !(*nexmarkRate > 0) {
		fmt.Fprintf(stderr, "kstreamd bench: --nexmark-rate %v: want a positive rate\n", *nexmarkRate)
		return 2
	}
	if err := checkBenchFlags(*scenario, *all, *delivery, *zipf, *changed, *interval, *latency, map[string]int{
		"--records": *records, "--keys": *keys, "--partitions": *partitions, "--parallelism": *parallelism,
		"--rounds": *rounds, "--units": *units,
	}); err != nil {
		fmt.Fprintln(stderr, "kstreamd bench:", benchErr(err))
		return 2
	}
	if *preload {
		if err := checkPreload(*scenario, *all); err != nil {
			fmt.Fprintln(stderr, "kstreamd bench:", err)
			return 2
		}
	}
	if *scenario == bench.PostgresSinkScenario && !*all && *pgDSN == "" {
		fmt.Fprintln(stderr, "kstreamd bench: --scenario postgres-sink needs --postgres-dsn (a PostgreSQL database, e.g. postgres://user@127.0.0.1:5432/bench)")
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if *serve {
		return serveBroker(ctx, *dir, *partitions, stdout, logger)
	}
	workDir := *dir
	if workDir == "" {
		d, err := os.MkdirTemp("", "kstreamd-bench-")
		if err != nil {
			fmt.Fprintln(stderr, "kstreamd bench:", benchErr(err))
			return 1
		}
		defer os.RemoveAll(d)
		workDir = d
	} else if err := os.MkdirAll(workDir, 0o755); err != nil {
		fmt.Fprintln(stderr, "kstreamd bench:", benchErr(err))
		return 1
	}
	if *scenario == bench.TTLCleanupScenario && !*all {
		n := 1_000_000
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "records" {
				n = *records
			}
		})
		if err := bench.RunTTLCleanup(ctx, bench.TTLCleanupConfig{Records: n, TTL: *ttl, Dir: workDir}, stdout); err != nil {
			fmt.Fprintln(stderr, "kstreamd bench:", benchErr(err))
			return 1
		}
		return 0
	}
	if *scenario == bench.StateScalingScenario && !*all {
		err := bench.RunStateScaling(ctx, bench.StateScalingConfig{
			Keys: *keys, Changed: *changed, Rounds: *rounds, Dir: workDir, Logger: slog.New(slog.NewTextHandler(stderr, nil)),
			CPUProfile: *cpuprofile, Remote: *remoteState, RemoteCacheBytes: *remoteCache, ReadLatency: *readLatency,
		}, stdout)
		if err != nil {
			fmt.Fprintln(stderr, "kstreamd bench:", benchErr(err))
			return 1
		}
		return 0
	}
	if *scenario == bench.ClusterScenario && !*all {
		var counts []int
		for _, s := range strings.Split(*daemons, ",") {
			var n int
			if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil || n < 1 {
				fmt.Fprintf(stderr, "kstreamd bench: --daemons %q: want positive counts like 1,2,3\n", *daemons)
				return 2
			}
			counts = append(counts, n)
		}
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(stderr, "kstreamd bench:", benchErr(err))
			return 1
		}
		ccfg := bench.ClusterConfig{
			Binary: exe, Daemons: counts, Records: *records, Keys: *keys, Partitions: *partitions, Units: *units,
			CheckpointInterval: *interval, LatencyDuration: *latency, Dir: workDir, Progress: stderr, CPUProfile: *cpuprofile,
		}
		bs, stop, err := benchBrokers(ctx, *brokers, workDir, *partitions)
		if err != nil {
			fmt.Fprintln(stderr, "kstreamd bench:", benchErr(err))
			return 1
		}
		defer stop()
		ccfg.Brokers = bs
		fmt.Fprintf(stderr, "kstreamd bench: cluster: %d records over %d keys, %d partitions, %d units per stage, daemons %s, brokers %s\n",
			*records, *keys, *partitions, *units, *daemons, strings.Join(ccfg.Brokers, ","))
		if _, err := bench.RunCluster(ctx, ccfg, stdout); err != nil {
			fmt.Fprintln(stderr, "kstreamd bench:", benchErr(err))
			return 1
		}
		return 0
	}
	cfg := bench.Config{
		Scenarios: strings.Split(*scenario, ","), Deliveries: []string{*delivery}, Records: *records, Keys: *keys, Zipf: *zipf,
		Partitions: *partitions, Parallelism: *parallelism, CheckpointInterval: *interval, LatencyDuration: *latency,
		Dir: workDir, Registry: reg.Registry, Connectors: reg.Connectors, Logger: logger, Progress: stderr, CPUProfile: *cpuprofile, NexmarkRate: *nexmarkRate,
		PostgresDSN: *pgDSN, RemoteState: *remoteState, RemoteCacheBytes: *remoteCache, ReadLatency: *readLatency, BlockCacheBytes: *blockCache,
		WriteCacheBytes: *writeCache, PreloadState: *preload, WatermarkAlignment: *alignment,
	}
	if *all {
		cfg.Scenarios = nil
		for _, s := range bench.Scenarios {
			if s.Postgres && *pgDSN == "" {
				fmt.Fprintf(stderr, "kstreamd bench: --all without --postgres-dsn: %s not run\n", s.Name)
				continue
			}
			cfg.Scenarios = append(cfg.Scenarios, s.Name)
		}
	}
	if *delivery == "both" {
		cfg.Deliveries = []string{bench.ExactlyOnce, bench.AtLeastOnce}
	}
	bs, stop, err := benchBrokers(ctx, *brokers, workDir, *partitions)
	if err != nil {
		fmt.Fprintln(stderr, "kstreamd bench:", benchErr(err))
		return 1
	}
	defer stop()
	cfg.Brokers = bs
	what := fmt.Sprintf("%d records over %d keys", *records, *keys)
	if s, _ := bench.ScenarioByName(*scenario); s.Nexmark != "" && !*all {
		what = fmt.Sprintf("%d Nexmark events at %v events/s of event time", *records, *nexmarkRate)
	}
	fmt.Fprintf(stderr, "kstreamd bench: %s, %d partitions, parallelism %d, brokers %s\n",
		what, *partitions, *parallelism, strings.Join(cfg.Brokers, ","))
	res, err := bench.Run(ctx, cfg)
	if len(res) > 0 {
		_ = bench.WriteTable(stdout, res)
	}
	if err != nil {
		fmt.Fprintln(stderr, "kstreamd bench:", benchErr(err))
		return 1
	}
	return 0
}

// checkPreload refuses --preload-state unless every scenario of --scenario
// takes it (bench.Scenario.CheckPreload; not with --all or the scenarios
// run in process of their own).
func checkPreload(scenario string, all bool) error {
	if all {
		return errors.New("--preload-state: not with --all (only the pebble scenarios take it)")
	}
	for _, n := range strings.Split(scenario, ",") {
		s, ok := bench.ScenarioByName(n)
		if !ok {
			return fmt.Errorf("--preload-state: scenario %s does not take it (only the pebble scenarios)", n)
		}
		if err := s.CheckPreload(); err != nil {
			return fmt.Errorf("--preload-state: %w", err)
		}
	}
	return nil
}

// checkBenchFlags refuses flag values bench cannot honour: the library
// configs take a zero or negative count as "use the default", so an
// explicit --records 0 would silently run the default number while the
// header printed 0. counts maps a flag's name to its value, each of which
// must be >= 1. scenario must name a scenario (unless all), delivery be
// exactly-once, at-least-once or both, zipf be 0 (uniform) or > 1, changed
// be in (0, 1], and the durations be positive. The error names the flag.
func checkBenchFlags(scenario string, all bool, delivery string, zipf, changed float64, interval, latency time.Duration, counts map[string]int) error {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if v := counts[n]; v < 1 {
			return fmt.Errorf("%s %d: want a positive count", n, v)
		}
	}
	if !all && scenario != bench.StateScalingScenario && scenario != bench.ClusterScenario && scenario != bench.TTLCleanupScenario {
		for _, n := range strings.Split(scenario, ",") {
			if _, ok := bench.ScenarioByName(n); !ok {
				return fmt.Errorf("--scenario %q: unknown (known: %s, %s, %s, %s)", n, bench.ScenarioNames(), bench.StateScalingScenario, bench.TTLCleanupScenario, bench.ClusterScenario)
			}
		}
	}
	if delivery != bench.ExactlyOnce && delivery != bench.AtLeastOnce && delivery != "both" {
		return fmt.Errorf("--delivery %q: want %s, %s or both", delivery, bench.ExactlyOnce, bench.AtLeastOnce)
	}
	if zipf != 0 && !(zipf > 1) {
		return fmt.Errorf("--zipf %v: want an exponent > 1, or 0 for uniform keys", zipf)
	}
	if !(changed > 0 && changed <= 1) {
		return fmt.Errorf("--changed %v: want a fraction in (0, 1]", changed)
	}
	if interval <= 0 {
		return fmt.Errorf("--interval %v: want a positive duration", interval)
	}
	if latency <= 0 {
		return fmt.Errorf("--latency-duration %v: want a positive duration", latency)
	}
	return nil
}

// benchErr is err for a "kstreamd bench:" line: without the "bench: "
// prefix the bench package's errors start with, so it is not said twice.
func benchErr(err error) string {
	return strings.TrimPrefix(err.Error(), "bench: ")
}

// brokerReady is the line a --serve-broker child prints once it listens.
const brokerReady = "kstreamd bench broker listening on "

// benchBrokers returns the brokers of a bench run: the comma-separated
// list given by --brokers, or else the address of an embedded broker it
// starts under workDir/broker with partitions partitions per topic; stop
// ends that broker (nothing for given brokers).
func benchBrokers(ctx context.Context, given, workDir string, partitions int) (brokers []string, stop func(), err error) {
	if given != "" {
		return strings.Split(given, ","), func() {}, nil
	}
	addr, stop, err := spawnBroker(ctx, workDir+"/broker", partitions)
	if err != nil {
		return nil, nil, err
	}
	return []string{addr}, stop, nil
}

// spawnBroker starts this executable as `kstreamd bench --serve-broker` and
// returns the broker's address and a stop function, which closes the
// child's stdin (its signal to stop) and waits for it.
func spawnBroker(ctx context.Context, dir string, partitions int) (string, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, fmt.Errorf("start the embedded broker: %w", err)
	}
	cmd := exec.Command(exe, "bench", "--serve-broker", "--dir", dir, "--partitions", fmt.Sprint(partitions))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start the embedded broker: %w", err)
	}
	stop := func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), brokerReady); ok {
				line <- a
			}
		}
		close(line)
	}()
	select {
	case a, ok := <-line:
		if !ok {
			stop()
			return "", nil, errors.New("the embedded broker exited before listening")
		}
		return a, stop, nil
	case <-ctx.Done():
		stop()
		return "", nil, ctx.Err()
	case <-time.After(time.Minute):
		stop()
		return "", nil, errors.New("the embedded broker did not start within 1m")
	}
}

// serveBroker runs the embedded broker on a free port of 127.0.0.1 until
// stdin closes or ctx ends, printing brokerReady and its address first.
func serveBroker(ctx context.Context, dir string, partitions int, stdout io.Writer, logger *slog.Logger) int {
	if dir == "" {
		fmt.Fprintln(os.Stderr, "kstreamd bench --serve-broker: --dir is required")
		return 2
	}
	b, err := embedded.Start(ctx, logger, "127.0.0.1:0", dir, partitions, nil)
	if err != nil {
		logger.Error("broker failed", "err", err)
		return 1
	}
	defer b.Close()
	fmt.Fprintln(stdout, brokerReady+b.Addrs()[0])
	eof := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(eof) }()
	select {
	case <-eof:
	case <-ctx.Done():
	}
	return 0
}

// startCPUProfile starts a CPU profile into path; the returned function
// stops it.
func startCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
