package operators

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// TableJoinType is the pipeline name of the stream-table join.
const TableJoinType = "table_join"

// The table join's keyed state names (part of the checkpoint format):
// the table's row per key (mode latest), its history by event time (mode
// event_time, a state.VersionedValueState) and the stream records waiting
// for the watermark (mode event_time: record time in ms to the records).
const (
	TableJoinLatestState   = "table_join.table"
	TableJoinVersionsState = "table_join.versions"
	TableJoinWaitingState  = "table_join.waiting"
)

// TableJoinMode says which version of the table row a stream record joins.
type TableJoinMode string

// The table join modes.
const (
	// TableJoinLatest joins the row as it is when the record is processed
	// (Kafka Streams' KStream-KTable join, Flink's processing-time
	// temporal join).
	TableJoinLatest TableJoinMode = "latest"
	// TableJoinEventTime joins the row version valid at the record's
	// timestamp (Flink's event-time temporal join, Kafka Streams'
	// stream-table join over a versioned store).
	TableJoinEventTime TableJoinMode = "event_time"
)

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *TableJoinMode) UnmarshalText(text []byte) error {
	return setEnum(m, text, TableJoinLatest, TableJoinEventTime)
}

// DefaultHistoryRetention is the default of TableJoinParams.HistoryRetention.
const DefaultHistoryRetention = time.Hour

// TableJoinParams are the params of table_join:
//
//	inputs:
//	  left:  {from: clicks, key_by: user}   # the stream
//	  right: {from: users, key_by: key}     # the table (a table: true source)
//	params:
//	  mode: event_time           # or latest (the default)
//	  join: left                 # or inner (the default)
//	  history_retention: 24h     # event_time: how far back versions are kept
//	  select: '{"click": left.id, "country": right == null ? null : right.country}'
type TableJoinParams struct {
	Mode             TableJoinMode `yaml:"mode" doc:"latest (default: the table row as it is when the stream record is processed) or event_time (the row version valid at the record's timestamp: the record waits until the watermark, the minimum of both inputs', passes it)."`
	Join             TableJoinKind `yaml:"join" doc:"inner (default: a stream record whose key has no row is dropped) or left (it is emitted with right null)."`
	HistoryRetention time.Duration `yaml:"history_retention" doc:"event_time: how far behind the watermark row versions are kept (default 1h): a stream record at least this late is a late record, as is a table record older than that; bounds the table's history per key."`
	Select           Expression    `yaml:"select" doc:"An expression giving the output value (as JSON) over left, the stream record's value, and right, the table row's value (null on a left join without a row); key is the join key and timestamp the stream record's. Required."`
}

// CheckParams implements ParamsChecker.
func (p *TableJoinParams) CheckParams(report func(field, msg string)) {
	if !p.Select.IsSet() {
		report("select", "required: an expression over left and right giving the output value")
	}
	if p.HistoryRetention < time.Millisecond {
		report("history_retention", fmt.Sprintf("must be at least 1ms, got %v", p.HistoryRetention))
	}
}

func tableJoinFactory() Factory {
	return Factory{
		Type: TableJoinType,
		Doc: "Joins each record of the left stream with the right table's row for its key (Kafka Streams' KStream-KTable join, Flink's temporal join): " +
			"the latest row, or with mode event_time the row version valid at the record's timestamp (a versioned table with a history retention); inner or left; output by a select expression over left and right.",
		Traits: Traits{Keyed: true, Inputs: [2]string{JoinLeft, JoinRight}, Changelog: ChangelogTraits{Tables: [2]bool{false, true}}},
		Params: func() any {
			return &TableJoinParams{Mode: TableJoinLatest, Join: TableJoinInner, HistoryRetention: DefaultHistoryRetention}
		},
		State:       []string{TableJoinLatestState, TableJoinVersionsState, TableJoinWaitingState, state.TimersStateName},
		SideOutputs: []string{LateOutput},
		New: func(ctx FactoryContext) (any, error) {
			p, ok := ctx.Params.(*TableJoinParams)
			if !ok {
				return nil, fmt.Errorf("operators: %s: params %T, want *TableJoinParams", TableJoinType, ctx.Params)
			}
			j := NewTableJoin(*p)
			j.Metrics, j.Logger = ctx.Metrics, ctx.Logger
			return j, nil
		},
	}
}

