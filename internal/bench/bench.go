// Package bench is `kstreamd bench`: it measures kstreamd's jobs against the
// broker's own limit on the same data. It pre-loads generated JSON records
// into a topic, runs one scenario (Scenarios) as a real job, built the way
// `kstreamd run` builds one (pipeline.Parse, pipeline.Build, Job.Run, in
// this process), until every result is committed and visible to a
// read_committed reader, then produces at half the measured rate to
// measure the end-to-end latency. The broker's limit is a plain franz-go
// consume-then-produce pipe over the same data (with transactions every
// checkpoint interval when the delivery is exactly-once), measured in the
// same run; every scenario is reported as a ratio to it.
//
// The broker should run in another process (the CLI starts the embedded
// one in a child process, or uses --brokers), so the CPU and memory
// measured are kstreamd's: getrusage of this process, whose clients (the
// loader, the reader, the latency producer) are idle while the throughput
// phase is measured. BENCHMARKS.md explains the table.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/pipeline"
)

// Deliveries a run may measure (the sinks' delivery values, spelled as
// in the config).
const (
	ExactlyOnce = string(pipeline.DeliveryExactlyOnce)
	AtLeastOnce = string(pipeline.DeliveryAtLeastOnce)
)

// PipeScenario is the name of the broker's-limit row of the table.
const PipeScenario = "pipe"

// Config configures Run. Zero values take the defaults stated.
type Config struct {
	// Brokers are the seed brokers. Required.
	Brokers []string
	// Scenarios are the names of the scenarios to run, in order (see
	// Scenarios). Required.
	Scenarios []string
	// Deliveries are the delivery guarantees to run each scenario with,
	// ExactlyOnce and/or AtLeastOnce. Default [ExactlyOnce].
	Deliveries []string
	// Records is the number of records pre-loaded for the throughput phase.
	// Default 500,000.
	Records int
	// Keys is the number of distinct keys. Default 10,000.
	Keys int
	// Zipf, when > 1, draws keys from a Zipf distribution with this
	// exponent (key 0 the hottest); 0 draws them uniformly. Default 0;
	// any other value is an error of Run.
	Zipf float64
	// Partitions of each topic the bench creates. Default 4.
	Partitions int
	// Parallelism is the job's parallelism. Default 2.
	Parallelism int
	// CheckpointInterval is the jobs' checkpoint interval and the pipe's
	// transaction interval. Default 1s.
	CheckpointInterval time.Duration
	// LatencyDuration is how long the latency phase produces. Default 10s.
	LatencyDuration time.Duration
	// Dir is the work directory (job data, checkpoints, state); each run
	// removes its own part. Required.
	Dir string
	// Registry holds the operator types. Default the built-in ones.
	Registry *operators.Registry
	// Connectors holds the source, sink and format types. Default the
	// built-in ones.
	Connectors *connector.Registry
	// Logger receives the jobs' logs. Default discard.
	Logger *slog.Logger
	// NexmarkRate is the Nexmark scenarios' event rate, events per second
	// of event time, for the pre-loaded events (the latency phase's events
	// follow the wall clock). Default DefaultNexmarkRate.
	NexmarkRate float64
	// Progress, if not nil, gets one line per run as it finishes.
	Progress io.Writer
	// CPUProfile, if not empty, writes a CPU profile of each run's
	// throughput phase: to this path when there is one run, else with
	// "-<scenario>-<delivery>" inserted before the extension.
	CPUProfile string
	// PostgresDSN is the database the postgres-sink scenario writes a
	// table of its own to (created and dropped by each run); required
	// when that scenario runs.
	PostgresDSN string
	// RemoteState runs the scenarios on the pebble backend disaggregated
	// (state.remote on the filesystem store: tables under the job's
	// checkpoint directory), with RemoteCacheBytes as its local cache
	// (state.remote.cache_bytes: 0 the 64 MiB default, -1 none) and
	// ReadLatency added to every store read (state.remote.read_latency).
	// Scenarios on the hashmap backend are not changed.
	RemoteState      bool
	RemoteCacheBytes int64
	ReadLatency      time.Duration
	// BlockCacheBytes, when > 0, is state.block_cache_bytes (the pebble
	// block cache of the job's process); 0 keeps the 64 MiB default.
	// WriteCacheBytes, when not 0, is state.write_cache_bytes (-1: no
	// write cache).
	BlockCacheBytes, WriteCacheBytes int64
	// PreloadState writes every key's state before the measured run, so
	// the measured records read stored keys: a first run of the job (with
	// no added read latency) consumes one record of each of the Keys keys
	// and is stopped two checkpoints after their outputs are committed;
	// the measured run is the same job restarted, which restores that
	// checkpoint (by reference on remote state: the keys are in the
	// store's tables, the caches cold) and then reads the Records records.
	// Their outputs count as expected outputs too. Only the pebble
	// scenarios whose model counts every output (not Nexmark, not the
	// rules scenarios) take it (Run fails otherwise).
	PreloadState bool
	// WatermarkAlignment, when not empty, replaces the scenarios' input
	// source watermark_alignment: "off" for none, else a max_drift (e.g.
	// "20ms"). Empty keeps each scenario's (Scenario.WatermarkAlignment).
	WatermarkAlignment string
}

// alignment returns the watermark_alignment of scenario s's input source
// in this run (Config.WatermarkAlignment), "" for none.
func (c *Config) alignment(s *Scenario) string {
	switch c.WatermarkAlignment {
	case "":
		return s.WatermarkAlignment
	case "off":
		return ""
	}
	return fmt.Sprintf("{max_drift: %s}", c.WatermarkAlignment)
}

