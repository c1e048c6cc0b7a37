package operators

import (
	"bytes"
	"context"
	"encoding/binary"
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
	var row *tableRow
	if ks, ok := kv.(string); ok { // the usual key: looked up without a copy to bytes
		row = j.rows[ks]
	} else {
		k, err := keyBytes(j.key, "table key", kv)
		if err != nil {
			return err
		}
		row = j.rows[string(k)]
	}
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

// globalTableSnapshot is one row of a table checkpointed by a binary
// before format 2 (a JSON list of these; the bytes as base64), still
// restored.
type globalTableSnapshot struct {
	Key   []byte `json:"k"`
	Value []byte `json:"v"`
	Text  bool   `json:"t,omitempty"`
}

// globalTableRows is the checkpointed table since format 2:
// {"format":2,"rows":"<base64>"}, the rows sorted by key, each as
// uvarint(len(key)) key, a flags byte (1: the value is text, 2: the value
// is nil), uvarint(len(value)) value. One JSON string instead of a list
// of objects: the table is in every subtask's part of every checkpoint's
// _metadata (indented JSON, re-read by whoever reads the metadata), where
// the list made Nexmark q13's checkpoints (10,000 rows, two subtasks)
// 3.6 MB and this makes them 1.8 MB.
type globalTableRows struct {
	Format int    `json:"format"`
	Rows   []byte `json:"rows"`
}

// globalTableFormat is the format SnapshotBroadcastState writes.
const globalTableFormat = 2

// The flags of a row of globalTableRows.
const (
	globalRowText = 1
	globalRowNil  = 2
)

// SnapshotBroadcastState implements BroadcastStateful: the table's rows
// sorted by key, in format 2 (globalTableRows) under GlobalTableState.
// While the table does not change, every snapshot returns the same bytes,
// encoded once (shared: callers only read them).
func (j *GlobalTableJoin) SnapshotBroadcastState() (map[string]json.RawMessage, error) {
	if j.snap != nil {
		return map[string]json.RawMessage{GlobalTableState: j.snap}, nil
	}
	keys := make([]string, 0, len(j.rows))
	n := 0
	for k, r := range j.rows {
		keys = append(keys, k)
		n += len(k) + len(r.raw) + 2*binary.MaxVarintLen32 + 1
	}
	slices.Sort(keys)
	b := make([]byte, 0, n)
	for _, k := range keys {
		r := j.rows[k]
		b = append(binary.AppendUvarint(b, uint64(len(k))), k...)
		var flags byte
		if r.text {
			flags |= globalRowText
		}
		if r.raw == nil {
			flags |= globalRowNil
		}
		b = append(binary.AppendUvarint(append(b, flags), uint64(len(r.raw))), r.raw...)
	}
	raw, err := json.Marshal(globalTableRows{Format: globalTableFormat, Rows: b})
	if err != nil {
		return nil, err
	}
	j.snap = raw
	return map[string]json.RawMessage{GlobalTableState: raw}, nil
}

// RestoreBroadcastState implements BroadcastStateful: the table of format
// 2 or of the list written before it.
func (j *GlobalTableJoin) RestoreBroadcastState(states map[string]json.RawMessage) error {
	raw, ok := states[GlobalTableState]
	if !ok {
		return nil
	}
	rows, err := decodeGlobalTable(raw)
	if err != nil {
		return fmt.Errorf("operators: global_table_join: restore table: %w", err)
	}
	j.rows = rows
	j.snap = nil
	return nil
}

// decodeGlobalTable decodes a checkpointed table: format 2
// (globalTableRows) or the older list of globalTableSnapshot.
func decodeGlobalTable(raw json.RawMessage) (map[string]*tableRow, error) {
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		var rows []globalTableSnapshot
		if err := json.Unmarshal(raw, &rows); err != nil {
			return nil, err
		}
		out := make(map[string]*tableRow, len(rows))
		for _, r := range rows {
			out[string(r.Key)] = &tableRow{raw: r.Value, text: r.Text}
		}
		return out, nil
	}
	var s globalTableRows
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	if s.Format != globalTableFormat {
		return nil, fmt.Errorf("unknown table format %d (this binary reads %d and the list before it)", s.Format, globalTableFormat)
	}
	out := map[string]*tableRow{}
	b := s.Rows
	next := func() ([]byte, bool) {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return nil, false
		}
		v := b[w : w+int(n) : w+int(n)]
		b = b[w+int(n):]
		return v, true
	}
	for len(b) > 0 {
		k, ok := next()
		if !ok || len(b) == 0 {
			return nil, errors.New("malformed table rows")
		}
		flags := b[0]
		b = b[1:]
		v, ok := next()
		if !ok || flags&^(globalRowText|globalRowNil) != 0 || (flags&globalRowNil != 0 && len(v) > 0) {
			return nil, errors.New("malformed table rows")
		}
		if flags&globalRowNil != 0 {
			v = nil
		}
		if _, dup := out[string(k)]; dup {
			return nil, fmt.Errorf("malformed table rows: key %q twice", k)
		}
		out[string(k)] = &tableRow{raw: v, text: flags&globalRowText != 0}
	}
	return out, nil
}
