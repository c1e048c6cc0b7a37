package operators

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// IntervalJoinType is the pipeline name of the interval join operator.
const IntervalJoinType = "interval_join"

// The join input roles (Traits.Inputs) and the interval join's keyed state
// names. Per key the rows of both sides live in one ValueState
// (IntervalJoinRowsState: the left side's list, then the right side's, so
// a record reads and writes its key's rows once; intervalKeyRows in
// memory), each side's list holding
// its rows in arrival order (cheap while a key holds few rows, the common
// case of many keys) or, once a key's side holds more than spillRows rows
// (a hot key), only an index row that counts them, the rows then in the
// side's MapState by event time (ms; the rows of one time in arrival
// order, as Flink's IntervalJoinOperator's MapState<Long,
// List<BufferEntry>>). IntervalJoinLeftState and IntervalJoinRightState
// are the layout of before (one ValueState per side, the same lists):
// a checkpoint holding them is moved into IntervalJoinRowsState at Open.
// The state names are part of the checkpoint format.
const (
	JoinLeft                     = "left"
	JoinRight                    = "right"
	IntervalJoinRowsState        = "interval_join.rows"
	IntervalJoinLeftState        = "interval_join.left"
	IntervalJoinRightState       = "interval_join.right"
	IntervalJoinLeftByTimeState  = "interval_join.left_by_time"
	IntervalJoinRightByTimeState = "interval_join.right_by_time"
)

// intervalJoinListRoom is the capacity a side's list gets at least when a
// row does not fit in it: the next rows are appended in place, without a
// new list per record, while the cleanups remove the first ones.
const intervalJoinListRoom = 4

// intervalJoinSpillRows is the most rows a key's side keeps in its list
// (ValueState) before they move to the by-time MapState: per record the
// list of the other side and of its own side are decoded whole, so a list
// of n rows costs O(n) per record; the by-time layout costs a range read
// and a bucket read per record (Pebble seeks and point reads that miss the
// write cache for a new time), which pays only for many rows.
const intervalJoinSpillRows = 32

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
		Doc:         "Joins the left and right records of equal keys whose event times satisfy left.ts + lower <= right.ts <= left.ts + upper (Flink's interval join); inner, left, right or full outer; output select(left, right) keyed by the join key; state bounded by the interval and removed by the watermark; late records to <operator>.late.",
		Traits:      Traits{Keyed: true, Inputs: [2]string{JoinLeft, JoinRight}, EventTime: true},
		Params:      func() any { return &IntervalJoinParams{Join: JoinInner} },
		State:       []string{IntervalJoinRowsState, IntervalJoinLeftByTimeState, IntervalJoinRightByTimeState, state.TimersStateName},
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
	// Valid marks a value known to be valid JSON (checked by the source
	// of the record it came from: runtime.Record.CheckedJSON), which
	// select reads without checking it again. Kept in memory only (the
	// Pebble write cache keeps it with the row), not serialized: a row
	// decoded from bytes is checked when read.
	Valid bool
	// Index marks interval_join's index row: the only row of a side's
	// list when the side's rows are in its by-time MapState; TS is then
	// the number of rows there.
	Index bool
	// rawSide, rawAt and rawLen remember where in Value the one field
	// the join's raw select reads of the row's side is (joinOutput.
	// rawFields): found when the row was the record being processed
	// (pinChecked), kept with the row so that its later pairs, as a
	// buffered row, neither scan nor check its value again. rawSide is 0
	// (none found), or 1 + the side (0 left, 1 right) the field was
	// found for; Value[rawAt:rawAt+rawLen] is the field's JSON as
	// fieldsJSON gives it. Kept in memory only, in the struct's padding
	// (joinRow stays 40 bytes), not serialized: a row decoded from bytes
	// has none. Valid because a row's value bytes never change (rows
	// are moved and their values copied whole: adoptRows).
	rawSide uint8
	rawLen  uint8
	rawAt   uint16
}

// joinRowsSerializer encodes a list of rows: a uvarint count, then per row
// its time (varint), a flags byte (1 matched, 2 text, 4 nil value, 8 index
// row), a uvarint length and the value's bytes. Name "join-rows-v1".
// Decoded values share one copy of the encoded bytes. It is a
// state.HeapSerializer (Copy, AppendKept, View, Size), writing the same
// bytes, so checkpoints are those of before.
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
		if r.Index {
			f |= 8
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
	// One copy for every value (the caller may reuse b).
	rows, rest, err := decodeJoinRows(append([]byte(nil), b...))
	if err != nil || len(rest) != 0 {
		return nil, errJoinRows
	}
	return rows, nil
}

// decodeJoinRows decodes the list of rows at the start of b (as
// joinRowsSerializer.Append writes it), whose values share b's memory,
// and returns the bytes after it.
func decodeJoinRows(b []byte) (rows []joinRow, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, nil, errJoinRows
	}
	b = b[k:]
	rows = make([]joinRow, 0, n)
	for range n {
		ts, k := binary.Varint(b)
		if k <= 0 {
			return nil, nil, errJoinRows
		}
		b = b[k:]
		if len(b) < 1 {
			return nil, nil, errJoinRows
		}
		f := b[0]
		l, k := binary.Uvarint(b[1:])
		if k <= 0 || l > uint64(len(b)-1-k) {
			return nil, nil, errJoinRows
		}
		b = b[1+k:]
		r := joinRow{TS: ts, Matched: f&1 != 0, Text: f&2 != 0, Index: f&8 != 0}
		if f&4 == 0 {
			r.Value = b[:l:l]
		}
		b = b[l:]
		rows = append(rows, r)
	}
	return rows, b, nil
}

// Copy implements state.HeapSerializer: a new list of v's rows (nil for
// nil), whose values share the memory of the rows of a known list with the
// same value memory (a list read with Value or Get, then appended to,
// marked matched or with rows removed: nobody changes a kept row's bytes)
// and are copied into one new buffer otherwise (the record just
// buffered). Known rows are matched in their order (a pointer per known
// list), so a copy costs O(len(v) + len(known rows)). Append cannot fail,
// so neither does Copy. With it the Pebble backend's write cache keeps a
// key's rows decoded: a record's reads of its key's lists neither copy nor
// decode them, and they are encoded only when the cache writes them.
func (joinRowsSerializer) Copy(v []joinRow, known [][]joinRow) ([]joinRow, error) {
	if v == nil {
		return nil, nil
	}
	out := make([]joinRow, len(v))
	copy(out, v)
	return adoptRows(out, known), nil
}

