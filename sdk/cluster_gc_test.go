package sdk

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/pipeline"
)

// TestClusterGCCommand: `kstreamd cluster gc` on a broker (kfake) and a
// filesystem store: its usage; a file without cluster mode is refused
// (exit 2); with nothing stale it says so; a stale repartition topic (of
// a stage the graph no longer has) is listed with why and kept without
// --delete, removed with it, while the job's own topic stays.
func TestClusterGCCommand(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "clicks", "counts"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	dir := t.TempDir()
	yaml := fmt.Sprintf(`job:
  name: clicks
  max_parallelism: 16
kafka:
  brokers: [%s]
checkpoints:
  interval: 1s
  timeout: 1m
cluster:
  enabled: true
  units: 2
  store:
    dir: %s
sources:
  - name: clicks
    topic: clicks
operators:
  - name: per_user
    type: keyed_count
    input: clicks
    key_by: user
sinks:
  - name: counts
    input: per_user
    topic: counts
    delivery: exactly-once
    transaction_timeout: 10m
`, c.ListenAddrs()[0], filepath.Join(dir, "store"))
	file := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	single := filepath.Join(dir, "single.yaml")
	if err := os.WriteFile(single, []byte(strings.Replace(yaml, "enabled: true", "enabled: false", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var stdout, stderr strings.Builder
		code := Run(context.Background(), args, &stdout, &stderr, NewRegistry())
		return code, stdout.String(), stderr.String()
	}
	if code, out, _ := run("cluster", "gc", "--help"); code != 0 || !strings.HasPrefix(out, "usage: kstreamd cluster gc --config FILE [--delete]\n") || !strings.Contains(out, "-delete") {
		t.Errorf("cluster gc --help: %d %q", code, out)
	}
	if code, _, errs := run("cluster"); code != 2 || !strings.HasPrefix(errs, "usage: kstreamd cluster <command> [flags]") {
		t.Errorf("cluster: %d %q", code, errs)
	}
	if code, _, errs := run("cluster", "gc", "--config", single); code != 2 || errs != "kstreamd cluster gc: "+single+" does not set cluster.enabled: true\n" {
		t.Errorf("gc of a single-process file: %d %q", code, errs)
	}
	cfg, err := pipeline.Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := cfg.PlanStages()
	if err != nil {
		t.Fatal(err)
	}
	store := "filesystem " + filepath.Join(dir, "store")
	if code, out, errs := run("cluster", "gc", "--config", file); code != 0 || out != "nothing stale in job clicks ("+store+", group kstreamd-clicks-cluster)\n" {
		t.Errorf("gc with nothing stale: %d %q %q", code, out, errs)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, topic := range []string{"clicks-1-repartition", "clicks-2-repartition"} {
		if _, err := adm.CreateTopic(context.Background(), 2, -1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	why := "stage 2 reads no such repartition topic (graphs in use: " + st.Fingerprint[:12] + ")"
	if code, out, errs := run("cluster", "gc", "--config", file); code != 0 || out != "stale topic clicks-2-repartition: "+why+"\n1 stale; run with --delete to remove them\n" {
		t.Errorf("gc: %d %q %q", code, out, errs)
	}
	if code, out, errs := run("cluster", "gc", "--config", file, "--delete"); code != 0 || out != "removed topic clicks-2-repartition: "+why+"\n" {
		t.Errorf("gc --delete: %d %q %q", code, out, errs)
	}
	topics, err := adm.ListTopics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(topics.Names()); got != "[clicks clicks-1-repartition counts]" {
		t.Errorf("topics after gc --delete: %s", got)
	}
}
