package operators

import (
	"context"
	"slices"
	"time"
	"unsafe"

	"github.com/kstreamd/kstreamd/runtime"
)

// This file holds the aggregate operator's mini-batch (the mini_batch
// param, MiniBatchParams; Flink's MiniBatchGroupAggFunction driven by its
// bundle operator): records are buffered per key and folded at the end of
// the batch with one state read, one state write and one output per key.
//
// The buffer keeps each record's evaluated aggregate inputs (the of
// expressions run when the record arrives, so an eval_error still meets
// the record's on_error policy at once), not a partial accumulator: at the
// end of a batch each record is folded into the key's accumulators in
// arrival order exactly as without mini_batch (Aggregate.fold), so sums of
// doubles round the same, count_distinct and the min and max multisets
// over a changelog make the same map reads and writes, and retractions
// work as they do record by record. What the batch saves is the per-record
// read and write of the accumulators' ValueState, the rendering of a row
// per record and the operators and sink after the aggregate, which see one
// row per key and batch.
//
// An aggregate whose keys keep nothing but their accumulators (no
// count_distinct, no min or max over a changelog: no MapState) and
// without state_ttl folds early instead (aggBatch.early): a key's
// accumulators are read when its first record of the batch comes and each
// record is folded into them at once, in arrival order, by the same
// Aggregate.fold; the batch keeps one row per key, not the records'
// inputs, and its end writes and emits each key's row. The state read,
// the folds, the write and the row are the same as when the batch ends,
// because nothing else reads or writes a key's accumulators in between
// (no map, no timer, no TTL clock), so the results are the same bytes.

// aggBatch is the mini-batch buffer of an Aggregate: the records of the
// keys seen since the batch began, each key's in arrival order. Records
// are kept in flat slices reused from batch to batch: record r's inputs
// are inputs[r*n:(r+1)*n] (n the aggregates), retract[r] says it is a -U
// or -D, next[r] is the key's next record (-1: the last).
type aggBatch struct {
	// early says records are folded as they come, into their key's row
	// (aggBatchKey.cur), and inputs, retract and next stay empty (see the
	// file's comment; Aggregate.foldsEarly).
	early bool
	// n is the records of the batch.
	n int
	// size is the records that end a batch (MiniBatchParams.Size);
	// maxBytes the bytes (MiniBatchParams.MaxBytes, defaulted), bytes
	// what the batch holds by batchBytes' count; latency is
	// MiniBatchParams.AllowLatency (the KeyedOperator keeps the clock).
	size     int
	maxBytes int64
	bytes    int64
	latency  time.Duration
	inputs   []aggInput
	retract  []bool
	next     []int32
	// keys are the batch's keys in the order of their first record;
	// index finds a key's place in keys (and in rows).
	keys  []aggBatchKey
	index map[string]int32
	// rows are the keys' rows when folding early, one per key.
	rows []aggBatchRow
}

// aggBatchKey is one key of a batch: its records (first and last index a
// linked list through aggBatch.next), the head of its latest record, which
// the key's output takes (as the last row without mini_batch would), and
// whether any of its records retracts (the row before the batch may then
// be needed for a -D).
type aggBatchKey struct {
	key         []byte
	head        outputHead
	first, last int32
	retracts    bool
}

// aggBatchRow is a key's row in a batch that folds early (aggBatch.early;
// aggBatch.rows, parallel to keys): the key's accumulators so far, cur
// (found: it has some; nil after a retraction emptied it), whether it had
// some before the batch (had), and the row before the batch rendered when
// the batch's end will need it (prev, see Aggregate.bufferEarly).
type aggBatchRow struct {
	cur        []aggAccumulator
	prev       []byte
	found, had bool
}

// reset empties b for the next batch, keeping its slices' memory (the
// inputs are zeroed so that the batch's values can be collected).
func (b *aggBatch) reset() {
	if b == nil {
		return
	}
	clear(b.inputs)
	b.inputs, b.retract, b.next = b.inputs[:0], b.retract[:0], b.next[:0]
	clear(b.keys)
	b.keys = b.keys[:0]
	clear(b.rows)
	b.rows = b.rows[:0]
	b.bytes, b.n = 0, 0
	if b.index == nil {
		b.index = map[string]int32{}
	}
	clear(b.index)
}

// records returns the records buffered.
func (b *aggBatch) records() int { return b.n }

