package bench

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Scenario is one job the bench runs over the generated items: the
// pipeline's operators, the state backend, the broadcast rules written
// before it starts, and a model of how many outputs each item causes, so
// the bench knows when every result is committed and can check the count.
//
// Scenarios is the table of them; a new operator (the event-time window
// count, the rules operator with 1/10/100 rules) becomes a benchmark by
// adding an entry there.
type Scenario struct {
	// Name is what --scenario takes.
	Name string
	// Doc is one line for the usage text and BENCHMARKS.md.
	Doc string
	// Backend is the state backend, "hashmap" or "pebble".
	Backend string
	// Operators is the pipeline's operators section, indented as list
	// items under "operators:"; they read the source "in" and the last one
	// is called "out". Empty: the sink reads the source (a copy).
	Operators string
	// Rules, when not empty, are written to a rules topic read by a
	// broadcast source called "rules", keyed by rule name.
	Rules []Rule
	// NewModel returns a fresh model of the outputs for an input topic of
	// partitions partitions.
	NewModel func(partitions int) Model
	// RuleRecords, when not empty, are rules-topic records of another
	// operator type than the matcher, written as they are (key, value) to
	// the rules topic, which the broadcast source "rules" reads (in a
	// Nexmark scenario, the source "side_input": q13's side input table).
	RuleRecords []RuleRecord
	// Processed, when set, names an operator the throughput phase also
	// waits on: until its kstreamd_operator_records_in_total reaches what
	// the model (a ProcessedModel) counts, for scenarios whose outputs are
	// too few to tell when the last record was processed (rules).
	Processed string
	// MinLatencyPhase, when set, is the shortest latency phase that
	// measures anything: a windowed scenario's results in it are the
	// windows that end inside it and are followed by later records on
	// every partition, so it must span two window sizes (with one, the
	// phase can fall inside a single window and yield no sample). The
	// phase lasts the longer of it and Config.LatencyDuration.
	MinLatencyPhase time.Duration
	// Nexmark, when set, is a Nexmark query ("q0"): the job is
	// configs/nexmark/<Nexmark>.yaml (Operators unused), its input the
	// Nexmark generator's events, and its model a value model, so the run
	// checks the committed values, not only their count.
	Nexmark string
	// FileSink, when set, replaces the Kafka sink with a file sink (type
	// file, JSON lines) in the run's data directory: the scenario runs
	// exactly-once only, and its outputs are the lines of the published
	// part files, read by a fileReader (each line's "ts" field is the
	// record timestamp its latency is measured from).
	FileSink bool
	// Postgres, when set, replaces the Kafka sink with a postgres sink
	// (mode insert, columns id, key, amount, ts) writing a table of its
	// own in the database at Config.PostgresDSN: its outputs are the
	// table's rows (a pgReader), checked at the end to be ids 1 to n once
	// each.
	Postgres bool
	// Avro, when set, makes the input values and the outputs Avro in the
	// Confluent wire format with an embedded schema registry the run
	// starts (see avroCopy): the job's source and sink use format avro,
	// and the run decodes the outputs itself and checks their values.
	Avro bool
	// WatermarkAlignment, when not empty, is the input source's
	// watermark_alignment as a YAML flow mapping (e.g. "{max_drift:
	// 20ms}"); Config.WatermarkAlignment overrides it.
	WatermarkAlignment string
	// EventRatePerKey, when set, gives the throughput phase's items event
	// times instead of their produce time: EventRatePerKey items per key
	// per second of event time (times Config.Keys items per second), each
	// item's time derived from its id alone and the last one at the
	// load's start (a backlog from the past, as the Nexmark scenarios
	// load), so which items fall within a time bound of each other, and
	// the outputs, are the same in every run whatever the loader's speed.
	// The latency phase's items carry their produce time, as in the other
	// scenarios. See eventTimed.
	EventRatePerKey int64
}

// Rule is a shape-pair rule of the matcher: {"name","first","second"}.
type Rule struct{ Name, First, Second string }

// RuleRecord is one record of a scenario's rules topic.
type RuleRecord struct{ Key, Value string }

// hasRules reports whether s reads a rules topic.
func (s Scenario) hasRules() bool { return len(s.Rules) > 0 || len(s.RuleRecords) > 0 }

