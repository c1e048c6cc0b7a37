package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/source"
)

// rulesTx is a scripted payment of the rules tests.
type rulesTx struct {
	id              int
	payee, currency string
	method, card    string
	amount, ts      int64
}

func (x rulesTx) record() *kgo.Record {
	return &kgo.Record{Topic: "payments", Key: []byte(x.payee), Timestamp: time.UnixMilli(x.ts), Value: fmt.Appendf(nil,
		`{"id":%d,"payee_id":%q,"currency":%q,"method":%q,"card":%q,"amount":%d}`, x.id, x.payee, x.currency, x.method, x.card, x.amount)}
}

// rulesScript returns n payments over payees payees, 1-3 s apart.
func rulesScript(n, payees int) []rulesTx {
	rng := rand.New(rand.NewPCG(42, 1))
	ts := int64(1_700_000_000_000)
	out := make([]rulesTx, n)
	for i := range out {
		ts += 1000 + rng.Int64N(2000)
		out[i] = rulesTx{id: i, payee: fmt.Sprintf("p%03d", rng.IntN(payees)), currency: []string{"EUR", "USD"}[rng.IntN(2)],
			method: []string{"card", "card", "wire"}[rng.IntN(3)], card: fmt.Sprintf("c%d", rng.IntN(40)), amount: 1 + rng.Int64N(400), ts: ts}
	}
	return out
}

// e2eRule is one acceptance rule: its JSON and the test's own
// straightforward evaluation of it.
type e2eRule struct {
	id, spec string
	match    func(x rulesTx) bool
	group    func(x rulesTx) string // the alert's group JSON
	in       func(x rulesTx) string
	fn       string
	window   int64
	alert    func(v int64) bool
}

func e2eRules() []e2eRule {
	amount := func(x rulesTx) string { return fmt.Sprint(x.amount) }
	all := func(rulesTx) bool { return true }
	return []e2eRule{
		{id: "big-spender", fn: "sum", window: 20 * 60_000, in: amount, alert: func(v int64) bool { return v > 1500 },
			spec:  `{"id":"big-spender","filter":"method == 'card'","group_by":["payee_id","currency"],"aggregate":{"fn":"sum","of":"amount"},"window":"20m","alert_when":"> 1500","emit":{"team":"risk"}}`,
			match: func(x rulesTx) bool { return x.method == "card" },
			group: func(x rulesTx) string { return fmt.Sprintf(`{"payee_id":%q,"currency":%q}`, x.payee, x.currency) }},
		{id: "busy-payee", fn: "count", window: 10 * 60_000, alert: func(v int64) bool { return v >= 6 }, match: all,
			spec:  `{"id":"busy-payee","group_by":["payee_id"],"aggregate":{"fn":"count"},"window":"10m","alert_when":">= 6"}`,
			group: func(x rulesTx) string { return fmt.Sprintf(`{"payee_id":%q}`, x.payee) }},
		{id: "many-cards", fn: "count_distinct", window: 30 * 60_000, alert: func(v int64) bool { return v > 6 }, match: all,
			spec:  `{"id":"many-cards","group_by":["payee_id"],"aggregate":{"fn":"count_distinct","of":"card"},"window":"30m","alert_when":"> 6"}`,
			group: func(x rulesTx) string { return fmt.Sprintf(`{"payee_id":%q}`, x.payee) }, in: func(x rulesTx) string { return x.card }},
		{id: "large-wire", fn: "max", window: 5 * 60_000, in: amount, alert: func(v int64) bool { return v > 390 }, match: all,
			spec:  `{"id":"large-wire","group_by":["payee_id","method"],"aggregate":{"fn":"max","of":"amount"},"window":"5m","alert_when":"> 390"}`,
			group: func(x rulesTx) string { return fmt.Sprintf(`{"payee_id":%q,"method":%q}`, x.payee, x.method) }},
	}
}

