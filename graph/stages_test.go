package graph

import "testing"

// TestSplitUnits: the unit count must be in [1, max parallelism].
func TestSplitUnits(t *testing.T) {
	g := &Graph{Job: "j", MaxParallelism: 8}
	for _, tc := range []struct {
		units int
		err   string
	}{
		{0, "graph: 0 units: must be in [1, 8] (the max parallelism)"},
		{9, "graph: 9 units: must be in [1, 8] (the max parallelism)"},
		{8, ""},
	} {
		_, err := Split(g, tc.units)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.err {
			t.Errorf("Split(%d units): %q, want %q", tc.units, got, tc.err)
		}
	}
	if got, want := RepartitionTopic("clicks", 2), "clicks-2-repartition"; got != want {
		t.Errorf("RepartitionTopic = %q, want %q", got, want)
	}
}
