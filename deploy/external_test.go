package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// TestExternalPipelineConfig checks configs/colorshape-external.yaml, the
// README's config for the development broker in its own process: it
// validates; it is the reference job (job, data_dir, state, checkpoints,
// sources, operators, sinks, demo of configs/colorshape.yaml) with the
// embedded broker off and kafka.brokers at its address; and, with only its
// addresses and data dir made local, `kstreamd broker` and `kstreamd run` on
// it in two processes make matches, the job stopping cleanly on SIGTERM.
func TestExternalPipelineConfig(t *testing.T) {
	const rel = "configs/colorshape-external.yaml"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binPath, "validate", "--config", repoFile(rel)).CombinedOutput()
	if want := repoFile(rel) + ": ok\n"; err != nil || string(out) != want {
		t.Fatalf("kstreamd validate --config %s: %v\n%s(want %q)", rel, err, out, want)
	}
	ext, ref := loadPipeline(t, rel), loadPipeline(t, "configs/colorshape.yaml")
	if ext.Kafka.Embedded.Enabled || !slices.Equal(ext.Kafka.Brokers, []string{ref.Kafka.Embedded.Address}) ||
		ext.Kafka.Embedded.Address != ref.Kafka.Embedded.Address || ext.Kafka.Embedded.Partitions != ref.Kafka.Embedded.Partitions {
		t.Errorf("%s kafka = %+v; want the embedded broker off, at %s with %d partitions as in colorshape.yaml, and brokers [%s]",
			rel, ext.Kafka, ref.Kafka.Embedded.Address, ref.Kafka.Embedded.Partitions, ref.Kafka.Embedded.Address)
	}
	extParams, refParams := operatorParams(ext.Operators), operatorParams(ref.Operators)
	for _, c := range []struct {
		field    string
		ext, ref any
	}{
		{"operator params", extParams, refParams},
		{"job", ext.Job, ref.Job}, {"data_dir", ext.DataDir, ref.DataDir}, {"state", ext.State, ref.State},
		{"checkpoints", ext.Checkpoints, ref.Checkpoints}, {"metrics", ext.Metrics, ref.Metrics},
		{"sources", ext.Sources, ref.Sources}, {"operators", ext.Operators, ref.Operators},
		{"sinks", ext.Sinks, ref.Sinks}, {"demo", ext.Demo, ref.Demo},
	} {
		if a, b := fmt.Sprintf("%+v", c.ext), fmt.Sprintf("%+v", c.ref); a != b {
			t.Errorf("%s differs from configs/colorshape.yaml:\n external:  %s\n reference: %s", c.field, a, b)
		}
	}

	// Both processes on one file, as the README runs them.
	var doc yaml.Node
	if err := yaml.Unmarshal(readRepoFile(t, rel), &doc); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	setYAML(t, &doc, &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle, Content: []*yaml.Node{scalar(broker)}}, "kafka", "brokers")
	setYAML(t, &doc, scalar(broker), "kafka", "embedded", "address")
	setYAML(t, &doc, scalar(metrics), "metrics", "address")
	setYAML(t, &doc, scalar(filepath.Join(dir, "data")), "data_dir")
	setYAML(t, &doc, scalar(testCheckpointInterval), "checkpoints", "interval")
	cfg, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	brokerDir := t.TempDir()
	cfgPath := filepath.Join(brokerDir, "pipeline.yaml")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	brokerLog := &testkit.SyncBuffer{}
	b := exec.Command(binPath, "broker", "--config", cfgPath)
	b.Stdout, b.Stderr = brokerLog, brokerLog
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Process.Kill(); _ = b.Wait() })
	if !testkit.Poll(20*time.Second, func() bool { return strings.Contains(brokerLog.String(), "embedded kafka broker started") }) {
		t.Fatalf("kstreamd broker did not start within 20s:\n%s", brokerLog.String())
	}

	d, err := startDaemon(dir, string(cfg), broker, metrics)
	if err != nil {
		t.Fatalf("%v\nbroker log:\n%s", err, brokerLog.String())
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = d.stop()
		}
	})
	var v float64
	if !testkit.Poll(20*time.Second, func() bool {
		v, err = testkit.Scrape("http://"+metrics+"/metrics", "kstreamd_operator_records_out_total", map[string]string{"operator": "matches"})
		return err == nil && v > 0
	}) {
		t.Fatalf("no match written within 20s (%v, %v)\ndaemon log:\n%s\nbroker log:\n%s", v, err, d.logTail(), brokerLog.String())
	}
	stopped = true
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
}
