package sdk_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// runShipmentJob runs the example's two-input order_shipment type
// (shipments.yaml on a kfake broker, timeout 10s, one partition per
// topic): validate accepts the shipped shipments.yaml; orders and
// shipments keyed by different fields meet per order id; an order whose
// shipment came before it, and one whose shipment came after it, are
// shipped; two orders whose shipment had not come when the watermark of
// both topics passed their time + 10s are not_shipped (the event-time
// timer), and a shipment arriving after that changes nothing. The
// read_committed output is exactly those four statuses, once each.
func runShipmentJob(t *testing.T, bin string) {
	shipped := filepath.Join(exampleDir(t), "shipments.yaml")
	if code, stdout, stderr := runExample(t, bin, "validate", "--config", shipped); code != 0 || stdout != shipped+": ok\n" {
		t.Fatalf("validate %s: exit %d, stdout %q, stderr %q; want 0 and ok", shipped, code, stdout, stderr)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders", "shipments", "order-status"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	broker := c.ListenAddrs()[0]
	metrics := testkit.FreeAddr(t)
	dir := t.TempDir()
	b, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	for _, r := range [][2]string{
		{"  embedded:\n    enabled: true\n", "  brokers: [" + broker + "]\n  embedded:\n    enabled: false\n"},
		{"data_dir: ./data", "data_dir: " + dir},
		{"address: 127.0.0.1:9249", "address: " + metrics},
		{"timeout: 1h", "timeout: 10s"},
	} {
		if !strings.Contains(cfg, r[0]) {
			t.Fatalf("shipments.yaml has no %q", r[0])
		}
		cfg = strings.Replace(cfg, r[0], r[1], 1)
	}
	path := filepath.Join(dir, "shipments.yaml")
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
	if !testkit.Poll(30*time.Second, func() bool {
		if exited() {
			return true
		}
		resp, err := http.Get("http://" + metrics + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) || exited() {
		t.Fatalf("kstreamd-custom did not become healthy within 30s (exited: %v)", exited())
	}
	const t0 = int64(1_700_000_000_000)
	order := func(id int, sec int64) *kgo.Record {
		return &kgo.Record{Topic: "orders", Value: fmt.Appendf(nil, `{"id":%d,"ts":%d}`, id, t0+sec*1000)}
	}
	shipment := func(id int, sec int64) *kgo.Record {
		return &kgo.Record{Topic: "shipments", Value: fmt.Appendf(nil, `{"order_id":%d,"ts":%d}`, id, t0+sec*1000)}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce := func(recs ...*kgo.Record) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	// Orders 2 and 3 time out at 11s and 12s: shipment 9 (no such order)
	// at 20s and order 4 at 30s move the watermark past both. Order 5's
	// shipment may reach the operator before or after it.
	produce(order(1, 0), order(2, 1), order(3, 2), order(5, 26), order(4, 30))
	produce(shipment(1, 5), shipment(9, 20), shipment(5, 25))
	want := []string{`1 {"order":"1","status":"shipped"}`, `2 {"order":"2","status":"not_shipped"}`,
		`3 {"order":"3","status":"not_shipped"}`, `5 {"order":"5","status":"shipped"}`}
	read := func() []string {
		var got []string
		for _, r := range testkit.ReadTopic(t, []string{broker}, "order-status", 10*time.Second) {
			got = append(got, string(r.Key)+" "+string(r.Value))
		}
		slices.Sort(got)
		return got
	}
	var got []string
	testkit.Poll(60*time.Second, func() bool { got = read(); return len(got) >= len(want) || exited() })
	if !slices.Equal(got, want) {
		t.Fatalf("order-status (read_committed): %q, want %q", got, want)
	}
	// Order 2's shipment after its timeout: nothing more (order 4 is
	// still open, its timeout 40s not passed by the watermark).
	produce(shipment(2, 31))
	testkit.WaitMetric(t, 30*time.Second, "http://"+metrics+"/metrics", "kstreamd_operator_records_in_total", map[string]string{"operator": "status"}, 9)
	// A checkpoint triggered after it completes: it commits whatever the
	// shipment wrote.
	url := "http://" + metrics + "/metrics"
	last, _ := testkit.Scrape(url, "kstreamd_checkpoint_last_completed_id", nil)
	if !testkit.Poll(30*time.Second, func() bool {
		id, err := testkit.Scrape(url, "kstreamd_checkpoint_last_completed_id", nil)
		return err == nil && id > last+1
	}) {
		t.Fatal("no checkpoint completed after the late shipment")
	}
	if got = read(); !slices.Equal(got, want) {
		t.Fatalf("after the late shipment, order-status: %q, want %q", got, want)
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
