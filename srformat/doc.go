// Package srformat holds the record formats framed for a Confluent-compatible
// Schema Registry: Avro, Protobuf and JSON Schema in the Confluent wire
// format (magic byte 0, a 4-byte big-endian schema id, and for Protobuf the
// message indexes), decoded into and encoded from the JSON record model
// every operator and expression sees (runtime.Record.Value holds one JSON
// value). It plays the part of Confluent's KafkaAvroDeserializer/
// KafkaAvroSerializer (and their Protobuf and JSON Schema siblings), or
// Flink's avro-confluent-registry format.
//
// A Registry is the shared, caching client of one schema_registry section
// (franz-go's pkg/sr): a schema id it cannot find is ErrSchemaNotFound; a
// registry that does not answer is retried with back-off until it does or
// the context ends, never skipped. A Decoder (one per source subtask) turns
// a framed value into JSON, failing with a *DecodeError whose Reason is
// ReasonSchemaNotFound or ReasonDecodeError; an Encoder (one per sink
// subtask) turns JSON into a framed value under a subject.
//
// The JSON shape of each format is documented on Avro, Protobuf and
// JSONSchema (README.md, "Formats").
package srformat
