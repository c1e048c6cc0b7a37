package operators

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// TimeDomain says which clock a timer is on (Flink's TimeDomain).
type TimeDomain = state.TimeDomain

// The time domains.
const (
	// EventTime timers fire when the input watermark reaches them.
	EventTime = state.EventTime
	// ProcessingTime timers fire when the wall clock reaches them.
	ProcessingTime = state.ProcessingTime
)

// ErrNoTimerKey is returned by the TimerService methods that register or
// delete timers when no key is current: in ProcessBroadcastElement (Flink
// refuses timers on the broadcast side too).
var ErrNoTimerKey = errors.New("operators: timers need a current key; ProcessBroadcastElement has none")

// TimerService registers and deletes the current key's timers (Flink's
// TimerService). Timers have millisecond resolution; a key has at most one
// timer per domain and millisecond, so registering one again changes
// nothing. Its methods run on the subtask goroutine: from ProcessElement,
// OnTimer and the keyed side of a keyed broadcast function.
type TimerService interface {
	// CurrentWatermark returns the operator's input watermark,
	// runtime.MinWatermark before the first.
	CurrentWatermark() time.Time
	// CurrentProcessingTime returns the wall clock.
	CurrentProcessingTime() time.Time
	// RegisterEventTimeTimer makes OnTimer run for the current key once
	// the watermark is at or after t (at once with the next watermark when
	// it already is). Errors: ErrNoTimerKey, or a state backend error.
	RegisterEventTimeTimer(t time.Time) error
	// RegisterProcessingTimeTimer makes OnTimer run for the current key
	// once the wall clock reaches t, also when no record arrives.
	RegisterProcessingTimeTimer(t time.Time) error
	// DeleteEventTimeTimer removes the current key's event-time timer at t;
	// absent is fine.
	DeleteEventTimeTimer(t time.Time) error
	// DeleteProcessingTimeTimer removes the current key's processing-time
	// timer at t; absent is fine.
	DeleteProcessingTimeTimer(t time.Time) error
}

// TimerContext tells OnTimer which timer fired.
type TimerContext struct {
	// Key is the timer's key, also the backend's current key during
	// OnTimer; valid until OnTimer returns.
	Key []byte
	// Domain is the timer's time domain.
	Domain TimeDomain
}

// TimerFunction is the optional interface of a KeyedProcessFunction or
// KeyedBroadcastProcessFunction that uses timers (Flink's onTimer). A
// function implementing it finds its TimerService in OpenContext.Timers
// at Open. OnTimer runs on the subtask goroutine with the timer's key
// current: it may read and write that key's state, register timers and
// emit to out. An event-time timer fires before the watermark that reached
// it is forwarded, so its output precedes that watermark downstream. An
// error fails the task.
type TimerFunction interface {
	OnTimer(ctx context.Context, timestamp time.Time, tc TimerContext, out Collector) error
}

// timerService implements TimerService for one keyed subtask over the
// backend's TimerQueue; processing-time timers fire through the task's
// mailbox, woken by one time.AfterFunc armed for the earliest of them.
type timerService struct {
	q         *state.TimerQueue
	b         state.KeyedStateBackend
	watermark time.Time
	noKey     bool // the broadcast side is running
	now       func() time.Time

	mailbox *runtime.Mailbox
	fire    func() // posted to the mailbox when the earliest processing timer is due
	armedAt int64  // ms of the armed wake-up; 0: none
	wake    *time.Timer
}

func (s *timerService) CurrentWatermark() time.Time      { return s.watermark }
func (s *timerService) CurrentProcessingTime() time.Time { return s.now() }

func (s *timerService) key() ([]byte, error) {
	if s.noKey || s.b.CurrentKey() == nil {
		return nil, ErrNoTimerKey
	}
	return s.b.CurrentKey(), nil
}

func (s *timerService) RegisterEventTimeTimer(t time.Time) error {
	k, err := s.key()
	if err != nil {
		return err
	}
	_, err = s.q.Register(EventTime, k, t.UnixMilli())
	return err
}

// registerNewEventTimeTimer is RegisterEventTimeTimer that reports
// whether the timer is new (the current key had none at t): a function
// that keeps state only while a timer is registered learns from it that
// the state is empty (the window join's rows of a window). Unexported: a
// function reaches it through newTimerRegisterer when its TimerService is
// the keyed operator's.
func (s *timerService) registerNewEventTimeTimer(t time.Time) (bool, error) {
	k, err := s.key()
	if err != nil {
		return false, err
	}
	return s.q.Register(EventTime, k, t.UnixMilli())
}

// newTimerRegisterer is implemented by timerService (registerNewEventTimeTimer).
type newTimerRegisterer interface {
	registerNewEventTimeTimer(t time.Time) (bool, error)
}

func (s *timerService) RegisterProcessingTimeTimer(t time.Time) error {
	k, err := s.key()
	if err != nil {
		return err
	}
	if _, err := s.q.Register(ProcessingTime, k, t.UnixMilli()); err != nil {
		return err
	}
	s.arm()
	return nil
}

func (s *timerService) DeleteEventTimeTimer(t time.Time) error {
	k, err := s.key()
	if err != nil {
		return err
	}
	return s.q.Delete(EventTime, k, t.UnixMilli())
}

func (s *timerService) DeleteProcessingTimeTimer(t time.Time) error {
	k, err := s.key()
	if err != nil {
		return err
	}
	return s.q.Delete(ProcessingTime, k, t.UnixMilli())
}

