// Package filesink writes a stream's records to part files in a local
// directory or an S3-compatible object store, exactly once, after Flink's
// FileSink (org.apache.flink.connector.file.sink.FileSink).
//
// # Part files
//
// Each sink subtask writes the records of every bucket (a sub-directory
// chosen per record by a BucketAssigner: a time pattern or an expression)
// into one in-progress part file per bucket. A part file moves through
// three states, as in Flink:
//
//   - in-progress: being written. Locally it is the hidden file
//     <bucket>/.<part>.inprogress beside its final name; for an object
//     store it is a local spool file (Config.SpoolDir) that never reaches
//     the bucket.
//   - pending: closed and durable, named in a Committable but not yet
//     visible: the hidden file or object <bucket>/.<part>.pending. A part
//     becomes pending when the rolling policy rolls it (size, age,
//     inactivity) or, at the latest, when a checkpoint barrier reaches the
//     subtask (every checkpoint closes every in-progress part: Flink's
//     OnCheckpointRollingPolicy, which bulk formats such as Parquet need
//     anyway).
//   - finished: published under its final name <bucket>/<part> when the
//     checkpoint whose barrier made it pending completes: a rename (link)
//     in a directory, a server-side copy then a delete of the pending
//     object in a bucket. Either publishes the whole file at once.
//
// Part names are <part_prefix>-<run>-<subtask>-<n><part_suffix>: run is a
// random id drawn by each start of the subtask, so no start ever reuses a
// name an earlier one published.
//
// # Exactly once
//
// The sink is a two-phase-commit sink (Flink's TwoPhaseCommitSinkFunction,
// here Sink): pre-commit is "make every part pending and record its
// Committable in the checkpoint"; commit is "publish". Recover runs before
// the subtasks of a restored job start: it publishes every committable the
// restored checkpoint holds (again harmlessly when an earlier start already
// did) and then deletes every in-progress and pending part of the sink left
// in the output, which holds only records after the checkpoint, to be
// written again. So a reader that ignores names starting with "." sees
// every record exactly once.
package filesink
