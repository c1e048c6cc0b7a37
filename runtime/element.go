package runtime

import (
	"fmt"
	"time"
)

// ElementKind tells what a stream Element carries.
type ElementKind uint8

const (
	// KindRecord is a data record.
	KindRecord ElementKind = iota
	// KindWatermark carries event-time progress: no later record on this
	// channel has a timestamp at or before Watermark.
	KindWatermark
	// KindBarrier is checkpoint barrier CheckpointID (Flink's CheckpointBarrier).
	KindBarrier
	// KindCaughtUp says the upstream source subtask has read every partition
	// up to the end offsets it saw at start (the broadcast bootstrap marker).
	KindCaughtUp
	// KindEndOfInput says the upstream subtask will send nothing more.
	KindEndOfInput
)

// String returns the kind's lowercase name.
func (k ElementKind) String() string {
	switch k {
	case KindRecord:
		return "record"
	case KindWatermark:
		return "watermark"
	case KindBarrier:
		return "barrier"
	case KindCaughtUp:
		return "caught-up"
	case KindEndOfInput:
		return "end-of-input"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Record is one data record flowing between subtasks.
type Record struct {
	// Key is the serialized key of a keyed stream (the bytes key groups are
	// computed from), or the Kafka record key elsewhere; may be nil.
	Key []byte
	// Value is the payload, JSON for the built-in operators.
	Value []byte
	// Timestamp is the record's event time (the Kafka record timestamp at
	// the source).
	Timestamp time.Time
	// Origin says where the record was read from, for error reports.
	Origin Origin
}

// Origin is the Kafka position a record was read from. Zero for records
// produced by an operator.
type Origin struct {
	Topic     string
	Partition int32
	Offset    int64
}

// String formats the origin as topic/partition@offset.
func (o Origin) String() string { return fmt.Sprintf("%s/%d@%d", o.Topic, o.Partition, o.Offset) }

// Element is what travels over a channel: a record or a control element.
// Only the fields of its Kind are meaningful.
type Element struct {
	Kind         ElementKind
	Record       Record    // KindRecord
	Watermark    time.Time // KindWatermark
	CheckpointID int64     // KindBarrier
}
