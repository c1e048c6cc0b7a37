package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
)

// DefaultInFlightRecordsLimit is the default number of records an
// AsyncExecutionController keeps in flight, as Flink's
// execution.async-state.in-flight-records-limit (6000).
const DefaultInFlightRecordsLimit = 6000

// DefaultReadWorkers is the default number of goroutines an
// AsyncExecutionController runs for state reads off the subtask goroutine
// (Flink's ForSt read-io-parallelism plays the same part). Reads mostly wait
// on I/O, so this bounds how many slow reads of different keys overlap:
// with 1 ms reads, throughput is about DefaultReadWorkers records per ms.
const DefaultReadWorkers = 16

// ErrControllerClosed is returned by AsyncExecutionController.Process after
// Close.
var ErrControllerClosed = errors.New("state: async execution controller closed")

// ErrNoRecordContext fails async state operations called outside a record
// the AsyncExecutionController is processing (not from within the function
// given to Process or a continuation of one of its futures).
var ErrNoRecordContext = errors.New("state: async state accessed outside a record of the async execution controller")

// MailboxExecutor is what the AsyncExecutionController needs from the
// subtask's mailbox (Flink's MailboxExecutor); runtime.Mailbox implements it.
//
// Execute posts action to run later on the subtask goroutine. It is called
// from read-worker goroutines, so it must be safe for concurrent use, and it
// must not block waiting for the subtask goroutine (an unbounded queue, as
// runtime.Mailbox has): the subtask goroutine may itself be waiting for the
// worker. Actions posted after the controller was closed may be dropped.
//
// Yield runs one pending action on the calling goroutine, which is the
// subtask goroutine, blocking until one is available or ctx ends (then it
// returns ctx's error). Actions posted by other parts of the subtask (timers,
// other operators' completions) may run too.
type MailboxExecutor interface {
	Execute(action func())
	Yield(ctx context.Context) error
}

// RecordError is the error the AsyncExecutionController returns when a
// record failed: its function or a continuation of one of its futures
// returned an error, or one of its state operations failed. Err is the
// original error (errors.Is and errors.As see through RecordError).
type RecordError struct {
	Key []byte // the record's serialized key
	Err error
}

// Error names the key (hex) and the cause.
func (e *RecordError) Error() string {
	return fmt.Sprintf("state: async processing of record with key %x failed: %v", e.Key, e.Err)
}

// Unwrap returns Err.
func (e *RecordError) Unwrap() error { return e.Err }

// AsyncOpt configures an AsyncExecutionController; see
// WithInFlightRecordsLimit and WithReadWorkers.
type AsyncOpt func(*asyncConfig)

type asyncConfig struct {
	limit   int
	workers int
}

// WithInFlightRecordsLimit sets how many records may be in flight (accepted
// by Process and not yet finished, including those waiting behind an earlier
// record of their key), overriding the default of
// DefaultInFlightRecordsLimit. Must be at least 1.
func WithInFlightRecordsLimit(n int) AsyncOpt { return func(c *asyncConfig) { c.limit = n } }

// WithReadWorkers sets how many goroutines run state reads off the subtask
// goroutine, overriding the default of DefaultReadWorkers. Must be at least
// 1. The workers are started on the first such read, so a backend that reads
// on the subtask goroutine (hashmap) starts none.
func WithReadWorkers(n int) AsyncOpt { return func(c *asyncConfig) { c.workers = n } }

