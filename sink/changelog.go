package sink

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/runtime"
)

// ChangelogMode is how a sink writes a changelog stream (records whose
// runtime.Record.Change is not an insert) to Kafka.
type ChangelogMode uint8

const (
	// ChangelogUpsert (the default, the zero value) writes upserts keyed by
	// the record key, Kafka's compacted-topic convention (Flink's
	// upsert-kafka sink, Kafka Streams' KTable#toStream to a compacted
	// topic): +I and +U are written as they are, -U is dropped (the +U that
	// follows it replaces the row), -D is written as a tombstone (the key
	// with a null value). An append-only stream is written unchanged.
	ChangelogUpsert ChangelogMode = iota
	// ChangelogHeader writes every record, -U included, with its kind in
	// the runtime.ChangeHeader header ("+I", "-U", "+U" or "-D"; a -D keeps
	// its value), so that a reader (a source with changelog: header, or a
	// cluster-mode repartition source) gets the changelog back exactly.
	ChangelogHeader
	// ChangelogUpsertHeader writes an upsert changelog (a table's: +U per
	// upsert without the -U of the row it replaces, -D per tombstone) as
	// ChangelogHeader does, and marks every record with the
	// runtime.ChangelogModeHeader header (value
	// runtime.UpsertChangelogMode), so that a source reading the topic as a
	// full changelog (changelog: header) refuses it instead of taking each
	// +U for an update whose old row was retracted.
	ChangelogUpsertHeader
)

// encodesValue reports whether the sink's format encodes rec's value as
// mode writes it: not for a null value, nor for an upsert sink's -D (it is
// written as a tombstone, whatever its value).
func encodesValue(mode ChangelogMode, rec *runtime.Record) bool {
	return rec.Value != nil && !(mode == ChangelogUpsert && rec.Change == runtime.ChangeDelete)
}

// changelogRecord fills kr's key, value and headers from rec as mode
// writes it, and reports false when mode drops rec (an upsert sink's -U).
func changelogRecord(mode ChangelogMode, kr *kgo.Record, rec *runtime.Record) bool {
	kr.Key, kr.Value, kr.Timestamp = rec.Key, rec.Value, rec.Timestamp
	if mode != ChangelogUpsert {
		kr.Headers = make([]kgo.RecordHeader, 0, len(rec.Headers)+2)
		for _, h := range rec.Headers {
			// one kind per record, the record's own, and the stream's mode
			if h.Key != runtime.ChangeHeader && h.Key != runtime.ChangelogModeHeader {
				kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
			}
		}
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: runtime.ChangeHeader, Value: []byte(rec.Change.String())})
		if mode == ChangelogUpsertHeader {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: runtime.ChangelogModeHeader, Value: []byte(runtime.UpsertChangelogMode)})
		}
		return true
	}
	kr.Headers = kafkaHeaders(rec.Headers)
	switch rec.Change {
	case runtime.ChangeUpdateBefore:
		return false
	case runtime.ChangeDelete:
		kr.Value = nil // a tombstone
	}
	return true
}

// String returns the config spelling: "upsert", "header" or
// "upsert_header".
func (m ChangelogMode) String() string {
	switch m {
	case ChangelogHeader:
		return "header"
	case ChangelogUpsertHeader:
		return "upsert_header"
	}
	return "upsert"
}
