package operators

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

func TestDecodeRuleRecord(t *testing.T) {
	good := `{"id":"r1","filter":"method == 'card'","group_by":["payee_id"],"aggregate":{"fn":"sum","of":"amount"},"window":"20m","alert_when":"> 500","emit":{"note":"x"}}`
	for _, tc := range []struct {
		name, key, value string
		want             string // error text, "" for success
	}{
		{"good", "r1", good, ""},
		{"good without key", "", good, ""},
		{"deletion", "r1", "\x00null", ""},
		{"deletion without key", "", "\x00null", "operators: bad rule: deletion (null value) without a key"},
		{"control", "", `{"control":"delete_all"}`, ""},
		{"unknown control", "", `{"control":"reboot"}`, `operators: bad rule: control must be one of delete_all, clear_state, export, got "reboot"`},
		{"not json", "r1", `{"id":`, "operators: bad rule: not a JSON object: unexpected end of JSON input"},
		{"unknown field", "r1", `{"id":"r1","colour":1}`, `operators: bad rule: json: unknown field "colour"`},
		{"key differs", "r2", good, `operators: bad rule: key "r2" differs from id "r1"`},
		{"syntax error", "r1", `{"id":"r1","filter":"amount >","aggregate":{"fn":"count"},"window":"1m","alert_when":"> 1"}`, `operators: bad rule "r1": filter: `},
		{"filter not bool", "r1", `{"id":"r1","filter":"'x'","aggregate":{"fn":"count"},"window":"1m","alert_when":"> 1"}`, `operators: bad rule "r1": filter: `},
		{"unknown aggregate", "r1", `{"id":"r1","aggregate":{"fn":"median","of":"amount"},"window":"1m","alert_when":"> 1"}`, `operators: bad rule "r1": aggregate.fn: unknown aggregate "median": one of count, sum, min, max, avg, count_distinct`},
		{"count with of", "r1", `{"id":"r1","aggregate":{"fn":"count","of":"amount"},"window":"1m","alert_when":"> 1"}`, `operators: bad rule "r1": aggregate.of: count counts records and takes no of`},
		{"sum without of", "r1", `{"id":"r1","aggregate":{"fn":"sum"},"window":"1m","alert_when":"> 1"}`, `operators: bad rule "r1": aggregate.of: required for fn sum (an expression such as amount)`},
		{"negative window", "r1", `{"id":"r1","aggregate":{"fn":"count"},"window":"-5m","alert_when":"> 1"}`, `operators: bad rule "r1": window: must be positive, got -5m`},
		{"window not a duration", "r1", `{"id":"r1","aggregate":{"fn":"count"},"window":"soon","alert_when":"> 1"}`, `operators: bad rule "r1": window: not a duration: "soon"`},
		{"window too long", "r1", `{"id":"r1","aggregate":{"fn":"count"},"window":"1000h","alert_when":"> 1"}`, `operators: bad rule "r1": window: at most 744h0m0s, got 1000h`},
		{"bad alert_when", "r1", `{"id":"r1","aggregate":{"fn":"count"},"window":"1m","alert_when":"big"}`, `operators: bad rule "r1": alert_when: must be a comparison (>, >=, <, <=, ==, !=) and a number, as "> 500", got "big"`},
		{"bad state", "r1", `{"id":"r1","state":"off","aggregate":{"fn":"count"},"window":"1m","alert_when":"> 1"}`, `operators: bad rule "r1": state: must be active or paused, got "off"`},
		{"emit not object", "r1", `{"id":"r1","aggregate":{"fn":"count"},"window":"1m","alert_when":"> 1","emit":[1]}`, `operators: bad rule "r1": emit: must be a JSON object`},
		{"expression too costly", "r1", `{"id":"r1","filter":"` + strings.Repeat("amount > 1 && ", 100) + `true","aggregate":{"fn":"count"},"window":"1m","alert_when":"> 1"}`, `operators: bad rule "r1": filter: `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var key, value []byte
			if tc.key != "" {
				key = []byte(tc.key)
			}
			if tc.value != "\x00null" {
				value = []byte(tc.value)
			}
			rr, err := DecodeRuleRecord(key, value)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
				t.Fatalf("error %v, want %q", err, tc.want)
			case tc.want != "" && !errors.Is(err, ErrBadRuleRecord):
				t.Fatalf("error %v does not wrap ErrBadRuleRecord", err)
			}
			if tc.name == "good" && (rr.ID != "r1" || rr.Rule.Window != 20*time.Minute || rr.Rule.Op != ">" || rr.Rule.Limit != 500 || rr.Rule.Spec.State != RuleActive) {
				t.Fatalf("decoded %+v", rr.Rule)
			}
		})
	}
}

