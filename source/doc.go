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
package source
