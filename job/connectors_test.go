package job

import (
	"testing"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/sink"
	"github.com/kstreamd/kstreamd/source"
)

func TestSourceFormat(t *testing.T) {
	for _, tc := range []struct {
		in   graph.Format
		want source.Format
	}{
		{"", source.FormatJSON},
		{graph.FormatJSON, source.FormatJSON},
		{graph.FormatString, source.FormatString},
		{graph.FormatBytes, source.FormatBytes},
		{"xml", source.FormatString}, // unvalidated: unchecked, as before
	} {
		if got := sourceFormat(tc.in); got != tc.want {
			t.Errorf("sourceFormat(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, f := range graph.Formats() {
		if got := sourceFormat(f); string(got) != f.String() {
			t.Errorf("sourceFormat(%q) = %q: the source's spelling differs from graph's", f, got)
		}
	}
}

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
		"": sink.ChangelogUpsert, graph.ChangelogUpsert: sink.ChangelogUpsert, graph.ChangelogHeader: sink.ChangelogHeader,
	} {
		if got := sinkChangelog(in); got != want {
			t.Errorf("sinkChangelog(%q) = %v, want %v", in, got, want)
		}
	}
}
