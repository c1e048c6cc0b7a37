package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kstreamd/kstreamd/pipeline"
)

// composeFile is the part of docker-compose.yml the tests read.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       yaml.Node         `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	DependsOn   dependsOn         `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

// dependsOn maps each dependency to its condition; the short (list) form
// means service_started.
type dependsOn map[string]string

// UnmarshalYAML implements yaml.Unmarshaler for both forms of depends_on.
func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	*d = dependsOn{}
	if n.Kind == yaml.SequenceNode {
		var names []string
		if err := n.Decode(&names); err != nil {
			return err
		}
		for _, s := range names {
			(*d)[s] = "service_started"
		}
		return nil
	}
	var long map[string]struct {
		Condition string `yaml:"condition"`
	}
	if err := n.Decode(&long); err != nil {
		return err
	}
	for s, c := range long {
		(*d)[s] = c.Condition
	}
	return nil
}

// mountOf returns where the service mounts the host path src ("./...").
func (s composeService) mountOf(src string) (string, bool) {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && path.Clean(parts[0]) == path.Clean(src) {
			return parts[1], true
		}
	}
	return "", false
}

// volumeAt returns the source of the volume the service mounts at target.
func (s composeService) volumeAt(target string) (string, bool) {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && path.Clean(parts[1]) == path.Clean(target) {
			return parts[0], true
		}
	}
	return "", false
}

// publishes reports whether the service publishes container port port.
func (s composeService) publishes(port string) bool {
	for _, p := range s.Ports {
		parts := strings.Split(strings.TrimSuffix(p, "/tcp"), ":")
		if parts[len(parts)-1] == port {
			return true
		}
	}
	return false
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	decodeYAML(t, "docker-compose.yml", &c)
	return c
}

// TestComposeConfig runs Debian's docker-compose on docker-compose.yml: it
// parses, interpolates and validates the file against the Compose schema
// without a Docker engine.
func TestComposeConfig(t *testing.T) {
	bin := requireTool(t, "docker-compose", "docker-compose")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--project-directory", root, "-f", repoFile("docker-compose.yml"), "config", "-q")
	cmd.Dir = root
	// No variable of the file may be required from the environment.
	cmd.Env = append(os.Environ(), "KSTREAMD_VERSION=")
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("docker-compose config -q: %v\n%s", err, out)
	}
}

