package state

// stateRequest is one state operation of a record, as the
// AsyncExecutionController schedules it (Flink's StateRequest). Each
// implementation embeds the future it completes, so issuing a request costs
// one allocation.
type stateRequest interface {
	// offload reports whether the request is a read a read worker may run
	// (the backend has ConcurrentReads).
	offload() bool
	// runNow runs the request on the subtask goroutine, with the record's
	// key current, and completes its future, if it can without waiting for
	// the store: every request that is not offloaded can, an offloaded read
	// only when it is served from memory (the Pebble write cache). It
	// reports whether it ran.
	runNow() bool
	// readOff runs an offloaded read on a read worker, by the record's key
	// (never the backend's current key, which the subtask goroutine keeps
	// changing), and keeps the outcome for deliver.
	readOff(key []byte)
	// deliver completes the future with the outcome readOff kept; on the
	// subtask goroutine with the record's key current.
	deliver()
}

// reader is what a read request needs from an async handle: the same read
// three ways.
type reader[T any] interface {
	// readCurrent reads under the backend's current key (subtask goroutine).
	readCurrent() (T, error)
	// readCached reads under the current key from memory only (subtask
	// goroutine); cached false means the value is not held in memory and
	// nothing was read.
	readCached() (v T, cached bool, err error)
	// readKey reads under key, from any goroutine (a read worker).
	readKey(key []byte) (T, error)
}

// readRequest is a read of a record, and its future.
type readRequest[T any] struct {
	future[T]
	src reader[T]
	off bool // run by a read worker unless cached
	v   T    // readOff's outcome, for deliver
	err error
}

func (q *readRequest[T]) offload() bool { return q.off }

func (q *readRequest[T]) runNow() bool {
	if !q.off {
		q.complete(q.src.readCurrent())
		return true
	}
	v, cached, err := q.src.readCached()
	if !cached {
		return false
	}
	q.complete(v, err)
	return true
}

func (q *readRequest[T]) readOff(key []byte) { q.v, q.err = q.src.readKey(key) }

func (q *readRequest[T]) deliver() {
	v, err := q.v, q.err
	var zero T
	q.v, q.err = zero, nil
	q.complete(v, err)
}

// issueRead issues a read of src for the controller's current record and
// returns its future; off says whether a read worker runs it (by explicit
// key) unless src serves it from memory. A read that completes at once
// completes slot's future when slot is free (nil slot: never), a new one
// otherwise. Outside a record the future fails with ErrNoRecordContext.
func issueRead[T any](c *AsyncExecutionController, src reader[T], off bool, slot *doneSlot[T]) StateFuture[T] {
	rec := c.current
	if rec == nil {
		return failedFuture[T](nil, ErrNoRecordContext)
	}
	if rec.idle() { // nothing of the record queued or with a worker: read now if that needs no store
		if !off {
			v, err := src.readCurrent()
			return slot.done(rec, v, err)
		}
		if v, cached, err := src.readCached(); cached {
			return slot.done(rec, v, err)
		}
	}
	q := &readRequest[T]{future: future[T]{rec: rec}, src: src, off: off}
	c.issue(rec, q)
	return &q.future
}

// doneSlot is a completed future that one async handle reuses for its reads
// served at once (the hot path: a Pebble write-cache hit), so such a read
// allocates nothing. Reuse is safe because a future is valid only within
// its record (StateFuture's contract; the record's voidOK relies on the
// same): the slot is lent to one record at a time, named by its context and
// generation, and is free again once that record finished. While its
// holder is in flight, a read of another record (or a second read of the
// holder) gets a new future, so no future ever changes its value while
// someone may still observe it. Subtask goroutine only.
type doneSlot[T any] struct {
	f     future[T]
	owner *recordContext // nil: never lent
	gen   uint64         // owner.gen when lent
}

