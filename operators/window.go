package operators

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// WindowType is the pipeline name of the window operator.
const WindowType = "window"

// WindowStateName is the window operator's MapState: per key, window start
// (ms since the epoch) to the window's end and accumulators. Part of the
// checkpoint format.
const WindowStateName = "window"

// LateOutput is the window operator's side output of late records, read as
// "<operator>.late".
const LateOutput = "late"

// WindowKind is the kind param of the window operator.
type WindowKind string

// The window kinds (Flink's window assigners).
const (
	// Tumbling windows of size, aligned to the epoch: [k*size, (k+1)*size).
	Tumbling WindowKind = "tumbling"
	// Sliding (hopping) windows of size every slide, aligned to the epoch;
	// a record belongs to size/slide of them.
	Sliding WindowKind = "sliding"
	// Session windows: a record opens [t, t+gap); windows of a key that
	// overlap merge.
	Session WindowKind = "session"
)

// UnmarshalText implements encoding.TextUnmarshaler, refusing an unknown
// kind.
func (k *WindowKind) UnmarshalText(text []byte) error {
	return setEnum(k, text, Tumbling, Sliding, Session)
}

// WindowTime is the time param of the window operator.
type WindowTime string

// The window times.
const (
	// WindowEventTime assigns records by their timestamp and closes windows
	// with the watermark (the default).
	WindowEventTime WindowTime = "event"
	// WindowProcessingTime assigns records by the wall clock at arrival and
	// closes windows by it.
	WindowProcessingTime WindowTime = "processing"
)

// UnmarshalText implements encoding.TextUnmarshaler, refusing an unknown
// value.
func (w *WindowTime) UnmarshalText(text []byte) error {
	return setEnum(w, text, WindowEventTime, WindowProcessingTime)
}

// WindowParams are the params of the window operator:
//
//	params:
//	  kind: tumbling          # tumbling, sliding or session
//	  size: 1m                # tumbling and sliding
//	  slide: 10s              # sliding
//	  gap: 30m                # session
//	  time: event             # or processing
//	  allowed_lateness: 5s    # event time only
//	  early_firing: 10s       # optional: also emit open windows' results this often (processing time)
//	  aggregates:
//	    - {name: clicks, fn: count}
type WindowParams struct {
	Kind            WindowKind      `yaml:"kind" doc:"tumbling, sliding or session; required."`
	Size            time.Duration   `yaml:"size" doc:"The window length of tumbling and sliding windows, e.g. 1m; required for them."`
	Slide           time.Duration   `yaml:"slide" doc:"How often a sliding window starts; required for sliding, at most size."`
	Gap             time.Duration   `yaml:"gap" doc:"A session closes after this long without a record of its key; required for session."`
	Time            WindowTime      `yaml:"time" doc:"event (default: record timestamps, closed by the watermark) or processing (the wall clock)."`
	AllowedLateness time.Duration   `yaml:"allowed_lateness" doc:"How long after its end a window still takes late records (each emits an updated result); later ones go to the side output <operator>.late. Event time only; default 0."`
	EarlyFiring     time.Duration   `yaml:"early_firing" doc:"If set, also emit the current results of every open window of a key this often, in processing time (speculative results before the final one); default: off."`
	Aggregates      []AggregateSpec `yaml:"aggregates" doc:"The aggregates, each {name, fn, of} as in the aggregate operator, in output order; required."`
}

