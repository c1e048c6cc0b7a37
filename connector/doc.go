// Package connector is the seam between a job and the systems it reads and
// writes: registries of source, sink and format types, on the pattern of
// the operator registry (operators.Factory, after benthos' ConfigSpec and
// Flink's DynamicTableSourceFactory/DynamicTableSinkFactory and
// DeserializationSchema/SerializationSchema).
//
// A source type (SourceFactory) reads records and owns the encoding and
// decoding of the splits it checkpoints (Flink's SourceSplit and its
// SimpleVersionedSerializer). A sink type (SinkFactory) writes records,
// declares the deliveries it supports and recovers its own committables
// at restore (Flink's Committer of a TwoPhaseCommittingSink). A format type
// (FormatFactory) decodes a source record's bytes into the record model
// operators see (a JSON value, or text) and encodes a record at the sink.
//
// Every type's params are decoded strictly by the pipeline from the
// type's params schema (a struct with yaml tags, as operator params), so a
// config error names FILE:LINE:COL. The registries are built by the
// program and handed down: there is no global registry. The built-in types
// are Kafka (source and sink, the default type) and the formats json,
// string and bytes.
//
// Committables: an exactly-once sink keeps its pre-committed transactions
// in its operator list state CommittablesState, each entry an envelope
// naming the sink type and holding the type's own bytes
// (EncodeCommittable); a restore hands every entry of a sink to its type's
// Recover. Checkpoints written before the envelope (metadata versions 1
// and 2) hold Kafka committables under the state LegacyKafkaCommittables;
// DecodeCommittables reads both.
package connector
