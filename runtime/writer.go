package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// ChannelCapacity is the default number of elements a channel between two
// subtasks buffers before the sender blocks (back-pressure).
const ChannelCapacity = 256

// Channel is the bounded channel from one upstream subtask to one
// downstream subtask.
type Channel chan Element

// NewChannel returns a channel buffering capacity elements; capacity <= 0
// means ChannelCapacity.
func NewChannel(capacity int) Channel {
	if capacity <= 0 {
		capacity = ChannelCapacity
	}
	return make(Channel, capacity)
}

// Partitioner picks the downstream channel of a record, in [0, n) for n
// channels (Flink's StreamPartitioner).
type Partitioner interface {
	// Select returns the index of the channel rec goes to, or -1 for every
	// channel (broadcast). It must not keep rec after it returns.
	Select(rec *Record, n int) int
}

// ForwardPartitioner sends every record to channel 0: a one-to-one edge
// between subtasks of equal parallelism.
type ForwardPartitioner struct{}

// Select returns 0.
func (ForwardPartitioner) Select(*Record, int) int { return 0 }

// BroadcastPartitioner sends every record to every channel.
type BroadcastPartitioner struct{}

// Select returns -1 (every channel).
func (BroadcastPartitioner) Select(*Record, int) int { return -1 }

// RebalancePartitioner spreads records round-robin over the channels.
type RebalancePartitioner struct{ next int }

// Select returns the next channel in round-robin order.
func (p *RebalancePartitioner) Select(_ *Record, n int) int {
	i := p.next % n
	p.next = i + 1
	return i
}

// KeyGroupPartitioner routes a record by the key group of its Key (Flink's
// KeyGroupStreamPartitioner): channel = keygroup.SubtaskForKey(key,
// MaxParallelism, n). The number of channels is the downstream parallelism.
type KeyGroupPartitioner struct {
	MaxParallelism int
}

// Select returns the subtask owning rec.Key's key group.
func (p KeyGroupPartitioner) Select(rec *Record, n int) int {
	return keygroup.SubtaskForKey(rec.Key, p.MaxParallelism, n)
}

// Writer sends the elements of one upstream subtask to the channels of one
// downstream operator (Flink's RecordWriter). Not safe for concurrent use:
// it belongs to the upstream subtask goroutine.
type Writer struct {
	channels    []Channel
	partitioner Partitioner
	keys        KeySelector // nil: records keep their key
	times       *IOTimes    // the emitting subtask's meter: waits on full channels are back-pressure; may be nil
	// scratch is the copy of the record a key selector or a partitioner
	// other than the built-in ones sees, during the call only: handing
	// them a pointer to Emit's own record would move every record to the
	// heap (the compiler cannot see through the interface).
	scratch Record
	// batch is the records per KindRecords element (WithBatching); 0
	// sends each record as a KindRecord element of its own.
	batch int
	// pending holds, per channel, the batch being filled (nil: none).
	pending []*RecordBatch
}

// RecordBatchSize is the batch size the job's writers use (WithBatching):
// one channel operation, and at most one wake-up of the receiver, per 64
// records instead of per record.
const RecordBatchSize = 64

// BatchChannelCapacity is the capacity, in elements, of the job's channels
// between batching writers and their receivers: 32 batches, up to 2048
// records, 8x ChannelCapacity's records but not 64x, so that a barrier
// queued behind them (a checkpoint) waits for a few milliseconds of
// records, not tens.
const BatchChannelCapacity = 32

// NewWriter returns a writer over channels (one per downstream subtask,
// index = subtask) routing records with p.
func NewWriter(channels []Channel, p Partitioner) *Writer {
	return &Writer{channels: channels, partitioner: p}
}

// WithKeySelector makes w set each record's Key with sel before routing it:
// the writer of a key-group edge (Flink's keyBy), whose downstream operator
// is keyed by sel. It returns w.
func (w *Writer) WithKeySelector(sel KeySelector) *Writer {
	w.keys = sel
	return w
}

// WithBatching makes w send records in KindRecords elements of up to n
// records per channel (n <= 1: one KindRecord element per record, the
// default). A batch is sent when it is full, before any control element on
// its channel (Broadcast), and on Flush: the emitting task must call Flush
// before it blocks on anything else than its output, or its receivers
// would wait for records it holds. It returns w.
func (w *Writer) WithBatching(n int) *Writer {
	if n <= 1 {
		n = 0
	}
	w.batch = n
	w.pending = make([]*RecordBatch, len(w.channels))
	return w
}

