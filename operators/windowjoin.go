package operators

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// WindowJoinType is the pipeline name of the window join operator.
const WindowJoinType = "window_join"

// The window join's keyed state: per key and side, window start (ms) to
// the rows of that side in the window, in arrival order. Part of the
// checkpoint format.
//
// WindowJoinLeftRowsState and WindowJoinRightRowsState hold them as
// appended lists (windowRowsSerializer, "window-join-rows-v1"): a record
// adds its row with state.MapAppender.AppendValue, never reading the
// window's rows (on Pebble a merge), and the window's timer reads them
// once. WindowJoinLeftState and WindowJoinRightState are the layout of
// before (a list rewritten per record, joinRowsSerializer): a checkpoint
// holding them is moved to the new states when the join opens
// (TestWindowJoinRestoresListLayout). Checkpoints written with the new
// states do not restore into binaries from before them.
const (
	WindowJoinLeftState      = "window_join.left"
	WindowJoinRightState     = "window_join.right"
	WindowJoinLeftRowsState  = "window_join.left_rows"
	WindowJoinRightRowsState = "window_join.right_rows"
)

// windowRowsSerializer encodes a window's rows of a side with no count,
// so that the encoding of two lists concatenated is the concatenation of
// theirs (state.ConcatSerializer): per row a flags byte (2 text, 4 nil
// value, 8 value not kept: noValue), a uvarint length and the value's
// bytes. Name "window-join-rows-v1"; flag 8 is newer than the name (a
// binary from before it refuses such rows as malformed rather than read
// them as null). Decoded values share one copy of the bytes.
type windowRowsSerializer struct{}

// noValue is the value of a row buffered without its value (a side
// select does not read: WindowJoin.setKeepValue), told apart from a
// record's null value by its identity (isNoValue).
var noValue = make([]byte, 0, 1)

// errRowsWithoutValues is the error of a window whose rows were buffered
// without their values while the job's select now reads them.
var errRowsWithoutValues = errors.New("operators: window_join rows without values")

// isNoValue reports whether v is noValue.
func isNoValue(v []byte) bool {
	return len(v) == 0 && cap(v) == 1 && unsafe.SliceData(v) == unsafe.SliceData(noValue)
}

func (windowRowsSerializer) Name() string { return "window-join-rows-v1" }

// Concatenates implements state.ConcatSerializer.
func (windowRowsSerializer) Concatenates() {}

func (windowRowsSerializer) Append(dst []byte, rows []joinRow) ([]byte, error) {
	for _, r := range rows {
		var f byte
		if r.Text {
			f |= 2
		}
		switch {
		case isNoValue(r.Value):
			f |= 8
		case r.Value == nil:
			f |= 4
		}
		dst = append(dst, f)
		dst = binary.AppendUvarint(dst, uint64(len(r.Value)))
		dst = append(dst, r.Value...)
	}
	return dst, nil
}

func (windowRowsSerializer) Decode(b []byte) ([]joinRow, error) {
	b = append([]byte(nil), b...) // one copy for every value (the caller may reuse b)
	var rows []joinRow
	for len(b) > 0 {
		f := b[0]
		l, k := binary.Uvarint(b[1:])
		if k <= 0 || f&^14 != 0 || f&12 == 12 || (f&8 != 0 && l != 0) || l > uint64(len(b)-1-k) {
			return nil, errJoinRows
		}
		b = b[1+k:]
		r := joinRow{Text: f&2 != 0}
		switch {
		case f&8 != 0:
			r.Value = noValue
		case f&4 == 0:
			r.Value = b[:l:l]
		}
		b = b[l:]
		rows = append(rows, r)
	}
	return rows, nil
}

// windowRowsState returns the descriptor of a side's rows by window start
// in the appended layout.
func windowRowsState(name string) state.MapStateDescriptor[int64, []joinRow] {
	return state.MapStateDescriptor[int64, []joinRow]{Name: name, KeySerializer: state.Int64Serializer{}, ValueSerializer: windowRowsSerializer{}}
}