// expectedAlerts evaluates the rules on txs straightforwardly: per rule and
// group the payments so far, and for each payment the aggregate over those
// in [ts - window, ts].
func expectedAlerts(rules []e2eRule, txs []rulesTx) []string {
	seen := map[string][]rulesTx{}
	var out []string
	for _, x := range txs {
		for _, r := range rules {
			if !r.match(x) {
				continue
			}
			k := r.id + r.group(x)
			seen[k] = append(seen[k], x)
			var n, sum, mx int64
			distinct := map[string]bool{}
			for _, y := range seen[k] {
				if y.ts < x.ts-r.window {
					continue
				}
				n++
				var v int64
				if r.in != nil {
					fmt.Sscan(r.in(y), &v)
					distinct[r.in(y)] = true
				}
				sum += v
				mx = max(mx, v)
			}
			v := map[string]int64{"count": n, "sum": sum, "max": mx, "count_distinct": int64(len(distinct))}[r.fn]
			if r.alert(v) {
				out = append(out, fmt.Sprintf("%s %s %d %d..%d tx%d", r.id, r.group(x), v, x.ts-r.window, x.ts, x.id))
			}
		}
	}
	slices.Sort(out)
	return out
}

// alertStrings renders alerts as expectedAlerts does, sorted; it fails on
// an alert without the rule's emit fields (big-spender's).
func alertStrings(t *testing.T, recs []*kgo.Record) []string {
	t.Helper()
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		var a struct {
			Rule        string            `json:"rule"`
			Group       json.RawMessage   `json:"group"`
			Value       json.RawMessage   `json:"value"`
			WindowStart int64             `json:"window_start"`
			WindowEnd   int64             `json:"window_end"`
			Record      struct{ ID int }  `json:"record"`
			Emit        map[string]string `json:"emit"`
		}
		if err := json.Unmarshal(r.Value, &a); err != nil {
			t.Fatalf("alert %s: %v", r.Value, err)
		}
		if a.Rule == "big-spender" && a.Emit["team"] != "risk" {
			t.Fatalf("alert %s lacks the rule's emit fields", r.Value)
		}
		out = append(out, fmt.Sprintf("%s %s %s %d..%d tx%d", a.Rule, a.Group, a.Value, a.WindowStart, a.WindowEnd, a.Record.ID))
	}
	slices.Sort(out)
	return out
}

// rulesConfig is a rules job on the broker at broker: payments (4
// partitions), the rules source with dead-letter (idle after 2s: rule_time
// event holds records on its watermark), the rules operator and an
// exactly-once alerts sink, checkpoints every 200 ms.
func rulesConfig(dir, broker, metrics string, p int, ruleTime string) string {
	return jobHead("rulesjob", p, dir, brokersKafka(broker), metrics, "info") + fmt.Sprintf(`state:
  backend: pebble
checkpoints:
  interval: 200ms
sources:
  - name: payments
    topic: payments
    watermark:
      out_of_orderness: 0s
  - name: rules
    topic: rules
    parallelism: 1
    on_error: dead-letter
    dead_letter_topic: rules-dlq
    watermark:
      idleness: 2s
operators:
  - name: fraud
    type: rules
    input: payments
    broadcast: rules
    params:
      rule_time: %s
sinks:
  - name: alerts
    input: fraud
    topic: alerts
    delivery: exactly-once
    transaction_timeout: 1m
`, ruleTime)
}

// badRules are dead-lettered with their reasons while the others work;
// sorted by key.
var badRules = []struct{ key, value, reason string }{
	{"median", `{"id":"median","aggregate":{"fn":"median","of":"amount"},"window":"1m","alert_when":"> 1"}`, `operators: bad rule "median": aggregate.fn: unknown aggregate "median"`},
	{"negative", `{"id":"negative","aggregate":{"fn":"count"},"window":"-5m","alert_when":"> 1"}`, `operators: bad rule "negative": window: must be positive, got -5m`},
	{"syntax", `{"id":"syntax","filter":"amount >","aggregate":{"fn":"count"},"window":"1m","alert_when":"> 1"}`, `operators: bad rule "syntax": filter: `},
}

