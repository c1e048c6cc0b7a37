package operators

import (
	"context"
	"fmt"
	"time"

	"github.com/kstreamd/kstreamd/state"
)

// ttlCleaner is the schedule of a keyed subtask's background TTL cleanup
// (Flink's incremental cleanup, run by the task rather than on state
// access): once the backend has a state with TTL and background cleanup
// (state.CleanupSchedule), a time.AfterFunc posts one
// state.KeyedStateBackend.CleanupStep to the task's mailbox every interval
// of processing time (state.DefaultTTLCleanupInterval, 10ms, visiting at
// most state.DefaultTTLCleanupEntriesPerStep, 1,000, entries), and a
// watermark runs one too when the last step is at least an interval old
// (event-time TTL expires on watermarks). Every step runs on the subtask
// goroutine, between records: state stays single-threaded. The timer's
// callback only posts to the mailbox.
type ttlCleaner struct {
	interval time.Duration
	active   bool      // the schedule started
	armed    bool      // a wake-up, or the mailbox action it posted, is pending
	stopped  bool      // Close ran
	last     time.Time // wall time of the previous step
	wake     *time.Timer
	post     func() // the AfterFunc callback: posts tick to the mailbox
}

// startCleanup starts the cleanup schedule; state.NotifyCleanup calls it
// on the subtask goroutine once the backend has a state to clean. Without
// a mailbox (an operator driven by hand) there is no schedule: watermarks
// and checkpoints still run steps.
func (o *KeyedOperator) startCleanup() {
	c := &o.cleaner
	if c.active || c.stopped {
		return
	}
	c.interval, c.active = state.CleanupSchedule(o.backend)
	if !c.active || o.mailbox == nil {
		return
	}
	c.post = func() { o.mailbox.Execute(o.cleanupTick) }
	o.armCleanup()
}

// armCleanup schedules the next tick, unless one is pending.
func (o *KeyedOperator) armCleanup() {
	c := &o.cleaner
	if c.armed || c.stopped || c.post == nil {
		return
	}
	c.armed = true
	if c.wake == nil {
		c.wake = time.AfterFunc(c.interval, c.post)
		return
	}
	c.wake.Reset(c.interval)
}

// cleanupTick is the mailbox action of a tick: one step, then the next
// tick. A failing step fails the task through the mailbox.
func (o *KeyedOperator) cleanupTick() {
	c := &o.cleaner
	c.armed = false
	if c.stopped || o.backend == nil {
		return
	}
	if err := o.cleanupStep(); err != nil {
		o.mailbox.Fail(err)
		return
	}
	o.armCleanup()
}

// cleanupStep runs one CleanupStep when the schedule is active. With async
// state it runs exclusive of the read workers
// (state.AsyncExecutionController.ExclusiveOfReads: the Pebble read workers
// apply TTL to the entries they read, and a step must not judge an entry a
// worker is refreshing), whether or not records are in flight: a step that
// waited for a moment without records in flight would almost never run
// under steady input, and state would grow until the input pauses.
func (o *KeyedOperator) cleanupStep() error {
	c := &o.cleaner
	if !c.active || c.stopped {
		return nil
	}
	c.last = time.Now()
	step := func() error {
		_, err := o.backend.CleanupStep()
		return err
	}
	var err error
	if o.aec != nil {
		err = o.aec.ExclusiveOfReads(step)
	} else {
		err = step()
	}
	if err != nil {
		return fmt.Errorf("operators: %s[%d]: ttl cleanup: %w", o.info.Operator, o.info.Subtask, err)
	}
	return nil
}

// cleanupOnWatermark runs a step for a watermark when the previous step is
// at least an interval old: an event-time TTL's entries expire as the
// watermark moves.
func (o *KeyedOperator) cleanupOnWatermark(context.Context) error {
	c := &o.cleaner
	if !c.active || time.Since(c.last) < c.interval {
		return nil
	}
	return o.cleanupStep()
}

// stopCleanup ends the schedule (Close).
func (o *KeyedOperator) stopCleanup() {
	c := &o.cleaner
	c.stopped = true
	if c.wake != nil {
		c.wake.Stop()
	}
}
