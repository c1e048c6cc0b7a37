package pipeline

import (
	"testing"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/operators"
)

// TestStatelessParams decodes the params of filter, flat_map and map
// (expressions, a headers mapping, a list) and plans a key_by expression
// into an expression key selector on its hash edge.
func TestStatelessParams(t *testing.T) {
	cfg, err := Load("testdata/stateless.good.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	params := map[string]any{}
	for _, op := range g.Operators {
		params[op.Name] = op.Params
	}
	if p := params["big"].(*operators.FilterParams); p.Condition.String() != "amount > 100 && currency == 'EUR'" {
		t.Errorf("filter condition = %q", p.Condition.String())
	}
	if p := params["lines"].(*operators.FlatMapParams); p.Values.String() != "lines.map(l, {'order': id, 'sku': l.sku})" {
		t.Errorf("flat_map values = %q", p.Values.String())
	}
	m := params["project"].(*operators.MapParams)
	if m.Value.String() != `{"order": order, "sku": sku}` || m.Key.String() != "sku" ||
		len(m.Headers) != 2 || m.Headers["x-order"].String() != "string(order)" || m.Headers["x-source"].String() != "'kstreamd'" ||
		len(m.DropHeaders) != 1 || m.DropHeaders[0] != "trace" {
		t.Errorf("map params = value %q key %q headers %v drop %v", m.Value, m.Key, m.Headers, m.DropHeaders)
	}
	var hash *graph.Edge
	for i, e := range g.Edges {
		if e.To == "by_country" {
			hash = &g.Edges[i]
		}
	}
	if hash == nil || hash.Kind != graph.Hash || hash.KeyBy != "headers['x-source'] + '/' + sku" {
		t.Fatalf("edge into by_country = %+v, want a hash edge keyed by the expression", hash)
	}
	if _, ok := hash.Key.(*operators.ExpressionKeySelector); !ok {
		t.Errorf("key selector %T, want *operators.ExpressionKeySelector", hash.Key)
	}
}
