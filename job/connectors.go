package job

import (
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/sink"
	"github.com/kstreamd/kstreamd/source"
)

// sourceFormat maps a graph source's format to the Kafka source's (the
// two packages do not import each other; this is where they meet). ""
// (a graph built in code) is the default, JSON. A value outside
// graph.Formats, which only a graph built in code without validation can
// hold, passes values unchecked as FormatString does, as it always did.
func sourceFormat(f graph.Format) source.Format {
	switch f {
	case "", graph.FormatJSON:
		return source.FormatJSON
	case graph.FormatBytes:
		return source.FormatBytes
	default:
		return source.FormatString
	}
}

// sinkDelivery maps the delivery of a graph sink that is not exactly-once
// (those get a TwoPhaseCommitSink instead) to the Kafka sink's: none, or
// at-least-once for every other value ("" included), as it always did.
func sinkDelivery(d graph.Delivery) sink.Delivery {
	if d == graph.DeliveryNone {
		return sink.None
	}
	return sink.AtLeastOnce
}

// sinkChangelog maps a graph sink's changelog mode to the sink's:
// ChangelogHeader to sink.ChangelogHeader, anything else (the default
// upsert) to sink.ChangelogUpsert.
func sinkChangelog(m graph.ChangelogMode) sink.ChangelogMode {
	if m == graph.ChangelogHeader {
		return sink.ChangelogHeader
	}
	return sink.ChangelogUpsert
}