// Emit sends rec to the channel the partitioner picks, blocking while that
// channel is full. It returns ctx.Err() if ctx ends first; the record is
// then not sent. A batching writer (WithBatching) adds rec to that
// channel's batch instead, and sends the batch once full. With a key selector the record gets the selected key
// first; when the selector fails Emit returns its error (a *RecordError for
// a record without a usable key) and sends nothing.
func (w *Writer) Emit(ctx context.Context, rec Record) error {
	if w.keys != nil {
		k, err := w.selectKey(rec)
		if err != nil {
			return err
		}
		rec.Key = k
	}
	rec.decoded = rec.sendDecoded() // a decoded value stays within its chain, but for ValidJSON's mark
	var i int
	switch p := w.partitioner.(type) {
	case ForwardPartitioner:
		i = 0
	case KeyGroupPartitioner:
		i = p.Select(&rec, len(w.channels))
	case BroadcastPartitioner:
		i = -1
	case *RebalancePartitioner:
		i = p.Select(&rec, len(w.channels))
	default:
		w.scratch = rec
		i = w.partitioner.Select(&w.scratch, len(w.channels))
		w.scratch = Record{}
	}
	if i >= len(w.channels) {
		return fmt.Errorf("runtime: partitioner picked channel %d of %d", i, len(w.channels))
	}
	if w.batch > 0 {
		if i >= 0 {
			return w.add(ctx, i, rec)
		}
		for j := range w.channels {
			if err := w.add(ctx, j, rec); err != nil {
				return err
			}
		}
		return nil
	}
	el := Element{Kind: KindRecord, Record: rec}
	if i < 0 {
		return w.broadcast(ctx, el)
	}
	return w.send(ctx, w.channels[i], el)
}

// add appends rec to channel i's batch, sending the batch once full.
func (w *Writer) add(ctx context.Context, i int, rec Record) error {
	b := w.pending[i]
	if b == nil {
		b = newBatch(w.batch)
		w.pending[i] = b
	}
	b.Records = append(b.Records, rec)
	if len(b.Records) >= w.batch {
		return w.flush(ctx, i)
	}
	return nil
}

// flush sends channel i's batch, if any.
func (w *Writer) flush(ctx context.Context, i int) error {
	if w.batch == 0 || w.pending[i] == nil {
		return nil
	}
	b := w.pending[i]
	w.pending[i] = nil
	return w.send(ctx, w.channels[i], Element{Kind: KindRecords, Batch: b})
}

