package state

// submitRead issues a read for the controller's current record and returns
// its future. When off is non-nil it runs on a read worker with the record's
// key (it must not use the backend's current key); otherwise inline runs on
// the subtask goroutine with the record's key current. Outside a record the
// future fails with ErrNoRecordContext.
func submitRead[T any](c *AsyncExecutionController, off func(key []byte) (T, error), inline func() (T, error)) StateFuture[T] {
	return submitCachedRead(c, off, inline, nil)
}

// submitCachedRead is submitRead with hit, which says (on the subtask
// goroutine, with the record's key current) whether the read would be
// served from memory (the Pebble write cache): such a read runs at once on
// the subtask goroutine instead of on a worker, when program order allows.
// hit may be nil: never.
func submitCachedRead[T any](c *AsyncExecutionController, off func(key []byte) (T, error), inline func() (T, error), hit func() bool) StateFuture[T] {
	rec := c.current
	if rec == nil {
		return failedFuture[T](nil, ErrNoRecordContext)
	}
	f := newFuture[T](rec)
	req := &stateRequest{hit: hit}
	if off != nil {
		key := rec.key
		req.off = func() func() {
			v, err := off(key)
			return func() { f.complete(v, err) }
		}
	} else {
		req.exec = func() { f.complete(inline()) }
	}
	c.issue(rec, req)
	return f
}

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
	f := newFuture[T](rec)
	c.issue(rec, &stateRequest{exec: func() { f.complete(op()) }})
	return f
}