// rulesRig drives both stages of a rules operator in process: one router
// (records and rules in order) and p evaluator subtasks on KeyedOperators,
// each copy routed by the key group of its key.
type rulesRig struct {
	t      *testing.T
	router *RulesRouter
	evals  []*KeyedOperator
	fns    []*RulesEvaluator
	outs   []runtime.Channel
	export runtime.Channel
	p      int
	offset int64
	ctx    context.Context
}

func newRulesRig(t *testing.T, kind string, p int, rt RuleTime, restores []*Restore, routerRestore map[string]json.RawMessage) *rulesRig {
	t.Helper()
	g := &rulesRig{t: t, p: p, ctx: context.Background(), export: runtime.NewChannel(1024)}
	cfg := RulesConfig{RuleTime: rt, Operator: "fraud"}
	g.router = NewRulesRouter(cfg)
	if err := g.router.Open(OpenContext{Operator: "fraud.route"}); err != nil {
		t.Fatal(err)
	}
	if err := g.router.InitializeState(FunctionInitializationContext{OperatorStateStore: state.NewOperatorStateStore(nil)}); err != nil {
		t.Fatal(err)
	}
	if routerRestore != nil {
		if err := g.router.RestoreBroadcastState(routerRestore); err != nil {
			t.Fatal(err)
		}
	}
	for i := range p {
		dir := t.TempDir()
		open := func(r []state.RestoreHandle) (state.KeyedStateBackend, error) {
			c := state.BackendConfig{Kind: kind, MaxParallelism: ckMaxP, KeyGroupRange: keygroup.RangeFor(ckMaxP, p, i)}
			if kind == state.KindPebble {
				c.Dir = dir
			}
			return state.OpenBackendRestored(c, r)
		}
		ch := runtime.NewChannel(100_000)
		out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
		out.AddSideWriter(RulesExportOutput, runtime.NewWriter([]runtime.Channel{g.export}, runtime.ForwardPartitioner{}))
		fn := NewRulesEvaluator(cfg)
		var r *Restore
		if restores != nil {
			r = restores[i]
		}
		op := NewKeyedBroadcastOperator(OpenContext{Operator: "fraud", Subtask: i, Parallelism: p}, open, r, fn, out)
		op.SetMailbox(runtime.NewMailbox())
		if err := op.Open(g.ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = op.Close() })
		g.evals, g.fns, g.outs = append(g.evals, op), append(g.fns, fn), append(g.outs, ch)
	}
	return g
}

// rule sends one rules-topic record (value nil deletes) at time ms.
func (g *rulesRig) rule(key string, value string, ms int64) {
	g.t.Helper()
	g.offset++
	rec := runtime.Record{Value: []byte(value), Timestamp: time.UnixMilli(ms), Origin: runtime.Origin{Topic: "rules", Offset: g.offset}}
	if key != "" {
		rec.Key = []byte(key)
	}
	if value == "" {
		rec.Value = nil
	}
	if err := g.router.ProcessBroadcastElement(g.ctx, rec, &sliceCollector{}); err != nil {
		g.t.Fatal(err)
	}
	for _, op := range g.evals {
		if err := op.ProcessRecord(g.ctx, 1, rec); err != nil {
			g.t.Fatal(err)
		}
	}
}

func (g *rulesRig) tx(tx testTx) {
	g.t.Helper()
	c := &sliceCollector{}
	if err := g.router.ProcessElement(g.ctx, runtime.Record{Value: tx.json(), Timestamp: time.UnixMilli(tx.TS)}, c); err != nil {
		g.t.Fatal(err)
	}
	g.evaluate(c.recs)
}

// rulesTime hands the router the rules input's watermark wm (rule_time
// event) and the copies it routes then to the evaluators.
func (g *rulesRig) rulesTime(wm time.Time) {
	g.t.Helper()
	c := &sliceCollector{}
	if err := g.router.ProcessBroadcastWatermark(g.ctx, wm, c); err != nil {
		g.t.Fatal(err)
	}
	g.evaluate(c.recs)
}

// evaluate hands routed copies to the evaluator subtasks of their keys.
func (g *rulesRig) evaluate(recs []runtime.Record) {
	g.t.Helper()
	for _, r := range recs {
		sub := keygroup.SubtaskForKey(r.Key, ckMaxP, g.p)
		if err := g.evals[sub].ProcessRecord(g.ctx, 0, r); err != nil {
			g.t.Fatal(err)
		}
	}
}

func (g *rulesRig) watermark(ms int64) {
	g.t.Helper()
	for _, op := range g.evals {
		if err := op.ProcessWatermark(g.ctx, time.UnixMilli(ms)); err != nil {
			g.t.Fatal(err)
		}
	}
}

