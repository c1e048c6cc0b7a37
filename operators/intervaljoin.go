package operators

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// IntervalJoinType is the pipeline name of the interval join operator.
const IntervalJoinType = "interval_join"

// The join input roles (Traits.Inputs) and the interval join's keyed state
// names: a MapState per side, per key the side's buffered rows by event
// time (ms; the rows of one time in arrival order), as Flink's
// IntervalJoinOperator's MapState<Long, List<BufferEntry>>. The state names
// are part of the checkpoint format.
const (
	JoinLeft               = "left"
	JoinRight              = "right"
	IntervalJoinLeftState  = "interval_join.left_by_time"
	IntervalJoinRightState = "interval_join.right_by_time"
)

// The interval join's state names before the rows were kept by time (one
// ValueState per key and side holding every row, join-rows-v1): a restore
// of a checkpoint or savepoint of that layout moves them into the
// by-time states in Open.
const (
	intervalJoinLeftListState  = "interval_join.left"
	intervalJoinRightListState = "interval_join.right"
)

// JoinKind says which unmatched rows a join emits (Flink's FlinkJoinType).
type JoinKind string

// The join kinds.
const (
	// JoinInner emits only matched pairs.
	JoinInner JoinKind = "inner"
	// JoinLeftOuter also emits every left row that matched nothing, with
	// right null.
	JoinLeftOuter JoinKind = "left"
	// JoinRightOuter also emits every right row that matched nothing, with
	// left null.
	JoinRightOuter JoinKind = "right"
	// JoinFullOuter emits the unmatched rows of both sides.
	JoinFullOuter JoinKind = "full"
)

// UnmarshalText implements encoding.TextUnmarshaler, refusing an unknown
// kind.
func (k *JoinKind) UnmarshalText(text []byte) error {
	return setEnum(k, text, JoinInner, JoinLeftOuter, JoinRightOuter, JoinFullOuter)
}

// outer reports whether unmatched rows of side (0 left, 1 right) are
// emitted.
func (k JoinKind) outer(side int) bool {
	return k == JoinFullOuter || (side == 0 && k == JoinLeftOuter) || (side == 1 && k == JoinRightOuter)
}

// IntervalJoinParams are the params of interval_join:
//
//	params:
//	  lower: -5s     # right.ts >= left.ts + lower
//	  upper: 10s     # right.ts <= left.ts + upper
//	  join: left     # inner (default), left, right or full
//	  select: '{"order": left.id, "paid": right == null ? null : right.amount}'
type IntervalJoinParams struct {
	Lower  time.Duration `yaml:"lower" doc:"The interval's lower bound: a left record at time t joins the right records of its key at times from t + lower (may be negative, e.g. -5s); default 0; whole milliseconds."`
	Upper  time.Duration `yaml:"upper" doc:"The interval's upper bound: up to t + upper (inclusive); at least lower; default 0; whole milliseconds."`
	Join   JoinKind      `yaml:"join" doc:"inner (default: matched pairs only), left, right or full (also every row of that side, or of both, that matched nothing, with the other side null, emitted once the watermark passes the row's interval)."`
	Select Expression    `yaml:"select" doc:"An expression over left and right (each the record's value, null for the missing side of an outer row; key and timestamp are the join key and the output time), whose result, as JSON, is the output value, e.g. {\"id\": left.id, \"amount\": right.amount}; default {\"left\": left, \"right\": right}."`
}

// CheckParams implements ParamsChecker.
func (p *IntervalJoinParams) CheckParams(report func(field, msg string)) {
	if p.Lower > p.Upper {
		report("upper", fmt.Sprintf("must be at least lower %v, got %v", p.Lower, p.Upper))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"lower", p.Lower}, {"upper", p.Upper}} {
		if f.d%time.Millisecond != 0 {
			report(f.name, fmt.Sprintf("must be a whole number of milliseconds (event times are in ms), got %v", f.d))
		}
	}
}