// ProcessedModel is a Model that also counts, per item, the records the
// scenario's Processed operator receives.
type ProcessedModel interface {
	Model
	Processed(Item) int
}

// Model counts the outputs a scenario's job writes for each item, in input
// order per key (the order the job sees them in).
type Model interface {
	Outputs(Item) int
}

type modelFunc func(Item) int

func (f modelFunc) Outputs(it Item) int { return f(it) }

// Scenarios are the scenarios kstreamd bench knows, in --all order; the
// Nexmark queries (nexmark-q<N>) last.
var Scenarios = append([]Scenario{
	{
		Name: "copy", Doc: "source to sink, no operator", Backend: "hashmap",
		NewModel: func(int) Model { return modelFunc(func(Item) int { return 1 }) },
	},
	{
		Name: "filter-map", Doc: "filter amount < 500, then map to {id, key, amount} (CEL, chained)", Backend: "hashmap",
		Operators: `  - name: keep
    type: filter
    input: in
    params:
      condition: amount < 500
  - name: out
    type: map
    input: keep
    params:
      value: '{"id": id, "key": key, "amount": amount}'
`,
		NewModel: func(int) Model {
			return modelFunc(func(it Item) int {
				if it.Amount < 500 {
					return 1
				}
				return 0
			})
		},
	},
	keyedCount("keyed-count-hashmap", "hashmap", false),
	keyedCount("keyed-count-pebble", "pebble", false),
	keyedCount("keyed-count-pebble-async", "pebble", true),
	matcher(10),
	rules(1, ""),
	rules(10, ""),
	rules(100, ""),
	rules(10, "1h"),
	rules(100, "1h"),
	tumblingWindow(),
	{
		Name: "file-sink", Doc: "map adding the record timestamp, then a file sink: JSON-lines parts in a local directory, published exactly once per checkpoint", Backend: "hashmap",
		Operators: `  - name: out
    type: map
    input: in
    params:
      value: '{"id": id, "key": key, "amount": amount, "ts": timestamp}'
`,
		FileSink: true,
		NewModel: func(int) Model { return modelFunc(func(Item) int { return 1 }) },
	},
	{
		Name: PostgresSinkScenario, Doc: "map adding the record timestamp, then a postgres sink: rows inserted in batches of 5000, one prepared transaction per checkpoint and subtask (needs --postgres-dsn)", Backend: "hashmap",
		Operators: `  - name: out
    type: map
    input: in
    params:
      value: '{"id": id, "key": key, "amount": amount, "ts": timestamp}'
`,
		Postgres: true,
		NewModel: func(int) Model { return modelFunc(func(Item) int { return 1 }) },
	},
	intervalJoin(),
	tableJoin(),
	avroCopy(),
}, nexmarkScenarios()...)

// PostgresSinkScenario is the scenario writing a PostgreSQL table; it
// needs Config.PostgresDSN.
const PostgresSinkScenario = "postgres-sink"

func keyedCount(name, backend string, async bool) Scenario {
	doc := "keyed_count by key on " + backend
	ops := `  - name: out
    type: keyed_count
    input: in
    key_by: key
`
	if async {
		doc += " with async state"
		ops += "    async_state: true\n"
	}
	return Scenario{
		Name: name, Doc: doc, Backend: backend, Operators: ops,
		NewModel: func(int) Model { return modelFunc(func(Item) int { return 1 }) },
	}
}

// matcher is the reference job's shape_pair_matcher keyed by key with n
// rules, pairs of distinct shapes (at most len(Shapes)*(len(Shapes)-1)).
func matcher(n int) Scenario {
	var rules []Rule
	for i := range Shapes {
		for j := range Shapes {
			if i < j && len(rules) < n {
				rules = append(rules, Rule{Name: fmt.Sprintf("R%02d", len(rules)), First: Shapes[i], Second: Shapes[j]})
			}
		}
	}
	for i := range Shapes {
		for j := range Shapes {
			if i > j && len(rules) < n {
				rules = append(rules, Rule{Name: fmt.Sprintf("R%02d", len(rules)), First: Shapes[i], Second: Shapes[j]})
			}
		}
	}
	return Scenario{
		Name: fmt.Sprintf("matcher-%d-rules", n), Doc: fmt.Sprintf("shape_pair_matcher by key with %d broadcast rules on pebble", n), Backend: "pebble",
		Operators: `  - name: out
    type: shape_pair_matcher
    input: in
    key_by: key
    broadcast: rules
`,
		Rules: rules,
		NewModel: func(int) Model {
			return &matcherModel{rules: rules, stored: map[string][]int{}}
		},
	}
}

