package sink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/kafkaretry"
	"github.com/kstreamd/kstreamd/runtime"
)

// DefaultPoolSize is the smallest default number of transactional ids per
// sink subtask (Flink's FlinkKafkaProducer kafkaProducersPoolSize); see
// PoolSizeFor for the default a job gets.
const DefaultPoolSize = 5

// MaxPoolSize is the largest pool of transactional ids per sink subtask
// (sinks[].pool_size is refused above it).
const MaxPoolSize = 100

// PoolSizeFor returns the default pool size of a job that tolerates
// tolerableFailures failed checkpoints in a row: max(DefaultPoolSize,
// tolerableFailures + 3), at most MaxPoolSize. A pool of n ids rides out
// n - 3 failed checkpoints in a row: each failed checkpoint keeps its
// pre-committed id until a later checkpoint completes, the last completed
// checkpoint's id waits for its commit, and one id takes the records of
// the checkpoint in progress (TestFailedCheckpointsInARowAndThePool).
func PoolSizeFor(tolerableFailures int) int {
	return min(MaxPoolSize, max(DefaultPoolSize, tolerableFailures+3))
}

// DefaultTransactionTimeout is an exactly-once sink's Kafka transaction
// timeout when none is configured: 15 minutes, Kafka's default
// transaction.max.timeout.ms (Flink's KafkaSink sets transaction.timeout.ms
// to the same bound). The sink subtask itself does not apply it: the
// pipeline defaults the config, the job a graph built in code.
const DefaultTransactionTimeout = 15 * time.Minute

// RepartitionLinger is how long a repartition sink's producer lets a
// partition's batch fill before sending it (franz-go's ProducerLinger,
// Kafka's linger.ms; franz-go's default is 10ms) unless
// KafkaTxnConfig.Linger says otherwise. A repartition record is invisible
// downstream until its transaction commits, after the checkpoint
// completes, and the pre-commit flushes whatever still lingers, so
// lingering costs no latency; it makes each batch hold a partition's
// records of up to this long instead of 10ms (a unit writes every
// downstream unit's partition, so its records are spread thin), and
// fewer, larger batches are each compressed once, produced in fewer
// requests and decoded by the downstream unit in fewer fetch batches. It
// stays well short of the checkpoint interval: franz-go holds a lingering
// batch's records in its buffer (at most 10,000 records, then Produce
// blocks), so a long linger under a backlog blocks the unit's task
// instead (500ms cost more CPU per record than 10ms in the cluster bench).
const RepartitionLinger = 50 * time.Millisecond

// RepartitionProducerOpts are the franz-go options a repartition sink's
// transactional producers add to the job's: records go to the partition
// the sink picks (the key group's unit), batches linger for linger and are
// compressed with snappy (cheap to encode and decode; the records are
// JSON, which it shrinks well), and the client pushes no KIP-714 client
// metrics (its telemetry would be pushed and compressed per producer,
// several per unit; the daemon's own metrics cover them).
func RepartitionProducerOpts(linger time.Duration) []kgo.Opt {
	return []kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(linger),
		kgo.ProducerBatchCompression(kgo.SnappyCompression()),
		kgo.DisableClientMetrics(),
	}
}

// ErrNoOpenTransaction is returned by a write or a pre-commit when no
// transaction is open: the BeginTransaction after the last pre-commit failed
// (ErrPoolExhausted, or franz-go's error). The error wraps that
// BeginTransaction's error too (errors.Is finds ErrPoolExhausted), so the
// job's failure says why, not only that, no transaction is open. The sink
// subtask then fails (its writes) or declines the checkpoint (its
// pre-commit) instead of writing outside a transaction; the restart
// strategy restarts the job from its last completed checkpoint, whose
// recovery initialises every id of the pool again.
var ErrNoOpenTransaction = errors.New("sink: no open transaction (the last BeginTransaction failed)")

// ErrFenced is wrapped by KafkaTxnCommitter.Commit's error when the
// broker refused the commit as from a fenced producer (PRODUCER_FENCED or
// INVALID_PRODUCER_EPOCH: the id's epoch moved past the producer's) but
// the transaction's end marker shows it committed: another producer
// initialised the transactional id since, typically the recovery of a new
// owner of the sink subtask or cluster unit, which committed the restored
// committable and fenced the id (this committer is a zombie that was
// replaced). Nothing was lost and nothing is counted as lost; the slot's
// producer is retired, and the error, unlike *LostOutputError, does not
// suppress restarts: the subtask fails and its restart recovers again; a
// cluster unit stops as taken over and is claimed again only if the group
// still assigns it to the member (job's member).
var ErrFenced = errors.New("sink: transactional producer fenced by a newer producer of its id; the transaction is committed")

