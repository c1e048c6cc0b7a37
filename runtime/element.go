package runtime

import (
	"fmt"
	"sync"
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
	// KindBarrier is a checkpoint barrier (Flink's CheckpointBarrier); see
	// Element.Barrier.
	KindBarrier
	// KindCaughtUp says the upstream source subtask has read every partition
	// up to the end offsets it saw at start (the broadcast bootstrap marker).
	KindCaughtUp
	// KindEndOfInput says the upstream subtask will send nothing more.
	KindEndOfInput
	// KindRecords is a batch of data records (Element.Batch), in the order
	// they were emitted: what a batching Writer sends (WithBatching).
	KindRecords
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
	case KindRecords:
		return "records"
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
	// Headers are the Kafka record headers, in order (keys may repeat).
	// They travel from the source through every operator to the sink; an
	// operator may set or drop them. Shared read-only: an operator that
	// changes them copies the slice first.
	Headers []Header
	// Origin says where the record was read from, for error reports.
	// Operators keep the Origin of the input record an output derives from.
	Origin Origin
	// Format says what Value holds: FormatJSON (the zero value: one JSON
	// value), or FormatText for a value passed through as is (a source of
	// format string or bytes); expressions then see the value as a string.
	// An operator that builds a new value from JSON sets FormatJSON.
	Format Format
	// Change is the kind of change the record carries on a changelog
	// stream (Flink's RowKind): ChangeInsert (the zero value, and every
	// record of an append-only stream), ChangeUpdateBefore (retracts the
	// value an update replaces; Value holds that old value),
	// ChangeUpdateAfter (the new value of an update) or ChangeDelete
	// (retracts the row; Value holds the deleted value, or is nil when the
	// producer does not know it, as for a tombstone of a table source).
	// An update travels as two records, -U then +U, so that a re-key sends
	// the retraction to the old key's subtask and the addition to the new
	// key's, as in Flink's retract streams.
	Change ChangeKind
	// decoded is Value as an operator of the same chain decoded it
	// (SetDecoded), nil when none did.
	decoded *decodedValue
}

// decodedValue is a decoded form of the Value whose bytes start at of and
// are n long.
type decodedValue struct {
	of *byte
	n  int
	v  any
}

// SetDecoded attaches v, the decoded form of r.Value (the expressions'
// JSON decoding: whatever the operators' record environment makes of
// it), so that the next operator of the chain reuses it instead of
// decoding Value again (one decode per record per chain). It is tied to
// the bytes of r.Value: once an operator gives the record another Value,
// Decoded no longer returns it, so an operator that copies a record and
// changes its value needs no care. The value v is shared read-only by the
// operators downstream in the chain; a Writer drops it (all but
// ValidJSON, which it sends as a mark tied to no bytes), so it never
// crosses a channel.
func (r *Record) SetDecoded(v any) {
	d := &decodedValue{n: len(r.Value), v: v}
	if len(r.Value) > 0 {
		d.of = &r.Value[0]
	}
	r.decoded = d
}

// Decoded returns the decoded form of r.Value an operator upstream in the
// chain attached (SetDecoded) and true, or nil and false when none did or
// r.Value changed since.
func (r *Record) Decoded() (any, bool) {
	d := r.decoded
	if d == nil || d.n != len(r.Value) || (d.n > 0 && d.of != &r.Value[0]) {
		return nil, false
	}
	return d.v, true
}

// ChangeKind is the kind of change a changelog record carries (Flink's
// org.apache.flink.types.RowKind; Kafka Streams' KTable Change holds the
// old and new value in one record instead).
type ChangeKind uint8

const (
	// ChangeInsert (+I) adds a row; every record of an append-only stream
	// is an insert.
	ChangeInsert ChangeKind = iota
	// ChangeUpdateBefore (-U) retracts the value an update replaces; it is
	// followed by the ChangeUpdateAfter of the same update.
	ChangeUpdateBefore
	// ChangeUpdateAfter (+U) is the new value of an update (or, on an
	// upsert stream without -U, the latest value for its key).
	ChangeUpdateAfter
	// ChangeDelete (-D) removes a row.
	ChangeDelete
)