// matcherModel follows ShapePairMatcher: per key and rule the number of
// stored items of the rule's first shape; an item of the second shape
// emits one match per stored item and clears them, then an item of the
// first shape is stored.
type matcherModel struct {
	rules  []Rule
	stored map[string][]int
}

func (m *matcherModel) Outputs(it Item) int {
	st := m.stored[it.Key]
	if st == nil {
		st = make([]int, len(m.rules))
		m.stored[it.Key] = st
	}
	n := 0
	for i, r := range m.rules {
		if it.Shape == r.Second {
			n += st[i]
			st[i] = 0
		}
		if it.Shape == r.First {
			st[i]++
		}
	}
	return n
}

// tumblingWindowMs is the tumbling-window scenario's window size.
const tumblingWindowMs = 1000

// tumblingWindow is a tumbling event-time window count: per key, the
// records of each 1 s window of their Kafka timestamp (the produce time),
// emitted when the watermark (bounded out-of-orderness 0) passes the
// window's end. The job is done when the window operator has received
// every record and every window the watermark closed is committed.
func tumblingWindow() Scenario {
	return Scenario{
		Name: "tumbling-window", Doc: "window tumbling 1s on event time (the record timestamp), count by key, on pebble", Backend: "pebble",
		Operators: fmt.Sprintf(`  - name: out
    type: window
    input: in
    key_by: key
    params:
      kind: tumbling
      size: %dms
      aggregates:
        - {name: count, fn: count}
`, tumblingWindowMs),
		Processed:       "out",
		MinLatencyPhase: 2 * tumblingWindowMs * time.Millisecond,
		NewModel: func(partitions int) Model {
			m := &windowModel{size: tumblingWindowMs, partMax: make([]int64, partitions)}
			for i := range m.partMax {
				m.partMax[i] = -1
			}
			return m
		},
	}
}

// windowModel follows the tumbling-window scenario: each partition's
// watermark is its largest timestamp minus 1 ms, the job's the least of
// them once every partition has a record (the items' timestamps never
// decrease, so no record is late); a key's window fires, one output, when
// the watermark reaches its end minus 1 ms.
type windowModel struct {
	size    int64
	partMax []int64 // largest timestamp per partition, -1 before its first
	seen    int     // partitions with a record
	open    []openWindow
}

// openWindow is one window start (its index, start/size) and the keys with
// records in it.
type openWindow struct {
	idx  int64
	keys map[string]struct{}
}

// Outputs implements Model: the window results (one per key of each
// window) that the watermark closes once it is read.
func (m *windowModel) Outputs(it Item) int {
	idx := it.Time / m.size
	if n := len(m.open); n == 0 || m.open[n-1].idx != idx {
		m.open = append(m.open, openWindow{idx: idx, keys: map[string]struct{}{}})
	}
	m.open[len(m.open)-1].keys[it.Key] = struct{}{}
	if m.partMax[it.Partition] < 0 {
		m.seen++
	}
	m.partMax[it.Partition] = max(m.partMax[it.Partition], it.Time)
	if m.seen < len(m.partMax) {
		return 0
	}
	wm := slices.Min(m.partMax) - 1
	n := 0
	for len(m.open) > 0 && (m.open[0].idx+1)*m.size-1 <= wm {
		n += len(m.open[0].keys)
		m.open = m.open[1:]
	}
	return n
}

// Processed implements ProcessedModel: the window operator receives every
// item.
func (m *windowModel) Processed(Item) int { return 1 }

// The interval-join scenario's bounds, ms: right.ts in [left.ts + lower,
// left.ts + upper].
const (
	intervalJoinLower = -20
	intervalJoinUpper = 20
)