// alerts drains every subtask's output as canonical alert strings.
func (g *rulesRig) alerts() []string {
	var out []string
	for _, ch := range g.outs {
		for len(ch) > 0 {
			el := <-ch
			if el.Kind != runtime.KindRecord {
				continue
			}
			out = append(out, canonicalAlert(g.t, el.Record.Value))
		}
	}
	slices.Sort(out)
	return out
}

// entries counts the window slices per rule id over every subtask: those
// in RulesSliceState and those of every key's summary (the newest and
// Older).
func (g *rulesRig) entries() map[string]int {
	g.t.Helper()
	n := map[string]int{}
	for _, op := range g.evals {
		err := state.ApplyToAllKeys(op.backend, RulesSliceState, func(key []byte, s state.MapState[int64, ruleSlice]) error {
			for _, err := range s.Entries() {
				if err != nil {
					return err
				}
				n[ruleOfKey(key)]++
			}
			return nil
		})
		if err != nil {
			g.t.Fatal(err)
		}
		err = state.ApplyToAllKeys(op.backend, RulesPageState, func(key []byte, s state.MapState[int64, rulePage]) error {
			for e, err := range s.Entries() {
				if err != nil {
					return err
				}
				n[ruleOfKey(key)] += len(e.Value.Slices)
			}
			return nil
		})
		if err != nil {
			g.t.Fatal(err)
		}
		err = state.ApplyToAllValueKeys(op.backend, RulesAggState, func(key []byte, s state.ValueState[ruleWindow]) error {
			w, ok, err := s.Value()
			if ok && w.TailSlice != nil {
				n[ruleOfKey(key)] += 1 + len(w.Older)
			}
			return err
		})
		if err != nil {
			g.t.Fatal(err)
		}
	}
	return n
}

// canonicalAlert renders an alert as "rule group value window_start..end tx".
func canonicalAlert(t *testing.T, b []byte) string {
	t.Helper()
	var a struct {
		Rule        string          `json:"rule"`
		Group       json.RawMessage `json:"group"`
		Value       json.RawMessage `json:"value"`
		WindowStart int64           `json:"window_start"`
		WindowEnd   int64           `json:"window_end"`
		Record      struct {
			ID int `json:"id"`
		} `json:"record"`
	}
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("alert %s: %v", b, err)
	}
	return fmt.Sprintf("%s %s %s %d..%d tx%d", a.Rule, a.Group, a.Value, a.WindowStart, a.WindowEnd, a.Record.ID)
}

// testTx is a scripted transaction.
type testTx struct {
	ID       int
	Payee    string
	Currency string
	Method   string
	Card     string
	Amount   int64
	TS       int64
}

func (x testTx) json() []byte {
	return fmt.Appendf(nil, `{"id":%d,"payee_id":%q,"currency":%q,"method":%q,"card":%q,"amount":%d}`, x.ID, x.Payee, x.Currency, x.Method, x.Card, x.Amount)
}

// scriptTxs returns n transactions over payees payees, 1-3 s apart.
func scriptTxs(n, payees int, seed uint64) []testTx {
	rng := rand.New(rand.NewPCG(seed, 1))
	ts := int64(1_700_000_000_000)
	out := make([]testTx, n)
	for i := range out {
		ts += 1000 + rng.Int64N(2000)
		out[i] = testTx{
			ID: i, Payee: fmt.Sprintf("p%03d", rng.IntN(payees)), Currency: []string{"EUR", "USD"}[rng.IntN(2)],
			Method: []string{"card", "card", "wire"}[rng.IntN(3)], Card: fmt.Sprintf("c%d", rng.IntN(40)), Amount: 1 + rng.Int64N(400), TS: ts,
		}
	}
	return out
}

// refRule is the test's own model of a rule.
type refRule struct {
	id, fn   string
	card     bool // filter method == 'card'
	wire     bool // filter method == 'wire'
	group    func(x testTx) string
	groupBy  []string
	of       func(x testTx) string // count_distinct / numbers as text
	window   int64
	op       string
	limit    int64
	paused   bool
	jsonSpec string
}

func (r refRule) spec() string {
	if r.jsonSpec != "" {
		return r.jsonSpec
	}
	return r.json()
}

func (r refRule) json() string {
	filter := ""
	if r.card {
		filter = `"filter":"method == 'card'",`
	}
	if r.wire {
		filter = `"filter":"method == 'wire'",`
	}
	of := map[string]string{"sum": "amount", "max": "amount", "count_distinct": "card", "count": ""}[r.fn]
	agg := fmt.Sprintf(`{"fn":%q}`, r.fn)
	if of != "" {
		agg = fmt.Sprintf(`{"fn":%q,"of":%q}`, r.fn, of)
	}
	gb, _ := json.Marshal(r.groupBy)
	state := "active"
	if r.paused {
		state = "paused"
	}
	return fmt.Sprintf(`{"id":%q,"state":%q,%s"group_by":%s,"aggregate":%s,"window":"%dms","alert_when":"%s %d"}`, r.id, state, filter, gb, agg, r.window, r.op, r.limit)
}