// TestComposeAgreesWithConfigs checks that docker-compose.yml, the Dockerfile
// and the files under configs/ name the same paths, ports and topics.
func TestComposeAgreesWithConfigs(t *testing.T) {
	c := loadCompose(t)
	cfg := dockerPipeline(t)
	df := parseDockerfile(t)
	for _, name := range []string{"kafka", "kafka-init", "kstreamd", "prometheus", "grafana"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("docker-compose.yml has no service %q", name)
		}
	}
	kafka, initSvc, ksd, prom := c.Services["kafka"], c.Services["kafka-init"], c.Services["kstreamd"], c.Services["prometheus"]
	_, metricsPort, err := net.SplitHostPort(cfg.Metrics.Address)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("bind mounts exist", func(t *testing.T) {
		for name, s := range c.Services {
			for _, v := range s.Volumes {
				src, _, _ := strings.Cut(v, ":")
				if !strings.HasPrefix(src, ".") {
					if _, ok := c.Volumes[src]; !ok {
						t.Errorf("service %s mounts volume %q, which the top-level volumes do not declare", name, src)
					}
					continue
				}
				if _, err := os.Stat(repoFile(src)); err != nil {
					t.Errorf("service %s mounts %q: %v", name, src, err)
				}
			}
		}
	})

	t.Run("kafka", func(t *testing.T) {
		if !strings.HasPrefix(kafka.Image, "apache/kafka:") {
			t.Errorf("kafka image %q, want the official apache/kafka", kafka.Image)
		}
		env := kafka.Environment
		if roles := env["KAFKA_PROCESS_ROLES"]; roles != "broker,controller" {
			t.Errorf("KAFKA_PROCESS_ROLES = %q, want broker,controller (one KRaft node)", roles)
		}
		for _, k := range []string{"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"} {
			if env[k] != "1" {
				t.Errorf("%s = %q, want 1 on a single node", k, env[k])
			}
		}
		if kafka.Healthcheck == nil || len(kafka.Healthcheck.Test) == 0 {
			t.Error("kafka has no healthcheck; kstreamd and kafka-init wait for it")
		}
		advertised := map[string]bool{}
		for _, l := range strings.Split(env["KAFKA_ADVERTISED_LISTENERS"], ",") {
			_, hostPort, _ := strings.Cut(l, "://")
			advertised[hostPort] = true
		}
		for _, b := range cfg.Kafka.Brokers {
			if !advertised[b] {
				t.Errorf("the pipeline's broker %q is not an advertised listener %q", b, env["KAFKA_ADVERTISED_LISTENERS"])
			}
		}
		for hp := range advertised {
			if host, port, _ := net.SplitHostPort(hp); host == "localhost" && !kafka.publishes(port) {
				t.Errorf("host listener %s is advertised but port %s is not published (ports %q)", hp, port, kafka.Ports)
			}
		}
	})

	t.Run("kafka-init creates the job's topics", func(t *testing.T) {
		if initSvc.Image != kafka.Image {
			t.Errorf("kafka-init image %q, want kafka's %q (its kafka-topics.sh)", initSvc.Image, kafka.Image)
		}
		if got := initSvc.DependsOn["kafka"]; got != "service_healthy" {
			t.Errorf("kafka-init depends on kafka with %q, want service_healthy", got)
		}
		var created []string
		for _, ts := range initTopics(t, initSvc) {
			created = append(created, ts.name)
			if ts.partitions < 1 || ts.replication != 1 {
				t.Errorf("kafka-init creates %s with %d partitions and replication %d, want >= 1 and 1 (one node)", ts.name, ts.partitions, ts.replication)
			}
			if !slices.Contains(cfg.Kafka.Brokers, ts.bootstrap) {
				t.Errorf("kafka-init creates %s through %q, the pipeline's brokers are %q", ts.name, ts.bootstrap, cfg.Kafka.Brokers)
			}
		}
		if want := cfg.Topics(); !slices.Equal(created, want) {
			t.Errorf("kafka-init creates topics %q, the pipeline uses %q", created, want)
		}
	})

	t.Run("kstreamd", func(t *testing.T) {
		if ctx := buildContext(t, ksd.Build); ctx != "." {
			t.Errorf("kstreamd build context %q, want . (the Dockerfile at the root)", ctx)
		}
		for dep, want := range map[string]string{"kafka": "service_healthy", "kafka-init": "service_completed_successfully"} {
			if got := ksd.DependsOn[dep]; got != want {
				t.Errorf("kstreamd depends on %s with %q, want %q", dep, got, want)
			}
		}
		cfgPath := df.configPath(t)
		mount, ok := ksd.mountOf("./configs/colorshape-docker.yaml")
		if !ok || mount != cfgPath {
			t.Errorf("kstreamd mounts configs/colorshape-docker.yaml at %q, the image runs --config %q", mount, cfgPath)
		}
		if !slices.ContainsFunc(ksd.Volumes, func(v string) bool {
			return strings.HasPrefix(v, "./configs/colorshape-docker.yaml:") && strings.HasSuffix(v, ":ro")
		}) {
			t.Errorf("kstreamd should mount its pipeline read-only; volumes %q", ksd.Volumes)
		}
		if ksd.Command != nil && !slices.Equal(ksd.Command, df.cmd) {
			t.Errorf("kstreamd command %q differs from the image's CMD %q", ksd.Command, df.cmd)
		}
		src, ok := ksd.volumeAt(cfg.DataDir)
		if !ok || strings.HasPrefix(src, ".") {
			t.Errorf("kstreamd mounts no named volume at data_dir %q; volumes %q", cfg.DataDir, ksd.Volumes)
		}
		if !slices.Contains(df.all("VOLUME"), fmt.Sprintf(`["%s"]`, cfg.DataDir)) {
			t.Errorf("the Dockerfile declares VOLUME %q, want [%q] (the pipeline's data_dir)", df.all("VOLUME"), cfg.DataDir)
		}
		if !ksd.publishes(metricsPort) {
			t.Errorf("kstreamd does not publish the metrics port %s; ports %q", metricsPort, ksd.Ports)
		}
		if !slices.Contains(df.all("EXPOSE"), metricsPort) {
			t.Errorf("the Dockerfile exposes %q, want the metrics port %s", df.all("EXPOSE"), metricsPort)
		}
	})

	t.Run("the API needs a token from a file", func(t *testing.T) {
		// kstreamd listens on 0.0.0.0 (for Prometheus): without a token
		// it refuses savepoints and stop, and allowing them would let any
		// container on the network stop the job.
		m := cfg.Metrics
		if m.BearerTokenFile == "" || m.BearerTokenEnv != "" || m.AllowUnauthenticatedControl {
			t.Fatalf("metrics: bearer_token_file %q, bearer_token_env %q, allow_unauthenticated_control %v; want a token file only",
				m.BearerTokenFile, m.BearerTokenEnv, m.AllowUnauthenticatedControl)
		}
		tokenDir := path.Dir(m.BearerTokenFile)
		vol, ok := ksd.volumeAt(tokenDir)
		if !ok || strings.HasPrefix(vol, ".") {
			t.Fatalf("kstreamd mounts no named volume at %s, the directory of bearer_token_file; volumes %q", tokenDir, ksd.Volumes)
		}
		if !slices.Contains(ksd.Volumes, vol+":"+tokenDir+":ro") {
			t.Errorf("kstreamd should mount the token volume %s read-only; volumes %q", vol, ksd.Volumes)
		}
		var maker string
		for name, s := range c.Services {
			if src, ok := s.volumeAt(tokenDir); ok && src == vol && name != "kstreamd" {
				maker = name
			}
		}
		if maker == "" {
			t.Fatalf("no service writes the token volume %s at %s", vol, tokenDir)
		}
		if got := ksd.DependsOn[maker]; got != "service_completed_successfully" {
			t.Errorf("kstreamd depends on %s (which makes the token) with %q, want service_completed_successfully", maker, got)
		}
		script := strings.Join(c.Services[maker].Command, "\n")
		for _, want := range []string{m.BearerTokenFile, "/dev/urandom", "chown 65532:65532", "chmod 0400"} {
			if !strings.Contains(script, want) {
				t.Errorf("service %s's command does not contain %q (the token file, random, owned by the image's user 65532, private):\n%s", maker, want, script)
			}
		}
		if !slices.Contains(df.all("USER"), "65532:65532") {
			t.Errorf("the Dockerfile's USER %q, want 65532:65532, the owner of the token file", df.all("USER"))
		}
	})

	t.Run("prometheus scrapes kstreamd", func(t *testing.T) {
		if host, _, _ := net.SplitHostPort(cfg.Metrics.Address); host != "0.0.0.0" && host != "" {
			t.Errorf("metrics.address %q: Prometheus in another container cannot reach it; listen on 0.0.0.0", cfg.Metrics.Address)
		}
		var file string
		for _, a := range prom.Command {
			if v, ok := strings.CutPrefix(a, "--config.file="); ok {
				file = v
			}
		}
		if mount, ok := prom.mountOf("./configs/prometheus.yml"); !ok || mount != file {
			t.Errorf("prometheus mounts configs/prometheus.yml at %q, runs --config.file=%q", mount, file)
		}
		var pc struct {
			ScrapeConfigs []struct {
				JobName       string `yaml:"job_name"`
				StaticConfigs []struct {
					Targets []string `yaml:"targets"`
				} `yaml:"static_configs"`
			} `yaml:"scrape_configs"`
		}
		decodeYAML(t, "configs/prometheus.yml", &pc)
		want := net.JoinHostPort("kstreamd", metricsPort)
		found := false
		for _, sc := range pc.ScrapeConfigs {
			for _, st := range sc.StaticConfigs {
				found = found || slices.Contains(st.Targets, want)
			}
		}
		if !found {
			t.Errorf("configs/prometheus.yml does not scrape %s", want)
		}
	})
}