// intervalJoinRatePerKey is the interval-join scenario's event rate per
// key (Scenario.EventRatePerKey): 100 items per key per second, so a key
// has 0.05 items of each side per ms and an item about 41 x 0.05 = 2.05
// partners within [-20ms, +20ms], half of which arrive after it: about
// one pair per item, what the produce-time stamps gave on a typical
// run.
const intervalJoinRatePerKey = 100

// intervalJoinAlignment is the interval-join scenario's watermark
// alignment: a partition reads at most 20ms of event time (the join's
// bound; about 5,000 records of a partition at the default 10,000 keys)
// ahead of the least of the source's partitions, so the rows the join
// keeps until the watermark passes them stay bounded by the interval plus
// the drift. Without it the partitions drift 60-90 ms apart at the
// median and up to 150 ms (BENCHMARKS.md, session 43: the input's
// watermark skew); with it 18-19 ms, for no measurable CPU once a
// waiting subtask is woken at once (session 42's quiet slowdown was the
// waiting subtask asleep for update_interval). --watermark-alignment off
// runs it without.
const intervalJoinAlignment = "{max_drift: 20ms}"

// intervalJoin is an inner interval join of the items with themselves:
// the items of even id are the left input, those of odd id the right one
// (two filters of the source), both keyed by key, bounds [-20ms, +20ms]
// on the record timestamp, on Pebble. The throughput phase's timestamps
// are event times derived from the ids (intervalJoinRatePerKey), the
// latency phase's the produce time. Each pair is one output, written when
// its second record arrives. The job is done when the join has received
// every record and every pair is committed.
func intervalJoin() Scenario {
	return Scenario{
		Name: "interval-join", Doc: fmt.Sprintf("interval_join of the even-id (left) and odd-id (right) items by key, bounds [-20ms, +20ms] on the record timestamp (an event time from the id, %d items per key per second), inner, on pebble", intervalJoinRatePerKey), Backend: "pebble",
		EventRatePerKey:    intervalJoinRatePerKey,
		WatermarkAlignment: intervalJoinAlignment,
		Operators: fmt.Sprintf(`  - name: evens
    type: filter
    input: in
    params: {condition: "id %% 2 == 0"}
  - name: odds
    type: filter
    input: in
    params: {condition: "id %% 2 == 1"}
  - name: out
    type: interval_join
    inputs:
      left: {from: evens, key_by: key}
      right: {from: odds, key_by: key}
    params:
      lower: %dms
      upper: %dms
      select: '{"l": left.id, "r": right.id}'
`, intervalJoinLower, intervalJoinUpper),
		Processed: "out",
		NewModel:  func(int) Model { return &intervalJoinModel{recent: map[string][]Item{}} },
	}
}

// intervalJoinModel follows the interval-join scenario: a key's items
// arrive in order (one partition, non-decreasing times) and none is late
// (the watermark is below every partition's newest time), so an item
// outputs one pair per earlier item of the key on the other side within
// the bounds; a left item is still buffered then, as the join keeps it
// until the watermark passes its time + upper. recent holds, per key, the
// items that may still pair with a later one.
type intervalJoinModel struct {
	recent map[string][]Item
}

// pairs reports whether left item l and right item r join.
func (intervalJoinModel) pairs(l, r Item) bool {
	return l.Time+intervalJoinLower <= r.Time && r.Time <= l.Time+intervalJoinUpper
}

// Outputs implements Model.
func (m *intervalJoinModel) Outputs(it Item) int {
	n := 0
	keep := m.recent[it.Key][:0]
	for _, o := range m.recent[it.Key] {
		if o.ID%2 != it.ID%2 {
			if (it.ID%2 == 0 && m.pairs(it, o)) || (it.ID%2 == 1 && m.pairs(o, it)) {
				n++
			}
		}
		// A left item pairs with later right items up to its time +
		// upper, a right item with later left items up to its time - lower.
		if until := o.Time + intervalJoinUpper; o.ID%2 == 1 {
			if o.Time-intervalJoinLower >= it.Time {
				keep = append(keep, o)
			}
		} else if until >= it.Time {
			keep = append(keep, o)
		}
	}
	m.recent[it.Key] = append(keep, it)
	return n
}