// tableValue is a table row's value as stored: its bytes and whether its
// source format is text. Byte format (serializer "table-row-v1"): one flag
// byte (1: text), then the value's bytes. The serializer is a
// state.HeapSerializer: on Pebble the write cache keeps the row as it is,
// with right, so that the row is decoded for select once per row, not
// once per stream record joined with it.
type tableValue struct {
	Value []byte
	Text  bool
	// right, when not nil, holds the row as select sees it (decodeValue of
	// Value), decoded on the first read and shared by the copies of the
	// row the state hands out (owner goroutine only). Nil for a row made
	// outside the state (then decodeValue is used).
	right *tableRight
}

// tableRight is a kept row's value as select sees it: what decodeValue
// returns for the row's bytes, once done. Held as a plain decoded value
// (a map[string]any for a JSON object), not an expression.Doc: the row
// is small and read by many stream records, and a Doc is about 1 KiB of
// pointers per row for the garbage collector, where the map is the size
// of the row.
type tableRight struct {
	v    any
	done bool
	// json holds the row's fields a raw select writes (rawSelect.rightJSON:
	// slices of the row's bytes, which are never changed, or of its own),
	// once jsonDone; nil when it cannot write them.
	json     [][]byte
	jsonDone bool
}

// withRight returns v with an empty holder for its decoded value.
func (v tableValue) withRight() tableValue {
	v.right = &tableRight{}
	return v
}

// decoded returns the row as select sees it (decodeValue), decoding it on
// the first call for a kept row.
func (v tableValue) decoded() any {
	if v.right == nil {
		return decodeValue(v.Value, v.Text)
	}
	if !v.right.done {
		v.right.v, v.right.done = decodeValue(v.Value, v.Text), true
	}
	return v.right.v
}

// rawJSON returns the JSON of the row's fields raw select r writes
// (rawSelect.rightJSON), found on the first call for a kept row; false
// when r cannot write them.
func (v tableValue) rawJSON(r *rawSelect) ([][]byte, bool) {
	if v.right == nil {
		return r.rightJSON(v.Value, v.Text)
	}
	if !v.right.jsonDone {
		v.right.json, _ = r.rightJSON(v.Value, v.Text)
		v.right.jsonDone = true
	}
	return v.right.json, v.right.json != nil
}

type tableValueSerializer struct{}

var _ state.HeapSerializer[tableValue] = tableValueSerializer{}

func (tableValueSerializer) Name() string { return "table-row-v1" }

func (tableValueSerializer) Append(dst []byte, v tableValue) ([]byte, error) {
	f := byte(0)
	if v.Text {
		f = 1
	}
	return append(append(dst, f), v.Value...), nil
}

func (tableValueSerializer) Decode(b []byte) (tableValue, error) {
	if len(b) < 1 || b[0] > 1 {
		return tableValue{}, errors.New("operators: malformed table row")
	}
	return tableValue{Value: append([]byte{}, b[1:]...), Text: b[0] == 1}.withRight(), nil
}

// Copy implements state.HeapSerializer: the row with its own bytes and an
// empty holder for its decoded value.
func (tableValueSerializer) Copy(v tableValue, _ []tableValue) (tableValue, error) {
	return tableValue{Value: append([]byte{}, v.Value...), Text: v.Text}.withRight(), nil
}

// AppendKept implements state.HeapSerializer: Append.
func (s tableValueSerializer) AppendKept(dst []byte, v tableValue) ([]byte, error) {
	return s.Append(dst, v)
}

// View implements state.HeapSerializer: the kept row itself, sharing its
// bytes and decoded value (the table join never changes either).
func (tableValueSerializer) View(v tableValue) tableValue { return v }

// Size implements state.HeapSerializer: the row's bytes, twice (the
// decoded value holds its strings and fields), and the structs.
func (tableValueSerializer) Size(v tableValue) int { return 2*len(v.Value) + 200 }

