package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ClusterScenario is the name `kstreamd bench --scenario` takes for
// RunCluster (not part of --all).
const ClusterScenario = "cluster"

// ClusterConfig configures RunCluster. Zero values take the defaults
// stated.
type ClusterConfig struct {
	// Binary is the kstreamd executable each daemon runs (`kstreamd run`).
	// Required.
	Binary string
	// Brokers are the seed brokers. Required.
	Brokers []string
	// Daemons are the daemon counts to measure, in order. Default [1 2 3].
	Daemons []int
	// Records is the number of records of the throughput phase. Default
	// 200,000.
	Records int
	// Keys is the number of distinct keys. Default 10,000.
	Keys int
	// Partitions of the input and output topics. Default 4.
	Partitions int
	// Units is cluster.units: work units per stage. Default 6 (2 per
	// daemon with 3 daemons).
	Units int
	// CheckpointInterval is the units' checkpoint interval. Default 1s.
	CheckpointInterval time.Duration
	// LatencyDuration is how long the latency phase produces. Default 10s.
	LatencyDuration time.Duration
	// Dir is the work directory (each daemon's data, the shared store).
	// Required.
	Dir string
	// Progress, if not nil, gets one line per run as it finishes.
	Progress io.Writer
	// CPUProfile, if not empty, makes each daemon write a CPU profile of
	// its whole run (`kstreamd run --cpuprofile`) to CPUProfile with
	// -<n>d-<member> before the extension (n the run's daemon count).
	CPUProfile string
}

func (c *ClusterConfig) setDefaults() {
	if len(c.Daemons) == 0 {
		c.Daemons = []int{1, 2, 3}
	}
	if c.Records <= 0 {
		c.Records = 200_000
	}
	if c.Keys <= 0 {
		c.Keys = 10_000
	}
	if c.Partitions <= 0 {
		c.Partitions = 4
	}
	if c.Units <= 0 {
		c.Units = 6
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = time.Second
	}
	if c.LatencyDuration <= 0 {
		c.LatencyDuration = 10 * time.Second
	}
}

// ClusterResult is one row of RunCluster's table: the job on Daemons
// daemon processes.
type ClusterResult struct {
	Daemons int
	// Records, Elapsed and RecordsPerSec are the throughput phase: from
	// the first record produced (every daemon ready, units spread) until
	// every output was committed.
	Records       int64
	Elapsed       time.Duration
	RecordsPerSec float64
	// Rate is the latency phase's input rate (half the throughput), and
	// LatencyP50/P99 the time from a record's produce time to the moment a
	// read_committed reader received its output, across both stages.
	Rate                   float64
	LatencyP50, LatencyP99 time.Duration
	// CPU is the daemons' CPU time (user + system) over the whole run,
	// start-up and both phases, summed.
	CPU time.Duration
	// CPUPerMillion is the daemons' CPU time (user + system, summed) over
	// the throughput phase alone, per million input records: the figure to
	// compare with a single-process scenario's cpu_s/M (0 where the
	// daemons' CPU cannot be read while they run: not Linux).
	CPUPerMillion time.Duration
	// CheckpointP50 is the median duration (trigger to commit) of the
	// units' checkpoints completed during the latency phase, from the
	// daemons' kstreamd_checkpoint_duration_seconds histograms
	// (interpolated within a bucket): the part of a stage boundary's
	// latency that is not the wait for the barrier.
	CheckpointP50 time.Duration
	// Outputs is what the read_committed reader counted over both phases;
	// Expected the input count (keyed_count writes one output per input).
	Outputs, Expected int64
}

// clusterUnitsPerDaemon is what a daemon's GET /api/v1/job tells RunCluster:
// the units every member holds.
type clusterUnitsPerDaemon struct {
	Members []struct {
		Member string            `json:"member"`
		Units  []json.RawMessage `json:"units"`
	} `json:"members"`
}