// Processed implements ProcessedModel: the join receives every item.
func (m *intervalJoinModel) Processed(Item) int { return 1 }

// tableJoinEvery makes every tableJoinEvery-th item (id a multiple of it)
// a row of the table-join scenario's table; the others are its stream.
const tableJoinEvery = 8

// tableJoin is a stream-table join (table_join, mode latest, left): the
// items whose id is a multiple of tableJoinEvery update a table of each
// key's latest amount (an aggregate with last, whose changelog is the
// join's right input), the others are the stream (left), both keyed by
// key, on Pebble. A left join emits exactly one record per stream item,
// joined with the key's row at processing time or null before the key
// has one (which of the two depends on how the inputs interleave, so the
// model counts outputs, not values).
func tableJoin() Scenario {
	return Scenario{
		Name: "table-join", Doc: fmt.Sprintf("table_join (latest, left) of the items whose id is not a multiple of %d (stream) with each key's latest amount (an aggregate with last over the items whose id is: the table), both keyed by key, on pebble", tableJoinEvery), Backend: "pebble",
		Operators: fmt.Sprintf(`  - name: rows
    type: filter
    input: in
    params: {condition: "id %% %[1]d == 0"}
  - name: table
    type: aggregate
    input: rows
    key_by: key
    params:
      aggregates: [{name: amount, fn: last, of: amount}]
  - name: stream
    type: filter
    input: in
    params: {condition: "id %% %[1]d != 0"}
  - name: out
    type: table_join
    inputs:
      left: {from: stream, key_by: key}
      right: {from: table, key_by: key}
    params:
      join: left
      select: '{"id": left.id, "amount": left.amount, "last": right == null ? null : right.amount}'
`, tableJoinEvery),
		NewModel: func(int) Model {
			return modelFunc(func(it Item) int {
				if it.ID%tableJoinEvery != 0 {
					return 1
				}
				return 0
			})
		},
	}
}

// ScenarioByName returns the scenario called name.
func ScenarioByName(name string) (Scenario, bool) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// ScenarioNames returns the names of Scenarios, comma-separated.
func ScenarioNames() string {
	var ns []string
	for _, s := range Scenarios {
		ns = append(ns, s.Name)
	}
	return strings.Join(ns, ", ")
}

// pipelineYAML returns the pipeline of scenario s for one run.
// stateExtra are more lines of its state section (Config.stateYAML).
func pipelineYAML(s Scenario, job, dataDir string, brokers []string, in, rules, out, delivery string, parallelism int, interval, pgDSN, stateExtra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job:\n  name: %s\n  parallelism: %d\n", job, parallelism)
	fmt.Fprintf(&b, "data_dir: %q\n", dataDir)
	fmt.Fprintf(&b, "kafka:\n  brokers: [%s]\n  client_id: kstreamd-bench\n", strings.Join(brokers, ", "))
	fmt.Fprintf(&b, "state:\n  backend: %s\n%s", s.Backend, stateExtra)
	fmt.Fprintf(&b, "checkpoints:\n  interval: %s\n  incremental: true\n  timeout: 1m\n", interval)
	fmt.Fprintf(&b, "metrics:\n  address: \"\"\n")
	fmt.Fprintf(&b, "sources:\n  - name: in\n    topic: %s\n    format: %s\n    on_error: fail\n", in, s.format())
	if s.WatermarkAlignment != "" {
		fmt.Fprintf(&b, "    watermark_alignment: %s\n", s.WatermarkAlignment)
	}
	if s.hasRules() {
		fmt.Fprintf(&b, "  - name: rules\n    topic: %s\n    parallelism: 1\n    on_error: fail\n", rules)
	}
	input := "in"
	if s.Operators != "" {
		b.WriteString("operators:\n")
		b.WriteString(s.Operators)
		input = "out"
	}
	if s.FileSink {
		fmt.Fprintf(&b, "sinks:\n  - name: sink\n    type: file\n    input: %s\n    delivery: %s\n    params:\n      path: %q\n", input, delivery, fileSinkDir(dataDir))
		return b.String()
	}
	if s.Postgres {
		fmt.Fprintf(&b, "sinks:\n  - name: sink\n    type: postgres\n    input: %s\n    delivery: %s\n    params:\n      connection:\n        dsn: %q\n", input, delivery, pgDSN)
		fmt.Fprintf(&b, "      table: %s\n      mode: insert\n      batch_size: 5000\n      columns: [{name: id}, {name: key}, {name: amount}, {name: ts}]\n", pgTable(job))
		return b.String()
	}
	fmt.Fprintf(&b, "sinks:\n  - name: sink\n    input: %s\n    topic: %s\n    delivery: %s\n", input, out, delivery)
	if s.Avro {
		b.WriteString("    format: avro\n") // the latest schema of <out>-value
	}
	if delivery == ExactlyOnce {
		// Well above checkpoints.interval plus checkpoints.timeout: a
		// pre-committed transaction waits for the next checkpoint to
		// complete when its own times out (rules-100 on a loaded machine).
		b.WriteString("    transaction_timeout: 10m\n")
	}
	return b.String()
}