// reference is the straightforward implementation: per rule and group
// the list of (ts, input) seen, and for each record the aggregate over the
// entries in [ts-window, ts].
type reference struct {
	rules []*refRule
	seen  map[string][]refEntry // rule id + group -> entries
}

type refEntry struct {
	ts int64
	in string
}

func newReference(rules ...*refRule) *reference {
	return &reference{rules: rules, seen: map[string][]refEntry{}}
}

func (m *reference) drop(id string) {
	for k := range m.seen {
		if strings.HasPrefix(k, id+"|") {
			delete(m.seen, k)
		}
	}
}

func (m *reference) tx(x testTx) []string {
	var out []string
	for _, r := range m.rules {
		if r.paused || (r.card && x.Method != "card") || (r.wire && x.Method != "wire") {
			continue
		}
		k := r.id + "|" + r.group(x)
		in := ""
		if r.of != nil {
			in = r.of(x)
		}
		m.seen[k] = append(m.seen[k], refEntry{x.TS, in})
		var n, sum, mx int64
		distinct := map[string]bool{}
		for _, e := range m.seen[k] {
			if e.ts < x.TS-r.window || e.ts > x.TS {
				continue
			}
			n++
			var v int64
			fmt.Sscan(e.in, &v)
			sum += v
			if n == 1 || v > mx {
				mx = v
			}
			distinct[e.in] = true
		}
		val := map[string]int64{"count": n, "sum": sum, "max": mx, "count_distinct": int64(len(distinct))}[r.fn]
		if (r.op == ">" && val > r.limit) || (r.op == ">=" && val >= r.limit) {
			out = append(out, fmt.Sprintf("%s %s %d %d..%d tx%d", r.id, r.group(x), val, x.TS-r.window, x.TS, x.ID))
		}
	}
	return out
}

// fourRules are the acceptance rules: sum, count, count_distinct and max
// with different group_by and windows (every group_by includes payee_id:
// one payee's records come from one partition, so each group sees its
// records in order at any parallelism).
func fourRules() []*refRule {
	amount := func(x testTx) string { return fmt.Sprint(x.Amount) }
	return []*refRule{
		{id: "big-spender", fn: "sum", card: true, groupBy: []string{"payee_id", "currency"}, window: 20 * 60_000, op: ">", limit: 1500,
			group: func(x testTx) string { return fmt.Sprintf(`{"payee_id":%q,"currency":%q}`, x.Payee, x.Currency) }, of: amount},
		{id: "busy-payee", fn: "count", groupBy: []string{"payee_id"}, window: 10 * 60_000, op: ">=", limit: 6,
			group: func(x testTx) string { return fmt.Sprintf(`{"payee_id":%q}`, x.Payee) }},
		{id: "many-cards", fn: "count_distinct", groupBy: []string{"payee_id"}, window: 30 * 60_000, op: ">", limit: 6,
			group: func(x testTx) string { return fmt.Sprintf(`{"payee_id":%q}`, x.Payee) }, of: func(x testTx) string { return fmt.Sprintf("%q", x.Card) }},
		{id: "large-wire", fn: "max", groupBy: []string{"payee_id", "method"}, window: 5 * 60_000, op: ">", limit: 390,
			group: func(x testTx) string { return fmt.Sprintf(`{"payee_id":%q,"method":%q}`, x.Payee, x.Method) }, of: amount},
	}
}