// arm makes sure a wake-up is scheduled for the earliest processing-time
// timer: one time.AfterFunc whose callback only posts to the mailbox.
func (s *timerService) arm() {
	t, ok := s.q.Peek(ProcessingTime)
	if !ok || s.mailbox == nil {
		return
	}
	if s.armedAt != 0 && s.armedAt <= t.Timestamp {
		return
	}
	if s.wake != nil {
		s.wake.Stop()
	}
	s.armedAt = t.Timestamp
	s.wake = time.AfterFunc(time.Until(t.Time()), func() { s.mailbox.Execute(s.fire) })
}

// stop cancels the armed wake-up.
func (s *timerService) stop() {
	if s.wake != nil {
		s.wake.Stop()
		s.wake = nil
	}
}

// newTimers opens the timer service of fn when it implements
// TimerFunction (nil otherwise).
func (o *KeyedOperator) newTimers() error {
	if _, ok := o.function().(TimerFunction); !ok || o.async != nil {
		return nil
	}
	q, err := state.NewTimerQueue(o.backend)
	if err != nil {
		return fmt.Errorf("operators: %s[%d]: timers: %w", o.info.Operator, o.info.Subtask, err)
	}
	o.timers = &timerService{q: q, b: o.backend, watermark: runtime.MinWatermark, now: time.Now, mailbox: o.mailbox}
	o.timers.fire = o.fireProcessingTimers
	o.info.Timers = o.timers
	o.timers.arm() // restored processing-time timers
	return nil
}

// fireDue runs OnTimer for every timer of domain d at or before upTo (ms).
func (o *KeyedOperator) fireDue(ctx context.Context, d TimeDomain, upTo int64) error {
	fn := o.function().(TimerFunction)
	o.coll = collector{ctx: ctx, out: o.out}
	for {
		t, ok, err := o.timers.q.PopDue(d, upTo)
		if err != nil || !ok {
			return err
		}
		o.backend.SetCurrentKey(t.Key)
		o.backend.SetRecordTimestamp(time.Time{})
		if err := fn.OnTimer(ctx, t.Time(), TimerContext{Key: t.Key, Domain: d}, &o.coll); err != nil {
			return fmt.Errorf("operators: %s[%d]: on timer %s at %d: %w", o.info.Operator, o.info.Subtask, d, t.Timestamp, err)
		}
	}
}

// fireProcessingTimers runs, from the mailbox, the processing-time timers
// due now and arms the next wake-up. A failure fails the task through the
// mailbox.
func (o *KeyedOperator) fireProcessingTimers() {
	if o.timers == nil || o.backend == nil {
		return
	}
	o.timers.armedAt = 0
	if err := o.fireDue(context.Background(), ProcessingTime, o.timers.now().UnixMilli()); err != nil {
		o.mailbox.Fail(err)
		return
	}
	o.timers.arm()
}

// ProcessWatermark implements runtime.WatermarkHandler: a
// LatencyBundleFunction with a batch open holds wm back until the batch
// ends (runtime.ErrWatermarkHeld; bundle.go); otherwise a BundleFunction's
// batch ends, the event-time timers at or before wm fire, then a
// WatermarkFunction's OnWatermark runs, the backend's event-time TTL clock
// moves to wm, and a background TTL cleanup step runs when the last one is an
// interval old (see ttlCleaner).
func (o *KeyedOperator) ProcessWatermark(ctx context.Context, wm time.Time) error {
	if o.holdWatermark(wm) { // forwarded at the batch's end (bundle.go)
		return runtime.ErrWatermarkHeld
	}
	if err := o.finishBundle(ctx); err != nil { // the batch's rows precede wm
		return err
	}
	return o.watermarkReached(ctx, wm)
}

// watermarkReached is ProcessWatermark after the batch ended: timers,
// OnWatermark, the TTL clock and cleanup.
func (o *KeyedOperator) watermarkReached(ctx context.Context, wm time.Time) error {
	if o.aec != nil {
		return nil // async reads run on other goroutines: no event-time TTL clock, no timers
	}
	o.backend.SetWatermark(wm)
	if o.timers != nil {
		o.timers.watermark = wm
		if err := o.fireDue(ctx, EventTime, wm.UnixMilli()); err != nil {
			return err
		}
	}
	if wf, ok := o.function().(WatermarkFunction); ok {
		o.coll = collector{ctx: ctx, out: o.out}
		if err := wf.OnWatermark(ctx, wm, &o.coll); err != nil {
			return fmt.Errorf("operators: %s[%d]: on watermark %d: %w", o.info.Operator, o.info.Subtask, wm.UnixMilli(), err)
		}
	}
	return o.cleanupOnWatermark(ctx)
}

// SetMailbox implements runtime.MailboxAware.
func (o *KeyedOperator) SetMailbox(m *runtime.Mailbox) {
	if o.mailbox == nil {
		o.mailbox = m
	}
}

// keyTimerDeleter is the timer service's ability to remove the timers of
// many keys at once, also from ProcessBroadcastElement (no current key
// needed): the rules operator uses it when a rule's state is removed.
type keyTimerDeleter interface {
	deleteKeyTimers(match func(key []byte) bool) (int, error)
}

// deleteKeyTimers implements keyTimerDeleter.
func (s *timerService) deleteKeyTimers(match func(key []byte) bool) (int, error) {
	return s.q.DeleteKeys(match)
}
