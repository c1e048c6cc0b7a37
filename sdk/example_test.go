package sdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// TestCustomOperatorExample builds examples/custom-operator (a module of its
// own: kstreamd plus the session_total operator type, through package sdk
// alone) as its README says and drives the binary: version; validate of the
// example's pipeline.yaml, and of bad session_total params (exit 2 naming
// FILE:LINE:COL); then, with sync and with async state, run on a kfake
// broker over six payments of two customers and one without a numeric
// amount: the exactly-once output holds every customer's running totals in
// order, the bad payment is skipped and counted with reason invalid, and
// SIGTERM stops the job with exit status 0. The two-input order_shipment
// type runs too (runShipmentJob).
func TestCustomOperatorExample(t *testing.T) {
	bin := buildExample(t)

	t.Run("version", func(t *testing.T) {
		code, stdout, stderr := runExample(t, bin, "version")
		if code != 0 || !strings.HasPrefix(stdout, "kstreamd dev\nmodule example.com/kstreamd-custom") || !strings.Contains(stdout, "\nkstreamd module ") {
			t.Fatalf("version: exit %d, stdout %q, stderr %q; want 0, \"kstreamd dev\", the example's module and the kstreamd module", code, stdout, stderr)
		}
	})

	t.Run("validate", func(t *testing.T) {
		shipped := filepath.Join(exampleDir(t), "pipeline.yaml")
		if code, stdout, stderr := runExample(t, bin, "validate", "--config", shipped); code != 0 || stdout != shipped+": ok\n" {
			t.Fatalf("validate %s: exit %d, stdout %q, stderr %q; want 0 and ok", shipped, code, stdout, stderr)
		}
		for _, tc := range []struct {
			name, params string
			mark         string // the field the error points at
			msg          string // what follows "FILE:LINE:COL: "
		}{
			{"unknown field", "{field: amount, feild: total}", "feild", `operators[0].params.feild: unknown field (did you mean "field"?)`},
			{"ttl below 1ms", "{ttl: 0s}", "ttl", "operators[0].params.ttl: 0s is below the 1ms minimum"},
			{"empty field", `{field: ""}`, "field", "operators[0].params.field: must not be empty"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cfg := exampleConfig(t.TempDir(), "127.0.0.1:1", "", false, tc.params)
				path := filepath.Join(t.TempDir(), "bad.yaml")
				if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
					t.Fatal(err)
				}
				line, col := position(t, cfg, "params: "+tc.params, tc.mark)
				code, stdout, stderr := runExample(t, bin, "validate", "--config", path)
				want := fmt.Sprintf("%s:%d:%d: %s\n", path, line, col, tc.msg)
				if code != 2 || stdout != "" || stderr != want {
					t.Fatalf("validate: exit %d, stdout %q, stderr %q; want exit 2 and stderr %q", code, stdout, stderr, want)
				}
			})
		}
	})

	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("run/async_state=%t", async), func(t *testing.T) { runExampleJob(t, bin, async, false) })
	}
	// The example's own format (csvformat.go): payments read as CSV lines,
	// totals written as CSV lines, a line of three columns skipped with
	// the format's own reason.
	t.Run("csv_format", func(t *testing.T) { runExampleJob(t, bin, false, true) })
	t.Run("order_shipment", func(t *testing.T) { runShipmentJob(t, bin) })
}