// RunCluster measures a two-stage keyed job in cluster mode
// (docs/scale-out.md) on 1, 2 and 3 daemon processes (cfg.Daemons): the
// source stage re-keys the input through a repartition topic to a
// keyed_count by key on pebble, exactly-once, cfg.Units units per stage.
// Each run starts the daemons (`kstreamd run`, one process each, one
// shared filesystem store), waits until every unit is assigned, produces
// cfg.Records records as fast as it can and waits until every output is
// committed (throughput), then produces at half that rate for
// cfg.LatencyDuration (latency). The daemons are stopped with SIGTERM and
// must exit 0. It writes the table to w and returns the rows; the error
// wraps ErrOutputMismatch when a committed output count differs from the
// input's.
func RunCluster(ctx context.Context, cfg ClusterConfig, w io.Writer) ([]ClusterResult, error) {
	cfg.setDefaults()
	if cfg.Binary == "" || len(cfg.Brokers) == 0 || cfg.Dir == "" {
		return nil, errors.New("bench: cluster: binary, brokers and dir are required")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		return nil, fmt.Errorf("bench: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	suffix := fmt.Sprintf("%x", time.Now().UnixNano()%0xffffff)
	var out []ClusterResult
	var mismatch []string
	for _, n := range cfg.Daemons {
		res, err := runCluster(ctx, cfg, adm, n, fmt.Sprintf("bench-cluster-%d-%s", n, suffix))
		if err != nil {
			return out, err
		}
		out = append(out, res)
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "bench: cluster with %d daemons: %.0f records/s, %d/%d outputs\n", n, res.RecordsPerSec, res.Outputs, res.Expected)
		}
		if res.Outputs != res.Expected {
			mismatch = append(mismatch, fmt.Sprintf("%d daemons: %d committed, %d expected", n, res.Outputs, res.Expected))
		}
	}
	if err := WriteClusterTable(w, out); err != nil {
		return out, err
	}
	if len(mismatch) > 0 {
		return out, fmt.Errorf("%w: %s", ErrOutputMismatch, strings.Join(mismatch, "; "))
	}
	return out, nil
}

// WriteClusterTable writes RunCluster's rows as an aligned table.
func WriteClusterTable(w io.Writer, rows []ClusterResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "daemons\trecords\telapsed\trecords/s\tcpu_s/M\tlatency rate\tp50\tp99\tchk p50\tdaemon CPU\toutputs\texpected\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%.0f\t%.2f\t%.0f/s\t%s\t%s\t%s\t%s\t%d\t%d\t\n", r.Daemons, r.Records, r.Elapsed.Round(time.Millisecond),
			r.RecordsPerSec, r.CPUPerMillion.Seconds(), r.Rate, r.LatencyP50.Round(time.Millisecond), r.LatencyP99.Round(time.Millisecond),
			r.CheckpointP50.Round(time.Millisecond), r.CPU.Round(10*time.Millisecond), r.Outputs, r.Expected)
	}
	return tw.Flush()
}

// clusterYAML is the pipeline every daemon of a cluster run reads, member
// its member id and metrics its metrics address.
func clusterYAML(cfg ClusterConfig, job, dataDir, store, in, out, member, metrics string) string {
	return fmt.Sprintf(`job:
  name: %s
data_dir: %q
kafka:
  brokers: [%s]
  client_id: kstreamd-bench
state:
  backend: pebble
checkpoints:
  interval: %s
  incremental: true
  timeout: 1m
metrics:
  address: %s
log:
  level: warn
cluster:
  enabled: true
  member_id: %s
  units: %d
  session_timeout: 10s
  rebalance_timeout: 30s
  revoke_timeout: 20s
  takeover_timeout: 20s
  store:
    dir: %q
sources:
  - name: in
    topic: %s
    format: json
    on_error: fail
operators:
  - name: out
    type: keyed_count
    input: in
    key_by: key
sinks:
  - name: sink
    input: out
    topic: %s
    delivery: exactly-once
    transaction_timeout: 10m
`, job, dataDir, strings.Join(cfg.Brokers, ", "), cfg.CheckpointInterval, metrics, member, cfg.Units, store, in, out)
}