// topicSpec is a topic kafka-init creates.
type topicSpec struct {
	name        string
	bootstrap   string
	partitions  int32
	replication int16
	configs     map[string]*string
}

// initTopics parses the kafka-topics.sh --create lines of a service's
// command (a shell script), sorted by topic. Each must be idempotent
// (--if-not-exists), for `docker compose up` runs it again.
func initTopics(t *testing.T, s composeService) []topicSpec {
	t.Helper()
	var out []topicSpec
	for _, line := range strings.Split(strings.Join(s.Command, "\n"), "\n") {
		f := strings.Fields(line)
		if !slices.Contains(f, "--create") {
			continue
		}
		if !slices.Contains(f, "--if-not-exists") {
			t.Errorf("kafka-init: %q lacks --if-not-exists; a second `docker compose up` would fail", line)
		}
		ts := topicSpec{configs: map[string]*string{}}
		for i := 0; i+1 < len(f); i++ {
			v := f[i+1]
			switch f[i] {
			case "--topic":
				ts.name = v
			case "--bootstrap-server":
				ts.bootstrap = v
			case "--partitions":
				n, err := strconv.ParseInt(v, 10, 32)
				if err != nil {
					t.Fatalf("kafka-init: %q: %v", line, err)
				}
				ts.partitions = int32(n)
			case "--replication-factor":
				n, err := strconv.ParseInt(v, 10, 16)
				if err != nil {
					t.Fatalf("kafka-init: %q: %v", line, err)
				}
				ts.replication = int16(n)
			case "--config":
				k, val, _ := strings.Cut(v, "=")
				ts.configs[k] = &val
			default:
				continue
			}
			i++
		}
		if ts.name == "" {
			t.Fatalf("kafka-init: %q creates no --topic", line)
		}
		out = append(out, ts)
	}
	slices.SortFunc(out, func(a, b topicSpec) int { return strings.Compare(a.name, b.name) })
	return out
}

