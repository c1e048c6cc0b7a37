package operators

import (
	"context"
	"time"
	"unsafe"

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

// joinExpiry is one entry of the interval join's cleanup queue: the rows
// of key's side (0 left, 1 right) whose interval ends at or before at (ms:
// a left row at t ends at t + upper, a right row at t - lower) are removed
// once the watermark reaches at. One entry per buffered row (rows of one
// key, side and end share their entries' effect: the first one removes
// them all and the others find nothing).
type joinExpiry struct {
	at   int64
	key  string
	side uint8
}

// less orders entries by time, then key, then side: the order main's
// per-row timers fired in (by time and key, the left side first), and
// equal entries pop one after another.
func (e *joinExpiry) less(o *joinExpiry) bool {
	if e.at != o.at {
		return e.at < o.at
	}
	if e.key != o.key {
		return e.key < o.key
	}
	return e.side < o.side
}

// expiryQueue is a binary min-heap of joinExpiry (the interval join's
// in-memory replacement of its per-row event-time timers).
type expiryQueue []joinExpiry

func (q *expiryQueue) push(e joinExpiry) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].less(&h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

// popDue removes and returns the earliest entry when it is at or before
// upTo.
func (q *expiryQueue) popDue(upTo int64) (joinExpiry, bool) {
	h := *q
	if len(h) == 0 || h[0].at > upTo {
		return joinExpiry{}, false
	}
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = joinExpiry{}
	h = h[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h[r].less(&h[l]) {
			m = r
		}
		if !h[m].less(&h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top, true
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
// same order: by end time, key, left side first).
func (j *IntervalJoin) OnWatermark(ctx context.Context, wm time.Time, out Collector) error {
	upTo := wm.UnixMilli()
	var last joinExpiry
	first := true
	for {
		e, ok := j.expiry.popDue(upTo)
		if !ok {
			return nil
		}
		if !first && e == last {
			continue // the rows of this key, side and end are gone
		}
		first, last = false, e
		// The backend copies the key; an outer row's output gets its own.
		j.backend.SetCurrentKey(unsafe.Slice(unsafe.StringData(e.key), len(e.key)))
		j.backend.SetRecordTimestamp(time.Time{})
		until := e.at - j.upper
		if e.side == 1 {
			until = e.at + j.lower
		}
		key := j.backend.CurrentKey() // not emitted: valid until the next SetCurrentKey
		if j.p.Join.outer(int(e.side)) {
			key = []byte(e.key)
		}
		if err := j.expireSide(int(e.side), until, key, out); err != nil {
			return err
		}
	}
}

// rebuildExpiry fills the cleanup queue with one entry per row of the
// subtask's key groups (at Open: the queue is not checkpointed) and counts
// them for the buffered-rows gauge.
func (j *IntervalJoin) rebuildExpiry(b state.KeyedStateBackend) error {
	j.expiry = j.expiry[:0]
	return state.ApplyToAllValueKeys(b, intervalSidesState(), func(key []byte, s state.ValueState[joinSides]) error {
		sides, _, err := s.Value()
		if err != nil {
			return err
		}
		k := string(key)
		for side, rows := range sides {
			if n, ok := spilled(rows); ok {
				j.rows += n
				for t, err := range j.byTime[side].Keys() {
					if err != nil {
						return err
					}
					j.expiry.push(joinExpiry{at: j.end(side, t), key: k, side: uint8(side)})
				}
				continue
			}
			j.rows += int64(len(rows))
			for i := range rows {
				j.expiry.push(joinExpiry{at: j.end(side, rows[i].TS), key: k, side: uint8(side)})
			}
		}
		return nil
	})
}

var _ WatermarkFunction = (*IntervalJoin)(nil)