// joinRowKnownSkip is how far past its next row Copy looks for a row in
// a known list: rows removed from a list (a cleanup's) are at most a list's
// spill limit of rows; a new row, found nowhere, costs this at most per
// known list.
const joinRowKnownSkip = 2 * intervalJoinSpillRows

// joinRowKnown reports whether value is the memory of the value of a row
// of a known list, at most joinRowKnownSkip rows at or after next[k] in
// list k, moving next[k] past it.
func joinRowKnown(value []byte, known [][]joinRow, next []int) bool {
	for k, l := range known {
		for t := next[k]; t < len(l) && t < next[k]+joinRowKnownSkip; t++ {
			if sameBytes(value, l[t].Value) {
				next[k] = t + 1
				return true
			}
		}
	}
	return false
}

// AppendKept implements state.HeapSerializer: Append.
func (s joinRowsSerializer) AppendKept(dst []byte, v []joinRow) ([]byte, error) {
	return s.Append(dst, v)
}

// View implements state.HeapSerializer: a new slice of the kept rows
// (with room for one more: a record appends its row), so the caller may
// set a row's fields (Matched) or append rows; the values' bytes are the
// state's and must not be changed in place.
func (joinRowsSerializer) View(v []joinRow) []joinRow {
	if v == nil {
		return nil
	}
	return append(make([]joinRow, 0, len(v)+1), v...)
}

// Size implements state.HeapSerializer: the rows' structs and values.
func (joinRowsSerializer) Size(v []joinRow) int {
	n := 24 + 48*len(v)
	for i := range v {
		n += len(v[i].Value)
	}
	return n
}

// intervalListState returns the descriptor of an interval join side's
// list layout (a key's rows, or its index row, in one value).
func intervalListState(name string) state.ValueStateDescriptor[[]joinRow] {
	return state.ValueStateDescriptor[[]joinRow]{Name: name, Serializer: intervalRowsSerializer{}}
}

// intervalRowsSerializer is joinRowsSerializer (same name and bytes) whose
// View hands out the kept list itself, its capacity cut to its length so
// that an append copies: the interval join never changes a row of a list
// it read (probe copies the list before it marks a row matched), so
// reading a key's list from the Pebble write cache copies nothing.
type intervalRowsSerializer struct{ joinRowsSerializer }

// View implements state.HeapSerializer: v itself, capacity = length.
func (intervalRowsSerializer) View(v []joinRow) []joinRow { return v[:len(v):len(v)] }

// emptyRowValue is the value adoptRows gives a row with an empty value:
// zero bytes in memory of its own, never a slice of the record's buffer.
var emptyRowValue = []byte{}

// adoptRows is joinRowsSerializer.Copy for a list the interval join built
// for this write (a list marked or with rows removed is a new one) and
// never changes within its length after it: the list itself is kept, not
// copied, and only the values of its rows that are not rows of a known
// list (the record just buffered) are copied into one new buffer, their
// rows pointed at the copies.
func adoptRows(v []joinRow, known [][]joinRow) []joinRow {
	if v == nil {
		return nil
	}
	var next [4]int // per known list, the index its next match is looked for from
	if len(known) > len(next) {
		known = known[:len(next)]
	}
	n := 0
	var stack [4]int
	fresh := stack[:0] // the rows whose value is copied
	for i := range v {
		val := v[i].Value
		switch {
		case val == nil:
			continue
		case len(val) == 0:
			if unsafe.SliceData(val) != unsafe.SliceData(emptyRowValue) {
				// Not the record's memory: an empty slice of it (even
				// one of capacity 0) keeps its whole buffer alive. A
				// row already adopted holds emptyRowValue and is not
				// written again (it may be in a list an older view
				// reads).
				v[i].Value = emptyRowValue
			}
			continue
		case joinRowKnown(val, known, next[:]):
			continue
		}
		n += len(val)
		fresh = append(fresh, i)
	}
	if len(fresh) > 0 {
		buf := make([]byte, 0, n)
		for _, i := range fresh {
			start := len(buf)
			buf = append(buf, v[i].Value...)
			v[i].Value = buf[start:len(buf):len(buf)]
		}
	}
	return v
}

// intervalInlineRows is how many rows of each side a key's
// intervalKeyRows holds in its own memory: a key of the many-keys case
// (a row or two per side at a time) then lives in one allocation; a side
// with more rows moves them to a list of their own.
const intervalInlineRows = 3

// intervalKeyRows are the interval join's rows of one key, both sides, in
// one object: sides[0] the left side's list, sides[1] the right side's
// (each in arrival order, an index row when that side's rows are by time,
// or empty), each held in the object's own inline rows while it fits
// there. It is what IntervalJoinRowsState holds per key, as a pointer: the
// Pebble write cache keeps the object itself (no box, no copy per write;
// intervalKeyRowsSerializer) and the join changes it in place, so a visit of
// the key (a record's, a cleanup's) reads the cache's entry, then this
// object, whose rows are next to its header, and writes nothing new but
// the value of a record it buffers.
//
// Ownership: the object belongs to the state. The join changes only the
// object it has just read with Value for the current key, and writes it
// back (Update, or Clear once both sides are empty) before it reads
// another key, so what the cache holds, and serializes when it flushes,
// is the key's latest rows after every record and cleanup. A row's value
// bytes are the row's own (copied when the row is buffered) and never
// change.
type intervalKeyRows struct {
	sides [2][]joinRow
	// values is the bytes of the values of both sides' rows (Size).
	values int
	// borrowed is 1 + the side of the row appended last when its value is
	// still the record's (appendBorrowed), 0 when every row's value is its
	// own: Copy makes it the row's own, so that only a state keeping the
	// object copies it (a backend that serializes it copies the bytes
	// anyway).
	borrowed int
	inline   [2][intervalInlineRows]joinRow
}

// newIntervalKeyRows returns a key's empty rows.
func newIntervalKeyRows() *intervalKeyRows {
	k := &intervalKeyRows{}
	for side := range k.sides {
		k.sides[side] = k.inline[side][:0:intervalInlineRows]
	}
	return k
}

// empty reports whether neither side holds a row.
func (k *intervalKeyRows) empty() bool { return len(k.sides[0]) == 0 && len(k.sides[1]) == 0 }

// isInline reports whether side's list is in the object's inline rows.
func (k *intervalKeyRows) isInline(side int) bool {
	return unsafe.SliceData(k.sides[side]) == &k.inline[side][0]
}