// format is the format of the scenario's input (and, for Avro, output).
func (s Scenario) format() string {
	if s.Avro {
		return "avro"
	}
	return "json"
}

// fileSinkDir is the output directory of a FileSink scenario's job whose
// data directory is dataDir.
func fileSinkDir(dataDir string) string { return filepath.Join(dataDir, "files") }

// rules is the rules operator (dynamic rules, Flink's fraud-detection
// pattern) with n active rules on pebble: rule i, like demo.FraudRules
// with ids suffixed -i, takes the items with amount % 10 == i % 10 (each
// rule a tenth of them, so a record is routed n/10 times on average),
// groups them by key (the Kafka key: a group's items stay in order) and
// aggregates, by i % 4, the max amount, the sum of amount, the count or
// the distinct shapes, with limits so that few alerts fire. The window is
// 744h (the longest a rule takes), so every earlier item of a group is in
// the window ending at each item whatever the produce timing, and the
// model is exact; its buckets never expire during a run. The job is done
// when the keyed stage "out" has received every routed copy and every
// alert is committed. With slice (a Go duration) the rules have it
// (hopping windows of 744h in panes of slice, "rules-<n>-slice-<slice>"):
// every earlier item of a group is still in the window ending with an
// item's pane, so the model is the same.
func rules(n int, slice string) Scenario {
	rs := make([]RuleRecord, n)
	specs := make([]ruleSpec, n)
	for i := range rs {
		sp := ruleSpec{digit: i % 10, fn: i % 4, slice: slice}
		specs[i] = sp
		rs[i] = RuleRecord{Key: sp.id(i), Value: sp.json(i)}
	}
	name, window := fmt.Sprintf("rules-%d", n), "744h window"
	if slice != "" {
		name, window = fmt.Sprintf("rules-%d-slice-%s", n, slice), fmt.Sprintf("744h window in %s slices", slice)
	}
	return Scenario{
		Name: name, Doc: fmt.Sprintf("rules operator with %d active rules (filter, group_by key, %s, sum/count/count_distinct/max) on pebble", n, window),
		Backend: "pebble",
		Operators: `  - name: out
    type: rules
    input: in
    broadcast: rules
`,
		RuleRecords: rs,
		Processed:   "out",
		NewModel:    func(int) Model { return &rulesModel{specs: specs, groups: map[rulesGroup]*rulesAgg{}} },
	}
}

// ruleSpec is one bench rule: items with amount % 10 == digit, fn one of
// the four below, slice (the rule's, RuleSpec.Slice) when not empty.
type ruleSpec struct {
	digit, fn int
	slice     string
}

// The bench rules' aggregates and limits (alert_when).
const (
	ruleMax           = iota // max amount > ruleMaxLimit
	ruleSum                  // sum of amount > ruleSumLimit
	ruleCount                // count > ruleCountLimit
	ruleCountDistinct        // distinct shapes > ruleDistinctLimit
)

const (
	ruleMaxLimit      = 985
	ruleSumLimit      = 3500
	ruleCountLimit    = 6
	ruleDistinctLimit = 4
)

func (r ruleSpec) id(i int) string {
	return fmt.Sprintf("%s-%d", []string{"large-amount", "big-spender", "busy-key", "many-shapes"}[r.fn], i)
}

