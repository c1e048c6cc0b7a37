package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// The helpers shared by this package's tests: the daemon run in-process
// (daemon) or as a child process of the built binary (proc), the job
// configs, the kfake broker, Kafka clients and offsets, the reference job's
// records and matches, and the daemon's log.

// ---- The daemon in-process ----

// daemon is a kstreamd run started in-process by a test.
type daemon struct {
	broker, metrics string
	out             *testkit.SyncBuffer
	cancel          context.CancelFunc
	done            chan int // run's exit status; whoever takes it puts it back
}

// launchDaemon writes cfg to dir/job.yaml and runs `kstreamd run` on it
// in-process, with the extra flags (--from-savepoint), without waiting for
// the job to start. At cleanup the daemon is cancelled (as SIGTERM does)
// and, when the test failed, its log is printed.
func launchDaemon(t *testing.T, dir, cfg, broker, metrics string, extra ...string) *daemon {
	t.Helper()
	path := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{broker: broker, metrics: metrics, out: &testkit.SyncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	args := append([]string{"run", "--config", path}, extra...)
	go func() { d.done <- run(ctx, args, d.out, d.out) }()
	t.Cleanup(func() {
		d.cancel()
		select {
		case code := <-d.done:
			d.done <- code
		case <-time.After(20 * time.Second):
			t.Errorf("daemon did not stop")
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", d.out.String())
		}
	})
	return d
}

// startDaemon is launchDaemon, then waits until the job runs and /metrics
// answers; it fails the test when the daemon exits first.
func startDaemon(t *testing.T, dir, cfg, broker, metrics string, extra ...string) *daemon {
	t.Helper()
	d := launchDaemon(t, dir, cfg, broker, metrics, extra...)
	ok := testkit.Poll(20*time.Second, func() bool {
		if d.exited() {
			return true
		}
		_, err := testkit.Scrape(d.url(), "kstreamd_broadcast_rules", nil)
		return err == nil && strings.Contains(d.out.String(), "job running")
	})
	if !ok || !strings.Contains(d.out.String(), "job running") {
		t.Fatalf("daemon did not start:\n%s", d.out.String())
	}
	return d
}

// exited reports whether run returned.
func (d *daemon) exited() bool {
	select {
	case code := <-d.done:
		d.done <- code
		return true
	default:
		return false
	}
}

// stop cancels the daemon (as SIGTERM does) and returns its exit status.
func (d *daemon) stop(t *testing.T) int {
	t.Helper()
	return d.stopWithin(t, 15*time.Second)
}

// stopWithin is stop, failing the test when the daemon has not stopped
// after limit.
func (d *daemon) stopWithin(t *testing.T, limit time.Duration) int {
	t.Helper()
	d.cancel()
	select {
	case code := <-d.done:
		d.done <- code
		return code
	case <-time.After(limit):
		t.Fatalf("daemon did not stop within %v:\n%s", limit, d.out.String())
	}
	return -1
}

// waitExit waits up to limit for the daemon to exit on its own and returns
// its exit status.
func (d *daemon) waitExit(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case code := <-d.done:
		d.done <- code
		return code
	case <-time.After(limit):
		t.Fatalf("daemon did not exit on its own within %v:\n%s", limit, d.out.String())
	}
	return -1
}

func (d *daemon) url() string { return "http://" + d.metrics + "/metrics" }

// waitCheckpointAfter waits until a checkpoint with an id above after+1
// completed and returns its id: checkpoint after+1 may have been triggered
// before the caller's last records were read, after+2 was not.
func waitCheckpointAfter(t *testing.T, d *daemon, after float64) float64 {
	t.Helper()
	var id float64
	ok := testkit.Poll(15*time.Second, func() bool {
		v, err := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
		id = v
		return err == nil && v > after+1
	})
	if !ok {
		t.Fatalf("no checkpoint after %v completed (last %v):\n%s", after, id, d.out.String())
	}
	return id
}

