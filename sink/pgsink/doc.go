// Package pgsink writes a stream's records as rows of a PostgreSQL table
// (the sink type postgres), after Flink's JDBC sink
// (org.apache.flink.connector.jdbc: JdbcSink, and JdbcXaSinkFunction for
// exactly-once), with pgx.
//
// # Rows
//
// Each column is a field of the record's JSON value (a gjson path), the
// key, the timestamp, the whole value, or an expression over the record;
// values travel as text and PostgreSQL casts them to the column's type.
// In mode insert every record appends a row; in mode upsert +I and +U are
// INSERT ... ON CONFLICT (key columns) DO UPDATE, -D deletes the row of
// its key, and -U is ignored (the +U after it replaces the row), so a
// changelog (an aggregate's, a join's, a table source's) keeps the table
// equal to the stream's table. Changes are buffered and written
// batch_size rows per statement, each column one text[] parameter
// unnested into rows (INSERT ... SELECT ... FROM unnest($1::text[], ...)):
// one statement text for every batch, prepared once per connection. The
// batch keeps the last change of each key (deletes first, then upserts),
// as an upsert may not touch one row twice.
//
// # Exactly once
//
// With delivery exactly-once each subtask writes the records of a
// checkpoint epoch in one database transaction (begun with the epoch's
// first write), prepared at the checkpoint barrier with PREPARE
// TRANSACTION '<job>:<uid>-<subtask>-<checkpoint>' (uid: the sink's
// uid, its name unless it sets one; the gid is the
// subtask's committable in the checkpoint, connector.TwoPhaseCommitSink)
// and committed with COMMIT PREPARED when the checkpoint completes. Before
// the subtasks of a (re)started job open, Recover commits every gid of the
// restored checkpoint and rolls back every other prepared transaction of
// the sink in the database (found in pg_prepared_xacts by the gid prefix
// "<job>:<uid>-"), those of subtasks a rescale removed included. The
// server needs max_prepared_transactions of at least the sink's
// parallelism times two (an epoch prepared while the one before awaits
// its commit); PREPARE TRANSACTION refuses transactions that touched
// temporary tables, which is why the batches are not staged in one.
//
// With delivery at-least-once each batch is its own transaction, and every
// barrier writes the batch before the checkpoint is acknowledged; after a
// failure the records since the checkpoint are written again (idempotent
// in mode upsert).
//
// A database that is unreachable is retried with exponential back-off
// (min_backoff to max_backoff), each retry logged and counted
// (kstreamd_postgres_sink_retries_total, kstreamd_postgres_sink_up); no
// record is skipped. A connection lost inside an exactly-once epoch's
// transaction loses that transaction: the subtask fails and the job
// restarts from its last checkpoint.
package pgsink
