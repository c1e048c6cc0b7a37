package state

import "errors"

// Void is the value of a StateFuture that carries no value, as Java's Void in
// Flink's StateFuture<Void>.
type Void struct{}

// errNilFuture is the failure of a ThenCompose-style function that returned
// neither a future nor an error.
var errNilFuture = errors.New("state: compose function returned a nil future and no error")

// StateFuture is the result of an asynchronous state operation, as Flink's
// org.apache.flink.api.common.state.v2.StateFuture: a value of type T, or an
// error, that becomes available later. There is no blocking get; the value is
// consumed by continuations: the method ThenAccept and, where Go needs a type
// parameter on the continuation's result, the functions ThenApply,
// ThenCompose, ThenCombine, ThenConditionallyAccept, ThenConditionallyApply
// and ThenConditionallyCompose.
//
// Concurrency: a StateFuture belongs to the subtask goroutine that owns its
// AsyncExecutionController. Futures are completed only on that goroutine
// (work done by read workers is posted back through the mailbox), and every
// continuation runs there, so user code needs no locks. A continuation
// registered on a future that is already complete runs at once, before the
// registering call returns; otherwise it runs when the future completes,
// with the backend's current key set to the key of the record the future
// belongs to. Continuations registered on one future run in registration
// order, and each continuation of a chain runs after the one before it.
// Futures must not be used from other goroutines or by another record.
//
// Errors: a future fails when its state operation fails or a continuation
// returns an error. A failed future skips the continuations registered on it
// and fails every future derived from it with the same error ("propagates
// down the chain"). A future that belongs to a record (every future derived
// from a state operation does) also reports its failure to the controller,
// which fails the task: Process and Drain return the first error, wrapped in
// a *RecordError. A chain built only from CompletedFuture values belongs to
// no record; its error travels with the future until it is combined with a
// record's future.
//
// The interface is sealed: only this package creates futures.
type StateFuture[T any] interface {
	// ThenAccept returns a future that completes after action has consumed
	// this future's value; it fails with action's error, or with this
	// future's error, in which case action does not run. Flink's
	// StateFuture.thenAccept.
	ThenAccept(action func(T) error) StateFuture[Void]

	// subscribe registers cb to run once with the outcome; at once if done.
	subscribe(cb func(T, error))
	// then is subscribe for a continuation object (no closure to allocate).
	then(k continuation[T])
	// record is the record the future belongs to, nil for a detached one.
	record() *recordContext
}

// continuation is what waits for a future's outcome: run is called once,
// on the subtask goroutine, with the value or the error. The combinators'
// result futures are their own continuations (one allocation per step of a
// chain); funcContinuation adapts a function.
type continuation[T any] interface {
	run(v T, err error)
}

// funcContinuation is a function as a continuation (a func value is stored
// in an interface without allocating).
type funcContinuation[T any] func(T, error)

func (f funcContinuation[T]) run(v T, err error) { f(v, err) }

// future is the StateFuture implementation; the combinators and state
// requests embed it.
type future[T any] struct {
	rec  *recordContext // record the future belongs to; nil: detached
	done bool
	val  T
	err  error
	// next and more are the continuations waiting for completion, in
	// order: nearly every future has at most one (next).
	next continuation[T]
	more []continuation[T]
}

func newFuture[T any](rec *recordContext) *future[T] { return &future[T]{rec: rec} }

// complete sets the outcome and runs the waiting continuations in order.
// A second completion is ignored.
func (f *future[T]) complete(v T, err error) {
	if f.done {
		return
	}
	f.done, f.val, f.err = true, v, err
	if err != nil && f.rec != nil {
		f.rec.fail(err)
	}
	next, more := f.next, f.more
	f.next, f.more = nil, nil
	if next != nil {
		next.run(v, err)
	}
	for _, k := range more {
		k.run(v, err)
	}
}

func (f *future[T]) fail(err error) {
	var zero T
	f.complete(zero, err)
}

func (f *future[T]) subscribe(cb func(T, error)) { f.then(funcContinuation[T](cb)) }

func (f *future[T]) then(k continuation[T]) {
	switch {
	case f.done:
		k.run(f.val, f.err)
	case f.next == nil && len(f.more) == 0:
		f.next = k
	default:
		f.more = append(f.more, k)
	}
}

func (f *future[T]) record() *recordContext { return f.rec }

