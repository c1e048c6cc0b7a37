package operators

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// GlobalTableJoinType is the pipeline name of the global table join.
const GlobalTableJoinType = "global_table_join"

// GlobalTableState is the name of the global table join's broadcast state
// (the table's rows by key) in checkpoints.
const GlobalTableState = "table"

// TableJoinKind says what a table join does with a stream record whose
// table row is missing (Flink's inner and left lookup/temporal joins).
type TableJoinKind string

// The table join kinds.
const (
	// TableJoinInner drops a stream record without a table row.
	TableJoinInner TableJoinKind = "inner"
	// TableJoinLeft emits it with right null.
	TableJoinLeft TableJoinKind = "left"
)

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *TableJoinKind) UnmarshalText(text []byte) error {
	return setEnum(k, text, TableJoinInner, TableJoinLeft)
}

// GlobalTableJoinParams are the params of global_table_join:
//
//	params:
//	  key: user_id                      # the table key, from the stream record
//	  join: left                        # or inner (the default)
//	  select: '{"click": left.id, "country": right == null ? null : right.country}'
type GlobalTableJoinParams struct {
	// Key gives the table key to look up, from the stream record; required.
	Key Expression `yaml:"key" doc:"An expression over the stream record giving the table key to look up (the table's Kafka key): a string, a number (its JSON text) or bytes, such as user_id; required. The stream is not re-keyed."`
	// Join is inner (default) or left.
	Join TableJoinKind `yaml:"join" doc:"inner (default: a stream record whose key has no table row is dropped) or left (it is emitted with right null)."`
	// Select gives the output value; required.
	Select Expression `yaml:"select" doc:"An expression giving the output value (as JSON) over left, the stream record's value, and right, the table row's value (null on a left join without a row); key and timestamp are the stream record's. Required, such as {\"click\": left.id, \"country\": right.country}."`
}

// CheckParams implements ParamsChecker.
func (p *GlobalTableJoinParams) CheckParams(report func(field, msg string)) {
	if !p.Key.IsSet() {
		report("key", "required: an expression over the stream record giving the table key, such as user_id")
	}
	if !p.Select.IsSet() {
		report("select", "required: an expression over left and right giving the output value")
	}
}

func globalTableJoinFactory() Factory {
	return Factory{
		Type: GlobalTableJoinType,
		Doc: "Joins each record with the row of a table broadcast to every subtask (Kafka Streams' GlobalKTable join): the broadcast input is a table source, " +
			"looked up by an expression of the record, so the stream is not re-keyed; inner or left; output by a select expression over left and right.",
		Traits: Traits{Broadcast: true, BroadcastTable: true},
		Params: func() any { return &GlobalTableJoinParams{Join: TableJoinInner} },
		State:  []string{GlobalTableState + " (broadcast)"},
		New: func(ctx FactoryContext) (any, error) {
			return NewGlobalTableJoin(ctx.Params.(*GlobalTableJoinParams)), nil
		},
	}
}

// GlobalTableJoin joins a stream with a table every subtask holds in full
// (Kafka Streams' KStream-GlobalKTable join; Flink's lookup join against a
// broadcast table). It is a BroadcastProcessFunction: the broadcast input
// is a table source's changelog, applied to the subtask's copy of the table
// (an upsert, +I or +U, sets the key's row; -D deletes it; -U is ignored, its
// +U follows); each record of the main input looks up the row of the key
// its key expression gives and emits the select expression's value with
// the record's key, timestamp, headers and change kind, or, without a row,
// nothing (inner) or the select with right null (left). The stream keeps
// its partitioning: no key-group edge.
//
// The table is broadcast state: every subtask holds every row (memory:
// rows x parallelism; checkpoints: each subtask's copy), restored from one
// old subtask's copy at any parallelism; at start the stream waits until
// the table source caught up with the end offsets it saw (bootstrap), as
// rules do. A lookup sees the table as of the latest record of the table
// processed (processing time, Kafka Streams' semantics): for the row valid
// at the record's event time use table_join with mode event_time.
//
// A record on which key or select fails, or whose key is not a string,
// number or bytes, is a bad record with reason eval_error (the stream
// source's on_error policy).
type GlobalTableJoin struct {
	key, sel Expression
	left     bool
	rows     map[string]*tableRow
	env      RecordEnv
	out      expression.Input
	outEnv   expression.Env
	joined   map[string]any
	side     joinSide // select's left
	// snap is the table's last snapshot (SnapshotBroadcastState's JSON),
	// nil once a change or a restore made it stale: a table that did not
	// change between two checkpoints (a bounded side input, Nexmark q13)
	// is not sorted and encoded again per checkpoint.
	snap json.RawMessage
}

