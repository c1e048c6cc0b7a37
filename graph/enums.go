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