// TestRulesMatchReference: 10,000 transactions over 200 payees and four
// rules give exactly the reference's alerts at parallelism 1, 2 and 4, and
// once the watermark passes every window no bucket is left.
func TestRulesMatchReference(t *testing.T) {
	txs := scriptTxs(10_000, 200, 7)
	rules := fourRules()
	ref := newReference(rules...)
	var want []string
	for _, x := range txs {
		want = append(want, ref.tx(x)...)
	}
	slices.Sort(want)
	if len(want) < 100 {
		t.Fatalf("only %d reference alerts: the script is too tame", len(want))
	}
	for _, kind := range backends {
		for _, p := range []int{1, 2, 4} {
			if kind == state.KindPebble && p != 2 {
				continue // pebble once: the keyed logic is the same, and -race makes it slow
			}
			t.Run(fmt.Sprintf("%s/p=%d", kind, p), func(t *testing.T) {
				g := newRulesRig(t, kind, p, RuleTimeProcessing, nil, nil)
				for _, r := range rules {
					g.rule(r.id, r.spec(), 0)
				}
				var got []string
				for i, x := range txs {
					g.tx(x)
					if i%500 == 499 {
						g.watermark(x.TS - 1)
						got = append(got, g.alerts()...)
					}
				}
				got = append(got, g.alerts()...)
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("%d alerts, want %d; first difference %s", len(got), len(want), firstDiff(got, want))
				}
				g.watermark(txs[len(txs)-1].TS + 31*60_000)
				if n := g.entries(); len(n) != 0 {
					t.Fatalf("buckets left after the last window: %v", n)
				}
				var alerts int64
				for _, f := range g.fns {
					for _, s := range f.RuleStatuses() {
						alerts += s.Alerts
					}
				}
				if alerts != int64(len(want)) {
					t.Fatalf("RuleStatuses count %d alerts, want %d", alerts, len(want))
				}
			})
		}
	}
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("got %q, want %q", a[i], b[i])
		}
	}
	return "(one is a prefix of the other)"
}

// TestRulesLifecycle: mid-stream one rule is paused, one updated (new
// limit), one deleted and a fifth added; the alerts of each phase are
// exactly the reference's, the deleted rule's buckets are gone from every
// key at once, the paused rule's stay.
func TestRulesLifecycle(t *testing.T) {
	txs := scriptTxs(4000, 200, 11)
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			rules := fourRules()
			ref := newReference(rules...)
			g := newRulesRig(t, kind, 2, RuleTimeProcessing, nil, nil)
			for _, r := range rules {
				g.rule(r.id, r.spec(), 0)
			}
			phase := func(from, to int) {
				t.Helper()
				var want []string
				for _, x := range txs[from:to] {
					want = append(want, ref.tx(x)...)
					g.tx(x)
				}
				slices.Sort(want)
				if got := g.alerts(); !slices.Equal(got, want) {
					t.Fatalf("txs %d..%d: %d alerts, want %d; %s", from, to, len(got), len(want), firstDiff(got, want))
				}
			}
			phase(0, 1000)
			busyBefore := g.entries()["busy-payee"]
			// Pause busy-payee: no alerts, state kept.
			rules[1].paused = true
			g.rule("busy-payee", rules[1].json(), 0)
			phase(1000, 1500)
			if n := g.entries()["busy-payee"]; n != busyBefore || n == 0 {
				t.Fatalf("paused rule holds %d buckets, had %d", n, busyBefore)
			}
			// Update big-spender's limit: same shape, state kept.
			rules[0].limit = 900
			g.rule("big-spender", rules[0].json(), 0)
			phase(1500, 2000)
			// Delete many-cards: its state is gone from every key.
			if g.entries()["many-cards"] == 0 {
				t.Fatal("many-cards holds no state before its deletion")
			}
			g.rule("many-cards", "", 0)
			ref.rules = slices.Delete(ref.rules, 2, 3)
			ref.drop("many-cards")
			if n := g.entries()["many-cards"]; n != 0 {
				t.Fatalf("deleted rule still holds %d buckets", n)
			}
			phase(2000, 2500)
			// Add a fifth rule: sum of wires per payee.
			fifth := &refRule{id: "wire-total", fn: "sum", wire: true, groupBy: []string{"payee_id"}, window: 15 * 60_000, op: ">", limit: 700,
				group: func(x testTx) string { return fmt.Sprintf(`{"payee_id":%q}`, x.Payee) }, of: func(x testTx) string { return fmt.Sprint(x.Amount) }}
			g.rule("wire-total", fifth.json(), 0)
			ref.rules = append(ref.rules, fifth)
			phase(2500, 4000)
			// delete_all removes every rule and bucket; export then has nothing.
			g.rule("", `{"control":"export"}`, 0)
			if n := len(g.export); n != 4 {
				t.Fatalf("export wrote %d rules, want 4", n)
			}
			checkKeyHints(t, g)
			g.rule("", `{"control":"delete_all"}`, 0)
			checkKeyHints(t, g)
			if n := g.entries(); len(n) != 0 {
				t.Fatalf("buckets after delete_all: %v", n)
			}
			g.tx(txs[0])
			if got := g.alerts(); len(got) != 0 {
				t.Fatalf("alerts after delete_all: %v", got)
			}
		})
	}
}

