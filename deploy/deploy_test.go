package deploy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"gopkg.in/yaml.v3"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/pipeline"
)

// testVersion is the version the test binary is stamped with, the way the
// Dockerfile stamps the image's (-X github.com/kstreamd/kstreamd/sdk.Version=...).
const testVersion = "deploy-test"

var (
	root    string // the repository root
	binPath string // the kstreamd binary TestMain built

	shared, sharedRules sharedDaemonOnce
)

// sharedDaemonOnce is a daemon the tests of this package share: started
// on first use, stopped by TestMain.
type sharedDaemonOnce struct {
	once sync.Once
	d    *daemon
	err  error
}

// TestMain builds kstreamd once for every test of the package, and stops
// the shared daemon (if a test started it) after the last one; when the
// tests passed, it fails the run if a goroutine outlived them.
func TestMain(m *testing.M) {
	code := testMain(m)
	if code == 0 {
		http.DefaultClient.CloseIdleConnections()
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func testMain(m *testing.M) int {
	var err error
	if root, err = filepath.Abs(".."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "kstreamd-deploy-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	binPath = filepath.Join(tmp, "kstreamd")
	if err := buildKstreamd(binPath); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stopShared()
	return m.Run()
}

// buildKstreamd builds ./cmd/kstreamd to out, stamped with testVersion and
// the VCS revision. It
// uses the default build flags (no -trimpath, cgo as the toolchain says), so
// it shares the build cache with the other packages' tests and costs only a
// link; TestStaticBuild checks the Dockerfile's CGO_ENABLED=0 build apart.
func buildKstreamd(out string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// -buildvcs=auto: stamp the VCS revision even where GOFLAGS turns it off.
	cmd := exec.CommandContext(ctx, goTool(), "build", "-buildvcs=auto", "-ldflags", "-X github.com/kstreamd/kstreamd/sdk.Version="+testVersion, "-o", out, "./cmd/kstreamd")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/kstreamd: %v\n%s", err, b)
	}
	return nil
}

// goTool returns the go command that runs these tests.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(goruntime.GOROOT(), "bin", "go")
}

// requireTool returns the path of the command name, failing the test (never
// skipping it) with the Debian package that provides it when it is missing.
func requireTool(t *testing.T, name, debPackage string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not on PATH (%v): install the Debian package %q (`apt-get install %s`; scripts/test installs it)",
			name, err, debPackage, debPackage)
	}
	return p
}

// repoFile returns the path of a file given relative to the repository root.
func repoFile(rel string) string { return filepath.Join(root, filepath.FromSlash(rel)) }