// intervalJoinFactory registers IntervalJoinType.
func intervalJoinFactory() Factory {
	return Factory{
		Type:        IntervalJoinType,
		Doc:         "Joins the left and right records of equal keys whose event times satisfy left.ts + lower <= right.ts <= left.ts + upper (Flink's interval join); inner, left, right or full outer; output select(left, right) keyed by the join key; state bounded by the interval and removed by the watermark; late records to \\<operator>.late.",
		Traits:      Traits{Keyed: true, Inputs: [2]string{JoinLeft, JoinRight}, EventTime: true},
		Params:      func() any { return &IntervalJoinParams{Join: JoinInner} },
		State:       []string{IntervalJoinLeftState, IntervalJoinRightState, state.TimersStateName},
		SideOutputs: []string{LateOutput},
		New: func(ctx FactoryContext) (any, error) {
			p, ok := ctx.Params.(*IntervalJoinParams)
			if !ok {
				return nil, fmt.Errorf("operators: %s: params %T, want *IntervalJoinParams", IntervalJoinType, ctx.Params)
			}
			j := NewIntervalJoin(*p)
			j.Metrics, j.Logger = ctx.Metrics, ctx.Logger
			return j, nil
		},
	}
}

// joinRow is one buffered record of a side: its value and whether it
// matched a record of the other side (tracked for outer joins only).
type joinRow struct {
	TS      int64 // event time, ms (interval_join; window_join keys rows by window)
	Value   []byte
	Text    bool // runtime.FormatText: seen as a JSON string
	Matched bool
}

// joinRowsSerializer encodes a list of rows: a uvarint count, then per row
// its time (varint), a flags byte (1 matched, 2 text, 4 nil value), a
// uvarint length and the value's bytes. Name "join-rows-v1".
type joinRowsSerializer struct{}

func (joinRowsSerializer) Name() string { return "join-rows-v1" }

func (joinRowsSerializer) Append(dst []byte, rows []joinRow) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(rows)))
	for _, r := range rows {
		var f byte
		if r.Matched {
			f |= 1
		}
		if r.Text {
			f |= 2
		}
		if r.Value == nil {
			f |= 4
		}
		dst = binary.AppendVarint(dst, r.TS)
		dst = append(dst, f)
		dst = binary.AppendUvarint(dst, uint64(len(r.Value)))
		dst = append(dst, r.Value...)
	}
	return dst, nil
}

var errJoinRows = errors.New("operators: malformed join rows")

func (joinRowsSerializer) Decode(b []byte) ([]joinRow, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, errJoinRows
	}
	b = b[k:]
	rows := make([]joinRow, 0, n)
	for range n {
		ts, k := binary.Varint(b)
		if k <= 0 {
			return nil, errJoinRows
		}
		b = b[k:]
		if len(b) < 1 {
			return nil, errJoinRows
		}
		f := b[0]
		l, k := binary.Uvarint(b[1:])
		if k <= 0 || l > uint64(len(b)-1-k) {
			return nil, errJoinRows
		}
		b = b[1+k:]
		r := joinRow{TS: ts, Matched: f&1 != 0, Text: f&2 != 0}
		if f&4 == 0 {
			r.Value = append([]byte{}, b[:l]...)
		}
		b = b[l:]
		rows = append(rows, r)
	}
	if len(b) != 0 {
		return nil, errJoinRows
	}
	return rows, nil
}

// intervalListState returns the descriptor of an interval join side's
// rows in the earlier layout (all of a key's rows in one value).
func intervalListState(name string) state.ValueStateDescriptor[[]joinRow] {
	return state.ValueStateDescriptor[[]joinRow]{Name: name, Serializer: joinRowsSerializer{}}
}

// joinSideState returns the descriptor of a side's rows by time: the
// window start (window_join) or the event time (interval_join), ms.
func joinSideState(name string) state.MapStateDescriptor[int64, []joinRow] {
	return state.MapStateDescriptor[int64, []joinRow]{Name: name, KeySerializer: state.Int64Serializer{}, ValueSerializer: joinRowsSerializer{}}
}

