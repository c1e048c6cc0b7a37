package pipeline

import (
	"errors"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/operators"
)

// rulesLimitsYAML is a rules job whose operator sets params (line 14 on).
func rulesLimitsYAML(params string) string {
	return `job:
  name: limits
kafka:
  embedded:
    enabled: true
sources:
  - name: events
    topic: events
  - name: rules
    topic: rules
operators:
  - name: fraud
    type: rules
    params:
` + params + `    input: events
    broadcast: rules
sinks:
  - {name: out, input: fraud, topic: out}
`
}

// TestRulesExpressionLimitParams: the rules operator's expression limits
// are strict params: a value below 1 and an unknown key are refused at
// their FILE:LINE:COL; a lowered max_expression_nodes makes the rules
// source's check refuse a rule the default limits accept (the planned
// source check follows the operator's params), and without params the
// defaults (200 nodes) apply.
func TestRulesExpressionLimitParams(t *testing.T) {
	for _, tc := range []struct{ name, params, want string }{
		{"cost zero", "      max_expression_cost: 0\n", "limits.yaml:15:7: operators[0].params.max_expression_cost: must be at least 1, got 0"},
		{"nodes negative", "      max_expression_nodes: -3\n", "limits.yaml:15:7: operators[0].params.max_expression_nodes: must be at least 1, got -3"},
		{"unknown", "      max_expression_size: 10\n", "limits.yaml:15:7: operators[0].params"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("limits.yaml", []byte(rulesLimitsYAML(tc.params)), nil)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to start %q", err, tc.want)
			}
		})
	}
	// 7 nodes: amount > 1 && amount < 100.
	rule := []byte(`{"id":"r","filter":"amount > 1 && amount < 100","aggregate":{"fn":"count"},"window":"1m","alert_when":"> 1"}`)
	check := func(params string) error {
		t.Helper()
		cfg, err := Parse("limits.yaml", []byte(rulesLimitsYAML(params)), nil)
		if err != nil {
			t.Fatal(err)
		}
		g, err := cfg.Plan()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range g.Sources {
			if s.Name == "rules" {
				return s.Check(nil, rule)
			}
		}
		t.Fatal("no rules source in the plan")
		return nil
	}
	if err := check("      max_expression_nodes: 5\n"); !errors.Is(err, operators.ErrBadRuleRecord) || !strings.Contains(err.Error(), `bad rule "r": filter: `) {
		t.Fatalf("max_expression_nodes 5: check gave %v, want the filter refused", err)
	}
	if err := check("      max_expression_nodes: 200\n"); err != nil {
		t.Fatalf("max_expression_nodes 200: check refused the rule: %v", err)
	}
	if err := check("      rule_time: processing\n"); err != nil {
		t.Fatalf("default limits: check refused the rule: %v", err)
	}
}