// appendRow appends row to side's list, moving the list out of the inline
// rows (or into a larger list) when it is full. row's value must be the
// row's own (see intervalKeyRows).
func (k *intervalKeyRows) appendRow(side int, row joinRow) {
	rows := k.sides[side]
	if len(rows) == cap(rows) {
		rows = append(make([]joinRow, 0, max(2*len(rows), 2*intervalInlineRows)), rows...)
		if len(k.sides[side]) > 0 && k.isInline(side) {
			clear(k.inline[side][:])
		}
	}
	k.sides[side] = append(rows, row)
	k.values += len(row.Value)
}

// appendBorrowed is appendRow of row whose value is the record's (not yet
// the row's own): intervalKeyRowsSerializer.Copy copies it.
func (k *intervalKeyRows) appendBorrowed(side int, row joinRow) {
	k.appendRow(side, row)
	k.borrowed = side + 1
}

// ownBorrowed makes the value of the row appendBorrowed appended the
// row's own.
func (k *intervalKeyRows) ownBorrowed() {
	if k.borrowed == 0 {
		return
	}
	rows := k.sides[k.borrowed-1]
	rows[len(rows)-1].Value = ownValue(rows[len(rows)-1].Value)
	k.borrowed = 0
}

// setRows makes side's list rows (copied into the inline rows when they
// fit, else rows itself, which the object then owns).
func (k *intervalKeyRows) setRows(side int, rows []joinRow) {
	for i := range k.sides[side] {
		k.values -= len(k.sides[side][i].Value)
	}
	for i := range rows {
		k.values += len(rows[i].Value)
	}
	if len(rows) <= intervalInlineRows {
		in := k.inline[side][:len(rows):intervalInlineRows]
		copy(in, rows)
		clear(k.inline[side][len(rows):])
		k.sides[side] = in
		return
	}
	if k.isInline(side) {
		clear(k.inline[side][:])
	}
	k.sides[side] = rows
}

// setIndex makes side's list the index row of n rows in the side's
// by-time state, or empty for n <= 0.
func (k *intervalKeyRows) setIndex(side int, n int64) {
	if n <= 0 {
		k.setRows(side, nil)
		return
	}
	k.setRows(side, []joinRow{{TS: n, Index: true}})
}

// removeUntil removes side's rows at times at or before until, keeping the
// others in order, in place: the list's rows after them move down (a
// list out of the inline rows moves back when the rest fits there). It
// returns how many it removed.
func (k *intervalKeyRows) removeUntil(side int, until int64) int {
	rows := k.sides[side]
	n := 0
	for i := range rows {
		if rows[i].TS > until {
			rows[n] = rows[i]
			n++
		} else {
			k.values -= len(rows[i].Value)
		}
	}
	removed := len(rows) - n
	if removed == 0 {
		return 0
	}
	clear(rows[n:]) // no references to removed values
	k.sides[side] = rows[:n]
	if !k.isInline(side) && n <= intervalInlineRows {
		k.setRows(side, rows[:n])
	}
	return removed
}

// ownValue returns a copy of v for a buffered row (nil for nil; an empty
// value is emptyRowValue, never a slice of the record's buffer).
func ownValue(v []byte) []byte {
	switch {
	case v == nil:
		return nil
	case len(v) == 0:
		return emptyRowValue
	}
	return append(make([]byte, 0, len(v)), v...)
}

// intervalKeyRowsSerializer encodes a key's intervalKeyRows as the two lists
// joinRowsSerializer writes, left then right, one after the other (each
// list says its length): the bytes of the layout of before, whose value
// was the two lists themselves. Name "interval-join-sides-v1". Decoded
// rows share one copy of the encoded bytes. It is a state.HeapSerializer
// whose Copy and View hand over the object itself: the Pebble write cache
// keeps the object the join changes in place (see intervalKeyRows for why
// that is safe), serializing it only when it writes it to Pebble.
type intervalKeyRowsSerializer struct{}

func (intervalKeyRowsSerializer) Name() string { return "interval-join-sides-v1" }

// Append implements state.Serializer (nil: two empty lists).
func (intervalKeyRowsSerializer) Append(dst []byte, k *intervalKeyRows) ([]byte, error) {
	var sides [2][]joinRow
	if k != nil {
		sides = k.sides
	}
	dst, _ = joinRowsSerializer{}.Append(dst, sides[0])
	return joinRowsSerializer{}.Append(dst, sides[1])
}

// Decode implements state.Serializer.
func (intervalKeyRowsSerializer) Decode(b []byte) (*intervalKeyRows, error) {
	k := newIntervalKeyRows()
	// One copy for every value (the caller may reuse b).
	rest := append([]byte(nil), b...)
	for side := range k.sides {
		rows, r, err := decodeJoinRows(rest)
		if err != nil {
			return nil, err
		}
		k.setRows(side, rows)
		rest = r
	}
	if len(rest) != 0 {
		return nil, errJoinRows
	}
	return k, nil
}

// Copy implements state.HeapSerializer: v itself (see intervalKeyRows),
// the value of a row buffered with it borrowed made the row's own.
// Append cannot fail, so neither does Copy.
func (intervalKeyRowsSerializer) Copy(v *intervalKeyRows, _ []*intervalKeyRows) (*intervalKeyRows, error) {
	if v != nil {
		v.ownBorrowed()
	}
	return v, nil
}

// AppendKept implements state.HeapSerializer: Append.
func (s intervalKeyRowsSerializer) AppendKept(dst []byte, v *intervalKeyRows) ([]byte, error) {
	return s.Append(dst, v)
}

// View implements state.HeapSerializer: v itself (see intervalKeyRows).
func (intervalKeyRowsSerializer) View(v *intervalKeyRows) *intervalKeyRows { return v }

// Size implements state.HeapSerializer: the object, the rows of a list out
// of its inline rows (their capacity) and the rows' values (counted by the
// object as its rows change: no row is visited).
func (intervalKeyRowsSerializer) Size(v *intervalKeyRows) int {
	if v == nil {
		return 0
	}
	n := int(unsafe.Sizeof(intervalKeyRows{})) + v.values
	for side, rows := range v.sides {
		if !v.isInline(side) {
			n += 24 + int(unsafe.Sizeof(joinRow{}))*cap(rows)
		}
	}
	return n
}

// intervalRowsState returns the descriptor of the interval join's rows of
// a key (IntervalJoinRowsState).
func intervalRowsState() state.ValueStateDescriptor[*intervalKeyRows] {
	return state.ValueStateDescriptor[*intervalKeyRows]{Name: IntervalJoinRowsState, Serializer: intervalKeyRowsSerializer{}}
}