// IntervalJoin is the interval_join function (Flink's IntervalJoinOperator
// behind KeyedStream.intervalJoin, extended to outer joins): a
// KeyedCoProcessFunction whose first input is the left side, second the
// right. Per key, each side buffers its records by event time, in a
// MapState from the time (ms) to the rows of that time. A left
// record at time t joins every buffered right record at rt with t + lower
// <= rt <= t + upper, a right record every buffered left record for which
// that holds; each pair emits select(left, right) at max(t, rt), keyed by
// the join key. A record is late when its time is at or before the
// watermark (or it has none): it goes unchanged to the side output
// LateOutput, or is counted and logged (lateRecords), and joins nothing. A
// left row is kept until the watermark reaches t + upper, a right row
// until it reaches rt - lower: then no record of the other side that is
// not late can match it any more, so an event-time timer removes it and,
// for the outer side(s) of the join kind, emits it with the other side
// null at its own time if it matched nothing. State is so bounded by the
// interval plus the watermark's delay, and empty once the watermark passes
// the last row's interval.
//
// Cost per record: a range read of the other side's times in its interval
// (state.MapRange: only the rows in range are decoded), the pairs, and a
// read and write of its own time's bucket; per timer: one bucket per side.
// It does not grow with the rows buffered for the key (a hot key), except
// that the hashmap backend compares, without decoding, every buffered time
// of the key with the interval's bounds.
//
// A record on whose pair select fails is a bad record (eval_error) under
// its source's on_error policy: it is not buffered, and the pairs before
// the failing one were emitted (their rows of the other side count as
// matched). Select failing on an unmatched row of an
// outer join, emitted by a timer, fails the task.
//
// Metrics (when Metrics is set): kstreamd_join_buffered_rows and the
// late-record counters of lateRecords.
type IntervalJoin struct {
	// Metrics, if not nil, receives the join and late-record metrics; set
	// before Open.
	Metrics *Metrics
	// Logger reports dropped late records (rate-limited); nil: discarded.
	Logger *slog.Logger

	p            IntervalJoinParams
	lower, upper int64
	timers       TimerService
	sides        [2]state.MapState[int64, []joinRow]
	output       joinOutput
	lateRecs     *lateRecords
	gauge        prometheus.Gauge // nil without Metrics
	rows         int64            // rows buffered by the subtask
	// rowSer, if not nil, replaces joinRowsSerializer for the by-time
	// states (same name and bytes; tests count decodes through it).
	rowSer state.Serializer[[]joinRow]
}

// NewIntervalJoin returns the interval join of params p (checked by
// CheckParams).
func NewIntervalJoin(p IntervalJoinParams) *IntervalJoin {
	if p.Join == "" {
		p.Join = JoinInner
	}
	return &IntervalJoin{p: p, lower: p.Lower.Milliseconds(), upper: p.Upper.Milliseconds(), output: joinOutput{sel: p.Select}}
}

// Open implements KeyedCoProcessFunction; it moves rows restored in the
// earlier layout into the by-time states and counts the rows restored into
// the subtask's key groups for the buffered-rows gauge.
func (j *IntervalJoin) Open(ctx OpenContext) error {
	j.timers = ctx.TimerService()
	if j.timers == nil {
		return fmt.Errorf("operators: %s %s: no timer service", IntervalJoinType, ctx.Operator)
	}
	j.rows = 0
	old := [2]string{intervalJoinLeftListState, intervalJoinRightListState}
	for i, name := range []string{IntervalJoinLeftState, IntervalJoinRightState} {
		d := joinSideState(name)
		if j.rowSer != nil {
			d.ValueSerializer = j.rowSer
		}
		m, err := state.GetMapState(ctx.Backend, d)
		if err != nil {
			return fmt.Errorf("operators: %s %s: %w", IntervalJoinType, ctx.Operator, err)
		}
		j.sides[i] = m
		moved, err := migrateIntervalRows(ctx.Backend, old[i], m)
		if err != nil {
			return fmt.Errorf("operators: %s %s: moving rows of %s into %s: %w", IntervalJoinType, ctx.Operator, old[i], name, err)
		}
		if moved > 0 && j.Logger != nil {
			j.Logger.Info("moved interval join rows into the by-time layout", "operator", ctx.Operator, "to", name, "rows", moved)
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
			return fmt.Errorf("operators: %s %s: counting restored rows: %w", IntervalJoinType, ctx.Operator, err)
		}
	}
	j.lateRecs = newLateRecords(ctx.Operator, LateOutput, j.Metrics, j.Logger, j.timers.CurrentProcessingTime)
	if j.Metrics != nil {
		j.gauge = j.Metrics.JoinRows(ctx.Operator, ctx.Subtask)
	}
	j.addRows(0)
	return nil
}