// tableRow is a row of a GlobalTableJoin's table: its value as read and,
// once a lookup needed it, decoded.
type tableRow struct {
	raw     []byte
	text    bool // the table source's format is string or bytes
	decoded any
	done    bool
}

// value returns the row's value as expressions see it.
func (r *tableRow) value() any {
	if !r.done {
		r.decoded, r.done = decodeValue(r.raw, r.text), true
	}
	return r.decoded
}

// decodeValue returns a record value as an expression sees it (RecordEnv):
// decoded JSON, or the string of its bytes for a text format or a value
// that is not JSON; nil for a nil value.
func decodeValue(raw []byte, text bool) any {
	if raw == nil {
		return nil
	}
	if text {
		return string(raw)
	}
	v, err := expression.DecodeJSON(raw)
	if err != nil {
		return string(raw)
	}
	return v
}

// NewGlobalTableJoin returns the join p describes, with an empty table.
func NewGlobalTableJoin(p *GlobalTableJoinParams) *GlobalTableJoin {
	return &GlobalTableJoin{key: p.Key, sel: p.Select, left: p.Join == TableJoinLeft, rows: map[string]*tableRow{}, joined: map[string]any{}}
}

// Open implements ProcessFunction.
func (j *GlobalTableJoin) Open(OpenContext) error { return nil }

// Rows returns the number of rows of the subtask's table.
func (j *GlobalTableJoin) Rows() int { return len(j.rows) }

// ProcessBroadcastElement implements BroadcastProcessFunction: it applies
// one change of the table.
func (j *GlobalTableJoin) ProcessBroadcastElement(_ context.Context, rec runtime.Record, _ Collector) error {
	switch rec.Change {
	case runtime.ChangeDelete:
		if _, ok := j.rows[string(rec.Key)]; ok {
			delete(j.rows, string(rec.Key))
			j.snap = nil
		}
	case runtime.ChangeUpdateBefore:
	default:
		j.rows[string(rec.Key)] = &tableRow{raw: bytes.Clone(rec.Value), text: rec.Format == runtime.FormatText}
		j.snap = nil
	}
	return nil
}

// ProcessElement implements ProcessFunction: it joins one stream record.
func (j *GlobalTableJoin) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	env := j.env.Reset(&rec)
	kv, err := j.key.Program().Eval(env)
	if err != nil {
		return EvalRecordError(err)
	}
	k, err := keyBytes(j.key, "table key", kv)
	if err != nil {
		return err
	}
	row := j.rows[string(k)]
	if row == nil && !j.left {
		return nil
	}
	var right any
	if row != nil {
		right = row.value()
	}
	var left any
	if d := env.Doc(); d != nil && j.env.src != nil {
		left = j.side.of(d) // only the fields select reads are decoded
	} else {
		left = j.env.Value()
	}
	o, err := selectJoinOutput(j.sel, &j.out, &j.outEnv, j.joined, rec, left, right)
	if err != nil {
		return err
	}
	return out.Collect(o)
}