// daemonProc is one `kstreamd run` child of a cluster run.
type daemonProc struct {
	cmd     *exec.Cmd
	metrics string
	done    chan struct{}
	err     error
}

// runCluster is one row: the job on n daemons.
func runCluster(ctx context.Context, cfg ClusterConfig, adm *kadm.Client, n int, base string) (res ClusterResult, err error) {
	res = ClusterResult{Daemons: n, Records: int64(cfg.Records)}
	in, out := base+"-in", base+"-out"
	if _, err := adm.CreateTopics(ctx, int32(cfg.Partitions), 1, nil, in, out); err != nil {
		return res, fmt.Errorf("bench: create topics: %w", err)
	}
	dir := filepath.Join(cfg.Dir, base)
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(dctx, in, out, base+"-1-repartition", base+"-units")
		_ = os.RemoveAll(dir)
	}()
	var daemons []*daemonProc
	stopAll := func() error {
		var errs []error
		for _, d := range daemons {
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
		}
		for i, d := range daemons {
			select {
			case <-d.done:
			case <-time.After(time.Minute):
				_ = d.cmd.Process.Kill()
				<-d.done
				errs = append(errs, fmt.Errorf("bench: daemon %d did not stop within 1m of SIGTERM", i+1))
			}
			if d.err != nil {
				errs = append(errs, fmt.Errorf("bench: daemon %d: %w (log: %s)", i+1, d.err, filepath.Join(dir, fmt.Sprintf("m%d.log", i+1))))
			}
			if ps := d.cmd.ProcessState; ps != nil {
				res.CPU += ps.UserTime() + ps.SystemTime()
			}
		}
		daemons = nil
		return errors.Join(errs...)
	}
	defer func() {
		if serr := stopAll(); err == nil {
			err = serr
		}
	}()
	for i := range n {
		member := fmt.Sprintf("m%d", i+1)
		d, err := startDaemonProc(cfg, base, dir, in, out, member)
		if err != nil {
			return res, err
		}
		daemons = append(daemons, d)
	}
	// Every unit assigned: the members' assignment covers both stages'
	// units and names every daemon.
	ready := func() bool {
		for _, d := range daemons {
			select {
			case <-d.done:
				return false
			default:
			}
			resp, err := http.Get("http://" + d.metrics + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false
			}
		}
		resp, err := http.Get("http://" + daemons[0].metrics + "/api/v1/job")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var st clusterUnitsPerDaemon
		if json.NewDecoder(resp.Body).Decode(&st) != nil || len(st.Members) != n {
			return false
		}
		units := 0
		for _, m := range st.Members {
			units += len(m.Units)
		}
		return units == 2*cfg.Units
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !ready() {
		for i, d := range daemons {
			select {
			case <-d.done:
				return res, fmt.Errorf("bench: daemon %d exited at start: %v (log: %s)", i+1, d.err, filepath.Join(dir, fmt.Sprintf("m%d.log", i+1)))
			default:
			}
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("bench: the %d daemons did not hold every unit within 2m", n)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}

	// Throughput phase: every output of cfg.Records records committed.
	prod, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(100_000), kgo.ProducerBatchMaxBytes(1<<20),
		kgo.RecordPartitioner(kgo.ManualPartitioner())) // partitionOf, as Run's
	if err != nil {
		return res, err
	}
	defer prod.Close()
	model := modelFunc(func(Item) int { return 1 })
	gen := NewGenerator(cfg.Keys, 0)
	rd1 := &reader{brokers: cfg.Brokers, topic: out, phase2: time.Now().Add(24 * time.Hour)}
	r1 := goBackground(ctx, rd1.run)
	defer r1.stop()
	daemonsCPU := func() (time.Duration, bool) {
		var sum time.Duration
		for _, d := range daemons {
			c, ok := procCPU(d.cmd.Process.Pid)
			if !ok {
				return 0, false
			}
			sum += c
		}
		return sum, true
	}
	cpu0, cpuOK := daemonsCPU()
	t0 := time.Now()
	exp1, err := load(ctx, prod, in, cfg.Partitions, gen, model, cfg.Records)
	if err != nil {
		return res, err
	}
	rr := &runner{}
	rss := newRSSMeter()
	if err := rr.waitFor(ctx, r1, rss, func() bool { return rd1.count() >= exp1 }, fmt.Sprintf("cluster %d daemons: %d outputs", n, exp1), rd1.count); err != nil {
		return res, err
	}
	res.Elapsed = time.Since(t0)
	if cpu1, ok := daemonsCPU(); ok && cpuOK {
		res.CPUPerMillion = time.Duration(float64(cpu1-cpu0) * 1e6 / float64(cfg.Records))
	}
	res.RecordsPerSec = float64(cfg.Records) / res.Elapsed.Seconds()
	if err := r1.stop(); err != nil {
		return res, err
	}

	// Latency phase, as Run's.
	var metricAddrs []string
	for _, d := range daemons {
		metricAddrs = append(metricAddrs, d.metrics)
	}
	chk0, chkErr := scrapeHistogram(metricAddrs, checkpointDurationMetric)
	rd := &reader{brokers: cfg.Brokers, topic: out, phase2: time.Now().Truncate(time.Millisecond)}
	rdr := goBackground(ctx, rd.run)
	defer rdr.stop()
	res.Rate = max(1, res.RecordsPerSec/2)
	exp2, err := produceAt(ctx, prod, in, cfg.Partitions, gen, model, res.Rate, cfg.LatencyDuration, rss)
	if err != nil {
		return res, err
	}
	want := func() bool { return rd.n1.Load() >= exp1 && rd.n2.Load() >= exp2 }
	if err := rr.waitFor(ctx, rdr, rss, want, fmt.Sprintf("cluster %d daemons: read %d+%d outputs", n, exp1, exp2), rd.count); err != nil {
		return res, err
	}
	select {
	case <-time.After(500 * time.Millisecond): // stragglers (duplicates) arrive with the rest
	case <-ctx.Done():
		return res, ctx.Err()
	}
	if err := rdr.stop(); err != nil {
		return res, err
	}
	if chk1, err := scrapeHistogram(metricAddrs, checkpointDurationMetric); err == nil && chkErr == nil {
		res.CheckpointP50 = chk1.minus(chk0).quantile(0.5)
	}
	res.Outputs, res.Expected = rd.count(), exp1+exp2
	lat := rd.latencies()
	res.LatencyP50, res.LatencyP99 = quantile(lat, 0.5), quantile(lat, 0.99)
	return res, stopAll()
}