// WindowJoinParams are the params of window_join:
//
//	params:
//	  kind: tumbling    # or sliding (with slide)
//	  size: 10s
//	  join: inner       # inner (default), left, right or full
//	  dedup: right      # optional: none (default), left, right or both
//	  select: '{"person": left.id, "auction": right.id, "start": window_start}'
type WindowJoinParams struct {
	Kind   WindowKind      `yaml:"kind" doc:"tumbling or sliding; required."`
	Size   time.Duration   `yaml:"size" doc:"The window length, e.g. 10s; required; whole milliseconds."`
	Slide  time.Duration   `yaml:"slide" doc:"How often a sliding window starts; required for sliding, at most size."`
	Offset time.Duration   `yaml:"offset" doc:"Windows start at the epoch plus offset plus a multiple of size (sliding: of slide), as the window operator's offset; default 0; |offset| less than size (sliding: slide)."`
	Join   JoinKind        `yaml:"join" doc:"inner (default: the pairs of left and right records of a key in one window), left, right or full (also each record of that side, or of both, that has no partner in a window, with the other side null)."`
	Dedup  WindowJoinDedup `yaml:"dedup" doc:"none (default), left, right or both: that side keeps only its first record in arrival order per key and window, as a GROUP BY of the join key and the window on that side (Nexmark q8's auctions per seller and window); its later records of a key and window are dropped (not late, not buffered). Flink's window deduplication keeping the first row keeps the row of the smallest time instead: another row only when the side's records of a key arrive out of time order, the same output when select reads no field of the side."`
	Select Expression      `yaml:"select" doc:"An expression over left and right (each a record's value, null for the missing side of an outer row), window_start and window_end (RFC 3339 strings), key and timestamp, whose result, as JSON, is the output value; default {\"left\": left, \"right\": right, \"window_start\": ..., \"window_end\": ...}."`
}

// WindowJoinDedup is the dedup param of window_join: the sides that keep
// only their first record per key and window.
type WindowJoinDedup string

// The values of WindowJoinDedup.
const (
	// WindowJoinDedupNone keeps every record of both sides. The default.
	WindowJoinDedupNone WindowJoinDedup = "none"
	// WindowJoinDedupLeft keeps the first left record per key and window.
	WindowJoinDedupLeft WindowJoinDedup = "left"
	// WindowJoinDedupRight keeps the first right record per key and window.
	WindowJoinDedupRight WindowJoinDedup = "right"
	// WindowJoinDedupBoth keeps the first record of each side per key and
	// window.
	WindowJoinDedupBoth WindowJoinDedup = "both"
)

// UnmarshalText implements encoding.TextUnmarshaler, refusing an unknown
// value.
func (d *WindowJoinDedup) UnmarshalText(text []byte) error {
	return setEnum(d, text, WindowJoinDedupNone, WindowJoinDedupLeft, WindowJoinDedupRight, WindowJoinDedupBoth)
}

// keepsFirst reports whether side (0 left, 1 right) keeps only its first
// record per key and window.
func (d WindowJoinDedup) keepsFirst(side int) bool {
	return d == WindowJoinDedupBoth || (side == 0 && d == WindowJoinDedupLeft) || (side == 1 && d == WindowJoinDedupRight)
}

// CheckParams implements ParamsChecker.
func (p *WindowJoinParams) CheckParams(report func(field, msg string)) {
	durations := []struct {
		name string
		d    time.Duration
	}{{"size", p.Size}, {"slide", p.Slide}, {"offset", p.Offset}}
	for _, f := range durations {
		if f.d%time.Millisecond != 0 {
			report(f.name, fmt.Sprintf("must be a whole number of milliseconds (event times are in ms), got %v", f.d))
		}
	}
	switch p.Kind {
	case "":
		report("kind", "required: tumbling or sliding")
		return
	case Session:
		report("kind", "session windows do not apply to window_join; want tumbling or sliding")
		return
	}
	if p.Size < time.Millisecond {
		report("size", fmt.Sprintf("required, at least 1ms (a duration such as 10s), got %v", p.Size))
		return
	}
	step := p.Size
	switch {
	case p.Kind == Tumbling && p.Slide != 0:
		report("slide", "does not apply to kind tumbling")
	case p.Kind == Sliding && p.Slide < time.Millisecond:
		report("slide", fmt.Sprintf("required for kind sliding, at least 1ms, got %v", p.Slide))
		return
	case p.Kind == Sliding && p.Slide > p.Size:
		report("slide", fmt.Sprintf("must be at most size %v, got %v", p.Size, p.Slide))
	case p.Kind == Sliding:
		step = p.Slide
	}
	if p.Offset.Abs() >= step {
		report("offset", fmt.Sprintf("|offset| must be less than %v, got %v", step, p.Offset))
	}
}