func (f *future[T]) ThenAccept(action func(T) error) StateFuture[Void] {
	if f.done { // the cached path: no node to allocate
		err := f.err
		if err == nil {
			err = action(f.val)
		}
		return doneVoid(f.rec, err)
	}
	n := &acceptNode[T]{future: future[Void]{rec: f.rec}, fn: action}
	f.then(n)
	return &n.future
}

// acceptNode is the future ThenAccept returns and the continuation that
// completes it.
type acceptNode[T any] struct {
	future[Void]
	fn func(T) error
}

func (n *acceptNode[T]) run(v T, err error) {
	if err != nil {
		n.fail(err)
		return
	}
	n.complete(Void{}, n.fn(v))
}

// CompletedFuture returns a future already completed with v (Flink's
// StateFutureUtils.completedFuture). It belongs to no record: continuations
// registered on it run at once, on the calling goroutine.
func CompletedFuture[T any](v T) StateFuture[T] {
	return &future[T]{done: true, val: v}
}

// CompletedVoidFuture returns a future already completed with Void{}
// (Flink's StateFutureUtils.completedVoidFuture).
func CompletedVoidFuture() StateFuture[Void] { return CompletedFuture(Void{}) }

// doneFuture returns a future of rec (which may be nil) already completed
// with v or, when err is not nil, failed with err (reported to rec).
func doneFuture[T any](rec *recordContext, v T, err error) StateFuture[T] {
	f := &future[T]{rec: rec}
	f.complete(v, err)
	return f
}

// doneVoid is doneFuture for Void: a success of a record is the record's
// shared completed future (no allocation; a completed future never changes).
func doneVoid(rec *recordContext, err error) StateFuture[Void] {
	if err == nil && rec != nil {
		return &rec.voidOK
	}
	return doneFuture(rec, Void{}, err)
}

// failedFuture returns a future already failed with err, belonging to rec
// (which may be nil).
func failedFuture[T any](rec *recordContext, err error) StateFuture[T] {
	f := newFuture[T](rec)
	f.fail(err)
	return f
}

// ThenApply returns a future of fn applied to f's value (Flink's
// StateFuture.thenApply). fn runs on the subtask goroutine when f completes;
// if f fails, fn does not run and the result fails with f's error; if fn
// returns an error, the result fails with it.
func ThenApply[T, U any](f StateFuture[T], fn func(T) (U, error)) StateFuture[U] {
	n := &applyNode[T, U]{future: future[U]{rec: f.record()}, fn: fn}
	f.then(n)
	return &n.future
}

// applyNode is the future ThenApply returns and the continuation that
// completes it.
type applyNode[T, U any] struct {
	future[U]
	fn func(T) (U, error)
}

func (n *applyNode[T, U]) run(v T, err error) {
	if err != nil {
		n.fail(err)
		return
	}
	n.complete(n.fn(v))
}

// ThenCompose returns a future of the future fn returns (Flink's
// StateFuture.thenCompose): fn, run when f completes, typically issues
// another state operation, and the result completes when that one does.
// Failures of f, of fn (its error, or a nil future with a nil error) and of
// the inner future fail the result.
func ThenCompose[T, U any](f StateFuture[T], fn func(T) (StateFuture[U], error)) StateFuture[U] {
	if d, ok := f.(*future[T]); ok && d.done { // the cached path
		if d.err != nil {
			return failedFuture[U](d.rec, d.err)
		}
		inner, err := fn(d.val)
		if err == nil && inner == nil {
			err = errNilFuture
		}
		if err != nil {
			return failedFuture[U](d.rec, err)
		}
		if d.rec == nil || inner.record() == d.rec {
			return inner // the result would complete as inner does, for the same record
		}
	}
	n := &composeNode[T, U]{future: future[U]{rec: f.record()}, fn: fn}
	f.then(n)
	return &n.future
}

// composeNode is the future ThenCompose returns and the continuation of the
// outer future; as a composeTail it is the continuation of the inner one.
type composeNode[T, U any] struct {
	future[U]
	fn func(T) (StateFuture[U], error)
}

// composeTail is a composeNode waiting for the inner future.
type composeTail[T, U any] composeNode[T, U]

func (n *composeNode[T, U]) run(v T, err error) {
	if err != nil {
		n.fail(err)
		return
	}
	inner, err := n.fn(v)
	if err == nil && inner == nil {
		err = errNilFuture
	}
	if err != nil {
		n.fail(err)
		return
	}
	if n.rec == nil {
		n.rec = inner.record()
	}
	inner.then((*composeTail[T, U])(n))
}

