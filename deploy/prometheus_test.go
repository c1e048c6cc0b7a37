package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// TestPromtoolCheckConfig runs `promtool check config` on the Prometheus
// configurations docker-compose.yml and docker-compose.cluster.yml mount.
func TestPromtoolCheckConfig(t *testing.T) {
	bin := requireTool(t, "promtool", "prometheus")
	for _, rel := range []string{"configs/prometheus.yml", clusterPrometheus} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, bin, "check", "config", repoFile(rel)).CombinedOutput()
		cancel()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool check config %s: %v\n%s", rel, err, out)
		}
	}
}

// promResult is a Prometheus HTTP API instant-query answer.
type promResult struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"` // [unix time, "value"]
		} `json:"result"`
	} `json:"data"`
}

// value returns the i-th sample's value.
func (r promResult) value(i int) float64 {
	s, _ := r.Data.Result[i].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return v
}

// promQuery runs an instant query against the Prometheus server at addr. An
// invalid query is not an error: it comes back as Status "error".
func promQuery(addr, q string) (promResult, error) {
	var r promResult
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return r, fmt.Errorf("query %q: %s: %v", q, resp.Status, err)
	}
	return r, nil
}

// startPrometheus runs Debian's prometheus server scraping each daemon's
// /metrics every second (bin is its path), on a free loopback port with its TSDB under a temp
// dir, and returns its address. The test's cleanup stops it.
func startPrometheus(t *testing.T, bin string, ds ...*daemon) string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	var targets []string
	for _, d := range ds {
		targets = append(targets, strconv.Quote(d.metrics))
	}
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: kstreamd
    static_configs:
      - targets: [%s]
`, strings.Join(targets, ", "))
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := testkit.FreeAddr(t)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("prometheus did not stop within 10s of SIGTERM")
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus log:\n%s", b)
		}
	})
	return addr
}

// grafanaVars replaces the Grafana variables of a dashboard query the way
// Grafana would with every value selected.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "5m")

// anyVarRE matches the dashboard's own variables ($instance, ${operator}).
var anyVarRE = regexp.MustCompile(`\$\{?\w+\}?`)

// TestPrometheusScrapesDaemon is issue 6's acceptance test: a real
// Prometheus server scrapes a running daemon and its HTTP API returns the
// matcher's records-in series; then every dashboard panel query is run
// through it and must be valid PromQL and return data.
func TestPrometheusScrapesDaemon(t *testing.T) {
	bin := requireTool(t, "prometheus", "prometheus")
	// The reference job exports every series but the rules operator's,
	// which the rules reference job does, and the window operator's, which
	// the window example does.
	d := sharedDaemon(t)
	addr := startPrometheus(t, bin, d, sharedRulesDaemon(t), windowDaemon(t))

	const metric = "kstreamd_operator_records_in_total"
	var last promResult
	var lastErr error
	var matcher float64
	ok := testkit.Poll(25*time.Second, func() bool {
		last, lastErr = promQuery(addr, metric)
		if lastErr != nil || last.Status != "success" {
			return false
		}
		matcher = 0
		for i, s := range last.Data.Result {
			if s.Metric["operator"] == "matcher" && s.Metric["job"] == "kstreamd" {
				matcher += last.value(i)
			}
		}
		return matcher > 0
	})
	if !ok {
		t.Fatalf("after 25s Prometheus's /api/v1/query?query=%s has no operator=\"matcher\" sample > 0: last answer %+v, err %v",
			metric, last, lastErr)
	}
	subtasks := map[string]bool{}
	for _, s := range last.Data.Result {
		if s.Metric["operator"] == "matcher" {
			subtasks[s.Metric["subtask"]] = true
			if s.Metric["instance"] != d.metrics {
				t.Errorf("series %v: instance %q, want %q", s.Metric, s.Metric["instance"], d.metrics)
			}
		}
	}
	if len(subtasks) != 2 || !subtasks["0"] || !subtasks["1"] {
		t.Errorf("matcher series have subtasks %v, want 0 and 1 (parallelism 2)", subtasks)
	}
	t.Logf("Prometheus reads %s{operator=\"matcher\"} = %v", metric, matcher)

	// Every panel query, as Grafana sends it with every value selected, is
	// valid PromQL and returns data. Rates need two scrapes, hence the poll.
	for file, dash := range loadDashboards(t) {
		for _, q := range dash.queries(t) {
			if !q.panel {
				continue // label_values() is Grafana's, not PromQL
			}
			expr := anyVarRE.ReplaceAllString(grafanaVars.Replace(q.expr), ".*")
			// The Cluster row's series exist only on a cluster-mode daemon
			// (TestDashboardClusterMetricsExported): here only valid PromQL.
			names, _ := metricNames(q.expr)
			clusterOnly := len(names) > 0 && !slices.ContainsFunc(names, func(n string) bool { return !strings.HasPrefix(n, clusterMetricPrefix) })
			var r promResult
			var err error
			ok := testkit.Poll(10*time.Second, func() bool {
				r, err = promQuery(addr, expr)
				return err == nil && (clusterOnly || r.Status != "success" || len(r.Data.Result) > 0)
			})
			switch {
			case err != nil:
				t.Errorf("%s: %v", q.where, err)
			case r.Status != "success":
				t.Errorf("%s: Prometheus refuses %q: %s: %s", q.where, expr, r.ErrorType, r.Error)
			case !ok:
				t.Errorf("%s: %q returned no series within 10s (%s)", q.where, expr, file)
			}
		}
	}
}
