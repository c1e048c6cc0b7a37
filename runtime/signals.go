package runtime

import (
	"sync"
	"time"
)

// IOTimes measures where one subtask's wall time goes, as Flink's
// TaskIOMetricGroup does for busyTimeMsPerSecond, backPressuredTimeMsPerSecond
// and idleTimeMsPerSecond: the subtask marks the start and end of every wait
// for input (idle: its input gate is empty, or a source's poll returned
// nothing yet) and of every wait to emit (back-pressured: a downstream
// channel is full); busy is the rest of the time it ran. Only the blocking
// paths call it (a channel operation that would block, a poll), never the
// per-record path, so it costs two clock reads per wait.
//
// A subtask goroutine calls Start, the Begin/End pairs and Stop; Read is
// safe for concurrent use from any goroutine and includes a wait still in
// progress, so the totals grow smoothly while a subtask is blocked for a
// long time. Idle and back-pressured waits do not nest (the subtask is in
// at most one of them). Every method of a nil *IOTimes does nothing (Read
// returns zeros).
type IOTimes struct {
	mu         sync.Mutex
	started    time.Time // zero before Start
	stopped    time.Time // zero while running
	idle, bp   time.Duration
	idleSince  time.Time // the wait in progress; zero when none
	bpSince    time.Time
	idleSecs   []interface{ Add(float64) } // seconds idle, added at each wait's end
	bpSecs     []interface{ Add(float64) } // seconds back-pressured
	clock      func() time.Time
	nestedIdle int // Begin/EndIdle depth (a source's poll inside a task's wait counts once)
}

// NewIOTimes returns a meter that has not started. idleSeconds and
// backPressuredSeconds, if not nil, get the seconds of each wait added
// when it ends (kstreamd_operator_idle_seconds_total and
// kstreamd_operator_backpressured_seconds_total).
func NewIOTimes(idleSeconds, backPressuredSeconds interface{ Add(float64) }) *IOTimes {
	m := &IOTimes{clock: time.Now}
	m.adopt(idleSeconds, backPressuredSeconds)
	return m
}

func (m *IOTimes) adopt(idle, bp interface{ Add(float64) }) {
	if idle != nil {
		m.idleSecs = append(m.idleSecs, idle)
	}
	if bp != nil {
		m.bpSecs = append(m.bpSecs, bp)
	}
}

// Adopt makes m also add each wait's seconds to o's counters: a chained
// operator (whose meter o was made for it) runs in the task m meters, so
// its idle and back-pressured seconds are the task's. Call it before the
// task starts.
func (m *IOTimes) Adopt(o *IOTimes) {
	if m == nil || o == nil || o == m {
		return
	}
	m.idleSecs = append(m.idleSecs, o.idleSecs...)
	m.bpSecs = append(m.bpSecs, o.bpSecs...)
}

// SetClock replaces the meter's clock (time.Now); for tests, before Start.
func (m *IOTimes) SetClock(clock func() time.Time) { m.clock = clock }

// Start marks the subtask running from now on; a second Start (a task
// that runs again) keeps the first.
func (m *IOTimes) Start() {
	if m == nil {
		return
	}
	m.mu.Lock()
	if m.started.IsZero() {
		m.started = m.clock()
	}
	m.stopped = time.Time{}
	m.mu.Unlock()
}

// Stop marks the subtask finished: its wall time stops growing, and a
// wait in progress ends.
func (m *IOTimes) Stop() {
	if m == nil {
		return
	}
	m.mu.Lock()
	now := m.clock()
	m.endIdle(now)
	m.endBP(now)
	m.nestedIdle = 0
	m.stopped = now
	m.mu.Unlock()
}

// BeginIdle marks the start of a wait for input.
func (m *IOTimes) BeginIdle() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.nestedIdle++
	if m.nestedIdle == 1 {
		m.idleSince = m.clock()
	}
	m.mu.Unlock()
}

// EndIdle marks the end of the wait BeginIdle started.
func (m *IOTimes) EndIdle() {
	if m == nil {
		return
	}
	m.mu.Lock()
	if m.nestedIdle > 0 {
		m.nestedIdle--
		if m.nestedIdle == 0 {
			m.endIdle(m.clock())
		}
	}
	m.mu.Unlock()
}

func (m *IOTimes) endIdle(now time.Time) {
	if m.idleSince.IsZero() {
		return
	}
	d := now.Sub(m.idleSince)
	m.idle += d
	m.idleSince = time.Time{}
	for _, c := range m.idleSecs {
		c.Add(d.Seconds())
	}
}

// BeginBackPressure marks the start of a wait on a full downstream
// channel.
func (m *IOTimes) BeginBackPressure() {
	if m == nil {
		return
	}
	m.mu.Lock()
	if m.bpSince.IsZero() {
		m.bpSince = m.clock()
	}
	m.mu.Unlock()
}

// EndBackPressure marks the end of the wait BeginBackPressure started.
func (m *IOTimes) EndBackPressure() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.endBP(m.clock())
	m.mu.Unlock()
}

func (m *IOTimes) endBP(now time.Time) {
	if m.bpSince.IsZero() {
		return
	}
	d := now.Sub(m.bpSince)
	m.bp += d
	m.bpSince = time.Time{}
	for _, c := range m.bpSecs {
		c.Add(d.Seconds())
	}
}

// IOTotals are an IOTimes' cumulative times at one instant: Wall is the
// time the subtask ran (since Start, up to Stop), Idle and BackPressured
// the parts of it spent waiting for input and to emit; Busy is the rest.
type IOTotals struct {
	At                        time.Time
	Wall, Idle, BackPressured time.Duration
}

// Busy returns Wall minus Idle and BackPressured (never below 0).
func (t IOTotals) Busy() time.Duration {
	return max(t.Wall-t.Idle-t.BackPressured, 0)
}

// Read returns the totals now, a wait in progress counted up to now.
func (m *IOTimes) Read() IOTotals {
	if m == nil {
		return IOTotals{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock()
	t := IOTotals{At: now, Idle: m.idle, BackPressured: m.bp}
	if m.started.IsZero() {
		return t
	}
	end := now
	if !m.stopped.IsZero() {
		end = m.stopped
	}
	t.Wall = end.Sub(m.started)
	if !m.idleSince.IsZero() {
		t.Idle += end.Sub(m.idleSince)
	}
	if !m.bpSince.IsZero() {
		t.BackPressured += end.Sub(m.bpSince)
	}
	return t
}
