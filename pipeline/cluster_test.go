package pipeline

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/graph"
)

// clusterHead is the head of a cluster-mode test config (lines 1 to 23,
// the first empty): job clicks at maxParallelism, an outside broker, a
// checkpoint every 1s (timeout 1m), units units and a filesystem store in
// dir, the source clicks and the filter valid over it keeping what
// condition holds for; a config appends its other operators and sinks.
func clusterHead(maxParallelism, units int, dir, condition string) string {
	return fmt.Sprintf(`
job:
  name: clicks
  max_parallelism: %d
kafka:
  brokers: [localhost:9092]
checkpoints:
  interval: 1s
  timeout: 1m
cluster:
  enabled: true
  units: %d
  store:
    dir: %s
sources:
  - name: clicks
    topic: clicks
operators:
  - name: valid
    type: filter
    input: clicks
    params:
      condition: %s
`, maxParallelism, units, dir, condition)
}

// clusterYAML is a cluster job of three stages: the filter, a keyed count
// by user (to the sink users) and a keyed count of those counts (to the
// exactly-once sink reached), on 12 units.
var clusterYAML = clusterHead(128, 12, "/shared/kstreamd", "has(value.user)") + `  - name: per_user
    type: keyed_count
    input: valid
    key_by: user
  - name: per_count
    type: keyed_count
    input: per_user
    key_by: count
sinks:
  - name: reached
    input: per_count
    topic: reached
    delivery: exactly-once
    transaction_timeout: 10m
  - name: users
    input: per_user
    topic: users
`

