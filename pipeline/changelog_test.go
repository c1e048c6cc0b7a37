package pipeline

import (
	"testing"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/operators"
)

// TestPlanChangelog plans the two-stage changelog job (clicks per user,
// re-keyed by country and summed), a filter passing the changelog on, and
// a header-mode source, and checks what the planner derived: which
// operators read a changelog (graph.Operator.ChangelogInput, handed to
// their factories), each sink's mode (default upsert) and the source's.
func TestPlanChangelog(t *testing.T) {
	cfg, err := Parse("plan.yaml", []byte(planHead+`  - name: back
    topic: back
    changelog: header
operators:
  - name: per_user
    type: aggregate
    input: clicks
    key_by: user
    params:
      aggregates: [{name: clicks, fn: count}, {name: country, fn: last, of: country}]
  - name: active
    type: filter
    input: per_user
    params: {condition: clicks > 0}
  - name: per_country
    type: aggregate
    input: active
    key_by: country
    params:
      aggregates: [{name: clicks, fn: sum, of: clicks}]
  - name: plain
    type: filter
    input: clicks
    params: {condition: "true"}
  - name: replayed
    type: aggregate
    input: back
    key_by: key
    params:
      aggregates: [{name: n, fn: count}]
sinks:
  - name: totals
    input: per_country
    topic: totals
  - name: users
    input: per_user
    topic: users
    changelog: header
`), planRegistry(t))
	if err != nil {
		t.Fatal(err)
	}
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"per_user": false, "active": true, "per_country": true, "plain": false, "replayed": true}
	for _, o := range g.Operators {
		if o.ChangelogInput != want[o.Name] {
			t.Errorf("operator %s: ChangelogInput %v, want %v", o.Name, o.ChangelogInput, want[o.Name])
		}
	}
	modes := map[string]graph.ChangelogMode{"totals": graph.ChangelogUpsert, "users": graph.ChangelogHeader}
	for _, s := range g.Sinks {
		if s.Changelog != modes[s.Name] {
			t.Errorf("sink %s: changelog %q, want %q", s.Name, s.Changelog, modes[s.Name])
		}
	}
	for _, s := range g.Sources {
		if s.Changelog != (s.Name == "back") {
			t.Errorf("source %s: changelog %v", s.Name, s.Changelog)
		}
	}
}

// TestPlanUpsertHeader plans header-mode sinks and sources around a
// table's upserts: a changelog: header sink whose input is an upsert
// changelog (a table source, directly or through a filter, or an
// upsert_header source) is planned as graph.ChangelogUpsertHeader (it
// marks its records so that a changelog: header reader refuses them),
// one over a full changelog (changelog_normalize's) stays
// graph.ChangelogHeader; a changelog: upsert_header source is a
// header-mode source (Changelog) reading an upsert changelog
// (UpsertChangelog), which changelog_normalize reads and an aggregate
// reads after it.
func TestPlanUpsertHeader(t *testing.T) {
	cfg, err := Parse("plan.yaml", []byte(planHead+`  - name: users
    topic: users
    table: true
  - name: back
    topic: users_h
    changelog: upsert_header
  - name: full
    topic: full_h
    changelog: header
operators:
  - name: active
    type: filter
    input: users
    params: {condition: "true"}
  - name: normalized
    type: changelog_normalize
    input: users
    key_by: key
  - name: back_normalized
    type: changelog_normalize
    input: back
    key_by: key
  - name: per_country
    type: aggregate
    input: back_normalized
    key_by: country
    params:
      aggregates: [{name: n, fn: count}]
sinks:
  - {name: table_h, input: users, topic: users_h, changelog: header}
  - {name: filtered_h, input: active, topic: filtered_h, changelog: header}
  - {name: normalized_h, input: normalized, topic: full_h, changelog: header}
  - {name: back_h, input: back, topic: back_h, changelog: header}
  - {name: table_up, input: users, topic: users_up}
  - {name: counts, input: per_country, topic: counts}
`), planRegistry(t))
	if err != nil {
		t.Fatal(err)
	}
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]graph.ChangelogMode{
		"table_h": graph.ChangelogUpsertHeader, "filtered_h": graph.ChangelogUpsertHeader, "back_h": graph.ChangelogUpsertHeader,
		"normalized_h": graph.ChangelogHeader, "table_up": graph.ChangelogUpsert, "counts": graph.ChangelogUpsert,
	}
	for _, s := range g.Sinks {
		if s.Changelog != modes[s.Name] {
			t.Errorf("sink %s: changelog %q, want %q", s.Name, s.Changelog, modes[s.Name])
		}
	}
	type flags struct{ changelog, upsert, table bool }
	srcs := map[string]flags{"users": {table: true}, "back": {changelog: true, upsert: true}, "full": {changelog: true}}
	for _, s := range g.Sources {
		if got, want := (flags{s.Changelog, s.UpsertChangelog, s.Table}), srcs[s.Name]; got != want {
			t.Errorf("source %s: %+v, want %+v", s.Name, got, want)
		}
	}
	for _, o := range g.Operators {
		if !o.ChangelogInput {
			t.Errorf("operator %s: ChangelogInput false, want true", o.Name)
		}
	}
}

// TestPlanSideOutputChangelog: an operator reading a two-input operator's
// side output reads a changelog when an input of that operator is one
// (graph.Operator.ChangelogInput, which makes an aggregate retract): a
// Go two-input type accepting changelogs ("co", side output "late")
// whose left input is an aggregate's changelog has a full changelog as
// its late output, read by an aggregate that retracts; interval_join's
// late output (both inputs append-only) is append-only, read by a
// window.
func TestPlanSideOutputChangelog(t *testing.T) {
	reg := planRegistry(t)
	if err := reg.Register(operators.Factory{
		Type: "co", Doc: "A two-input type passing changelogs, with a late side output (planner tests).",
		Traits:      operators.Traits{Keyed: true, Inputs: [2]string{"left", "right"}, Changelog: operators.ChangelogTraits{Accepts: true}},
		SideOutputs: []string{"late"},
		New:         func(operators.FactoryContext) (any, error) { return passFunction{}, nil },
	}); err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse("plan.yaml", []byte(planHead+`operators:
  - name: per_user
    type: aggregate
    input: clicks
    key_by: user
    params:
      aggregates: [{name: n, fn: count}]
  - name: co
    type: co
    inputs:
      left: {from: per_user, key_by: key}
      right: {from: clicks, key_by: user}
  - name: late_counted
    type: aggregate
    input: co.late
    key_by: key
    params:
      aggregates: [{name: n, fn: sum, of: n}]
  - name: ij
    type: interval_join
    inputs:
      left: {from: clicks, key_by: user}
      right: {from: wide, key_by: user}
    params: {lower: -5s, upper: 5s}
  - name: late_windowed
    type: window
    input: ij.late
    key_by: key
    params: {kind: tumbling, size: 1m, time: processing, aggregates: [{name: n, fn: count}]}
sinks:
  - {name: a, input: co, topic: a}
  - {name: b, input: late_counted, topic: b}
  - {name: c, input: ij, topic: c}
  - {name: d, input: late_windowed, topic: d}
`), reg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"per_user": false, "co": false, "late_counted": true, "ij": false, "late_windowed": false}
	for _, o := range g.Operators {
		if o.ChangelogInput != want[o.Name] {
			t.Errorf("operator %s: ChangelogInput %v, want %v", o.Name, o.ChangelogInput, want[o.Name])
		}
	}
}