// String returns Flink's short form: "+I", "-U", "+U" or "-D".
func (c ChangeKind) String() string {
	switch c {
	case ChangeInsert:
		return "+I"
	case ChangeUpdateBefore:
		return "-U"
	case ChangeUpdateAfter:
		return "+U"
	case ChangeDelete:
		return "-D"
	}
	return fmt.Sprintf("change(%d)", uint8(c))
}

// Retracts reports whether the change removes a value from an aggregate:
// -U and -D.
func (c ChangeKind) Retracts() bool { return c == ChangeUpdateBefore || c == ChangeDelete }

// Format is what a record's Value holds.
type Format uint8

const (
	// FormatJSON: the value is one JSON value (the default).
	FormatJSON Format = iota
	// FormatText: the value is opaque text or bytes, never decoded as JSON.
	FormatText
)

// Header is one Kafka record header (Kafka's Header: a string key and
// opaque bytes).
type Header struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
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
	Kind      ElementKind
	Record    Record    // KindRecord
	Watermark time.Time // KindWatermark
	// Idle, on a KindWatermark element, is the idle status instead of a
	// watermark (Flink's WatermarkStatus.IDLE): the sender has no time to
	// report and must not hold its receivers' watermark back; it is active
	// again with its next record or watermark.
	Idle    bool
	Barrier *Barrier // KindBarrier; shared read-only by every receiver
	// Batch holds the records of a KindRecords element. The receiver owns
	// it and hands it back with Release once it processed the records.
	Batch *RecordBatch
}

// RecordBatch is the records of one KindRecords element. A batching Writer
// fills one per channel and sends it when it holds the writer's batch size,
// before any control element on that channel, and on Flush.
type RecordBatch struct {
	Records []Record
}

// batchPool holds the RecordBatches receivers released, for writers to
// fill again.
var batchPool = sync.Pool{New: func() any { return new(RecordBatch) }}

// newBatch returns an empty batch with room for n records.
func newBatch(n int) *RecordBatch {
	b := batchPool.Get().(*RecordBatch)
	if cap(b.Records) < n {
		b.Records = make([]Record, 0, n)
	}
	return b
}

// Release clears b (dropping its records' keys, values and headers) and
// returns it to the writers' pool; b must not be used afterwards.
func (b *RecordBatch) Release() {
	clear(b.Records)
	b.Records = b.Records[:0]
	batchPool.Put(b)
}

// Barrier is checkpoint barrier n with its options (Flink's
// CheckpointBarrier with CheckpointOptions). Every element a source emitted
// before barrier n is covered by checkpoint n, every later one is not.
type Barrier struct {
	// CheckpointID is n, increasing from 1 within a job's checkpoint history.
	CheckpointID int64
	// Timestamp is when the coordinator triggered the checkpoint.
	Timestamp time.Time
	// Savepoint marks a savepoint: self-contained, never deleted by the
	// retention of checkpoints.
	Savepoint bool
	// Dir is the absolute directory of this checkpoint's files; a subtask
	// writes its own files under Dir/<operator>/<subtask>/.
	Dir string
	// SharedDir is the absolute directory of files shared between
	// checkpoints (incremental keyed state), or "" when the snapshot must be
	// self-contained (savepoints, full checkpoints).
	SharedDir string
	// StopAfter asks sources to emit end-of-input right after this barrier
	// (stop-with-savepoint): nothing follows the barrier.
	StopAfter bool
	// Staging marks Dir and SharedDir as a local staging copy that is not
	// the checkpoint's durable copy: a cluster-mode unit's, uploaded to
	// the checkpoint store before its HEAD is written and wiped when the
	// unit starts (docs/scale-out.md). Files written there need no fsync.
	Staging bool
}