func (t *composeTail[T, U]) run(u U, err error) {
	n := (*composeNode[T, U])(t)
	if err != nil {
		n.fail(err)
		return
	}
	n.complete(u, nil)
}

// composeInto runs fn(v) and completes r with the inner future's outcome.
func composeInto[T, U, R any](r *future[R], v T, fn func(T) (StateFuture[U], error), wrap func(U) R) {
	inner, err := fn(v)
	if err == nil && inner == nil {
		err = errNilFuture
	}
	if err != nil {
		r.fail(err)
		return
	}
	if r.rec == nil {
		r.rec = inner.record()
	}
	inner.subscribe(func(u U, err error) {
		if err != nil {
			r.fail(err)
			return
		}
		r.complete(wrap(u), nil)
	})
}

// ThenCombine returns a future of fn applied to the values of f and g
// (Flink's StateFuture.thenCombine). fn runs when the later of the two
// completes; if either fails, fn does not run and the result fails with the
// first failure.
func ThenCombine[T, U, V any](f StateFuture[T], g StateFuture[U], fn func(T, U) (V, error)) StateFuture[V] {
	rec := f.record()
	if rec == nil {
		rec = g.record()
	}
	r := newFuture[V](rec)
	var (
		tv         T
		uv         U
		haveT      bool
		haveU      bool
		terminated bool
	)
	fire := func() {
		if haveT && haveU && !terminated {
			terminated = true
			r.complete(fn(tv, uv))
		}
	}
	failOnce := func(err error) {
		if !terminated {
			terminated = true
			r.fail(err)
		}
	}
	f.subscribe(func(v T, err error) {
		if err != nil {
			failOnce(err)
			return
		}
		tv, haveT = v, true
		fire()
	})
	g.subscribe(func(v U, err error) {
		if err != nil {
			failOnce(err)
			return
		}
		uv, haveU = v, true
		fire()
	})
	return r
}

// Branch is the value of the ThenConditionallyApply and
// ThenConditionallyCompose futures: Cond is the condition's outcome (which
// action ran) and Value the result of the action that ran, or the zero U when
// that action was nil. It plays the part of Flink's Tuple2<Boolean, U>.
type Branch[U any] struct {
	Cond  bool
	Value U
}

// ThenConditionallyAccept runs cond on f's value and then ifTrue or ifFalse
// with it (Flink's StateFuture.thenConditionallyAccept); a nil action means
// "do nothing" for that outcome (Flink's one-action overload). The result
// carries cond's outcome. Errors of f, cond or the action fail the result; a
// failed cond runs no action.
func ThenConditionallyAccept[T any](f StateFuture[T], cond func(T) (bool, error), ifTrue, ifFalse func(T) error) StateFuture[bool] {
	return ThenApply(f, func(v T) (bool, error) {
		c, err := cond(v)
		if err != nil {
			return false, err
		}
		action := ifFalse
		if c {
			action = ifTrue
		}
		if action != nil {
			if err := action(v); err != nil {
				return c, err
			}
		}
		return c, nil
	})
}

// ThenConditionallyApply runs cond on f's value and applies ifTrue or
// ifFalse to it (Flink's StateFuture.thenConditionallyApply); a nil action
// yields the zero U. Errors of f, cond or the action fail the result.
func ThenConditionallyApply[T, U any](f StateFuture[T], cond func(T) (bool, error), ifTrue, ifFalse func(T) (U, error)) StateFuture[Branch[U]] {
	return ThenApply(f, func(v T) (Branch[U], error) {
		c, err := cond(v)
		if err != nil {
			return Branch[U]{}, err
		}
		action := ifFalse
		if c {
			action = ifTrue
		}
		b := Branch[U]{Cond: c}
		if action != nil {
			b.Value, err = action(v)
		}
		return b, err
	})
}

// ThenConditionallyCompose runs cond on f's value and composes with the
// future ifTrue or ifFalse returns (Flink's
// StateFuture.thenConditionallyCompose); a nil action completes the result at
// once with the zero U. Errors of f, cond, the action or the inner future
// fail the result.
func ThenConditionallyCompose[T, U any](f StateFuture[T], cond func(T) (bool, error), ifTrue, ifFalse func(T) (StateFuture[U], error)) StateFuture[Branch[U]] {
	r := newFuture[Branch[U]](f.record())
	f.subscribe(func(v T, err error) {
		if err != nil {
			r.fail(err)
			return
		}
		c, err := cond(v)
		if err != nil {
			r.fail(err)
			return
		}
		action := ifFalse
		if c {
			action = ifTrue
		}
		if action == nil {
			r.complete(Branch[U]{Cond: c}, nil)
			return
		}
		composeInto(r, v, action, func(u U) Branch[U] { return Branch[U]{Cond: c, Value: u} })
	})
	return r
}