// stateYAML returns the lines of the state section after its backend for
// a scenario on backend (indented two spaces), from the config's state
// tuning; "" for none.
func (c *Config) stateYAML(backend string) string {
	if backend != "pebble" {
		return ""
	}
	var b strings.Builder
	if c.BlockCacheBytes > 0 {
		fmt.Fprintf(&b, "  block_cache_bytes: %d\n", c.BlockCacheBytes)
	}
	if c.WriteCacheBytes != 0 {
		fmt.Fprintf(&b, "  write_cache_bytes: %d\n", c.WriteCacheBytes)
	}
	if c.RemoteState {
		fmt.Fprintf(&b, "  remote:\n    cache_bytes: %d\n    read_latency: %s\n", c.RemoteCacheBytes, c.ReadLatency)
	}
	return b.String()
}

func (c *Config) setDefaults() {
	if len(c.Deliveries) == 0 {
		c.Deliveries = []string{ExactlyOnce}
	}
	if c.Records <= 0 {
		c.Records = 500_000
	}
	if c.Keys <= 0 {
		c.Keys = 10_000
	}
	if c.Partitions <= 0 {
		c.Partitions = 4
	}
	if c.Parallelism <= 0 {
		c.Parallelism = 2
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = time.Second
	}
	if c.LatencyDuration <= 0 {
		c.LatencyDuration = 10 * time.Second
	}
	if c.NexmarkRate <= 0 {
		c.NexmarkRate = DefaultNexmarkRate
	}
	if c.Registry == nil {
		c.Registry = operators.NewBuiltinRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Result is one row of the table: one scenario with one delivery.
type Result struct {
	Scenario, Delivery string
	// Records is the number of records of the throughput phase, Elapsed
	// the time from the job's start until all their outputs were
	// committed, RecordsPerSec their ratio.
	Records       int64
	Elapsed       time.Duration
	RecordsPerSec float64
	// Ratio is RecordsPerSec over the pipe's with the same delivery.
	Ratio float64
	// ProcElapsed is the time from the job's start until its sink had
	// written the outputs of every record of the throughput phase (into
	// its open transaction, or handed to the producer at-least-once):
	// the records processed end to end, the commit that Elapsed waits for
	// excluded. It is the first sample of the wait loop (every 20 ms) at
	// which the sink's kstreamd_operator_records_in_total reached the
	// expected outputs (and, for a scenario with Processed, that operator
	// had received every record); for the pipe, the first at which its
	// producer had been handed the last record. ProcRecordsPerSec is
	// Records over it, ProcRatio that over the pipe's of the same
	// delivery. All three are 0 where the end is not a count of outputs
	// (a query whose count is only a lower bound, ExpectedAtLeast).
	ProcElapsed       time.Duration
	ProcRecordsPerSec float64
	ProcRatio         float64
	// CPUPerMillion is the process's CPU time (user + system) in the
	// throughput phase per million records.
	CPUPerMillion time.Duration
	// PeakRSSBytes is the process's peak resident set over both phases.
	PeakRSSBytes int64
	// Checkpoints completed over both phases (0 for the pipe), with the
	// median and largest trigger-to-commit time and bytes written (the
	// metadata's count of state files plus the _metadata file itself).
	Checkpoints                            int
	CheckpointP50, CheckpointMax           time.Duration
	CheckpointBytesP50, CheckpointBytesMax int64
	// Rate is the input rate of the latency phase (records/s), and
	// LatencyP50/P99 the time from a record's timestamp (its produce time)
	// to the moment a read_committed reader received its output.
	Rate                   float64
	LatencyP50, LatencyP99 time.Duration
	// Outputs is what the read_committed reader counted over both phases;
	// Expected what the scenario's model says it must be.
	Outputs, Expected int64
	// ExpectedAtLeast says Expected is a lower bound: the query's count of
	// outputs depends on the order in which its operator received the
	// partitions' records (a keep-last dedup, a top-N); its final table,
	// not the count, is checked exactly.
	ExpectedAtLeast bool
	// ValuesChecked says the scenario's model gives the outputs' values
	// (the Nexmark queries) and the run compared them with the committed
	// ones: as multisets, or, for an updating query (an upsert stream), the
	// last value of each key with the model's table. ValuesDiff is empty
	// when they were equal, else what differed.
	ValuesChecked bool
	ValuesDiff    string
	// SkewSamples, for a scenario whose input has event times
	// (EventRatePerKey), are the samples taken every 50 ms of the
	// throughput phase of the input's watermark skew: the largest minus
	// the least of its partitions' largest emitted event times
	// (kstreamd_source_partition_event_time_ms), how far the leading
	// partition runs ahead of the one the watermark waits for;
	// SkewP50/P90/Max their median, 90th percentile and largest.
	// WriteTable prints them below the table.
	SkewSamples               int
	SkewP50, SkewP90, SkewMax time.Duration
}

// ErrOutputMismatch is wrapped by Run's error when a run's committed output
// count differs from the expected one, or their values from the model's.
var ErrOutputMismatch = errors.New("bench: committed outputs differ from the expected count")

// Run runs every scenario of cfg with every delivery, each delivery's pipe
// first, and returns the rows in order: per delivery, the pipe, then the
// scenarios. It fails on the first run that fails; a count mismatch does
// not stop it, and the returned error wraps ErrOutputMismatch.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	cfg.setDefaults()
	if len(cfg.Brokers) == 0 || cfg.Dir == "" {
		return nil, errors.New("bench: brokers and dir are required")
	}
	var scenarios []Scenario
	for _, n := range cfg.Scenarios {
		s, ok := ScenarioByName(n)
		if !ok {
			return nil, fmt.Errorf("bench: unknown scenario %q (known: %s)", n, ScenarioNames())
		}
		scenarios = append(scenarios, s)
	}
	for _, d := range cfg.Deliveries {
		if d != ExactlyOnce && d != AtLeastOnce {
			return nil, fmt.Errorf("bench: unknown delivery %q (exactly-once or at-least-once)", d)
		}
	}
	if cfg.Zipf != 0 && !(cfg.Zipf > 1) {
		return nil, fmt.Errorf("bench: Zipf exponent %v: want > 1, or 0 for uniform keys", cfg.Zipf)
	}
	for _, s := range scenarios {
		if cfg.PreloadState {
			if err := s.CheckPreload(); err != nil {
				return nil, fmt.Errorf("bench: %w", err)
			}
		}
		if s.Postgres && cfg.PostgresDSN == "" {
			return nil, fmt.Errorf("bench: scenario %s needs a PostgreSQL database (Config.PostgresDSN, --postgres-dsn)", s.Name)
		}
	}
	r := &runner{cfg: cfg, suffix: fmt.Sprintf("%x", time.Now().UnixNano()%0xffffff), nexmarkPipe: nexmarkOnly(scenarios)}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		return nil, fmt.Errorf("bench: kafka client: %w", err)
	}
	defer cl.Close()
	r.adm = kadm.NewClient(cl)
	runs := len(cfg.Deliveries) * (len(scenarios) + 1)
	var out []Result
	var mismatch []string
	for _, d := range cfg.Deliveries {
		pipe, err := r.run(ctx, nil, d, runs)
		if err != nil {
			return out, err
		}
		pipe.Ratio = 1
		if pipe.ProcRecordsPerSec > 0 {
			pipe.ProcRatio = 1
		}
		out = append(out, pipe)
		r.progress(pipe)
		for i := range scenarios {
			if scenarios[i].FileSink && d != ExactlyOnce {
				continue // the file sink is exactly-once only
			}
			res, err := r.run(ctx, &scenarios[i], d, runs)
			if err != nil {
				return out, err
			}
			if pipe.RecordsPerSec > 0 {
				res.Ratio = res.RecordsPerSec / pipe.RecordsPerSec
			}
			if pipe.ProcRecordsPerSec > 0 && res.ProcRecordsPerSec > 0 {
				res.ProcRatio = res.ProcRecordsPerSec / pipe.ProcRecordsPerSec
			}
			out = append(out, res)
			r.progress(res)
		}
	}
	for _, res := range out {
		if res.Outputs != res.Expected && !(res.ExpectedAtLeast && res.Outputs > res.Expected) {
			mismatch = append(mismatch, fmt.Sprintf("%s/%s: %d committed, %d expected", res.Scenario, res.Delivery, res.Outputs, res.Expected))
		} else if res.ValuesDiff != "" {
			mismatch = append(mismatch, fmt.Sprintf("%s/%s: values differ: %s", res.Scenario, res.Delivery, res.ValuesDiff))
		}
	}
	if len(mismatch) > 0 {
		return out, fmt.Errorf("%w: %s", ErrOutputMismatch, strings.Join(mismatch, "; "))
	}
	return out, nil
}