// CheckParams implements ParamsChecker.
func (p *WindowParams) CheckParams(report func(field, msg string)) {
	ap := AggregateParams{Aggregates: p.Aggregates}
	ap.CheckParams(report)
	for i, a := range p.Aggregates {
		if a.Name == "window_start" || a.Name == "window_end" {
			report(fmt.Sprintf("aggregates[%d].name", i), fmt.Sprintf("%q is an output field of the window; choose another name", a.Name))
		}
	}
	positive := func(field string, d time.Duration, need bool) {
		switch {
		case need && d == 0:
			report(field, fmt.Sprintf("required for kind %s (a duration such as 10s)", p.Kind))
		case !need && d != 0:
			report(field, fmt.Sprintf("does not apply to kind %s", p.Kind))
		case d < 0 || (need && d < time.Millisecond):
			report(field, fmt.Sprintf("must be at least 1ms, got %v", d))
		}
	}
	switch p.Kind {
	case "":
		report("kind", "required: tumbling, sliding or session")
	case Tumbling:
		positive("size", p.Size, true)
		positive("slide", p.Slide, false)
		positive("gap", p.Gap, false)
	case Sliding:
		positive("size", p.Size, true)
		positive("slide", p.Slide, true)
		positive("gap", p.Gap, false)
		if p.Slide > p.Size {
			report("slide", fmt.Sprintf("must be at most size %v, got %v", p.Size, p.Slide))
		}
	case Session:
		positive("gap", p.Gap, true)
		positive("size", p.Size, false)
		positive("slide", p.Slide, false)
	}
	if p.AllowedLateness < 0 {
		report("allowed_lateness", fmt.Sprintf("must be >= 0, got %v", p.AllowedLateness))
	}
	if p.AllowedLateness > 0 && p.Time == WindowProcessingTime {
		report("allowed_lateness", "applies to event time only (processing-time windows have no late records)")
	}
	if p.EarlyFiring != 0 && p.EarlyFiring < 100*time.Millisecond {
		report("early_firing", fmt.Sprintf("must be 0 (off) or at least 100ms, got %v", p.EarlyFiring))
	}
}

// windowFactory registers WindowType.
func windowFactory() Factory {
	return Factory{
		Type:        WindowType,
		Doc:         "Per key, tumbling, sliding or session windows on event or processing time with the aggregate operator's functions, emitted as {\"key\", \"window_start\", \"window_end\", <name>: <result>, ...} when the watermark passes the window end; late records to <operator>.late.",
		Traits:      Traits{Keyed: true},
		Params:      func() any { return &WindowParams{Time: WindowEventTime} },
		State:       []string{WindowStateName, state.TimersStateName},
		SideOutputs: []string{LateOutput},
		New: func(ctx FactoryContext) (any, error) {
			p, ok := ctx.Params.(*WindowParams)
			if !ok {
				return nil, fmt.Errorf("operators: %s: params %T, want *WindowParams", WindowType, ctx.Params)
			}
			return NewWindow(*p), nil
		},
	}
}

// windowEntry is one window of one key in WindowStateName.
type windowEntry struct {
	End   int64                 `json:"end"` // exclusive, ms
	Acc   aggregateAccumulators `json:"acc"`
	Fired bool                  `json:"fired,omitempty"` // the on-time result was emitted
}

// Window is the window operator (Flink's WindowOperator with an
// AggregateFunction and the default triggers): per key, each record is
// assigned to its windows and folded into their accumulators (the
// aggregate operator's). A window [start, end) fires when the watermark
// reaches end-1ms (processing time: when the wall clock does), emitting
//
//	{"key": <key>, "window_start": <RFC 3339>, "window_end": <RFC 3339>, <name>: <result>, ...}
//
// with timestamp end-1ms; its state is removed when the watermark reaches
// end-1ms+allowed_lateness, by the same timers. A record for a window that
// already fired but is within the lateness updates it and emits its new
// result at once (a second result for that window); a record all of whose
// windows are past their lateness is late: it goes unchanged to the side
// output LateOutput. Session windows of a key that overlap merge, and so
// do their accumulators. Every of is evaluated before state is read: a
// record on which one fails is a *runtime.RecordError (eval_error).
type Window struct {
	aggregator
	p       WindowParams
	size    int64
	slide   int64
	gap     int64
	late    int64
	early   int64
	timers  TimerService
	windows state.MapState[int64, windowEntry]
}

// NewWindow returns the window function of params p (checked by
// CheckParams).
func NewWindow(p WindowParams) *Window {
	return &Window{
		aggregator: newAggregator(AggregateParams{Aggregates: p.Aggregates, Emit: EmitEveryUpdate}),
		p:          p, size: p.Size.Milliseconds(), slide: p.Slide.Milliseconds(), gap: p.Gap.Milliseconds(),
		late: p.AllowedLateness.Milliseconds(), early: p.EarlyFiring.Milliseconds(),
	}
}

