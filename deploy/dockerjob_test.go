package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// setYAML replaces the value at the mapping path keys of the document doc
// (configs/colorshape-docker.yaml) with value, failing the test when a key
// is missing.
func setYAML(t *testing.T, doc *yaml.Node, value *yaml.Node, keys ...string) {
	t.Helper()
	if err := setYAMLPath(doc, value, keys...); err != nil {
		t.Fatalf("configs/colorshape-docker.yaml: %v", err)
	}
}

// setYAMLPath replaces the value at the mapping path keys of the document
// doc with value; it fails when a key is missing.
func setYAMLPath(doc *yaml.Node, value *yaml.Node, keys ...string) error {
	n := doc
	if n.Kind == yaml.DocumentNode {
		n = n.Content[0]
	}
	for i, k := range keys {
		found := false
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == k {
				if i == len(keys)-1 {
					n.Content[j+1] = value
				}
				n, found = n.Content[j+1], true
				break
			}
		}
		if !found {
			return fmt.Errorf("no key %s", strings.Join(keys[:i+1], "."))
		}
	}
	return nil
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }

// TestDockerPipelineRuns runs configs/colorshape-docker.yaml as the compose
// file does, with only its addresses, data dir and checkpoint interval made
// local: against an outside broker (kfake on loopback standing in for the
// kafka service) whose topics are created as kafka-init creates them. The
// job must match items, write matches, complete a checkpoint under its
// data_dir (the compose volume), log JSON, and stop cleanly on SIGTERM.
func TestDockerPipelineRuns(t *testing.T) {
	specs := initTopics(t, loadCompose(t).Services["kafka-init"])
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	broker := cluster.ListenAddrs()[0]
	func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, ts := range specs {
			resp, err := kadm.NewClient(cl).CreateTopic(ctx, ts.partitions, ts.replication, ts.configs, ts.name)
			if err == nil {
				err = resp.Err
			}
			if err != nil {
				t.Fatalf("create topic %s as kafka-init does: %v", ts.name, err)
			}
		}
	}()

	var doc yaml.Node
	if err := yaml.Unmarshal(readRepoFile(t, "configs/colorshape-docker.yaml"), &doc); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	metrics := testkit.FreeAddr(t)
	setYAML(t, &doc, &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle, Content: []*yaml.Node{scalar(broker)}}, "kafka", "brokers")
	setYAML(t, &doc, scalar(metrics), "metrics", "address")
	setYAML(t, &doc, scalar(dataDir), "data_dir")
	setYAML(t, &doc, scalar("500ms"), "checkpoints", "interval")
	// The token the compose service api-token makes.
	tokenFile := filepath.Join(dir, "api-token")
	if err := os.WriteFile(tokenFile, []byte("d0cker-t0ken\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	setYAML(t, &doc, scalar(tokenFile), "metrics", "bearer_token_file")
	cfg, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}

	d, err := startDaemon(dir, string(cfg), broker, metrics)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = d.stop()
		}
	})
	url := "http://" + metrics + "/metrics"
	for _, c := range []struct {
		metric, operator string
	}{
		{"kstreamd_operator_records_in_total", "matcher"},
		{"kstreamd_operator_records_out_total", "matcher"},
		{"kstreamd_operator_records_out_total", "matches"},
	} {
		var v float64
		if !testkit.Poll(15*time.Second, func() bool {
			v, err = testkit.Scrape(url, c.metric, map[string]string{"operator": c.operator})
			return err == nil && v > 0
		}) {
			t.Fatalf("%s{operator=%q} = %v (err %v) after 15s, want > 0\ndaemon log:\n%s", c.metric, c.operator, v, err, d.logTail())
		}
		t.Logf("%s{operator=%q} = %v", c.metric, c.operator, v)
	}
	chk := filepath.Join(dataDir, "checkpoints", "colorshape", "chk-*", "_metadata")
	var found []string
	if !testkit.Poll(15*time.Second, func() bool {
		found, _ = filepath.Glob(chk)
		return len(found) > 0
	}) {
		t.Fatalf("no completed checkpoint (%s) after 15s\ndaemon log:\n%s", chk, d.logTail())
	}
	t.Logf("checkpoint completed: %s", found[0])
	stopped = true
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}

	// format: json, for `docker compose logs` and log shippers: every line
	// is one JSON object with a level and a message.
	b, err := os.ReadFile(filepath.Join(dir, "kstreamd.log"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	lines := 0
	for sc.Scan() {
		lines++
		var rec struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec.Level == "" || rec.Msg == "" {
			t.Errorf("log line %d is not a JSON object with level and msg (%v): %s", lines, err, sc.Bytes())
		}
	}
	if lines == 0 {
		t.Error("the daemon logged nothing")
	}
}