// nexmarkOnly says whether scenarios are Nexmark queries, all of them
// (and at least one).
func nexmarkOnly(scenarios []Scenario) bool {
	for _, s := range scenarios {
		if s.Nexmark == "" {
			return false
		}
	}
	return len(scenarios) > 0
}

type runner struct {
	cfg    Config
	adm    *kadm.Client
	suffix string
	// nexmarkPipe: every scenario of the run is a Nexmark query, so the
	// pipe copies the same Nexmark events (vs_pipe compares like with
	// like); otherwise it copies the Generator's items.
	nexmarkPipe bool
}

func (r *runner) progress(res Result) {
	if r.cfg.Progress != nil {
		check := ""
		if res.ValuesChecked && res.ValuesDiff == "" {
			check = ", values equal to the model's"
		} else if res.ValuesChecked {
			check = ", values differ: " + res.ValuesDiff
		}
		fmt.Fprintf(r.cfg.Progress, "bench: %s %s: %.0f records/s, %d/%d outputs%s\n", res.Scenario, res.Delivery, res.RecordsPerSec, res.Outputs, res.Expected, check)
	}
}

// target is what a run measures: a kstreamd job or the pipe.
type target interface {
	// run runs until ctx ends.
	run(ctx context.Context) error
	// committed returns the outputs committed so far.
	committed() int64
	// written returns the outputs written so far: handed to the sink's
	// producer, into its open transaction (exactly-once) or to be
	// acknowledged (at-least-once), committed or not. It is never below
	// committed.
	written() int64
	// checkpoints returns the checkpoints completed so far.
	checkpoints() []checkpointStat
}

type checkpointStat struct {
	dur   time.Duration
	bytes int64
}