// buildContext returns a service's build context (build: DIR or build:
// {context: DIR}).
func buildContext(t *testing.T, n yaml.Node) string {
	t.Helper()
	if n.Kind == yaml.ScalarNode {
		return n.Value
	}
	var b struct {
		Context string `yaml:"context"`
	}
	if err := n.Decode(&b); err != nil {
		t.Fatal(err)
	}
	return b.Context
}

// TestPipelineConfigValidates runs `kstreamd validate` on the pipeline the
// compose file mounts, and checks it is the reference job: the same graph as
// configs/colorshape.yaml, on the compose broker, with the demo on.
func TestPipelineConfigValidates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rel := "configs/colorshape-docker.yaml"
	out, err := exec.CommandContext(ctx, binPath, "validate", "--config", repoFile(rel)).CombinedOutput()
	if want := repoFile(rel) + ": ok\n"; err != nil || string(out) != want {
		t.Fatalf("kstreamd validate --config %s: %v\n%s(want %q)", rel, err, out, want)
	}
	docker := dockerPipeline(t)
	ref := loadPipeline(t, "configs/colorshape.yaml")
	if docker.Kafka.Embedded.Enabled || len(docker.Kafka.Brokers) == 0 {
		t.Errorf("%s: the embedded broker must be off and brokers set (got embedded %v, brokers %q)", rel, docker.Kafka.Embedded.Enabled, docker.Kafka.Brokers)
	}
	if !docker.Demo.Enabled {
		t.Errorf("%s: demo.enabled is false; the dashboard would show no traffic", rel)
	}
	dockerParams, refParams := operatorParams(docker.Operators), operatorParams(ref.Operators)
	for _, c := range []struct {
		field         string
		docker, refer any
	}{
		{"job", docker.Job, ref.Job},
		{"operator params", dockerParams, refParams},
		{"sources", docker.Sources, ref.Sources},
		{"operators", docker.Operators, ref.Operators},
		{"sinks", docker.Sinks, ref.Sinks},
		{"demo topics", [2]string{docker.Demo.ItemsTopic, docker.Demo.RulesTopic}, [2]string{ref.Demo.ItemsTopic, ref.Demo.RulesTopic}},
	} {
		if a, b := fmt.Sprintf("%+v", c.docker), fmt.Sprintf("%+v", c.refer); a != b {
			t.Errorf("%s differs from configs/colorshape.yaml (the reference job):\n docker:    %s\n reference: %s", c.field, a, b)
		}
	}
}

// dockerfile is the Dockerfile as instructions, continuation lines joined.
type dockerfile struct {
	instrs []instruction
	cmd    []string // the final CMD, decoded
}

type instruction struct {
	stage int    // 0-based index of the FROM it belongs to; -1 before the first
	op    string // upper case: FROM, RUN, ...
	args  string
}