// selectJoinOutput evaluates sel over left and right (a map {left, right} as the
// value, so both are bare identifiers; key and timestamp are rec's) and
// returns the output record: rec with the JSON of the result as value.
// in, env and joined are the caller's scratch space.
func selectJoinOutput(sel Expression, in *expression.Input, env *expression.Env, joined map[string]any, rec runtime.Record, left, right any) (runtime.Record, error) {
	joined["left"], joined["right"] = left, right
	*in = expression.Input{Value: joined, Key: rec.Key, Timestamp: rec.Timestamp}
	env.Reset(in)
	// Cleared after encoding: the result may be joined itself (value).
	value, err := selectJSON(sel, env)
	joined["left"], joined["right"] = nil, nil
	if err != nil {
		var ee *expression.EvalError
		if errors.As(err, &ee) {
			return runtime.Record{}, EvalRecordError(err)
		}
		return runtime.Record{}, resultError(sel, "select", "is not JSON: "+err.Error())
	}
	o := rec
	o.Value = value
	o.Format = runtime.FormatJSON
	return o, nil
}

// selectJSONHint is the capacity a join's output value starts with.
const selectJSONHint = 128

// selectJSON evaluates a join's select on env and returns its result's
// JSON in a new slice: the bytes and errors of Eval then EncodeJSON (an
// evaluation failure an *expression.EvalError, a result JSON cannot hold
// EncodeJSON's error), written by Program.EvalJSON, which writes a map
// literal's result ({"id": left.id, ...}, the usual select) from CEL's
// values without converting it to Go values first
// (FuzzEvalJSONEqualsEval; TestSelectJSONEqualsEncode).
func selectJSON(sel Expression, env *expression.Env) ([]byte, error) {
	b, _, _, err := sel.Program().EvalJSON(make([]byte, 0, selectJSONHint), env)
	return b, err
}

// keyBytes turns a key expression's result into key bytes: a string's
// bytes, a number's JSON text, bytes as they are; anything else is an
// eval_error naming the expression.
func keyBytes(e Expression, what string, v any) ([]byte, error) {
	switch k := v.(type) {
	case string:
		return []byte(k), nil
	case []byte:
		return k, nil
	case int64, uint64, float64:
		b, err := expression.EncodeJSON(k)
		if err != nil {
			return nil, resultError(e, what, "is not a JSON number: "+err.Error())
		}
		return b, nil
	}
	return nil, resultError(e, what, "must be a string, a number or bytes, got "+expression.TypeName(v))
}

// globalTableSnapshot is one row of the checkpointed table (JSON; the
// bytes as base64).
type globalTableSnapshot struct {
	Key   []byte `json:"k"`
	Value []byte `json:"v"`
	Text  bool   `json:"t,omitempty"`
}

// SnapshotBroadcastState implements BroadcastStateful: the table's rows
// sorted by key, as a JSON list under GlobalTableState. While the table
// does not change, every snapshot returns the same bytes, encoded once
// (shared: callers only read them).
func (j *GlobalTableJoin) SnapshotBroadcastState() (map[string]json.RawMessage, error) {
	if j.snap != nil {
		return map[string]json.RawMessage{GlobalTableState: j.snap}, nil
	}
	rows := make([]globalTableSnapshot, 0, len(j.rows))
	for k, r := range j.rows {
		rows = append(rows, globalTableSnapshot{Key: []byte(k), Value: r.raw, Text: r.text})
	}
	slices.SortFunc(rows, func(a, b globalTableSnapshot) int { return cmp.Compare(string(a.Key), string(b.Key)) })
	raw, err := json.Marshal(rows)
	if err != nil {
		return nil, err
	}
	j.snap = raw
	return map[string]json.RawMessage{GlobalTableState: raw}, nil
}

// RestoreBroadcastState implements BroadcastStateful.
func (j *GlobalTableJoin) RestoreBroadcastState(states map[string]json.RawMessage) error {
	raw, ok := states[GlobalTableState]
	if !ok {
		return nil
	}
	var rows []globalTableSnapshot
	if err := json.Unmarshal(raw, &rows); err != nil {
		return fmt.Errorf("operators: global_table_join: restore table: %w", err)
	}
	j.rows = make(map[string]*tableRow, len(rows))
	j.snap = nil
	for _, r := range rows {
		j.rows[string(r.Key)] = &tableRow{raw: r.Value, text: r.Text}
	}
	return nil
}
