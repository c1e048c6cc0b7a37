package graph

import "testing"

// TestChained: an edge is chained only when it is a forward edge from an
// operator's main output to the only input of an operator of the same
// parallelism, with chaining on for the job and for both operators and no
// async state downstream; sources, sinks, side outputs, hash, rebalance
// and broadcast edges and fan-in are never chained.
func TestChained(t *testing.T) {
	mk := func(mod func(g *Graph)) *Graph {
		g := &Graph{
			Sources: []*Source{{Name: "src", Parallelism: 2}},
			Operators: []*Operator{
				{Name: "f", Parallelism: 2}, {Name: "m", Parallelism: 2}, {Name: "k", Parallelism: 2},
			},
			Sinks: []*Sink{{Name: "out", Input: "k", Parallelism: 2}},
			Edges: []Edge{
				{From: "src", To: "f", Kind: Forward}, {From: "f", To: "m", Kind: Forward},
				{From: "m", To: "k", Kind: Forward}, {From: "k", To: "out", Kind: Forward},
			},
		}
		if mod != nil {
			mod(g)
		}
		return g
	}
	chained := func(g *Graph) (out []bool) {
		for _, e := range g.Edges {
			out = append(out, g.Chained(e))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		mod  func(g *Graph)
		want []bool
	}{
		{"default", nil, []bool{false, true, true, false}},
		{"job off", func(g *Graph) { g.DisableChaining = true }, []bool{false, false, false, false}},
		{"operator off", func(g *Graph) { g.Operators[1].DisableChaining = true }, []bool{false, false, false, false}},
		{"async state", func(g *Graph) { g.Operators[2].AsyncState = true }, []bool{false, true, false, false}},
		{"hash", func(g *Graph) { g.Edges[2].Kind = Hash }, []bool{false, true, false, false}},
		{"rebalance", func(g *Graph) { g.Edges[1].Kind = Rebalance }, []bool{false, false, true, false}},
		{"side output", func(g *Graph) { g.Edges[1].Output = "late" }, []bool{false, false, true, false}},
		{"parallelism", func(g *Graph) { g.Operators[2].Parallelism = 3 }, []bool{false, true, false, false}},
		{"broadcast side", func(g *Graph) { g.Operators[2].Broadcast = "rules" }, []bool{false, true, false, false}},
		{"fan-in", func(g *Graph) {
			g.Edges = append(g.Edges, Edge{From: "f", To: "k", Kind: Forward})
		}, []bool{false, true, false, false, false}},
		{"fan-out", func(g *Graph) {
			g.Operators = append(g.Operators, &Operator{Name: "n", Parallelism: 2})
			g.Edges = append(g.Edges, Edge{From: "f", To: "n", Kind: Forward})
		}, []bool{false, true, true, false, true}},
	} {
		got := chained(mk(tc.mod))
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %v", tc.name, got)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: Chained(%s) = %v, want %v", tc.name, mk(tc.mod).Edges[i], got[i], tc.want[i])
			}
		}
	}
}