// runExampleJob runs session_total (async state or not) on a kfake broker
// and checks its output, its skip metric and its clean stop; with csv, the
// source reads and the sink writes the example's csv format.
func runExampleJob(t *testing.T, bin string, async, csv bool) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "payments", "totals"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	broker := c.ListenAddrs()[0]
	metrics := testkit.FreeAddr(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "pipeline.yaml")
	cfg := exampleConfig(dir, broker, metrics, async, "{field: amount, ttl: 1h}")
	if csv {
		cfg = strings.Replace(cfg, "    on_error: skip\n", "    on_error: skip\n    format: csv\n    format_params: {fields: [customer, amount]}\n", 1)
		cfg = strings.Replace(cfg, "    delivery: exactly-once\n", "    delivery: exactly-once\n    format: csv\n    format_params: {fields: [key, total]}\n", 1)
	}
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}

	out := &testkit.SyncBuffer{}
	cmd := exec.Command(bin, "run", "--config", path)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	exited := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	t.Cleanup(func() {
		if !exited() {
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("kstreamd-custom log:\n%s", out.String())
		}
	})
	healthy := testkit.Poll(30*time.Second, func() bool {
		if exited() {
			return true
		}
		resp, err := http.Get("http://" + metrics + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if !healthy || exited() {
		t.Fatalf("kstreamd-custom did not become healthy within 30s (exited: %v)", exited())
	}

	// Keyed by customer on the Kafka side too, so each customer's payments
	// are in one partition and reach session_total in this order.
	payments := []struct{ customer, amount string }{
		{"alice", "10"}, {"bob", "5"}, {"alice", "2.5"}, {"bob", "1"},
		{"alice", `"n/a"`}, // not a number: skipped with reason invalid
		{"alice", "7"}, {"bob", "4"},
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.DefaultProduceTopic("payments"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for _, p := range payments {
		if csv {
			recs = append(recs, &kgo.Record{Key: []byte(p.customer), Value: fmt.Appendf(nil, "%s,%s", p.customer, strings.Trim(p.amount, `"`))})
			continue
		}
		recs = append(recs, &kgo.Record{Key: []byte(p.customer), Value: fmt.Appendf(nil, `{"customer":%q,"amount":%s}`, p.customer, p.amount)})
	}
	if csv { // three columns: the format refuses it (reason csv_fields)
		recs = append(recs, &kgo.Record{Key: []byte("bob"), Value: []byte("bob,1,2")})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	var got []*kgo.Record
	testkit.Poll(60*time.Second, func() bool {
		got = testkit.ReadTopic(t, []string{broker}, "totals", 10*time.Second)
		return len(got) >= 6 || exited()
	})
	type total struct {
		Key   string  `json:"key"`
		Total float64 `json:"total"`
	}
	byKey := map[string][]float64{}
	for _, r := range got {
		var v total
		if csv {
			k, n, ok := strings.Cut(string(r.Value), ",")
			f, err := strconv.ParseFloat(n, 64)
			if !ok || err != nil {
				t.Fatalf("totals record %q: want a CSV line key,total", r.Value)
			}
			v = total{Key: k, Total: f}
		} else if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("totals record %q: %v", r.Value, err)
		}
		if string(r.Key) != v.Key {
			t.Errorf("totals record %s has Kafka key %q", r.Value, r.Key)
		}
		byKey[v.Key] = append(byKey[v.Key], v.Total)
	}
	want := map[string][]float64{"alice": {10, 12.5, 19.5}, "bob": {5, 6, 10}}
	if len(got) != 6 || len(byKey) != 2 || !slices.Equal(byKey["alice"], want["alice"]) || !slices.Equal(byKey["bob"], want["bob"]) {
		t.Fatalf("totals (read_committed): %d records, running totals %v; want %v", len(got), byKey, want)
	}
	skipped := map[string]string{"source": "payments", "reason": "invalid"}
	testkit.WaitMetric(t, 10*time.Second, "http://"+metrics+"/metrics", "kstreamd_source_records_skipped_total", skipped, 1)
	wantSkipped := 1.0
	if csv {
		testkit.WaitMetric(t, 10*time.Second, "http://"+metrics+"/metrics", "kstreamd_source_records_skipped_total",
			map[string]string{"source": "payments", "reason": "csv_fields"}, 1)
		wantSkipped = 2
	}
	if all, err := testkit.Scrape("http://"+metrics+"/metrics", "kstreamd_source_records_skipped_total", nil); err != nil || all != wantSkipped {
		t.Fatalf("kstreamd_source_records_skipped_total over every reason = %v (err %v), want %v", all, err, wantSkipped)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("kstreamd-custom did not exit within 30s of SIGTERM")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0", code)
	}
}

// exampleConfig is the example's pipeline on the broker at broker (not
// embedded), its data under dir, with session_total's params given as a
// flow mapping on one line.
func exampleConfig(dir, broker, metrics string, async bool, params string) string {
	return fmt.Sprintf(`job:
  name: session-totals
  parallelism: 2
data_dir: %s
kafka:
  brokers: [%s]
  embedded:
    enabled: false
checkpoints:
  interval: 1s
metrics:
  address: %q
sources:
  - name: payments
    topic: payments
    on_error: skip
operators:
  - name: totals
    type: session_total
    input: payments
    key_by: customer
    async_state: %t
    params: %s
sinks:
  - name: totals-out
    input: totals
    topic: totals
    delivery: exactly-once
`, dir, broker, metrics, async, params)
}

// position returns the 1-based line and column of mark within the first
// line of text that contains line.
func position(t *testing.T, text, line, mark string) (int, int) {
	t.Helper()
	for i, l := range strings.Split(text, "\n") {
		if strings.Contains(l, line) {
			if col := strings.Index(l, mark); col >= 0 {
				return i + 1, col + 1
			}
		}
	}
	t.Fatalf("no line containing %q with %q", line, mark)
	return 0, 0
}

// exampleDir is examples/custom-operator of this repository.
func exampleDir(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "examples", "custom-operator")
}

// goTool is the go command: from PATH, else the one of the toolchain
// running the test.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(goruntime.GOROOT(), "bin", "go")
}

// buildExample builds examples/custom-operator into a temp dir and returns
// the binary. It builds as the example's README does, in its directory with
// its go.mod and go.sum as they are (-mod=readonly); when that fails on
// them (the main module's requirements changed and the example's were not
// tidied) the test fails saying so, and builds a copy with -mod=mod and the main
// module's go.sum so the rest of the test still runs. Nothing is written
// to the tree.
func buildExample(t *testing.T) string {
	t.Helper()
	src := exampleDir(t)
	bin := filepath.Join(t.TempDir(), "kstreamd-custom")
	out, err := goBuild(src, bin, "-mod=readonly")
	if err == nil {
		return bin
	}
	if !bytes.Contains(out, []byte("go.mod")) && !bytes.Contains(out, []byte("go.sum")) {
		t.Fatalf("go build of examples/custom-operator: %v\n%s", err, out)
	}
	t.Errorf("examples/custom-operator does not build as its README says (%v):\n%s\n"+
		"if the main module's requirements changed: cd examples/custom-operator && go mod tidy", err, out)

	cp := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(filepath.Dir(src))
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".go") || name == "go.mod" || name == "go.sum") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		switch name {
		case "go.mod":
			b = bytes.ReplaceAll(b, []byte("=> ../.."), []byte("=> "+root))
		case "go.sum":
			rootSum, err := os.ReadFile(filepath.Join(root, "go.sum"))
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, rootSum...)
		}
		if err := os.WriteFile(filepath.Join(cp, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := goBuild(cp, bin, "-mod=mod"); err != nil {
		t.Fatalf("go build of a copy of examples/custom-operator with -mod=mod: %v\n%s", err, out)
	}
	return bin
}

// goBuild runs go build -o bin . in dir with the -mod flag given, bounded
// by 5 minutes (a cold build cache compiles every dependency).
func goBuild(dir, bin, mod string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS="+mod+" -buildvcs=false", "GOWORK=off")
	return cmd.CombinedOutput()
}

// runExample runs the binary with args, bounded by 20 s, and returns its
// exit status, stdout and stderr.
func runExample(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("kstreamd-custom %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}
