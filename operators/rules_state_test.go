package operators

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// checkpointCounts is what one checkpoint of a rules rig's keyed stage
// holds, per routing key: window buckets and timers.
type checkpointCounts struct {
	buckets map[string]int
	timers  map[string]int
}

// rules sums the counts per rule id.
func (c checkpointCounts) rules() (buckets, timers map[string]int) {
	buckets, timers = map[string]int{}, map[string]int{}
	for k, n := range c.buckets {
		buckets[ruleOfKey([]byte(k))] += n
	}
	for k, n := range c.timers {
		timers[ruleOfKey([]byte(k))] += n
	}
	return buckets, timers
}

// checkpointRules takes checkpoint id of every evaluator subtask of g and
// counts its keyed state from the checkpoint's contents: the snapshots are
// restored into one fresh backend of kind (all key groups), whose window
// slices (RulesSliceState and the newest in each summary) are walked and
// whose timers are popped.
func checkpointRules(t *testing.T, g *rulesRig, kind string, id int64) checkpointCounts {
	t.Helper()
	dir := t.TempDir()
	var old []checkpoint.TaskState
	for _, op := range g.evals {
		fin, err := op.SnapshotState(g.ctx, &runtime.Barrier{CheckpointID: id, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		snap, err := fin(g.ctx)
		if err != nil {
			t.Fatal(err)
		}
		ts, err := checkpoint.DecodeTaskStates(checkpoint.OperatorMetadata{Subtasks: []json.RawMessage{snap.State}})
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, ts[0])
	}
	r := restoresFor(t, old, dir, "", 1)[0]
	c := state.BackendConfig{Kind: kind, MaxParallelism: ckMaxP, KeyGroupRange: keygroup.RangeFor(ckMaxP, 1, 0)}
	if kind == state.KindPebble {
		c.Dir = t.TempDir()
	}
	b, err := state.OpenBackendRestored(c, r.Keyed)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	out := checkpointCounts{buckets: map[string]int{}, timers: map[string]int{}}
	err = state.ApplyToAllKeys(b, RulesSliceState, func(key []byte, s state.MapState[int64, ruleSlice]) error {
		for _, err := range s.Entries() {
			if err != nil {
				return err
			}
			out.buckets[string(key)]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = state.ApplyToAllKeys(b, RulesPageState, func(key []byte, s state.MapState[int64, rulePage]) error {
		for e, err := range s.Entries() {
			if err != nil {
				return err
			}
			out.buckets[string(key)] += len(e.Value.Slices)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = state.ApplyToAllValueKeys(b, RulesAggState, func(key []byte, s state.ValueState[ruleWindow]) error {
		w, ok, err := s.Value()
		if ok && w.TailSlice != nil {
			out.buckets[string(key)] += 1 + len(w.Older) // the slices in the summary
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	q, err := state.NewTimerQueue(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []state.TimeDomain{state.EventTime, state.ProcessingTime} {
		for {
			tm, ok, err := q.PopDue(d, math.MaxInt64)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			out.timers[string(tm.Key)]++
		}
	}
	return out
}

// TestRulesDeleteLeavesNothingInCheckpoint is issue 22's acceptance for a
// deleted rule: before the deletion its keys hold buckets and timers in a
// checkpoint; after it the next checkpoint holds 0 buckets and 0 timers of
// it, while the other rule's buckets and timers are exactly as before.
func TestRulesDeleteLeavesNothingInCheckpoint(t *testing.T) {
	txs := scriptTxs(600, 50, 3)
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 2, RuleTimeProcessing, nil, nil)
			g.rule("busy", `{"id":"busy","group_by":["payee_id"],"aggregate":{"fn":"count"},"window":"10m","alert_when":">= 6"}`, 0)
			g.rule("big", `{"id":"big","group_by":["payee_id","currency"],"aggregate":{"fn":"sum","of":"amount"},"window":"20m","alert_when":"> 1500"}`, 0)
			for _, x := range txs {
				g.tx(x)
			}
			g.watermark(txs[300].TS) // some buckets expire, the rest keep timers
			before := checkpointRules(t, g, kind, 1)
			bb, bt := before.rules()
			if bb["busy"] == 0 || bt["busy"] == 0 || bb["big"] == 0 || bt["big"] == 0 {
				t.Fatalf("before the deletion: buckets %v timers %v, want both rules in both", bb, bt)
			}
			g.rule("busy", "", 0)
			checkKeyHints(t, g)
			after := checkpointRules(t, g, kind, 2)
			ab, at := after.rules()
			if ab["busy"] != 0 || at["busy"] != 0 {
				t.Fatalf("deleted rule busy: %d buckets and %d timers in the next checkpoint, want 0 and 0", ab["busy"], at["busy"])
			}
			if ab["big"] != bb["big"] || at["big"] != bt["big"] {
				t.Fatalf("rule big: %d buckets %d timers, want %d and %d as before", ab["big"], at["big"], bb["big"], bt["big"])
			}
			// delete_all leaves nothing at all.
			g.rule("", `{"control":"delete_all"}`, 0)
			if all := checkpointRules(t, g, kind, 3); len(all.buckets) != 0 || len(all.timers) != 0 {
				t.Fatalf("after delete_all: buckets %v timers %v", all.buckets, all.timers)
			}
		})
	}
}

// TestRulesGroupByChangeDropsOldGroups: an update of a rule's group_by
// from payee_id to card removes every bucket of the old groups at once,
// with their timers (counted from the next checkpoint), while the other
// rule is untouched; records after the update build only new groups, and
// alert on those alone.
func TestRulesGroupByChangeDropsOldGroups(t *testing.T) {
	txs := scriptTxs(600, 50, 4)
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 2, RuleTimeProcessing, nil, nil)
			g.rule("busy", `{"id":"busy","group_by":["payee_id"],"aggregate":{"fn":"count"},"window":"10m","alert_when":">= 6"}`, 0)
			g.rule("big", `{"id":"big","group_by":["payee_id","currency"],"aggregate":{"fn":"sum","of":"amount"},"window":"20m","alert_when":"> 1500"}`, 0)
			for _, x := range txs[:400] {
				g.tx(x)
			}
			g.alerts()
			before := checkpointRules(t, g, kind, 1)
			bb, bt := before.rules()
			if bb["busy"] == 0 || bt["busy"] == 0 {
				t.Fatalf("before the update: buckets %v timers %v", bb, bt)
			}
			// A new limit alone keeps the groups.
			g.rule("busy", `{"id":"busy","group_by":["payee_id"],"aggregate":{"fn":"count"},"window":"10m","alert_when":">= 7"}`, 0)
			if n := g.entries()["busy"]; n != bb["busy"] {
				t.Fatalf("limit change: %d buckets, want %d kept", n, bb["busy"])
			}
			g.rule("busy", `{"id":"busy","group_by":["card"],"aggregate":{"fn":"count"},"window":"10m","alert_when":">= 6"}`, 0)
			after := checkpointRules(t, g, kind, 2)
			ab, at := after.rules()
			if ab["busy"] != 0 || at["busy"] != 0 {
				t.Fatalf("group_by changed: %d buckets and %d timers of the old groups in the next checkpoint, want 0 and 0", ab["busy"], at["busy"])
			}
			if ab["big"] != bb["big"] || at["big"] != bt["big"] {
				t.Fatalf("rule big: %d buckets %d timers, want %d and %d as before", ab["big"], at["big"], bb["big"], bt["big"])
			}
			// New records: only card groups, counted afresh.
			perCard := map[string]int{}
			for _, x := range txs[400:] {
				perCard[x.Card]++
				g.tx(x)
			}
			last := checkpointRules(t, g, kind, 3)
			for k := range last.buckets {
				if ruleOfKey([]byte(k)) == "busy" && !strings.Contains(k, `"c`) {
					t.Fatalf("bucket under old group key %s", k)
				}
			}
			for k := range last.timers {
				if ruleOfKey([]byte(k)) == "busy" && !strings.Contains(k, `"c`) {
					t.Fatalf("timer under old group key %s", k)
				}
			}
			for _, a := range g.alerts() {
				if strings.HasPrefix(a, "busy ") && !strings.HasPrefix(a, `busy {"card":`) {
					t.Fatalf("alert of an old group after the update: %s", a)
				}
			}
			checkKeyHints(t, g)
		})
	}
}

// TestRulesStaleShapeCopyDropped: a copy routed under the old group_by by
// a routing subtask that had not seen the update yet, arriving after the
// keyed stage applied it, recreates no old group.
func TestRulesStaleShapeCopyDropped(t *testing.T) {
	g := newRulesRig(t, state.KindHashmap, 1, RuleTimeProcessing, nil, nil)
	g.rule("r", `{"id":"r","group_by":["payee_id"],"aggregate":{"fn":"count"},"window":"1m","alert_when":">= 2"}`, 0)
	g.tx(testTx{ID: 1, Payee: "p1", Card: "c1", TS: 1000})
	c := &sliceCollector{}
	x := testTx{ID: 2, Payee: "p1", Card: "c1", TS: 2000}
	if err := g.router.ProcessElement(g.ctx, runtime.Record{Value: x.json(), Timestamp: time.UnixMilli(x.TS)}, c); err != nil {
		t.Fatal(err)
	}
	// The keyed stage sees the update before the routed copy.
	g.offset++
	upd := runtime.Record{Key: []byte("r"), Value: []byte(`{"id":"r","group_by":["card"],"aggregate":{"fn":"count"},"window":"1m","alert_when":">= 2"}`),
		Timestamp: time.UnixMilli(0), Origin: runtime.Origin{Offset: g.offset}}
	if err := g.evals[0].ProcessRecord(g.ctx, 1, upd); err != nil {
		t.Fatal(err)
	}
	if n := g.entries()["r"]; n != 0 {
		t.Fatalf("%d buckets after the group_by change, want 0", n)
	}
	if err := g.evals[0].ProcessRecord(g.ctx, 0, c.recs[0]); err != nil {
		t.Fatal(err)
	}
	if n := g.entries(); len(n) != 0 {
		t.Fatalf("a copy under the old shape recreated state: %v", n)
	}
	if got := g.alerts(); len(got) != 0 {
		t.Fatalf("alerts %v, want none", got)
	}
}

// TestRulesEvaluationErrors: a rule whose aggregate.of fails on every record
// (a string is not a number) and one that reaches the expression cost
// limit on every record are counted per rule in RuleStatuses (errors,
// last error) and in kstreamd_rule_evaluation_errors_total, logged once
// per 10 s of the (injected) clock, and never match; the good rule is
// unaffected.
func TestRulesEvaluationErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	r := NewRulesRouter(RulesConfig{RuleTime: RuleTimeProcessing, Operator: "fraud", Metrics: m, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err := r.Open(OpenContext{Operator: "fraud.route"}); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	r.now = func() time.Time { return now }
	// tags.map over a 300-element list costs more than the rules' 10,000
	// unit limit only at run time: the estimate is unbounded, the compile passes.
	rules := map[string]string{
		"good":   `{"id":"good","aggregate":{"fn":"count"},"window":"1m","alert_when":"> 100"}`,
		"string": `{"id":"string","aggregate":{"fn":"sum","of":"payee_id"},"window":"1m","alert_when":"> 1"}`,
		"costly": `{"id":"costly","filter":"tags.map(t, tags.map(u, t + u)).size() > 0","aggregate":{"fn":"count"},"window":"1m","alert_when":"> 1"}`,
	}
	for id, v := range rules {
		if err := r.ProcessBroadcastElement(t.Context(), runtime.Record{Key: []byte(id), Value: []byte(v)}, &sliceCollector{}); err != nil {
			t.Fatal(err)
		}
	}
	tags := make([]string, 300)
	for i := range tags {
		tags[i] = fmt.Sprintf("%q", fmt.Sprint(i))
	}
	c := &sliceCollector{}
	for i := range 5 {
		v := fmt.Sprintf(`{"payee_id":"p%d","tags":[%s]}`, i, strings.Join(tags, ","))
		if err := r.ProcessElement(t.Context(), runtime.Record{Value: []byte(v), Timestamp: time.UnixMilli(int64(i)), Format: runtime.FormatJSON}, c); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
	}
	if len(c.recs) != 5 {
		t.Fatalf("%d copies routed, want 5 (rule good only)", len(c.recs))
	}
	st := map[string]RuleStatus{}
	for _, s := range r.RuleStatuses() {
		st[s.ID] = s
	}
	if s := st["good"]; s.Errors != 0 || s.LastError != "" || s.RecordsMatched != 5 {
		t.Fatalf("good: %+v", s)
	}
	if s := st["string"]; s.Errors != 5 || !strings.HasPrefix(s.LastError, "aggregate.of: ") || s.RecordsMatched != 0 {
		t.Fatalf("string: errors %d last %q matched %d, want 5, aggregate.of: ..., 0", s.Errors, s.LastError, s.RecordsMatched)
	}
	if s := st["costly"]; s.Errors != 5 || !strings.HasPrefix(s.LastError, "filter: ") || !strings.Contains(s.LastError, "cost") || s.RecordsMatched != 0 {
		t.Fatalf("costly: errors %d last %q matched %d, want 5, a filter cost error, 0", s.Errors, s.LastError, s.RecordsMatched)
	}
	for id, want := range map[string]float64{"good": 0, "string": 5, "costly": 5} {
		if got := counterOf(t, m.ruleEvalErrors.WithLabelValues("fraud", id)); got != want {
			t.Fatalf("kstreamd_rule_evaluation_errors_total{rule=%q} = %v, want %v", id, got, want)
		}
	}
	if got := counterOf(t, m.rulesEvalErrors.WithLabelValues("fraud")); got != 10 {
		t.Fatalf("kstreamd_rules_eval_errors_total = %v, want 10", got)
	}
	// 10 failures within 5 s: one log line.
	if n := strings.Count(logs.String(), "rule evaluation failed"); n != 1 {
		t.Fatalf("%d log lines in 5 s, want 1:\n%s", n, logs.String())
	}
	now = now.Add(ruleErrorLogInterval)
	v := fmt.Sprintf(`{"payee_id":"p9","tags":[%s]}`, strings.Join(tags, ","))
	if err := r.ProcessElement(t.Context(), runtime.Record{Value: []byte(v), Format: runtime.FormatJSON}, c); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "rule evaluation failed"); n != 2 {
		t.Fatalf("%d log lines after 15 s, want 2:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "errors_since_last_log=10") {
		t.Fatalf("second line does not count the 10 errors since the first (9 unlogged and its own):\n%s", logs.String())
	}
}

// TestRuleEvaluationErrorsLabelsBounded: the first MaxRuleMetricLabels rule
// ids of an operator get their own series, every further one (and a rule
// named "other") counts under rule="other"; another operator has its own
// budget.
func TestRuleEvaluationErrorsLabelsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range MaxRuleMetricLabels + 50 {
		m.RuleEvaluationErrors("a", fmt.Sprintf("r%d", i)).Inc()
	}
	m.RuleEvaluationErrors("a", "r0").Inc() // an early id keeps its series
	m.RuleEvaluationErrors("b", "x").Inc()
	ch := make(chan prometheus.Metric, 1000)
	m.ruleEvalErrors.Collect(ch)
	close(ch)
	if n := len(ch); n != MaxRuleMetricLabels+2 {
		t.Fatalf("%d series, want %d (100 rules of a, other, x of b)", n, MaxRuleMetricLabels+2)
	}
	if got := counterOf(t, m.ruleEvalErrors.WithLabelValues("a", OtherRuleLabel)); got != 50 {
		t.Fatalf("other = %v, want 50", got)
	}
	if got := counterOf(t, m.ruleEvalErrors.WithLabelValues("a", "r0")); got != 2 {
		t.Fatalf("r0 = %v, want 2", got)
	}
}

// counterOf reads one counter (prometheus/testutil needs a module go.sum
// does not hold).
func counterOf(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var pb dto.Metric
	if err := c.Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetCounter().GetValue()
}

// TestRulesLimitsConfigurable: with max_expression_cost lowered to 100 a
// rule whose filter maps over 50 tags compiles (its minimum estimate is
// lower) but fails on every record, counted in the rule's errors, while the
// default limit (10,000) lets it match; with max_expression_length 20 the
// routing stage refuses a longer rule (counted as rejected, never held);
// a restore under lowered limits drops a stored rule they refuse, as if
// deleted, on both stages.
func TestRulesLimitsConfigurable(t *testing.T) {
	costly := `{"id":"tags","filter":"tags.map(t, t + 'x').size() > 0","aggregate":{"fn":"count"},"window":"1m","alert_when":"> 100"}`
	tags := make([]string, 50)
	for i := range tags {
		tags[i] = fmt.Sprintf("%q", fmt.Sprint(i))
	}
	rec := runtime.Record{Value: []byte(`{"tags":[` + strings.Join(tags, ",") + `]}`), Format: runtime.FormatJSON}
	run := func(p RulesParams) (RuleStatus, *Metrics) {
		t.Helper()
		m, err := NewMetrics(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		r := NewRulesRouter(RulesConfig{RuleTime: RuleTimeProcessing, Operator: "fraud", Metrics: m, Limits: p.limits()})
		if err := r.Open(OpenContext{Operator: "fraud.route"}); err != nil {
			t.Fatal(err)
		}
		if err := r.ProcessBroadcastElement(t.Context(), runtime.Record{Key: []byte("tags"), Value: []byte(costly)}, &sliceCollector{}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := r.ProcessElement(t.Context(), rec, &sliceCollector{}); err != nil {
				t.Fatal(err)
			}
		}
		st := r.RuleStatuses()
		if len(st) != 1 {
			return RuleStatus{}, m
		}
		return st[0], m
	}
	def := RulesParams{MaxExpressionLength: DefaultRuleMaxLength, MaxExpressionNodes: DefaultRuleMaxNodes, MaxExpressionCost: DefaultRuleMaxCost}
	if s, _ := run(def); s.Errors != 0 || s.RecordsMatched != 3 {
		t.Fatalf("default limits: errors %d matched %d, want 0 and 3", s.Errors, s.RecordsMatched)
	}
	low := def
	low.MaxExpressionCost = 100
	if s, _ := run(low); s.Errors != 3 || s.RecordsMatched != 0 || !strings.Contains(s.LastError, "cost exceeds the limit of 100") {
		t.Fatalf("max_expression_cost 100: errors %d matched %d last %q, want 3, 0, the cost limit", s.Errors, s.RecordsMatched, s.LastError)
	}
	short := def
	short.MaxExpressionLength = 20
	s, m := run(short)
	if s.ID != "" {
		t.Fatalf("max_expression_length 20: rule held: %+v", s)
	}
	if got := counterOf(t, m.RulesRejected("fraud.route")); got != 1 {
		t.Fatalf("max_expression_length 20: rejected %v, want 1", got)
	}

	// Restore under lowered limits: the stored rule is dropped on both stages.
	g := newRulesRig(t, state.KindHashmap, 1, RuleTimeProcessing, nil, nil)
	g.rule("tags", costly, 0)
	routerState, err := g.router.SnapshotBroadcastState()
	if err != nil {
		t.Fatal(err)
	}
	evalState, err := g.fns[0].SnapshotBroadcastState()
	if err != nil {
		t.Fatal(err)
	}
	r := NewRulesRouter(RulesConfig{Operator: "fraud", Limits: short.limits()})
	if err := r.RestoreBroadcastState(routerState); err != nil {
		t.Fatalf("router restore: %v", err)
	}
	f := NewRulesEvaluator(RulesConfig{Operator: "fraud", Limits: short.limits()})
	if err := f.RestoreBroadcastState(evalState); err != nil {
		t.Fatalf("evaluator restore: %v", err)
	}
	if n, n2 := len(r.RuleStatuses()), len(f.RuleStatuses()); n != 0 || n2 != 0 {
		t.Fatalf("after a restore under lowered limits the stages hold %d and %d rules, want 0", n, n2)
	}
	if _, ok := f.deleted["tags"]; !ok {
		t.Fatal("the evaluator does not treat the dropped rule as deleted")
	}
}
