package pipeline

import (
	"context"
	"testing"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/runtime"
)

// coPass is the function of twoInputRegistry's "co_pass": it forwards the
// records of both inputs.
type coPass struct{}

func (coPass) Open(operators.OpenContext) error { return nil }
func (coPass) ProcessElement1(_ context.Context, rec runtime.Record, out operators.Collector) error {
	return out.Collect(rec)
}
func (coPass) ProcessElement2(_ context.Context, rec runtime.Record, out operators.Collector) error {
	return out.Collect(rec)
}

// twoInputRegistry is planRegistry plus "co_pass", a two-input keyed type
// with roles left and right.
func twoInputRegistry(t *testing.T) *operators.Registry {
	reg := planRegistry(t)
	if err := reg.Register(operators.Factory{
		Type: "co_pass", Doc: "Forwards both inputs (planner tests).",
		Traits: operators.Traits{Keyed: true, Inputs: [2]string{"left", "right"}},
		New:    func(operators.FactoryContext) (any, error) { return coPass{}, nil },
	}); err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestPlanTwoInput plans a two-input operator: one hash edge per role
// (logical input 0 left, 1 right) with each role's key_by, the operator at
// job.parallelism, its sides in role order and each side's error source
// the source its records come from (through a one-input operator too); an
// operator downstream of it reads it forward.
func TestPlanTwoInput(t *testing.T) {
	body := `operators:
  - {name: big, type: filter, input: wide, params: {condition: "true"}}
  - name: both
    type: co_pass
    parallelism: 3
    inputs:
      right: {from: big, key_by: user.id}
      left: {from: clicks, key_by: user}
  - {name: after, type: pass, input: both}
sinks:
  - {name: out, input: after, topic: out}
`
	c, err := Parse("two.yaml", []byte(planHead+body), twoInputRegistry(t))
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.Plan()
	if err != nil {
		t.Fatal(err)
	}
	want := `job plan max_parallelism=128
source clicks topic=clicks p=2
source rules topic=rules p=2
source wide topic=wide p=8
operator big type=filter p=8
operator both type=co_pass p=3
operator after type=pass p=3
sink out topic=out p=3
wide -forward-> big
clicks -hash(user)-> both
big -hash(user.id)-> both[1]
both -forward-> after
after -forward-> out
`
	if got := g.String(); got != want {
		t.Errorf("graph:\n%s\nwant:\n%s", got, want)
	}
	both := g.Operators[1]
	if both.Input != "clicks" || both.KeyBy != "user" || len(both.Sides) != 2 ||
		both.Sides[0] != (struct{ Role, Input, KeyBy string }{"left", "clicks", "user"}) ||
		both.Sides[1] != (struct{ Role, Input, KeyBy string }{"right", "big", "user.id"}) {
		t.Errorf("operator both: input %q key_by %q sides %+v", both.Input, both.KeyBy, both.Sides)
	}
	if both.ErrorSources != [2]string{"clicks", "wide"} {
		t.Errorf("error sources %v, want [clicks wide]", both.ErrorSources)
	}
	if _, err := graph.Split(g, 2); err == nil || err.Error() != `graph: operator "both" reads two inputs; cluster mode runs one-input operators only` {
		t.Errorf("graph.Split of a two-input operator: %v", err)
	}
}

// TestClusterRefusesTwoInput: cluster mode refuses a two-input operator at
// its type (a stage reads one repartition topic).
func TestClusterRefusesTwoInput(t *testing.T) {
	src := `job:
  name: clicks
data_dir: data
kafka:
  brokers: [localhost:9092]
checkpoints:
  interval: 1s
cluster:
  enabled: true
  units: 2
  store:
    dir: /shared/kstreamd
sources:
  - {name: a, topic: a}
  - {name: b, topic: b}
operators:
  - name: both
    type: co_pass
    inputs:
      left: {from: a, key_by: k}
      right: {from: b, key_by: k}
sinks:
  - {name: out, input: both, topic: out}
`
	_, err := Parse("c.yaml", []byte(src), twoInputRegistry(t))
	want := `c.yaml:18:5: operators[0].type: cluster mode does not run two-input operators (co_pass) yet: a stage reads one repartition topic; run this job without cluster.enabled`
	if err == nil || err.Error() != want {
		t.Fatalf("Parse: %v\nwant %s", err, want)
	}
}