// startDaemonProc starts one daemon of a cluster run, its log in
// <dir>/<member>.log.
func startDaemonProc(cfg ClusterConfig, job, dir, in, out, member string) (*daemonProc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	mdir := filepath.Join(dir, member)
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(mdir, "pipeline.yaml")
	y := clusterYAML(cfg, job, filepath.Join(mdir, "data"), filepath.Join(dir, "store"), in, out, member, addr)
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, member+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	args := []string{"run", "--config", path}
	if cfg.CPUProfile != "" {
		args = append(args, "--cpuprofile", daemonProfile(cfg.CPUProfile, job, member))
	}
	cmd := exec.Command(cfg.Binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start daemon %s: %w", member, err)
	}
	d := &daemonProc{cmd: cmd, metrics: addr, done: make(chan struct{})}
	go func() { d.err = cmd.Wait(); close(d.done) }()
	return d, nil
}

// daemonProfile is the CPU profile file of member in the run named job
// (bench-cluster-<n>-<suffix>): file with -<n>d-<member> before its
// extension.
func daemonProfile(file, job, member string) string {
	n := strings.TrimPrefix(job, "bench-cluster-")
	n, _, _ = strings.Cut(n, "-")
	ext := filepath.Ext(file)
	return strings.TrimSuffix(file, ext) + "-" + n + "d-" + member + ext
}

// freeAddr returns a free 127.0.0.1 port's address.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
