package operators

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/kstreamd/kstreamd/state"
)

// WatermarkFunction is the optional interface of a keyed function that
// keeps its own event-time queue in memory instead of registering a timer
// per entry with the TimerService (Flink's heap priority-queue timers, here
// kept by the function: derived from its keyed state and rebuilt from it at
// Open, so nothing of the queue is written per record or checkpointed).
// OnWatermark runs on the subtask goroutine each time a watermark reaches
// the operator, after the event-time timers it made due fired and before
// it is forwarded, so its output precedes that watermark downstream. It may
// set the backend's current key (OpenContext.Backend) to read and write
// that key's state, and emit to out. An error fails the task.
type WatermarkFunction interface {
	OnWatermark(ctx context.Context, wm time.Time, out Collector) error
}

// expiryQueue is the interval join's cleanup queue (its in-memory
// replacement of per-row event-time timers): per end time (ms: a left row
// at t ends at t + upper, a right row at t - lower) one bucket listing the
// keys and sides whose rows end then, and a min-heap of the buckets'
// times. A row's entry costs an append of its key's bytes to its end's
// bucket (the bucket pushed to last is at hand: rows arrive mostly in time
// order), not a string and a heap insert comparing keys; a key and side
// pushed twice in a row to one bucket is listed once (rows of one key,
// side and end share their entries' effect: the first removes them all).
// Buckets are reused once run.
type expiryQueue struct {
	times   []int64 // min-heap of the buckets' times
	buckets map[int64]*expiryBucket
	last    *expiryBucket // the bucket pushed to last, or nil
	free    []*expiryBucket
}

// expiryBucket lists the keys and sides whose rows end at at: keys holds
// the keys one after another, ents per entry the end of its key in keys
// and its side (0 left, 1 right).
type expiryBucket struct {
	at   int64
	keys []byte
	ents []expiryEnt
}

// expiryEnt is one entry of an expiryBucket.
type expiryEnt struct {
	end  uint32 // the end of the key in the bucket's keys
	side uint8
}

// key returns entry i's key, start its start in keys.
func (b *expiryBucket) key(i int) (key []byte) {
	start := uint32(0)
	if i > 0 {
		start = b.ents[i-1].end
	}
	return b.keys[start:b.ents[i].end:b.ents[i].end]
}

// push queues the cleanup of key's side at at.
func (q *expiryQueue) push(at int64, key []byte, side uint8) {
	b := q.last
	if b == nil || b.at != at {
		b = q.buckets[at]
		if b == nil {
			b = q.bucket(at)
		}
		q.last = b
	}
	if n := len(b.ents); n > 0 && b.ents[n-1].side == side && string(b.key(n-1)) == string(key) {
		return
	}
	b.keys = append(b.keys, key...)
	b.ents = append(b.ents, expiryEnt{end: uint32(len(b.keys)), side: side})
}