// TestRulesLaggingRouterAfterDelete: a copy routed before the keyed stage
// saw a deletion, arriving after it, is dropped (no state is recreated);
// a re-added rule's copies pass.
func TestRulesLaggingRouterAfterDelete(t *testing.T) {
	g := newRulesRig(t, state.KindHashmap, 1, RuleTimeProcessing, nil, nil)
	g.rule("r", `{"id":"r","group_by":["payee_id"],"aggregate":{"fn":"count"},"window":"1m","alert_when":">= 2"}`, 0)
	c := &sliceCollector{}
	x := testTx{ID: 1, Payee: "p1", TS: 1000}
	if err := g.router.ProcessElement(g.ctx, runtime.Record{Value: x.json(), Timestamp: time.UnixMilli(x.TS)}, c); err != nil {
		t.Fatal(err)
	}
	// The keyed stage sees the deletion before the routed copy.
	g.offset++
	del := runtime.Record{Key: []byte("r"), Timestamp: time.UnixMilli(0), Origin: runtime.Origin{Offset: g.offset}}
	if err := g.evals[0].ProcessRecord(g.ctx, 1, del); err != nil {
		t.Fatal(err)
	}
	if err := g.evals[0].ProcessRecord(g.ctx, 0, c.recs[0]); err != nil {
		t.Fatal(err)
	}
	if n := g.entries(); len(n) != 0 {
		t.Fatalf("a stale copy recreated state: %v", n)
	}
}

// TestRulesEventTime: with rule_time event a rule applies to the records
// at or after its timestamp, whenever it arrived; a deletion likewise.
func TestRulesEventTime(t *testing.T) {
	g := newRulesRig(t, state.KindHashmap, 2, RuleTimeEvent, nil, nil)
	spec := `{"id":"r","group_by":["payee_id"],"aggregate":{"fn":"count"},"window":"1h","alert_when":">= 1"}`
	g.rule("r", spec, 5000)
	g.rule("r", "", 9000)
	g.rulesTime(time.UnixMilli(20_000))
	for i, ts := range []int64{4000, 5000, 7000, 9000, 12000} {
		g.tx(testTx{ID: i, Payee: "p1", TS: ts})
	}
	got := g.alerts()
	want := []string{
		`r {"payee_id":"p1"} 1 -3595000..5000 tx1`,
		`r {"payee_id":"p1"} 2 -3593000..7000 tx2`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("alerts %q, want %q", got, want)
	}
}

// TestRulesEventTimeLateRule: with rule_time event a rule that arrives
// after records past its timestamp were read still applies to exactly the
// records at or after its timestamp: the routing stage holds every record
// until the rules watermark passes it, then routes the held ones in
// timestamp order; while the rules input is idle nothing waits.
func TestRulesEventTimeLateRule(t *testing.T) {
	g := newRulesRig(t, state.KindHashmap, 2, RuleTimeEvent, nil, nil)
	count := func(id string) string {
		return `{"id":"` + id + `","group_by":["payee_id"],"aggregate":{"fn":"count"},"window":"1h","alert_when":">= 1"}`
	}
	g.rule("r", count("r"), 1000)
	g.rulesTime(time.UnixMilli(999)) // the rules source: its largest timestamp - 1ms
	// Read before the late rule, out of timestamp order.
	for i, ts := range []int64{2000, 5000, 4000, 8000, 6000} {
		g.tx(testTx{ID: i, Payee: "p1", TS: ts})
	}
	if got := g.alerts(); len(got) != 0 || len(g.router.waiting) != 5 {
		t.Fatalf("before the rules watermark: alerts %q, %d waiting; want none and 5", got, len(g.router.waiting))
	}
	g.rule("late", count("late"), 5000)
	g.rulesTime(time.UnixMilli(4999))
	got := g.alerts()
	want := []string{ // tx0 (2000) and tx2 (4000), in timestamp order
		`r {"payee_id":"p1"} 1 -3598000..2000 tx0`,
		`r {"payee_id":"p1"} 2 -3596000..4000 tx2`,
	}
	if !slices.Equal(got, want) || len(g.router.waiting) != 3 {
		t.Fatalf("rules watermark 4999: alerts %q, %d waiting; want %q and 3", got, len(g.router.waiting), want)
	}
	g.rulesTime(runtime.MaxWatermark) // the rules input went idle
	g.tx(testTx{ID: 5, Payee: "p1", TS: 9000})
	got = g.alerts()
	want = []string{ // "late" from tx1 (5000) on: its timestamp, not its arrival
		`late {"payee_id":"p1"} 1 -3595000..5000 tx1`,
		`late {"payee_id":"p1"} 2 -3594000..6000 tx4`,
		`late {"payee_id":"p1"} 3 -3592000..8000 tx3`,
		`late {"payee_id":"p1"} 4 -3591000..9000 tx5`,
		`r {"payee_id":"p1"} 3 -3595000..5000 tx1`,
		`r {"payee_id":"p1"} 4 -3594000..6000 tx4`,
		`r {"payee_id":"p1"} 5 -3592000..8000 tx3`,
		`r {"payee_id":"p1"} 6 -3591000..9000 tx5`,
	}
	if !slices.Equal(got, want) || len(g.router.waiting) != 0 {
		t.Fatalf("rules idle: alerts %q, %d waiting; want %q and none", got, len(g.router.waiting), want)
	}
}