// joinSideState returns the descriptor of a side's rows by time: the
// window start (window_join) or the event time (interval_join), ms.
func joinSideState(name string) state.MapStateDescriptor[int64, []joinRow] {
	return state.MapStateDescriptor[int64, []joinRow]{Name: name, KeySerializer: state.Int64Serializer{}, ValueSerializer: joinRowsSerializer{}}
}

// IntervalJoin is the interval_join function (Flink's IntervalJoinOperator
// behind KeyedStream.intervalJoin, extended to outer joins): a
// KeyedCoProcessFunction whose first input is the left side, second the
// right. Per key, each side buffers its records with their event times. A
// left record at time t joins every buffered right record at rt with t +
// lower <= rt <= t + upper, a right record every buffered left record for
// which that holds; each pair emits select(left, right) at max(t, rt),
// keyed by the join key. A record is late when its time is at or before
// the watermark (or it has none): it goes unchanged to the side output
// LateOutput, or is counted and logged (lateRecords), and joins nothing. A
// left row is kept until the watermark reaches t + upper, a right row
// until it reaches rt - lower: then no record of the other side that is
// not late can match it any more, so the join's cleanup removes it and,
// for the outer side(s) of the join kind, emits it with the other side
// null at its own time if it matched nothing. State is so bounded by the
// interval plus the watermark's delay, and empty once the watermark passes
// the last row's interval. The cleanups are not event-time timers but an
// in-memory queue (expiryQueue: per end of interval, the keys and sides
// of the rows that end then), run by OnWatermark when the watermark reaches them, before
// it is forwarded; the queue is not checkpointed but rebuilt from the
// rows at Open (also after a rescale), so a record writes nothing for its
// cleanup (Flink's heap timers, kept by the function).
//
// Layout and cost: a key's side keeps up to spillRows rows in one list
// (arrival order), both sides' lists in one object per key
// (intervalKeyRows, in one ValueState), the first rows of each side in
// the object itself: a record reads the key's object, probes the other
// side's list and appends to its own, a row's cleanup removes it from its
// side's list, all in place in the object the backend's write cache keeps
// for a key seen recently (on Pebble: intervalKeyRowsSerializer is a
// state.HeapSerializer handing the object over as it is, serialized only
// when the cache writes it), so neither writes anything new but a
// buffered record's value; a key created and removed between two
// checkpoints never reaches Pebble. A side with more rows (a hot key)
// moves them into a MapState by event time, the list keeping
// an index row with their count: a record then range-reads only the other
// side's times in its interval (state.MapRange: only those rows decoded)
// and reads and writes its own time's bucket, a cleanup removes exactly one
// bucket per side; the cost does not grow with the rows buffered, except
// that the hashmap backend compares, without decoding, every buffered time
// of the key with the interval's bounds. A side goes back to the list when
// the cleanups have removed all of its by-time rows.
//
// A record on whose pair select fails is a bad record (eval_error) under
// its source's on_error policy, all or nothing: it is not buffered, none
// of its pairs is emitted and no row of the other side counts as matched
// by it (its outputs and marks are held until every pair succeeded).
// Select failing on an unmatched row of an outer join, emitted by
// a cleanup, fails the task.
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
	backend      state.KeyedStateBackend
	// expiry holds the cleanup entries of the buffered rows, per end time
	// (OnWatermark); rebuilt from the rows at Open.
	expiry   expiryQueue
	keyRows  state.ValueState[*intervalKeyRows] // both sides' lists of the current key
	byTime   [2]state.MapState[int64, []joinRow]
	output   joinOutput
	pending  intervalPending // the current record's (process)
	lateRecs *lateRecords
	gauge    prometheus.Gauge // nil without Metrics
	rows     int64            // rows buffered by the subtask
	row      joinRow          // the record being processed
	// spillRows is the most rows a side's list holds (intervalJoinSpillRows
	// unless a test sets it before Open).
	spillRows int
	// rowSer, if not nil, replaces joinRowsSerializer for the by-time
	// states (same name and bytes; tests count decodes through it).
	rowSer state.Serializer[[]joinRow]
	// marked is probe's scratch list of the rows it marked matched.
	marked []int
}

// NewIntervalJoin returns the interval join of params p (checked by
// CheckParams).
func NewIntervalJoin(p IntervalJoinParams) *IntervalJoin {
	if p.Join == "" {
		p.Join = JoinInner
	}
	return &IntervalJoin{p: p, lower: p.Lower.Milliseconds(), upper: p.Upper.Milliseconds(), output: joinOutput{sel: p.Select}, spillRows: intervalJoinSpillRows}
}