// AsyncExecutionController runs the records of one keyed subtask whose
// functions use async state (Flink's AsyncExecutionController of State V2,
// enabled per keyed stream by EnableAsyncState). See ASYNC.md in this
// package for the design.
//
// Guarantees:
//   - Records of one key enter user code (the function given to Process) in
//     the order Process was called for them: a record whose key already has a
//     record in flight waits, buffered per key, until that one finished (its
//     function returned and every future chain it started completed).
//     Records of other keys do not wait and may overtake.
//   - Continuations of futures run only on the subtask goroutine, with the
//     backend's current key set to their record's key; those of one chain run
//     in chain order.
//   - The state operations of one record run in program order: a read sees
//     every write the record issued before it and none issued after it.
//   - At most the in-flight limit of records is in flight; Process yields to
//     the mailbox while the limit is reached (back-pressure, nothing is
//     dropped).
//
// Reads of backends that can read by explicit key from any goroutine
// (Pebble) run on a bounded pool of read workers owned by the controller, so
// a slow read of one key does not hold up other keys; their completions come
// back through the mailbox. A value read the Pebble write cache can serve
// runs on the subtask goroutine at once instead (no disk to wait for). Writes, and every operation of backends without
// such reads (hashmap), run on the subtask goroutine when issued and
// complete at once; a write issued while a read of the same record is still
// with a worker waits for that read (program order). Since only one record
// per key is in flight, that orders all operations on a key.
//
// Errors: the first failure of a record is kept and returned, as a
// *RecordError, by Process, Drain and Err; from then on no record starts and
// completions are dropped: the task must fail and restore from a checkpoint.
//
// Concurrency: every method must be called on the subtask goroutine (Close
// also after that goroutine stopped).
type AsyncExecutionController struct {
	backend  KeyedStateBackend
	mailbox  MailboxExecutor
	limit    int
	offReads bool // reads run on workers: the backend's ConcurrentReads

	inFlight int                  // records accepted and not finished
	keys     map[string]*keyQueue // keys whose record is still in flight after its function returned
	ready    []*recordContext     // records whose turn came, to start: ready[readyHead:]
	readyHd  int
	current  *recordContext // record whose code runs now, nil outside records
	starting bool           // runReady is active
	err      error          // first failure
	closed   bool

	// Free lists of finished records and emptied key queues, reused so a
	// record costs no allocation of its own (subtask goroutine only).
	freeRecs   []*recordContext
	freeQueues []*keyQueue

	workers *readPool
	nWorker int

	// readMu is held shared by a worker while it reads (a TTL read may
	// also delete or restamp what it read) and exclusively by
	// ExclusiveOfReads, so background TTL cleanup never judges an entry
	// a worker is reading or refreshing.
	readMu sync.RWMutex

	// Reads the workers finished, handed to the subtask goroutine in
	// batches: a worker appends to doneQ and posts deliverReads to the
	// mailbox only when none is posted yet, so one mailbox action delivers
	// every read finished meanwhile.
	doneMu     sync.Mutex
	doneQ      []offJob
	donePosted bool
	doneSpare  []offJob // the batch slice deliverReads gives back; subtask goroutine only
	deliverFn  func()   // c.deliverReads, made once
}

// keyQueue holds the records waiting behind the key's record in flight,
// waiting[head:], in arrival order.
type keyQueue struct {
	waiting []*recordContext
	head    int
}

// recordContext is one record in flight (Flink's RecordContext): its key,
// function, pending state requests and a reference count of what still has
// to run for it. Finished records are reused for later ones: nothing may
// keep one past its finish (futures are not used by another record).
type recordContext struct {
	c   *AsyncExecutionController
	key []byte
	fn  func(arg any) error // the record's code: fn(arg)
	arg any

	// refs counts the running function (1 while it runs) plus each issued
	// state request until its completion and continuations ran. At zero the
	// record is finished.
	refs int
	// readsOut counts reads handed to workers and not completed.
	readsOut int
	// queue[qhead:] are the requests that must wait for earlier ones
	// (program order).
	queue []stateRequest
	qhead int
	// kq is the key's queue once the record is registered in the
	// controller's keys: when it is still in flight after its function
	// returned, or when it waited behind an earlier record of its key. A
	// record that finishes within its function (every read served from
	// memory) never touches the map.
	kq *keyQueue
	// voidOK is the record's completed Void future, the outcome of every
	// successful write that ran at once (a completed future never changes,
	// so one serves them all).
	voidOK future[Void]
	// gen counts the records this context has run: freeRecord increments
	// it, so a (context, gen) pair names one record and tells whether it
	// has finished (see doneSlot).
	gen uint64
}

// fail reports err as the record's failure to the controller.
func (r *recordContext) fail(err error) { r.c.fail(r, err) }

// pending is the number of r's queued requests.
func (r *recordContext) pending() int { return len(r.queue) - r.qhead }

// idle reports whether a request of r issued now runs at once in program
// order: nothing of r is queued or with a worker.
func (r *recordContext) idle() bool { return r.pending() == 0 && r.readsOut == 0 }

// offJob is a read handed to a worker, and later its completion.
type offJob struct {
	r   *recordContext
	req stateRequest
}