// TestPlanStages: the planner cuts the graph at each key-group edge into
// stages with one repartition topic each, named <job>-<stage>-repartition
// with one partition per unit; every vertex of a unit runs one subtask.
func TestPlanStages(t *testing.T) {
	cfg, err := Parse("cluster.yaml", []byte(clusterYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := cfg.PlanStages()
	if err != nil {
		t.Fatal(err)
	}
	want := `units=12
stage 0
  source clicks topic=clicks
  operator valid type=filter input=clicks
  sink repartition.1 topic=clicks-1-repartition units=12
  clicks -forward-> valid
  valid -hash(user)-> repartition.1
stage 1
  source repartition.1 topic=clicks-1-repartition repartition
  operator per_user type=keyed_count input=repartition.1
  sink users topic=users
  sink repartition.2 topic=clicks-2-repartition units=12
  repartition.1 -forward-> per_user
  per_user -hash(count)-> repartition.2
  per_user -forward-> users
stage 2
  source repartition.2 topic=clicks-2-repartition repartition
  operator per_count type=keyed_count input=repartition.2
  sink reached topic=reached
  repartition.2 -forward-> per_count
  per_count -forward-> reached
repartition clicks-1-repartition partitions=12 0->1 (valid -hash(user)-> per_user)
repartition clicks-2-repartition partitions=12 1->2 (per_user -hash(count)-> per_count)
`
	if got := st.String(); got != want {
		t.Errorf("stages:\n%s\nwant:\n%s", got, want)
	}
	for _, s := range st.Stages {
		for _, v := range names(s.Graph) {
			if p := s.Graph.Parallelism(v); p != 1 {
				t.Errorf("stage %d vertex %s: parallelism %d, want 1", s.Index, v, p)
			}
		}
	}
	if cfg.ClusterGroupID() != "kstreamd-clicks-cluster" {
		t.Errorf("group id %q", cfg.ClusterGroupID())
	}
	if len(st.Fingerprint) != 64 {
		t.Errorf("fingerprint %q: want 64 hex digits", st.Fingerprint)
	}
}

// TestFingerprint: the fingerprint changes with the unit count, an
// operator's params and a key, and not with parallelism.
func TestFingerprint(t *testing.T) {
	plan := func(t *testing.T, yaml string) *graph.Graph {
		t.Helper()
		cfg, err := Parse("cluster.yaml", []byte(yaml), nil)
		if err != nil {
			t.Fatal(err)
		}
		g, err := cfg.Plan()
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	base := graph.Fingerprint(plan(t, clusterYAML), 12)
	for _, tc := range []struct {
		name, old, new string
		units          int
		same           bool
	}{
		{name: "units", units: 6},
		{name: "params", old: "has(value.user)", new: "has(value.id)", units: 12},
		{name: "key", old: "key_by: count", new: "key_by: user", units: 12},
		{name: "parallelism", old: "max_parallelism: 128", new: "max_parallelism: 128\n  parallelism: 4", units: 12, same: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := clusterYAML
			if tc.old != "" {
				y = strings.Replace(y, tc.old, tc.new, 1)
			}
			got := graph.Fingerprint(plan(t, y), tc.units)
			if (got == base) != tc.same {
				t.Errorf("fingerprint equal to the base: %v, want %v", got == base, tc.same)
			}
		})
	}
}

// TestClusterOffByDefault: without a cluster section nothing changes and
// PlanStages refuses.
func TestClusterOffByDefault(t *testing.T) {
	y := strings.Replace(clusterYAML, "cluster:\n  enabled: true\n", "cluster:\n  enabled: false\n", 1)
	cfg, err := Parse("cluster.yaml", []byte(y), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster.Enabled {
		t.Fatal("cluster enabled")
	}
	if _, err := cfg.PlanStages(); err == nil || err.Error() != "pipeline: cluster mode is not enabled (cluster.enabled)" {
		t.Errorf("PlanStages: %v", err)
	}
	if got := Default().Cluster; got != defaultCluster() || got.Enabled {
		t.Errorf("default cluster %+v", got)
	}
}

// TestPlanStagesBroadcast: a broadcast source is read by every unit of the
// stage of its consumer, not by stage 0.
func TestPlanStagesBroadcast(t *testing.T) {
	y := strings.Replace(clusterYAML, `  - name: per_user
    type: keyed_count
    input: valid
    key_by: user`, `  - name: per_user
    type: shape_pair_matcher
    input: valid
    key_by: color
    broadcast: rules`, 1)
	y = strings.Replace(y, "    topic: clicks\n", "    topic: clicks\n  - name: rules\n    topic: rules\n", 1)
	y = strings.Replace(y, "key_by: count", "key_by: key", 1)
	cfg, err := Parse("cluster.yaml", []byte(y), nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := cfg.PlanStages()
	if err != nil {
		t.Fatal(err)
	}
	var in []string
	for _, s := range st.Stages {
		for _, src := range s.Graph.Sources {
			in = append(in, fmt.Sprintf("%d:%s", s.Index, src.Name))
		}
	}
	if got, want := strings.Join(in, " "), "0:clicks 1:rules 1:repartition.1 2:repartition.2"; got != want {
		t.Errorf("sources by stage %q, want %q", got, want)
	}
}

func names(g *graph.Graph) []string {
	var out []string
	for _, s := range g.Sources {
		out = append(out, s.Name)
	}
	for _, o := range g.Operators {
		out = append(out, o.Name)
	}
	for _, s := range g.Sinks {
		out = append(out, s.Name)
	}
	return out
}

// TestClusterRevokeTimeout: a revoke timeout that is not below the
// rebalance timeout is refused naming both values (invariant 6: a slow
// final checkpoint must not get the daemon kicked out of the group).
func TestClusterRevokeTimeout(t *testing.T) {
	for _, tc := range []struct {
		name, timeouts, want string
	}{
		{name: "below", timeouts: "  rebalance_timeout: 60s\n  revoke_timeout: 59s\n"},
		{name: "defaults", timeouts: ""},
		{name: "equal", timeouts: "  rebalance_timeout: 30s\n  revoke_timeout: 30s\n",
			want: "cluster.revoke_timeout: 30s must be below cluster.rebalance_timeout 30s"},
		{name: "above", timeouts: "  rebalance_timeout: 20s\n", // the default revoke_timeout is 30s
			want: "cluster.revoke_timeout: 30s must be below cluster.rebalance_timeout 20s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := strings.Replace(clusterYAML, "  units: 12\n", "  units: 12\n"+tc.timeouts, 1)
			_, err := Parse("cluster.yaml", []byte(y), nil)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestClusterStore: an s3 store section decodes with its defaults, and the
// units' staging directory is cluster.store.dir for s3 (when set), else
// <data_dir>/cluster-staging.
func TestClusterStore(t *testing.T) {
	for _, tc := range []struct {
		name, store, want string
		s3                S3StoreConfig
	}{
		{"filesystem", "    dir: /mnt/shared", "data/cluster-staging", S3StoreConfig{Region: "us-east-1", TLS: true, PathStyle: true}},
		{"s3 default staging", "    kind: s3\n    s3:\n      endpoint: minio:9000\n      bucket: chk", "data/cluster-staging",
			S3StoreConfig{Endpoint: "minio:9000", Bucket: "chk", Region: "us-east-1", TLS: true, PathStyle: true}},
		{"s3", "    kind: s3\n    dir: /var/stage\n    s3:\n      endpoint: minio:9000\n      bucket: chk\n      prefix: prod/\n      region: eu-west-1\n      tls: false\n      path_style: false", "/var/stage",
			S3StoreConfig{Endpoint: "minio:9000", Bucket: "chk", Prefix: "prod/", Region: "eu-west-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "job:\n  name: clicks\ndata_dir: data\nkafka:\n  brokers: [localhost:9092]\ncheckpoints:\n  interval: 1s\ncluster:\n  enabled: true\n  units: 2\n  store:\n" + tc.store +
				"\nsources:\n  - name: in\n    topic: in\nsinks:\n  - name: out\n    input: in\n    topic: out\n"
			cfg, err := Parse("c.yaml", []byte(src), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.ClusterStagingDir(); got != tc.want {
				t.Errorf("staging dir %q, want %q", got, tc.want)
			}
			if cfg.Cluster.Store.S3 != tc.s3 {
				t.Errorf("s3 %+v, want %+v", cfg.Cluster.Store.S3, tc.s3)
			}
		})
	}
}

// TestPlanStagesPolicy: every stage after the exchange obeys the on_error
// policy of the job's source clicks: its repartition source carries it
// (and names clicks), its operators name that source as their main
// input's; with on_error left out that is the default, skip.
func TestPlanStagesPolicy(t *testing.T) {
	for _, tc := range []struct{ name, lines, onError, dlq string }{
		{"dead-letter", "    on_error: dead-letter\n    dead_letter_topic: clicks-dlq\n", "dead-letter", "clicks-dlq"},
		{"fail", "    on_error: fail\n", "fail", ""},
		{"default", "", "skip", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := strings.Replace(clusterYAML, "    topic: clicks\n", "    topic: clicks\n"+tc.lines, 1)
			cfg, err := Parse("cluster.yaml", []byte(y), nil)
			if err != nil {
				t.Fatal(err)
			}
			st, err := cfg.PlanStages()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range st.Stages[1:] {
				for _, src := range s.Graph.Sources {
					got = append(got, fmt.Sprintf("%d:%s %s %q %s", s.Index, src.Name, src.OnError, src.DeadLetterTopic, src.PolicySource))
				}
				for _, o := range s.Graph.Operators {
					got = append(got, fmt.Sprintf("%d:%s %s", s.Index, o.Name, o.ErrorSources[0]))
				}
			}
			want := []string{
				fmt.Sprintf("1:repartition.1 %s %q clicks", tc.onError, tc.dlq),
				"1:per_user repartition.1",
				fmt.Sprintf("2:repartition.2 %s %q clicks", tc.onError, tc.dlq),
				"2:per_count repartition.2",
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("stages 1 and 2:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestPlanStagesRepartitionTimeout: every repartition sink of the stages
// gets cluster.repartition_transaction_timeout (15m by default), and the
// job's own sinks keep their transaction_timeout.
func TestPlanStagesRepartitionTimeout(t *testing.T) {
	for _, tc := range []struct {
		name, set string
		want      time.Duration
	}{
		{"default", "", 15 * time.Minute},
		{"set", "  repartition_transaction_timeout: 20m\n", 20 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("cluster.yaml", []byte(strings.Replace(clusterYAML, "  units: 12\n", "  units: 12\n"+tc.set, 1)), nil)
			if err != nil {
				t.Fatal(err)
			}
			st, err := cfg.PlanStages()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]time.Duration{}
			for _, s := range st.Stages {
				for _, sk := range s.Graph.Sinks {
					got[sk.Name] = sk.TransactionTimeout
				}
			}
			want := map[string]time.Duration{"repartition.1": tc.want, "repartition.2": tc.want, "reached": 10 * time.Minute, "users": 15 * time.Minute}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("sinks' transaction timeouts %v, want %v", got, want)
			}
		})
	}
}

// TestClusterIncrementalDefault: checkpoints.incremental defaults to true
// in cluster mode when the file does not set it, stays false in a single
// process, and a file's explicit value (false too) is kept; the job
// settings (what run builds from) carry the same value as the parsed
// config (what validate checks).
func TestClusterIncrementalDefault(t *testing.T) {
	single := strings.Replace(clusterYAML, "cluster:\n  enabled: true\n", "cluster:\n  enabled: false\n", 1)
	for _, tc := range []struct {
		name, yaml, set string
		want            bool
	}{
		{name: "cluster unset", yaml: clusterYAML, want: true},
		{name: "cluster false", yaml: clusterYAML, set: "false", want: false},
		{name: "cluster true", yaml: clusterYAML, set: "true", want: true},
		{name: "single unset", yaml: single, want: false},
		{name: "single false", yaml: single, set: "false", want: false},
		{name: "single true", yaml: single, set: "true", want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := tc.yaml
			if tc.set != "" {
				y = strings.Replace(y, "  timeout: 1m\n", "  timeout: 1m\n  incremental: "+tc.set+"\n", 1)
			}
			cfg, err := Parse("cluster.yaml", []byte(y), nil)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Checkpoints.Incremental != tc.want {
				t.Errorf("checkpoints.incremental = %v, want %v", cfg.Checkpoints.Incremental, tc.want)
			}
			if got := cfg.Settings().Incremental; got != tc.want {
				t.Errorf("Settings().Incremental = %v, want %v", got, tc.want)
			}
		})
	}
}