// TestRulesWaitingCheckpointed: the records waiting for the rules
// watermark are operator state: restored at parallelism 2, each routing
// subtask keeps those of the partitions its source subtask reads and
// routes them, in timestamp order, once the rules watermark passes them;
// and at most max_waiting wait, the earliest tenth routed beyond.
func TestRulesWaitingCheckpointed(t *testing.T) {
	ctx := context.Background()
	rule := runtime.Record{Key: []byte("r"), Value: []byte(`{"id":"r","aggregate":{"fn":"count"},"window":"1h","alert_when":">= 1"}`), Timestamp: time.UnixMilli(1000)}
	newRouter := func(restore *Restore, maxWaiting, subtask, p int) (*ProcessOperator, runtime.Channel) {
		ch := runtime.NewChannel(64)
		fn := NewRulesRouter(RulesConfig{RuleTime: RuleTimeEvent, MaxWaiting: maxWaiting, Operator: "fraud"})
		op := NewProcessOperator(OpenContext{Operator: "fraud.route", Subtask: subtask, Parallelism: p}, restore, fn, runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{})))
		if !op.BroadcastWatermarks() {
			t.Fatal("a rule_time event router does not ask for broadcast watermarks")
		}
		if err := op.Open(ctx); err != nil {
			t.Fatal(err)
		}
		return op, ch
	}
	routed := func(ch runtime.Channel) []int64 {
		var ts []int64
		for len(ch) > 0 {
			ts = append(ts, (<-ch).Record.Timestamp.UnixMilli())
		}
		return ts
	}
	tx := func(op *ProcessOperator, ts int64) {
		t.Helper()
		if err := op.ProcessRecord(ctx, 0, runtime.Record{Value: testTx{Payee: "p1", TS: ts}.json(), Timestamp: time.UnixMilli(ts), Origin: runtime.Origin{Partition: int32(ts / 1000 % 2), Offset: ts}}); err != nil {
			t.Fatal(err)
		}
	}
	op, ch := newRouter(nil, 0, 0, 1)
	if err := op.ProcessRecord(ctx, 1, rule); err != nil {
		t.Fatal(err)
	}
	for _, ts := range []int64{3000, 2000, 4000} {
		tx(op, ts)
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
	if got := routed(ch); len(got) != 0 || len(ts.Operator[RulesWaitingState.Name].Entries) != 3 {
		t.Fatalf("routed %v before the rules watermark, snapshot holds %d waiting; want none and 3", got, len(ts.Operator[RulesWaitingState.Name].Entries))
	}
	for sub, want := range [][]int64{{2000}, {3000}} { // partition 0: 2000 and 4000; 1: 3000
		restored, ch2 := newRouter(&Restore{Operator: ts.Operator, Broadcast: ts.Broadcast}, 0, sub, 2)
		if err := restored.ProcessBroadcastWatermark(ctx, time.UnixMilli(3000)); err != nil {
			t.Fatal(err)
		}
		if got := routed(ch2); !slices.Equal(got, want) {
			t.Fatalf("restored router %d of 2 routed %v at rules watermark 3000, want %v", sub, got, want)
		}
	}

	small, ch3 := newRouter(nil, 10, 0, 1)
	if err := small.ProcessRecord(ctx, 1, rule); err != nil {
		t.Fatal(err)
	}
	for i := range 11 {
		tx(small, int64(20_000-i*1000))
	}
	if got, want := routed(ch3), []int64{10_000}; !slices.Equal(got, want) {
		t.Fatalf("11 records with max_waiting 10: routed %v, want the earliest %v", got, want)
	}
}