// NewAsyncExecutionController returns a controller for the keyed subtask
// owning backend and mailbox. It refuses a nil backend or mailbox and
// options out of range, listing every problem. The controller does not own
// the backend: Close stops the read workers but leaves the backend open;
// close the controller before the backend, as the workers read it. Worker
// reads call the backend's Clock (TTL), which must then be safe for
// concurrent use.
func NewAsyncExecutionController(backend KeyedStateBackend, mailbox MailboxExecutor, opts ...AsyncOpt) (*AsyncExecutionController, error) {
	cfg := asyncConfig{limit: DefaultInFlightRecordsLimit, workers: DefaultReadWorkers}
	for _, o := range opts {
		o(&cfg)
	}
	var problems []string
	if backend == nil {
		problems = append(problems, "nil backend")
	}
	if mailbox == nil {
		problems = append(problems, "nil mailbox")
	}
	if cfg.limit < 1 {
		problems = append(problems, fmt.Sprintf("in-flight records limit %d, want at least 1", cfg.limit))
	}
	if cfg.workers < 1 {
		problems = append(problems, fmt.Sprintf("read workers %d, want at least 1", cfg.workers))
	}
	if err := joinProblems("state: async execution controller", problems); err != nil {
		return nil, err
	}
	c := &AsyncExecutionController{
		backend: backend,
		mailbox: mailbox,
		limit:   cfg.limit,
		keys:    make(map[string]*keyQueue),
		nWorker: cfg.workers,
	}
	c.deliverFn = c.deliverReads
	c.offReads = backend.ConcurrentReads()
	return c, nil
}

// Process hands one record to the controller: fn is the user code for the
// record (for example a KeyedProcessFunction's ProcessElement bound to it),
// key its serialized key (copied). fn runs on the calling goroutine, now or
// later from within Process, Drain or a mailbox action, with the backend's
// current key set to key, once every earlier record of key has finished.
// An error returned by fn fails the record.
//
// When the in-flight limit is reached, Process first runs mailbox actions
// (Yield) until a record finishes; it returns ctx's error, wrapped, if ctx
// ends meanwhile. It returns the controller's failure, if any, and
// ErrControllerClosed after Close; the record is not accepted then.
//
// Must be called on the subtask goroutine, never from within fn or a
// continuation.
func (c *AsyncExecutionController) Process(ctx context.Context, key []byte, fn func() error) error {
	return c.ProcessArg(ctx, key, callArg, fn)
}

// callArg runs the function of a record handed to Process.
func callArg(fn any) error { return fn.(func() error)() }

// ProcessArg is Process with the record's code split into a function and
// its argument: fn(arg) runs as Process's fn would. A caller handing every
// record of a subtask to the controller passes one fn (a method value made
// once) and, as arg, a pointer it reuses once fn has run, so a record costs
// it no closure (the keyed operator does). Errors and goroutine as Process.
func (c *AsyncExecutionController) ProcessArg(ctx context.Context, key []byte, fn func(arg any) error, arg any) error {
	for {
		if c.closed {
			return ErrControllerClosed
		}
		if c.err != nil {
			return c.err
		}
		if c.inFlight < c.limit {
			break
		}
		if err := c.mailbox.Yield(ctx); err != nil {
			return fmt.Errorf("state: waiting for in-flight records below the limit of %d: %w", c.limit, err)
		}
	}
	rec := c.newRecord(key, fn, arg)
	c.inFlight++
	if q, busy := c.keys[string(key)]; busy {
		rec.kq = q
		q.waiting = append(q.waiting, rec)
		return nil
	}
	c.ready = append(c.ready, rec)
	c.runReady()
	return c.err
}

// newRecord returns a record for key (copied) and fn, reusing a finished
// one.
func (c *AsyncExecutionController) newRecord(key []byte, fn func(any) error, arg any) *recordContext {
	var r *recordContext
	if n := len(c.freeRecs); n > 0 {
		r = c.freeRecs[n-1]
		c.freeRecs[n-1] = nil
		c.freeRecs = c.freeRecs[:n-1]
	} else {
		r = &recordContext{c: c}
		r.voidOK = future[Void]{rec: r, done: true}
	}
	r.key = append(r.key[:0], key...)
	if r.key == nil {
		r.key = []byte{}
	}
	r.fn, r.arg = fn, arg
	return r
}

// freeRecord keeps the finished r for reuse.
func (c *AsyncExecutionController) freeRecord(r *recordContext) {
	r.fn, r.arg, r.kq = nil, nil, nil
	r.refs, r.readsOut = 0, 0
	r.gen++
	clear(r.queue)
	r.queue, r.qhead = r.queue[:0], 0
	c.freeRecs = append(c.freeRecs, r)
}

