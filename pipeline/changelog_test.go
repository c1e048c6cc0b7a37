package pipeline

import (
	"testing"

	"github.com/kstreamd/kstreamd/graph"
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