// tableJoinWaiting is a stream record waiting for the watermark (mode
// event_time), stored as JSON: what the output keeps of it besides the
// key (the timer's) and the time (the map key).
type tableJoinWaiting struct {
	Value   []byte             `json:"v"`
	Text    bool               `json:"t,omitempty"`
	Change  runtime.ChangeKind `json:"c,omitempty"`
	Headers []runtime.Header   `json:"h,omitempty"`
}

// TableJoin is the table_join function, a KeyedCoProcessFunction whose
// first input (left) is a stream and second (right) a table's changelog,
// both keyed by the join key (the table normally with key_by: key, its
// Kafka key). A table record upserts the key's row (+I, +U), deletes it
// (-D) or is ignored (-U, its +U follows).
//
// Mode latest keeps one row per key (a ValueState): each stream record
// joins the row as it is at that moment (processing order), at once.
//
// Mode event_time keeps the key's row history (state.VersionedValueState:
// a version per table record, valid from its timestamp) and buffers each
// stream record until the watermark (the minimum of both inputs') passes
// its timestamp: then it joins the version valid at that timestamp (Flink's
// TemporalRowTimeJoinOperator), so the result does not depend on which
// input was read first. A stream record that is already late (at or before
// the watermark) joins at once, the history still exact back to the
// watermark minus history_retention; one older than that, or without a
// timestamp, is a late record (side output late, or counted). A table
// record older than the watermark minus history_retention changes nothing
// and is a late record too. History is pruned by every write and by an
// event-time timer per key, so it holds per key the versions of one
// retention period plus the one valid at its start.
//
// Output: select over left and right (null on a left join without a row)
// as the value, keyed by the join key, at the stream record's timestamp,
// with its change kind and headers. A record on which select fails is a
// bad record (eval_error, the stream source's on_error policy); when it
// waited for the watermark, the task fails instead.
type TableJoin struct {
	// Metrics and Logger, if not nil, receive the late-record counts and
	// logs; set before Open.
	Metrics *Metrics
	Logger  *slog.Logger

	p        TableJoinParams
	left     bool
	timers   TimerService
	latest   state.ValueState[tableValue]
	versions *state.VersionedValueState[tableValue]
	waiting  state.MapState[int64, []tableJoinWaiting]
	lateRecs *lateRecords
	in       expression.Input
	env      expression.Env
	joined   map[string]any
	// lastLeft is the *lazyObject joined["left"] holds, if any.
	lastLeft *lazyObject
	// sides are the scratch space of select's left and right.
	sides [2]joinSide
	// slab is the block the output values are written into (selectValue).
	slab outputSlab
	// raw is select's raw form (tablejoin_raw.go), nil when it has none;
	// rawLeft and rawNum are leftJSON's scratch space.
	raw     *rawSelect
	rawLeft [][]byte
	rawNum  []byte
}

// NewTableJoin returns the table join of params p (checked by
// CheckParams).
func NewTableJoin(p TableJoinParams) *TableJoin {
	if p.Mode == "" {
		p.Mode = TableJoinLatest
	}
	if p.HistoryRetention <= 0 {
		p.HistoryRetention = DefaultHistoryRetention
	}
	j := &TableJoin{p: p, left: p.Join == TableJoinLeft, joined: map[string]any{}}
	if p.Select.IsSet() {
		if j.raw = compileRawSelect(p.Select.Program().Source()); j.raw != nil && len(j.raw.extra) > 0 {
			j.raw = nil // the table join has no fields of its own
		}
		if j.raw != nil {
			j.rawLeft = make([][]byte, len(j.raw.left))
		}
	}
	return j
}