// readRepoFile returns the content of a file of the repository.
func readRepoFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(repoFile(rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadPipeline loads a pipeline file of the repository as kstreamd does.
func loadPipeline(t *testing.T, rel string) *pipeline.Config {
	t.Helper()
	cfg, err := pipeline.Load(repoFile(rel), nil)
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return cfg
}

// dockerPipeline loads configs/colorshape-docker.yaml, the pipeline
// docker-compose.yml mounts.
func dockerPipeline(t *testing.T) *pipeline.Config {
	t.Helper()
	return loadPipeline(t, "configs/colorshape-docker.yaml")
}

// daemon is a `kstreamd run` child process.
type daemon struct {
	dir     string // config and log (and, for the shared daemon, data)
	broker  string // the broker's host:port
	metrics string // the /metrics listener's host:port
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the process has exited
	waitErr error         // the process's exit, set before exited closes
}

// demoItemsPerSecond is high so every labelled series appears within a
// second of the start.
const demoItemsPerSecond = 200

// testCheckpointInterval replaces the reference job's checkpoints.interval,
// so that checkpoints and the exactly-once sink's transactions complete
// several times within a test.
const testCheckpointInterval = "500ms"

// referenceConfig is configs/colorshape.yaml, the job the README runs, with
// only what a test must change: its data under dataDir, the embedded broker
// at broker, /metrics at metrics, a checkpoint every testCheckpointInterval
// and the demo producer at demoItemsPerSecond. Everything else (the
// exactly-once sink, incremental checkpoints, the dead-letter policies) is
// the file's, so the dashboard is checked against the job a newcomer runs.
func referenceConfig(dataDir, broker, metrics string) (string, error) {
	return jobConfig("configs/colorshape.yaml", dataDir, broker, metrics)
}

// jobConfig is the reference job file rel (configs/colorshape.yaml,
// configs/rules.yaml or an example of configs/examples) changed as
// referenceConfig says; a file without a demo section gets none.
func jobConfig(rel, dataDir, broker, metrics string) (string, error) {
	b, err := os.ReadFile(repoFile(rel))
	if err != nil {
		return "", err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return "", fmt.Errorf("%s: %w", rel, err)
	}
	hasDemo := hasTopKey(&doc, "demo")
	for _, set := range []struct {
		keys  []string
		value string
		skip  bool
	}{
		{[]string{"data_dir"}, dataDir, false},
		{[]string{"kafka", "embedded", "address"}, broker, false},
		{[]string{"metrics", "address"}, metrics, false},
		{[]string{"checkpoints", "interval"}, testCheckpointInterval, false},
		{[]string{"demo", "items_per_second"}, strconv.Itoa(demoItemsPerSecond), !hasDemo},
	} {
		if set.skip {
			continue
		}
		if err := setYAMLPath(&doc, scalar(set.value), set.keys...); err != nil {
			return "", fmt.Errorf("%s: %w", rel, err)
		}
	}
	out, err := yaml.Marshal(&doc)
	return string(out), err
}

// hasTopKey reports whether the YAML document doc's top mapping has key.
func hasTopKey(doc *yaml.Node, key string) bool {
	n := doc
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for j := 0; j+1 < len(n.Content); j += 2 {
		if n.Content[j].Value == key {
			return true
		}
	}
	return false
}

// sharedDaemon returns the daemon running the reference job that the tests
// of this package share, starting it on first use; TestMain stops it. Once
// it is up, it has been sent a malformed item and an undecodable rule (see
// produceBadRecords), which it dead-letters.
func sharedDaemon(t *testing.T) *daemon {
	t.Helper()
	shared.once.Do(func() {
		shared.err = errors.New("the shared daemon did not start (see the first test that used it)")
		dir, err := os.MkdirTemp("", "kstreamd-deploy-daemon-")
		if err != nil {
			shared.err = err
			return
		}
		broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
		cfg, err := referenceConfig(filepath.Join(dir, "data"), broker, metrics)
		if err != nil {
			shared.err = err
			os.RemoveAll(dir)
			return
		}
		d, err := startDaemon(dir, cfg, broker, metrics)
		if err == nil {
			if err = d.produceBadRecords(); err != nil {
				err = errors.Join(err, d.stop())
				os.RemoveAll(dir)
			}
		}
		if err != nil {
			shared.err = err
			return
		}
		shared.d, shared.err = d, nil
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.d
}

// sharedRulesDaemon returns the daemon running the rules reference job
// (configs/rules.yaml) that the tests of this package share, starting it on
// first use; TestMain stops it.
func sharedRulesDaemon(t *testing.T) *daemon {
	t.Helper()
	sharedRules.once.Do(func() {
		sharedRules.err = errors.New("the shared rules daemon did not start (see the first test that used it)")
		dir, err := os.MkdirTemp("", "kstreamd-deploy-rules-")
		if err != nil {
			sharedRules.err = err
			return
		}
		broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
		cfg, err := jobConfig("configs/rules.yaml", filepath.Join(dir, "data"), broker, metrics)
		if err == nil {
			sharedRules.d, err = startDaemon(dir, cfg, broker, metrics)
		}
		if err != nil {
			os.RemoveAll(dir)
		}
		sharedRules.err = err
	})
	if sharedRules.err != nil {
		t.Fatal(sharedRules.err)
	}
	return sharedRules.d
}

func stopShared() {
	for _, s := range []*sharedDaemonOnce{&shared, &sharedRules} {
		if s.d != nil {
			if err := s.d.stop(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
			os.RemoveAll(s.d.dir)
		}
	}
}

// startDaemon writes config to dir, starts `kstreamd run` on it with its log
// in dir, and waits until /healthz at metrics answers. On error it has
// stopped the process and removed dir.
func startDaemon(dir, config, broker, metrics string) (*daemon, error) {
	d := &daemon{dir: dir, broker: broker, metrics: metrics, exited: make(chan struct{})}
	cfg := filepath.Join(dir, "pipeline.yaml")
	logf, err := os.Create(filepath.Join(dir, "kstreamd.log"))
	if err == nil {
		err = os.WriteFile(cfg, []byte(config), 0o644)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	d.cmd = exec.Command(binPath, "run", "--config", cfg)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() { d.waitErr = d.cmd.Wait(); close(d.exited) }()

	healthy := testkit.Poll(20*time.Second, func() bool {
		select {
		case <-d.exited:
			return true
		default:
		}
		resp, err := http.Get("http://" + metrics + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	select {
	case <-d.exited:
		err := fmt.Errorf("kstreamd exited at start (%v):\n%s", d.waitErr, d.logTail())
		os.RemoveAll(dir)
		return nil, err
	default:
	}
	if !healthy {
		err := errors.Join(fmt.Errorf("kstreamd /healthz not ok within 20s:\n%s", d.logTail()), d.stop())
		os.RemoveAll(dir)
		return nil, err
	}
	return d, nil
}

// badItem is an item that is not JSON; badRule is a rule without its
// second shape. The reference job dead-letters both (reasons malformed_json
// and invalid), to items-dlq and rules-dlq.
var (
	badItem = &kgo.Record{Topic: "items", Key: []byte("red"), Value: []byte(`{"color": "red", "shape":`)}
	badRule = &kgo.Record{Topic: "rules", Key: []byte("R9"), Value: []byte(`{"name": "R9", "first": "CIRCLE"}`)}
)

// produceBadRecords writes badItem and badRule, so that the dead-letter
// series have data.
func (d *daemon) produceBadRecords() error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.broker))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, badItem, badRule).FirstErr(); err != nil {
		return fmt.Errorf("produce a malformed item and an undecodable rule: %w", err)
	}
	return nil
}

// stop sends SIGTERM and waits up to 15 s for a clean exit (then kills). It
// returns an error if the exit was not clean. It leaves the daemon's files.
func (d *daemon) stop() error {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(15 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
		return fmt.Errorf("kstreamd did not stop within 15s of SIGTERM:\n%s", d.logTail())
	}
	if d.waitErr != nil {
		return fmt.Errorf("kstreamd exited with %v after SIGTERM:\n%s", d.waitErr, d.logTail())
	}
	return nil
}

// logTail returns the last lines of the daemon's log.
func (d *daemon) logTail() string {
	b, err := os.ReadFile(filepath.Join(d.dir, "kstreamd.log"))
	if err != nil {
		return err.Error()
	}
	const max = 8 << 10
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// exportedNames returns the sample names on the /metrics page at url (for a
// histogram or summary: its _bucket, _sum and _count series and the quantile
// series, as PromQL sees them).
func exportedNames(url string) (map[string]bool, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names, sc.Err()
}
