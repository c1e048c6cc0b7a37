package pipeline

import (
	"context"
	"errors"
	"testing"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/runtime"
)

// planHead is the head of every planner test config: job "plan" at
// parallelism 2, an outside broker, and the sources clicks and rules (lines
// 1 to 12); a case appends its operators and sinks.
const planHead = `job:
  name: plan
  parallelism: 2
kafka:
  brokers: [localhost:9092]
sources:
  - name: clicks
    topic: clicks
  - name: rules
    topic: rules
  - name: wide
    topic: wide
    parallelism: 8
`

// passFunction is the function of planRegistry's "pass" type: it forwards
// every record.
type passFunction struct{}

func (passFunction) Open(operators.OpenContext) error { return nil }

func (passFunction) ProcessElement(_ context.Context, rec runtime.Record, out operators.Collector) error {
	return out.Collect(rec)
}

// planRegistry is the built-in registry plus "pass", a type that is not
// keyed (so an operator may omit key_by), whatever non-keyed built-ins
// exist at the time.
func planRegistry(t *testing.T) *operators.Registry {
	t.Helper()
	reg := operators.NewBuiltinRegistry()
	err := reg.Register(operators.Factory{
		Type: "pass", Doc: "Forwards every record (planner tests).",
		New: func(operators.FactoryContext) (any, error) { return passFunction{}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestPlan plans configs into graphs without I/O and compares
// graph.Graph.String() and each operator's ErrorSources with the exact
// expected values: parallelism defaults and the edge each implies, a
// two-stage re-keyed pipeline, a pipeline without operators, broadcast
// edges.
func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name string
		// body is appended to planHead.
		body string
		want string
		// errorSources are the operators' ErrorSources by name.
		errorSources map[string][2]string
	}{
		{
			name: "no operator: a sink reads a source",
			body: `sinks:
  - name: copy
    input: clicks
    topic: copy
`,
			want: `job plan max_parallelism=128
source clicks topic=clicks p=2
source rules topic=rules p=2
source wide topic=wide p=8
sink copy topic=copy p=2
clicks -forward-> copy
`,
		},
		{
			name: "key_by: job.parallelism over a hash edge, whatever the input's parallelism",
			body: `operators:
  - name: counts
    type: keyed_count
    input: wide
    key_by: user
sinks:
  - name: out
    input: counts
    topic: out
`,
			want: `job plan max_parallelism=128
source clicks topic=clicks p=2
source rules topic=rules p=2
source wide topic=wide p=8
operator counts type=keyed_count p=2
sink out topic=out p=2
wide -hash(user)-> counts
counts -forward-> out
`,
			errorSources: map[string][2]string{"counts": {"wide", ""}},
		},
		{
			name: "no key_by: the input's parallelism over a forward edge, also through operators",
			body: `operators:
  - name: first
    type: pass
    input: wide
  - name: second
    type: pass
    input: first
sinks:
  - name: out
    input: second
    topic: out
`,
			want: `job plan max_parallelism=128
source clicks topic=clicks p=2
source rules topic=rules p=2
source wide topic=wide p=8
operator first type=pass p=8
operator second type=pass p=8
sink out topic=out p=8
wide -forward-> first
first -forward-> second
second -forward-> out
`,
			errorSources: map[string][2]string{"first": {"wide", ""}, "second": {"wide", ""}},
		},
		{
			name: "rules: a routing stage at the input's parallelism, then the keyed stage over a hash edge on the routing key; both read the broadcast",
			body: `operators:
  - name: fraud
    type: rules
    input: wide
    broadcast: rules
sinks:
  - name: alerts
    input: fraud
    topic: alerts
  - name: exported
    input: fraud.rules
    topic: exported
`,
			want: `job plan max_parallelism=128
source clicks topic=clicks p=2
source rules topic=rules p=2
source wide topic=wide p=8
operator fraud.route type=rules.route p=8
operator fraud type=rules p=2
sink alerts topic=alerts p=2
sink exported topic=exported p=2
wide -forward-> fraud.route
rules -broadcast-> fraud.route[1]
fraud.route -hash(key)-> fraud
rules -broadcast-> fraud[1]
fraud -forward-> alerts
fraud.rules -forward-> exported
`,
			errorSources: map[string][2]string{"fraud.route": {"wide", "rules"}, "fraud": {"wide", "rules"}},
		},
		{
			name: "differing parallelism: rebalance edges",
			body: `operators:
  - name: narrow
    type: pass
    input: wide
    parallelism: 3
sinks:
  - name: out
    input: narrow
    topic: out
    parallelism: 5
`,
			want: `job plan max_parallelism=128
source clicks topic=clicks p=2
source rules topic=rules p=2
source wide topic=wide p=8
operator narrow type=pass p=3
sink out topic=out p=5
wide -rebalance-> narrow
narrow -rebalance-> out
`,
			errorSources: map[string][2]string{"narrow": {"wide", ""}},
		},
		{
			name: "key_by on a type that is not keyed re-keys its input",
			body: `operators:
  - name: rekeyed
    type: pass
    input: wide
    key_by: user.id
sinks:
  - name: out
    input: rekeyed
    topic: out
`,
			want: `job plan max_parallelism=128
source clicks topic=clicks p=2
source rules topic=rules p=2
source wide topic=wide p=8
operator rekeyed type=pass p=2
sink out topic=out p=2
wide -hash(user.id)-> rekeyed
rekeyed -forward-> out
`,
			errorSources: map[string][2]string{"rekeyed": {"wide", ""}},
		},
		{
			name: "two stages: count per user, re-keyed by count, counted again",
			body: `operators:
  - name: per_count
    type: keyed_count
    input: per_user
    key_by: count
    parallelism: 4
  - name: per_user
    type: keyed_count
    input: clicks
    key_by: user
sinks:
  - name: out
    input: per_count
    topic: out
`,
			want: `job plan max_parallelism=128
source clicks topic=clicks p=2
source rules topic=rules p=2
source wide topic=wide p=8
operator per_user type=keyed_count p=2
operator per_count type=keyed_count p=4
sink out topic=out p=4
clicks -hash(user)-> per_user
per_user -hash(count)-> per_count
per_count -forward-> out
`,
			errorSources: map[string][2]string{"per_user": {"clicks", ""}, "per_count": {"clicks", ""}},
		},
		{
			name: "broadcast edge; a later operator without key_by inherits the keyed one's parallelism",
			body: `operators:
  - name: matcher
    type: shape_pair_matcher
    input: clicks
    key_by: color
    broadcast: rules
    parallelism: 3
  - name: after
    type: pass
    input: matcher
sinks:
  - name: matches
    input: after
    topic: matches
`,
			want: `job plan max_parallelism=128
source clicks topic=clicks p=2
source rules topic=rules p=2
source wide topic=wide p=8
operator matcher type=shape_pair_matcher p=3
operator after type=pass p=3
sink matches topic=matches p=3
clicks -hash(color)-> matcher
rules -broadcast-> matcher[1]
matcher -forward-> after
after -forward-> matches
`,
			errorSources: map[string][2]string{"matcher": {"clicks", "rules"}, "after": {"clicks", ""}},
		},
		{
			name: "two sinks of one operator; max_parallelism derived from the largest operator",
			body: `operators:
  - name: counts
    type: keyed_count
    input: clicks
    key_by: user
    parallelism: 100
sinks:
  - name: a
    input: counts
    topic: a
  - name: b
    input: counts
    topic: b
    parallelism: 1
`,
			want: `job plan max_parallelism=256
source clicks topic=clicks p=2
source rules topic=rules p=2
source wide topic=wide p=8
operator counts type=keyed_count p=100
sink a topic=a p=100
sink b topic=b p=1
clicks -hash(user)-> counts
counts -forward-> a
counts -rebalance-> b
`,
			errorSources: map[string][2]string{"counts": {"clicks", ""}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("plan.yaml", []byte(planHead+tc.body), planRegistry(t))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			g, err := cfg.Plan()
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			if got := g.String(); got != tc.want {
				t.Errorf("graph:\n%s\nwant:\n%s", got, tc.want)
			}
			got := map[string][2]string{}
			for _, o := range g.Operators {
				got[o.Name] = o.ErrorSources
				if o.Factory == nil || o.Factory.Type != o.Type {
					t.Errorf("operator %s: factory %v, want the registry's %s", o.Name, o.Factory, o.Type)
				}
			}
			if len(got) != len(tc.errorSources) {
				t.Errorf("error sources %v, want %v", got, tc.errorSources)
			}
			for name, want := range tc.errorSources {
				if got[name] != want {
					t.Errorf("operator %s: error sources %q, want %q", name, got[name], want)
				}
			}
			for _, e := range g.Edges {
				if e.Kind == "hash" && e.Key == nil {
					t.Errorf("edge %s has no key selector", e)
				}
			}
		})
	}
}

// TestPlanRefuses: Plan of a Config built in code runs the checks Validate
// runs and refuses what it refuses, with the same messages (without
// positions).
func TestPlanRefuses(t *testing.T) {
	cfg, err := Parse("plan.yaml", []byte(planHead+`operators:
  - name: first
    type: pass
    input: wide
sinks:
  - name: out
    input: first
    topic: out
`), planRegistry(t))
	if err != nil {
		t.Fatal(err)
	}
	// An operator without key_by inherits the source's parallelism 8, above
	// job.max_parallelism 4.
	cfg.Job.MaxParallelism = 4
	_, planErr := cfg.Plan()
	valErr := cfg.Validate()
	const want = `plan.yaml:2:3: job.max_parallelism: 4 is less than the parallelism 8 of operators[0] ("first")`
	var ce ConfigErrors
	if !errors.As(planErr, &ce) || planErr.Error() != want {
		t.Errorf("Plan error %v, want %s", planErr, want)
	}
	if valErr == nil || valErr.Error() != planErr.Error() {
		t.Errorf("Validate error %v, want Plan's %v", valErr, planErr)
	}
}

// TestPlanChaining: job.chaining defaults to on and false turns it off for
// the graph; operators[].chain: false marks that operator (and its rules
// routing stage) as never chained; both survive the split into
// cluster-mode stages.
func TestPlanChaining(t *testing.T) {
	cfg, err := Load("testdata/chaining.good.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if !g.DisableChaining || !g.Operators[0].DisableChaining {
		t.Errorf("chaining: false planned DisableChaining %v, operator %v; want both true", g.DisableChaining, g.Operators[0].DisableChaining)
	}
	cfg.Job.Chaining, cfg.Operators[0].Chain = nil, nil
	if g, err = cfg.Plan(); err != nil {
		t.Fatal(err)
	}
	if g.DisableChaining || g.Operators[0].DisableChaining {
		t.Errorf("by default: DisableChaining %v, operator %v; want both false", g.DisableChaining, g.Operators[0].DisableChaining)
	}
	g.DisableChaining = true
	st, err := graph.Split(g, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, sg := range st.Stages {
		if !sg.Graph.DisableChaining {
			t.Errorf("stage %d lost job.chaining: false", i)
		}
	}
}