// Flush sends every channel's batch of a batching writer (WithBatching),
// blocking while a channel is full; a writer without batches has nothing
// to send. It returns ctx.Err() if ctx ends first.
func (w *Writer) Flush(ctx context.Context) error {
	for i := range w.pending {
		if err := w.flush(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// selectKey runs the key selector on the writer's scratch copy of rec (see
// Writer.scratch), cleared afterwards so that it keeps no record's bytes
// alive.
func (w *Writer) selectKey(rec Record) ([]byte, error) {
	w.scratch = rec
	k, err := w.keys.SelectKey(&w.scratch)
	w.scratch = Record{}
	return k, err
}

// Broadcast sends a control element (barrier, watermark, caught-up,
// end-of-input) to every channel, blocking while a channel is full; a
// batching writer first sends the channel's batch, so the element follows
// every record emitted before it.
func (w *Writer) Broadcast(ctx context.Context, el Element) error { return w.broadcast(ctx, el) }

func (w *Writer) broadcast(ctx context.Context, el Element) error {
	for i, ch := range w.channels {
		if err := w.flush(ctx, i); err != nil {
			return err
		}
		if err := w.send(ctx, ch, el); err != nil {
			return err
		}
	}
	return nil
}

// send puts el on ch, blocking while ch is full; the time blocked counts as
// back-pressure.
func (w *Writer) send(ctx context.Context, ch Channel, el Element) error {
	select {
	case ch <- el:
		return nil
	default:
	}
	w.times.BeginBackPressure()
	defer w.times.EndBackPressure()
	select {
	case ch <- el:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Output is everything one subtask emits to: one Writer per downstream
// operator (fan-out). Not safe for concurrent use.
type Output struct {
	writers []*Writer
	side    map[string][]*Writer // side output tag -> writers
	// chained are the operators chained to the emitting one (AddChained).
	chained []*ChainedOperator
	counter interface{ Inc() }
	times   *IOTimes
	lends   int8 // LendsValues' answer: 0 before the first call
}

// NewOutput returns an output over writers; recordsOut, if not nil, is
// incremented once per emitted record (whatever the fan-out).
func NewOutput(recordsOut interface{ Inc() }, writers ...*Writer) *Output {
	return &Output{writers: writers, counter: recordsOut}
}

// AddWriter adds a downstream operator's writer.
func (o *Output) AddWriter(w *Writer) {
	if w.times == nil {
		w.times = o.times
	}
	o.writers = append(o.writers, w)
}

// AddChained chains c to the operator emitting to o (Flink's
// ChainingOutput): every record o emits is handed to c's operator on the
// calling goroutine, after o's writers got it, and every control element
// o broadcasts reaches c (which handles it and forwards it on its own
// Output) after o's writers. The task running the emitting operator must
// also run c (OperatorTaskConfig.Chain).
func (o *Output) AddChained(c *ChainedOperator) { o.chained = append(o.chained, c) }

// AddSideWriter adds a downstream operator's writer to side output tag
// (Flink's OutputTag): it gets what EmitSide(tag) emits, and every control
// element.
func (o *Output) AddSideWriter(tag string, w *Writer) {
	if w.times == nil {
		w.times = o.times
	}
	if o.side == nil {
		o.side = map[string][]*Writer{}
	}
	o.side[tag] = append(o.side[tag], w)
}

// HasSideWriters reports whether side output tag has a writer: whether
// EmitSide(tag) delivers a record anywhere. An operator that must not lose
// what it emits to a side output no vertex reads (the window operator's
// late records) asks it and counts the record instead.
func (o *Output) HasSideWriters(tag string) bool { return len(o.side[tag]) > 0 }

// EmitSide sends rec to every writer of side output tag (none: rec is
// dropped; see HasSideWriters); see Writer.Emit. It counts as an emitted
// record when a writer got it.
func (o *Output) EmitSide(ctx context.Context, tag string, rec Record) error {
	for _, w := range o.side[tag] {
		if err := w.Emit(ctx, rec); err != nil {
			return err
		}
	}
	if o.counter != nil && len(o.side[tag]) > 0 {
		o.counter.Inc()
	}
	return nil
}

// SetIOTimes makes m the meter of the subtask emitting to o: every
// writer of o, present and future, counts its waits on a full downstream
// channel as back-pressure in m (Flink's backPressuredTimeMsPerSecond).
// The task running the subtask counts its idle time in the same meter
// (IOTimes).
func (o *Output) SetIOTimes(m *IOTimes) {
	o.times = m
	for _, w := range o.writers {
		w.times = m
	}
	for _, ws := range o.side {
		for _, w := range ws {
			w.times = m
		}
	}
}

// IOTimes returns the meter SetIOTimes set (nil: none, or a nil o).
func (o *Output) IOTimes() *IOTimes {
	if o == nil {
		return nil
	}
	return o.times
}

// Emit sends rec to every downstream operator; see Writer.Emit. A writer
// whose key selector refuses the record (a *RecordError) does not keep it
// from the other writers: every other branch still gets the record, and
// Emit then returns that *RecordError (the first, when several refuse), so
// the record meets the emitting task's bad-record policy for the refusing
// branch only. Any other error stops the fan-out and is returned at once.
// Then each chained operator (AddChained) processes the record; a failure
// its own bad-record policy did not absorb is returned (and fails the
// task: the emitting operator's policy does not see it).
func (o *Output) Emit(ctx context.Context, rec Record) error {
	var refused error
	for _, w := range o.writers {
		if err := w.Emit(ctx, rec); err != nil {
			var re *RecordError
			if !errors.As(err, &re) {
				return err
			}
			if refused == nil {
				refused = err
			}
		}
	}
	if o.counter != nil && refused == nil {
		o.counter.Inc()
	}
	for _, c := range o.chained {
		// A chained operator's bad records meet its own policy; what
		// comes back fails the task.
		if err := c.processRecord(ctx, rec); err != nil {
			return err
		}
	}
	return refused
}

// Flush sends the batches every batching writer of o holds (see
// Writer.WithBatching), main and side outputs, and those of the outputs of
// the operators chained to o.
func (o *Output) Flush(ctx context.Context) error {
	for _, w := range o.writers {
		if err := w.Flush(ctx); err != nil {
			return err
		}
	}
	for _, ws := range o.side {
		for _, w := range ws {
			if err := w.Flush(ctx); err != nil {
				return err
			}
		}
	}
	for _, c := range o.chained {
		if c.Output == nil {
			continue // a chained sink
		}
		if err := c.Output.Flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Broadcast sends a control element to every channel of every downstream
// operator, then hands it to every chained operator (AddChained).
func (o *Output) Broadcast(ctx context.Context, el Element) error {
	for _, w := range o.writers {
		if err := w.Broadcast(ctx, el); err != nil {
			return err
		}
	}
	for _, ws := range o.side {
		for _, w := range ws {
			if err := w.Broadcast(ctx, el); err != nil {
				return err
			}
		}
	}
	for _, c := range o.chained {
		if err := c.control(ctx, el); err != nil {
			return err
		}
	}
	return nil
}
