// Package sink writes a stream's records to Kafka.
//
// Delivery "exactly-once" is the generic two-phase-commit sink
// (connector.TwoPhaseCommitSink, built by the job) over a KafkaCommitter of
// a KafkaTxnCommitter: one Kafka transaction per sink subtask and
// checkpoint epoch, pre-committed on the checkpoint barrier and committed
// when the checkpoint completes; RecoverTransactions commits the restored
// committables and fences the sink's other transactional ids before the
// subtasks start (those of the configured prefix and of every prefix the
// committables were written under), so a read_committed reader sees every
// record once.
// "at-least-once" (KafkaSink) produces with acks=all and franz-go's
// idempotent producer and flushes on every barrier: after a crash, records
// produced after the last completed checkpoint are produced again.
// BufferingSink adds a buffer kept in operator state to it, also
// at-least-once. "none" produces without waiting for acknowledgements and
// ignores failures (fire and forget).
package sink