func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	var df dockerfile
	stage := -1
	var cont strings.Builder
	for _, line := range strings.Split(string(readRepoFile(t, "Dockerfile")), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || trimmed == "" && cont.Len() == 0 {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, `\`); ok {
			cont.WriteString(s + " ")
			continue
		}
		cont.WriteString(trimmed)
		full := cont.String()
		cont.Reset()
		op, args, _ := strings.Cut(full, " ")
		op = strings.ToUpper(op)
		if op == "FROM" {
			stage++
		}
		df.instrs = append(df.instrs, instruction{stage: stage, op: op, args: strings.TrimSpace(args)})
	}
	if cmd := df.last("CMD"); cmd != "" {
		if err := json.Unmarshal([]byte(cmd), &df.cmd); err != nil {
			t.Fatalf("Dockerfile CMD %s: want the JSON (exec) form: %v", cmd, err)
		}
	}
	return df
}

// all returns the arguments of every op instruction of the final stage.
func (df dockerfile) all(op string) []string {
	final := df.instrs[len(df.instrs)-1].stage
	var out []string
	for _, in := range df.instrs {
		if in.op == op && in.stage == final {
			out = append(out, in.args)
		}
	}
	return out
}

// last returns the arguments of the final stage's last op instruction.
func (df dockerfile) last(op string) string {
	a := df.all(op)
	if len(a) == 0 {
		return ""
	}
	return a[len(a)-1]
}

// configPath returns the --config argument of the image's CMD.
func (df dockerfile) configPath(t *testing.T) string {
	t.Helper()
	i := slices.Index(df.cmd, "--config")
	if len(df.cmd) == 0 || df.cmd[0] != "run" || i < 0 || i+1 >= len(df.cmd) {
		t.Fatalf("Dockerfile CMD %q: want [\"run\", \"--config\", PATH]", df.cmd)
	}
	return df.cmd[i+1]
}

// TestDockerfile checks the Dockerfile's shape: a multi-stage build on the
// go.mod Go version, a static stamped binary, a small non-root final image.
func TestDockerfile(t *testing.T) {
	df := parseDockerfile(t)
	var froms []instruction
	var buildRun string
	args := map[string]string{}
	for _, in := range df.instrs {
		switch in.op {
		case "FROM":
			froms = append(froms, in)
		case "ARG":
			if k, v, ok := strings.Cut(in.args, "="); ok && in.stage == -1 {
				args[k] = v
			}
		case "RUN":
			if strings.Contains(in.args, "go build") {
				buildRun = in.args
			}
		}
	}
	if len(froms) < 2 {
		t.Fatalf("Dockerfile has %d FROM, want a multi-stage build", len(froms))
	}
	goMod := string(readRepoFile(t, "go.mod"))
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(goMod)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	if first := froms[0].args; !strings.HasPrefix(first, "golang:${GO_VERSION} ") || args["GO_VERSION"] != m[1] {
		t.Errorf("first stage FROM %q with ARG GO_VERSION=%q, want golang:${GO_VERSION} with GO_VERSION=%s (go.mod)", first, args["GO_VERSION"], m[1])
	}
	for _, flag := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w -X github.com/kstreamd/kstreamd/sdk.Version=${VERSION}"`, "./cmd/kstreamd"} {
		if !strings.Contains(buildRun, flag) {
			t.Errorf("the go build RUN %q lacks %s", buildRun, flag)
		}
	}
	if final := froms[len(froms)-1].args; !strings.HasPrefix(final, "gcr.io/distroless/static") {
		t.Errorf("final stage FROM %q, want a distroless static image", final)
	}
	if u := df.last("USER"); u == "" || u == "root" || strings.HasPrefix(u, "0") {
		t.Errorf("final stage USER %q, want a non-root user", u)
	}
	var entry []string
	if err := json.Unmarshal([]byte(df.last("ENTRYPOINT")), &entry); err != nil || len(entry) != 1 {
		t.Fatalf("ENTRYPOINT %q: want [\"/path/to/kstreamd\"] (%v)", df.last("ENTRYPOINT"), err)
	}
	if !slices.ContainsFunc(df.all("COPY"), func(c string) bool { return strings.HasSuffix(c, " "+entry[0]) }) {
		t.Errorf("no COPY in the final stage puts the binary at the ENTRYPOINT %s", entry[0])
	}
	df.configPath(t)

	t.Run("-X sdk.Version stamps the version", func(t *testing.T) {
		out, err := exec.Command(binPath, "version").CombinedOutput()
		if want := "kstreamd " + testVersion + "\nmodule github.com/kstreamd/kstreamd "; err != nil || !strings.HasPrefix(string(out), want) {
			t.Errorf("kstreamd version = %q (%v), want it to start %q", out, err, want)
		}
		// The go command stamps the checkout's revision (a fresh clone in
		// CI); it does not read a git worktree's .git file.
		if st, err := os.Stat(repoFile(".git")); err != nil || !st.IsDir() {
			t.Logf("no .git directory at the root: not checking the revision in %q", out)
		} else if head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output(); err == nil {
			if want := "\nrevision " + strings.TrimSpace(string(head)); !strings.Contains(string(out), want) {
				t.Errorf("kstreamd version = %q, want %q", out, want)
			}
		}
	})
}