// bucket adds the empty bucket of time at.
func (q *expiryQueue) bucket(at int64) *expiryBucket {
	var b *expiryBucket
	if n := len(q.free); n > 0 {
		b, q.free = q.free[n-1], q.free[:n-1]
	} else {
		b = &expiryBucket{}
	}
	b.at = at
	if q.buckets == nil {
		q.buckets = map[int64]*expiryBucket{}
	}
	q.buckets[at] = b
	h := append(q.times, at)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[i] >= h[p] {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	q.times = h
	return b
}

// popDue removes and returns the earliest bucket when its time is at or
// before upTo; the caller hands it back with recycle once done with it.
func (q *expiryQueue) popDue(upTo int64) (*expiryBucket, bool) {
	h := q.times
	if len(h) == 0 || h[0] > upTo {
		return nil, false
	}
	at := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h[r] < h[l] {
			m = r
		}
		if h[m] >= h[i] {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	q.times = h
	b := q.buckets[at]
	delete(q.buckets, at)
	if q.last == b {
		q.last = nil
	}
	return b, true
}

// recycle keeps b, run, for a later time (a bucket that held many keys is
// dropped rather than kept large).
func (q *expiryQueue) recycle(b *expiryBucket) {
	if cap(b.keys) > 1<<16 || len(q.free) >= 64 {
		return
	}
	b.keys, b.ents = b.keys[:0], b.ents[:0]
	q.free = append(q.free, b)
}

// reset empties the queue.
func (q *expiryQueue) reset() { *q = expiryQueue{} }

// sortByKey orders b's entries by key, then side (the order of main's
// per-row timers: by time and key, the left side first), an entry
// pushed more than once listed once.
func (b *expiryBucket) sortByKey() {
	type ent struct {
		key  []byte
		side uint8
	}
	es := make([]ent, len(b.ents))
	for i := range b.ents {
		es[i] = ent{b.key(i), b.ents[i].side}
	}
	slices.SortFunc(es, func(x, y ent) int {
		if c := bytes.Compare(x.key, y.key); c != 0 {
			return c
		}
		return cmp.Compare(x.side, y.side)
	})
	es = slices.CompactFunc(es, func(x, y ent) bool { return x.side == y.side && bytes.Equal(x.key, y.key) })
	keys := make([]byte, 0, len(b.keys))
	b.ents = b.ents[:0]
	for _, e := range es {
		keys = append(keys, e.key...)
		b.ents = append(b.ents, expiryEnt{end: uint32(len(keys)), side: e.side})
	}
	b.keys = keys
}

// end returns when the rows of side at time t are removed: a left row at
// t + upper (no right row after the watermark there can match it), a right
// row at t - lower.
func (j *IntervalJoin) end(side int, t int64) int64 {
	if side == 0 {
		return t + j.upper
	}
	return t - j.lower
}

// OnWatermark implements WatermarkFunction: the rows whose interval the
// watermark reached are removed, the unmatched ones of an outer side
// emitted first at their own time (what main's per-row timers did, in the
// same order: by end time, key, left side first; an inner join emits
// nothing there, so its buckets are run in the order pushed).
func (j *IntervalJoin) OnWatermark(ctx context.Context, wm time.Time, out Collector) error {
	upTo := wm.UnixMilli()
	outer := j.p.Join != JoinInner
	for {
		b, ok := j.expiry.popDue(upTo)
		if !ok {
			return nil
		}
		if outer {
			b.sortByKey()
		}
		for i := range b.ents {
			side := int(b.ents[i].side)
			// The backend copies the key; an outer row's output gets its
			// own (the bucket's memory is reused).
			j.backend.SetCurrentKey(b.key(i))
			j.backend.SetRecordTimestamp(time.Time{})
			until := b.at - j.upper
			if side == 1 {
				until = b.at + j.lower
			}
			key := j.backend.CurrentKey() // not emitted: valid until the next SetCurrentKey
			if j.p.Join.outer(side) {
				key = bytes.Clone(key)
			}
			if err := j.expireSide(side, until, key, out); err != nil {
				return err
			}
		}
		j.expiry.recycle(b)
	}
}

// rebuildExpiry fills the cleanup queue with one entry per row of the
// subtask's key groups (at Open: the queue is not checkpointed) and counts
// them for the buffered-rows gauge.
func (j *IntervalJoin) rebuildExpiry(b state.KeyedStateBackend) error {
	j.expiry.reset()
	return state.ApplyToAllValueKeys(b, intervalRowsState(), func(key []byte, s state.ValueState[*intervalKeyRows]) error {
		k, ok, err := s.Value()
		if err != nil || !ok {
			return err
		}
		for side, rows := range k.sides {
			if n, ok := spilled(rows); ok {
				j.rows += n
				for t, err := range j.byTime[side].Keys() {
					if err != nil {
						return err
					}
					j.expiry.push(j.end(side, t), key, uint8(side))
				}
				continue
			}
			j.rows += int64(len(rows))
			for i := range rows {
				j.expiry.push(j.end(side, rows[i].TS), key, uint8(side))
			}
		}
		return nil
	})
}

var _ WatermarkFunction = (*IntervalJoin)(nil)
