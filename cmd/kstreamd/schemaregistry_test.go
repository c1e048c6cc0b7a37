package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// startSchemaRegistryCmd runs `kstreamd schema-registry` with args and
// returns its URL (its first line of output) and a stop function that
// sends SIGTERM and returns the exit status.
func startSchemaRegistryCmd(t *testing.T, args ...string) (string, func() int) {
	t.Helper()
	cmd := exec.Command(kstreamdBinary(t), append([]string{"schema-registry"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testkit.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		for sc.Scan() {
		}
		_ = cmd.Wait()
		done <- cmd.ProcessState.ExitCode()
	}()
	stopped := false
	stop := func() int {
		if stopped {
			return 0
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case code := <-done:
			return code
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("kstreamd schema-registry did not stop:\n%s", stderr.String())
			return -1
		}
	}
	t.Cleanup(func() { stop() })
	select {
	case u := <-line:
		return u, stop
	case code := <-done:
		stopped = true
		t.Fatalf("kstreamd schema-registry exited with %d before printing its URL:\n%s", code, stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("kstreamd schema-registry printed no URL:\n%s", stderr.String())
	}
	return "", stop
}

// subjectSchema is the registry's answer about one schema version.
type subjectSchema struct {
	Subject string `json:"subject"`
	Version int    `json:"version"`
	ID      int    `json:"id"`
	Schema  string `json:"schema"`
}

// registerHTTP registers schema (of schemaType, "" for Avro) under subject
// through the registry's REST API at url and returns its id.
func registerHTTP(t *testing.T, url, subject, schemaType, schema string) subjectSchema {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"schema": schema, "schemaType": schemaType})
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Post(url+"/subjects/"+subject+"/versions", "application/vnd.schemaregistry.v1+json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out subjectSchema
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
		t.Fatalf("register %s: %d %s", subject, resp.StatusCode, b)
	}
	return out
}

// getHTTP GETs a schema version from the registry's REST API.
func getHTTP(t *testing.T, url string) subjectSchema {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out subjectSchema
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return out
}

// TestSchemaRegistryCommand: `kstreamd schema-registry` serves the
// registry API at the address given, keeps registered schemas in its data
// dir across a restart (same subject, version and id), and exits 0 on
// SIGTERM; a config file's schema_registry.embedded section sets its
// address, and a bad flag is a usage error.
func TestSchemaRegistryCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url, stop := startSchemaRegistryCmd(t, "--address", "127.0.0.1:0", "--data-dir", dir)
	ss := registerHTTP(t, url, "orders-value", "", orderSchemaV1)
	if code := stop(); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "schemas.json")); err != nil {
		t.Fatal(err)
	}
	addr := testkit.FreeAddr(t)
	cfg := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("job:\n  name: sr\nkafka:\n  brokers: [127.0.0.1:9092]\nsources:\n  - {name: in, topic: in}\nsinks:\n  - {name: out, input: in, topic: out}\nschema_registry:\n  embedded:\n    address: %s\n    data_dir: %s\n", addr, dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	url2, _ := startSchemaRegistryCmd(t, "--config", cfg)
	if url2 != "http://"+addr {
		t.Fatalf("listening at %s, want http://%s", url2, addr)
	}
	got := getHTTP(t, url2+"/subjects/orders-value/versions/latest")
	if got.ID != ss.ID || got.Schema != orderSchemaV1 || got.Version != 1 {
		t.Fatalf("after restart: %+v, want id %d", got, ss.ID)
	}
	if code, _, stderr := runBinary(t, "schema-registry", "--nope"); code != 2 || !strings.Contains(stderr, "usage: kstreamd schema-registry") {
		t.Fatalf("bad flag: exit %d, %s", code, stderr)
	}
}

// TestEmbeddedSchemaRegistryJob: a job with schema_registry.embedded.enabled
// starts the registry with itself and uses it: a JSON Schema registered
// through the embedded registry's API decodes the input, and the sink
// registers its own schema there.
func TestEmbeddedSchemaRegistryJob(t *testing.T) {
	t.Parallel()
	_, broker := startKfake(t, []string{"in", "out", "dlq"})
	dir, metrics, srAddr := t.TempDir(), testkit.FreeAddr(t), testkit.FreeAddr(t)
	cfg := registryJob(dir, broker, metrics, "x", "json_schema", "cents >= 0", `{"tier": tier, "cents": cents}`,
		"        - {name: total, fn: sum, of: cents}\n        - {name: orders, fn: count}",
		"      auto_register: true\n      schema: '"+totalsJSONSchema+"'")
	cfg = strings.Replace(cfg, "schema_registry:\n  urls: [x]\n", "schema_registry:\n  embedded:\n    enabled: true\n    address: "+srAddr+"\n", 1)
	d := startDaemon(t, dir, cfg, broker, metrics)
	in := registerHTTP(t, "http://"+srAddr, "in-value", "JSON", paymentJSONSchema)
	produce(t, newClient(t, broker),
		&kgo.Record{Topic: "in", Value: confluentFrame(in.ID, []byte(`{"tier":"GOLD","cents":5}`))},
		&kgo.Record{Topic: "in", Value: confluentFrame(in.ID, []byte(`{"tier":"GOLD","cents":7}`))})
	testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "out"}, 2)
	last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	waitCheckpointAfter(t, d, last)
	out := getHTTP(t, "http://"+srAddr+"/subjects/out-value/versions/latest")
	recs := testkit.ReadTopic(t, []string{broker}, "out", 10*time.Second)
	if len(recs) != 2 || string(recs[1].Value) != string(confluentFrame(out.ID, []byte(`{"key":"GOLD","total":12,"orders":2}`))) {
		var vals []string
		for _, r := range recs {
			vals = append(vals, fmt.Sprintf("%q", r.Value))
		}
		t.Fatalf("out: %v", vals)
	}
	if lookups, _ := testkit.Scrape(d.url(), "kstreamd_schema_registry_lookups_total", nil); lookups < 1 {
		t.Fatalf("kstreamd_schema_registry_lookups_total %v, want >= 1", lookups)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}