// ErrPoolExhausted is returned by BeginTransaction when every transactional
// id of the subtask's pool is still tied to a pending or recently committed
// transaction (checkpoints are failing or far apart) or retired after an
// error. Right after checkpoint C completed, C's id waits for checkpoint
// C+1 and the next transaction takes another; every checkpoint after C
// that fails (declined, timed out) keeps its pre-committed transaction,
// and its id, until a later checkpoint completes. So a pool of n ids rides
// out n-3 failed checkpoints in a row: after n-2 of them, the
// BeginTransaction after the next checkpoint's pre-commit fails (that
// checkpoint is declined) and so does the subtask at its next write
// (ErrNoOpenTransaction), whatever checkpoints.tolerable_failures allows;
// a pool rides out tolerable_failures failed checkpoints in a row from
// tolerable_failures + 3 ids (Flink's FlinkKafkaProducer fails alike: "Too
// many ongoing snapshots").
var ErrPoolExhausted = errors.New("sink: every transactional id of the pool is in use")

// TransactionalID returns the transactional id of slot of a sink subtask:
// <prefix>-<subtask>-<slot>.
func TransactionalID(prefix string, subtask, slot int) string {
	return prefix + "-" + strconv.Itoa(subtask) + "-" + strconv.Itoa(slot)
}

// KafkaTxnConfig configures a KafkaTxnCommitter.
type KafkaTxnConfig struct {
	// Name is the sink's name; Subtask its subtask index.
	Name    string
	Subtask int
	// Topic receives the records; the record key becomes the Kafka key.
	Topic string
	// Changelog is how a changelog is written; default ChangelogUpsert
	// (a repartition sink: ChangelogHeader).
	Changelog ChangelogMode
	// TransactionalIDPrefix starts every transactional id.
	TransactionalIDPrefix string
	// PoolSize is the number of transactional ids; 0 means DefaultPoolSize.
	PoolSize int
	// TransactionTimeout is the Kafka transaction timeout; it must exceed
	// the checkpoint interval plus the time to restart.
	TransactionTimeout time.Duration
	// IgnoreLost turns a transaction that can no longer be committed into
	// an error log and a metric instead of a job failure (Flink's
	// ignoreFailuresAfterTransactionTimeout).
	IgnoreLost bool
	// ClientOpts are the franz-go options every client of the job shares.
	ClientOpts []kgo.Opt
	// RecordsOut counts records written into committed transactions.
	RecordsOut prometheus.Counter
	// Metrics may be nil.
	Metrics *Metrics
	// Retries counts commits retried after a transient broker error; may
	// be nil.
	Retries *kafkaretry.Metrics
	// Logger is scoped by the caller.
	Logger *slog.Logger
	// Partition, if not nil, picks each record's partition from its key
	// (a cluster-mode repartition sink: the partition of the unit owning
	// the key's key group); nil leaves it to franz-go's default partitioner.
	Partition func(key []byte) int32
	// Partitions is the partition count of Topic for a repartition sink
	// (Partition set): WriteMarker writes a marker into each of
	// [0, Partitions).
	Partitions int32
	// Linger is how long a repartition sink's producer (Partition set)
	// lets a batch fill; 0 means RepartitionLinger. Other sinks use
	// franz-go's default.
	Linger time.Duration
	// Encode, if not nil, encodes each record Write writes (the sink's
	// format); an error fails the job. WriteTo does not encode: a dead
	// letter is written as it was read.
	Encode Encoder
	// BatchBytes is, for a repartition sink (Partition set), the size at
	// which a partition's exchange batch (runtime.ExchangeBatch: several
	// records in one Kafka record) is produced: 0 means
	// RepartitionBatchBytes, < 0 writes one Kafka record per record (the
	// format before batches, which every repartition source still reads).
	// Other sinks ignore it.
	BatchBytes int
}

// KafkaTxnCommitter is the TwoPhaseCommitter of Kafka transactions: one
// transaction per sink subtask and checkpoint epoch, each on a
// transactional id of the subtask's bounded pool, with one franz-go
// producer per id. Not safe for concurrent use.
//
// Every producer of the pool is created, and its id's producer id and
// epoch initialised (InitProducerId), when the first transaction opens,
// right after the start's recovery fenced the ids; none is created after
// that. A new producer's InitProducerId bumps its id's epoch
// unconditionally and aborts whatever transaction is open or
// pre-committed on the id, so a zombie (a subtask or unit replaced
// without noticing it) that created a producer later could abort the
// transaction its new owner pre-committed there for a checkpoint that
// completed (TestZombieNeverInitialisesAnIdAfterTheNewOwner). Created at
// the start, the zombie's producers are the ones the new owner's recovery
// fenced, and stay fenced (franz-go re-initialises a producer it keeps
// only with its producer id and epoch, KIP-360, which the broker refuses
// once the epoch moved on). A producer given up after an error is retired
// with its slot for the rest of the run (retire); once no usable slot is
// free BeginTransaction fails with ErrPoolExhausted, and the restart's
// recovery fences the ids again in the order of the checkpoints (a
// unit's restart claims the unit first). Flink's KafkaSink instead names
// each checkpoint's transaction by an id of its own (<prefix>-<subtask>-
// <checkpoint id>), initialised when the checkpoint's transaction begins,
// aborts the lingering ones at its start, and relies on its JobManager to
// cancel a zombie task; ids reused from a pool, fenced only by a unit's
// claim, must be initialised once, at the start.
type KafkaTxnCommitter struct {
	cfg     KafkaTxnConfig
	slots   []*txnSlot
	open    *txnSlot
	started bool // every slot's producer was created and initialised (start)
	// beginErr is the error of the last BeginTransaction when it failed
	// (nil once one succeeds): the cause ErrNoOpenTransaction carries.
	beginErr error
	// slab is the slab the next produced kgo.Records are taken from
	// (newRecord), from its record next on; nil before the first.
	slab *recSlab
	next int
	// free are slabs every record of which franz-go finished (their
	// promises ran), for newRecord to reuse; see recSlab. reused counts
	// the slabs taken from it.
	free   *slabStack
	reused int
	// copyValues is set by CopyValues: Write copies each value into its
	// record's slab (recSlab.copyValue); valueHint is the bytes the last
	// slab's copies took, the size of a new slab's value buffer.
	copyValues bool
	valueHint  int
	// xb are a repartition sink's exchange batches of the open
	// transaction (batches); nil before the first write and for other
	// sinks.
	xb *exchangeBatches
	// bufs are the exchange batches' finished buffers (batchBuffers),
	// made with xb; nil for other sinks.
	bufs *batchBuffers
}