// Drain runs mailbox actions until no record is in flight (Flink's
// drainInflightRecords), then returns the controller's failure, if any. The
// runtime calls it before a checkpoint snapshot (after barrier alignment)
// and at end of input. If ctx ends first it returns ctx's error, wrapped.
// Must be called on the subtask goroutine.
func (c *AsyncExecutionController) Drain(ctx context.Context) error {
	for c.inFlight > 0 && c.err == nil && !c.closed {
		if err := c.mailbox.Yield(ctx); err != nil {
			return fmt.Errorf("state: draining %d in-flight records: %w", c.inFlight, err)
		}
	}
	return c.err
}

// InFlight returns the number of records in flight (accepted by Process and
// not finished). Must be called on the subtask goroutine.
func (c *AsyncExecutionController) InFlight() int { return c.inFlight }

// ExclusiveOfReads runs fn on the subtask goroutine while no read worker
// reads: it waits for the reads the workers are doing now (each a single
// state read) and holds new ones back until fn returns. Reads that finished
// and wait for their completion in the mailbox are not affected. The keyed
// operators run background TTL cleanup (KeyedStateBackend.CleanupStep) in
// it, so a step runs while records are in flight without racing a worker's
// TTL delete or refresh of the entry it reads.
func (c *AsyncExecutionController) ExclusiveOfReads(fn func() error) error {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	return fn()
}

// Err returns the controller's failure: the first record failure as a
// *RecordError, or nil. Must be called on the subtask goroutine.
func (c *AsyncExecutionController) Err() error { return c.err }

// Backend returns the keyed state backend the controller works on.
func (c *AsyncExecutionController) Backend() KeyedStateBackend { return c.backend }

// Close stops the read workers and waits for them; reads still queued are
// abandoned and completions arriving later are dropped, so the records they
// belong to never finish: call Drain first for a clean stop. Process returns
// ErrControllerClosed afterwards. Close does not close the backend. It is
// idempotent and always returns nil.
func (c *AsyncExecutionController) Close() error {
	c.closed = true
	if c.workers != nil {
		c.workers.close()
	}
	return nil
}

// fail keeps the first failure.
func (c *AsyncExecutionController) fail(r *recordContext, err error) {
	if c.err == nil {
		c.err = &RecordError{Key: bytes.Clone(r.key), Err: err}
	}
}

// enter makes r the current record and its key the backend's current key; it
// returns the record to give back to leave.
func (c *AsyncExecutionController) enter(r *recordContext) *recordContext {
	prev := c.current
	c.current = r
	c.backend.SetCurrentKey(r.key)
	return prev
}

func (c *AsyncExecutionController) leave(prev *recordContext) {
	c.current = prev
	if prev != nil {
		c.backend.SetCurrentKey(prev.key)
	}
}

// runReady starts the records whose turn came, iteratively (a record that
// finishes at once may make the next record of its key ready). A record
// still in flight when its function returned is registered under its key,
// so later records of the key wait for it.
func (c *AsyncExecutionController) runReady() {
	if c.starting {
		return
	}
	c.starting = true
	defer func() { c.starting = false }()
	for c.readyHd < len(c.ready) && c.err == nil && !c.closed {
		r := c.ready[c.readyHd]
		c.ready[c.readyHd] = nil
		c.readyHd++
		prev := c.enter(r)
		r.refs++
		if err := r.fn(r.arg); err != nil {
			r.fail(err)
		}
		if r.refs--; r.refs == 0 {
			c.finish(r)
		} else if r.kq == nil {
			c.register(r)
		}
		c.leave(prev)
	}
	if c.readyHd == len(c.ready) {
		c.ready, c.readyHd = c.ready[:0], 0
	}
}

// register enters r, in flight and not yet registered, as its key's record
// in flight.
func (c *AsyncExecutionController) register(r *recordContext) {
	var q *keyQueue
	if n := len(c.freeQueues); n > 0 {
		q = c.freeQueues[n-1]
		c.freeQueues[n-1] = nil
		c.freeQueues = c.freeQueues[:n-1]
	} else {
		q = &keyQueue{}
	}
	c.keys[string(r.key)] = q
	r.kq = q
}

// release drops one reference of r; at zero r has finished.
func (c *AsyncExecutionController) release(r *recordContext) {
	if r.refs--; r.refs == 0 {
		c.finish(r)
	}
}

// finish ends the finished r: the next record of its key becomes ready (or
// the key leaves the map), and r is kept for reuse.
func (c *AsyncExecutionController) finish(r *recordContext) {
	c.inFlight--
	if q := r.kq; q != nil {
		if q.head < len(q.waiting) {
			next := q.waiting[q.head]
			q.waiting[q.head] = nil
			if q.head++; q.head == len(q.waiting) {
				q.waiting, q.head = q.waiting[:0], 0
			}
			c.ready = append(c.ready, next)
		} else {
			delete(c.keys, string(r.key))
			c.freeQueues = append(c.freeQueues, q)
		}
	}
	c.freeRecord(r)
}

