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
}

// TestPlanStagesTwoInput: in cluster mode a two-input operator starts a
// stage of its own that reads one repartition topic per role, each written
// by the stage of that role's input with the role's key_by; a table source
// feeding it (table_join's right role) stays a table in stage 0 (upserts
// and tombstones made there, their kinds crossing the exchange in the
// kstreamd-change header its repartition source reads), and the join's
// changelog flags are the planned graph's.
func TestPlanStagesTwoInput(t *testing.T) {
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
  - {name: users, topic: users, table: true}
operators:
  - name: both
    type: co_pass
    inputs:
      left: {from: a, key_by: k}
      right: {from: b, key_by: k}
  - name: enrich
    type: table_join
    inputs:
      left: {from: both, key_by: user}
      right: {from: users, key_by: key}
    params:
      select: '{"user": left.user, "country": right == null ? null : right.country}'
sinks:
  - {name: out, input: enrich, topic: out, delivery: exactly-once, transaction_timeout: 5m}
`
	c, err := Parse("c.yaml", []byte(src), twoInputRegistry(t))
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.PlanStages()
	if err != nil {
		t.Fatal(err)
	}
	want := `units=2
stage 0
  source a topic=a
  source b topic=b
  source users topic=users
  sink repartition.1.left topic=clicks-1-left-repartition units=2
  sink repartition.1.right topic=clicks-1-right-repartition units=2
  sink repartition.2.right topic=clicks-2-right-repartition units=2
  a -hash(k)-> repartition.1.left
  b -hash(k)-> repartition.1.right
  users -hash(key)-> repartition.2.right
stage 1
  source repartition.1.left topic=clicks-1-left-repartition repartition
  source repartition.1.right topic=clicks-1-right-repartition repartition
  operator both type=co_pass input=repartition.1.left
  sink repartition.2.left topic=clicks-2-left-repartition units=2
  repartition.1.left -forward-> both
  repartition.1.right -forward-> both[1]
  both -hash(user)-> repartition.2.left
stage 2
  source repartition.2.left topic=clicks-2-left-repartition repartition
  source repartition.2.right topic=clicks-2-right-repartition repartition
  operator enrich type=table_join input=repartition.2.left
  sink out topic=out
  repartition.2.left -forward-> enrich
  repartition.2.right -forward-> enrich[1]
  enrich -forward-> out
repartition clicks-1-left-repartition partitions=2 0->1 (a -hash(k)-> both)
repartition clicks-1-right-repartition partitions=2 0->1 (b -hash(k)-> both[1])
repartition clicks-2-left-repartition partitions=2 1->2 (both -hash(user)-> enrich)
repartition clicks-2-right-repartition partitions=2 0->2 (users -hash(key)-> enrich[1])
`
	if got := st.String(); got != want {
		t.Errorf("stages:\n%s\nwant:\n%s", got, want)
	}
	users := st.Stages[0].Graph.Sources[2]
	if users.Name != "users" || !users.Table || users.Changelog || users.Repartition {
		t.Errorf("stage 0 users source: table %v changelog %v repartition %v, want a table read as in a single process", users.Table, users.Changelog, users.Repartition)
	}
	for _, s := range st.Stages[1:] {
		for _, src := range s.Graph.Sources {
			if !src.Repartition || !src.Changelog || src.Table {
				t.Errorf("stage %d source %s: repartition %v changelog %v table %v, want a header-mode repartition source", s.Index, src.Name, src.Repartition, src.Changelog, src.Table)
			}
		}
	}
	for _, s := range st.Stages[:2] {
		for _, sk := range s.Graph.Sinks {
			if sk.Changelog != graph.ChangelogHeader {
				t.Errorf("stage %d sink %s writes changelog %q, want header", s.Index, sk.Name, sk.Changelog)
			}
		}
	}
	enrich := st.Stages[2].Graph.Operators[0]
	if got := enrich.Sides; len(got) != 2 || got[0] != (graph.Side{Role: "left", Input: "repartition.2.left", KeyBy: "user"}) ||
		got[1] != (graph.Side{Role: "right", Input: "repartition.2.right", KeyBy: "key"}) {
		t.Errorf("enrich sides %+v", got)
	}
	if enrich.ErrorSources != [2]string{"repartition.2.left", "repartition.2.right"} {
		t.Errorf("enrich error sources %v", enrich.ErrorSources)
	}
}