// TestRulesRestoreAtOtherParallelism: a snapshot of both stages taken
// mid-stream and restored at another parallelism continues exactly as the
// uninterrupted run.
func TestRulesRestoreAtOtherParallelism(t *testing.T) {
	txs := scriptTxs(3000, 200, 5)
	rules := fourRules()
	ref := newReference(rules...)
	var want []string
	for _, x := range txs {
		want = append(want, ref.tx(x)...)
	}
	slices.Sort(want)
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := newRulesRig(t, kind, 3, RuleTimeProcessing, nil, nil)
			for _, r := range rules {
				g.rule(r.id, r.spec(), 0)
			}
			for _, x := range txs[:1700] {
				g.tx(x)
			}
			got := g.alerts()
			routerState, err := g.router.SnapshotBroadcastState()
			if err != nil {
				t.Fatal(err)
			}
			restores := snapshotRules(t, g, 2)
			h := newRulesRig(t, kind, 2, RuleTimeProcessing, restores, routerState)
			for _, x := range txs[1700:] {
				h.tx(x)
			}
			got = append(got, h.alerts()...)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("%d alerts, want %d; %s", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

// snapshotRules snapshots every evaluator subtask of g and redistributes
// the state for parallelism p.
func snapshotRules(t *testing.T, g *rulesRig, p int) []*Restore {
	t.Helper()
	dir := t.TempDir()
	var old []checkpoint.TaskState
	for _, op := range g.evals {
		fin, err := op.SnapshotState(g.ctx, &runtime.Barrier{CheckpointID: 1, Dir: dir})
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
	return restoresFor(t, old, dir, "", p)
}

// TestRulesRouterEqualityIndex: the routing stage evaluates a filter of
// the form operand == constant through its operand, once per record for
// all rules sharing it (three operands interned for eleven such rules);
// the copies routed, in rule id order, and each rule's error count and
// last error are those of evaluating every rule's filter on its own, over
// records whose operand is an int, a double equal to the constant, a
// numeric string, null, missing or of the wrong type for %.
func TestRulesRouterEqualityIndex(t *testing.T) {
	r := NewRulesRouter(RulesConfig{Operator: "fraud"})
	if err := r.Open(OpenContext{Operator: "fraud.route"}); err != nil {
		t.Fatal(err)
	}
	if err := r.InitializeState(FunctionInitializationContext{OperatorStateStore: state.NewOperatorStateStore(nil)}); err != nil {
		t.Fatal(err)
	}
	filters := map[string]string{}
	for d := range 8 {
		filters[fmt.Sprintf("mod-%d", d)] = fmt.Sprintf("amount %% 10 == %d", d)
	}
	filters["eq-3"] = "amount == 3"
	filters["eur"] = `currency == "EUR"`
	filters["eur-rev"] = `"EUR" == currency`
	filters["gt-5"] = "amount > 5"
	filters["both"] = `amount % 10 == 3 && currency == "EUR"`
	var ids []string
	for id, f := range filters {
		ids = append(ids, id)
		v := fmt.Sprintf(`{"id":%q,"filter":%q,"group_by":["key"],"aggregate":{"fn":"count"},"window":"1h","alert_when":"> 100"}`, id, f)
		if err := r.ProcessBroadcastElement(context.Background(), runtime.Record{Key: []byte(id), Value: []byte(v), Timestamp: time.UnixMilli(1)}, &sliceCollector{}); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(ids)
	records := []string{
		`{"key":"a","amount":13,"currency":"EUR"}`, `{"key":"a","amount":3.0,"currency":"USD"}`,
		`{"key":"b","amount":"3","currency":3}`, `{"key":"b","amount":null,"currency":null}`,
		`{"key":"c"}`, `{"key":"c","amount":-7,"currency":"EUR"}`, `{"key":"d","amount":4.5,"currency":["EUR"]}`,
		`{"key":"d","amount":20,"currency":"eur"}`, `{"key":"e","amount":9223372036854775807,"currency":""}`,
	}
	wantErrs := map[string]int64{}
	wantLast := map[string]string{}
	for i, js := range records {
		c := &sliceCollector{}
		if err := r.ProcessElement(context.Background(), runtime.Record{Value: []byte(js), Timestamp: time.UnixMilli(int64(10 + i))}, c); err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, id := range ids {
			f, err := CompileExpression(filters[id], expression.ExpectBool())
			if err != nil {
				t.Fatal(err)
			}
			res, err := f.Program().Eval(expression.NewEnv(&expression.Input{JSON: []byte(js)}))
			if err != nil {
				wantErrs[id]++
				wantLast[id] = "filter: " + err.Error()
				continue
			}
			if res == true {
				want = append(want, id)
			}
		}
		var got []string
		for _, rec := range c.recs {
			got = append(got, ruleOfKey(rec.Key))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("record %s routed to %v, want %v", js, got, want)
		}
	}
	for _, st := range r.RuleStatuses() {
		if st.Errors != wantErrs[st.ID] || st.LastError != wantLast[st.ID] {
			t.Fatalf("rule %s: %d errors, last %q; want %d, %q", st.ID, st.Errors, st.LastError, wantErrs[st.ID], wantLast[st.ID])
		}
	}
	if len(r.operands) != 3 {
		t.Fatalf("operands interned: %v, want amount %% 10, amount and currency", slices.Collect(maps.Keys(r.operands)))
	}
}
