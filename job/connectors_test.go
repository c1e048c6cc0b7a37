package job

import (
	"testing"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/sink"
)

func TestSinkDelivery(t *testing.T) {
	for _, tc := range []struct {
		in   graph.Delivery
		want sink.Delivery
	}{
		{"", sink.AtLeastOnce},
		{graph.DeliveryAtLeastOnce, sink.AtLeastOnce},
		{graph.DeliveryNone, sink.None},
	} {
		if got := sinkDelivery(tc.in); got != tc.want {
			t.Errorf("sinkDelivery(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSinkChangelog(t *testing.T) {
	for in, want := range map[graph.ChangelogMode]sink.ChangelogMode{
		"": sink.ChangelogUpsert, graph.ChangelogUpsert: sink.ChangelogUpsert, graph.ChangelogHeader: sink.ChangelogHeader, graph.ChangelogUpsertHeader: sink.ChangelogUpsertHeader,
	} {
		if got := sinkChangelog(in); got != want {
			t.Errorf("sinkChangelog(%q) = %v, want %v", in, got, want)
		}
	}
}
