// Package sink writes a stream's records to Kafka.
//
// This version delivers at-least-once: every record is produced with
// acks=all and franz-go's idempotent producer, and a sink subtask finishes
// only after every record it accepted was acknowledged by the broker. After a
// crash, records produced before it may be produced again when the job
// re-reads its input. The two-phase-commit (exactly-once) sink builds on the
// checkpoints of a later version. Delivery "none" produces without waiting
// for acknowledgements and ignores failures (fire and forget).
package sink