// Open implements KeyedProcessFunction.
func (w *Window) Open(ctx OpenContext) error {
	w.timers = ctx.TimerService()
	if w.timers == nil {
		return fmt.Errorf("operators: %s %s: no timer service", WindowType, ctx.Operator)
	}
	m, err := state.GetMapState(ctx.Backend, state.MapStateDescriptor[int64, windowEntry]{
		Name: WindowStateName, KeySerializer: state.Int64Serializer{}, ValueSerializer: state.JSONSerializer[windowEntry]{},
	})
	if err != nil {
		return fmt.Errorf("operators: %s %s: %w", WindowType, ctx.Operator, err)
	}
	w.windows = m
	return nil
}

func (w *Window) eventTime() bool { return w.p.Time != WindowProcessingTime }

// floorMod returns t - (t mod n), rounding towards minus infinity.
func floorMod(t, n int64) int64 {
	r := t % n
	if r < 0 {
		r += n
	}
	return t - r
}

// assign returns the windows [start, end) of a record at t (ms).
func (w *Window) assign(t int64) [][2]int64 {
	switch w.p.Kind {
	case Tumbling:
		s := floorMod(t, w.size)
		return [][2]int64{{s, s + w.size}}
	case Sliding:
		var out [][2]int64
		for s := floorMod(t, w.slide); s > t-w.size; s -= w.slide {
			out = append(out, [2]int64{s, s + w.size})
		}
		return out
	}
	return [][2]int64{{t, t + w.gap}}
}

// ProcessElement implements KeyedProcessFunction.
func (w *Window) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	t := rec.Timestamp.UnixMilli()
	wm := w.timers.CurrentWatermark().UnixMilli()
	if !w.eventTime() {
		t = w.timers.CurrentProcessingTime().UnixMilli()
	}
	var live [][2]int64
	for _, win := range w.assign(t) {
		if !w.eventTime() || win[1]-1+w.late > wm {
			live = append(live, win)
		}
	}
	if len(live) == 0 {
		if sc, ok := out.(SideCollector); ok {
			return sc.CollectSide(LateOutput, rec)
		}
		return nil
	}
	in, err := w.inputs(&rec)
	if err != nil {
		return err
	}
	if w.p.Kind == Session {
		return w.addSession(rec.Key, live[0], in, wm, out)
	}
	for _, win := range live {
		e, found, err := w.windows.Get(win[0])
		if err != nil {
			return err
		}
		if !found {
			e = windowEntry{End: win[1]}
		}
		if err := w.add(rec.Key, win[0], e, in, wm, out); err != nil {
			return err
		}
	}
	return nil
}

// addSession merges the session window win with every window of the key
// that overlaps it, folds the record in and stores the result.
func (w *Window) addSession(key []byte, win [2]int64, in []aggInput, wm int64, out Collector) error {
	merged := windowEntry{End: win[1]}
	start := win[0]
	type part struct {
		start int64
		e     windowEntry
	}
	var parts []part
	for e, err := range w.windows.Entries() {
		if err != nil {
			return err
		}
		if e.Key < win[1] && e.Value.End > win[0] {
			parts = append(parts, part{e.Key, e.Value})
		}
	}
	slices.SortFunc(parts, func(a, b part) int { return cmp.Compare(a.start, b.start) })
	var acc aggregateAccumulators
	for _, p := range parts {
		if err := w.windows.Remove(p.start); err != nil {
			return err
		}
		start = min(start, p.start)
		merged.End = max(merged.End, p.e.End)
		if acc == nil {
			acc = p.e.Acc
		} else {
			acc = w.merge(acc, p.e.Acc)
		}
	}
	merged.Acc = acc
	return w.add(key, start, merged, in, wm, out)
}