// issue registers req for record r (the current record) and starts it
// unless an earlier request of r must run first.
func (c *AsyncExecutionController) issue(r *recordContext, req stateRequest) {
	r.refs++
	if r.pending() == 0 && (r.readsOut == 0 || req.offload()) {
		c.start(r, req)
		return
	}
	r.queue = append(r.queue, req)
}

// start runs req, whose turn came: now on the subtask goroutine when nothing
// of r is with a worker and req can (every request but a read the cache
// does not serve), else on a worker (req is then a read).
func (c *AsyncExecutionController) start(r *recordContext, req stateRequest) {
	if r.readsOut == 0 && req.runNow() {
		c.release(r)
		return
	}
	r.readsOut++
	if c.workers == nil {
		c.workers = newReadPool(c.nWorker, c.readOff)
	}
	c.workers.submit(offJob{r: r, req: req})
}

// readOff runs on a read worker: it reads, then hands the completion to the
// subtask goroutine (in a batch, see doneQ).
func (c *AsyncExecutionController) readOff(j offJob) {
	c.readMu.RLock()
	j.req.readOff(j.r.key)
	c.readMu.RUnlock()
	c.doneMu.Lock()
	c.doneQ = append(c.doneQ, j)
	post := !c.donePosted
	c.donePosted = true
	c.doneMu.Unlock()
	if post {
		c.mailbox.Execute(c.deliverFn)
	}
}

// deliverReads is the mailbox action completing every read the workers
// finished since the last one.
func (c *AsyncExecutionController) deliverReads() {
	c.doneMu.Lock()
	batch := c.doneQ
	c.doneQ, c.doneSpare = c.doneSpare[:0], nil
	c.donePosted = false
	c.doneMu.Unlock()
	for i, j := range batch {
		batch[i] = offJob{}
		c.completeRead(j.r, j.req)
	}
	c.doneSpare = batch[:0]
}

// completeRead runs on the subtask goroutine when a worker finished req, a
// read of r: it starts requests that waited for it, completes the read's
// future and starts records whose turn came.
func (c *AsyncExecutionController) completeRead(r *recordContext, req stateRequest) {
	if c.closed || c.err != nil {
		return
	}
	prev := c.enter(r)
	r.readsOut--
	c.pump(r)
	req.deliver()
	c.release(r)
	c.leave(prev)
	c.runReady()
}

// pump starts r's queued requests as far as program order allows.
func (c *AsyncExecutionController) pump(r *recordContext) {
	for r.pending() > 0 {
		req := r.queue[r.qhead]
		if !req.offload() && r.readsOut > 0 {
			return
		}
		r.queue[r.qhead] = nil
		if r.qhead++; r.qhead == len(r.queue) {
			r.queue, r.qhead = r.queue[:0], 0
		}
		c.start(r, req)
	}
}

// readPool is the controller's bounded pool of read workers, running do for
// each submitted job. Its goroutines are started by newReadPool and stopped
// and waited for by close.
type readPool struct {
	do     func(offJob)
	mu     sync.Mutex // guards jobs and closed
	cond   *sync.Cond // signals jobs or closed changed; uses mu
	jobs   []offJob   // jobs[head:] are queued
	head   int
	closed bool
	wg     sync.WaitGroup
}

func newReadPool(n int, do func(offJob)) *readPool {
	p := &readPool{do: do}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(n)
	for range n {
		go p.run()
	}
	return p
}

// submit queues job; it never blocks (the queue is bounded by the
// controller's in-flight records).
func (p *readPool) submit(job offJob) {
	p.mu.Lock()
	if !p.closed {
		p.jobs = append(p.jobs, job)
		p.cond.Signal()
	}
	p.mu.Unlock()
}

func (p *readPool) run() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		for p.head == len(p.jobs) && !p.closed {
			p.cond.Wait()
		}
		if p.closed {
			p.mu.Unlock()
			return
		}
		job := p.jobs[p.head]
		p.jobs[p.head] = offJob{}
		if p.head++; p.head == len(p.jobs) {
			p.jobs, p.head = p.jobs[:0], 0
		}
		p.mu.Unlock()
		p.do(job)
	}
}

// close drops queued jobs, stops the workers and waits for them (a job
// running now finishes first).
func (p *readPool) close() {
	p.mu.Lock()
	p.closed = true
	p.jobs, p.head = nil, 0
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}