// recordSlab is how many kgo.Records a recSlab holds: one allocation per
// 128 records (about 20 KiB, a small-object size class) instead of one per
// record, and reused once finished. (Recycling single records of finished
// promises through a sync.Pool instead cost more: a recycled record is
// cold by the time it is reused, and franz-go's first touch of it, in
// Produce, missed the cache on nearly every record.)
const recordSlab = 128

// freeSlabs is how many finished slabs a committer keeps for reuse (about
// 1.3 MiB of records, and the keys and values they still point to); a
// slab finished while that many wait is left to the garbage collector.
const freeSlabs = 64

// recSlab is recordSlab kgo.Records that newRecord hands out in turn,
// reused as a whole once franz-go finished every one of them: a record's
// produce promise (txnSlot.promise, on a franz-go goroutine, after which
// franz-go no longer reads or writes the record) counts it in finished;
// the promise that finishes the last record puts the slab on its
// committer's free stack, and takeSlab zeroes it before its records are
// handed out again. A record is never handed out again before its own promise ran,
// so a record franz-go still buffers, sends or retries keeps its key,
// value and headers (TestRecordSlabReusedOnlyOnceFinished). Every record
// carries its slab in kgo.Record.Context (franz-go's field for passing
// data to the promise), which is how the promise finds it: a context that
// is never done, so the records are cancelled as before, through the
// Produce context franz-go checks first.
//
// With CopyValues the slab also holds the copies of its records' values
// (values, carved in turn; a value that does not fit gets a buffer of its
// own), reused with it: written only by Write before the record is
// produced, never again before every record of the slab finished. need
// is the bytes the copies took in the slab's current use, which sizes the
// next buffers.
type recSlab struct {
	recs     [recordSlab]kgo.Record
	finished atomic.Int32
	free     *slabStack
	values   []byte
	need     int
}

// maxSlabValues bounds a slab's buffer of value copies (8 KiB per record
// on average); larger values get buffers of their own.
const maxSlabValues = 1 << 20

// copyValue returns a copy of v in the slab's value buffer, or in a
// buffer of its own when the rest of the slab's is too small.
func (sl *recSlab) copyValue(v []byte) []byte {
	sl.need += len(v)
	if cap(sl.values)-len(sl.values) < len(v) {
		return append([]byte(nil), v...)
	}
	at := len(sl.values)
	sl.values = append(sl.values, v...)
	return sl.values[at:len(sl.values):len(sl.values)]
}

// Deadline implements context.Context: none.
func (*recSlab) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done implements context.Context: never done.
func (*recSlab) Done() <-chan struct{} { return nil }

// Err implements context.Context: nil, never done.
func (*recSlab) Err() error { return nil }

// Value implements context.Context: no values.
func (*recSlab) Value(any) any { return nil }

// release is the end of record r of the slab, called by its produce
// promise once nothing reads or writes it any more: the slab goes to its
// free list with its last record.
func (sl *recSlab) release() {
	if sl.finished.Add(1) == recordSlab {
		sl.free.put(sl)
	}
}

// slabStack is a committer's finished slabs, the last one finished on
// top: newRecord takes the one most likely still in the CPU's caches.
// Safe for concurrent use (promises of several producers put slabs).
type slabStack struct {
	mu    sync.Mutex
	slabs []*recSlab
}

// put adds sl, or leaves it to the garbage collector when freeSlabs wait.
func (f *slabStack) put(sl *recSlab) {
	f.mu.Lock()
	if len(f.slabs) < freeSlabs {
		f.slabs = append(f.slabs, sl)
	}
	f.mu.Unlock()
}

// take returns the slab finished last, nil when none waits.
func (f *slabStack) take() *recSlab {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.slabs)
	if n == 0 {
		return nil
	}
	sl := f.slabs[n-1]
	f.slabs[n-1] = nil
	f.slabs = f.slabs[:n-1]
	return sl
}

