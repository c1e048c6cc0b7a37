package runtime

import (
	"context"
	"sync"
)

// Mailbox hands actions to a subtask goroutine, as Flink's MailboxExecutor
// does: any goroutine may Execute an action; only the subtask goroutine runs
// them (through Yield, TryYield or the task loop watching Ready). Actions run
// in the order they were posted. The queue is unbounded: posters are
// completions of work the subtask itself started, so their number is bounded
// by what the subtask keeps in flight.
type Mailbox struct {
	mu    sync.Mutex // guards queue
	queue []func()
	ready chan struct{} // capacity 1: signalled when queue becomes non-empty
}

// NewMailbox returns an empty mailbox.
func NewMailbox() *Mailbox { return &Mailbox{ready: make(chan struct{}, 1)} }

// Execute posts action to run later on the subtask goroutine. Safe for
// concurrent use; never blocks.
func (m *Mailbox) Execute(action func()) {
	m.mu.Lock()
	m.queue = append(m.queue, action)
	m.mu.Unlock()
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

// Ready is signalled (at most once per batch of posts) when actions may be
// pending; the subtask loop selects on it and then calls TryYieldAll.
func (m *Mailbox) Ready() <-chan struct{} { return m.ready }

// TryYieldAll runs every action pending now on the calling goroutine, which
// must be the subtask goroutine, and returns how many ran.
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

func (m *Mailbox) pop() func() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.queue) == 0 {
		return nil
	}
	a := m.queue[0]
	m.queue[0] = nil
	m.queue = m.queue[1:]
	if len(m.queue) == 0 {
		m.queue = nil
	}
	return a
}
