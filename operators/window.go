package operators

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
// "<operator>.late". When no vertex reads it, late records are counted in
// kstreamd_operator_late_records_dropped_total and logged instead.
const LateOutput = "late"

// WindowKind is the kind param of the window operator.
type WindowKind string

// The window kinds (Flink's window assigners).
const (
	// Tumbling windows of size, aligned to the epoch plus offset:
	// [k*size+offset, (k+1)*size+offset).
	Tumbling WindowKind = "tumbling"
	// Sliding (hopping) windows of size every slide, aligned to the epoch
	// plus offset; a record belongs to size/slide of them.
	Sliding WindowKind = "sliding"
	// Session windows: a record opens [t, t+gap); windows of a key that
	// overlap or touch merge (Flink's TimeWindow.intersects: a record
	// exactly gap after the last one joins its session).
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
//	  offset: 0s              # tumbling and sliding: shift window starts from the epoch
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
	Offset          time.Duration   `yaml:"offset" doc:"Tumbling and sliding: windows start at the epoch plus offset plus a multiple of size (sliding: of slide), as Flink's window offset: a window holding t starts at t - ((t - offset) mod size); e.g. size 24h with offset -8h gives the days of UTC+8. Default 0; may be negative; |offset| must be less than size (sliding: than slide)."`
	Time            WindowTime      `yaml:"time" doc:"event (default: record timestamps, closed by the watermark) or processing (the wall clock)."`
	AllowedLateness time.Duration   `yaml:"allowed_lateness" doc:"How long after its end a window still takes late records (each emits an updated result); a record is late when every window it belongs to (a session: the session it merges into) has end - 1ms + this at or before the watermark (Flink's isWindowLate). Late records go to the side output <operator>.late, counted in kstreamd_operator_late_records_routed_total, or, when nothing reads it, are counted in kstreamd_operator_late_records_dropped_total and logged (rate-limited). Event time only; default 0."`
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
		if a.Filter.IsSet() {
			report(fmt.Sprintf("aggregates[%d].filter", i), "a window's aggregates take no filter (only the aggregate operator's count_distinct does)")
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
		if p.Size > 0 && p.Offset.Abs() >= p.Size {
			report("offset", fmt.Sprintf("|offset| must be less than size %v, got %v", p.Size, p.Offset))
		}
	case Sliding:
		positive("size", p.Size, true)
		positive("slide", p.Slide, true)
		positive("gap", p.Gap, false)
		if p.Slide > p.Size {
			report("slide", fmt.Sprintf("must be at most size %v, got %v", p.Size, p.Slide))
		}
		if p.Slide > 0 && p.Offset.Abs() >= p.Slide {
			report("offset", fmt.Sprintf("|offset| must be less than slide %v, got %v", p.Slide, p.Offset))
		}
	case Session:
		positive("gap", p.Gap, true)
		positive("size", p.Size, false)
		positive("slide", p.Slide, false)
		if p.Offset != 0 {
			report("offset", "does not apply to kind session")
		}
	}
	// Times are whole milliseconds: a finer duration would be cut
	// silently.
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"size", p.Size}, {"slide", p.Slide}, {"gap", p.Gap}, {"offset", p.Offset}, {"allowed_lateness", p.AllowedLateness}} {
		if f.d%time.Millisecond != 0 {
			report(f.name, fmt.Sprintf("must be a whole number of milliseconds (event times are in ms), got %v", f.d))
		}
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

// ProcessingTimeOutput implements ProcessingTimeOutput: processing-time
// windows stamp their results with the wall clock.
func (p *WindowParams) ProcessingTimeOutput() bool { return p.Time == WindowProcessingTime }

// windowFactory registers WindowType.
func windowFactory() Factory {
	return Factory{
		Type:        WindowType,
		Doc:         "Per key, tumbling, sliding or session windows on event or processing time with the aggregate operator's functions, emitted as {\"key\", \"window_start\", \"window_end\", <name>: <result>, ...} when the watermark passes the window end; late records to <operator>.late.",
		Traits:      Traits{Keyed: true},
		Params:      func() any { return &WindowParams{Time: WindowEventTime} },
		State:       []string{WindowStateName, WindowDistinctStateName, WindowSliceStateName, state.TimersStateName},
		SideOutputs: []string{LateOutput},
		New: func(ctx FactoryContext) (any, error) {
			p, ok := ctx.Params.(*WindowParams)
			if !ok {
				return nil, fmt.Errorf("operators: %s: params %T, want *WindowParams", WindowType, ctx.Params)
			}
			w := NewWindow(*p)
			w.Metrics, w.Logger = ctx.Metrics, ctx.Logger
			return w, nil
		},
	}
}

// windowEntry is one window of one key in WindowStateName.
type windowEntry struct {
	End int64 // exclusive, ms
	// Accs are the accumulators in the order of the operator's aggregates
	// (nil before the window's first record); one with Fn "" is absent (an
	// aggregate the restored entry did not have), and starts from zero.
	Accs  []aggAccumulator
	Fired bool // the on-time result was emitted
}

// windowEntryJSON is the stored form of a windowEntry (the checkpoint
// format): each accumulator under its aggregate's name.
type windowEntryJSON struct {
	End   int64                 `json:"end"`
	Acc   aggregateAccumulators `json:"acc"`
	Fired bool                  `json:"fired,omitempty"`
}

// windowStateOf is the descriptor of WindowStateName for the aggregates
// specs.
func windowStateOf(specs []AggregateSpec) state.MapStateDescriptor[int64, windowEntry] {
	return state.MapStateDescriptor[int64, windowEntry]{
		Name: WindowStateName, KeySerializer: state.Int64Serializer{}, ValueSerializer: newWindowEntrySerializer(specs),
	}
}

// windowEntrySerializer is the window state's serializer: JSON, named
// "json", writing exactly the bytes state.JSONSerializer writes for the
// stored form (windowEntryJSON: the accumulators as an object keyed by
// aggregate name, names in byte order), so checkpoints are unchanged both
// ways; decoding keeps the accumulators of the operator's aggregates, in
// their order, and drops those of names it no longer has (they never
// reached an output). It is a state.HeapSerializer, so on Pebble with the
// write cache a window's accumulators stay decoded between the records that
// fold into them: one slice per copy instead of a JSON decode and encode,
// or a map, per record.
type windowEntrySerializer struct {
	names  []string       // the aggregates' names, in spec order
	quoted [][]byte       // names[i] as a JSON string
	sorted []int          // indexes into names, in the byte order of the names
	index  map[string]int // name -> index
}

func newWindowEntrySerializer(specs []AggregateSpec) windowEntrySerializer {
	s := windowEntrySerializer{index: make(map[string]int, len(specs))}
	for i, sp := range specs {
		q, _ := json.Marshal(sp.Name) // a string: cannot fail
		s.names, s.quoted, s.sorted = append(s.names, sp.Name), append(s.quoted, q), append(s.sorted, i)
		s.index[sp.Name] = i
	}
	slices.SortFunc(s.sorted, func(a, b int) int { return cmp.Compare(s.names[a], s.names[b]) })
	return s
}

// Name implements state.Serializer: "json", as state.JSONSerializer.
func (windowEntrySerializer) Name() string { return state.JSONSerializer[windowEntryJSON]{}.Name() }

// Append implements state.Serializer: the bytes state.JSONSerializer
// writes for the stored form of v.
func (s windowEntrySerializer) Append(dst []byte, v windowEntry) ([]byte, error) {
	dst = strconv.AppendInt(append(dst, `{"end":`...), v.End, 10)
	if v.Accs == nil {
		dst = append(dst, `,"acc":null`...)
	} else {
		var err error
		if dst, err = s.appendAccs(append(dst, `,"acc":`...), v.Accs); err != nil {
			return dst, err
		}
	}
	if v.Fired {
		dst = append(dst, `,"fired":true`...)
	}
	return append(dst, '}'), nil
}

// appendAccs appends accs (in the order of the aggregates; Fn "" absent)
// as the bytes encoding/json writes for them as an aggregateAccumulators:
// an object of each present accumulator under its aggregate's name, names
// in byte order.
func (s windowEntrySerializer) appendAccs(dst []byte, accs []aggAccumulator) ([]byte, error) {
	dst = append(dst, '{')
	first := true
	for _, i := range s.sorted {
		if i >= len(accs) || accs[i].Fn == "" {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		var err error
		if dst, err = appendAccumulatorJSON(append(append(dst, s.quoted[i]...), ':'), accs[i]); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// appendAccumulatorJSON appends the bytes json.Marshal writes for a (the
// stored form of an accumulator), or fails as it fails. The usual
// accumulator (a function name of plain letters, an integer number, a
// first or last value without spaces, HTML characters or non-ASCII bytes,
// no Seen list) is written directly: json.Marshal's reflection and its
// boxing of the value were most of a checkpoint's cost for q17. Any
// other goes through json.Marshal (TestAppendAccumulatorJSON compares
// them). A value is valid JSON (EncodeJSON's or decoded from the state),
// which json.Marshal checks and this does not.
func appendAccumulatorJSON(dst []byte, a aggAccumulator) ([]byte, error) {
	if !plainAccumulator(a) {
		b, err := json.Marshal(a)
		if err != nil {
			return dst, fmt.Errorf("state: json encode: %w", err)
		}
		return append(dst, b...), nil
	}
	dst = append(append(append(dst, `{"fn":"`...), a.Fn...), `","records":`...)
	dst = strconv.AppendInt(dst, a.Records, 10)
	if a.Distinct != 0 {
		dst = strconv.AppendInt(append(dst, `,"distinct":`...), a.Distinct, 10)
	}
	if a.Num.Int != 0 {
		dst = append(strconv.AppendInt(append(dst, `,"num":{"int":`...), a.Num.Int, 10), '}')
	}
	if len(a.Value) > 0 {
		dst = append(append(dst, `,"value":`...), a.Value...)
	}
	return append(dst, '}'), nil
}

// plainAccumulator reports whether appendAccumulatorJSON writes a
// directly: json.Marshal would write Fn as it is, Num as {"int":n} (or
// nothing for a zero), Value as it is (compact, nothing to escape), and
// no Seen.
func plainAccumulator(a aggAccumulator) bool {
	if a.Num.Big != nil || a.Num.IsFloat || math.Float64bits(a.Num.Float) != 0 || len(a.Seen) > 0 || a.Fn == "" {
		return false
	}
	for _, c := range []byte(a.Fn) {
		if (c < 'a' || c > 'z') && c != '_' {
			return false
		}
	}
	for _, c := range a.Value {
		switch {
		case c >= 0x80, c <= ' ', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// accsOf returns the accumulators of m in the order of the aggregates,
// dropping those of names the operator no longer has (nil stays nil).
func (s windowEntrySerializer) accsOf(m aggregateAccumulators) []aggAccumulator {
	if m == nil {
		return nil
	}
	accs := make([]aggAccumulator, len(s.names))
	for name, a := range m {
		if i, ok := s.index[name]; ok {
			accs[i] = a
		}
	}
	return accs
}

// Decode implements state.Serializer: the stored form, its accumulators
// put in the order of the aggregates.
func (s windowEntrySerializer) Decode(b []byte) (windowEntry, error) {
	j, err := state.JSONSerializer[windowEntryJSON]{}.Decode(b)
	if err != nil {
		return windowEntry{}, err
	}
	return windowEntry{End: j.End, Fired: j.Fired, Accs: s.accsOf(j.Acc)}, nil
}

// Copy implements state.HeapSerializer: a deep copy of v, or the error
// Append would return (a double accumulator that is not finite, which
// JSON cannot hold).
func (s windowEntrySerializer) Copy(v windowEntry, _ []windowEntry) (windowEntry, error) {
	for i, a := range v.Accs {
		if a.Num.IsFloat && (math.IsNaN(a.Num.Float) || math.IsInf(a.Num.Float, 0)) {
			name := ""
			if i < len(s.names) {
				name = s.names[i]
			}
			return windowEntry{}, fmt.Errorf("state: json encode: json: unsupported value: %v (aggregate %s)", a.Num.Float, name)
		}
	}
	return copyWindowEntry(v), nil
}

// AppendKept implements state.HeapSerializer: Append.
func (s windowEntrySerializer) AppendKept(dst []byte, v windowEntry) ([]byte, error) {
	return s.Append(dst, v)
}

// View implements state.HeapSerializer: a deep copy, which the caller may
// change.
func (windowEntrySerializer) View(v windowEntry) windowEntry { return copyWindowEntry(v) }

// Size implements state.HeapSerializer: an estimate of v's bytes.
func (windowEntrySerializer) Size(v windowEntry) int {
	n := 64
	for _, a := range v.Accs {
		n += accumulatorSize(a)
	}
	return n
}

// copyWindowEntry returns a copy of e sharing no memory anyone changes
// (the Seen values are strings; a Big is copied; a nil Accs stays nil, an
// empty one empty, as a JSON round trip keeps them; a first or last value
// is copied too), so a caller changing a value in place changes no copy.
func copyWindowEntry(e windowEntry) windowEntry {
	if e.Accs == nil {
		return e
	}
	accs := make([]aggAccumulator, len(e.Accs))
	for i, a := range e.Accs {
		accs[i] = copyAccumulator(a)
	}
	e.Accs = accs
	return e
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
// result at once (a second result for that window). A record all of whose
// windows are past their lateness is late (Flink's isWindowLate); for
// session windows this is judged on the session the record merges into or
// creates (Flink's MergingWindowSet), so a record that extends a live
// session is never late. A late record goes unchanged to the side output
// LateOutput, or, when no vertex reads that, is counted and logged
// (lateRecords): none vanishes. Session windows of a key that overlap
// merge, and so do their accumulators.
//
// Bad records (*runtime.RecordError, so the source's on_error policy
// applies): a record on which an of fails (eval_error; every of is
// evaluated before state changes), and a record whose window bounds, or a
// window end plus allowed_lateness, fall outside int64 milliseconds
// (event_time_out_of_range).
//
// Event-time sliding windows of mergeable functions (slicable) keep one
// accumulator per key and slice of gcd(size, slide) instead of one per
// window (Flink's SliceAssigners.sliding, window_slice.go); count_distinct
// keeps its values in a counted map (window_distinct.go).
//
// Metrics (when Metrics is set): kstreamd_window_fired_total,
// kstreamd_window_open_windows (sliced: the slices held) and the
// late-record counters of lateRecords.
type Window struct {
	aggregator
	// Metrics, if not nil, receives the window and late-record metrics;
	// set before Open.
	Metrics *Metrics
	// Logger reports dropped late records (rate-limited); nil: discarded.
	Logger *slog.Logger

	p       WindowParams
	size    int64
	slide   int64
	gap     int64
	offset  int64
	late    int64
	early   int64
	timers  TimerService
	desc    state.MapStateDescriptor[int64, windowEntry]
	windows state.MapState[int64, windowEntry]
	// seen is the counted map of the count_distinct aggregates' values
	// (WindowDistinctStateName); nil without count_distinct.
	seen state.MapState[string, []byte]
	// sliced says the windows are computed from slices of g ms
	// (slicable); slices holds them, and legacy counts the subtask's
	// windows restored from the per-window layout, still open.
	sliced bool
	g      int64
	slices state.MapState[int64, windowEntry]
	legacy int64
	keyBuf []byte // distinctKey's scratch

	// now is the clock that rate-limits the late-record log; nil: the
	// timer service's processing time.
	now      func() time.Time
	lateRecs *lateRecords
	// sessions is, for session windows, every key's session windows
	// [start, end) in start order: an index of the window state in memory,
	// rebuilt from the state in Open and changed with it, so that a record
	// and a timer read only the key's sessions they concern instead of
	// scanning the key's entries in the backend (on Pebble a flush of the
	// write cache, an iterator over the key's removed sessions' tombstones
	// and a JSON decode per session, per record).
	sessions  map[string][][2]int64
	fired     prometheus.Counter // nil without Metrics
	openGauge prometheus.Gauge   // nil without Metrics
	open      int64              // windows held by the subtask
}

// NewWindow returns the window function of params p (checked by
// CheckParams).
func NewWindow(p WindowParams) *Window {
	return &Window{
		aggregator: newAggregator(AggregateParams{Aggregates: p.Aggregates, Emit: EmitEveryUpdate}, false),
		p:          p, size: p.Size.Milliseconds(), slide: p.Slide.Milliseconds(), gap: p.Gap.Milliseconds(),
		offset: p.Offset.Milliseconds(), late: p.AllowedLateness.Milliseconds(), early: p.EarlyFiring.Milliseconds(),
		desc: windowStateOf(p.Aggregates), sliced: slicable(p), g: gcd(p.Size.Milliseconds(), max(p.Slide.Milliseconds(), 1)),
	}
}

// Open implements KeyedProcessFunction. It counts the windows restored
// into the subtask's key groups for the open-windows gauge.
func (w *Window) Open(ctx OpenContext) error {
	w.timers = ctx.TimerService()
	if w.timers == nil {
		return fmt.Errorf("operators: %s %s: no timer service", WindowType, ctx.Operator)
	}
	m, err := state.GetMapState(ctx.Backend, w.desc)
	if err != nil {
		return fmt.Errorf("operators: %s %s: %w", WindowType, ctx.Operator, err)
	}
	w.windows = m
	w.seen = nil
	if len(w.distinct) > 0 {
		if w.seen, err = state.GetMapState(ctx.Backend, windowDistinctState()); err != nil {
			return fmt.Errorf("operators: %s %s: %w", WindowType, ctx.Operator, err)
		}
	}
	if w.now == nil {
		w.now = w.timers.CurrentProcessingTime
	}
	w.lateRecs = newLateRecords(ctx.Operator, LateOutput, w.Metrics, w.Logger, w.now)
	if w.Metrics != nil {
		w.fired = w.Metrics.WindowsFired(ctx.Operator)
		w.openGauge = w.Metrics.WindowsOpen(ctx.Operator, ctx.Subtask)
	}
	w.open, w.legacy = 0, 0
	if w.sliced {
		if w.slices, err = state.GetMapState(ctx.Backend, windowSliceStateOf(w.specs)); err != nil {
			return fmt.Errorf("operators: %s %s: %w", WindowType, ctx.Operator, err)
		}
		if err := state.ApplyToAllKeys(ctx.Backend, windowSliceStateOf(w.specs), func(_ []byte, s state.MapState[int64, windowEntry]) error {
			for _, err := range s.Keys() {
				if err != nil {
					return err
				}
				w.open++
			}
			return nil
		}); err != nil {
			return fmt.Errorf("operators: %s %s: counting restored slices: %w", WindowType, ctx.Operator, err)
		}
	}
	w.sessions = nil
	if w.p.Kind == Session {
		w.sessions = map[string][][2]int64{}
	}
	err = state.ApplyToAllKeys(ctx.Backend, w.desc, func(key []byte, s state.MapState[int64, windowEntry]) error {
		if w.sessions != nil {
			for e, err := range s.Entries() {
				if err != nil {
					return err
				}
				w.open++
				w.indexPut(key, e.Key, e.Value.End)
			}
			return nil
		}
		for _, err := range s.Keys() {
			if err != nil {
				return err
			}
			w.open++
			if w.sliced {
				w.legacy++
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("operators: %s %s: counting restored windows: %w", WindowType, ctx.Operator, err)
	}
	w.addOpen(0)
	return nil
}

// addOpen changes the count of windows held by delta.
func (w *Window) addOpen(delta int64) {
	w.open += delta
	if w.openGauge != nil {
		w.openGauge.Set(float64(w.open))
	}
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

// addInt64 returns a+b and whether it did not overflow.
func addInt64(a, b int64) (int64, bool) {
	s := a + b
	return s, (s > a) == (b > 0)
}

// subInt64 returns a-b and whether it did not overflow.
func subInt64(a, b int64) (int64, bool) {
	d := a - b
	return d, (d < a) == (b > 0)
}

// windowStart returns the start of the window of length size, aligned to
// offset, that holds t: t - ((t - offset) mod size) with a non-negative
// mod (Flink's TimeWindow.getWindowStartWithOffset), computed without
// overflowing; false when the start is below math.MinInt64. 0 < size and
// |offset| < size.
func windowStart(t, offset, size int64) (int64, bool) {
	r := (t%size - offset%size) % size
	if r < 0 {
		r += size
	}
	return subInt64(t, r)
}

// assign returns the windows [start, end) of a record at t (ms), and false
// when a bound is outside int64 milliseconds.
func (w *Window) assign(t int64) ([][2]int64, bool) {
	switch w.p.Kind {
	case Tumbling:
		s, ok := windowStart(t, w.offset, w.size)
		if !ok {
			return nil, false
		}
		e, ok := addInt64(s, w.size)
		return [][2]int64{{s, e}}, ok
	case Sliding:
		s, ok := windowStart(t, w.offset, w.slide)
		if !ok {
			return nil, false
		}
		var out [][2]int64
		for { // s <= t < s+size, t-s < size: no overflow below
			e, ok := addInt64(s, w.size)
			if !ok {
				return nil, false
			}
			out = append(out, [2]int64{s, e})
			if t-s+w.slide >= w.size {
				return out, true
			}
			if s, ok = subInt64(s, w.slide); !ok {
				return nil, false
			}
		}
	}
	e, ok := addInt64(t, w.gap)
	return [][2]int64{{t, e}}, ok
}

// outOfRange is the bad-record error of a record at t whose windows do not
// fit in int64 milliseconds.
func (w *Window) outOfRange(t int64) error {
	return &runtime.RecordError{Reason: runtime.ReasonEventTimeOutOfRange, Detail: fmt.Sprintf(
		"event time %d ms: its %s window (or the window end plus allowed_lateness %v) is outside int64 milliseconds",
		t, w.p.Kind, w.p.AllowedLateness)}
}

// isLate reports whether window [start, end) is past its allowed lateness
// at watermark wm (Flink's WindowOperator.isWindowLate: event time and
// end-1+lateness <= wm). end-1+lateness does not overflow (assign's
// callers check it).
func (w *Window) isLate(end, wm int64) bool {
	return w.eventTime() && end-1+w.late <= wm
}

// ProcessElement implements KeyedProcessFunction.
func (w *Window) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	t := rec.Timestamp.UnixMilli()
	wm := w.timers.CurrentWatermark().UnixMilli()
	if !w.eventTime() {
		t = w.timers.CurrentProcessingTime().UnixMilli()
	}
	wins, ok := w.assign(t)
	if !ok {
		return w.outOfRange(t)
	}
	if w.eventTime() {
		for _, win := range wins {
			if _, ok := addInt64(win[1]-1, w.late); !ok {
				return w.outOfRange(t)
			}
		}
	}
	if w.p.Kind == Session {
		return w.addSession(rec, wins[0], wm, out)
	}
	var live [][2]int64
	for _, win := range wins {
		if !w.isLate(win[1], wm) {
			live = append(live, win)
		}
	}
	if len(live) == 0 {
		return w.lateRecs.handle(rec, time.UnixMilli(wm), out)
	}
	in, err := w.inputs(&rec)
	if err != nil {
		return err
	}
	if w.sliced {
		return w.addSliced(rec, t, live, in, wm, out)
	}
	for _, win := range live {
		e, found, err := w.windows.Get(win[0])
		if err != nil {
			return err
		}
		if !found {
			e = windowEntry{End: win[1]}
			w.addOpen(1)
		}
		if err := w.add(rec.Key, win[0], e, !found, in, wm, out); err != nil {
			return err
		}
	}
	return nil
}

// addSession merges the session window win of rec with every window of
// the key that overlaps it (Flink's MergingWindowSet.addWindow), judges
// the merged session late or not (isLate: a record that extends a live
// session is not late, whatever its own window), then folds the record in
// and stores the result.
func (w *Window) addSession(rec runtime.Record, win [2]int64, wm int64, out Collector) error {
	type part struct {
		start int64
		e     windowEntry
	}
	var parts []part
	start, end := win[0], win[1]
	for _, sp := range w.sessions[string(rec.Key)] {
		// Flink's TimeWindow.intersects: sessions that only touch
		// ([a, t) and [t, b)) merge too.
		if sp[0] <= win[1] && sp[1] >= win[0] {
			e, err := w.session(sp[0])
			if err != nil {
				return err
			}
			parts = append(parts, part{sp[0], e})
			start, end = min(start, sp[0]), max(end, sp[1])
		}
	}
	if w.isLate(end, wm) {
		return w.lateRecs.handle(rec, time.UnixMilli(wm), out)
	}
	in, err := w.inputs(&rec)
	if err != nil {
		return err
	}
	merged := windowEntry{End: end} // parts are in start order, as the index
	var from []int64
	for _, p := range parts {
		if err := w.windows.Remove(p.start); err != nil {
			return err
		}
		if w.seen != nil {
			if err := w.migrateSeen(p.start, p.e.Accs); err != nil {
				return err
			}
			from = append(from, p.start)
		}
		w.indexRemove(rec.Key, p.start)
		if merged.Accs == nil {
			merged.Accs = p.e.Accs
		} else {
			merged.Accs = w.mergeAccs(merged.Accs, p.e.Accs)
		}
		// The record fell inside a session that already fired: the same
		// window, updated (a merge that changes the bounds is a new
		// window that fires on its own).
		if p.start == start && p.e.End == end && p.e.Fired {
			merged.Fired = true
		}
	}
	if slices.ContainsFunc(from, func(s int64) bool { return s != start }) {
		if err := w.mergeDistinct(start, from, merged.Accs); err != nil {
			return err
		}
	}
	w.addOpen(1 - int64(len(parts)))
	w.indexPut(rec.Key, start, end)
	// A record inside one session leaves its bounds, and so its timers, as
	// they were.
	same := len(parts) == 1 && parts[0].start == start && parts[0].e.End == end
	return w.add(rec.Key, start, merged, !same, in, wm, out)
}

// session returns the stored session window starting at start of the
// current key, which the index says exists.
func (w *Window) session(start int64) (windowEntry, error) {
	e, found, err := w.windows.Get(start)
	if err == nil && !found {
		err = fmt.Errorf("operators: %s: session window at %d ms is in the index but not in the state", WindowType, start)
	}
	return e, err
}

// indexPut records session [start, end) of key in w.sessions (replacing
// one at the same start); a no-op for other kinds.
func (w *Window) indexPut(key []byte, start, end int64) {
	if w.sessions == nil {
		return
	}
	spans := w.sessions[string(key)]
	i, found := slices.BinarySearchFunc(spans, start, func(sp [2]int64, t int64) int { return cmp.Compare(sp[0], t) })
	if found {
		spans[i][1] = end
		return
	}
	w.sessions[string(key)] = slices.Insert(spans, i, [2]int64{start, end})
}

// indexRemove drops the session of key starting at start from
// w.sessions; a no-op for other kinds.
func (w *Window) indexRemove(key []byte, start int64) {
	if w.sessions == nil {
		return
	}
	spans := w.sessions[string(key)]
	i, found := slices.BinarySearchFunc(spans, start, func(sp [2]int64, t int64) int { return cmp.Compare(sp[0], t) })
	if !found {
		return
	}
	if spans = slices.Delete(spans, i, i+1); len(spans) == 0 {
		delete(w.sessions, string(key))
	} else {
		w.sessions[string(key)] = spans
	}
}

// add folds in into window e starting at start, stores it, registers its
// timers when created is set (a new window, or a session whose bounds
// a merge may have changed; a stored window's timers are registered, and
// restored with it) and, for a window whose end the watermark already
// passed (a late record within the lateness, or a session merge inside
// it), emits its updated result.
func (w *Window) add(key []byte, start int64, e windowEntry, created bool, in []aggInput, wm int64, out Collector) error {
	var isNew []bool
	if len(w.distinct) > 0 {
		isNew = make([]bool, len(w.distinct))
	}
	if w.seen != nil && e.Accs != nil {
		if err := w.migrateSeen(start, e.Accs); err != nil {
			return err
		}
	}
	for j, i := range w.distinct {
		var err error
		if isNew[j], err = w.countDistinct(start, i, in[i].raw); err != nil {
			return err
		}
	}
	first := e.Accs == nil
	if first {
		e.Accs = make([]aggAccumulator, len(w.specs))
	}
	// e is the caller's own copy (state.HeapSerializer.View or a decode):
	// its accumulators are folded in place.
	d := 0
	for i := range w.specs {
		e.Accs[i] = w.foldOne(i, accAt(e.Accs, i), in[i], isNew, &d)
	}
	maxTs := e.End - 1
	// A window the watermark already passed (a late record within the
	// lateness) fires at once with its updated result (Flink's
	// EventTimeTrigger.onElement).
	emitNow := w.eventTime() && maxTs <= wm
	if emitNow {
		if !e.Fired && w.fired != nil {
			w.fired.Inc()
		}
		e.Fired = true
	}
	if err := w.windows.Put(start, e); err != nil {
		return err
	}
	switch {
	case !created: // its timers are registered (and restored with it)
	case w.eventTime():
		if err := w.timers.RegisterEventTimeTimer(time.UnixMilli(maxTs)); err != nil {
			return err
		}
		if w.late > 0 {
			if err := w.timers.RegisterEventTimeTimer(time.UnixMilli(maxTs + w.late)); err != nil {
				return err
			}
		}
	default:
		if err := w.timers.RegisterProcessingTimeTimer(time.UnixMilli(maxTs)); err != nil {
			return err
		}
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
	if w.sliced && tc.Domain == EventTime {
		return w.closeSliced(tc.Key, ts.UnixMilli(), now, out)
	}
	if w.p.Kind != Session && (tc.Domain == EventTime || (!w.eventTime() && w.early == 0)) {
		return w.closeDue(tc.Key, ts.UnixMilli(), now, out)
	}
	type win struct {
		start int64
		e     windowEntry
	}
	var wins []win
	if w.sessions != nil {
		for _, sp := range w.sessions[string(tc.Key)] {
			e, err := w.session(sp[0])
			if err != nil {
				return err
			}
			wins = append(wins, win{sp[0], e})
		}
	} else {
		for e, err := range w.windows.Entries() {
			if err != nil {
				return err
			}
			wins = append(wins, win{e.Key, e.Value})
		}
		slices.SortFunc(wins, func(a, b win) int { return cmp.Compare(a.start, b.start) })
	}
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
			if w.fired != nil {
				w.fired.Inc()
			}
		}
		lateness := w.late
		if !w.eventTime() {
			lateness = 0
		}
		if maxTs+lateness <= now {
			if err := w.windows.Remove(x.start); err != nil {
				return err
			}
			if err := w.dropDistinct(x.start); err != nil {
				return err
			}
			w.indexRemove(tc.Key, x.start)
			w.addOpen(-1)
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

// closeDue handles the closing timer at ts of a tumbling or sliding window
// without scanning the key's windows: the timer is the end - 1ms of the
// window starting at ts + 1ms - size (it fires) and, with allowed
// lateness, the end - 1ms + lateness of the one starting lateness earlier
// (it is removed); every window registers both its timers (add), so each
// window is reached by its own. The windows are the ones the scan in
// OnTimer would close; only the order across keys and timers differs when
// one watermark passes several windows of a key (each window's result is
// emitted at its own timer, as in Flink's WindowOperator).
func (w *Window) closeDue(key []byte, ts, now int64, out Collector) error {
	lateness := w.late
	if !w.eventTime() {
		lateness = 0
	}
	if lateness > 0 {
		if err := w.closeAt(key, ts+1-w.size-lateness, now, lateness, out); err != nil {
			return err
		}
	}
	return w.closeAt(key, ts+1-w.size, now, lateness, out)
}

// closeAt fires the window starting at start if it exists, is due (its
// end - 1ms at or before now) and has not fired, and removes it once it is
// past its lateness; a window kept for its lateness is stored fired.
func (w *Window) closeAt(key []byte, start, now, lateness int64, out Collector) error {
	e, found, err := w.windows.Get(start)
	if err != nil || !found {
		return err
	}
	maxTs := e.End - 1
	if maxTs > now {
		return nil
	}
	changed := false
	if !e.Fired {
		if err := out.Collect(w.result(key, start, e)); err != nil {
			return err
		}
		e.Fired, changed = true, true
		if w.fired != nil {
			w.fired.Inc()
		}
	}
	if maxTs+lateness <= now {
		if err := w.windows.Remove(start); err != nil {
			return err
		}
		w.addOpen(-1)
		if w.sliced {
			w.legacy--
		}
		return w.dropDistinct(start)
	}
	if changed {
		return w.windows.Put(start, e)
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
	for i := range w.specs {
		b = w.appendResult(b, i, accAt(e.Accs, i))
	}
	b = append(b, '}')
	return runtime.Record{Key: key, Value: b, Timestamp: time.UnixMilli(e.End - 1)}
}

// accAt returns accs[i], or a zero (absent) accumulator when accs is
// shorter.
func accAt(accs []aggAccumulator, i int) aggAccumulator {
	if i < len(accs) {
		return accs[i]
	}
	return aggAccumulator{}
}

// mergeAccs returns the accumulators of the union of two windows' records,
// in the order of the aggregates (aggregator.merge).
func (w *Window) mergeAccs(earlier, later []aggAccumulator) []aggAccumulator {
	out := make([]aggAccumulator, len(w.specs))
	for i, s := range w.specs {
		out[i] = mergeAccumulators(s.Fn, accAt(earlier, i), accAt(later, i))
	}
	return out
}
