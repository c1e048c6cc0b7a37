package deploy

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// dashboardDir holds the dashboards Grafana provisions; homeDashboard is the
// one it opens first.
const (
	dashboardDir  = "configs/grafana/dashboards"
	homeDashboard = dashboardDir + "/kstreamd.json"
)

// dashboard is the part of a Grafana dashboard JSON the tests read.
type dashboard struct {
	file       string  // repository path
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	Targets    []target       `json:"targets"`
	Panels     []panel        `json:"panels"` // a collapsed row's panels
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type target struct {
	RefID      string         `json:"refId"`
	Expr       string         `json:"expr"`
	Datasource *datasourceRef `json:"datasource"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Datasource *datasourceRef  `json:"datasource"`
	Query      json.RawMessage `json:"query"` // a string, or {"query": "..."}
}

// queryText returns a query variable's query.
func (v variable) queryText() (string, error) {
	var s string
	if err := json.Unmarshal(v.Query, &s); err == nil {
		return s, nil
	}
	var o struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(v.Query, &o); err != nil {
		return "", fmt.Errorf("variable %q: query is neither a string nor {\"query\": ...}: %v", v.Name, err)
	}
	return o.Query, nil
}

// loadDashboards parses every dashboard JSON Grafana provisions (every
// *.json of dashboardDir), keyed by repository path, refusing trailing data.
func loadDashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoFile(dashboardDir), "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no dashboard in %s", dashboardDir)
	}
	out := map[string]dashboard{}
	for _, f := range files {
		rel := path.Join(dashboardDir, filepath.Base(f))
		var d dashboard
		dec := json.NewDecoder(strings.NewReader(string(readRepoFile(t, rel))))
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if dec.More() {
			t.Fatalf("%s: trailing data after the dashboard object", rel)
		}
		d.file = rel
		out[rel] = d
	}
	if _, ok := out[homeDashboard]; !ok {
		t.Fatalf("%s is missing", homeDashboard)
	}
	return out
}

// walk calls f for every panel, rows and their nested panels included.
func (d dashboard) walk(f func(p panel)) {
	var rec func(ps []panel)
	rec = func(ps []panel) {
		for _, p := range ps {
			f(p)
			rec(p.Panels)
		}
	}
	rec(d.Panels)
}

// query is one PromQL expression of the dashboard and where it is.
type query struct {
	where string // "panel \"Title\" target A" or "variable operator"
	expr  string
	panel bool // a panel target (PromQL), not a variable query (Grafana)
}

// queries returns every expression of the dashboard: panel targets and
// query variables.
func (d dashboard) queries(t *testing.T) []query {
	t.Helper()
	var qs []query
	d.walk(func(p panel) {
		for _, tg := range p.Targets {
			qs = append(qs, query{where: fmt.Sprintf("%s: panel %q target %s", d.file, p.Title, tg.RefID), expr: tg.Expr, panel: true})
		}
	})
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := v.queryText()
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, query{where: fmt.Sprintf("%s: variable %s", d.file, v.Name), expr: q})
	}
	return qs
}

// dashboardMetrics returns every metric name the dashboards query, with
// the places that query it.
func dashboardMetrics(t *testing.T) map[string][]string {
	t.Helper()
	used := map[string][]string{}
	var qs []query
	for _, d := range loadDashboards(t) {
		qs = append(qs, d.queries(t)...)
	}
	for _, q := range qs {
		names, err := metricNames(q.expr)
		if err != nil {
			t.Fatalf("%s: %v", q.where, err)
		}
		if len(names) == 0 {
			t.Errorf("%s: %q queries no metric", q.where, q.expr)
		}
		for _, n := range names {
			used[n] = append(used[n], q.where)
		}
	}
	return used
}

// rulesMetricPrefix names the metrics only a job with a rules operator
// exports (their series carry the operator's name).
const rulesMetricPrefix = "kstreamd_rules_"

// TestDashboardMetricsExported is issue 6's acceptance test: every metric a
// dashboard panel (or variable) queries is exported by a running daemon:
// the reference job (configs/colorshape.yaml), and for the kstreamd_rules_*
// series the rules reference job (configs/rules.yaml).
func TestDashboardMetricsExported(t *testing.T) {
	used := dashboardMetrics(t)
	if len(used) == 0 {
		t.Fatalf("%s queries no metric", dashboardDir)
	}
	general, rules := map[string][]string{}, map[string][]string{}
	for n, where := range used {
		switch {
		case strings.HasPrefix(n, clusterMetricPrefix): // TestDashboardClusterMetricsExported
		case isWindowMetric(n): // TestDashboardWindowMetricsExported
		case strings.HasPrefix(n, rulesMetricPrefix):
			rules[n] = where
		default:
			general[n] = where
		}
	}
	if len(rules) == 0 {
		t.Errorf("%s has no panel of the %s* metrics", homeDashboard, rulesMetricPrefix)
	}
	checkExported(t, sharedDaemon(t), general)
	rd := sharedRulesDaemon(t)
	checkExported(t, rd, rules)
	t.Logf("all %d dashboard metrics exported: %s", len(used), strings.Join(slices.Sorted(maps.Keys(used)), ", "))
}

// windowMetricPrefixes name the metrics only a job with a window operator
// exports (their series carry the operator's name).
var windowMetricPrefixes = []string{"kstreamd_window_", "kstreamd_operator_late_records_"}

func isWindowMetric(name string) bool {
	return slices.ContainsFunc(windowMetricPrefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

// windowExample is the example job with a window operator and a late sink.
const windowExample = "configs/examples/tumbling_window.yaml"

// TestDashboardWindowMetricsExported: every window metric the dashboard's
// Windows row queries (windows fired, open windows, late records routed
// and dropped) is exported by a daemon running windowExample from its
// start, before any record: the series exist at 0.
func TestDashboardWindowMetricsExported(t *testing.T) {
	used := map[string][]string{}
	for n, where := range dashboardMetrics(t) {
		if isWindowMetric(n) {
			used[n] = where
		}
	}
	if len(used) != 4 {
		t.Errorf("%s queries %d window metrics (%q), want the 4 of the Windows row", homeDashboard, len(used), slices.Sorted(maps.Keys(used)))
	}
	checkExported(t, windowDaemon(t), used)
}

// windowDaemon starts a daemon running windowExample for the test t and
// stops it when t ends.
func windowDaemon(t *testing.T) *daemon {
	t.Helper()
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cfg, err := jobConfig(windowExample, filepath.Join(dir, "data"), broker, metrics)
	if err != nil {
		t.Fatal(err)
	}
	d, err := startDaemon(dir, cfg, broker, metrics)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// checkExported fails t unless d exports every metric of used within 20s.
func checkExported(t *testing.T, d *daemon, used map[string][]string) {
	t.Helper()
	url := "http://" + d.metrics + "/metrics"
	var missing []string
	var lastErr error
	ok := testkit.Poll(20*time.Second, func() bool {
		names, err := exportedNames(url)
		if lastErr = err; err != nil {
			return false
		}
		missing = missing[:0]
		for n := range used {
			if !names[n] {
				missing = append(missing, n)
			}
		}
		return len(missing) == 0
	})
	if !ok {
		sort.Strings(missing)
		var b strings.Builder
		for _, n := range missing {
			fmt.Fprintf(&b, "\n  %s (queried by %s)", n, strings.Join(used[n], "; "))
		}
		t.Fatalf("after 20s the daemon does not export %d metric(s) the dashboard queries (last scrape error: %v):%s\ndaemon log:\n%s",
			len(missing), lastErr, b.String(), d.logTail())
	}
}

// grafanaDatasources is configs/grafana/provisioning/datasources/*.yaml.
type grafanaDatasources struct {
	APIVersion  int `yaml:"apiVersion"`
	Datasources []struct {
		Name      string `yaml:"name"`
		UID       string `yaml:"uid"`
		Type      string `yaml:"type"`
		Access    string `yaml:"access"`
		URL       string `yaml:"url"`
		IsDefault bool   `yaml:"isDefault"`
	} `yaml:"datasources"`
}

// grafanaDashboards is configs/grafana/provisioning/dashboards/*.yaml.
type grafanaDashboards struct {
	APIVersion int `yaml:"apiVersion"`
	Providers  []struct {
		Name    string `yaml:"name"`
		Type    string `yaml:"type"`
		Options struct {
			Path string `yaml:"path"`
		} `yaml:"options"`
	} `yaml:"providers"`
}

// decodeYAML decodes one YAML document of the repository into v.
func decodeYAML(t *testing.T, rel string, v any) {
	t.Helper()
	if err := yaml.Unmarshal(readRepoFile(t, rel), v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

// provisionedDatasource returns the uid of the one Prometheus datasource
// provisioned, and its URL.
func provisionedDatasource(t *testing.T) (uid, url string) {
	t.Helper()
	var ds grafanaDatasources
	decodeYAML(t, "configs/grafana/provisioning/datasources/prometheus.yaml", &ds)
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 {
		t.Fatalf("datasource provisioning: apiVersion %d with %d datasources, want apiVersion 1 with 1", ds.APIVersion, len(ds.Datasources))
	}
	d := ds.Datasources[0]
	if d.Type != "prometheus" || d.UID == "" || d.URL == "" || d.Access != "proxy" || !d.IsDefault {
		t.Fatalf("datasource %+v: want type prometheus, a uid, a url, access proxy, isDefault", d)
	}
	return d.UID, d.URL
}

// grafanaVarRE matches a Grafana variable reference in a query.
var grafanaVarRE = regexp.MustCompile(`\$\{?(\w+)`)

// grafanaBuiltins are Grafana's global variables a query may use.
var grafanaBuiltins = []string{"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s", "__range_ms"}

func TestGrafanaProvisioning(t *testing.T) {
	uid, dsURL := provisionedDatasource(t)

	t.Run("datasource url names the prometheus service", func(t *testing.T) {
		c := loadCompose(t)
		host := strings.TrimPrefix(dsURL, "http://")
		name, port, _ := strings.Cut(host, ":")
		if _, ok := c.Services[name]; !ok || port != "9090" {
			t.Errorf("datasource url %q: want http://<compose service>:9090, and there is no service %q", dsURL, name)
		}
	})

	t.Run("dashboard provider loads the mounted dashboards", func(t *testing.T) {
		var dp grafanaDashboards
		decodeYAML(t, "configs/grafana/provisioning/dashboards/kstreamd.yaml", &dp)
		if dp.APIVersion != 1 || len(dp.Providers) != 1 || dp.Providers[0].Type != "file" {
			t.Fatalf("dashboard provisioning %+v: want apiVersion 1 and one provider of type file", dp)
		}
		g := loadCompose(t).Services["grafana"]
		mount, ok := g.mountOf("./configs/grafana/dashboards")
		if !ok {
			t.Fatalf("grafana does not mount ./configs/grafana/dashboards; volumes %q", g.Volumes)
		}
		if p := dp.Providers[0].Options.Path; p != mount {
			t.Errorf("dashboard provider path %q, want %q where compose mounts configs/grafana/dashboards", p, mount)
		}
		for _, dir := range []string{"datasources", "dashboards"} {
			src, want := "./configs/grafana/provisioning/"+dir, "/etc/grafana/provisioning/"+dir
			if got, ok := g.mountOf(src); !ok || got != want {
				t.Errorf("grafana mounts %s at %q, want %s", src, got, want)
			}
		}
		home := g.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
		if want := path.Join(mount, path.Base(homeDashboard)); home != want {
			t.Errorf("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH = %q, want %q", home, want)
		}
	})

	for file, d := range loadDashboards(t) {
		t.Run(file, func(t *testing.T) { checkDashboard(t, d, uid) })
	}

	t.Run("provisioning files parse", func(t *testing.T) {
		// Grafana loads every file of these directories: each must parse.
		for _, dir := range []string{"configs/grafana/provisioning/datasources", "configs/grafana/provisioning/dashboards"} {
			entries, err := os.ReadDir(repoFile(dir))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				rel := path.Join(dir, e.Name())
				if ext := path.Ext(rel); e.IsDir() || ext != ".yaml" && ext != ".yml" {
					t.Errorf("%s: Grafana provisioning directories hold only .yaml files", rel)
					continue
				}
				var v map[string]any
				decodeYAML(t, rel, &v)
				if v["apiVersion"] != 1 {
					t.Errorf("%s: apiVersion %v, want 1", rel, v["apiVersion"])
				}
			}
		}
	})
}

// checkDashboard checks one dashboard: unique panel ids inside the grid,
// every panel and query variable on the provisioned datasource uid, every
// panel with a query, every $variable defined, every query tokenizable.
func checkDashboard(t *testing.T, d dashboard, uid string) {
	t.Helper()
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q: both are required", d.UID, d.Title)
	}
	ids := map[int]string{}
	var charts int
	d.walk(func(p panel) {
		if prev, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("panel %q: id %d is zero or also panel %q's", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if g := p.GridPos; g.W < 1 || g.H < 1 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
		}
		if p.Type == "row" {
			return
		}
		charts++
		if p.Datasource == nil || p.Datasource.UID != uid || p.Datasource.Type != "prometheus" {
			t.Errorf("panel %q: datasource %+v, want the provisioned {prometheus %s}", p.Title, p.Datasource, uid)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no target", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || tg.Datasource.UID != uid {
				t.Errorf("panel %q target %s: datasource %+v, want uid %s", p.Title, tg.RefID, tg.Datasource, uid)
			}
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q target %s: empty expr", p.Title, tg.RefID)
			}
		}
	})
	if charts == 0 {
		t.Error("the dashboard has no panel")
	}
	vars := slices.Clone(grafanaBuiltins)
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != uid) {
			t.Errorf("variable %q: datasource %+v, want uid %s", v.Name, v.Datasource, uid)
		}
	}
	for _, q := range d.queries(t) {
		for _, m := range grafanaVarRE.FindAllStringSubmatch(q.expr, -1) {
			if !slices.Contains(vars, m[1]) {
				t.Errorf("%s: uses $%s, which is neither a dashboard variable nor a Grafana builtin", q.where, m[1])
			}
		}
		if _, err := metricNames(q.expr); err != nil {
			t.Errorf("%s: %v", q.where, err)
		}
	}
}
