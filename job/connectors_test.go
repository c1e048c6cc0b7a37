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
