package state

import (
	"iter"
	"slices"
)

// AsyncListState is the async form of ListState (Flink's
// org.apache.flink.api.common.state.v2.ListState); scope, goroutine and
// errors as AsyncValueState.
//
// AsyncGet reads the whole list (on a read worker when the backend has
// ConcurrentReads) and yields a StateIterator over its elements, oldest
// first. AsyncAdd, AsyncAddAll, AsyncUpdate and AsyncClear write on the
// subtask goroutine; the slices are copied at the call.
type AsyncListState[T any] interface {
	AsyncGet() StateFuture[StateIterator[T]]
	AsyncAdd(v T) StateFuture[Void]
	AsyncAddAll(vs []T) StateFuture[Void]
	AsyncUpdate(vs []T) StateFuture[Void]
	AsyncClear() StateFuture[Void]
}

// GetAsyncListState returns the async handle of the ListState d describes
// in c's backend; as GetAsyncValueState.
func GetAsyncListState[T any](c *AsyncExecutionController, d ListStateDescriptor[T]) (AsyncListState[T], error) {
	s, err := GetListState(c.backend, d)
	if err != nil {
		return nil, err
	}
	h := &asyncListState[T]{c: c, s: s}
	if ls, ok := s.(*listState[T]); ok && c.offReads {
		h.bound = ls
	}
	return h, nil
}

type asyncListState[T any] struct {
	c     *AsyncExecutionController
	s     ListState[T]
	bound *listState[T] // nil: read on the subtask goroutine
}

func (h *asyncListState[T]) AsyncGet() StateFuture[StateIterator[T]] {
	rec := h.c.current
	var off func([]byte) (StateIterator[T], error)
	if h.bound != nil {
		off = func(key []byte) (StateIterator[T], error) {
			return collectIterator(rec, h.bound.bind(h.c.backend.core().keyRefFor(key)).Get())
		}
	}
	return submitRead(h.c, off, func() (StateIterator[T], error) { return collectIterator(rec, h.s.Get()) })
}

func (h *asyncListState[T]) AsyncAdd(v T) StateFuture[Void] {
	return submitWrite(h.c, func() (Void, error) { return Void{}, h.s.Add(v) })
}

func (h *asyncListState[T]) AsyncAddAll(vs []T) StateFuture[Void] {
	vs = slices.Clone(vs)
	return submitWrite(h.c, func() (Void, error) { return Void{}, h.s.AddAll(vs) })
}

func (h *asyncListState[T]) AsyncUpdate(vs []T) StateFuture[Void] {
	vs = slices.Clone(vs)
	return submitWrite(h.c, func() (Void, error) { return Void{}, h.s.Update(vs) })
}

func (h *asyncListState[T]) AsyncClear() StateFuture[Void] {
	return submitWrite(h.c, func() (Void, error) { return Void{}, h.s.Clear() })
}

// collectIterator drains a synchronous iterator into a StateIterator of rec; the
// first error fails the read.
func collectIterator[T any](rec *recordContext, seq iter.Seq2[T, error]) (StateIterator[T], error) {
	var elems []T
	for v, err := range seq {
		if err != nil {
			return nil, err
		}
		elems = append(elems, v)
	}
	return newStateIterator(rec, elems), nil
}