// TestRulesEndToEnd: 10,000 payments over 200 payees and four rules (sum,
// count, count_distinct, max; different group_by and windows) give exactly
// the test's own evaluation, read_committed, at parallelism 1, 2 and 4;
// three bad rules (syntax error, unknown aggregate, negative window) are
// dead-lettered with their reason; GET /api/v1/rules lists the four rules
// on every subtask of both stages with their counts.
func TestRulesEndToEnd(t *testing.T) {
	txs := rulesScript(10_000, 200)
	rules := e2eRules()
	want := expectedAlerts(rules, txs)
	t.Logf("%d expected alerts", len(want))
	for _, p := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("p=%d", p), func(t *testing.T) {
			_, broker := startKfake(t, []string{"payments", "rules", "alerts", "rules-dlq"})
			cl := newClient(t, broker)
			for _, b := range badRules {
				produce(t, cl, &kgo.Record{Topic: "rules", Key: []byte(b.key), Value: []byte(b.value)})
			}
			for _, r := range rules {
				produce(t, cl, &kgo.Record{Topic: "rules", Key: []byte(r.id), Value: []byte(r.spec)})
			}
			recs := make([]*kgo.Record, len(txs))
			for i, x := range txs {
				recs[i] = x.record()
			}
			produce(t, cl, recs...)
			dir, metrics := t.TempDir(), testkit.FreeAddr(t)
			d := startProc(t, dir, rulesConfig(dir, broker, metrics, p, "processing"), broker, metrics)
			var got []string
			testkit.Poll(90*time.Second, func() bool {
				got = alertStrings(t, testkit.ReadTopicWith(t, []kgo.Opt{kgo.SeedBrokers(broker)}, kgo.ReadCommitted(), "alerts", 10*time.Second))
				return len(got) >= len(want) || d.exited()
			})
			if !slices.Equal(got, want) {
				t.Fatalf("%d alerts, want %d; %s", len(got), len(want), diffAlerts(got, want))
			}
			dlq := testkit.ReadTopic(t, []string{broker}, "rules-dlq", 10*time.Second)
			slices.SortFunc(dlq, func(a, b *kgo.Record) int { return strings.Compare(string(a.Key), string(b.Key)) })
			if len(dlq) != len(badRules) {
				t.Fatalf("%d dead-lettered rules, want %d", len(dlq), len(badRules))
			}
			for i, r := range dlq {
				var reason string
				for _, h := range r.Headers {
					if h.Key == source.HeaderError {
						reason = string(h.Value)
					}
				}
				if string(r.Key) != badRules[i].key || !strings.Contains(reason, badRules[i].reason) {
					t.Errorf("dead letter %d: key %q reason %q, want key %q reason containing %q", i, r.Key, reason, badRules[i].key, badRules[i].reason)
				}
			}
			resp, err := http.Get("http://" + metrics + "/api/v1/rules")
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Subtasks []struct {
					Operator string
					Subtask  int
					Rules    []struct {
						ID             string `json:"id"`
						RecordsMatched int64  `json:"records_matched"`
						Alerts         int64  `json:"alerts"`
					}
				}
			}
			if err := jsonDecode(resp, &body); err != nil {
				t.Fatal(err)
			}
			var matched, alerts int64
			for _, s := range body.Subtasks {
				var ids []string
				for _, r := range s.Rules {
					ids = append(ids, r.ID)
					matched += r.RecordsMatched
					alerts += r.Alerts
				}
				if !slices.Equal(ids, []string{"big-spender", "busy-payee", "large-wire", "many-cards"}) {
					t.Errorf("%s[%d] holds rules %q", s.Operator, s.Subtask, ids)
				}
			}
			if len(body.Subtasks) != 2*p || alerts != int64(len(want)) || matched == 0 {
				t.Errorf("api: %d subtasks (want %d), %d alerts (want %d), %d matched", len(body.Subtasks), 2*p, alerts, len(want), matched)
			}
		})
	}
}