// run measures one scenario (nil: the pipe) with one delivery.
func (r *runner) run(ctx context.Context, s *Scenario, delivery string, runs int) (res Result, err error) {
	cfg := r.cfg
	name := PipeScenario
	model := Model(modelFunc(func(Item) int { return 1 }))
	if s != nil {
		name, model = s.Name, s.NewModel(cfg.Partitions)
	}
	values, _ := model.(*valueCheck) // nil: only the count is checked
	tab, _ := model.(*tableCheck)
	processed, err := newProcessedCount(s, model)
	if err != nil {
		return res, err
	}
	if processed != nil {
		model = processed
	}
	short := map[string]string{ExactlyOnce: "eo", AtLeastOnce: "alo"}[delivery]
	base := "bench-" + name + "-" + short + "-" + r.suffix
	in, out, rules := base+"-in", base+"-out", base+"-rules"
	topics := []string{in, out}
	if s != nil && s.hasRules() {
		topics = append(topics, rules)
	}
	res = Result{Scenario: name, Delivery: delivery, Records: int64(cfg.Records)}
	if _, err := r.adm.CreateTopics(ctx, int32(cfg.Partitions), 1, nil, topics...); err != nil {
		return res, fmt.Errorf("bench: create topics: %w", err)
	}
	dataDir := filepath.Join(cfg.Dir, base)
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = r.adm.DeleteTopics(dctx, topics...)
		_ = os.RemoveAll(dataDir)
	}()

	// Load.
	prod, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), // partitionOf, which the models see
		kgo.MaxBufferedRecords(100_000), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		return res, err
	}
	defer prod.Close()
	var gen itemSource = NewGenerator(cfg.Keys, cfg.Zipf)
	if s != nil && s.Nexmark != "" || s == nil && r.nexmarkPipe {
		gen = newNexmarkSource(cfg.Records, cfg.NexmarkRate, time.Now())
	}
	if s != nil && s.EventRatePerKey > 0 {
		gen = newEventTimed(NewGenerator(cfg.Keys, cfg.Zipf), cfg.Records, s.EventRatePerKey*int64(cfg.Keys), time.Now())
	}
	var av *avroRun
	if s != nil && s.Avro {
		if av, err = startAvroRun(ctx, cfg.Logger, in, out); err != nil {
			return res, err
		}
		defer av.close()
		gen = avroItems{itemSource: gen, a: av}
	}
	var exp0 int64 // the preload's outputs
	if s != nil && cfg.PreloadState {
		if exp0, err = r.preload(ctx, s, prod, base, dataDir, in, rules, out, delivery, model); err != nil {
			return res, err
		}
	}
	exp1, err := load(ctx, prod, in, cfg.Partitions, gen, model, cfg.Records)
	if err != nil {
		return res, err
	}
	if s != nil && len(s.Rules) > 0 {
		var recs []*kgo.Record
		for _, rl := range s.Rules {
			v := fmt.Sprintf(`{"name":%q,"first":%q,"second":%q}`, rl.Name, rl.First, rl.Second)
			recs = append(recs, &kgo.Record{Topic: rules, Key: []byte(rl.Name), Value: []byte(v)})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return res, fmt.Errorf("bench: produce rules: %w", err)
		}
	}
	if s != nil && len(s.RuleRecords) > 0 {
		var recs []*kgo.Record
		for _, rr := range s.RuleRecords {
			recs = append(recs, &kgo.Record{Topic: rules, Key: []byte(rr.Key), Value: []byte(rr.Value)})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return res, fmt.Errorf("bench: produce rules: %w", err)
		}
	}

	if s != nil && s.Postgres {
		drop, err := pgCreateTable(ctx, cfg.PostgresDSN, pgTable(base))
		if err != nil {
			return res, err
		}
		defer drop()
	}

	// Build.
	var t target
	if s == nil {
		t = &pipe{brokers: cfg.Brokers, in: in, out: out, txnID: base, txn: delivery == ExactlyOnce, interval: cfg.CheckpointInterval}
	} else {
		t, err = r.buildJob(ctx, s, base, dataDir, in, rules, out, delivery, av)
		if err != nil {
			return res, err
		}
	}

	done1, progress1 := func() bool { return t.committed() >= exp1 }, t.committed
	processedAll := func() bool { return true }
	if processed != nil {
		done1, progress1 = processed.waitOn(t, exp1)
		want := processed.n
		processedAll = func() bool {
			jt, ok := t.(*jobTarget)
			return ok && jt.received(processed.operator) >= want
		}
	}
	// The records processed end to end (proc_rec/s): sampled by done1's
	// calls, before the commit is looked at, so that it never comes after
	// the end of Elapsed.
	var procElapsed time.Duration
	var t0 time.Time
	if tab == nil || !tab.atLeast {
		commitDone := done1
		done1 = func() bool {
			if procElapsed == 0 && t.written() >= exp1 && processedAll() {
				procElapsed = time.Since(t0)
			}
			if !commitDone() {
				return false
			}
			if procElapsed == 0 {
				// The last records arrived between the two looks:
				// committed implies written (and received, checked).
				procElapsed = time.Since(t0)
			}
			return true
		}
	}

	// Throughput phase.
	runtime.GC()
	debug.FreeOSMemory()
	rss := newRSSMeter()
	stopProfile, err := r.startProfile(name, delivery, runs)
	if err != nil {
		return res, err
	}
	cpu0 := cpuTime()
	t0 = time.Now()
	job := goBackground(ctx, t.run)
	defer job.stop()
	if err := r.waitFor(ctx, job, rss, done1, fmt.Sprintf("%s %s: %d outputs", name, delivery, exp1), progress1); err != nil {
		stopProfile()
		return res, err
	}
	res.Elapsed, res.CPUPerMillion = time.Since(t0), cpuTime()-cpu0
	stopProfile()
	res.RecordsPerSec = float64(cfg.Records) / res.Elapsed.Seconds()
	res.CPUPerMillion = time.Duration(float64(res.CPUPerMillion) * 1e6 / float64(cfg.Records))
	if jt, ok := t.(*jobTarget); ok && jt.skewParts > 0 {
		if sk := jt.takeSkew(); len(sk) > 0 {
			slices.Sort(sk)
			res.SkewSamples = len(sk)
			res.SkewP50, res.SkewP90, res.SkewMax = sk[len(sk)/2], sk[len(sk)*9/10], sk[len(sk)-1]
		}
	}
	if procElapsed > 0 {
		res.ProcElapsed = procElapsed
		res.ProcRecordsPerSec = float64(cfg.Records) / res.ProcElapsed.Seconds()
	}

	// Latency phase: a reader of every committed output (counting the
	// first phase's too), and a producer at half the measured rate.
	kr := &reader{brokers: cfg.Brokers, topic: out, phase2: time.Now().Truncate(time.Millisecond)}
	if values != nil {
		kr.values = newMultiset()
	}
	if tab != nil {
		kr.table = newTable()
	}
	if av != nil {
		kr.decode = av.decode
	}
	var rd outputReader = kr
	if s != nil && s.FileSink {
		rd = &fileReader{dir: fileSinkDir(dataDir), phase2: time.Now().Truncate(time.Millisecond), seen: map[string]bool{}}
	}
	if s != nil && s.Postgres {
		rd = &pgReader{dsn: cfg.PostgresDSN, table: pgTable(base), phase2: time.Now().Truncate(time.Millisecond)}
	}
	rdr := goBackground(ctx, rd.run)
	defer rdr.stop()
	res.Rate = max(1, res.RecordsPerSec/2)
	exp2, err := produceAt(ctx, prod, in, cfg.Partitions, gen, model, res.Rate, latencyPhase(cfg, s), rss)
	if err != nil {
		return res, err
	}
	// Both phases' outputs together: a window the first phase's items
	// opened may close in the second.
	want := func() bool { return rd.count() >= exp0+exp1+exp2 }
	if err := r.waitFor(ctx, rdr, rss, want, fmt.Sprintf("%s %s: read %d+%d+%d outputs", name, delivery, exp0, exp1, exp2), rd.count); err != nil {
		return res, err
	}
	// Anything beyond the expected count (duplicates) arrives with it; wait
	// a little for stragglers before counting.
	select {
	case <-time.After(500 * time.Millisecond):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	var want2 wantTable
	if tab != nil {
		if want2, err = prepare(tab.m.Final()); err != nil {
			return res, err
		}
		if tab.atLeast {
			res.ExpectedAtLeast = true
			if err := r.awaitSettled(ctx, job, rss, t, processed, name); err != nil {
				return res, err
			}
			if err := kr.settle(ctx, want2, settleQuiet(cfg.CheckpointInterval)); err != nil {
				return res, err
			}
		}
	}
	if err := rdr.stop(); err != nil {
		return res, err
	}
	res.Outputs, res.Expected = rd.count(), exp0+exp1+exp2
	if values != nil {
		res.ValuesChecked, res.ValuesDiff = true, kr.values.diff(values.want)
	}
	if tab != nil {
		res.ValuesChecked, res.ValuesDiff = true, kr.table.diffWant(want2)
	}
	if s != nil && s.Postgres {
		if res.ValuesDiff, err = pgCheck(ctx, cfg.PostgresDSN, pgTable(base), res.Expected); err != nil {
			return res, err
		}
		res.ValuesChecked = true
	}
	lat := rd.latencies()
	res.LatencyP50, res.LatencyP99 = quantile(lat, 0.5), quantile(lat, 0.99)
	res.PeakRSSBytes = rss.Peak()
	if err := job.stop(); err != nil {
		return res, fmt.Errorf("bench: %s %s: %w", name, delivery, err)
	}
	res.Checkpoints, res.CheckpointP50, res.CheckpointMax, res.CheckpointBytesP50, res.CheckpointBytesMax = summarize(t.checkpoints())
	return res, nil
}

