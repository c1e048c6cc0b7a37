package operators

import (
	"github.com/kstreamd/kstreamd/state"
)

// keyTimerRegisterer is the timer service's ability to register an
// event-time timer for a given key, also from ProcessBroadcastElement and
// RestoreBroadcastState (where no key is current): the rules operator uses
// it when a rule's window shrinks, so every key of the rule has a timer at
// or before its oldest slice's new end.
type keyTimerRegisterer interface {
	registerKeyEventTimer(key []byte, ts int64) error
}

// registerKeyEventTimer implements keyTimerRegisterer: an event-time timer
// of key at ts (ms since the epoch); one already registered is kept.
func (s *timerService) registerKeyEventTimer(key []byte, ts int64) error {
	_, err := s.q.Register(state.EventTime, key, ts)
	return err
}

// sliceEnd is the time (ms) after which the watermark removes slice k of
// a key (OnTimer): k plus the longer of the rule's current window win and
// the longest window a copy written into the slice had.
func sliceEnd(k, win int64, s *ruleSlice) int64 { return k + max(win, s.WindowMs) }

// ruleWindowMs is the current window reach (ms, CompiledRule.windowMs:
// the window, less the slice of a hopping rule) of rule id at the keyed
// stage: 0 when the rule is not known (deleted, or its broadcast not
// arrived yet).
func (f *RulesEvaluator) ruleWindowMs(id string) int64 {
	if r, ok := f.rules[id]; ok {
		return r.Rule.windowMs()
	}
	return 0
}

// rearmTimers registers, for every key of the rules ids selects that holds
// slices, a timer just after its oldest slice's end under the rule's
// current window (sliceEnd). The keyed stage keeps one pending timer per
// key, at or before that time (registered when the key's first or a new
// oldest slice arrives, and by OnTimer for the oldest left); when a rule's
// window shrinks (an update, or a rule dropped at restore) that time moves
// earlier, and this keeps the timer at or before it, so the slices still
// leave once the watermark passes their time plus the window. It visits
// every key of the operator (a rare lifecycle event).
func (f *RulesEvaluator) rearmTimers(ids func(id string) bool) error {
	kr, ok := f.timers.(keyTimerRegisterer)
	if !ok || f.backend == nil {
		return nil
	}
	return state.ApplyToAllValueKeys(f.backend, RulesAggState, func(key []byte, _ state.ValueState[ruleWindow]) error {
		id := ruleOfKey(key)
		if !ids(id) {
			return nil
		}
		rw := &f.win
		if err := rw.load(); err != nil {
			return err
		}
		if !rw.has || rw.w.Slices == 0 {
			return nil
		}
		h, err := rw.slice(rw.w.Head)
		if err != nil {
			return err
		}
		return kr.registerKeyEventTimer(key, sliceEnd(rw.w.Head, f.ruleWindowMs(id), h)+1)
	})
}