func diffAlerts(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference: got %q, want %q", got[i], want[i])
		}
	}
	return "one is a prefix of the other"
}

// TestRulesKillRestore: kill -9 while the payments are produced, restore at
// another parallelism (and again), and the read_committed alerts equal the
// uninterrupted run's, nothing missing and nothing twice; with rule_time
// event and a rule update and deletion stamped mid-stream, three runs with
// different parallelism and kill points give byte-identical alert values.
func TestRulesKillRestore(t *testing.T) {
	txs := rulesScript(10_000, 200)
	rules := e2eRules()
	run := func(t *testing.T, ruleTime string, ps []int, seed uint64, extra func(cl *kgo.Client)) []*kgo.Record {
		rng := rand.New(rand.NewPCG(seed, 3))
		_, broker := startKfake(t, []string{"payments", "rules", "alerts", "rules-dlq"})
		cl := newClient(t, broker)
		adm := kadm.NewClient(cl)
		for _, r := range rules {
			produce(t, cl, &kgo.Record{Topic: "rules", Key: []byte(r.id), Value: []byte(r.spec), Timestamp: time.UnixMilli(txs[0].ts - 1)})
		}
		if extra != nil {
			extra(cl)
		}
		dir, metrics := t.TempDir(), testkit.FreeAddr(t)
		d := startProc(t, dir, rulesConfig(dir, broker, metrics, ps[0], ruleTime), broker, metrics)
		prod := producePaced(t, cl, len(txs), 250, 25*time.Millisecond, func(i, j int) []*kgo.Record {
			out := make([]*kgo.Record, 0, j-i)
			for _, x := range txs[i:j] {
				out = append(out, x.record())
			}
			return out
		})
		for _, p := range ps[1:] {
			after := int64(1000 + rng.IntN(6000))
			threshold := float64(500 + rng.IntN(2000))
			testkit.Poll(60*time.Second, func() bool {
				in, err := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", map[string]string{"operator": "payments"})
				chk, _ := testkit.Scrape(d.url(), "kstreamd_checkpoints_total", map[string]string{"kind": "checkpoint", "result": "completed"})
				return d.exited() || (err == nil && in >= threshold && chk >= 1 && prod.produced.Load() >= after)
			})
			if d.exited() {
				t.Fatalf("kstreamd exited on its own:\n%s", d.out.String())
			}
			d.kill(t)
			d = startProc(t, dir, rulesConfig(dir, broker, metrics, p, ruleTime), broker, metrics)
		}
		prod.wait(t, 60*time.Second)
		ends := topicEnds(t, adm, "payments", int64(len(txs)))
		waitGroupAt(t, adm, "kstreamd-rulesjob", "payments", ends, 90*time.Second, d)
		if ruleTime == "event" {
			// Committed offsets cover the payments still waiting for the rules
			// watermark (operator state): wait until none waits, then for two
			// more checkpoints, the first of which may have begun before.
			waitRulesReleased(t, d, ps[len(ps)-1])
		}
		return testkit.ReadTopicWith(t, []kgo.Opt{kgo.SeedBrokers(broker)}, kgo.ReadCommitted(), "alerts", 10*time.Second)
	}
	t.Run("processing", func(t *testing.T) {
		want := expectedAlerts(rules, txs)
		got := alertStrings(t, run(t, "processing", []int{2, 4, 1}, uint64(time.Now().UnixNano()), nil))
		if !slices.Equal(got, want) {
			t.Fatalf("%d alerts after kill -9 and restores at parallelism 4 then 1, want %d; %s", len(got), len(want), diffAlerts(got, want))
		}
	})
	t.Run("rule_time=event", func(t *testing.T) {
		mid := txs[5000].ts
		changes := func(cl *kgo.Client) {
			produce(t, cl,
				&kgo.Record{Topic: "rules", Key: []byte("busy-payee"), Timestamp: time.UnixMilli(mid), Value: []byte(
					`{"id":"busy-payee","group_by":["payee_id"],"aggregate":{"fn":"count"},"window":"10m","alert_when":">= 7"}`)},
				&kgo.Record{Topic: "rules", Key: []byte("large-wire"), Timestamp: time.UnixMilli(txs[7000].ts)})
		}
		var sets [][]string
		for i, ps := range [][]int{{1}, {2, 4}, {4, 2, 3}} {
			var vals []string
			for _, r := range run(t, "event", ps, uint64(time.Now().UnixNano())+uint64(i), changes) {
				vals = append(vals, string(r.Value))
			}
			slices.Sort(vals)
			sets = append(sets, vals)
		}
		if len(sets[0]) == 0 {
			t.Fatal("no alerts")
		}
		for i := 1; i < len(sets); i++ {
			if !slices.Equal(sets[i], sets[0]) {
				t.Fatalf("run %d: %d alerts, run 0: %d; %s", i, len(sets[i]), len(sets[0]), diffAlerts(sets[i], sets[0]))
			}
		}
		t.Logf("%d identical alerts in three runs", len(sets[0]))
	})
}