// windowJoinFactory registers WindowJoinType.
func windowJoinFactory() Factory {
	return Factory{
		Type:        WindowJoinType,
		Doc:         "Joins the left and right records of equal keys in the same tumbling or sliding event-time window (Flink's window join, Nexmark q8); inner, left, right or full outer; each window's rows emitted as select(left, right) when the watermark passes its end, then removed; late records to <operator>.late.",
		Traits:      Traits{Keyed: true, Inputs: [2]string{JoinLeft, JoinRight}, EventTime: true},
		Params:      func() any { return &WindowJoinParams{Join: JoinInner, Dedup: WindowJoinDedupNone} },
		State:       []string{WindowJoinLeftRowsState, WindowJoinRightRowsState, state.TimersStateName},
		SideOutputs: []string{LateOutput},
		New: func(ctx FactoryContext) (any, error) {
			p, ok := ctx.Params.(*WindowJoinParams)
			if !ok {
				return nil, fmt.Errorf("operators: %s: params %T, want *WindowJoinParams", WindowJoinType, ctx.Params)
			}
			j := NewWindowJoin(*p)
			j.Metrics, j.Logger = ctx.Metrics, ctx.Logger
			return j, nil
		},
	}
}

// WindowJoin is the window_join function (Flink's window join,
// DataStream.join(...).where(...).equalTo(...).window(...), with the outer
// kinds of Flink SQL's window join): a KeyedCoProcessFunction whose first
// input is the left side. Each record is assigned to its tumbling or
// sliding windows (as the window operator assigns them) and buffered per
// key, side and window. When the watermark reaches a window's end - 1ms an
// event-time timer emits, at that time and keyed by the join key, one row
// per pair of a left and a right record of the window (left records in
// arrival order, each with every right record in arrival order), then,
// for the outer side(s) of the join kind, each record of the window
// without a partner with the other side null, and removes the window's
// rows. A record all of whose windows have ended (end - 1ms at or before
// the watermark) is late: it goes unchanged to LateOutput or is counted
// and logged (lateRecords); one with some windows still open joins those
// only. Select failing on a window's row fails the task (it runs on a
// timer).
//
// With Dedup, a side keeps only its first record per key and window (the
// window is assigned, as for every record, and its later records of that
// key are dropped): the GROUP BY of a window aggregation on the join key,
// without a dedup operator and its state in front of the join. It is
// Flink's window deduplication keeping the first row except that "first"
// is in arrival order, where Flink's orders by the time attribute (the
// row of the smallest time): they keep different rows only when a side's
// records of a key and window arrive out of time order, and give the
// same output when select reads no field of the side (q8).
//
// A side whose values select does not read (select's raw form reads no
// field of it: Nexmark q8's auctions) is kept without them: its rows hold
// no value (flags and length, 2 bytes), which select never sees. Such
// rows restored into a job whose select reads the side fail the job at
// their window's end (errRowsWithoutValues) rather than join as null.
//
// Metrics (when Metrics is set): kstreamd_join_buffered_rows (a record of a
// sliding window counts once per window) and the late-record counters.
type WindowJoin struct {
	// Metrics, if not nil, receives the join and late-record metrics; set
	// before Open.
	Metrics *Metrics
	// Logger reports dropped late records (rate-limited); nil: discarded.
	Logger *slog.Logger

	p        WindowJoinParams
	assigner *Window // assigns windows (tumbling, sliding)
	timers   TimerService
	sides    [2]state.MapState[int64, []joinRow]
	appends  [2]state.MapAppender[int64, []joinRow]
	// hints tell the sides' states that a window's rows are absent when
	// its timer is new (newTimer): on Pebble the window's rows then stay
	// in the write cache from the first append to the timer's read.
	hints    [2]state.MapAbsentHinter[int64]
	newTimer func(time.Time) (bool, error) // nil: the timer service cannot tell
	row      [1]joinRow                    // the record being added
	// keepValue says per side whether its rows keep their values: false
	// when select is set and its raw form reads no field of the side;
	// set by the first record (keepSet; setKeepValue).
	keepValue [2]bool
	keepSet   bool
	// wins is process's scratch window of a tumbling assignment.
	wins [1][2]int64
	// rowSer, if not nil, replaces windowRowsSerializer (a test's
	// counting serializer; it must be a state.ConcatSerializer).
	rowSer   state.Serializer[[]joinRow]
	output   joinOutput
	lateRecs *lateRecords
	gauge    prometheus.Gauge
	rows     int64
}

