package state

import "iter"

// AsyncMapState is the async form of MapState (Flink's
// org.apache.flink.api.common.state.v2.MapState); scope, goroutine and
// errors as AsyncValueState.
//
// AsyncGet, AsyncContains, AsyncIsEmpty, AsyncEntries, AsyncKeys and
// AsyncValues read (on a read worker when the backend has ConcurrentReads);
// the iterating reads load every entry of the key at once, in the order
// MapState.Entries yields them. AsyncPut, AsyncPutAll, AsyncRemove and
// AsyncClear write on the subtask goroutine; AsyncPutAll consumes entries
// at the call.
type AsyncMapState[K, V any] interface {
	AsyncGet(uk K) StateFuture[Optional[V]]
	AsyncPut(uk K, v V) StateFuture[Void]
	AsyncPutAll(entries iter.Seq2[K, V]) StateFuture[Void]
	AsyncRemove(uk K) StateFuture[Void]
	AsyncContains(uk K) StateFuture[bool]
	AsyncEntries() StateFuture[StateIterator[MapEntry[K, V]]]
	AsyncKeys() StateFuture[StateIterator[K]]
	AsyncValues() StateFuture[StateIterator[V]]
	AsyncIsEmpty() StateFuture[bool]
	AsyncClear() StateFuture[Void]
}

// GetAsyncMapState returns the async handle of the MapState d describes in
// c's backend; as GetAsyncValueState.
func GetAsyncMapState[K, V any](c *AsyncExecutionController, d MapStateDescriptor[K, V]) (AsyncMapState[K, V], error) {
	s, err := GetMapState(c.backend, d)
	if err != nil {
		return nil, err
	}
	h := &asyncMapState[K, V]{c: c, s: s}
	if ms, ok := s.(*mapState[K, V]); ok && c.offReads {
		h.bound = ms
	}
	return h, nil
}

type asyncMapState[K, V any] struct {
	c     *AsyncExecutionController
	s     MapState[K, V]
	bound *mapState[K, V] // nil: read on the subtask goroutine
}

// read issues a read that runs fn on the handle for the record's key: the
// bound handle on a worker, or the current-key handle inline.
func mapRead[K, V, R any](h *asyncMapState[K, V], fn func(s MapState[K, V]) (R, error)) StateFuture[R] {
	var off func([]byte) (R, error)
	if h.bound != nil {
		off = func(key []byte) (R, error) { return fn(h.bound.bind(h.c.backend.core().keyRefFor(key))) }
	}
	return submitRead(h.c, off, func() (R, error) { return fn(h.s) })
}

func (h *asyncMapState[K, V]) AsyncGet(uk K) StateFuture[Optional[V]] {
	return mapRead(h, func(s MapState[K, V]) (Optional[V], error) { return optional(s.Get(uk)) })
}

func (h *asyncMapState[K, V]) AsyncContains(uk K) StateFuture[bool] {
	return mapRead(h, func(s MapState[K, V]) (bool, error) { return s.Contains(uk) })
}

func (h *asyncMapState[K, V]) AsyncIsEmpty() StateFuture[bool] {
	return mapRead(h, func(s MapState[K, V]) (bool, error) { return s.IsEmpty() })
}

func (h *asyncMapState[K, V]) AsyncEntries() StateFuture[StateIterator[MapEntry[K, V]]] {
	rec := h.c.current
	return mapRead(h, func(s MapState[K, V]) (StateIterator[MapEntry[K, V]], error) {
		return collectIterator(rec, s.Entries())
	})
}

func (h *asyncMapState[K, V]) AsyncKeys() StateFuture[StateIterator[K]] {
	rec := h.c.current
	return mapRead(h, func(s MapState[K, V]) (StateIterator[K], error) { return collectIterator(rec, s.Keys()) })
}

func (h *asyncMapState[K, V]) AsyncValues() StateFuture[StateIterator[V]] {
	rec := h.c.current
	return mapRead(h, func(s MapState[K, V]) (StateIterator[V], error) { return collectIterator(rec, s.Values()) })
}

func (h *asyncMapState[K, V]) AsyncPut(uk K, v V) StateFuture[Void] {
	return submitWrite(h.c, func() (Void, error) { return Void{}, h.s.Put(uk, v) })
}

func (h *asyncMapState[K, V]) AsyncPutAll(entries iter.Seq2[K, V]) StateFuture[Void] {
	var ks []K
	var vs []V
	for k, v := range entries {
		ks = append(ks, k)
		vs = append(vs, v)
	}
	return submitWrite(h.c, func() (Void, error) {
		return Void{}, h.s.PutAll(func(yield func(K, V) bool) {
			for i := range ks {
				if !yield(ks[i], vs[i]) {
					return
				}
			}
		})
	})
}

func (h *asyncMapState[K, V]) AsyncRemove(uk K) StateFuture[Void] {
	return submitWrite(h.c, func() (Void, error) { return Void{}, h.s.Remove(uk) })
}

func (h *asyncMapState[K, V]) AsyncClear() StateFuture[Void] {
	return submitWrite(h.c, func() (Void, error) { return Void{}, h.s.Clear() })
}
