// Package runtime is the bottom layer of kstreamd: stream elements, bounded
// channels between subtasks, partitioners (forward, hash by key group,
// broadcast, rebalance), input gates that can block single input channels
// (used to hold back keyed input until broadcast inputs caught up, and later
// to align checkpoint barriers), the mailbox through which other goroutines
// hand work to a subtask goroutine, and the Job that owns every subtask
// goroutine.
//
// # Model
//
// A job is a DAG of operators; each operator runs as parallelism subtasks,
// one goroutine each. Subtask outputs are connected to the downstream
// subtasks' input gates by bounded channels (capacity ChannelCapacity, or
// BatchChannelCapacity for the job's batching writers): a slow subtask
// back-pressures its upstream and nothing is ever dropped. A stream element
// is a record, a batch of records, a watermark, a checkpoint barrier, a
// caught-up marker or end-of-input; control elements are always sent to
// every downstream channel, whatever the partitioner. The job's writers send
// records in batches (Flink's network buffers, without its buffer timeout):
// a batch goes when full, before any control element on its channel, and
// when the emitting subtask is about to block (a source after each poll, an
// operator task when its input is empty): a record waits at most until its
// subtask has handled what it already had at hand.
//
// # Shutdown
//
// Job.Run stops softly, then hard: when its context ends only the sources are
// told to stop; each source emits end-of-input, every subtask finishes its
// in-flight records, forwards end-of-input and returns. If that takes longer
// than the drain timeout, or any subtask fails, every subtask's context is
// cancelled.
//
// The package follows the structure of Apache Flink's task runtime
// (StreamTask, InputGate, RecordWriter, MailboxExecutor) without its
// network stack: all subtasks live in one process.
package runtime
