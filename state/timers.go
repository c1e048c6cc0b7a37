package state

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// TimeDomain says which clock a timer is on (Flink's TimeDomain).
type TimeDomain uint8

const (
	// EventTime timers fire when the watermark reaches them.
	EventTime TimeDomain = 0
	// ProcessingTime timers fire when the wall clock reaches them.
	ProcessingTime TimeDomain = 1
)

// String returns "event_time" or "processing_time".
func (d TimeDomain) String() string {
	if d == ProcessingTime {
		return "processing_time"
	}
	return "event_time"
}

// TimersStateName is the reserved map state holding a keyed subtask's
// timers; FORMAT.md ("Timers") gives its bytes. Its name is part of the
// checkpoint format.
const TimersStateName = "_timers"

// timersSerializer is the serializer name recorded in the timers' meta.
const timersSerializer = "timer.v1"

// Timer is one registered timer: a key, a domain and a time in
// milliseconds since the Unix epoch (timers have millisecond resolution).
type Timer struct {
	Key       []byte
	Domain    TimeDomain
	Timestamp int64
}

// Time returns the timer's time.
func (t Timer) Time() time.Time { return time.UnixMilli(t.Timestamp) }

// ErrTimerKeyGroup is wrapped by TimerQueue.Register when the key's key
// group is not owned by the backend.
var ErrTimerKeyGroup = errors.New("state: timer key outside the backend's key groups")

// TimerQueue is the timer service storage of one keyed subtask (Flink's
// InternalTimerService with its priority queues): at most one timer per key,
// domain and millisecond, each an entry of the map state TimersStateName in
// the backend, so timers are checkpointed, restored and redistributed by
// key group with the rest of the keyed state. It keeps one in-memory
// priority queue per domain, built from the backend at NewTimerQueue (the
// entries of the backend's key groups: a restore at another parallelism
// gets exactly the timers of the key groups it owns). Owned by the subtask
// goroutine, like its backend.
type TimerQueue struct {
	c     *stateCore
	heaps [2]timerHeap
	set   map[string]struct{} // timerID of every registered timer
}