// preload is Config.PreloadState for scenario s: it produces one record
// of each key (through the model) to in, runs the job on them with no
// added read latency until their outputs are committed and two more
// checkpoints completed (the first may have been triggered before the
// last record), and stops it. It returns the outputs the model expects of
// them.
func (r *runner) preload(ctx context.Context, s *Scenario, prod *kgo.Client, base, dataDir, in, rules, out, delivery string, model Model) (int64, error) {
	exp, err := load(ctx, prod, in, r.cfg.Partitions, &everyKey{g: NewGenerator(r.cfg.Keys, 0)}, model, r.cfg.Keys)
	if err != nil {
		return 0, err
	}
	warm := *r
	warm.cfg.ReadLatency = 0
	t, err := warm.buildJob(ctx, s, base, dataDir, in, rules, out, delivery, nil)
	if err != nil {
		return 0, err
	}
	job := goBackground(ctx, t.run)
	defer job.stop()
	rss := newRSSMeter()
	what := fmt.Sprintf("%s %s: preload of %d keys", s.Name, delivery, r.cfg.Keys)
	if err := r.waitFor(ctx, job, rss, func() bool { return t.committed() >= exp }, what, t.committed); err != nil {
		return 0, err
	}
	k0 := len(t.checkpoints())
	done := func() int64 { return int64(len(t.checkpoints())) }
	if err := r.waitFor(ctx, job, rss, func() bool { return done() >= int64(k0+2) }, what+": 2 checkpoints", done); err != nil {
		return 0, err
	}
	if err := job.stop(); err != nil {
		return 0, fmt.Errorf("bench: %s: %w", what, err)
	}
	return exp, nil
}

// CheckPreload says whether s can run with Config.PreloadState: a pebble
// scenario whose model counts every output (not Nexmark, not the rules
// scenarios, whose Processed count would include the preload).
func (s *Scenario) CheckPreload() error {
	if s.Backend != "pebble" || s.Nexmark != "" || s.Processed != "" {
		return fmt.Errorf("scenario %s: preloaded state needs a pebble scenario whose outputs the model counts exactly (not Nexmark, not rules)", s.Name)
	}
	return nil
}

// everyKey is the preload's items: each key of g once, in order.
type everyKey struct {
	g    *Generator
	next int
}

func (e *everyKey) nextItem(partitions int) Item {
	it := e.g.Next()
	it.Key = e.g.names[e.next%len(e.g.names)]
	e.next++
	return it.stamp(partitions)
}

