package graph

// Format is how a source decodes its record values and a sink encodes
// them (the config's sources[].format and sinks[].format): the name of a
// registered format (connector.Registry), of which Formats are the
// built-in ones. The pipeline decodes it from YAML and validates it
// against the registry, so the packages below see only registered names.
type Format string

// Formats of a source.
const (
	// FormatJSON: every value is one JSON value (objects, arrays,
	// scalars); anything else is a bad record with reason malformed_json.
	FormatJSON Format = "json"
	// FormatString: values pass through unchecked as text.
	FormatString Format = "string"
	// FormatBytes: values pass through unchecked as opaque bytes
	// (expressions see them as a string).
	FormatBytes Format = "bytes"
)

// DefaultFormat is the format of a source that names none: FormatJSON.
const DefaultFormat = FormatJSON

// Formats returns every Format, in the order messages and the README list
// them.
func Formats() []Format { return []Format{FormatJSON, FormatString, FormatBytes} }

// String returns the config spelling of f, e.g. "json".
func (f Format) String() string { return string(f) }

// Valid reports whether f is one of Formats.
func (f Format) Valid() bool {
	switch f {
	case FormatJSON, FormatString, FormatBytes:
		return true
	}
	return false
}

// Delivery is a sink's delivery guarantee (the config's sinks[].delivery),
// decoded and validated by the pipeline like Format.
type Delivery string

// Deliveries of a sink.
const (
	// DeliveryExactlyOnce writes one Kafka transaction per checkpoint
	// epoch, committed when the checkpoint completes (Flink's
	// TwoPhaseCommitSinkFunction / KafkaSink with
	// DeliveryGuarantee.EXACTLY_ONCE): read_committed readers see every
	// record once. It needs checkpoints.
	DeliveryExactlyOnce Delivery = "exactly-once"
	// DeliveryAtLeastOnce waits for the broker's acknowledgement of every
	// record (acks=all); after a failure some records may be written
	// twice.
	DeliveryAtLeastOnce Delivery = "at-least-once"
	// DeliveryNone fires and forgets: records may be lost.
	DeliveryNone Delivery = "none"
)

// DefaultDelivery is the delivery of a sink that names none:
// DeliveryAtLeastOnce.
const DefaultDelivery = DeliveryAtLeastOnce

// Deliveries returns every Delivery, in the order messages and the README
// list them.
func Deliveries() []Delivery {
	return []Delivery{DeliveryExactlyOnce, DeliveryAtLeastOnce, DeliveryNone}
}

// String returns the config spelling of d, e.g. "exactly-once".
func (d Delivery) String() string { return string(d) }

// Valid reports whether d is one of Deliveries.
func (d Delivery) Valid() bool {
	switch d {
	case DeliveryExactlyOnce, DeliveryAtLeastOnce, DeliveryNone:
		return true
	}
	return false
}

// ExactlyOnce reports whether d is DeliveryExactlyOnce: the sink is a
// two-phase-commit sink whose committables are checkpointed.
func (d Delivery) ExactlyOnce() bool { return d == DeliveryExactlyOnce }

// ChangelogMode is how a sink writes a changelog stream (the config's
// sinks[].changelog) and, for ChangelogHeader and ChangelogUpsertHeader
// only, how a source reads one back (sources[].changelog), decoded and
// validated by the pipeline like Format.
type ChangelogMode string

// Changelog modes.
const (
	// ChangelogUpsert writes upserts keyed by the record key, Kafka's
	// compacted-topic convention (Flink's upsert-kafka): +I and +U as
	// values, -U dropped, -D as a tombstone (a null value). An append-only
	// stream is written unchanged.
	ChangelogUpsert ChangelogMode = "upsert"
	// ChangelogHeader writes every record with its change kind in the
	// kstreamd-change header (runtime.ChangeHeader); a source with
	// changelog: header reads it back as a changelog.
	ChangelogHeader ChangelogMode = "header"
	// ChangelogUpsertHeader is header mode for an upsert changelog (a
	// table's: +U per upsert without the -U of the row it replaces, -D per
	// tombstone). A source with changelog: upsert_header reads such a topic
	// back as an upsert changelog (Flink's upsert-kafka, with the kinds in
	// a header), which an aggregate refuses (changelog_normalize first); a
	// source with changelog: header reads a full changelog (Flink's kafka
	// connector with a changelog format such as debezium-json). A sink is
	// not configured with it: the planner writes a changelog: header
	// sink whose input is an upsert changelog in this mode, which adds
	// the runtime.ChangelogModeHeader header to every record so that a
	// changelog: header reader refuses it.
	ChangelogUpsertHeader ChangelogMode = "upsert_header"
)

// DefaultChangelogMode is the changelog mode of a sink that names none:
// ChangelogUpsert, so that a job writing an aggregate writes one record
// per update, as before changelogs existed.
const DefaultChangelogMode = ChangelogUpsert

// ChangelogModes returns every ChangelogMode, in the order messages and
// the README list them.
func ChangelogModes() []ChangelogMode { return []ChangelogMode{ChangelogUpsert, ChangelogHeader} }

// SourceChangelogModes returns the modes a source reads a changelog in
// (sources[].changelog): ChangelogHeader (a full changelog) and
// ChangelogUpsertHeader (an upsert changelog).
func SourceChangelogModes() []ChangelogMode {
	return []ChangelogMode{ChangelogHeader, ChangelogUpsertHeader}
}

// String returns the config spelling of m, e.g. "upsert".
func (m ChangelogMode) String() string { return string(m) }