// Open implements KeyedCoProcessFunction; it counts the rows restored into
// the subtask's key groups for the buffered-rows gauge.
func (j *IntervalJoin) Open(ctx OpenContext) error {
	j.timers = ctx.TimerService()
	if j.timers == nil {
		return fmt.Errorf("operators: %s %s: no timer service", IntervalJoinType, ctx.Operator)
	}
	j.rows = 0
	j.backend = ctx.Backend
	v, err := state.GetValueState(ctx.Backend, intervalRowsState())
	if err != nil {
		return fmt.Errorf("operators: %s %s: %w", IntervalJoinType, ctx.Operator, err)
	}
	j.keyRows = v
	for i, name := range []string{IntervalJoinLeftByTimeState, IntervalJoinRightByTimeState} {
		d := joinSideState(name)
		if j.rowSer != nil {
			d.ValueSerializer = j.rowSer
		}
		m, err := state.GetMapState(ctx.Backend, d)
		if err != nil {
			return fmt.Errorf("operators: %s %s: %w", IntervalJoinType, ctx.Operator, err)
		}
		j.byTime[i] = m
	}
	for side, name := range [2]string{IntervalJoinLeftState, IntervalJoinRightState} {
		if err := j.migrate(ctx.Backend, side, name); err != nil {
			return fmt.Errorf("operators: %s %s: moving the rows of a checkpoint of the per-side layout: %w", IntervalJoinType, ctx.Operator, err)
		}
	}
	if err := j.rebuildExpiry(ctx.Backend); err != nil {
		return fmt.Errorf("operators: %s %s: restored rows: %w", IntervalJoinType, ctx.Operator, err)
	}
	j.lateRecs = newLateRecords(ctx.Operator, LateOutput, j.Metrics, j.Logger, j.timers.CurrentProcessingTime)
	if j.Metrics != nil {
		j.gauge = j.Metrics.JoinRows(ctx.Operator, ctx.Subtask)
	}
	j.addRows(0)
	return nil
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

// migrate moves the lists of side in the per-side layout of before (state
// old: one ValueState per side, restored from a checkpoint written before
// IntervalJoinRowsState) into the side's list in IntervalJoinRowsState
// (after the rows already there, if any) and clears them. Nothing to do
// when the backend holds no state old.
func (j *IntervalJoin) migrate(b state.KeyedStateBackend, side int, old string) error {
	if !state.HasState(b, old) {
		return nil
	}
	return state.ApplyToAllValueKeys(b, intervalListState(old), func(_ []byte, s state.ValueState[[]joinRow]) error {
		rows, ok, err := s.Value()
		if err != nil || !ok {
			return err
		}
		k, _, err := j.keyRows.Value()
		if err != nil {
			return err
		}
		if k == nil {
			k = newIntervalKeyRows()
		}
		for _, r := range rows {
			r.Value = ownValue(r.Value)
			k.appendRow(side, r)
		}
		if err := j.keyRows.Update(k); err != nil {
			return err
		}
		return s.Clear()
	})
}

// spilled reports whether rows, a side's list, is an index row: the side's
// rows are in its by-time state, n of them.
func spilled(rows []joinRow) (n int64, ok bool) {
	if len(rows) == 1 && rows[0].Index {
		return rows[0].TS, true
	}
	return 0, false
}

// process buffers rec of side (0 left, 1 right), joins it with the other
// side's rows in its interval and queues its cleanup.
func (j *IntervalJoin) process(side int, rec runtime.Record, out Collector) error {
	wm := j.timers.CurrentWatermark()
	if rec.Timestamp.IsZero() || (wm != runtime.MinWatermark && !rec.Timestamp.After(wm)) {
		return j.lateRecs.handle(rec, wm, out)
	}
	t := rec.Timestamp.UnixMilli()
	// The other side's times this record joins: a left at t joins right
	// in [t+lower, t+upper]; a right at t joins left in [t-upper, t-lower].
	lo, hi := t+j.lower, t+j.upper
	if side == 1 {
		lo, hi = t-j.upper, t-j.lower
	}
	row := &j.row
	*row = joinRow{TS: t, Value: rec.Value, Text: rec.Format == runtime.FormatText, Valid: rec.CheckedJSON()}
	// Both sides' lists of the key, read once: the state's own object,
	// changed in place and written back below (intervalKeyRows).
	k, _, err := j.keyRows.Value()
	if err != nil {
		return err
	}
	if k == nil {
		k = newIntervalKeyRows()
	}
	j.output.pinChecked(row, row.Valid) // decoded once for all its pairs
	// All or nothing: the pairs wait in j.pending, and the other side's
	// rows are marked matched only once every pair's select succeeded (a
	// by-time bucket's in a copy, written below); a failing select
	// leaves neither an output nor a mark
	// (TestIntervalJoinSelectFailureAllOrNothing).
	j.pending.recs = j.pending.recs[:0]
	err = j.probe(side, row, k.sides[1-side], rec.Key, lo, hi, &j.pending)
	looked := j.output.pinnedRawSide >= 0 // its raw field, by a pair
	j.output.pin(nil)
	if err != nil {
		j.pending.reset()
		return err
	}
	if err := j.putBuckets(1 - side); err != nil {
		return err
	}
	for _, o := range j.pending.recs {
		if err := out.Collect(o); err != nil {
			j.pending.reset()
			return err
		}
	}
	j.pending.reset()
	if !j.p.Join.outer(side) {
		row.Matched = false // not tracked for an inner side
	}
	if !looked {
		j.output.noteBuffered(row, side)
	}
	if err := j.buffer(side, k, *row); err != nil {
		return err
	}
	if err := j.keyRows.Update(k); err != nil {
		return err
	}
	j.addRows(1)
	j.expiry.push(j.end(side, t), rec.Key, uint8(side))
	return nil
}

// probe emits the pairs of row (of side) with the other side's rows at
// times in [lo, hi] (rows: that side's list, the state's), marking the
// rows matched when every pair succeeded.
func (j *IntervalJoin) probe(side int, row *joinRow, rows []joinRow, key []byte, lo, hi int64, out Collector) error {
	if _, ok := spilled(rows); ok {
		return j.probeByTime(side, row, key, lo, hi, out)
	}
	outer := j.p.Join.outer(1 - side)
	j.marked = j.marked[:0]
	for i := range rows {
		if rows[i].TS < lo || rows[i].TS > hi {
			continue
		}
		if err := j.pair(side, row, &rows[i], key, out); err != nil {
			return err
		}
		if outer && !rows[i].Matched {
			j.marked = append(j.marked, i)
		}
	}
	for _, i := range j.marked {
		rows[i].Matched = true
	}
	return nil
}

// probeByTime is probe for the other side's rows by time: only its
// buckets in [lo, hi] are read and decoded. A bucket in which a row gets
// its first match is marked in a copy, held in j.pending.buckets and
// written by putBuckets once every pair succeeded.
func (j *IntervalJoin) probeByTime(side int, row *joinRow, key []byte, lo, hi int64, out Collector) error {
	other, outer := j.byTime[1-side], j.p.Join.outer(1-side)
	for e, err := range state.MapRange(other, lo, hi) {
		if err != nil {
			return err
		}
		rows, copied := e.Value, false
		for i := range rows {
			if err := j.pair(side, row, &rows[i], key, out); err != nil {
				return err
			}
			if outer && !rows[i].Matched {
				if !copied {
					rows, copied = slices.Clone(rows), true
				}
				rows[i].Matched = true
			}
		}
		if copied {
			j.pending.buckets = append(j.pending.buckets, pendingBucket{at: e.Key, rows: rows})
		}
	}
	return nil
}

// putBuckets writes the buckets of side probeByTime marked (the current
// record's pairs all emitted).
func (j *IntervalJoin) putBuckets(side int) error {
	for _, b := range j.pending.buckets {
		if err := j.byTime[side].Put(b.at, b.rows); err != nil {
			return err
		}
	}
	j.pending.buckets = j.pending.buckets[:0]
	return nil
}

// intervalPending is the current record's outputs and marked buckets,
// held until every pair's select succeeded (as the regular join's
// joinPending). It is the Collector the record's pairs are emitted to.
type intervalPending struct {
	recs    []runtime.Record
	buckets []pendingBucket
}

// pendingBucket is a by-time bucket at time at with rows marked matched.
type pendingBucket struct {
	at   int64
	rows []joinRow
}

// Collect implements Collector: rec is held.
func (p *intervalPending) Collect(rec runtime.Record) error {
	p.recs = append(p.recs, rec)
	return nil
}

// reset drops what is held (clearing the references to outputs' values).
func (p *intervalPending) reset() {
	clear(p.recs)
	p.recs = p.recs[:0]
	clear(p.buckets)
	p.buckets = p.buckets[:0]
}

// pair emits the pair of row (of side) and o (of the other side) and
// marks row matched; the caller marks o once every pair of row succeeded.
func (j *IntervalJoin) pair(side int, row, o *joinRow, key []byte, out Collector) error {
	l, r := row, o
	if side == 1 {
		l, r = o, row
	}
	if err := j.emit(key, l, r, max(row.TS, o.TS), out); err != nil {
		return err
	}
	row.Matched = true
	return nil
}

// buffer adds row (the join's copy of the record being processed) to
// side's rows of the current key (k): appended (its value copied by the
// state's Copy when the state keeps k, else serialized), while
// the side's list holds fewer than spillRows rows, else put in its bucket
// in the by-time state (the list's rows moved there first), the list
// then an index row.
func (j *IntervalJoin) buffer(side int, k *intervalKeyRows, row joinRow) error {
	m := j.byTime[side]
	rows := k.sides[side]
	n, ok := spilled(rows)
	if !ok && len(rows) < j.spillRows {
		k.appendBorrowed(side, row)
		return nil
	}
	if !ok {
		// Move the list into the by-time state: by time, arrival order
		// kept within a time (the state copies what it is put).
		rows = append(slices.Clone(rows), row)
		slices.SortStableFunc(rows, func(a, b joinRow) int { return cmp.Compare(a.TS, b.TS) })
		for i := 0; i < len(rows); {
			e := i + 1
			for e < len(rows) && rows[e].TS == rows[i].TS {
				e++
			}
			if err := m.Put(rows[i].TS, rows[i:e:e]); err != nil {
				return err
			}
			i = e
		}
		k.setIndex(side, int64(len(rows)))
		return nil
	}
	have, _, err := m.Get(row.TS)
	if err != nil {
		return err
	}
	if err := m.Put(row.TS, append(have, row)); err != nil {
		return err
	}
	k.setIndex(side, n+1)
	return nil
}

// OnTimer implements TimerFunction for the event-time timers of a
// checkpoint written before the cleanup queue (OnWatermark) replaced them:
// such a checkpoint holds a timer per row at the end of its interval, and
// the timer at ts removes the left rows at ts - upper (or before) and the
// right rows at ts + lower (or before), the unmatched ones of an outer
// side emitted first (Flink's IntervalJoinOperator.onEventTime). The
// queue, rebuilt from the same rows, removes them too; whichever comes
// first finds them, the other nothing.
func (j *IntervalJoin) OnTimer(ctx context.Context, ts time.Time, tc TimerContext, out Collector) error {
	at := ts.UnixMilli()
	for side, until := range [2]int64{at - j.upper, at + j.lower} {
		if err := j.expireSide(side, until, tc.Key, out); err != nil {
			return err
		}
	}
	return nil
}

// expireSide removes the current key's rows of side at times at or before
// until, emitting the unmatched ones of an outer side first, at their own
// time: in the by-time layout exactly the bucket at until.
func (j *IntervalJoin) expireSide(side int, until int64, key []byte, out Collector) error {
	k, ok, err := j.keyRows.Value()
	if err != nil || !ok {
		return err
	}
	rows := k.sides[side]
	if n, ok := spilled(rows); ok {
		return j.expireBucket(k, side, until, n, key, out)
	}
	removed := 0
	for i := range rows {
		if rows[i].TS > until {
			continue
		}
		removed++
		if err := j.expire(side, &rows[i], key, out); err != nil {
			return err
		}
	}
	if removed == 0 {
		return nil
	}
	k.removeUntil(side, until)
	if err := j.writeKey(k); err != nil {
		return err
	}
	j.addRows(-int64(removed))
	return nil
}

// writeKey writes the current key's rows k, or clears its entry when both
// sides are empty.
func (j *IntervalJoin) writeKey(k *intervalKeyRows) error {
	if k.empty() {
		return j.keyRows.Clear()
	}
	return j.keyRows.Update(k)
}

// expireBucket removes side's by-time rows at time bucket (n rows in the
// by-time state before), emitting the unmatched ones of an outer side, and
// puts the side back to an empty list when none are left (k: the key's
// rows).
func (j *IntervalJoin) expireBucket(k *intervalKeyRows, side int, bucket, n int64, key []byte, out Collector) error {
	m := j.byTime[side]
	rows, ok, err := m.Get(bucket)
	if err != nil || !ok {
		return err
	}
	for i := range rows {
		if err := j.expire(side, &rows[i], key, out); err != nil {
			return err
		}
	}
	if err := m.Remove(bucket); err != nil {
		return err
	}
	j.addRows(-int64(len(rows)))
	k.setIndex(side, n-int64(len(rows)))
	return j.writeKey(k)
}

// expire emits row of side, whose interval the watermark passed, with the
// other side null if the side is an outer one and it matched nothing.
func (j *IntervalJoin) expire(side int, row *joinRow, key []byte, out Collector) error {
	if !j.p.Join.outer(side) || row.Matched {
		return nil
	}
	l, r := row, (*joinRow)(nil)
	if side == 1 {
		l, r = nil, row
	}
	return j.emit(key, l, r, row.TS, out)
}

// emit writes select(left, right) (either may be nil: null) with key and
// time ts (ms).
func (j *IntervalJoin) emit(key []byte, left, right *joinRow, ts int64, out Collector) error {
	return j.output.emit(key, left, right, ts, "", out)
}

// joinOutput builds a join's output records: the value
// {"left": <left>, "right": <right><extra>} (extra: more fields, each
// starting with a comma), or the result of select over it. Select is
// evaluated over that object without building it: the expression sees a
// map of left and right, each row's value as decodeValue gives it (JSON
// decoded, a text value or a value that is not JSON as a string, nil as
// null) but decoded only as far as select reads it (joinSide: a JSON
// object is a lazyObject, whose field reads decode that field alone), and
// the extra fields decoded once per distinct extra, so neither side's JSON
// is copied into a combined value and parsed again. The row pinned last
// (the record a join is processing, paired with several rows) keeps its
// side's Doc for all its pairs, so a field is decoded once however many
// pairs read it.
type joinOutput struct {
	sel Expression
	buf []byte
	// slab is the block select's results are written into (selectValue).
	slab outputSlab

	in     expression.Input
	env    expression.Env
	joined map[string]any
	// extra is the last extra string and extraVals its fields decoded.
	extra     string
	extraVals map[string]any
	// sides are the scratch space of a pair's left and right rows that are
	// not pinned, pinnedSide that of the pinned row.
	sides      [2]joinSide
	pinnedSide joinSide
	// pinned is the row whose value as select sees it pinnedVal holds
	// (pinnedOK; a lazyObject of pinnedSide's Doc for an object).
	pinned    *joinRow
	pinnedVal any
	pinnedOK  bool
	// pinnedValid: the pinned row's value is known valid JSON (its
	// record's runtime.Record.CheckedJSON), not checked again.
	pinnedValid bool
	// pinnedOwn: the pinned row is the join's own copy of the record
	// being processed (pinChecked), not a buffered row of the state: the
	// place of its raw field may be written into it (joinRow.rawAt).
	pinnedOwn bool

	// raw is select's raw form (tablejoin_raw.go), compiled on the first
	// emit (rawDone); nil when it has none, or noRaw (tests: select is
	// always evaluated). rawVals and rawNum are the scratch space of the
	// fields of a pair's unpinned left and right rows; pinnedRaw and
	// pinnedRawNum hold the pinned row's, found once per pin
	// (pinnedRawSide: the side they were found for, -1 none yet;
	// pinnedRawOK: the raw select can write them).
	raw           *rawSelect
	rawDone       bool
	noRaw         bool
	rawVals       [2][][]byte
	rawNum        [2][]byte
	pinnedRaw     [][]byte
	pinnedRawNum  []byte
	pinnedRawSide int
	pinnedRawOK   bool
	// rawExtra is the extra string whose fields the raw select reads
	// rawExtraVals holds (rawExtraOK: it can write them; rawExtraNum
	// their integers), found once per distinct extra.
	rawExtra     string
	rawExtraVals [][]byte
	rawExtraNum  []byte
	rawExtraOK   bool
	// rawHits counts the outputs the raw select wrote (tests).
	rawHits int
}

// pin makes the next emits decode row (the record being processed) once,
// however many pairs it makes; row must not change until the next pin.
func (o *joinOutput) pin(row *joinRow) {
	o.pinned, o.pinnedVal, o.pinnedOK, o.pinnedValid, o.pinnedOwn = row, nil, false, false, false
	o.pinnedRawSide = -1
}

// pinChecked is pin for the row of a record whose value is known valid
// JSON when valid is true (runtime.Record.CheckedJSON: checked by its
// source, the mark crossing the key_by): select reads it without checking
// the JSON again. row is the join's own (not a row of its state, which
// it must not change in place): the raw select notes in it where its
// field is (joinRow.rawAt), for the pairs it makes once buffered.
func (o *joinOutput) pinChecked(row *joinRow, valid bool) {
	o.pin(row)
	o.pinnedValid, o.pinnedOwn = valid, true
}

// value returns row's value as select sees it (side 0 left, 1 right):
// what decodeValue returns or a lazyObject standing for it, valid until
// the next value of that side (the pinned row's: until the next pin).
func (o *joinOutput) value(row *joinRow, side int) any {
	if row == nil {
		return nil
	}
	if row != o.pinned {
		return o.sides[side].checked(row.Value, row.Text, row.Valid)
	}
	if !o.pinnedOK {
		o.pinnedVal, o.pinnedOK = o.pinnedSide.checked(row.Value, row.Text, o.pinnedValid), true
	}
	return o.pinnedVal
}

// emit writes the output of the pair (left, right) (either may be nil:
// null) with key and time ts (ms).
func (o *joinOutput) emit(key []byte, left, right *joinRow, ts int64, extra string, out Collector) error {
	if !o.sel.IsSet() {
		b := append(o.buf[:0], `{"left":`...)
		b = appendRowJSON(b, left)
		b = append(b, `,"right":`...)
		b = appendRowJSON(b, right)
		b = append(b, extra...)
		b = append(b, '}')
		o.buf = b
		return out.Collect(runtime.Record{Key: key, Value: append([]byte(nil), b...), Timestamp: time.UnixMilli(ts)})
	}
	if value, done := o.rawValue(left, right, extra); done {
		return out.Collect(runtime.Record{Key: key, Value: value, Timestamp: time.UnixMilli(ts)})
	}
	if o.joined == nil {
		o.joined = map[string]any{}
	}
	if extra != o.extra || (extra != "" && o.extraVals == nil) {
		if err := o.setExtra(extra); err != nil {
			return err
		}
	}
	o.joined["left"], o.joined["right"] = o.value(left, 0), o.value(right, 1)
	o.in = expression.Input{Value: o.joined, Key: key, Timestamp: time.UnixMilli(ts)}
	o.env.Reset(&o.in)
	// Cleared after encoding: the result may be the joined map itself (value).
	value, err := o.selectValue()
	o.joined["left"], o.joined["right"] = nil, nil
	if err != nil {
		var ee *expression.EvalError
		if errors.As(err, &ee) {
			return EvalRecordError(err)
		}
		return resultError(o.sel, "select", err.Error())
	}
	return out.Collect(runtime.Record{Key: key, Value: value, Timestamp: time.UnixMilli(ts)})
}

// rawValue writes select's result for the pair (left, right) with the raw
// select (tablejoin_raw.go) into o.slab, as selectValue would have
// written it: no expression.Doc of either row, no evaluation. done false
// when select has no raw form or the raw select gives up on the pair (a
// missing left row, a missing right row a field is read of, a text
// value, a row that is not a valid JSON object or holds a field the raw
// select does not write: fieldsJSON; a field of the join's own that
// extra, as emit takes it, does not hold as such a value); select is
// then evaluated, whose result or error counts.
func (o *joinOutput) rawValue(left, right *joinRow, extra string) (value []byte, done bool) {
	o.compileRaw()
	r := o.raw
	if r == nil {
		return nil, false
	}
	// The extra fields are checked even when select reads none of them:
	// evaluating select fails on extra fields that do not decode.
	if extra != o.rawExtra || o.rawExtraVals == nil {
		o.rawExtra = extra
		o.rawExtraVals, o.rawExtraNum, o.rawExtraOK = rowFieldsJSON([]byte("{"+extra[min(1, len(extra)):]+"}"), false, r.extra, o.rawExtraVals, o.rawExtraNum)
		if o.rawExtraVals == nil {
			o.rawExtraVals = [][]byte{} // found, none read
		}
	}
	if !o.rawExtraOK {
		return nil, false
	}
	ev := o.rawExtraVals
	lv, ok := o.rawFields(left, 0)
	if !ok {
		return nil, false
	}
	if right == nil {
		if r.rightNeeded() {
			return nil, false // select fails on the missing row
		}
		o.rawHits++
		return r.write(&o.slab, lv, nil, ev, false), true
	}
	rv, ok := o.rawFields(right, 1)
	if !ok {
		return nil, false
	}
	o.rawHits++
	return r.write(&o.slab, lv, rv, ev, true), true
}

// compileRaw compiles select's raw form on first use (rawDone).
func (o *joinOutput) compileRaw() {
	if !o.rawDone {
		o.rawDone, o.pinnedRawSide = true, -1
		if !o.noRaw {
			o.raw = compileRawSelect(o.sel.Program().Source())
		}
	}
}

// noteBuffered notes in row, the join's own copy of the record about to
// be buffered as side, where the one field the raw select reads of that
// side is (noteRawField), when the record's pairs did not look for it (it
// paired with nothing): found now, while its value is in the CPU's
// cache, rather than by each later pair with it as a buffered row, whose
// value is cold by then. Only for a value known to be valid JSON
// (joinRow.Valid, checked by its source): another would be validated for
// pairs that may never come. Nothing when select has no raw form or
// reads more than one field of side.
func (o *joinOutput) noteBuffered(row *joinRow, side int) {
	if row.rawSide != 0 || !row.Valid || row.Text || row.Value == nil || !o.sel.IsSet() {
		return
	}
	o.compileRaw()
	if o.raw == nil {
		return
	}
	names := o.raw.left
	if side == 1 {
		names = o.raw.right
	}
	if len(names) != 1 {
		return
	}
	var ok bool
	o.rawVals[side], o.rawNum[side], ok = rowFieldsJSON(row.Value, true, names, o.rawVals[side], o.rawNum[side])
	if ok {
		row.noteRawField(side, o.rawVals[side])
	}
}

// rawFields returns the JSON of the fields the raw select reads of row as
// side (0 left, 1 right; fieldsJSON), false when it cannot write them; a
// side none of whose fields is read needs no row. The pinned row's are
// found once per pin; they and the others are valid until the next call
// for that side (the pinned row's: until the next pin).
func (o *joinOutput) rawFields(row *joinRow, side int) ([][]byte, bool) {
	names := o.raw.left
	if side == 1 {
		names = o.raw.right
	}
	if len(names) == 0 {
		return nil, true
	}
	if row == nil || row.Text || row.Value == nil {
		return nil, false
	}
	valid := row.Valid
	if row == o.pinned {
		if o.pinnedRawSide < 0 {
			o.pinnedRawSide = side
			o.pinnedRaw, o.pinnedRawNum, o.pinnedRawOK = rowFieldsJSON(row.Value, valid || o.pinnedValid, names, o.pinnedRaw, o.pinnedRawNum)
			if o.pinnedOwn && o.pinnedRawOK {
				row.noteRawField(side, o.pinnedRaw)
			}
		}
		if o.pinnedRawSide == side {
			return o.pinnedRaw, o.pinnedRawOK
		}
		// The pinned row on its other side too (a pair of a row with
		// itself): found in that side's scratch space, the pinned side's
		// fields kept.
		valid = valid || o.pinnedValid
	}
	if f, ok := row.rawField(side); ok && len(names) == 1 {
		vals := append(o.rawVals[side][:0], f)
		o.rawVals[side] = vals
		return vals, true
	}
	var ok bool
	o.rawVals[side], o.rawNum[side], ok = rowFieldsJSON(row.Value, valid, names, o.rawVals[side], o.rawNum[side])
	return o.rawVals[side], ok
}

// noteRawField notes in r where the one field the raw select reads of
// r as side is in its value (vals: what fieldsJSON found, r.Value's
// bytes unless re-encoded), when there is one such field and it fits
// joinRow's rawAt and rawLen; otherwise nothing.
func (r *joinRow) noteRawField(side int, vals [][]byte) {
	if len(vals) != 1 || len(vals[0]) == 0 || len(vals[0]) > math.MaxUint8 {
		return
	}
	f, v := vals[0], r.Value
	at := uintptr(unsafe.Pointer(unsafe.SliceData(f))) - uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	if len(f) > len(v) || at > uintptr(len(v)-len(f)) || at > math.MaxUint16 {
		return // not in the value (an integer written again), or too far in
	}
	r.rawSide, r.rawAt, r.rawLen = uint8(side)+1, uint16(at), uint8(len(f))
}

// rawField returns the field noteRawField noted in r for side, false
// when none was.
func (r *joinRow) rawField(side int) ([]byte, bool) {
	if r.rawSide != uint8(side)+1 || int(r.rawAt)+int(r.rawLen) > len(r.Value) {
		return nil, false
	}
	return r.Value[r.rawAt : int(r.rawAt)+int(r.rawLen) : int(r.rawAt)+int(r.rawLen)], true
}

// rowFieldsJSON is fieldsJSON of a row's value raw for names, into vals
// (grown to len(names)) and num, checking raw is valid JSON first unless
// valid says it is known to be (joinRow.Valid); a value gjson does not
// find valid is left to select, as rawSelect.rightJSON leaves it.
func rowFieldsJSON(raw []byte, valid bool, names []string, vals [][]byte, num []byte) ([][]byte, []byte, bool) {
	if cap(vals) < len(names) {
		vals = make([][]byte, len(names))
	}
	vals = vals[:len(names)]
	if !valid && !gjson.ValidBytes(raw) {
		return vals, num, false
	}
	return fieldsJSON(raw, names, vals, num)
}

// selectValue evaluates select on o.env and returns its result's JSON,
// written into o.slab (outputSlab.evalJSON).
func (o *joinOutput) selectValue() ([]byte, error) {
	return o.slab.evalJSON(o.sel.Program(), &o.env)
}

// setExtra makes the joined map's fields besides left and right those of
// extra (",\"name\":value..." as emit takes it).
func (o *joinOutput) setExtra(extra string) error {
	for k := range o.extraVals {
		delete(o.joined, k)
	}
	o.extra, o.extraVals = extra, nil
	if extra == "" {
		return nil
	}
	v, err := expression.DecodeJSON([]byte("{" + extra[1:] + "}"))
	if err != nil {
		return fmt.Errorf("operators: join output fields %s: %w", extra, err)
	}
	o.extraVals, _ = v.(map[string]any)
	for k, e := range o.extraVals {
		o.joined[k] = e
	}
	return nil
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