// done returns a future of rec completed with v or failed with err: the
// slot's, if it is free, else a new one (also when s is nil).
func (s *doneSlot[T]) done(rec *recordContext, v T, err error) StateFuture[T] {
	if s == nil || (s.owner != nil && s.owner.gen == s.gen) { // nil slot, or lent to a record in flight
		return doneFuture(rec, v, err)
	}
	s.owner, s.gen = rec, rec.gen
	s.f = future[T]{rec: rec}
	s.f.complete(v, err)
	return &s.f
}

// funcReader is a reader of two functions, for the reads that are not on
// the hot path (list and map state): off reads by key on a worker (nil: the
// backend reads on the subtask goroutine), inline under the current key.
type funcReader[T any] struct {
	off    func(key []byte) (T, error)
	inline func() (T, error)
}

func (r *funcReader[T]) readCurrent() (T, error) { return r.inline() }

func (r *funcReader[T]) readCached() (v T, cached bool, err error) { return v, false, nil }

func (r *funcReader[T]) readKey(key []byte) (T, error) { return r.off(key) }

// submitRead issues a read for the controller's current record and returns
// its future. When off is non-nil it runs on a read worker with the
// record's key (it must not use the backend's current key); otherwise
// inline runs on the subtask goroutine with the record's key current.
// Outside a record the future fails with ErrNoRecordContext.
func submitRead[T any](c *AsyncExecutionController, off func(key []byte) (T, error), inline func() (T, error)) StateFuture[T] {
	return issueRead[T](c, &funcReader[T]{off: off, inline: inline}, off != nil, nil)
}

// writeRequest is an operation that runs on the subtask goroutine (a
// write, or a read-modify-write such as ReducingState.Add), and its future.
type writeRequest[T any] struct {
	future[T]
	op func() (T, error)
}

func (q *writeRequest[T]) offload() bool    { return false }
func (q *writeRequest[T]) runNow() bool     { q.complete(q.op()); return true }
func (q *writeRequest[T]) readOff(_ []byte) {}
func (q *writeRequest[T]) deliver()         {}

// submitWrite issues op, a write (or any operation that must run on the
// subtask goroutine), for the controller's current record; op runs with the
// record's key current, at once unless an earlier read of the record is
// still with a worker. Outside a record the future fails with
// ErrNoRecordContext.
func submitWrite[T any](c *AsyncExecutionController, op func() (T, error)) StateFuture[T] {
	rec := c.current
	if rec == nil {
		return failedFuture[T](nil, ErrNoRecordContext)
	}
	q := &writeRequest[T]{future: future[T]{rec: rec}, op: op}
	c.issue(rec, q)
	return &q.future
}

// updateRequest is ValueState.Update of v, and its future: AsyncUpdate
// without a closure.
type updateRequest[T any] struct {
	future[Void]
	s ValueState[T]
	v T
}

func (q *updateRequest[T]) offload() bool    { return false }
func (q *updateRequest[T]) runNow() bool     { q.complete(Void{}, q.s.Update(q.v)); return true }
func (q *updateRequest[T]) readOff(_ []byte) {}
func (q *updateRequest[T]) deliver()         {}

// clearRequest is the Clear of a state, and its future.
type clearRequest struct {
	future[Void]
	s interface{ Clear() error }
}

func (q *clearRequest) offload() bool    { return false }
func (q *clearRequest) runNow() bool     { q.complete(Void{}, q.s.Clear()); return true }
func (q *clearRequest) readOff(_ []byte) {}
func (q *clearRequest) deliver()         {}

// submitClear issues the Clear of s for the controller's current record,
// as submitWrite.
func submitClear(c *AsyncExecutionController, s interface{ Clear() error }) StateFuture[Void] {
	rec := c.current
	if rec == nil {
		return failedFuture[Void](nil, ErrNoRecordContext)
	}
	if rec.idle() {
		return doneVoid(rec, s.Clear())
	}
	q := &clearRequest{future: future[Void]{rec: rec}, s: s}
	c.issue(rec, q)
	return &q.future
}
