package state

import "github.com/kstreamd/kstreamd/state/keygroup"

// Optional is the value of an async read that may find nothing: Value and
// true, or the zero T and false (the (T, bool) of the synchronous API; Flink
// returns null instead).
type Optional[T any] struct {
	Value T
	OK    bool
}

// AsyncValueState is the async form of ValueState (Flink's
// org.apache.flink.api.common.state.v2.ValueState), scoped to the key of the
// record whose code calls it. It must be called on the subtask goroutine
// from within a record of its AsyncExecutionController (the function given
// to Process or a continuation); elsewhere the futures fail with
// ErrNoRecordContext.
//
// AsyncValue reads the value: on a read worker when the backend has
// ConcurrentReads (Pebble), on the subtask goroutine otherwise, and there
// too, at once, when Pebble's write cache holds the key. AsyncUpdate
// and AsyncClear write on the subtask goroutine: at once, or after the
// record's earlier reads completed. Errors as ValueState's, through the
// futures.
type AsyncValueState[T any] interface {
	AsyncValue() StateFuture[Optional[T]]
	AsyncUpdate(v T) StateFuture[Void]
	AsyncClear() StateFuture[Void]
}

// GetAsyncValueState returns the async handle of the ValueState d describes
// in c's backend (the same state GetValueState returns; the synchronous
// handle stays usable). Errors as GetValueState. Call it on the subtask
// goroutine, typically in the function's open.
func GetAsyncValueState[T any](c *AsyncExecutionController, d ValueStateDescriptor[T]) (AsyncValueState[T], error) {
	s, err := GetValueState(c.backend, d)
	if err != nil {
		return nil, err
	}
	h := &asyncValueState[T]{c: c, s: s}
	if vs, ok := s.(*valueState[T]); ok && c.offReads {
		h.bound = vs
	}
	return h, nil
}

// asyncValueState implements AsyncValueState over the synchronous handle s
// (current key) and, for worker reads, bound (bound to explicit keys). It is
// the reader of its own read requests.
type asyncValueState[T any] struct {
	c     *AsyncExecutionController
	s     ValueState[T]
	bound *valueState[T] // nil: read on the subtask goroutine
	buf   []byte         // readCached's Pebble key, subtask goroutine only
	hit   doneSlot[Optional[T]]
}

func (h *asyncValueState[T]) AsyncValue() StateFuture[Optional[T]] {
	return issueRead[Optional[T]](h.c, h, h.bound != nil, &h.hit)
}

func (h *asyncValueState[T]) readCurrent() (Optional[T], error) { return optional(h.s.Value()) }

func (h *asyncValueState[T]) readCached() (Optional[T], bool, error) {
	v, found, cached, err := cachedDecoded(h.bound.c, h.bound.ser, "value", &h.buf)
	return Optional[T]{Value: v, OK: found}, cached, err
}

func (h *asyncValueState[T]) readKey(key []byte) (Optional[T], error) {
	k := keyRefAt(h.bound.c, key)
	return optional(readDecoded(h.bound.c, &k, h.bound.ser, "value"))
}

func (h *asyncValueState[T]) AsyncUpdate(v T) StateFuture[Void] {
	rec := h.c.current
	if rec == nil {
		return failedFuture[Void](nil, ErrNoRecordContext)
	}
	if rec.idle() { // nothing of the record queued or with a worker: write now
		return doneVoid(rec, h.s.Update(v))
	}
	q := &updateRequest[T]{future: future[Void]{rec: rec}, s: h.s, v: v}
	h.c.issue(rec, q)
	return &q.future
}

func (h *asyncValueState[T]) AsyncClear() StateFuture[Void] { return submitClear(h.c, h.s) }

// keyRefAt addresses key in c's backend for a read by explicit key; unlike
// keyRefFor it does not copy key, which must stay unchanged while the read
// runs (a record's key does).
func keyRefAt(c *stateCore, key []byte) keyRef {
	return keyRef{kg: keygroup.Assign(key, c.b.maxP), key: key}
}

// cachedDecoded reads the value-like blob of c under the current key from
// the Pebble write cache only and decodes it with ser, as readDecoded does
// (TTL included); cached false means the cache does not hold it (or the
// store has no cache) and nothing was read. buf is reused for the Pebble
// key (subtask goroutine only).
func cachedDecoded[T any](c *stateCore, ser Serializer[T], op string, buf *[]byte) (v T, found, cached bool, err error) {
	ps, ok := c.st.(*pebbleStore)
	if !ok || ps.cache == nil {
		return v, false, false, nil
	}
	k, err := c.stateKey(nil)
	if err != nil {
		return v, false, true, err
	}
	*buf = appendStateKey((*buf)[:0], k)
	blob, found, cached, _, err := ps.cache.get(c.id, *buf, nil)
	if err != nil {
		return v, false, true, c.wrapErr(op, err)
	}
	if !cached || !found {
		return v, false, cached, nil
	}
	payload, ok, err := c.visibleValue(k, blob)
	if err != nil || !ok {
		return v, false, true, err
	}
	if v, err = ser.Decode(payload); err != nil {
		var zero T
		return zero, false, true, c.wrapErr(op, err)
	}
	return v, true, true, nil
}