// NewWindowJoin returns the window join of params p (checked by
// CheckParams).
func NewWindowJoin(p WindowJoinParams) *WindowJoin {
	if p.Join == "" {
		p.Join = JoinInner
	}
	if p.Dedup == "" {
		p.Dedup = WindowJoinDedupNone
	}
	return &WindowJoin{p: p, output: joinOutput{sel: p.Select}, assigner: &Window{
		p: WindowParams{Kind: p.Kind}, size: p.Size.Milliseconds(), slide: p.Slide.Milliseconds(), offset: p.Offset.Milliseconds(),
	}}
}

// Open implements KeyedCoProcessFunction; it counts the restored rows.
func (j *WindowJoin) Open(ctx OpenContext) error {
	j.timers = ctx.TimerService()
	if j.timers == nil {
		return fmt.Errorf("operators: %s %s: no timer service", WindowJoinType, ctx.Operator)
	}
	j.rows = 0
	j.newTimer = nil
	if r, ok := j.timers.(newTimerRegisterer); ok {
		j.newTimer = r.registerNewEventTimeTimer
	}
	for i, name := range []string{WindowJoinLeftRowsState, WindowJoinRightRowsState} {
		d := windowRowsState(name)
		if j.rowSer != nil {
			d.ValueSerializer = j.rowSer
		}
		m, err := state.GetMapState(ctx.Backend, d)
		if err != nil {
			return fmt.Errorf("operators: %s %s: %w", WindowJoinType, ctx.Operator, err)
		}
		a, ok := m.(state.MapAppender[int64, []joinRow])
		if !ok {
			return fmt.Errorf("operators: %s %s: map state %T cannot append", WindowJoinType, ctx.Operator, m)
		}
		j.sides[i], j.appends[i] = m, a
		j.hints[i], _ = m.(state.MapAbsentHinter[int64])
		if err := j.migrate(ctx.Backend, i, []string{WindowJoinLeftState, WindowJoinRightState}[i]); err != nil {
			return fmt.Errorf("operators: %s %s: moving the rows of a checkpoint of the list layout: %w", WindowJoinType, ctx.Operator, err)
		}
		err = state.ApplyToAllKeys(ctx.Backend, d, func(_ []byte, s state.MapState[int64, []joinRow]) error {
			for rows, err := range s.Values() {
				if err != nil {
					return err
				}
				j.rows += int64(len(rows))
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("operators: %s %s: counting restored rows: %w", WindowJoinType, ctx.Operator, err)
		}
	}
	j.keepSet = false
	j.lateRecs = newLateRecords(ctx.Operator, LateOutput, j.Metrics, j.Logger, j.timers.CurrentProcessingTime)
	if j.Metrics != nil {
		j.gauge = j.Metrics.JoinRows(ctx.Operator, ctx.Subtask)
	}
	j.addRows(0)
	return nil
}

// migrate moves the rows of side in the list layout of before (state
// old, restored from a checkpoint written before the appended layout)
// into the appended layout, in their order, and clears them. Nothing to
// do when the backend holds no state old.
func (j *WindowJoin) migrate(b state.KeyedStateBackend, side int, old string) error {
	if !state.HasState(b, old) {
		return nil
	}
	d := joinSideState(old)
	if _, err := state.GetMapState(b, d); err != nil {
		return err
	}
	return state.ApplyToAllKeys(b, d, func(_ []byte, s state.MapState[int64, []joinRow]) error {
		for e, err := range s.Entries() {
			if err != nil {
				return err
			}
			if err := j.appends[side].AppendValue(e.Key, e.Value); err != nil {
				return err
			}
		}
		return s.Clear()
	})
}

func (j *WindowJoin) addRows(delta int64) {
	j.rows += delta
	if j.gauge != nil {
		j.gauge.Set(float64(j.rows))
	}
}

// BufferedRows returns the rows the subtask holds (a record once per
// window it is in).
func (j *WindowJoin) BufferedRows() int64 { return j.rows }

// ProcessElement1 implements KeyedCoProcessFunction: a left record.
func (j *WindowJoin) ProcessElement1(_ context.Context, rec runtime.Record, out Collector) error {
	return j.process(0, rec, out)
}

// ProcessElement2 implements KeyedCoProcessFunction: a right record.
func (j *WindowJoin) ProcessElement2(_ context.Context, rec runtime.Record, out Collector) error {
	return j.process(1, rec, out)
}

// process adds rec of side to each of its windows that has not ended
// (with Dedup, of those its side has no record of yet).
func (j *WindowJoin) process(side int, rec runtime.Record, out Collector) error {
	wm := j.timers.CurrentWatermark()
	if rec.Timestamp.IsZero() {
		return j.lateRecs.handle(rec, wm, out)
	}
	wins, ok := j.assign(rec.Timestamp.UnixMilli())
	if !ok {
		return j.assigner.outOfRange(rec.Timestamp.UnixMilli())
	}
	if !j.keepSet {
		j.setKeepValue()
	}
	if j.keepValue[side] {
		j.row[0] = joinRow{Value: rec.Value, Text: rec.Format == runtime.FormatText}
	} else {
		j.row[0] = joinRow{Value: noValue}
	}
	defer func() { j.row[0] = joinRow{} }()
	first := j.p.Dedup.keepsFirst(side)
	entered := false
	for _, w := range wins {
		last := w[1] - 1
		if wm != runtime.MinWatermark && last <= wm.UnixMilli() {
			continue
		}
		entered = true
		isNew, err := j.registerTimer(w[0], last)
		if err != nil {
			return err
		}
		if first && !isNew {
			// The window's timer was there: the side may hold a row.
			held, err := j.sides[side].Contains(w[0])
			if err != nil {
				return err
			}
			if held {
				continue
			}
		}
		if err := j.appends[side].AppendValue(w[0], j.row[:]); err != nil {
			return err
		}
		j.addRows(1)
	}
	if !entered {
		return j.lateRecs.handle(rec, wm, out)
	}
	return nil
}

// setKeepValue sets keepValue: a side keeps its values unless select's
// raw form reads no field of it. A raw form is a map literal whose values
// are fields of left or right and the join's own fields only, so select
// reads no other part of a side (tablejoin_raw.go, compileRawSelect).
// An output that never writes raw (joinOutput.noRaw: tests comparing the
// raw select with select evaluated) keeps both.
func (j *WindowJoin) setKeepValue() {
	j.keepValue, j.keepSet = [2]bool{true, true}, true
	if !j.p.Select.IsSet() || j.output.noRaw {
		return
	}
	if r := compileRawSelect(j.p.Select.Program().Source()); r != nil {
		j.keepValue = [2]bool{len(r.left) > 0, len(r.right) > 0}
	}
}

// assign returns the windows of time t (ms) as j.assigner assigns them, a
// tumbling window in j's scratch space (no allocation per record).
func (j *WindowJoin) assign(t int64) ([][2]int64, bool) {
	if j.assigner.p.Kind != Tumbling {
		return j.assigner.assign(t)
	}
	s, ok := windowStart(t, j.assigner.offset, j.assigner.size)
	if !ok {
		return nil, false
	}
	e, ok := addInt64(s, j.assigner.size)
	j.wins[0] = [2]int64{s, e}
	return j.wins[:], ok
}

// registerTimer registers the timer of the window starting at start (ms),
// which fires at last (ms), and reports whether it is new (false when the
// timer service cannot tell). A window's rows exist only while its timer
// is registered (the timer is registered with its first row and removes
// the rows when it fires; a record reaches no window whose timer has
// fired, and restores and rescales move rows and timers together), so
// when the timer is new neither side holds rows of the window, and the
// sides' states are told so (MapAbsentHinter).
func (j *WindowJoin) registerTimer(start, last int64) (bool, error) {
	if j.newTimer == nil {
		return false, j.timers.RegisterEventTimeTimer(time.UnixMilli(last))
	}
	isNew, err := j.newTimer(time.UnixMilli(last))
	if err != nil || !isNew {
		return false, err
	}
	for _, h := range j.hints {
		if h == nil {
			continue
		}
		if err := h.HintAbsent(start); err != nil {
			return false, err
		}
	}
	return true, nil
}

// OnTimer implements TimerFunction: the window ending at ts + 1ms emits
// its rows and is removed.
func (j *WindowJoin) OnTimer(_ context.Context, ts time.Time, tc TimerContext, out Collector) error {
	end := ts.UnixMilli() + 1
	start := end - j.assigner.size
	var rows [2][]joinRow
	for side := range 2 {
		r, _, err := j.sides[side].Get(start)
		if err != nil {
			return err
		}
		rows[side] = r
	}
	if !j.keepSet {
		j.setKeepValue()
	}
	for side := range 2 {
		if !j.keepValue[side] {
			continue
		}
		for i := range rows[side] {
			if isNoValue(rows[side][i].Value) {
				return fmt.Errorf("window_join: the %s rows of key %q and the window from %s were buffered without their values (select read no %s field when the checkpoint was taken) and select now reads them: restore from a checkpoint taken with this select, or run the earlier select until these windows have closed: %w",
					[2]string{"left", "right"}[side], tc.Key, time.UnixMilli(start).UTC().Format(time.RFC3339Nano), [2]string{"left", "right"}[side], errRowsWithoutValues)
			}
		}
	}
	var held [2]int
	for side := range 2 {
		held[side] = len(rows[side])
		if j.p.Dedup.keepsFirst(side) && len(rows[side]) > 1 {
			// Rows buffered before the dedup was set (a restored job):
			// the side's first row stands for the key and window.
			rows[side] = rows[side][:1]
		}
	}
	extra := fmt.Sprintf(`,"window_start":%q,"window_end":%q`,
		time.UnixMilli(start).UTC().Format(time.RFC3339Nano), time.UnixMilli(end).UTC().Format(time.RFC3339Nano))
	at := ts.UnixMilli()
	for i := range rows[0] {
		j.output.pin(&rows[0][i]) // decoded once for its pairs
		for k := range rows[1] {
			if err := j.output.emit(tc.Key, &rows[0][i], &rows[1][k], at, extra, out); err != nil {
				j.output.pin(nil)
				return err
			}
		}
	}
	j.output.pin(nil)
	if len(rows[1]) == 0 && j.p.Join.outer(0) {
		for i := range rows[0] {
			if err := j.output.emit(tc.Key, &rows[0][i], nil, at, extra, out); err != nil {
				return err
			}
		}
	}
	if len(rows[0]) == 0 && j.p.Join.outer(1) {
		for k := range rows[1] {
			if err := j.output.emit(tc.Key, nil, &rows[1][k], at, extra, out); err != nil {
				return err
			}
		}
	}
	for side := range 2 {
		if rows[side] == nil {
			continue
		}
		if err := j.sides[side].Remove(start); err != nil {
			return err
		}
		j.addRows(-int64(held[side]))
	}
	return nil
}