type slotState int

const (
	slotFree slotState = iota
	slotOpen
	slotPreCommitted
	slotCommitted // committed; reusable once a snapshot taken after the commit completed
)

type txnSlot struct {
	index int
	id    string
	// cl is the slot's producer; nil before the start and once retired.
	cl *kgo.Client
	// retired says why the slot's producer was given up (retire); the
	// slot takes no further transaction in this run.
	retired error
	state   slotState
	records int64 // markers included
	markers int64 // markers written (WriteMarker), not counted as records out
	// oldest are the source timestamps of the records in Unix
	// nanoseconds, for the end-to-end latency: int64s, so that a
	// transaction's million timestamps hold no pointer for the garbage
	// collector to scan (a time.Time holds its *Location).
	oldest []int64
	c      Committable
	freeAt int64 // slotCommitted: reusable when a checkpoint >= freeAt completed (0: not yet known)

	// promise is the produce promise of every record of the slot, made
	// once (a closure per record would be an allocation per record).
	promise func(*kgo.Record, error)
	// failed and ackedOnce mirror writeErr != nil and acked, so that
	// Write and promise check them without taking mu on every record.
	failed    atomic.Bool
	ackedOnce atomic.Bool

	mu       sync.Mutex // guards the fields below, set by produce promises
	writeErr error
	acked    bool   // a record of the open transaction was acknowledged:
	ackTopic string // its topic,
	ackPart  int32  // partition
	ackOff   int64  // and offset
}

// newRecord returns a zero kgo.Record of the committer's current slab,
// its Context the slab, taking the next slab when it is used up: a
// finished one from the free list, else a new one (recSlab). Nothing
// writes a record after handing it to franz-go until its promise.
func (k *KafkaTxnCommitter) newRecord() *kgo.Record {
	if k.slab == nil || k.next == recordSlab {
		if k.slab != nil {
			k.valueHint = min(k.slab.need, maxSlabValues)
		}
		k.slab, k.next = k.takeSlab(), 0
	}
	r := &k.slab.recs[k.next]
	k.next++
	r.Context = k.slab
	return r
}

// takeSlab returns the slab finished last, its records zeroed (as a new
// slab's are, in the order newRecord hands them out), or a new one.
func (k *KafkaTxnCommitter) takeSlab() *recSlab {
	sl := k.free.take()
	if sl == nil {
		sl = &recSlab{free: k.free}
		if k.copyValues && k.valueHint > 0 {
			sl.values = make([]byte, 0, k.valueHint)
		}
		return sl
	}
	clear(sl.recs[:])
	sl.finished.Store(0)
	if k.copyValues && cap(sl.values) < k.valueHint {
		sl.values = make([]byte, 0, k.valueHint)
	}
	sl.values, sl.need = sl.values[:0], 0
	k.reused++
	return sl
}

// CopyValues implements runtime.ValueCopier: a committer without an
// encoder that is no repartition sink's copies, from then on, the value
// of every record Write takes into the value buffer of its kgo.Record's
// slab (recSlab), so the caller may write the value again once Write
// returned; the copy lives until franz-go finished every record of the
// slab. Write without an encoder returns no *RecordError. Others return
// false (the encoder's or the exchange batch's bytes are their own).
func (k *KafkaTxnCommitter) CopyValues() bool {
	if k.cfg.Encode != nil || k.cfg.Partition != nil {
		return false
	}
	k.copyValues = true
	return true
}

// NewKafkaTxnCommitter returns the committer of one sink subtask; its
// producers are created and initialised by the first BeginTransaction.
func NewKafkaTxnCommitter(cfg KafkaTxnConfig) *KafkaTxnCommitter {
	if cfg.PoolSize <= 0 {
		cfg.PoolSize = DefaultPoolSize
	}
	k := &KafkaTxnCommitter{cfg: cfg, free: new(slabStack)}
	for i := 0; i < cfg.PoolSize; i++ {
		s := &txnSlot{index: i, id: TransactionalID(cfg.TransactionalIDPrefix, cfg.Subtask, i)}
		s.promise = func(r *kgo.Record, err error) { k.finished(s, r, err) }
		k.slots = append(k.slots, s)
	}
	return k
}

