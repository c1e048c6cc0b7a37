package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/pipeline"
)

// The cluster-mode variant: docker-compose.cluster.yml runs
// configs/cluster-docker.yaml on three daemons; configs/cluster.yaml is the
// same job on one machine.
const (
	clusterCompose      = "docker-compose.cluster.yml"
	clusterDockerConfig = "configs/cluster-docker.yaml"
	clusterLocalConfig  = "configs/cluster.yaml"
	clusterPrometheus   = "configs/prometheus-cluster.yml"
	// clusterMetricPrefix names the metrics only a cluster-mode daemon
	// exports with series of its units.
	clusterMetricPrefix = "kstreamd_cluster_"
)

// clusterDaemons are the kstreamd services of the cluster compose file.
var clusterDaemons = []string{"kstreamd-1", "kstreamd-2", "kstreamd-3"}

// clusterService is the part of a cluster compose service the tests read
// beyond composeService.
type clusterService struct {
	Hostname   string   `yaml:"hostname"`
	Entrypoint []string `yaml:"entrypoint"`
}

// TestClusterComposeConfig runs Debian's docker-compose on the cluster
// compose file, as TestComposeConfig does on docker-compose.yml.
func TestClusterComposeConfig(t *testing.T) {
	bin := requireTool(t, "docker-compose", "docker-compose")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--project-directory", root, "-f", repoFile(clusterCompose), "config", "-q")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "KSTREAMD_VERSION=")
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("docker-compose -f %s config -q: %v\n%s", clusterCompose, err, out)
	}
}

// TestClusterConfigsValidate runs `kstreamd validate` on both cluster
// configs and checks they are one job: the same graph and cluster
// timeouts, the docker one on the compose broker.
func TestClusterConfigsValidate(t *testing.T) {
	for _, rel := range []string{clusterLocalConfig, clusterDockerConfig} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, binPath, "validate", "--config", repoFile(rel)).CombinedOutput()
		cancel()
		if want := repoFile(rel) + ": ok\n"; err != nil || string(out) != want {
			t.Errorf("kstreamd validate --config %s: %v\n%s(want %q)", rel, err, out, want)
		}
	}
	docker, local := loadPipeline(t, clusterDockerConfig), loadPipeline(t, clusterLocalConfig)
	if !docker.Cluster.Enabled || !local.Cluster.Enabled {
		t.Fatalf("cluster.enabled: docker %v, local %v; want both true", docker.Cluster.Enabled, local.Cluster.Enabled)
	}
	if docker.Kafka.Embedded.Enabled || !slices.Equal(docker.Kafka.Brokers, []string{"kafka:9092"}) {
		t.Errorf("%s: embedded %v, brokers %q; want the compose broker kafka:9092 only", clusterDockerConfig, docker.Kafka.Embedded.Enabled, docker.Kafka.Brokers)
	}
	if docker.Cluster.MemberID != "" {
		t.Errorf("%s: cluster.member_id %q; the three daemons share the file, so it must default to the host name", clusterDockerConfig, docker.Cluster.MemberID)
	}
	dockerParams, localParams := operatorParams(docker.Operators), operatorParams(local.Operators)
	dc, lc := docker.Cluster, local.Cluster
	for _, c := range []struct {
		field        string
		docker, locl any
	}{
		{"job", docker.Job, local.Job},
		{"operator params", dockerParams, localParams},
		{"sources", docker.Sources, local.Sources},
		{"operators", docker.Operators, local.Operators},
		{"sinks", docker.Sinks, local.Sinks},
		{"cluster timeouts", [4]time.Duration{dc.SessionTimeout, dc.RebalanceTimeout, dc.RevokeTimeout, dc.TakeoverTimeout},
			[4]time.Duration{lc.SessionTimeout, lc.RebalanceTimeout, lc.RevokeTimeout, lc.TakeoverTimeout}},
	} {
		if a, b := fmt.Sprintf("%+v", c.docker), fmt.Sprintf("%+v", c.locl); a != b {
			t.Errorf("%s differs between %s and %s:\n docker: %s\n local:  %s", c.field, clusterDockerConfig, clusterLocalConfig, a, b)
		}
	}
}