// The sizes batchBytes counts: a record's bookkeeping (retract flag and
// next index), one aggregate input, a key's entry (with its index entry,
// whose map overhead is a rough 48 bytes) and a header.
const (
	aggBatchRecordBytes = int64(unsafe.Sizeof(false) + unsafe.Sizeof(int32(0)))
	aggBatchInputBytes  = int64(unsafe.Sizeof(aggInput{}))
	aggBatchKeyBytes    = int64(unsafe.Sizeof(aggBatchKey{})) + int64(unsafe.Sizeof("")) + 4 + 48
	aggBatchHeaderBytes = int64(unsafe.Sizeof(runtime.Header{}))
)

// AllowLatency implements LatencyBundleFunction:
// MiniBatchParams.AllowLatency (0 without mini_batch).
func (f *Aggregate) AllowLatency() time.Duration {
	if f.batch == nil {
		return 0
	}
	return f.batch.latency
}

// BundleRecords implements LatencyBundleFunction: the records buffered.
func (f *Aggregate) BundleRecords() int {
	if f.batch == nil {
		return 0
	}
	return f.batch.records()
}

// buffer adds rec (its inputs in, retract: a -U or -D) to the batch, and
// ends the batch when it holds size records or maxBytes. Headers count
// per record although only the key's latest are kept: a bound, not an
// exact figure.
func (f *Aggregate) buffer(rec runtime.Record, in []aggInput, retract bool, out Collector) error {
	b := f.batch
	if b.early {
		return f.bufferEarly(rec, in, retract, out)
	}
	r := int32(b.records())
	b.n++
	b.inputs = append(b.inputs, in...)
	b.retract = append(b.retract, retract)
	b.next = append(b.next, -1)
	b.bytes += aggBatchRecordBytes + aggBatchInputBytes*int64(len(in))
	for i := range in {
		b.bytes += int64(cap(in[i].raw))
	}
	head := outputHeadOf(rec)
	if len(head.headers) > 0 { // the record's memory is not ours after ProcessElement
		head.headers = slices.Clone(head.headers)
		for i := range head.headers {
			head.headers[i].Value = slices.Clone(head.headers[i].Value)
			b.bytes += aggBatchHeaderBytes + int64(len(head.headers[i].Key)+len(head.headers[i].Value))
		}
	}
	if k, ok := b.index[string(rec.Key)]; ok {
		e := &b.keys[k]
		b.next[e.last] = r
		e.last = r
		head.key = e.key
		e.head = head
		e.retracts = e.retracts || retract
	} else {
		key := slices.Clone(rec.Key)
		if key == nil {
			key = []byte{}
		}
		head.key = key
		b.bytes += aggBatchKeyBytes + 2*int64(len(key)) // the key and the index's copy
		b.index[string(key)] = int32(len(b.keys))
		b.keys = append(b.keys, aggBatchKey{key: key, head: head, first: r, last: r, retracts: retract})
	}
	if b.records() >= b.size || b.bytes >= b.maxBytes {
		return f.FinishBundle(context.Background(), out)
	}
	return nil
}

// foldsEarly says the batch can fold records as they come (aggBatch.early):
// no aggregate keeps a MapState (count_distinct, or min and max over a
// changelog input) and there is no state_ttl.
func (f *Aggregate) foldsEarly() bool {
	return len(f.maps) == 0 && f.ttl == nil
}

