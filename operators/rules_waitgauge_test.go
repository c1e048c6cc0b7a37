package operators

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// waitingSeries returns kstreamd_rules_waiting_records' series in reg:
// value by subtask label.
func waitingSeries(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "kstreamd_rules_waiting_records" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "subtask" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// TestRulesWaitingGaugeAppearsRestored: a routing subtask's
// kstreamd_rules_waiting_records series appears only once its restored
// waiting records are in, with their count, never as a 0 between Open and
// InitializeState (decoding the union state takes long with many waiting
// records): a reader that takes "every subtask's series is 0" for "nothing
// waits", as cmd/kstreamd TestRulesKillRestore does, read its alerts before
// any was routed and found none (0 of 2,496 in 3 of 3 runs on 0749423).
func TestRulesWaitingGaugeAppearsRestored(t *testing.T) {
	ctx := context.Background()
	rule := runtime.Record{Key: []byte("r"), Value: []byte(`{"id":"r","aggregate":{"fn":"count"},"window":"1h","alert_when":">= 1"}`), Timestamp: time.UnixMilli(1000)}
	op := NewProcessOperator(OpenContext{Operator: "fraud.route", Parallelism: 1}, nil, NewRulesRouter(RulesConfig{RuleTime: RuleTimeEvent, Operator: "fraud"}),
		runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{runtime.NewChannel(64)}, runtime.ForwardPartitioner{})))
	if err := op.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if err := op.ProcessRecord(ctx, 1, rule); err != nil {
		t.Fatal(err)
	}
	for _, ts := range []int64{3000, 2000, 4000} {
		if err := op.ProcessRecord(ctx, 0, runtime.Record{Value: testTx{Payee: "p1", TS: ts}.json(), Timestamp: time.UnixMilli(ts), Origin: runtime.Origin{Offset: ts}}); err != nil {
			t.Fatal(err)
		}
	}
	fin, err := op.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := fin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ts checkpoint.TaskState
	if err := json.Unmarshal(snap.State, &ts); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRulesRouter(RulesConfig{RuleTime: RuleTimeEvent, Operator: "fraud", Metrics: m})
	// The order ProcessOperator.Open and KeyedOperator.Open follow.
	if err := r.Open(OpenContext{Operator: "fraud.route", Parallelism: 1}); err != nil {
		t.Fatal(err)
	}
	if got := waitingSeries(t, reg); len(got) != 0 {
		t.Fatalf("after Open, before the restore: waiting series %v, want none (a 0 says nothing waits)", got)
	}
	if err := r.InitializeState(FunctionInitializationContext{OperatorStateStore: state.NewOperatorStateStore(ts.Operator)}); err != nil {
		t.Fatal(err)
	}
	if got := waitingSeries(t, reg); len(got) != 1 || got["0"] != 3 {
		t.Fatalf("after the restore: waiting series %v, want subtask 0 at 3", got)
	}

	// A fresh start: the series is there, at 0, once the (empty) state is.
	fresh := NewRulesRouter(RulesConfig{RuleTime: RuleTimeEvent, Operator: "fraud", Metrics: m})
	if err := fresh.Open(OpenContext{Operator: "fraud.route", Subtask: 1, Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	if err := fresh.InitializeState(FunctionInitializationContext{OperatorStateStore: state.NewOperatorStateStore(nil)}); err != nil {
		t.Fatal(err)
	}
	if got := waitingSeries(t, reg); len(got) != 2 || got["1"] != 0 {
		t.Fatalf("after a fresh start of subtask 1: waiting series %v, want subtask 1 at 0 beside subtask 0", got)
	}
}