// waitRulesReleased waits until no record waits for the rules watermark in
// d's routing stage "fraud.route" and two checkpoints completed after that,
// so the alerts of every released record are committed.
func waitRulesReleased(t *testing.T, d *proc, parallelism int) {
	t.Helper()
	completed := func() float64 {
		n, _ := testkit.Scrape(d.url(), "kstreamd_checkpoints_total", map[string]string{"kind": "checkpoint", "result": "completed"})
		return n
	}
	var waiting float64 = -1
	// Every subtask's gauge must be there: before the routing stage opened
	// (and restored its waiting records) there is no series, not a 0.
	testkit.Poll(90*time.Second, func() bool {
		w, n, err := testkit.ScrapeSeries(d.url(), "kstreamd_rules_waiting_records", map[string]string{"operator": "fraud.route"})
		if err == nil && n == parallelism {
			waiting = w
		}
		return (err == nil && n == parallelism && w == 0) || d.exited()
	})
	if waiting != 0 {
		t.Fatalf("%v records still wait for the rules watermark (exited %v)", waiting, d.exited())
	}
	c0 := completed()
	if !testkit.Poll(90*time.Second, func() bool { return completed() >= c0+2 || d.exited() }) || d.exited() {
		t.Fatalf("no two checkpoints after the release (exited %v)", d.exited())
	}
}

