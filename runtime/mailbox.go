package runtime

import (
	"context"
	"sync"
)

// Mailbox hands actions to a subtask goroutine, as Flink's MailboxExecutor
// does: any goroutine may Execute an action; only the subtask goroutine runs
// them (through Yield, TryYieldAll or the task loop watching Ready). Actions
// run in the order they were posted. The queue is unbounded: posters are
// completions of work the subtask itself started, so their number is bounded
// by what the subtask keeps in flight.
//
// A subtask goroutine waits for mail in one of two ways: it selects on Ready
// (with its other inputs) and then calls TryYieldAll, or it bounds a blocking
// call that only takes a context (a Kafka poll) with a context from
// Interruptible, which Execute cancels. Either way it wakes once per batch of
// posts: Ready holds a signal only while actions are pending, so a signal
// consumed by running the actions is never seen again.
type Mailbox struct {
	mu        sync.Mutex // guards queue, interrupt, and the signal in ready
	queue     []func()
	ready     chan struct{} // capacity 1: holds a signal only while queue is not empty
	interrupt *interrupter  // the Interruptible context to cancel at the next post, or nil
	err       error         // first failure reported by an action (Fail)
}

// Fail records err as the failure of an action (a timer callback): the task
// loop fails with the first one after running its mail. Safe for
// concurrent use.
func (m *Mailbox) Fail(err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	m.mu.Unlock()
}

// Err returns the first error passed to Fail, or nil.
func (m *Mailbox) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// interrupter is the cancel func of one Interruptible context.
type interrupter struct{ cancel context.CancelFunc }

// NewMailbox returns an empty mailbox.
func NewMailbox() *Mailbox { return &Mailbox{ready: make(chan struct{}, 1)} }

// Execute posts action to run later on the subtask goroutine, signals Ready
// and cancels the outstanding Interruptible context, if any. Safe for
// concurrent use; never blocks.
func (m *Mailbox) Execute(action func()) {
	m.mu.Lock()
	m.queue = append(m.queue, action)
	select {
	case m.ready <- struct{}{}:
	default:
	}
	in := m.interrupt
	m.interrupt = nil
	m.mu.Unlock()
	if in != nil {
		in.cancel()
	}
}

// Ready is signalled when actions are pending; the subtask loop selects on
// it and then calls TryYieldAll. The signal is taken back when the pending
// actions have run (TryYieldAll, Yield), so it is never stale: after
// TryYieldAll, Ready stays quiet until the next Execute.
func (m *Mailbox) Ready() <-chan struct{} { return m.ready }

// TryYieldAll runs every action pending now, and those posted while they
// run, on the calling goroutine, which must be the subtask goroutine. It
// returns how many ran; when it returns, Ready is not signalled unless an
// action was posted after the last one ran.
func (m *Mailbox) TryYieldAll() int {
	n := 0
	for {
		a := m.pop()
		if a == nil {
			return n
		}
		a()
		n++
	}
}

// Yield runs one pending action on the calling goroutine (the subtask
// goroutine), blocking until one is posted or ctx ends; it returns ctx.Err()
// in the latter case.
func (m *Mailbox) Yield(ctx context.Context) error {
	for {
		if a := m.pop(); a != nil {
			a()
			return nil
		}
		select {
		case <-m.ready:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Interruptible returns a context derived from parent that is cancelled as
// soon as an action is pending: at once if one is pending now, otherwise by
// the next Execute. The subtask goroutine uses it to bound a blocking call
// that must return when mail arrives, with no goroutine watching Ready.
// Only the subtask goroutine may call it, with at most one such context
// outstanding; release must be called (typically deferred) when the call
// returned: it detaches the context from the mailbox and cancels it.
func (m *Mailbox) Interruptible(parent context.Context) (ctx context.Context, release context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	in := &interrupter{cancel: cancel}
	m.mu.Lock()
	if len(m.queue) > 0 {
		m.mu.Unlock()
		cancel()
		return ctx, cancel
	}
	m.interrupt = in
	m.mu.Unlock()
	return ctx, func() {
		m.mu.Lock()
		if m.interrupt == in {
			m.interrupt = nil
		}
		m.mu.Unlock()
		cancel()
	}
}

// pop removes and returns the oldest pending action, or nil; once the queue
// is empty it takes back the Ready signal.
func (m *Mailbox) pop() func() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.queue) == 0 {
		m.drainReady()
		return nil
	}
	a := m.queue[0]
	m.queue[0] = nil
	m.queue = m.queue[1:]
	if len(m.queue) == 0 {
		m.queue = nil
		m.drainReady()
	}
	return a
}

// drainReady takes back the Ready signal; m.mu must be held.
func (m *Mailbox) drainReady() {
	select {
	case <-m.ready:
	default:
	}
}