// NewTimerQueue returns the timer queue of backend b, loading every timer
// stored in its key groups. It fails when the backend is closed or the
// stored timers are corrupt.
func NewTimerQueue(b KeyedStateBackend) (*TimerQueue, error) {
	spec := descriptorSpec{name: TimersStateName, kind: kindMap, serializer: timersSerializer}
	h, err := register(b, spec, "timers", func(c *stateCore) any { return c })
	if err != nil {
		return nil, err
	}
	c := h.(*stateCore)
	q := &TimerQueue{c: c, set: map[string]struct{}{}}
	kgs := c.b.kgs
	for kg := kgs.Start; kg <= kgs.End; kg++ {
		err := c.st.scanGroup(c.id, kg, func(key, uk, _ []byte) error {
			d, ts, err := parseTimerUserKey(uk)
			if err != nil {
				return err
			}
			q.push(Timer{Key: append([]byte(nil), key...), Domain: d, Timestamp: ts})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("state: load timers of key group %d: %w", kg, err)
		}
	}
	return q, nil
}

// timerUserKey is the user key of a timer in the timers' map state:
// domain(1) ‖ timestamp(8, big-endian, sign bit flipped).
func timerUserKey(d TimeDomain, ts int64) []byte {
	b := make([]byte, 9)
	b[0] = byte(d)
	binary.BigEndian.PutUint64(b[1:], uint64(ts)^(1<<63))
	return b
}

func parseTimerUserKey(uk []byte) (TimeDomain, int64, error) {
	if len(uk) != 9 || uk[0] > byte(ProcessingTime) {
		return 0, 0, fmt.Errorf("state: timer entry of %d bytes: %w", len(uk), ErrCorrupt)
	}
	return TimeDomain(uk[0]), int64(binary.BigEndian.Uint64(uk[1:]) ^ (1 << 63)), nil
}

func timerID(t Timer) string {
	return string(timerUserKey(t.Domain, t.Timestamp)) + string(t.Key)
}

func (q *TimerQueue) push(t Timer) {
	q.set[timerID(t)] = struct{}{}
	heap.Push(&q.heaps[t.Domain], t)
}

// Register adds the timer of key in domain d at ts (ms); it returns false
// when that timer exists already (then nothing changes). Errors: the
// backend is closed (ErrClosed), or the key is not in its key groups
// (wrapping ErrTimerKeyGroup).
func (q *TimerQueue) Register(d TimeDomain, key []byte, ts int64) (bool, error) {
	t := Timer{Key: key, Domain: d, Timestamp: ts}
	if _, ok := q.set[timerID(t)]; ok {
		return false, nil
	}
	k, err := q.stateKey(key)
	if err != nil {
		return false, err
	}
	// A timer the queue does not hold has no entry in the store (its
	// delete may still be in the write cache, which then knows).
	set := q.c.st.setEntry
	if ps, ok := q.c.st.(*pebbleStore); ok {
		set = ps.setNewEntry
	}
	if err := set(k, timerUserKey(d, ts), []byte{}); err != nil {
		return false, err
	}
	t.Key = append([]byte(nil), key...)
	q.push(t)
	return true, nil
}

// Delete removes the timer of key in domain d at ts; absent is fine.
func (q *TimerQueue) Delete(d TimeDomain, key []byte, ts int64) error {
	id := timerID(Timer{Key: key, Domain: d, Timestamp: ts})
	if _, ok := q.set[id]; !ok {
		return nil
	}
	k, err := q.stateKey(key)
	if err != nil {
		return err
	}
	if err := q.c.st.delEntry(k, timerUserKey(d, ts)); err != nil {
		return err
	}
	delete(q.set, id) // its heap entry is dropped when it reaches the top
	return nil
}

// DeleteKeys removes every timer, of both domains, whose key match
// selects, and returns how many it removed. It visits every registered
// timer (O(timers)), so it is for rare lifecycle events such as a dynamic
// rule's deletion, not the record path; match must not retain the key.
// Errors are the backend's (ErrClosed).
func (q *TimerQueue) DeleteKeys(match func(key []byte) bool) (int, error) {
	var ids []string
	for id := range q.set {
		if match([]byte(id[9:])) {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		k, err := q.stateKey([]byte(id[9:]))
		if err != nil {
			return 0, err
		}
		if err := q.c.st.delEntry(k, []byte(id[:9])); err != nil {
			return 0, err
		}
		delete(q.set, id) // its heap entry is dropped when it reaches the top
	}
	return len(ids), nil
}

// Peek returns the earliest timer of domain d, false when there is none.
func (q *TimerQueue) Peek(d TimeDomain) (Timer, bool) {
	h := &q.heaps[d]
	for h.Len() > 0 {
		t := (*h)[0]
		if _, ok := q.set[timerID(t)]; ok {
			return t, true
		}
		heap.Pop(h) // deleted
	}
	return Timer{}, false
}

// PopDue removes and returns the earliest timer of domain d when its time
// is at or before upTo (ms); false when there is none. Its entry is deleted
// from the backend.
func (q *TimerQueue) PopDue(d TimeDomain, upTo int64) (Timer, bool, error) {
	t, ok := q.Peek(d)
	if !ok || t.Timestamp > upTo {
		return Timer{}, false, nil
	}
	heap.Pop(&q.heaps[d])
	delete(q.set, timerID(t))
	k, err := q.stateKey(t.Key)
	if err != nil {
		return Timer{}, false, err
	}
	if err := q.c.st.delEntry(k, timerUserKey(d, t.Timestamp)); err != nil {
		return Timer{}, false, err
	}
	return t, true, nil
}

// Len returns the number of timers registered in domain d.
func (q *TimerQueue) Len(d TimeDomain) int {
	n := 0
	for id := range q.set {
		if id[0] == byte(d) {
			n++
		}
	}
	return n
}

func (q *TimerQueue) stateKey(key []byte) (stateKey, error) {
	if q.c.b.closed {
		return stateKey{}, ErrClosed
	}
	kg := keygroup.Assign(key, q.c.b.maxP)
	if !q.c.b.kgs.Contains(kg) {
		return stateKey{}, fmt.Errorf("key group %d not in %s: %w", kg, q.c.b.kgs, ErrTimerKeyGroup)
	}
	return stateKey{id: q.c.id, kg: kg, key: key}, nil
}

// timerHeap orders timers by time, then key.
type timerHeap []Timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].Timestamp != h[j].Timestamp {
		return h[i].Timestamp < h[j].Timestamp
	}
	return string(h[i].Key) < string(h[j].Key)
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(Timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

// EntryCount returns the number of entries stored in b's key-group space:
// one per value, list, reducing or aggregating state of a key, one per map
// entry and one per timer. Tests and diagnostics use it to check that state
// was removed (closed windows, expired keys).
func EntryCount(b KeyedStateBackend) (int, error) {
	if b.core().closed {
		return 0, ErrClosed
	}
	return b.core().st.countEntries()
}