// TestRulesEventTimeLateRule: with rule_time event a rule produced after
// the payments past its timestamp were read (they wait in the routing
// stage, the rules source not idle) applies to exactly the payments at or
// after its timestamp; a later rule record moves the rules watermark past
// every payment and releases them.
func TestRulesEventTimeLateRule(t *testing.T) {
	txs := rulesScript(2000, 50)
	rules := e2eRules()
	early, late := rules[1], rules[0] // busy-payee from the start, big-spender from txs[1000]
	k := 1000
	want := append(expectedAlerts([]e2eRule{early}, txs), expectedAlerts([]e2eRule{late}, txs[k:])...)
	slices.Sort(want)
	// One rules partition: a partition without rule records would hold the
	// rules watermark back until it went idle.
	_, broker := startKfake(t, []string{"payments", "alerts", "rules-dlq"}, kfake.SeedTopics(1, "rules"))
	cl := newClient(t, broker)
	produce(t, cl, &kgo.Record{Topic: "rules", Key: []byte(early.id), Value: []byte(early.spec), Timestamp: time.UnixMilli(txs[0].ts - 1)})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	// The rules source never goes idle in this test: only rule records
	// move its watermark.
	cfg := strings.Replace(rulesConfig(dir, broker, metrics, 2, "event"), "idleness: 2s", "idleness: 10m", 1)
	d := startProc(t, dir, cfg, broker, metrics)
	recs := make([]*kgo.Record, len(txs))
	for i, x := range txs {
		recs[i] = x.record()
	}
	produce(t, cl, recs...)
	var waiting float64
	testkit.Poll(90*time.Second, func() bool {
		waiting, _ = testkit.Scrape(d.url(), "kstreamd_rules_waiting_records", map[string]string{"operator": "fraud.route"})
		return waiting == float64(len(txs)) || d.exited()
	})
	if waiting != float64(len(txs)) {
		t.Fatalf("%v payments wait for the rules watermark, want %d (exited %v):\n%s", waiting, len(txs), d.exited(), d.out.String())
	}
	produce(t, cl,
		&kgo.Record{Topic: "rules", Key: []byte(late.id), Value: []byte(late.spec), Timestamp: time.UnixMilli(txs[k].ts)},
		&kgo.Record{Topic: "rules", Key: []byte("zz-end"), Timestamp: time.UnixMilli(txs[len(txs)-1].ts + 1), Value: []byte(
			`{"id":"zz-end","state":"paused","aggregate":{"fn":"count"},"window":"1m","alert_when":"> 1"}`)})
	var got []string
	testkit.Poll(90*time.Second, func() bool {
		got = alertStrings(t, testkit.ReadTopicWith(t, []kgo.Opt{kgo.SeedBrokers(broker)}, kgo.ReadCommitted(), "alerts", 10*time.Second))
		return len(got) >= len(want) || d.exited()
	})
	if !slices.Equal(got, want) {
		t.Fatalf("%d alerts, want %d; %s", len(got), len(want), diffAlerts(got, want))
	}
	t.Logf("%d alerts, %d of them of the late rule", len(want), len(expectedAlerts([]e2eRule{late}, txs[k:])))
}

// TestRulesReferenceJob runs configs/rules.yaml as it is (its data_dir,
// broker and metrics addresses moved to the test's): the built-in demo's
// payments and rules give read_committed alerts within seconds, and GET
// /api/v1/rules lists the four demo rules on the four subtasks of both
// stages.
func TestRulesReferenceJob(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "configs", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cfg := strings.NewReplacer("./data-rules", dir, "127.0.0.1:9093", broker, "127.0.0.1:9250", metrics).Replace(string(raw))
	d := startProc(t, dir, cfg, broker, metrics)
	var alerts []*kgo.Record
	if !testkit.Poll(60*time.Second, func() bool {
		alerts = testkit.ReadTopicWith(t, []kgo.Opt{kgo.SeedBrokers(broker)}, kgo.ReadCommitted(), "alerts", 10*time.Second)
		return len(alerts) > 0 || d.exited()
	}) || d.exited() {
		t.Fatalf("no alert within 60s (exited %v):\n%s", d.exited(), d.out.String())
	}
	t.Logf("first alert: %s", alerts[0].Value)
	var body struct {
		Subtasks []struct {
			Operator string
			Rules    []struct{ ID string }
		}
	}
	resp, err := http.Get("http://" + metrics + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	if err := jsonDecode(resp, &body); err != nil {
		t.Fatal(err)
	}
	ops := map[string]int{}
	for _, s := range body.Subtasks {
		ops[s.Operator]++
		if len(s.Rules) != 4 {
			t.Errorf("%s holds %d rules, want 4", s.Operator, len(s.Rules))
		}
	}
	if ops["fraud"] != 2 || ops["fraud.route"] != 2 {
		t.Errorf("api lists subtasks %v, want 2 of fraud and 2 of fraud.route", ops)
	}
}