// awaitSettled waits until the job of a scenario whose count of outputs is
// only a lower bound (tableCheck.atLeast) has committed the outputs of
// every item: until its Processed operator received every record the
// model counted, then two more completed checkpoints (the first may have
// been triggered before the last record; the second's barrier follows it
// through the operators after, so its transaction holds their outputs).
func (r *runner) awaitSettled(ctx context.Context, job *background, rss *rssMeter, t target, processed *processedCount, name string) error {
	jt, ok := t.(*jobTarget)
	if !ok || processed == nil {
		return fmt.Errorf("bench: %s: an order-dependent count needs a job with a Processed operator", name)
	}
	want := processed.n
	received := func() int64 { return jt.received(processed.operator) }
	if err := r.waitFor(ctx, job, rss, func() bool { return received() >= want },
		fmt.Sprintf("%s: %s received %d records", name, processed.operator, want), received); err != nil {
		return err
	}
	k0 := len(t.checkpoints())
	done := func() int64 { return int64(len(t.checkpoints())) }
	return r.waitFor(ctx, job, rss, func() bool { return done() >= int64(k0+2) },
		fmt.Sprintf("%s: 2 checkpoints after the last record", name), done)
}

// latencyPhase is how long the latency phase of s produces:
// cfg.LatencyDuration, or s.MinLatencyPhase when that is longer (s nil:
// the pipe).
func latencyPhase(cfg Config, s *Scenario) time.Duration {
	if s == nil {
		return cfg.LatencyDuration
	}
	return max(cfg.LatencyDuration, s.MinLatencyPhase)
}

// background is a goroutine running f(ctx) with a context of its own.
type background struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func goBackground(ctx context.Context, f func(context.Context) error) *background {
	ctx, cancel := context.WithCancel(ctx)
	b := &background{cancel: cancel, done: make(chan struct{})}
	go func() { defer close(b.done); b.err = f(ctx) }()
	return b
}

// stop cancels the goroutine's context and returns f's error once it
// returned. It may be called more than once.
func (b *background) stop() error {
	b.cancel()
	<-b.done
	return b.err
}

// waitFor polls cond until it holds, the goroutine g returns, ctx ends, or
// progress stalls for two minutes.
func (r *runner) waitFor(ctx context.Context, g *background, rss *rssMeter, cond func() bool, what string, progress func() int64) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	last, lastChange := progress(), time.Now()
	for i := 0; !cond(); i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-g.done:
			return fmt.Errorf("bench: %s: stopped early at %d: %v", what, progress(), g.err)
		case <-tick.C:
		}
		if i%5 == 0 {
			rss.Sample()
		}
		if n := progress(); n != last {
			last, lastChange = n, time.Now()
		} else if time.Since(lastChange) > 2*time.Minute {
			return fmt.Errorf("bench: %s: no progress for 2m at %d", what, n)
		}
	}
	return nil
}

func (r *runner) startProfile(name, delivery string, runs int) (func(), error) {
	path := r.cfg.CPUProfile
	if path == "" {
		return func() {}, nil
	}
	if runs > 1 {
		ext := filepath.Ext(path)
		path = strings.TrimSuffix(path, ext) + "-" + name + "-" + delivery + ext
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	var once sync.Once
	return func() { once.Do(func() { pprof.StopCPUProfile(); f.Close() }) }, nil
}

func summarize(cs []checkpointStat) (n int, p50, mx time.Duration, b50, bmax int64) {
	var ds []time.Duration
	var bs []int64
	for _, c := range cs {
		ds, bs = append(ds, c.dur), append(bs, c.bytes)
	}
	if len(cs) == 0 {
		return 0, 0, 0, 0, 0
	}
	return len(cs), quantile(ds, 0.5), quantile(ds, 1), quantile(bs, 0.5), quantile(bs, 1)
}

// produceAt produces items of g to topic at rate records/s for d, with the
// produce time as timestamp, and returns the outputs the model expects
// of them.
func produceAt(ctx context.Context, cl *kgo.Client, topic string, partitions int, g itemSource, m Model, rate float64, d time.Duration, rss *rssMeter) (int64, error) {
	if l, ok := g.(interface{ live(rate float64) }); ok {
		l.live(rate) // event times from now on at rate: each event produced at its time
	}
	var sent, expected int64
	var failed atomic.Pointer[error]
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for i := 0; ; i++ {
		el := time.Since(start)
		if el >= d {
			break
		}
		for due := int64(rate * el.Seconds()); sent < due; sent++ {
			it := g.nextItem(partitions)
			expected += int64(m.Outputs(it))
			cl.Produce(ctx, it.record(topic),
				func(_ *kgo.Record, err error) {
					if err != nil {
						failed.CompareAndSwap(nil, &err)
					}
				})
		}
		if i%20 == 0 {
			rss.Sample()
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, err
	}
	if p := failed.Load(); p != nil {
		return 0, fmt.Errorf("bench: latency producer: %w", *p)
	}
	return expected, nil
}

// outputReader counts a run's committed outputs and keeps the latencies
// of those of the latency phase.
type outputReader interface {
	run(ctx context.Context) error
	count() int64
	latencies() []time.Duration
}

// reader counts the committed records of a topic from its start: n1 those
// older than phase2, n2 the others, whose latency (receive time minus
// record timestamp) it keeps; values, when set, gets every value, and
// table every key's last value (read them once run returned).
type reader struct {
	brokers []string
	topic   string
	phase2  time.Time
	values  *multiset
	table   *table
	// decode, when set, turns each value into the JSON values and table
	// get (an Avro output's); a value it refuses counts as not JSON.
	decode func([]byte) ([]byte, error)
	n1, n2 atomic.Int64
	mu     sync.Mutex
	lat    []time.Duration
}

func (rd *reader) run(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(rd.brokers...), kgo.ConsumeTopics(rd.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	defer cl.Close()
	// The values are checked by another goroutine, so that the poll loop
	// timestamps the latency phase's outputs when they arrive, not after
	// the check of the throughput phase's backlog (a million decoded and
	// canonicalised values took about a minute); run returns once it has
	// checked every record polled.
	var check chan []*kgo.Record
	if rd.decode != nil || rd.values != nil || rd.table != nil {
		check = make(chan []*kgo.Record, 4096)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for recs := range check {
				for _, r := range recs {
					rd.check(r)
				}
			}
		}()
		defer func() { close(check); <-done }()
	}
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err := fs.Err0(); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("bench: read %s: %w", rd.topic, err)
		}
		now := time.Now()
		var n1, n2 int64
		var lat []time.Duration
		if check != nil {
			check <- fs.Records()
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Timestamp.Before(rd.phase2) {
				n1++
				return
			}
			n2++
			lat = append(lat, now.Sub(r.Timestamp))
		})
		rd.mu.Lock()
		rd.lat = append(rd.lat, lat...)
		rd.mu.Unlock()
		rd.n1.Add(n1)
		rd.n2.Add(n2)
	}
}

