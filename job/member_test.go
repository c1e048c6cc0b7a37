package job_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/pipeline"
)

// counterSum is the sum of every series of the counter name in reg whose
// labels include match.
func counterSum(t *testing.T, reg *prometheus.Registry, name string, match map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range match {
				if labels[k] != v {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// heads reads every HEAD of a unit's namespace, HEAD-1 first; it stops at
// the first missing sequence.
func heads(t *testing.T, ns string) []checkpoint.Head {
	t.Helper()
	var out []checkpoint.Head
	for k := 1; ; k++ {
		b, err := os.ReadFile(filepath.Join(ns, fmt.Sprintf("HEAD-%d", k)))
		if os.IsNotExist(err) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var h checkpoint.Head
		if err := json.Unmarshal(b, &h); err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
}

// TestRevokeTakesFinalCheckpoint: a member runs the one unit of a copy job
// whose periodic checkpoints never come (interval 1h); when the member
// stops, the revoke triggers the unit's final checkpoint at once: the
// unit's HEAD chain is exactly its claim and one checkpoint (chk-1) by the
// member, and that checkpoint's transaction is committed: read_committed
// output holds every record once.
func TestRevokeTakesFinalCheckpoint(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	opts := []kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...)}
	cfg, err := pipeline.Parse("copy.yaml", []byte(copyYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := cfg.PlanStages()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	set := cfg.Settings()
	set.CheckpointDir, set.StateDir, set.StateBackend = dir+"/store", dir+"/state", "hashmap"
	set.Interval = time.Hour // only the revoke's checkpoint can commit
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("in"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 20
	for i := range n {
		if err := prod.ProduceSync(context.Background(), &kgo.Record{Value: fmt.Appendf(nil, `{"i":%d}`, i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- job.RunMember(ctx, st, set, job.Deps{Registerer: reg, ClientOpts: opts}, job.MemberConfig{
			GroupID: "copy-cluster", MemberID: "m1",
			SessionTimeout: 10 * time.Second, RebalanceTimeout: time.Minute, RevokeTimeout: 50 * time.Second,
		})
	}()
	if !testkit.Poll(2*time.Minute, func() bool {
		return counterSum(t, reg, "kstreamd_operator_records_in_total", map[string]string{"operator": "out"}) == n
	}) {
		t.Fatal("the unit's sink never received every record")
	}
	cancel() // the member leaves: every unit is revoked
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunMember: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("RunMember did not return")
	}
	got := heads(t, dir+"/store/copy/units/0/0")
	want := []checkpoint.Head{
		{Seq: 1, CheckpointID: 0, Owner: "m1", Claim: true, Fingerprint: st.Fingerprint},
		{Seq: 2, CheckpointID: 1, Owner: "m1", Fingerprint: st.Fingerprint},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("HEAD chain %+v, want %+v", got, want)
	}
	out := testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "out", 10*time.Second)
	seen := map[string]int{}
	for _, r := range out {
		seen[string(r.Value)]++
	}
	for i := range n {
		if v := fmt.Sprintf(`{"i":%d}`, i); seen[v] != 1 {
			t.Errorf("record %s in the output %d times, want once", v, seen[v])
		}
	}
	if len(out) != n {
		t.Errorf("output holds %d records, want %d", len(out), n)
	}
}
