package pipeline

import (
	"testing"
)

// TestPlanUpdateAfterOnly checks which aggregates the planner asks for no
// -U rows (graph.Operator.UpdateAfterOnly, Flink's ONLY_UPDATE_AFTER):
// those whose every reader is an upsert kafka sink, directly or through
// unkeyed filters and maps (Nexmark q17's shape), and none that a header
// sink, a retracting aggregate, or nothing at all reads.
func TestPlanUpdateAfterOnly(t *testing.T) {
	agg := func(name, input string) string {
		return "  - name: " + name + "\n    type: aggregate\n    input: " + input + "\n    key_by: user\n    params:\n      aggregates: [{name: n, fn: count}]\n"
	}
	cfg, err := Parse("plan.yaml", []byte(planHead+`operators:
`+agg("q17", "clicks")+`  - name: q17_map
    type: map
    input: q17
    params: {value: '{"n": n}'}
`+agg("two_sinks", "clicks")+`  - name: big
    type: filter
    input: two_sinks
    params: {condition: n > 1}
  - name: big_map
    type: map
    input: big
    params: {value: '{"n": n}'}
`+agg("to_header", "clicks")+agg("mixed", "clicks")+agg("retracted", "clicks")+`  - name: kept
    type: filter
    input: retracted
    params: {condition: n > 0}
`+agg("again", "kept")+agg("unread", "clicks")+`sinks:
  - name: q17_out
    input: q17_map
    topic: q17
  - name: plain
    input: two_sinks
    topic: plain
  - name: mapped
    input: big_map
    topic: mapped
    changelog: upsert
  - name: header
    input: to_header
    topic: header
    changelog: header
  - name: mixed_upsert
    input: mixed
    topic: mixed_upsert
  - name: mixed_header
    input: mixed
    topic: mixed_header
    changelog: header
  - name: again_out
    input: again
    topic: again
`), planRegistry(t))
	if err != nil {
		t.Fatal(err)
	}
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"q17": true, "two_sinks": true, "again": true}
	seen := 0
	for _, o := range g.Operators {
		if o.Type != "aggregate" {
			if o.UpdateAfterOnly {
				t.Errorf("operator %s (type %s): UpdateAfterOnly true, want false", o.Name, o.Type)
			}
			continue
		}
		seen++
		if o.UpdateAfterOnly != want[o.Name] {
			t.Errorf("aggregate %s: UpdateAfterOnly %v, want %v", o.Name, o.UpdateAfterOnly, want[o.Name])
		}
	}
	if seen != 7 {
		t.Errorf("%d aggregates planned, want 7", seen)
	}
}