// jsonDecode decodes the JSON body of resp into v and closes it.
func jsonDecode(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// ---- The built binary as a child process ----

var (
	binOnce sync.Once
	binDir  string // temp dir holding the binary; removed by TestMain
	binPath string
	binErr  error
)

// TestMain runs the tests, removes the built binary and, when they passed,
// fails the run if a goroutine outlived them (the in-process daemons,
// their brokers and clients must all have stopped).
func TestMain(m *testing.M) {
	if spec := os.Getenv(testBrokerEnv); spec != "" {
		os.Exit(runTestBroker(spec)) // the broker process of startTestBroker
	}
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	if code == 0 {
		http.DefaultClient.CloseIdleConnections()
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// kstreamdBinary builds the kstreamd binary once per test process (without
// -race: the in-process tests cover the race detector) and returns its path.
func kstreamdBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(goruntime.GOROOT(), "bin", "go")
		}
		if binDir, binErr = os.MkdirTemp("", "kstreamd-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "kstreamd")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, goTool, "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// runBinary runs the binary with args, bounded by 20 s (not counting its
// first build), and returns its exit
// status, stdout and stderr.
func runBinary(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runBinaryEnv(t, nil, args...)
}

// runBinaryEnv is runBinary with env added to the environment.
func runBinaryEnv(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	bin := kstreamdBinary(t) // built before the clock starts: a first build may take minutes under load
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("kstreamd %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// proc is a kstreamd child process.
type proc struct {
	cmd     *exec.Cmd
	out     *testkit.SyncBuffer // stdout and stderr
	done    chan struct{}
	dir     string
	broker  string
	metrics string
}

// startProc writes cfg to dir/job.yaml, starts `kstreamd run` on it and
// waits until /healthz answers ok. The process is stopped at cleanup.
func startProc(t *testing.T, dir, cfg, broker, metrics string) *proc {
	t.Helper()
	return startProcEnv(t, dir, cfg, broker, metrics, nil)
}

// startProcEnv is startProc with env ("KEY=value") added to the daemon's
// environment.
func startProcEnv(t *testing.T, dir, cfg, broker, metrics string, env []string) *proc {
	t.Helper()
	bin := kstreamdBinary(t)
	path := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &proc{out: &testkit.SyncBuffer{}, done: make(chan struct{}), dir: dir, broker: broker, metrics: metrics}
	p.cmd = exec.Command(bin, "run", "--config", path)
	p.cmd.Dir = dir
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(15 * time.Second):
				t.Errorf("kstreamd did not stop within 15s of SIGTERM; killing it")
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("kstreamd log:\n%s", p.out.String())
		}
	})
	ok := testkit.Poll(20*time.Second, func() bool {
		if p.exited() {
			return true
		}
		resp, err := http.Get("http://" + metrics + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if !ok || p.exited() {
		t.Fatalf("kstreamd did not become healthy within 20s (exited: %v):\n%s", p.exited(), p.out.String())
	}
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) url() string { return "http://" + p.metrics + "/metrics" }

// scrape returns the current value of metric (summed over series matching
// match), failing the test when /metrics cannot be read.
func (p *proc) scrape(t *testing.T, metric string, match map[string]string) float64 {
	t.Helper()
	v, err := testkit.Scrape(p.url(), metric, match)
	if err != nil {
		t.Fatalf("scrape %s: %v", metric, err)
	}
	return v
}

// terminate sends SIGTERM and returns the exit status and how long the
// process took to exit; it fails the test after limit.
func (p *proc) terminate(t *testing.T, limit time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(limit):
		t.Fatalf("kstreamd did not exit within %v of SIGTERM:\n%s", limit, p.out.String())
	}
	return p.cmd.ProcessState.ExitCode(), time.Since(start)
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("kstreamd did not die within 10s of SIGKILL")
	}
}

// checkpointAfter waits until a checkpoint triggered after the call
// completed. The metric is 0 until the process completed one, whose id
// continues the restored checkpoint's: then the first one seen is the
// reference.
func (p *proc) checkpointAfter(t *testing.T) {
	t.Helper()
	var last float64
	if !testkit.Poll(30*time.Second, func() bool {
		var err error
		last, err = testkit.Scrape(p.url(), "kstreamd_checkpoint_last_completed_id", nil)
		return err == nil && last > 0
	}) {
		t.Fatalf("no checkpoint completed:\n%s", p.out.String())
	}
	if !testkit.Poll(30*time.Second, func() bool {
		id, err := testkit.Scrape(p.url(), "kstreamd_checkpoint_last_completed_id", nil)
		return err == nil && id > last+1
	}) {
		t.Fatalf("no checkpoint completed after %v:\n%s", last, p.out.String())
	}
}

// ---- Job configs ----

// jobHead is the head of a job config: job name and parallelism, data_dir,
// the kafka section (kafka's lines, indented, without the last newline),
// metrics.address and log.level.
func jobHead(name string, p int, dir, kafka, metrics, level string) string {
	return fmt.Sprintf(`job:
  name: %s
  parallelism: %d
data_dir: %s
kafka:
%s
metrics:
  address: %s
log:
  level: %s
`, name, p, dir, kafka, metrics, level)
}

// embeddedKafka is the kafka section of an embedded broker at broker with
// topics of 4 partitions.
func embeddedKafka(broker string) string {
	return "  embedded:\n    enabled: true\n    address: " + broker + "\n    partitions: 4"
}

// brokersKafka is the kafka section of the outside broker at broker.
func brokersKafka(broker string) string { return "  brokers: [" + broker + "]" }

// referencePipeline is the reference job's graph: sources items and rules
// (parallelism 1), the shape_pair_matcher keyed by color with the rules
// broadcast, and the sink matches. A config may add sink fields after it.
const referencePipeline = `sources:
  - name: items
    topic: items
  - name: rules
    topic: rules
    parallelism: 1
operators:
  - name: matcher
    type: shape_pair_matcher
    input: items
    key_by: color
    broadcast: rules
sinks:
  - name: matches
    input: matcher
    topic: matches
`

// referenceConfig is the reference job on an embedded broker at broker with
// /metrics at metrics, its data under dir.
func referenceConfig(dir, broker, metrics string, parallelism int) string {
	return jobHead("colorshape", parallelism, dir, embeddedKafka(broker), metrics, "info") + referencePipeline
}

// externalReferenceConfig is referenceConfig on the broker at broker (not
// embedded).
func externalReferenceConfig(dir, broker, metrics string, p int) string {
	return jobHead("colorshape", p, dir, brokersKafka(broker), metrics, "info") + referencePipeline
}

// checkpointedConfig is the reference job with incremental checkpoints
// every 100 ms on the state backend.
func checkpointedConfig(dir, broker, metrics string, p int, backend string) string {
	return referenceConfig(dir, broker, metrics, p) + fmt.Sprintf(`state:
  backend: %s
checkpoints:
  interval: 100ms
  incremental: true
`, backend)
}

// ---- Kafka ----

// referenceTopics are the reference job's topics.
var referenceTopics = []string{"items", "rules", "matches"}

// startKfake starts a one-broker kfake cluster on 127.0.0.1 with topics of 4
// partitions and opts, closed at cleanup, and returns it and its address.
// The broker runs in the test process, so it outlives the kstreamd child
// processes a test kills.
func startKfake(t *testing.T, topics []string, opts ...kfake.Opt) (*kfake.Cluster, string) {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(4, topics...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, c.ListenAddrs()[0]
}

// newClient returns a client of the broker at broker with opts, closed at
// cleanup.
func newClient(t *testing.T, broker string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(broker)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produce(t *testing.T, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// groupOffsets returns the offsets group committed for topic, by partition.
func groupOffsets(ctx context.Context, adm *kadm.Client, group, topic string) (map[int32]int64, error) {
	resp, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for p, o := range resp[topic] {
		if o.Err != nil {
			return nil, o.Err
		}
		out[p] = o.At
	}
	return out, nil
}

// endOffsets returns the end offsets (high watermarks) of topic, by
// partition.
func endOffsets(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}

// topicEnds returns the end offsets of topic, failing the test unless they
// sum to total.
func topicEnds(t *testing.T, adm *kadm.Client, topic string, total int64) map[int32]int64 {
	t.Helper()
	ends, err := endOffsets(context.Background(), adm, topic)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, o := range ends {
		sum += o
	}
	if sum != total {
		t.Fatalf("%s end offsets %v sum to %d, want %d", topic, ends, sum, total)
	}
	return ends
}

// waitGroupAt waits until group committed, for topic, the offsets ends on
// each of their partitions: a checkpoint covering every record completed
// (the sources commit its offsets to the monitoring group). It fails the
// test after limit, or as soon as p exits.
func waitGroupAt(t *testing.T, adm *kadm.Client, group, topic string, ends map[int32]int64, limit time.Duration, p *proc) {
	t.Helper()
	var committed map[int32]int64
	var err error
	if !testkit.Poll(limit, func() bool {
		if p.exited() {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if committed, err = groupOffsets(ctx, adm, group, topic); err != nil {
			return false
		}
		for part, o := range ends {
			if committed[part] != o {
				return false
			}
		}
		return true
	}) || p.exited() {
		t.Fatalf("group %s committed %v (err %v), want the end offsets %v (kstreamd exited: %v):\n%s",
			group, committed, err, ends, p.exited(), p.out.String())
	}
}

// pacedProducer produces records in the background at a steady pace.
type pacedProducer struct {
	produced atomic.Int64 // records produced so far
	done     chan error   // nil once every record is produced, else why it stopped
}

// producePaced starts producing total records with cl, in batches of batch,
// one batch per pacing, until all are produced or the test ends; recs(i, j)
// returns the records i to j-1.
func producePaced(t *testing.T, cl *kgo.Client, total, batch int, pacing time.Duration, recs func(i, j int) []*kgo.Record) *pacedProducer {
	ctx := t.Context()
	p := &pacedProducer{done: make(chan error, 1)}
	go func() {
		tick := time.NewTicker(pacing)
		defer tick.Stop()
		for i := 0; i < total; i += batch {
			if err := cl.ProduceSync(ctx, recs(i, i+batch)...).FirstErr(); err != nil {
				p.done <- fmt.Errorf("produce records %d..%d: %w", i, i+batch-1, err)
				return
			}
			p.produced.Add(int64(batch))
			select {
			case <-tick.C:
			case <-ctx.Done():
				p.done <- ctx.Err()
				return
			}
		}
		p.done <- nil
	}()
	return p
}

// wait waits for every record to be produced, failing the test on a
// produce error or after limit.
func (p *pacedProducer) wait(t *testing.T, limit time.Duration) {
	t.Helper()
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(limit):
		t.Fatalf("producer did not finish within %v (%d produced)", limit, p.produced.Load())
	}
}

// readUncommitted reads every record of topic up to its high watermarks,
// without isolation (records of aborted and open transactions included,
// control records not).
func readUncommitted(t *testing.T, broker, topic string) []*kgo.Record {
	t.Helper()
	return testkit.ReadTopicWith(t, []kgo.Opt{kgo.SeedBrokers(broker)}, kgo.ReadUncommitted(), topic, 30*time.Second)
}

// ---- The reference job's records ----

func item(id int, color, shape string) *kgo.Record {
	v := fmt.Sprintf(`{"id":%d,"color":%q,"shape":%q}`, id, color, shape)
	return &kgo.Record{Topic: "items", Key: []byte(color), Value: []byte(v)}
}

func rule(name, first, second string) *kgo.Record {
	if first == "" {
		return &kgo.Record{Topic: "rules", Key: []byte(name)} // null value: delete
	}
	v := fmt.Sprintf(`{"name":%q,"first":%q,"second":%q}`, name, first, second)
	return &kgo.Record{Topic: "rules", Key: []byte(name), Value: []byte(v)}
}

// matchStrings renders each match as "rule key first.id,second.id", sorted.
func matchStrings(t *testing.T, recs []*kgo.Record) []string {
	t.Helper()
	var out []string
	for _, r := range recs {
		var m struct {
			Rule, Key     string
			First, Second struct {
				ID    int
				Color string
			}
		}
		if err := json.Unmarshal(r.Value, &m); err != nil {
			t.Fatalf("match %s: %v", r.Value, err)
		}
		if string(r.Key) != m.Key || m.First.Color != m.Key || m.Second.Color != m.Key {
			t.Errorf("match %s has Kafka key %q", r.Value, r.Key)
		}
		out = append(out, fmt.Sprintf("%s %s %d,%d", m.Rule, m.Key, m.First.ID, m.Second.ID))
	}
	slices.Sort(out)
	return out
}

// ---- The daemon's log ----

// restoreLines returns the "restoring" log lines of out.
func restoreLines(out string) []string {
	var lines []string
	for l := range strings.Lines(out) {
		if strings.Contains(l, "msg=restoring ") {
			lines = append(lines, strings.TrimSuffix(l, "\n"))
		}
	}
	return lines
}

// logField returns the value of the field key=value of the log line, ""
// when it has none.
func logField(line, key string) string {
	for f := range strings.FieldsSeq(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// kill9Restarts is the loop of the kill -9 acceptance tests of the
// exactly-once sinks: start the daemon, then kill it with SIGKILL kills
// times at random points and restart it each time with another
// parallelism (1 to 4).
type kill9Restarts struct {
	rng   *rand.Rand
	kills int
	// operator is the sink whose kstreamd_operator_records_in_total the
	// kill points count; each run is killed once it read 300 plus a random
	// number below spread (0: 4000) of records.
	operator string
	spread   int
	// start starts the daemon with parallelism p and waits until its sink
	// recovered; produce starts the input after the first start.
	start   func(p int) *proc
	produce func() *pacedProducer
	// killed runs right after each kill and says what it left (logged);
	// restarted right after the restart's recovery, to check it.
	killed    func(k int) string
	restarted func(k int)
}

// run runs the loop over records input records and returns the last
// daemon and the producer. Each kill comes once the run read a random
// number of records (or the input ran out) and completed a random number
// (0 to 2) of checkpoints.
func (r kill9Restarts) run(t *testing.T, records int) (*proc, *pacedProducer) {
	t.Helper()
	p := 1 + r.rng.IntN(4)
	d := r.start(p)
	prod := r.produce()
	in := map[string]string{"operator": r.operator}
	completed := map[string]string{"kind": "checkpoint", "result": "completed"}
	for k := 1; k <= r.kills; k++ {
		threshold := float64(300 + r.rng.IntN(cmp.Or(r.spread, 4000)))
		wantChk := float64(r.rng.IntN(3))
		started := time.Now()
		var read, chk float64
		testkit.Poll(30*time.Second, func() bool {
			if d.exited() {
				return true
			}
			read, _ = testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", in)
			chk, _ = testkit.Scrape(d.url(), "kstreamd_checkpoints_total", completed)
			drained := prod.produced.Load() == int64(records) && time.Since(started) > 2*time.Second
			return (read >= threshold || drained) && chk >= wantChk
		})
		if d.exited() {
			t.Fatalf("kstreamd exited on its own before kill %d:\n%s", k, d.out.String())
		}
		d.kill(t)
		left := r.killed(k)
		p = 1 + (p+r.rng.IntN(3))%4 // 1..4, never the same as before
		t.Logf("kill %d: the run had written %v records, completed %v checkpoints; %s; restart with parallelism %d", k, read, chk, left, p)
		d = r.start(p)
		r.restarted(k)
	}
	return d, prod
}