// check adds r's value, decoded when decode is set, to values and table.
func (rd *reader) check(r *kgo.Record) {
	v := r.Value
	if rd.decode != nil {
		var err error
		if v, err = rd.decode(r.Value); err != nil {
			v = []byte(fmt.Sprintf("offset %d: %v", r.Offset, err)) // not JSON: never equal to a model's value
		}
	}
	if rd.values != nil {
		rd.values.addJSON(v)
	}
	if rd.table != nil {
		rd.mu.Lock() // settle reads the table meanwhile
		rd.table.put(r.Key, v)
		rd.mu.Unlock()
	}
}

func (rd *reader) count() int64 { return rd.n1.Load() + rd.n2.Load() }

// settleQuiet is how long settle waits without a new output before it
// gives up: three checkpoints (a transaction commits with each) and 5 s.
func settleQuiet(interval time.Duration) time.Duration { return 3*interval + 5*time.Second }

// settle waits, while rd runs, until its table equals want, or until no
// output arrived for quiet (the caller's diff then names what differs),
// or ctx ends.
func (rd *reader) settle(ctx context.Context, want wantTable, quiet time.Duration) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last, lastChange, checked := rd.count(), time.Now(), int64(-1)
	for {
		n := rd.count()
		if n != last {
			last, lastChange = n, time.Now()
		}
		if n != checked {
			rd.mu.Lock()
			d := rd.table.diffWant(want)
			rd.mu.Unlock()
			if d == "" {
				return nil
			}
			checked = n
		}
		if time.Since(lastChange) > quiet {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (rd *reader) latencies() []time.Duration {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return append([]time.Duration(nil), rd.lat...)
}

// buildJob builds scenario s as a job, the way `kstreamd run` does.
// av, when not nil, is the run's schema registry (an Avro scenario).
func (r *runner) buildJob(ctx context.Context, s *Scenario, name, dataDir, in, rules, out, delivery string, av *avroRun) (target, error) {
	sc := *s
	sc.WatermarkAlignment = r.cfg.alignment(s)
	y := pipelineYAML(sc, name, dataDir, r.cfg.Brokers, in, rules, out, delivery, r.cfg.Parallelism, r.cfg.CheckpointInterval.String(), r.cfg.PostgresDSN, r.cfg.stateYAML(s.Backend))
	if av != nil {
		y += fmt.Sprintf("schema_registry:\n  urls: [%q]\n", av.url())
	}
	if s.Nexmark != "" {
		var err error
		side := ""
		if s.hasRules() {
			side = rules
		}
		if y, err = nexmarkPipelineYAML(s.Nexmark, name, dataDir, r.cfg.Brokers, in, side, out, delivery, r.cfg.Parallelism, r.cfg.CheckpointInterval.String()); err != nil {
			return nil, err
		}
	}
	cfg, err := pipeline.ParseWith(name+".yaml", []byte(y), pipeline.Registries{Operators: r.cfg.Registry, Connectors: r.cfg.Connectors})
	if err != nil {
		return nil, fmt.Errorf("bench: scenario %s: %w\n%s", s.Name, err, y)
	}
	reg := newCounterTap(prometheus.NewRegistry())
	j, err := pipeline.Build(ctx, cfg, pipeline.Deps{Logger: r.cfg.Logger, Registerer: reg, ClientOpts: cfg.ClientOptions()})
	if err != nil {
		return nil, fmt.Errorf("bench: scenario %s: build: %w", s.Name, err)
	}
	t := &jobTarget{j: j, reg: reg, process: cfg.ApplyProcess}
	if s.EventRatePerKey > 0 {
		t.skewParts = r.cfg.Partitions
	}
	return t, nil
}

// jobTarget is a kstreamd job: its committed outputs are its sink's
// kstreamd_operator_records_out_total (records in committed transactions,
// or acknowledged by the broker), its checkpoints those of its storage.
type jobTarget struct {
	j interface {
		Run(context.Context) error
		Storage() *checkpoint.Storage
	}
	// reg is the job's registry; the progress samples read its two
	// operator record counters only.
	reg *counterTap
	// process applies the pipeline's process section (GC pacing, memory
	// limit) as `kstreamd run` does, for the job's run only: the pipe runs
	// with Go's defaults.
	process func() (restore func())

	mu   sync.Mutex
	seen map[int64]checkpointStat
	// skewParts, when not 0, is the input's partition count: the job's
	// input watermark skew is sampled (sampleSkew) once every partition
	// has an event time, into skew (under mu).
	skewParts int
	skew      []time.Duration
}

// skewEvery is how often a job whose input has event times samples the
// skew between its partitions.
const skewEvery = 50 * time.Millisecond

// sampleSkew samples, every skewEvery until ctx ends, the largest minus
// the least partition event time of the source "in"
// (kstreamd_source_partition_event_time_ms): how far the input's leading
// partition runs ahead of the one the watermark waits for. Samples are
// taken only once all skewParts partitions have emitted a record.
func (t *jobTarget) sampleSkew(ctx context.Context) {
	tick := time.NewTicker(skewEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if d, n := t.reg.spread(eventTimeFamily, "in"); n >= t.skewParts {
			t.mu.Lock()
			t.skew = append(t.skew, time.Duration(d)*time.Millisecond)
			t.mu.Unlock()
		}
	}
}

// takeSkew returns the skew samples taken so far and starts anew.
func (t *jobTarget) takeSkew() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.skew
	t.skew = nil
	return s
}

func (t *jobTarget) run(ctx context.Context) error {
	if t.process != nil {
		defer t.process()()
	}
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); t.pollCheckpoints(pctx) }()
	if t.skewParts > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); t.sampleSkew(pctx) }()
	}
	err := t.j.Run(ctx)
	stop()
	wg.Wait()
	t.scan() // the last ones
	return err
}