func (r ruleSpec) json(i int) string {
	agg := []string{
		`{"fn":"max","of":"amount"}`, `{"fn":"sum","of":"amount"}`, `{"fn":"count"}`, `{"fn":"count_distinct","of":"shape"}`,
	}[r.fn]
	limit := []int{ruleMaxLimit, ruleSumLimit, ruleCountLimit, ruleDistinctLimit}[r.fn]
	slice := ""
	if r.slice != "" {
		slice = fmt.Sprintf(`,"slice":%q`, r.slice)
	}
	return fmt.Sprintf(`{"id":%q,"filter":"amount %% 10 == %d","group_by":["key"],"aggregate":%s,"window":"744h"%s,"alert_when":"> %d"}`, r.id(i), r.digit, agg, slice, limit)
}

// rulesGroup is one rule's group: the rule index and the key.
type rulesGroup struct {
	rule int
	key  string
}

// rulesAgg is what the model keeps of one group's items so far.
type rulesAgg struct {
	n, sum, max int
	shapes      map[string]bool
}

// rulesModel follows the rules operator on the bench rules: per rule and
// key the items so far (all in the 744h window); an item a rule's filter
// takes is one routed copy, and one alert when the aggregate including it
// exceeds the limit.
type rulesModel struct {
	specs  []ruleSpec
	groups map[rulesGroup]*rulesAgg
	copies int // routed copies of the last item
}

// Outputs implements Model: the alerts it causes, one per matching rule
// whose limit the window ending at it meets.
func (m *rulesModel) Outputs(it Item) int {
	alerts := 0
	m.copies = 0
	for i, sp := range m.specs {
		if it.Amount%10 != sp.digit {
			continue
		}
		m.copies++
		g := m.groups[rulesGroup{i, it.Key}]
		if g == nil {
			g = &rulesAgg{shapes: map[string]bool{}}
			m.groups[rulesGroup{i, it.Key}] = g
		}
		g.n++
		g.sum += it.Amount
		g.max = max(g.max, it.Amount)
		g.shapes[it.Shape] = true
		var over bool
		switch sp.fn {
		case ruleSum:
			over = g.sum > ruleSumLimit
		case ruleCount:
			over = g.n > ruleCountLimit
		case ruleCountDistinct:
			over = len(g.shapes) > ruleDistinctLimit
		case ruleMax:
			over = g.max > ruleMaxLimit
		}
		if over {
			alerts++
		}
	}
	return alerts
}

// Processed implements ProcessedModel: the copies routed to the keyed
// stage for it (Outputs must have seen it just before).
func (m *rulesModel) Processed(Item) int { return m.copies }

// processedCount wraps the model of a scenario with Processed: it counts
// the records that operator receives for the items the model saw.
type processedCount struct {
	ProcessedModel
	operator string
	n        int64
}

// newProcessedCount returns the counter of scenario s (nil when s is nil
// or has no Processed).
func newProcessedCount(s *Scenario, m Model) (*processedCount, error) {
	if s == nil || s.Processed == "" {
		return nil, nil
	}
	pm, ok := m.(ProcessedModel)
	if !ok {
		return nil, fmt.Errorf("bench: scenario %s: Processed is set but its model is no ProcessedModel", s.Name)
	}
	return &processedCount{ProcessedModel: pm, operator: s.Processed}, nil
}

// Outputs implements Model, counting the processed records too.
func (c *processedCount) Outputs(it Item) int {
	n := c.ProcessedModel.Outputs(it)
	c.n += int64(c.ProcessedModel.Processed(it))
	return n
}

// waitOn returns the throughput phase's end condition on job t for exp
// outputs (every output committed and every record the items counted so
// far cause received by the operator), and its progress (both counts).
func (c *processedCount) waitOn(t target, exp int64) (done func() bool, progress func() int64) {
	want := c.n
	received := func() int64 {
		if jt, ok := t.(*jobTarget); ok {
			return jt.received(c.operator)
		}
		return 0
	}
	return func() bool { return t.committed() >= exp && received() >= want },
		func() int64 { return t.committed() + received() }
}