// TestClusterComposeAgreesWithConfigs checks that the cluster compose
// file runs three daemons on the one cluster config, each its own member
// on its own state volume (which holds its staging dir too), all on the
// S3 store of the service minio with minio's root credentials, after the
// topics and the store's bucket exist, scraped by Prometheus.
func TestClusterComposeAgreesWithConfigs(t *testing.T) {
	var c composeFile
	decodeYAML(t, clusterCompose, &c)
	var extra struct {
		Services map[string]clusterService `yaml:"services"`
	}
	decodeYAML(t, clusterCompose, &extra)
	cfg := loadPipeline(t, clusterDockerConfig)
	for _, name := range append([]string{"kafka", "kafka-init", "minio", "minio-init", "prometheus", "grafana"}, clusterDaemons...) {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("%s has no service %q", clusterCompose, name)
		}
	}
	// Every daemon runs the one mounted config (checked below), so all three
	// use its store: MinIO's bucket under one prefix.
	st := cfg.Cluster.Store
	if st.Kind != pipeline.StoreS3 {
		t.Fatalf("%s: cluster.store.kind %q, want %q (the compose file's MinIO)", clusterDockerConfig, st.Kind, pipeline.StoreS3)
	}
	if host, port, err := net.SplitHostPort(st.S3.Endpoint); err != nil || host != "minio" || port != "9000" || st.S3.TLS || !st.S3.PathStyle {
		t.Errorf("%s: cluster.store.s3 endpoint %q (%v), tls %v, path_style %v; want the service minio at minio:9000 over HTTP, path style",
			clusterDockerConfig, st.S3.Endpoint, err, st.S3.TLS, st.S3.PathStyle)
	}
	minio := c.Services["minio"]
	user, password := minio.Environment["MINIO_ROOT_USER"], minio.Environment["MINIO_ROOT_PASSWORD"]
	if user == "" || password == "" {
		t.Fatalf("minio: MINIO_ROOT_USER %q, MINIO_ROOT_PASSWORD %q; want both set", user, password)
	}
	hosts, states := map[string]bool{}, map[string]bool{}
	for _, name := range clusterDaemons {
		s, x := c.Services[name], extra.Services[name]
		if mount, ok := s.mountOf("./" + clusterDockerConfig); !ok || !slices.Equal(s.Command, []string{"run", "--config", mount}) {
			t.Errorf("%s: command %q, mounts %s at %q; want it to run that mount", name, s.Command, clusterDockerConfig, mount)
		}
		if x.Hostname == "" || hosts[x.Hostname] {
			t.Errorf("%s: hostname %q is empty or another daemon's: it is the daemon's member id", name, x.Hostname)
		}
		hosts[x.Hostname] = true
		own, ok := s.volumeAt(cfg.DataDir)
		if !ok || states[own] {
			t.Errorf("%s: data_dir %s is on volume %q, none or another daemon's", name, cfg.DataDir, own)
		}
		states[own] = true
		// The staging directory is local: on the daemon's own data volume.
		staging := cfg.ClusterStagingDir()
		var vol string
		for dir := staging; dir != "/" && vol == ""; dir = path.Dir(dir) {
			vol, _ = s.volumeAt(dir)
		}
		if vol != own {
			t.Errorf("%s: the store's staging dir %s is on volume %q, want the daemon's own data volume %q", name, staging, vol, own)
		}
		want := dependsOn{"kafka": "service_healthy", "kafka-init": "service_completed_successfully", "minio-init": "service_completed_successfully"}
		if !maps.Equal(s.DependsOn, want) {
			t.Errorf("%s depends on %v, want %v", name, s.DependsOn, want)
		}
		if ak, sk := s.Environment[pipeline.EnvS3AccessKey], s.Environment[pipeline.EnvS3SecretKey]; ak != user || sk != password {
			t.Errorf("%s: %s %q, %s %q; want minio's root user %q and password %q",
				name, pipeline.EnvS3AccessKey, ak, pipeline.EnvS3SecretKey, sk, user, password)
		}
	}
	t.Run("kafka-init creates the job's topics", func(t *testing.T) {
		var created []string
		for _, ts := range initTopics(t, c.Services["kafka-init"]) {
			created = append(created, ts.name)
			if !slices.Contains(cfg.Kafka.Brokers, ts.bootstrap) {
				t.Errorf("kafka-init creates %s through %q, the pipeline's brokers are %q", ts.name, ts.bootstrap, cfg.Kafka.Brokers)
			}
		}
		if want := cfg.Topics(); !slices.Equal(created, want) {
			t.Errorf("kafka-init creates topics %q, the pipeline uses %q", created, want)
		}
	})
	t.Run("minio-init creates the store's bucket", func(t *testing.T) {
		script := extra.Services["minio-init"].Entrypoint
		if len(script) != 3 || script[0] != "/bin/sh" || script[1] != "-ec" {
			t.Fatalf("minio-init entrypoint %q, want [/bin/sh -ec <script>]", script)
		}
		want := []string{
			fmt.Sprintf("mc alias set store http://%s %s %s", st.S3.Endpoint, user, password),
			"mc mb --ignore-existing store/" + st.S3.Bucket,
		}
		if got := strings.Split(strings.TrimSpace(script[2]), "\n"); !slices.Equal(got, want) {
			t.Errorf("minio-init runs %q, want %q", got, want)
		}
		if got := c.Services["minio-init"].DependsOn; !maps.Equal(got, dependsOn{"minio": "service_healthy"}) {
			t.Errorf("minio-init depends on %v, want minio with service_healthy", got)
		}
	})
	t.Run("prometheus scrapes every daemon", func(t *testing.T) {
		p := c.Services["prometheus"]
		if mount, ok := p.mountOf("./" + clusterPrometheus); !ok || mount != "/etc/prometheus/prometheus.yml" {
			t.Fatalf("prometheus mounts %s at %q, want /etc/prometheus/prometheus.yml", clusterPrometheus, mount)
		}
		var pc struct {
			ScrapeConfigs []struct {
				JobName       string `yaml:"job_name"`
				StaticConfigs []struct {
					Targets []string `yaml:"targets"`
				} `yaml:"static_configs"`
			} `yaml:"scrape_configs"`
		}
		decodeYAML(t, clusterPrometheus, &pc)
		_, port, _ := strings.Cut(cfg.Metrics.Address, ":")
		var want, got []string
		for _, name := range clusterDaemons {
			want = append(want, extra.Services[name].Hostname+":"+port)
		}
		for _, sc := range pc.ScrapeConfigs {
			if sc.JobName == "kstreamd" {
				for _, s := range sc.StaticConfigs {
					got = append(got, s.Targets...)
				}
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("prometheus job kstreamd scrapes %q, want %q", got, want)
		}
	})
}

