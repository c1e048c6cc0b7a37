// Package source is kstreamd's Kafka source, modelled on Apache Flink's
// KafkaSource: it reads every partition of a topic without a consumer group.
// The partitions (Flink's splits) are discovered at start and assigned to the
// source subtasks by the engine with Flink's KafkaSourceEnumerator rule
// (AssignPartition), so two subtasks never read the same partition.
//
// Each subtask decodes record values (JSON), extracts the key field a keyed
// downstream operator asks for, and emits runtime records. A malformed record
// (not JSON, not a JSON object when a key is needed, key field missing) is
// skipped, counted in kstreamd_source_records_skipped_total{source,reason} and
// logged (rate-limited) with topic, partition and offset; later records still
// flow.
//
// # Bootstrap
//
// At start every subtask reads the end offsets (last stable offsets) of its
// partitions; once it has read up to them it emits a runtime.KindCaughtUp
// marker downstream. A keyed broadcast operator holds its keyed input until
// every broadcast channel caught up, so items are never judged against a
// half-loaded rule set.
//
// # Unavailable partitions
//
// A subtask makes no blocking request before it reads: the start offsets
// it must look up and the end offsets it catches up to are listed per
// partition, in the background, each failing partition backing off on its
// own. A partition without a leader (or whose lookup or fetch fails with a
// retriable error) is marked unavailable, logged, counted in
// kstreamd_source_partitions_unavailable{source} and reported by
// KafkaSource.Readiness, while the subtask reads its other partitions and
// takes its checkpoint barriers; the unavailable partition's offset stays
// where it was in each checkpoint.
package source
