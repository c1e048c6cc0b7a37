package operators

import (
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// WindowSliceStateName is the MapState of a sliced sliding window (see
// Window.sliced): per key, slice start (ms since the epoch) to the slice's
// end and accumulators, in the stored form of WindowStateName. Part of the
// checkpoint format.
const WindowSliceStateName = WindowStateName + ".slice"

// windowSliceStateOf is the descriptor of WindowSliceStateName.
func windowSliceStateOf(specs []AggregateSpec) state.MapStateDescriptor[int64, windowEntry] {
	return state.MapStateDescriptor[int64, windowEntry]{
		Name: WindowSliceStateName, KeySerializer: state.Int64Serializer{}, ValueSerializer: newWindowEntrySerializer(specs),
	}
}

// gcd returns the greatest common divisor of two positive numbers.
func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// slicable reports whether p's windows are computed from slices: event-time
// sliding windows without early firing whose aggregates all merge (count,
// sum, min, max, avg; first, last and count_distinct depend on the order
// of arrival or on the values, and keep one accumulator per window).
func slicable(p WindowParams) bool {
	if p.Kind != Sliding || p.Time == WindowProcessingTime || p.EarlyFiring != 0 || p.Slide == p.Size {
		return false
	}
	for _, s := range p.Aggregates {
		switch s.Fn {
		case AggCount, AggSum, AggMin, AggMax, AggAvg:
		default:
			return false
		}
	}
	return true
}

// aligned reports whether start is the start of a window.
func (w *Window) aligned(start int64) bool {
	s, ok := windowStart(start, w.offset, w.slide)
	return ok && s == start
}

// addSliced folds a record at t into its slice (one accumulator per key and
// slice of gcd(size, slide) ms, Flink's SliceAssigners.sliding) and emits
// the updated result of every live window of it whose end the watermark
// already passed (a late record within the lateness), merged from the
// window's slices. A new slice registers the closing timers of its windows
// still ahead of the watermark and its own expiry (the end - 1ms +
// lateness of its last window). Windows restored from a checkpoint of the
// per-window layout (in WindowStateName) go on as before until they close.
func (w *Window) addSliced(rec runtime.Record, t int64, live [][2]int64, in []aggInput, wm int64, out Collector) error {
	start, ok := windowStart(t, w.offset, w.g)
	if !ok {
		return w.outOfRange(t)
	}
	sl, found, err := w.slices.Get(start)
	if err != nil {
		return err
	}
	if !found {
		sl = windowEntry{End: start + w.g, Accs: make([]aggAccumulator, len(w.specs))}
	}
	d := 0
	for i := range w.specs {
		sl.Accs[i] = w.foldOne(i, accAt(sl.Accs, i), in[i], nil, &d)
	}
	if err := w.slices.Put(start, sl); err != nil {
		return err
	}
	if !found {
		w.addOpen(1)
		last, _ := windowStart(start, w.offset, w.slide) // start's last window
		for ws := last; ; ws -= w.slide {                // the windows holding the slice, last first
			if maxTs := ws + w.size - 1; maxTs > wm {
				if err := w.timers.RegisterEventTimeTimer(time.UnixMilli(maxTs)); err != nil {
					return err
				}
			}
			if ws-start <= w.slide-w.size { // the next one ends at or before start
				break
			}
		}
		if err := w.timers.RegisterEventTimeTimer(time.UnixMilli(last + w.size - 1 + w.late)); err != nil {
			return err
		}
	}
	for _, win := range live {
		if w.legacy > 0 {
			e, found, err := w.windows.Get(win[0])
			if err != nil {
				return err
			}
			if found {
				if err := w.add(rec.Key, win[0], e, false, in, wm, out); err != nil {
					return err
				}
				continue
			}
		}
		if win[1]-1 > wm {
			continue
		}
		e, _, err := w.mergeSlices(win[0], win[1])
		if err != nil {
			return err
		}
		if w.fired != nil {
			w.fired.Inc()
		}
		if err := out.Collect(w.result(rec.Key, win[0], e)); err != nil {
			return err
		}
	}
	return nil
}

// mergeSlices returns window [start, end) of the current key merged from
// its slices in time order, and whether any slice held records.
func (w *Window) mergeSlices(start, end int64) (windowEntry, bool, error) {
	e := windowEntry{End: end}
	for a := start; a < end; a += w.g {
		sl, found, err := w.slices.Get(a)
		if err != nil {
			return e, false, err
		}
		if !found {
			continue
		}
		if e.Accs == nil {
			e.Accs = sl.Accs
		} else {
			e.Accs = w.mergeAccs(e.Accs, sl.Accs)
		}
	}
	return e, e.Accs != nil, nil
}

// closeSliced handles the event-time timer at ts of a sliced window: a
// restored per-window window is closed as before (closeDue); otherwise the
// window ending at ts + 1ms fires when one of its slices holds records
// (a window exists once a record reached it while it was live: its
// timer is registered only while ahead of the watermark, so it fires
// once), and the slices whose last window's lateness ends at ts expire.
func (w *Window) closeSliced(key []byte, ts, now int64, out Collector) error {
	start := ts + 1 - w.size
	legacy := false
	if w.legacy > 0 {
		var err error
		if _, legacy, err = w.windows.Get(start); err != nil {
			return err
		}
		if err := w.closeDue(key, ts, now, out); err != nil {
			return err
		}
	}
	if !legacy && w.aligned(start) {
		e, any, err := w.mergeSlices(start, ts+1)
		if err != nil {
			return err
		}
		if any {
			if w.fired != nil {
				w.fired.Inc()
			}
			if err := out.Collect(w.result(key, start, e)); err != nil {
				return err
			}
		}
	}
	if first, ok := subInt64(ts+1-w.size, w.late); ok && w.aligned(first) {
		for a := first; a < first+w.slide; a += w.g {
			_, found, err := w.slices.Get(a)
			if err != nil {
				return err
			}
			if found {
				if err := w.slices.Remove(a); err != nil {
					return err
				}
				w.addOpen(-1)
			}
		}
	}
	return nil
}
