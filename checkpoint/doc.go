// Package checkpoint takes consistent checkpoints of a running job and finds
// them again, following Apache Flink's design: the Coordinator triggers
// checkpoint n at the sources, which emit barrier n right after the records
// their snapshot covers; every task aligns barrier n over its inputs,
// snapshots, acknowledges and forwards it; once every task acknowledged, the
// coordinator writes the checkpoint's metadata file atomically (temp file,
// fsync, rename, fsync of the directory) — that rename is the commit point —
// and notifies every task, so sinks commit and sources commit offsets.
//
// # Storage layout
//
//	<dir>/<job>/chk-<n>/_metadata             the commit point (JSON, FORMAT.md)
//	<dir>/<job>/chk-<n>/<operator>/<subtask>/ files a subtask wrote for n
//	<dir>/<job>/shared/                        incremental files referenced by several checkpoints
//	<savepoint dir>/savepoint-<n>-<unix>/      a self-contained savepoint, same inside
//
// Storage keeps the newest Retained completed checkpoints, deletes older
// ones and any chk-<n> without metadata (a half-written checkpoint is never
// restored), and deletes a shared file once no retained checkpoint refers to
// it. Savepoints are never deleted by retention, nor is a checkpoint the
// job restored explicitly (Protect) while the job runs.
//
// # Restoring another job's checkpoint
//
// Any retained checkpoint or savepoint restores for any job name and
// checkpoints dir: Verify checks it before anything is read (subtask
// states, an exactly-once sink's committables, file presence and sizes),
// and AdoptShared links its shared files, found where its metadata's
// shared_dir says, into the restoring job's shared directory (FORMAT.md).
//
// # Restore and rescaling
//
// Redistribute* compute what each subtask of a new parallelism restores:
// keyed state by key-group range (Flink's KeyGroupRangeAssignment), operator
// list state by even-split or union redistribution (Flink's
// RoundRobinOperatorStateRepartitioner), broadcast state by copy (scale-up
// subtasks take old copies round-robin).
package checkpoint