func (t *jobTarget) committed() int64 { return t.reg.sum(recordsOutFamily, "sink") }

// written returns the records the sink operator has received so far,
// each written at once into the open transaction (or produced,
// at-least-once): its kstreamd_operator_records_in_total.
func (t *jobTarget) written() int64 { return t.received("sink") }

// received returns the records operator has received so far: its
// kstreamd_operator_records_in_total over every subtask.
func (t *jobTarget) received(operator string) int64 {
	return t.reg.sum(recordsInFamily, operator)
}

// pollCheckpoints reads each completed checkpoint's metadata while it is
// retained (the storage keeps only the latest few).
func (t *jobTarget) pollCheckpoints(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.scan()
		}
	}
}

func (t *jobTarget) scan() {
	infos, err := t.j.Storage().List()
	if err != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen == nil {
		t.seen = map[int64]checkpointStat{}
	}
	for _, in := range infos {
		if _, ok := t.seen[in.ID]; ok || in.State != checkpoint.StateCompleted || in.Savepoint {
			continue
		}
		m, err := checkpoint.ReadMetadata(in.Dir)
		if err != nil {
			continue
		}
		st := checkpointStat{dur: m.Completed.Sub(m.Timestamp), bytes: m.Bytes}
		if fi, err := os.Stat(filepath.Join(in.Dir, checkpoint.MetadataFile)); err == nil {
			st.bytes += fi.Size() // the offsets and handles are part of what a checkpoint writes
		}
		t.seen[in.ID] = st
	}
}

func (t *jobTarget) checkpoints() []checkpointStat {
	t.scan()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]checkpointStat, 0, len(t.seen))
	for _, c := range t.seen {
		out = append(out, c)
	}
	return out
}

// WriteTable writes results as one aligned table, a row per result.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(Columns, "\t")+"\t")
	for _, r := range results {
		chk := []string{"-", "-", "-", "-"}
		if r.Scenario != PipeScenario {
			chk = []string{ms(r.CheckpointP50), ms(r.CheckpointMax), kib(r.CheckpointBytesP50), kib(r.CheckpointBytesMax)}
		}
		proc, procRatio := "-", "-"
		if r.ProcRecordsPerSec > 0 {
			proc = fmt.Sprintf("%.0f", r.ProcRecordsPerSec)
		}
		if r.ProcRatio > 0 {
			procRatio = ratioText(r.ProcRatio)
		}
		cols := []string{r.Scenario, r.Delivery, fmt.Sprintf("%.0f", r.RecordsPerSec), ratioText(r.Ratio), proc, procRatio,
			fmt.Sprintf("%.2f", r.CPUPerMillion.Seconds()), fmt.Sprintf("%.0f", float64(r.PeakRSSBytes)/(1<<20))}
		cols = append(cols, chk...)
		exp := fmt.Sprint(r.Expected)
		if r.ExpectedAtLeast {
			exp = ">=" + exp
		}
		cols = append(cols, fmt.Sprintf("%.0f", r.Rate), ms(r.LatencyP50), ms(r.LatencyP99),
			fmt.Sprint(r.Outputs), exp)
		fmt.Fprintln(tw, strings.Join(cols, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		if r.SkewSamples > 0 {
			if _, err := fmt.Fprintf(w, "# %s %s: input watermark skew (largest minus least partition event time, %d samples every 50 ms of the throughput phase): p50 %s ms, p90 %s ms, max %s ms\n",
				r.Scenario, r.Delivery, r.SkewSamples, ms(r.SkewP50), ms(r.SkewP90), ms(r.SkewMax)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Columns are the table's column headers, in order. proc_rec/s and
// vs_pipe_proc are Result.ProcRecordsPerSec and ProcRatio, "-" where
// they are not defined.
var Columns = []string{"scenario", "delivery", "records/s", "vs_pipe", "proc_rec/s", "vs_pipe_proc", "cpu_s/M", "peak_rss_MiB",
	"chk_p50_ms", "chk_max_ms", "chk_p50_KiB", "chk_max_KiB", "lat_rate/s", "lat_p50_ms", "lat_p99_ms", "outputs", "expected"}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
func kib(b int64) string        { return fmt.Sprintf("%.1f", float64(b)/1024) }

// ratioText formats a vs_pipe ratio with two decimals, or two significant
// digits below 0.01 (a slow scenario against a fast pipe), never as 0.00.
func ratioText(x float64) string {
	if x > 0 && x < 0.01 {
		return fmt.Sprintf("%.2g", x)
	}
	return fmt.Sprintf("%.2f", x)
}