// CombineAll returns a future of the values of fs, in the order of fs, that
// completes when all of them have (Flink's StateFutureUtils.combineAll). It
// fails with the first failure among fs. An empty fs gives a completed
// future of an empty slice.
func CombineAll[T any](fs []StateFuture[T]) StateFuture[[]T] {
	return combineAll(nil, fs)
}

// combineAll is CombineAll with the record to report failures to, when none
// of fs belongs to one.
func combineAll[T any](rec *recordContext, fs []StateFuture[T]) StateFuture[[]T] {
	for _, f := range fs {
		if rec != nil {
			break
		}
		rec = f.record()
	}
	r := newFuture[[]T](rec)
	vals := make([]T, len(fs))
	left := len(fs)
	if left == 0 {
		r.complete(vals, nil)
		return r
	}
	for i, f := range fs {
		f.subscribe(func(v T, err error) {
			if r.done {
				return
			}
			if err != nil {
				r.fail(err)
				return
			}
			vals[i] = v
			if left--; left == 0 {
				r.complete(vals, nil)
			}
		})
	}
	return r
}

// ToIterable returns a future of every element of the iterator f yields, in
// iteration order (Flink's StateFutureUtils.toIterable).
func ToIterable[T any](f StateFuture[StateIterator[T]]) StateFuture[[]T] {
	return ThenApply(f, func(it StateIterator[T]) ([]T, error) {
		if it == nil {
			return nil, nil
		}
		return append([]T(nil), it.elements()...), nil
	})
}

// StateIterator iterates the elements of a list state or the entries, keys
// or values of a map state read asynchronously, as Flink's
// org.apache.flink.api.common.state.v2.StateIterator. The elements are
// loaded by the read that produced the iterator (kstreamd reads them all at
// once, where Flink loads batches lazily: a very large map costs memory in
// proportion), so iterating needs no further state access. Like a
// StateFuture it belongs to the subtask goroutine.
type StateIterator[T any] interface {
	// IsEmpty reports whether the iterator has no elements.
	IsEmpty() bool
	// OnNext runs action on each element in order, on the calling
	// goroutine, and returns a completed future (Flink's
	// StateIterator.onNext with a consumer). The first error stops the
	// iteration and fails the returned future.
	OnNext(action func(T) error) StateFuture[Void]

	elements() []T
	record() *recordContext
}

// sliceIterator is the one StateIterator implementation.
type sliceIterator[T any] struct {
	rec   *recordContext
	elems []T
}

func newStateIterator[T any](rec *recordContext, elems []T) StateIterator[T] {
	return &sliceIterator[T]{rec: rec, elems: elems}
}

func (it *sliceIterator[T]) IsEmpty() bool          { return len(it.elems) == 0 }
func (it *sliceIterator[T]) elements() []T          { return it.elems }
func (it *sliceIterator[T]) record() *recordContext { return it.rec }

func (it *sliceIterator[T]) OnNext(action func(T) error) StateFuture[Void] {
	for _, e := range it.elems {
		if err := action(e); err != nil {
			return failedFuture[Void](it.rec, err)
		}
	}
	return &future[Void]{rec: it.rec, done: true}
}

// OnNextCompose runs fn on each element of it in order and returns a future
// of the results of the futures fn returns, in element order (Flink's
// StateIterator.onNext with a function returning a StateFuture). fn runs for
// every element at once; the futures it returns may complete in any order.
// The first error of fn or of an inner future fails the result.
func OnNextCompose[T, U any](it StateIterator[T], fn func(T) (StateFuture[U], error)) StateFuture[[]U] {
	fs := make([]StateFuture[U], 0, len(it.elements()))
	for _, e := range it.elements() {
		f, err := fn(e)
		if err == nil && f == nil {
			err = errNilFuture
		}
		if err != nil {
			return failedFuture[[]U](it.record(), err)
		}
		fs = append(fs, f)
	}
	return combineAll(it.record(), fs)
}