// migrateIntervalRows moves every key's rows of the earlier layout's
// ValueState old (restored from a checkpoint or savepoint taken before the
// rows were kept by time) into m, by event time, after the rows m already
// holds at the same time, and clears old; it returns the rows moved. The
// cleanup timers those rows registered (at t + upper, t - lower) remove
// their buckets as for rows buffered by this version. Nothing happens
// unless the backend holds old.
func migrateIntervalRows(b state.KeyedStateBackend, old string, m state.MapState[int64, []joinRow]) (int, error) {
	if !state.HasState(b, old) {
		return 0, nil
	}
	moved := 0
	err := state.ApplyToAllValueKeys(b, intervalListState(old), func(_ []byte, v state.ValueState[[]joinRow]) error {
		rows, _, err := v.Value()
		if err != nil {
			return err
		}
		byTime := map[int64][]joinRow{}
		var times []int64
		for _, r := range rows {
			if _, ok := byTime[r.TS]; !ok {
				times = append(times, r.TS)
			}
			byTime[r.TS] = append(byTime[r.TS], r)
		}
		for _, ts := range times {
			have, _, err := m.Get(ts)
			if err != nil {
				return err
			}
			if err := m.Put(ts, append(have, byTime[ts]...)); err != nil {
				return err
			}
		}
		moved += len(rows)
		return v.Clear()
	})
	return moved, err
}

// addRows changes the count of buffered rows by delta.
func (j *IntervalJoin) addRows(delta int64) {
	j.rows += delta
	if j.gauge != nil {
		j.gauge.Set(float64(j.rows))
	}
}

// BufferedRows returns the rows the subtask holds in keyed state (both
// sides, every key).
func (j *IntervalJoin) BufferedRows() int64 { return j.rows }

// ProcessElement1 implements KeyedCoProcessFunction: a left record.
func (j *IntervalJoin) ProcessElement1(ctx context.Context, rec runtime.Record, out Collector) error {
	return j.process(0, rec, out)
}

// ProcessElement2 implements KeyedCoProcessFunction: a right record.
func (j *IntervalJoin) ProcessElement2(ctx context.Context, rec runtime.Record, out Collector) error {
	return j.process(1, rec, out)
}

// process buffers rec of side (0 left, 1 right), joins it with the other
// side's rows in its interval and registers its cleanup timer.
func (j *IntervalJoin) process(side int, rec runtime.Record, out Collector) error {
	wm := j.timers.CurrentWatermark()
	if rec.Timestamp.IsZero() || (wm != runtime.MinWatermark && !rec.Timestamp.After(wm)) {
		return j.lateRecs.handle(rec, wm, out)
	}
	t := rec.Timestamp.UnixMilli()
	// The other side's times this record joins: a left at t joins right
	// in [t+lower, t+upper]; a right at t joins left in [t-upper, t-lower].
	lo, hi, cleanup := t+j.lower, t+j.upper, t+j.upper
	if side == 1 {
		lo, hi, cleanup = t-j.upper, t-j.lower, t-j.lower
	}
	row := joinRow{TS: t, Value: rec.Value, Text: rec.Format == runtime.FormatText}
	other := j.sides[1-side]
	trackOther := j.p.Join.outer(1 - side)
	// Only the other side's buckets in [lo, hi] are read and decoded.
	for e, err := range state.MapRange(other, lo, hi) {
		if err != nil {
			return err
		}
		dirty := false
		for i := range e.Value {
			o := &e.Value[i]
			l, r := &row, o
			if side == 1 {
				l, r = o, &row
			}
			if err := j.emit(rec.Key, l, r, max(t, e.Key), out); err != nil {
				return err
			}
			row.Matched = true
			if trackOther && !o.Matched {
				o.Matched, dirty = true, true
			}
		}
		if dirty {
			if err := other.Put(e.Key, e.Value); err != nil {
				return err
			}
		}
	}
	if !j.p.Join.outer(side) {
		row.Matched = false // not tracked for an inner side
	}
	own := j.sides[side]
	rows, _, err := own.Get(t)
	if err != nil {
		return err
	}
	if err := own.Put(t, append(rows, row)); err != nil {
		return err
	}
	j.addRows(1)
	return j.timers.RegisterEventTimeTimer(time.UnixMilli(cleanup))
}