// Open implements KeyedCoProcessFunction.
func (j *TableJoin) Open(ctx OpenContext) error {
	j.timers = ctx.TimerService()
	if j.timers == nil {
		return fmt.Errorf("operators: %s %s: no timer service", TableJoinType, ctx.Operator)
	}
	var err error
	if j.p.Mode == TableJoinEventTime {
		j.versions, err = state.GetVersionedValueState(ctx.Backend, state.VersionedValueStateDescriptor[tableValue]{
			Name: TableJoinVersionsState, Serializer: tableValueSerializer{}, HistoryRetention: j.p.HistoryRetention,
		})
		if err == nil {
			j.waiting, err = state.GetMapState(ctx.Backend, state.MapStateDescriptor[int64, []tableJoinWaiting]{
				Name: TableJoinWaitingState, KeySerializer: state.Int64Serializer{}, ValueSerializer: state.JSONSerializer[[]tableJoinWaiting]{},
			})
		}
	} else {
		j.latest, err = state.GetValueState(ctx.Backend, state.ValueStateDescriptor[tableValue]{Name: TableJoinLatestState, Serializer: tableValueSerializer{}})
	}
	if err != nil {
		return fmt.Errorf("operators: %s %s: %w", TableJoinType, ctx.Operator, err)
	}
	j.lateRecs = newLateRecords(ctx.Operator, LateOutput, j.Metrics, j.Logger, j.timers.CurrentProcessingTime)
	return nil
}

// streamTime returns the watermark as the versioned state's stream time:
// the epoch before the first watermark (event times are never before it).
func (j *TableJoin) streamTime() time.Time {
	wm := j.timers.CurrentWatermark()
	if wm.Before(time.UnixMilli(runtime.MinEventTime)) {
		return time.UnixMilli(runtime.MinEventTime)
	}
	return wm
}

// ProcessElement2 implements KeyedCoProcessFunction: a table record.
func (j *TableJoin) ProcessElement2(_ context.Context, rec runtime.Record, out Collector) error {
	if rec.Change == runtime.ChangeUpdateBefore {
		return nil
	}
	text := rec.Format == runtime.FormatText
	if j.p.Mode != TableJoinEventTime {
		if rec.Change == runtime.ChangeDelete {
			return j.latest.Clear()
		}
		// The state copies the bytes (serialized, or HeapSerializer.Copy).
		return j.latest.Update(tableValue{Value: rec.Value, Text: text})
	}
	row := tableValue{Value: bytes.Clone(rec.Value), Text: text}
	if rec.Timestamp.IsZero() {
		return j.lateRecs.handle(rec, j.timers.CurrentWatermark(), out)
	}
	now := j.streamTime()
	var err error
	if rec.Change == runtime.ChangeDelete {
		err = j.versions.Delete(rec.Timestamp, now)
	} else {
		err = j.versions.Put(row, rec.Timestamp, now)
	}
	if errors.Is(err, state.ErrTooOld) {
		return j.lateRecs.handle(rec, j.timers.CurrentWatermark(), out)
	}
	if err != nil {
		return err
	}
	return j.scheduleCleanup(now)
}

// scheduleCleanup prunes the current key's history at stream time now and
// registers the event-time timer of its next expiry, if any.
func (j *TableJoin) scheduleCleanup(now time.Time) error {
	next, ok, err := j.versions.Cleanup(now)
	if err != nil || !ok {
		return err
	}
	return j.timers.RegisterEventTimeTimer(next)
}

// ProcessElement1 implements KeyedCoProcessFunction: a stream record.
func (j *TableJoin) ProcessElement1(_ context.Context, rec runtime.Record, out Collector) error {
	if j.p.Mode != TableJoinEventTime {
		row, ok, err := j.latest.Value()
		if err != nil {
			return err
		}
		return j.emit(rec, row, ok, out)
	}
	wm := j.timers.CurrentWatermark()
	if rec.Timestamp.IsZero() {
		return j.lateRecs.handle(rec, wm, out)
	}
	if wm != runtime.MinWatermark && !rec.Timestamp.After(wm) {
		// Late: the history is exact back to wm - retention.
		if rec.Timestamp.Before(wm.Add(-j.p.HistoryRetention)) {
			return j.lateRecs.handle(rec, wm, out)
		}
		row, ok, err := j.versions.Get(rec.Timestamp)
		if err != nil {
			return err
		}
		return j.emit(rec, row, ok, out)
	}
	t := rec.Timestamp.UnixMilli()
	recs, _, err := j.waiting.Get(t)
	if err != nil {
		return err
	}
	recs = append(recs, tableJoinWaiting{Value: rec.Value, Text: rec.Format == runtime.FormatText, Change: rec.Change, Headers: rec.Headers})
	if err := j.waiting.Put(t, recs); err != nil {
		return err
	}
	return j.timers.RegisterEventTimeTimer(rec.Timestamp)
}