// optional packs a synchronous (value, found, error) read.
func optional[T any](v T, ok bool, err error) (Optional[T], error) {
	return Optional[T]{Value: v, OK: ok}, err
}

// AsyncReducingState is the async form of ReducingState (Flink's
// org.apache.flink.api.common.state.v2.ReducingState); scope, goroutine and
// errors as AsyncValueState. AsyncGet reads like AsyncValue. AsyncAdd runs
// the synchronous Add (read, reduce, write) on the subtask goroutine, like a
// write, so it keeps program order; its read is not moved to a worker.
type AsyncReducingState[T any] interface {
	AsyncGet() StateFuture[Optional[T]]
	AsyncAdd(v T) StateFuture[Void]
	AsyncClear() StateFuture[Void]
}

// GetAsyncReducingState returns the async handle of the ReducingState d
// describes in c's backend; as GetAsyncValueState.
func GetAsyncReducingState[T any](c *AsyncExecutionController, d ReducingStateDescriptor[T]) (AsyncReducingState[T], error) {
	s, err := GetReducingState(c.backend, d)
	if err != nil {
		return nil, err
	}
	h := &asyncReducingState[T]{c: c, s: s}
	if rs, ok := s.(*reducingState[T]); ok && c.offReads {
		h.bound = rs
	}
	return h, nil
}

type asyncReducingState[T any] struct {
	c     *AsyncExecutionController
	s     ReducingState[T]
	bound *reducingState[T] // nil: read on the subtask goroutine
}

func (h *asyncReducingState[T]) AsyncGet() StateFuture[Optional[T]] {
	var off func([]byte) (Optional[T], error)
	if h.bound != nil {
		off = func(key []byte) (Optional[T], error) {
			return optional(h.bound.bind(h.c.backend.core().keyRefFor(key)).Get())
		}
	}
	return submitRead(h.c, off, func() (Optional[T], error) { return optional(h.s.Get()) })
}

func (h *asyncReducingState[T]) AsyncAdd(v T) StateFuture[Void] {
	return submitWrite(h.c, func() (Void, error) { return Void{}, h.s.Add(v) })
}

func (h *asyncReducingState[T]) AsyncClear() StateFuture[Void] {
	return submitClear(h.c, h.s)
}

// AsyncAggregatingState is the async form of AggregatingState (Flink's
// org.apache.flink.api.common.state.v2.AggregatingState); scope, goroutine
// and errors as AsyncValueState. AsyncGet reads the result like AsyncValue;
// AsyncAdd runs the synchronous Add on the subtask goroutine, like
// AsyncReducingState.AsyncAdd.
type AsyncAggregatingState[IN, OUT any] interface {
	AsyncGet() StateFuture[Optional[OUT]]
	AsyncAdd(v IN) StateFuture[Void]
	AsyncClear() StateFuture[Void]
}

// GetAsyncAggregatingState returns the async handle of the AggregatingState
// d describes in c's backend; as GetAsyncValueState.
func GetAsyncAggregatingState[IN, ACC, OUT any](c *AsyncExecutionController, d AggregatingStateDescriptor[IN, ACC, OUT]) (AsyncAggregatingState[IN, OUT], error) {
	s, err := GetAggregatingState(c.backend, d)
	if err != nil {
		return nil, err
	}
	h := &asyncAggregatingState[IN, ACC, OUT]{c: c, s: s}
	if as, ok := s.(*aggregatingState[IN, ACC, OUT]); ok && c.offReads {
		h.bound = as
	}
	return h, nil
}

type asyncAggregatingState[IN, ACC, OUT any] struct {
	c     *AsyncExecutionController
	s     AggregatingState[IN, OUT]
	bound *aggregatingState[IN, ACC, OUT] // nil: read on the subtask goroutine
}

func (h *asyncAggregatingState[IN, ACC, OUT]) AsyncGet() StateFuture[Optional[OUT]] {
	var off func([]byte) (Optional[OUT], error)
	if h.bound != nil {
		off = func(key []byte) (Optional[OUT], error) {
			return optional(h.bound.bind(h.c.backend.core().keyRefFor(key)).Get())
		}
	}
	return submitRead(h.c, off, func() (Optional[OUT], error) { return optional(h.s.Get()) })
}

func (h *asyncAggregatingState[IN, ACC, OUT]) AsyncAdd(v IN) StateFuture[Void] {
	return submitWrite(h.c, func() (Void, error) { return Void{}, h.s.Add(v) })
}

func (h *asyncAggregatingState[IN, ACC, OUT]) AsyncClear() StateFuture[Void] {
	return submitClear(h.c, h.s)
}