// OnTimer implements TimerFunction: the rows whose interval the watermark
// passed at ts are removed, the unmatched ones of an outer side emitted
// first, at their own time. Every row registered a timer at the end of its
// interval, so the timer at ts removes exactly one bucket per side: the
// left rows at ts - upper and the right rows at ts + lower (Flink's
// IntervalJoinOperator.onEventTime).
func (j *IntervalJoin) OnTimer(ctx context.Context, ts time.Time, tc TimerContext, out Collector) error {
	at := ts.UnixMilli()
	for side, bucket := range [2]int64{at - j.upper, at + j.lower} {
		s := j.sides[side]
		rows, ok, err := s.Get(bucket)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if j.p.Join.outer(side) {
			for i := range rows {
				if rows[i].Matched {
					continue
				}
				l, r := &rows[i], (*joinRow)(nil)
				if side == 1 {
					l, r = nil, &rows[i]
				}
				if err := j.emit(tc.Key, l, r, rows[i].TS, out); err != nil {
					return err
				}
			}
		}
		if err := s.Remove(bucket); err != nil {
			return err
		}
		j.addRows(-int64(len(rows)))
	}
	return nil
}

// emit writes select(left, right) (either may be nil: null) with key and
// time ts (ms).
func (j *IntervalJoin) emit(key []byte, left, right *joinRow, ts int64, out Collector) error {
	return j.output.emit(key, left, right, ts, "", out)
}

// joinOutput builds a join's output records: the value
// {"left": <left>, "right": <right><extra>} (extra: more fields, each
// starting with a comma), or the result of select over it.
type joinOutput struct {
	sel Expression
	env RecordEnv
	buf []byte
}

// emit writes the output of the pair (left, right) (either may be nil:
// null) with key and time ts (ms).
func (o *joinOutput) emit(key []byte, left, right *joinRow, ts int64, extra string, out Collector) error {
	b := append(o.buf[:0], `{"left":`...)
	b = appendRowJSON(b, left)
	b = append(b, `,"right":`...)
	b = appendRowJSON(b, right)
	b = append(b, extra...)
	b = append(b, '}')
	o.buf = b
	var value []byte
	if o.sel.IsSet() {
		rec := runtime.Record{Key: key, Value: b, Timestamp: time.UnixMilli(ts)}
		v, err := o.sel.Program().Eval(o.env.Reset(&rec))
		if err != nil {
			return EvalRecordError(err)
		}
		if value, err = expression.EncodeJSON(v); err != nil {
			return resultError(o.sel, "select", err.Error())
		}
	} else {
		value = append([]byte(nil), b...)
	}
	return out.Collect(runtime.Record{Key: key, Value: value, Timestamp: time.UnixMilli(ts)})
}

// appendRowJSON appends r's value as JSON: null for a nil row or value, a
// JSON string for a text value, the value itself otherwise.
func appendRowJSON(b []byte, r *joinRow) []byte {
	switch {
	case r == nil || r.Value == nil:
		return append(b, "null"...)
	case r.Text || !json.Valid(r.Value):
		s, _ := json.Marshal(string(r.Value))
		return append(b, s...)
	}
	return append(b, r.Value...)
}