// add folds in into window e starting at start, stores it, registers its
// timers and, for a window that already fired (a late record within the
// lateness), emits its updated result.
func (w *Window) add(key []byte, start int64, e windowEntry, in []aggInput, wm int64, out Collector) error {
	isNew := make([]bool, len(w.distinct))
	for j, i := range w.distinct {
		v := string(in[i].raw)
		acc := e.Acc[w.specs[i].Name]
		isNew[j] = !slices.Contains(acc.Seen, v)
	}
	first := e.Acc == nil
	e.Acc = w.accumulate(e.Acc, in, isNew)
	for j, i := range w.distinct {
		if isNew[j] {
			acc := e.Acc[w.specs[i].Name]
			acc.Seen = append(slices.Clone(acc.Seen), string(in[i].raw))
			e.Acc[w.specs[i].Name] = acc
		}
	}
	maxTs := e.End - 1
	// A window the watermark already passed (a late record within the
	// lateness) fires at once with its updated result (Flink's
	// EventTimeTrigger.onElement).
	emitNow := w.eventTime() && maxTs <= wm
	if emitNow {
		e.Fired = true
	}
	if err := w.windows.Put(start, e); err != nil {
		return err
	}
	if w.eventTime() {
		if err := w.timers.RegisterEventTimeTimer(time.UnixMilli(maxTs)); err != nil {
			return err
		}
		if w.late > 0 {
			if err := w.timers.RegisterEventTimeTimer(time.UnixMilli(maxTs + w.late)); err != nil {
				return err
			}
		}
	} else if err := w.timers.RegisterProcessingTimeTimer(time.UnixMilli(maxTs)); err != nil {
		return err
	}
	if first && w.early > 0 {
		now := w.timers.CurrentProcessingTime().UnixMilli()
		if err := w.timers.RegisterProcessingTimeTimer(time.UnixMilli(floorMod(now, w.early) + w.early)); err != nil {
			return err
		}
	}
	if emitNow {
		return out.Collect(w.result(key, start, e))
	}
	return nil
}

// OnTimer implements TimerFunction: windows whose end the time reached
// fire (once), windows past their lateness are removed; an early-firing
// timer emits the open windows' current results and schedules the next.
func (w *Window) OnTimer(_ context.Context, ts time.Time, tc TimerContext, out Collector) error {
	now := ts.UnixMilli()
	closing := tc.Domain == EventTime || !w.eventTime()
	if tc.Domain == EventTime {
		now = w.timers.CurrentWatermark().UnixMilli()
	} else if !w.eventTime() {
		now = max(now, w.timers.CurrentProcessingTime().UnixMilli())
	}
	type win struct {
		start int64
		e     windowEntry
	}
	var wins []win
	for e, err := range w.windows.Entries() {
		if err != nil {
			return err
		}
		wins = append(wins, win{e.Key, e.Value})
	}
	slices.SortFunc(wins, func(a, b win) int { return cmp.Compare(a.start, b.start) })
	open := false
	for _, x := range wins {
		maxTs := x.e.End - 1
		if !closing || maxTs > now {
			open = true
			if tc.Domain == ProcessingTime && w.early > 0 {
				if err := out.Collect(w.result(tc.Key, x.start, x.e)); err != nil {
					return err
				}
			}
			continue
		}
		if !x.e.Fired {
			if err := out.Collect(w.result(tc.Key, x.start, x.e)); err != nil {
				return err
			}
			x.e.Fired = true
		}
		lateness := w.late
		if !w.eventTime() {
			lateness = 0
		}
		if maxTs+lateness <= now {
			if err := w.windows.Remove(x.start); err != nil {
				return err
			}
		} else if err := w.windows.Put(x.start, x.e); err != nil {
			return err
		} else {
			open = true
		}
	}
	if open && tc.Domain == ProcessingTime && w.early > 0 {
		pt := w.timers.CurrentProcessingTime().UnixMilli()
		return w.timers.RegisterProcessingTimeTimer(time.UnixMilli(floorMod(pt, w.early) + w.early))
	}
	return nil
}

// result is the output record of window [start, e.End) of key.
func (w *Window) result(key []byte, start int64, e windowEntry) runtime.Record {
	k, _ := json.Marshal(string(key)) // a string: cannot fail
	b := append([]byte(`{"key":`), k...)
	b = append(b, `,"window_start":"`...)
	b = time.UnixMilli(start).UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","window_end":"`...)
	b = time.UnixMilli(e.End).UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	b = append(w.appendResults(b, e.Acc), '}')
	return runtime.Record{Key: key, Value: b, Timestamp: time.UnixMilli(e.End - 1)}
}