// TestStaticBuild checks that every package of the binary builds with
// CGO_ENABLED=0, as the Dockerfile builds it, without compiling: go list
// reports a package whose files all need cgo as an error.
func TestStaticBuild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), "list", "-e", "-deps",
		"-f", `{{if .Error}}{{.ImportPath}}: {{.Error}}{{"\n"}}{{end}}`, "./cmd/kstreamd")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil || len(out) > 0 {
		t.Fatalf("CGO_ENABLED=0 go list -deps ./cmd/kstreamd: %v\n%s", err, out)
	}
}

// TestDockerignore checks that the build context keeps every file the
// image's go build reads and leaves out what must not be sent.
func TestDockerignore(t *testing.T) {
	patterns := parseDockerignore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), "list", "-deps",
		"-f", `{{if and .Module .Module.Main}}{{range .GoFiles}}{{$.Dir}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$.Dir}}/{{.}}{{"\n"}}{{end}}{{end}}`,
		"./cmd/kstreamd")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	needed := []string{"go.mod", "go.sum"}
	for _, f := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(f, root+"/")
		if !ok {
			t.Fatalf("go list file %q is outside %s", f, root)
		}
		needed = append(needed, rel)
	}
	if len(needed) < 10 {
		t.Fatalf("go list found only %d files of the main module: %q", len(needed), needed)
	}
	for _, f := range needed {
		if dockerIgnored(patterns, f) {
			t.Errorf(".dockerignore leaves out %s, which the image's go build needs", f)
		}
	}
	for _, f := range []string{".git/HEAD", "data/state/x", "deploy/deploy_test.go", "pipeline/config_test.go", "pipeline/testdata/x.yaml", "configs/colorshape.yaml", "README.md", "state/FORMAT.md"} {
		if !dockerIgnored(patterns, f) {
			t.Errorf(".dockerignore sends %s to the build, which does not need it", f)
		}
	}
}

type ignorePattern struct {
	re     *regexp.Regexp
	negate bool
}

func parseDockerignore(t *testing.T) []ignorePattern {
	t.Helper()
	var ps []ignorePattern
	for _, line := range strings.Split(string(readRepoFile(t, ".dockerignore")), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p := ignorePattern{}
		if s, ok := strings.CutPrefix(line, "!"); ok {
			p.negate, line = true, s
		}
		p.re = regexp.MustCompile("^" + globToRegexp(path.Clean(strings.TrimPrefix(line, "/"))) + "$")
		ps = append(ps, p)
	}
	return ps
}

// globToRegexp translates a .dockerignore pattern (Go filepath.Match syntax
// plus "**", any number of directories) to a regular expression.
func globToRegexp(glob string) string {
	var b strings.Builder
	segs := strings.Split(glob, "/")
	for i, seg := range segs {
		if seg == "**" {
			b.WriteString(`(?:[^/]+/)*`)
			if i == len(segs)-1 {
				b.WriteString(`[^/]*`)
			}
			continue
		}
		for j := 0; j < len(seg); j++ {
			switch c := seg[j]; c {
			case '*':
				b.WriteString(`[^/]*`)
			case '?':
				b.WriteString(`[^/]`)
			case '[':
				k := strings.IndexByte(seg[j:], ']')
				if k < 0 {
					b.WriteString(`\[`)
					continue
				}
				b.WriteString(strings.Replace(seg[j:j+k+1], "[^", "[^/", 1))
				j += k
			case '\\':
				if j+1 < len(seg) {
					j++
					b.WriteString(regexp.QuoteMeta(seg[j : j+1]))
				}
			default:
				b.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		if i < len(segs)-1 {
			b.WriteString("/")
		}
	}
	return b.String()
}

// dockerIgnored reports whether Docker leaves rel out of the build context:
// the last pattern matching rel or one of its parent directories decides.
func dockerIgnored(ps []ignorePattern, rel string) bool {
	ignored := false
	for _, p := range ps {
		for prefix := rel; ; {
			if p.re.MatchString(prefix) {
				ignored = !p.negate
				break
			}
			i := strings.LastIndexByte(prefix, '/')
			if i < 0 {
				break
			}
			prefix = prefix[:i]
		}
	}
	return ignored
}

// operatorParams returns each operator's params as YAML text and clears
// them, so configs can be compared without the nodes' line numbers.
func operatorParams(ops []pipeline.OperatorConfig) (out []string) {
	for i := range ops {
		b, _ := yaml.Marshal(&ops[i].Params)
		out = append(out, string(b))
		ops[i].Params = yaml.Node{}
	}
	return out
}