// OnTimer implements TimerFunction (mode event_time): the stream records
// waiting at ts join the version valid at ts, in arrival order; then the
// key's history is pruned at stream time ts and its next cleanup timer
// registered.
func (j *TableJoin) OnTimer(_ context.Context, ts time.Time, tc TimerContext, out Collector) error {
	if j.p.Mode != TableJoinEventTime {
		return nil
	}
	t := ts.UnixMilli()
	recs, ok, err := j.waiting.Get(t)
	if err != nil {
		return err
	}
	if ok {
		row, found, err := j.versions.Get(ts)
		if err != nil {
			return err
		}
		for _, w := range recs {
			rec := runtime.Record{Key: tc.Key, Value: w.Value, Timestamp: ts, Change: w.Change, Headers: w.Headers}
			if w.Text {
				rec.Format = runtime.FormatText
			}
			if err := j.emit(rec, row, found, out); err != nil {
				var re *runtime.RecordError
				if errors.As(err, &re) {
					return fmt.Errorf("operators: %s: select on a record that waited for the watermark: %w", TableJoinType, err)
				}
				return err
			}
		}
		if err := j.waiting.Remove(t); err != nil {
			return err
		}
	}
	return j.scheduleCleanup(ts)
}

// emit writes select(left, right) for stream record rec and the row (ok
// false: none; dropped on an inner join). The stream record is handed to
// select decoded only as far as it reads it (joinSide), the row decoded
// once per row (tableValue.decoded).
func (j *TableJoin) emit(rec runtime.Record, row tableValue, ok bool, out Collector) error {
	if !ok && !j.left {
		return nil
	}
	if j.raw != nil {
		if value, done := j.rawValue(&rec, row, ok); done {
			o := rec
			o.Value = value
			o.Format = runtime.FormatJSON
			return out.Collect(o)
		}
	}
	var right any
	if ok {
		right = row.decoded()
	}
	left := j.sides[0].record(&rec)
	// joined holds left and right between records: left is mostly the
	// same *lazyObject (j.sides[0]'s), written again only when it is not.
	// What the map keeps from the last record is held by the join anyway
	// (its scratch side, the state's row).
	if lo, isObj := left.(*lazyObject); !isObj || lo != j.lastLeft {
		j.joined["left"], j.lastLeft = left, lo
	}
	j.joined["right"] = right
	j.in = expression.Input{Value: j.joined, Key: rec.Key, Timestamp: rec.Timestamp}
	j.env.Reset(&j.in)
	value, err := j.selectValue()
	if err != nil {
		var ee *expression.EvalError
		if errors.As(err, &ee) {
			return EvalRecordError(err)
		}
		return resultError(j.p.Select, "select", "is not JSON: "+err.Error())
	}
	o := rec
	o.Value = value
	o.Format = runtime.FormatJSON
	return out.Collect(o)
}

// selectValue evaluates select on j.env and returns its result's JSON,
// written into j.slab (outputSlab.evalJSON).
func (j *TableJoin) selectValue() ([]byte, error) {
	return j.slab.evalJSON(j.p.Select.Program(), &j.env)
}

// rawValue writes select's result for stream record rec and the row (ok
// false: none) with the raw select (tablejoin_raw.go) into j.slab, as
// selectValue would have written it; done false when the raw select gives
// up (then select is evaluated).
func (j *TableJoin) rawValue(rec *runtime.Record, row tableValue, ok bool) (value []byte, done bool) {
	r := j.raw
	if rec.Format == runtime.FormatText || rec.Value == nil || !rec.CheckedJSON() {
		return nil, false
	}
	var right [][]byte
	if ok {
		if right, ok = row.rawJSON(r); !ok {
			return nil, false
		}
		ok = true
	} else if r.rightNeeded() {
		return nil, false // select fails on the missing row
	}
	j.rawLeft, j.rawNum, done = r.leftJSON(rec.Value, j.rawLeft, j.rawNum)
	if !done {
		return nil, false
	}
	return r.write(&j.slab, j.rawLeft, right, nil, ok), true
}
