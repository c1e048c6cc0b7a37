package bench

import (
	"fmt"
	"strings"
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
	// NewModel returns a fresh model of the outputs.
	NewModel func() Model
}

// Rule is a shape-pair rule of the matcher: {"name","first","second"}.
type Rule struct{ Name, First, Second string }

// Model counts the outputs a scenario's job writes for each item, in input
// order per key (the order the job sees them in).
type Model interface {
	Outputs(Item) int
}

type modelFunc func(Item) int

func (f modelFunc) Outputs(it Item) int { return f(it) }

// Scenarios are the scenarios kstreamd bench knows, in --all order.
var Scenarios = []Scenario{
	{
		Name: "copy", Doc: "source to sink, no operator", Backend: "hashmap",
		NewModel: func() Model { return modelFunc(func(Item) int { return 1 }) },
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
		NewModel: func() Model {
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
	// Later issues add here: a tumbling event-time window count, and the
	// rules operator with 1, 10 and 100 rules.
}

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
		NewModel: func() Model { return modelFunc(func(Item) int { return 1 }) },
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
		NewModel: func() Model {
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
func pipelineYAML(s Scenario, job, dataDir string, brokers []string, in, rules, out, delivery string, parallelism int, interval string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job:\n  name: %s\n  parallelism: %d\n", job, parallelism)
	fmt.Fprintf(&b, "data_dir: %q\n", dataDir)
	fmt.Fprintf(&b, "kafka:\n  brokers: [%s]\n  client_id: kstreamd-bench\n", strings.Join(brokers, ", "))
	fmt.Fprintf(&b, "state:\n  backend: %s\n", s.Backend)
	fmt.Fprintf(&b, "checkpoints:\n  interval: %s\n  incremental: true\n  timeout: 1m\n", interval)
	fmt.Fprintf(&b, "metrics:\n  address: \"\"\n")
	fmt.Fprintf(&b, "sources:\n  - name: in\n    topic: %s\n    format: json\n    on_error: fail\n", in)
	if len(s.Rules) > 0 {
		fmt.Fprintf(&b, "  - name: rules\n    topic: %s\n    parallelism: 1\n    on_error: fail\n", rules)
	}
	input := "in"
	if s.Operators != "" {
		b.WriteString("operators:\n")
		b.WriteString(s.Operators)
		input = "out"
	}
	fmt.Fprintf(&b, "sinks:\n  - name: sink\n    input: %s\n    topic: %s\n    delivery: %s\n", input, out, delivery)
	if delivery == "exactly-once" {
		b.WriteString("    transaction_timeout: 1m\n")
	}
	return b.String()
}
