package operators

import (
	"context"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// This file holds the KeyedOperator's side of a LatencyBundleFunction (the
// aggregate's mini_batch with allow_latency): the processing-time end of a
// batch and the watermark held until a batch ends (Flink's mini-batch
// assigner emits watermarks only at mini-batch boundaries, and its
// processing-time trigger ends a batch allow_latency after it began).

// bundleClock is the batch state the KeyedOperator keeps for a
// LatencyBundleFunction: when the batch began, the watermark held back,
// and the wake-up that ends a batch allow_latency after its first record.
// Every field is used on the subtask goroutine only (the wake-up's
// callback only posts fire to the mailbox).
type bundleClock struct {
	// ctx is the task's context (Open's): the wake-up ends the batch with
	// it, so that its rows and watermark give up when the job is
	// cancelled rather than block the subtask on a full channel.
	ctx     context.Context
	fn      LatencyBundleFunction
	latency time.Duration
	now     func() time.Time
	// start is the wall clock when the open batch's first record came.
	start time.Time
	// held is the latest watermark held back while holding.
	held    time.Time
	holding bool
	// wake posts fire to the mailbox; armed: it is scheduled (for this
	// batch or an earlier one: fire then schedules it again).
	wake  *time.Timer
	armed bool
	fire  func()
}

// openBundleClock sets up the bundleClock of a LatencyBundleFunction with
// an allow_latency (nothing otherwise); Open calls it after the function
// opened, with its context.
func (o *KeyedOperator) openBundleClock(ctx context.Context) {
	o.bundle = nil
	fn, ok := o.function().(LatencyBundleFunction)
	if !ok || o.async != nil || fn.AllowLatency() <= 0 {
		return
	}
	o.bundle = &bundleClock{ctx: ctx, fn: fn, latency: fn.AllowLatency(), now: time.Now}
	o.bundle.fire = o.bundleDue
}

// bundleRecordDone follows a record of a LatencyBundleFunction (before:
// the records buffered before it; err: what processing it returned): a
// batch it began starts the allow_latency clock, and a batch it ended (at
// size) lets the held watermark go. err is returned unless that fails.
func (o *KeyedOperator) bundleRecordDone(ctx context.Context, before int, err error) error {
	c := o.bundle
	n := c.fn.BundleRecords()
	switch {
	case n > 0 && before == 0:
		c.start = c.now()
		if !c.armed {
			c.arm(c.latency, o.mailbox)
		}
	case n == 0 && c.holding:
		if rerr := o.releaseWatermark(ctx); rerr != nil {
			return rerr
		}
	}
	return err
}

// arm schedules fire on mailbox in d (nothing without a mailbox: a
// hand-driven operator ends batches at size, barriers and end of input).
func (c *bundleClock) arm(d time.Duration, mailbox *runtime.Mailbox) {
	if mailbox == nil {
		return
	}
	c.armed = true
	if c.wake == nil {
		c.wake = time.AfterFunc(d, func() { mailbox.Execute(c.fire) })
		return
	}
	c.wake.Reset(d)
}

// stop cancels the wake-up.
func (c *bundleClock) stop() {
	if c != nil && c.wake != nil {
		c.wake.Stop()
		c.armed = false
	}
}

// bundleDue runs from the mailbox when allow_latency may have passed
// since the open batch began: it ends that batch (and lets the held
// watermark go) when it has, and waits for the rest otherwise (the batch
// the wake-up was set for ended and a later one began). A failure fails
// the task.
func (o *KeyedOperator) bundleDue() {
	c := o.bundle
	if c == nil || o.backend == nil {
		return
	}
	c.armed = false
	if c.fn.BundleRecords() == 0 {
		return
	}
	if left := c.start.Add(c.latency).Sub(c.now()); left > 0 {
		c.arm(left, o.mailbox)
		return
	}
	if err := o.endBundle(c.ctx); err != nil && o.mailbox != nil {
		o.mailbox.Fail(err)
	}
}

// holdWatermark reports whether wm is held back because a batch is open
// (it then is the watermark the batch's end forwards).
func (o *KeyedOperator) holdWatermark(wm time.Time) bool {
	c := o.bundle
	if c == nil || c.fn.BundleRecords() == 0 {
		return false
	}
	c.held, c.holding = wm, true
	return true
}

// endBundle ends the open batch and lets the held watermark go after its
// rows.
func (o *KeyedOperator) endBundle(ctx context.Context) error {
	if err := o.finishBundle(ctx); err != nil {
		return err
	}
	return o.releaseWatermark(ctx)
}

// releaseWatermark handles the watermark held back (timers, the TTL clock,
// OnWatermark: what ProcessWatermark does) and forwards it, once the
// batch is over; nothing when none is held.
func (o *KeyedOperator) releaseWatermark(ctx context.Context) error {
	c := o.bundle
	if c == nil || !c.holding {
		return nil
	}
	c.holding = false
	if err := o.watermarkReached(ctx, c.held); err != nil {
		return err
	}
	if o.out == nil {
		return nil
	}
	return o.out.Broadcast(ctx, runtime.Element{Kind: runtime.KindWatermark, Watermark: c.held})
}

// ProcessIdle implements runtime.IdleHandler: with a LatencyBundleFunction
// the open batch ends and the held watermark goes out before the task
// forwards the idle status (downstream then ignores this input's
// watermark, so it must not arrive later); nothing otherwise.
func (o *KeyedOperator) ProcessIdle(ctx context.Context) error {
	if o.bundle == nil || o.backend == nil {
		return nil
	}
	return o.endBundle(ctx)
}