// clusterJobConfig is configs/cluster.yaml with the test's data dir, store,
// broker and metrics addresses, and the tests' checkpoint interval.
func clusterJobConfig(dataDir, broker, metrics string) (string, error) {
	b, err := os.ReadFile(repoFile(clusterLocalConfig))
	if err != nil {
		return "", err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return "", fmt.Errorf("%s: %w", clusterLocalConfig, err)
	}
	for _, set := range []struct {
		keys  []string
		value string
	}{
		{[]string{"data_dir"}, dataDir},
		{[]string{"kafka", "embedded", "address"}, broker},
		{[]string{"metrics", "address"}, metrics},
		{[]string{"checkpoints", "interval"}, testCheckpointInterval},
		{[]string{"cluster", "store", "dir"}, filepath.Join(dataDir, "store")},
	} {
		if err := setYAMLPath(&doc, scalar(set.value), set.keys...); err != nil {
			return "", fmt.Errorf("%s: %w", clusterLocalConfig, err)
		}
	}
	out, err := yaml.Marshal(&doc)
	return string(out), err
}

// TestDashboardClusterMetricsExported: every kstreamd_cluster_* metric the
// dashboard's Cluster row queries is exported by a daemon running
// configs/cluster.yaml once records flowed through both stages, and the
// daemon's /readyz and /api/v1/job answer for its member.
func TestDashboardClusterMetricsExported(t *testing.T) {
	used := map[string][]string{}
	for n, where := range dashboardMetrics(t) {
		if strings.HasPrefix(n, clusterMetricPrefix) {
			used[n] = where
		}
	}
	if len(used) == 0 {
		t.Fatalf("%s has no panel of the %s* metrics", homeDashboard, clusterMetricPrefix)
	}
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cfg, err := clusterJobConfig(filepath.Join(dir, "data"), broker, metrics)
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
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.DefaultProduceTopic("clicks"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 50 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, `{"user":"u%d"}`, i%7)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if !testkit.Poll(time.Minute, func() bool {
		resp, err := http.Get("http://" + metrics + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("the cluster daemon never became ready:\n%s", d.logTail())
	}
	checkExported(t, d, used)
	resp, err := http.Get("http://" + metrics + "/api/v1/job")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Member  string `json:"member"`
		Members []struct {
			Member string `json:"member"`
			Units  []struct {
				Stage int `json:"stage"`
				Unit  int `json:"unit"`
			} `json:"units"`
		} `json:"members"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	// The one member holds the 4 units of each of the 3 stages (the
	// source, then one per keyed operator).
	if st.Member != "local-1" || len(st.Members) != 1 || st.Members[0].Member != "local-1" || len(st.Members[0].Units) != 12 {
		t.Errorf("/api/v1/job: %s, want member local-1 holding all 12 units", fmt.Sprintf("%+v", st))
	}
}