// bufferEarly is buffer folding early (aggBatch.early): a key's first
// record of the batch reads its accumulators (the current key is the
// record's) and, when the batch's end will need it, renders the row
// before the batch (for a -U, emit on_change's comparison, or a -D: a key
// that had a row, over a changelog input or for a retraction); each record
// is then folded into the key's row at once. A retraction of a key whose
// row before the batch was not rendered (a retraction over an input not
// declared a changelog) ends the batch first, so that it begins the next
// one and its row is rendered. The bytes counted are those buffer counts,
// a bound on what the key's row holds.
func (f *Aggregate) bufferEarly(rec runtime.Record, in []aggInput, retract bool, out Collector) error {
	b := f.batch
	k, ok := b.index[string(rec.Key)]
	if ok && retract && b.rows[k].had && b.rows[k].prev == nil {
		if err := f.FinishBundle(context.Background(), out); err != nil {
			return err
		}
		// The batch's end made its keys current in turn: the record's key
		// is made current again before its accumulators are read.
		f.backend.SetCurrentKey(rec.Key)
		f.backend.SetRecordTimestamp(rec.Timestamp)
		ok = false
	}
	head := outputHeadOf(rec)
	if len(head.headers) > 0 { // the record's memory is not ours after ProcessElement
		head.headers = slices.Clone(head.headers)
		for i := range head.headers {
			head.headers[i].Value = slices.Clone(head.headers[i].Value)
			b.bytes += aggBatchHeaderBytes + int64(len(head.headers[i].Key)+len(head.headers[i].Value))
		}
	}
	var e *aggBatchRow
	if ok {
		head.key = b.keys[k].key
		b.keys[k].head = head
		e = &b.rows[k]
	} else {
		cur, found, err := f.value(rec.Key)
		if err != nil {
			return err
		}
		key := slices.Clone(rec.Key)
		if key == nil {
			key = []byte{}
		}
		head.key = key
		b.bytes += aggBatchKeyBytes + 2*int64(len(key)) // the key and the index's copy
		b.index[string(key)] = int32(len(b.keys))
		b.keys = append(b.keys, aggBatchKey{key: key, head: head, first: -1, last: -1})
		b.rows = append(b.rows, aggBatchRow{cur: cur, found: found, had: found})
		e = &b.rows[len(b.rows)-1]
		if found && (retract || f.changelog || f.emitsOld(true, false)) {
			e.prev = f.output(key, cur) // before the fold, which may fold into cur
			b.bytes += int64(cap(e.prev))
		}
	}
	b.n++
	b.bytes += aggBatchRecordBytes + aggBatchInputBytes*int64(len(in))
	for i := range in {
		b.bytes += int64(cap(in[i].raw))
	}
	cur, found, err := f.fold(head.key, in, retract, e.cur, e.found)
	if err != nil {
		return err
	}
	if !found {
		cur = nil // emptied (or never had a row): the next insertion starts from zero, as after a Clear
	}
	e.cur, e.found = cur, found
	if b.records() >= b.size || b.bytes >= b.maxBytes {
		return f.FinishBundle(context.Background(), out)
	}
	return nil
}

// FinishBundle implements BundleFunction: it ends the mini-batch. For each
// key of the batch, in the order of its first record: make it current,
// read its accumulators once, fold its records in (Aggregate.fold: the
// map reads and writes per record), write the accumulators once (or clear
// them when retractions emptied the key), and emit the key's one change
// from the row before the batch to the row after it (emitChanges: +I, -U
// and +U or +U alone, on_change's comparison, or -D; nothing for a key
// that had no row before and has none after). The batch is empty after,
// also when it fails (the task then fails, and restores the last
// checkpoint, which never holds a batch).
func (f *Aggregate) FinishBundle(_ context.Context, out Collector) error {
	b := f.batch
	if b == nil || b.records() == 0 {
		return nil
	}
	defer b.reset()
	n := len(f.specs)
	for k := range b.keys {
		e := &b.keys[k]
		f.backend.SetCurrentKey(e.key)
		f.backend.SetRecordTimestamp(e.head.ts)
		var cur []aggAccumulator
		var prev []byte
		var found, had bool
		if b.early {
			r := b.rows[k]
			cur, found, had, prev = r.cur, r.found, r.had, r.prev
		} else {
			var err error
			if cur, found, err = f.value(e.key); err != nil {
				return err
			}
			had = found
			if had && (e.retracts || f.emitsOld(true, false)) {
				prev = f.output(e.key, cur) // before the fold, which may fold into cur
			}
			f.local.begin()
			for r := e.first; r >= 0; r = b.next[r] {
				cur, found, err = f.fold(e.key, b.inputs[int(r)*n:int(r+1)*n], b.retract[r], cur, found)
				if err != nil {
					f.local.on = false
					return err
				}
				if !found {
					cur = nil // emptied (or never had a row): the next insertion starts from zero, as after a Clear
				}
			}
			if err := f.local.flush(f.sets); err != nil { // the key's map entries, once each
				return err
			}
		}
		var err error
		switch {
		case found:
			err = f.update(e.key, cur)
		case had:
			err = f.acc.Clear()
		default:
			continue // inserted and retracted within the batch, or only retractions: no row before or after
		}
		if err != nil {
			return err
		}
		// As one record would: retract says the key may be deleted (it is
		// when it has no row left).
		if err := f.emitChanges(e.head.record(), prev, had, !found, cur, out); err != nil {
			return err
		}
	}
	return nil
}