// start creates every slot's producer and initialises its transactional
// id (InitProducerId, through franz-go's ProducerID), concurrently, before
// the committer's first transaction. On an error it closes them all and
// returns it; nothing was written, so a later call starts over.
func (k *KafkaTxnCommitter) start(ctx context.Context) error {
	errs := make([]error, len(k.slots))
	var wg sync.WaitGroup
	for i, s := range k.slots {
		cl, err := kgo.NewClient(k.producerOpts(s.id)...)
		if err != nil {
			errs[i] = fmt.Errorf("sink %s: transactional producer %s: %w", k.cfg.Name, s.id, err)
			continue
		}
		s.cl = cl
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := cl.ProducerID(ctx); err != nil {
				errs[i] = fmt.Errorf("sink %s: initialise transactional id %s: %w", k.cfg.Name, s.id, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, s := range k.slots {
			if s.cl != nil {
				s.cl.Close()
				s.cl = nil
			}
		}
		return err
	}
	k.started = true
	return nil
}

// producerOpts are the franz-go options of the producer of transactional
// id id.
func (k *KafkaTxnCommitter) producerOpts(id string) []kgo.Opt {
	opts := append([]kgo.Opt{}, k.cfg.ClientOpts...)
	opts = append(opts, kgo.TransactionalID(id), kgo.TransactionTimeout(k.cfg.TransactionTimeout),
		kgo.DefaultProduceTopic(k.cfg.Topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	if k.cfg.Partition != nil {
		opts = append(opts, RepartitionProducerOpts(cmp.Or(k.cfg.Linger, RepartitionLinger))...)
	}
	return opts
}

// retire gives up slot s's producer after an error that leaves it unusable
// (a fenced franz-go client stays failed) or its transaction state unknown:
// the producer is closed and the slot takes no further transaction in this
// run. No new producer replaces it: its InitProducerId could abort a
// transaction a new owner of the subtask or unit pre-committed on the id
// (see KafkaTxnCommitter).
func (k *KafkaTxnCommitter) retire(s *txnSlot, why error) {
	s.cl.Close()
	s.cl, s.retired = nil, why
	k.cfg.Logger.Warn("transactional producer retired for the rest of the run; a restart's recovery initialises its id again",
		"transactional_id", s.id, "err", why)
}

func (k *KafkaTxnCommitter) inFlight() {
	n := 0
	for _, s := range k.slots {
		if s.state == slotOpen || s.state == slotPreCommitted {
			n++
		}
	}
	k.cfg.Metrics.setInFlight(k.cfg.Name, k.cfg.Subtask, n)
}

// BeginTransaction implements TwoPhaseCommitter: it takes a free slot and
// begins a transaction on its producer; the first call creates and
// initialises every slot's producer first (start). It returns
// ErrPoolExhausted when no slot with a producer is free (retired slots
// never are).
func (k *KafkaTxnCommitter) BeginTransaction(ctx context.Context) error {
	k.beginErr = k.begin(ctx)
	return k.beginErr
}

// noOpen returns ErrNoOpenTransaction for sink subtask's operation what,
// wrapping the error of the BeginTransaction that failed (beginErr).
func (k *KafkaTxnCommitter) noOpen(what string) error {
	if k.beginErr == nil {
		return fmt.Errorf("sink %s[%d]: %s: %w", k.cfg.Name, k.cfg.Subtask, what, ErrNoOpenTransaction)
	}
	return fmt.Errorf("sink %s[%d]: %s: %w: %w", k.cfg.Name, k.cfg.Subtask, what, ErrNoOpenTransaction, k.beginErr)
}

// begin is BeginTransaction.
func (k *KafkaTxnCommitter) begin(ctx context.Context) error {
	if !k.started {
		if err := k.start(ctx); err != nil {
			return err
		}
	}
	var s *txnSlot
	retired, pending, committed := 0, 0, 0
	for _, c := range k.slots {
		switch {
		case c.cl == nil:
			retired++
			continue
		case c.state == slotPreCommitted:
			pending++
		case c.state == slotCommitted:
			committed++
		}
		if c.state == slotFree && s == nil {
			s = c
		}
	}
	if s == nil {
		return fmt.Errorf("sink %s[%d]: %w (pool size %d: %d retired after errors, %d pre-committed for checkpoints not completed, %d committed until a later checkpoint completes; "+
			"each failed checkpoint in a row keeps one more id, so a pool rides out pool_size - 3 of them)",
			k.cfg.Name, k.cfg.Subtask, ErrPoolExhausted, k.cfg.PoolSize, retired, pending, committed)
	}
	if err := s.cl.BeginTransaction(); err != nil {
		return fmt.Errorf("sink %s: begin transaction on %s: %w", k.cfg.Name, s.id, err)
	}
	s.state, s.records, s.markers, s.oldest, s.freeAt = slotOpen, 0, 0, s.oldest[:0], 0
	k.dropBatches() // an aborted transaction's, if any
	s.mu.Lock()
	s.writeErr, s.acked = nil, false
	s.failed.Store(false)
	s.ackedOnce.Store(false)
	s.mu.Unlock()
	k.open = s
	k.inFlight()
	return nil
}

// Write implements TwoPhaseCommitter: it produces rec into the open
// transaction as KafkaTxnConfig.Changelog writes it (an upsert sink drops a
// -U), blocking while the producer's buffer is full. It returns the first
// failure of an earlier record of the transaction.
func (k *KafkaTxnCommitter) Write(ctx context.Context, rec runtime.Record) error {
	s := k.open
	if s == nil {
		return k.noOpen("write")
	}
	if err := s.err(); err != nil {
		return err
	}
	if k.cfg.Changelog == ChangelogUpsert && rec.Change == runtime.ChangeUpdateBefore {
		return nil
	}
	if xb := k.batches(); xb != nil {
		if err := k.writeBatched(ctx, xb, s, rec); err != nil {
			return err
		}
		s.records++
		if !rec.Timestamp.IsZero() {
			s.oldest = append(s.oldest, rec.Timestamp.UnixNano())
		}
		return nil
	}
	kr, err := k.kafkaRecord(ctx, rec)
	if err != nil {
		return err
	}
	s.records++
	if !rec.Timestamp.IsZero() {
		s.oldest = append(s.oldest, rec.Timestamp.UnixNano())
	}
	k.produce(ctx, s, kr)
	return nil
}

// kafkaRecord returns the Kafka record Write produces for rec (not an
// upsert sink's -U: Write drops it first): encoded with the sink's
// encoder, if any, as KafkaTxnConfig.Changelog writes it, partitioned by
// KafkaTxnConfig.Partition, if set. rec does not move to the heap unless
// it is encoded (TestKafkaRecordDoesNotAllocate).
func (k *KafkaTxnCommitter) kafkaRecord(ctx context.Context, rec runtime.Record) (*kgo.Record, error) {
	if k.cfg.Encode != nil && encodesValue(k.cfg.Changelog, &rec) {
		var err error
		if rec, err = encoded(ctx, k.cfg.Encode, k.cfg.Name, k.cfg.Topic, rec); err != nil {
			return nil, err
		}
	}
	kr := k.newRecord()
	changelogRecord(k.cfg.Changelog, kr, &rec)
	if k.copyValues && len(kr.Value) > 0 {
		kr.Value = k.slab.copyValue(kr.Value)
	}
	if k.cfg.Partition != nil {
		kr.Partition = k.cfg.Partition(rec.Key)
	}
	return kr, nil
}

// WriteTo implements TopicWriter: it produces rec into the open
// transaction as Write does, but to topic (a dead-letter topic of the
// record's source), partitioned by franz-go's default partitioner. The
// record counts in the transaction; its timestamp feeds no end-to-end
// latency (a dead letter is no output of the job). It returns the first
// failure of an earlier record of the transaction, and an error for a
// repartition committer (Partition set), whose partitions are key groups.
func (k *KafkaTxnCommitter) WriteTo(ctx context.Context, topic string, rec runtime.Record) error {
	s := k.open
	if k.cfg.Partition != nil {
		return fmt.Errorf("sink %s: a repartition sink writes only to its own topic, not %q", k.cfg.Name, topic)
	}
	if s == nil {
		return k.noOpen("write to " + topic)
	}
	if err := s.err(); err != nil {
		return err
	}
	s.records++
	k.produce(ctx, s, &kgo.Record{Topic: topic, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp, Headers: kafkaHeaders(rec.Headers)})
	return nil
}

// WriteMarker implements MarkerWriter: it produces m into every partition
// [0, Partitions) of the topic, in the open transaction, so a
// read_committed reader sees it only with the records written before it in
// the same transaction. The markers count as records of the transaction
// (it is committed, not empty) but not as records out. It returns the
// first failure of an earlier record of the transaction, and an error when
// the committer has no Partition function (not a repartition sink).
func (k *KafkaTxnCommitter) WriteMarker(ctx context.Context, m runtime.Marker) error {
	s := k.open
	if k.cfg.Partition == nil || k.cfg.Partitions <= 0 {
		return fmt.Errorf("sink %s: markers need a repartition sink (partitioned by key group, with a partition count)", k.cfg.Name)
	}
	if s == nil {
		return k.noOpen("marker")
	}
	if err := s.err(); err != nil {
		return err
	}
	k.flushBatches(ctx, s) // the records written before the marker precede it
	rec := m.Record()
	for p := range k.cfg.Partitions {
		s.records++
		s.markers++
		kr := k.newRecord()
		kr.Value, kr.Timestamp, kr.Headers, kr.Partition = rec.Value, rec.Timestamp, kafkaHeaders(rec.Headers), p
		k.produce(ctx, s, kr)
	}
	return nil
}

// produce produces kr into slot s's open transaction; s.promise records
// the outcome.
func (k *KafkaTxnCommitter) produce(ctx context.Context, s *txnSlot, kr *kgo.Record) {
	s.cl.Produce(ctx, kr, s.promise)
}

// finished is the produce promise of slot s: it records the first failure
// and the first acknowledged offset of the open transaction, then
// releases r to its slab, if it has one (newRecord's records).
func (k *KafkaTxnCommitter) finished(s *txnSlot, r *kgo.Record, err error) {
	switch {
	case err != nil:
		s.mu.Lock()
		if s.writeErr == nil {
			s.writeErr = fmt.Errorf("sink %s: write to %q in transaction %s: %w", k.cfg.Name, r.Topic, s.id, err)
			s.failed.Store(true)
		}
		s.mu.Unlock()
	case !s.ackedOnce.Load():
		s.mu.Lock()
		if !s.acked {
			s.acked, s.ackTopic, s.ackPart, s.ackOff = true, r.Topic, r.Partition, r.Offset
			s.ackedOnce.Store(true)
		}
		s.mu.Unlock()
	}
	if isBatchRecord(r) {
		k.bufs.put(r.Value) // franz-go no longer reads it
	}
	if sl, ok := r.Context.(*recSlab); ok {
		sl.release()
	}
}

func (s *txnSlot) err() error {
	if !s.failed.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeErr
}

// PreCommit implements TwoPhaseCommitter: flush, then record the
// transactional id, producer id and epoch now (the epoch changes when the
// transaction ends).
func (k *KafkaTxnCommitter) PreCommit(ctx context.Context, checkpointID int64) (Committable, error) {
	s := k.open
	if s == nil {
		return Committable{}, k.noOpen(fmt.Sprintf("pre-commit of checkpoint %d", checkpointID))
	}
	k.flushBatches(ctx, s)
	if err := s.cl.Flush(ctx); err != nil {
		return Committable{}, fmt.Errorf("sink %s: flush %s: %w", k.cfg.Name, s.id, err)
	}
	if err := s.err(); err != nil {
		return Committable{}, err
	}
	c := Committable{TransactionalID: s.id, CheckpointID: checkpointID, Records: s.records}
	if s.records > 0 {
		pid, epoch, err := s.cl.ProducerID(ctx)
		if err != nil {
			return Committable{}, fmt.Errorf("sink %s: producer id of %s: %w", k.cfg.Name, s.id, err)
		}
		c.ProducerID, c.Epoch = pid, epoch
		s.mu.Lock()
		if s.acked {
			c.Topic, c.Partition, c.Offset = s.ackTopic, s.ackPart, s.ackOff
			if c.Topic == "" {
				c.Topic = k.cfg.Topic
			}
		}
		s.mu.Unlock()
	}
	s.c, s.state = c, slotPreCommitted
	k.open = nil
	return c, nil
}

// Commit implements TwoPhaseCommitter. In the normal case the slot's
// producer still has the transaction open and ends it; a committable whose
// producer is gone (restored from a checkpoint) is committed with a raw
// EndTxn (see CommitRecovered).
//
// A commit that fails with a transient broker error (a broker that cannot
// be dialled or does not answer, a coordinator moving or loading) is
// retried with back-off until it succeeds, the transaction can no longer
// be committed (a *LostOutputError, reported as IgnoreLost says) or ctx
// ends; each retry is counted (kstreamd_kafka_retries_total{operation=
// "commit"}) and logged. franz-go cannot retry a commit whose outcome it
// did not see, so retries go through CommitRecovered with the
// committable's producer id and epoch, and the slot's producer is retired
// afterwards (retire: no new producer is created after the start).
//
// The broker's answers that classify reports as lost (PRODUCER_FENCED,
// INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, ...) are also its answers for
// a transaction that was committed, so before reporting a loss Commit
// reads the transaction's end marker as a restore does (settleEnded): a
// committed transaction is no loss. Answered PRODUCER_FENCED or
// INVALID_PRODUCER_EPOCH, another producer initialised the id since (a new
// owner's recovery committed the restored committable and fenced it):
// Commit returns an error wrapping ErrFenced. Any other such answer is
// success (an earlier attempt of this commit went through). Either way
// the slot's producer is retired.
func (k *KafkaTxnCommitter) Commit(ctx context.Context, c Committable) error {
	var s *txnSlot
	for _, cand := range k.slots {
		if cand.state == slotPreCommitted && cand.c == c {
			s = cand
		}
	}
	if s == nil {
		return k.lost(k.commitRetrying(ctx, c))
	}
	if c.Records > 0 {
		err := s.cl.EndTransaction(ctx, kgo.TryCommit)
		if lerr := classify(c, err); errors.As(lerr, new(*LostOutputError)) {
			// PRODUCER_FENCED and the like are also the answers for a
			// transaction that was committed, by a new owner's recovery
			// (this committer is a zombie) or by an earlier attempt of
			// this commit: its end marker settles it.
			committed, serr := settleEnded(ctx, k.cfg.ClientOpts, c, lerr)
			if committed {
				// The franz-go client took the answer as fatal: the
				// slot is retired either way.
				k.retire(s, err)
				if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
					s.state = slotCommitted
					k.inFlight()
					return fmt.Errorf("sink %s[%d]: transaction %s of checkpoint %d (%d records) is committed, but the broker no longer accepts this committer's producer: %w: %w",
						k.cfg.Name, k.cfg.Subtask, c.TransactionalID, c.CheckpointID, c.Records, ErrFenced, err)
				}
				k.cfg.Logger.Info("the broker refused the commit, but the transaction is committed (an earlier attempt went through)",
					"transactional_id", c.TransactionalID, "checkpoint_id", c.CheckpointID, "err", err)
			}
			err = serr
		} else if err != nil && ctx.Err() == nil {
			k.cfg.Logger.Warn("commit failed; retrying with the recorded producer id and epoch",
				"operation", kafkaretry.OpCommit, "transactional_id", c.TransactionalID, "checkpoint_id", c.CheckpointID, "err", err)
			k.cfg.Retries.Retried(kafkaretry.OpCommit)
			rerr := err
			err = k.commitRetrying(ctx, c)
			// The producer's state of the transaction is unknown to
			// franz-go now: the slot is retired.
			k.retire(s, rerr)
		}
		if err != nil {
			if lerr := k.lost(classify(c, err)); lerr != nil {
				return lerr
			}
			// Ignored loss: a fenced franz-go client stays failed
			// ("fatal, unrecoverable" on the next BeginTransaction),
			// and a new producer's InitProducerId could abort a new
			// owner's transaction on the id: the slot is retired.
			if s.cl != nil {
				_ = s.cl.EndTransaction(ctx, kgo.TryAbort)
				k.retire(s, err)
			}
		} else {
			k.cfg.Metrics.transaction(k.cfg.Name, "committed")
			if k.cfg.RecordsOut != nil {
				k.cfg.RecordsOut.Add(float64(c.Records - s.markers))
			}
			if k.cfg.Metrics != nil {
				k.cfg.Metrics.e2eLatency.ObserveSince(time.Now().UnixNano(), s.oldest)
			}
		}
	} else if err := s.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		// Nothing to lose, but the producer's state is unknown: the
		// slot is retired (the next start's recovery ends whatever the
		// broker still holds on the id).
		k.retire(s, fmt.Errorf("ending an empty transaction: %w", err))
	}
	s.state = slotCommitted
	k.inFlight()
	return nil
}

// commitRetrying commits c with CommitRecovered, each attempt bounded by
// 30s, retrying transient errors with back-off until ctx ends.
func (k *KafkaTxnCommitter) commitRetrying(ctx context.Context, c Committable) error {
	return kafkaretry.Do(ctx, kafkaretry.Policy{Operation: kafkaretry.OpCommit, Metrics: k.cfg.Retries, Logger: k.cfg.Logger},
		func(ctx context.Context) error {
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return CommitRecovered(actx, k.cfg.ClientOpts, c)
		}, "transactional_id", c.TransactionalID, "checkpoint_id", c.CheckpointID)
}

// lost reports err, a *LostOutputError or nil, as the configuration asks:
// returned, or logged and counted when IgnoreLost.
func (k *KafkaTxnCommitter) lost(err error) error {
	var le *LostOutputError
	if !errors.As(err, &le) {
		return err
	}
	k.cfg.Metrics.transaction(k.cfg.Name, "lost")
	if !k.cfg.IgnoreLost {
		return err
	}
	k.cfg.Logger.Error("lost output ignored (ignore_lost_transactions)", "transactional_id", le.TransactionalID, "checkpoint_id", le.CheckpointID, "records", le.Records, "err", le.Err)
	return nil
}

// Snapshotted implements TwoPhaseCommitter: committed slots whose commit
// precedes this snapshot become free once checkpoint id completes.
func (k *KafkaTxnCommitter) Snapshotted(id int64) {
	for _, s := range k.slots {
		if s.state == slotCommitted && s.freeAt == 0 {
			s.freeAt = id
		}
	}
}

// CheckpointCompleted implements TwoPhaseCommitter.
func (k *KafkaTxnCommitter) CheckpointCompleted(id int64) {
	for _, s := range k.slots {
		if s.state == slotCommitted && s.freeAt != 0 && s.freeAt <= id {
			s.state = slotFree
		}
	}
}

// AbortOpen implements TwoPhaseCommitter.
func (k *KafkaTxnCommitter) AbortOpen(ctx context.Context) error {
	s := k.open
	if s == nil {
		return nil
	}
	k.open = nil
	s.state = slotFree
	k.dropBatches()
	if err := s.cl.AbortBufferedRecords(ctx); err != nil {
		return fmt.Errorf("sink %s: abort %s: %w", k.cfg.Name, s.id, err)
	}
	if err := s.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		return fmt.Errorf("sink %s: abort %s: %w", k.cfg.Name, s.id, err)
	}
	if s.records > 0 {
		k.cfg.Metrics.transaction(k.cfg.Name, "aborted")
	}
	k.inFlight()
	return nil
}

// Close implements TwoPhaseCommitter: it closes every producer without
// ending transactions (a pre-committed one must stay open for the next
// start to commit).
func (k *KafkaTxnCommitter) Close() error {
	for _, s := range k.slots {
		if s.cl != nil {
			s.cl.Close()
		}
	}
	return nil
}

// classify turns a commit failure into a *LostOutputError when the broker
// says the transaction can no longer be committed, and returns other
// errors as they are.
func classify(c Committable, err error) error {
	if errors.As(err, new(*LostOutputError)) {
		return err // classified already (CommitRecovered)
	}
	if errors.Is(err, kerr.InvalidTxnState) || errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.InvalidProducerIDMapping) || errors.Is(err, kerr.TransactionalIDNotFound) || errors.Is(err, kerr.TransactionAbortable) {
		return &LostOutputError{TransactionalID: c.TransactionalID, CheckpointID: c.CheckpointID, Records: c.Records, Err: err}
	}
	return err
}
