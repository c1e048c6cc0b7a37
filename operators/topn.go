package operators

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/tidwall/gjson"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// TopNType is the pipeline name of the top_n operator.
const TopNType = "top_n"

// TopNStateName is the top_n operator's MapState: per key, from a window's
// start (ms since the epoch; 0 without window) to its ranking.
const TopNStateName = "top_n"

// TopNMaxN bounds n: a ranking is kept and rewritten whole per record.
const TopNMaxN = 1000

// TopNOrder is the order param of the top_n operator.
type TopNOrder string

// The values of TopNOrder.
const (
	// TopNDesc ranks the highest by first (the default).
	TopNDesc TopNOrder = "desc"
	// TopNAsc ranks the lowest by first.
	TopNAsc TopNOrder = "asc"
)

// UnmarshalText implements encoding.TextUnmarshaler, refusing an unknown
// value.
func (o *TopNOrder) UnmarshalText(text []byte) error { return setEnum(o, text, TopNDesc, TopNAsc) }

// TopNParams are the params of the top_n operator:
//
//	params:
//	  n: 3            # required, 1 to 1000
//	  by: price       # required: a number
//	  order: desc     # or asc
//	  window: 1m      # optional: one ranking per tumbling event-time window
//	  rank_field: rank_number  # optional: emit the rows with their rank
type TopNParams struct {
	// N is the ranking's length; required, in [1, TopNMaxN].
	N int `yaml:"n" doc:"How many records the ranking keeps; required, 1 to 1000."`
	// By is the score a record is ranked by; required, a finite number.
	By Expression `yaml:"by" doc:"The expression records are ranked by (e.g. price); required, a finite number (anything else is an eval_error)."`
	// Order is desc (highest first, the default) or asc.
	Order TopNOrder `yaml:"order" doc:"desc (default: the highest by first) or asc; equal scores rank in arrival order."`
	// Window, if > 0, ranks per tumbling event-time window of this size
	// (epoch-aligned); 0: one ranking per key, kept forever.
	Window time.Duration `yaml:"window" doc:"Rank per tumbling event-time window of this size (epoch-aligned, e.g. 1m; Flink's window Top-N): a window's ranking is dropped from state when the watermark passes its end, and a record of a window the watermark passed is dropped; default 0: one ranking per key, kept in state forever."`
	// RankField, if set, makes each rank's output value the ranked
	// record's own JSON object with this field added, holding the rank
	// number (Flink's Top-N output row: the input's columns and
	// rank_number), instead of {"key", "rank", "row"}. Not with Window.
	RankField string `yaml:"rank_field" doc:"Emit each rank's row as the ranked record's own JSON object with this field added (the rank number, 1 first), as Flink's Top-N emits the input's columns and rank_number (Nexmark q19), instead of {key, rank, row}; a record that is not a JSON object, or already has this field, is an eval_error. Not with window. Default: none."`
}

// CheckParams implements ParamsChecker.
func (p *TopNParams) CheckParams(report func(field, msg string)) {
	switch {
	case p.N == 0:
		report("n", fmt.Sprintf("required: how many records the ranking keeps, 1 to %d", TopNMaxN))
	case p.N < 1 || p.N > TopNMaxN:
		report("n", fmt.Sprintf("must be in [1, %d], got %d", TopNMaxN, p.N))
	}
	if !p.By.IsSet() {
		report("by", "required: the expression records are ranked by (a number, such as price)")
	}
	if p.Window < 0 || (p.Window > 0 && p.Window < time.Millisecond) {
		report("window", fmt.Sprintf("must be 0 (no window) or at least 1ms, got %v", p.Window))
	}
	if p.RankField != "" && p.Window != 0 {
		report("rank_field", "not with window: a window's rows are emitted as {key, rank, window_start, window_end, row}")
	}
}

// topNFactory registers TopNType.
func topNFactory() Factory {
	return Factory{
		Type: TopNType,
		Doc: "Per key (and optionally per tumbling window), the n records ranked by an expression, emitted as a changelog of the ranking " +
			"(Flink's Top-N, Nexmark q19): each rank is a row keyed \"<key>#<rank>\" (\"<key>@<window start ms>#<rank>\" with window) " +
			"whose value is {\"key\", \"rank\", [\"window_start\", \"window_end\",] \"row\"}.",
		Traits: Traits{Keyed: true, Changelog: ChangelogTraits{Produces: true}},
		Params: func() any { return &TopNParams{Order: TopNDesc} },
		State:  []string{TopNStateName, "_timers"},
		New: func(ctx FactoryContext) (any, error) {
			p, ok := ctx.Params.(*TopNParams)
			if !ok {
				return nil, fmt.Errorf("operators: %s: params %T, want *TopNParams", TopNType, ctx.Params)
			}
			return NewTopN(*p), nil
		},
	}
}

// topNRow is one ranked record.
type topNRow struct {
	// Row is the record's value as JSON (a value that is not JSON, from a
	// string or bytes source, as a JSON string).
	Row   json.RawMessage `json:"row"`
	Score number          `json:"score"`
	TS    int64           `json:"ts"` // ms since the epoch
}

var topNState = state.MapStateDescriptor[int64, []topNRow]{
	Name: TopNStateName, KeySerializer: state.Int64Serializer{}, ValueSerializer: topNRowsSerializer{},
}

// topNRowsSerializer stores a ranking as state.JSONSerializer does (name
// "json", the same bytes: checkpoints of either restore in the other) and
// is a state.HeapSerializer: on Pebble the write cache keeps a key's
// ranking decoded, so a record that enters it costs no JSON decode and
// encode of the whole ranking (Flink's rank operator keeps its heap
// state's rows as objects); the ranking is encoded once when the cache
// writes it (before a checkpoint, on eviction).
type topNRowsSerializer struct {
	state.JSONSerializer[[]topNRow]
}

var _ state.HeapSerializer[[]topNRow] = topNRowsSerializer{}

// Copy implements state.HeapSerializer: the ranking Decode(Append(v))
// would return without the round trip. Rows whose bytes are those of a
// row of a known ranking (the same memory: the rows that stay in the
// ranking read with Get) are shared; the others are copied, as json.Marshal
// writes them (compacted and escaped when it would rewrite them), or Copy
// returns the error Append would return.
func (s topNRowsSerializer) Copy(v []topNRow, known [][]topNRow) ([]topNRow, error) {
	if v == nil {
		return nil, nil
	}
	out := make([]topNRow, len(v))
	n := 0
	for i, r := range v {
		if k, ok := knownTopNRow(r.Row, known); ok {
			out[i] = r
			out[i].Row = k
			continue
		}
		if !plainJSON(r.Row) {
			row, err := marshalRaw(r.Row)
			if err != nil {
				return nil, fmt.Errorf("state: json encode: %w", err)
			}
			out[i] = r
			out[i].Row = row
			continue
		}
		n += len(r.Row)
	}
	var buf []byte
	if n > 0 {
		buf = make([]byte, 0, n)
	}
	for i, r := range v {
		if out[i].Row == nil {
			start := len(buf)
			buf = append(buf, r.Row...)
			out[i] = r
			out[i].Row = buf[start:len(buf):len(buf)]
		}
	}
	return out, nil
}

// marshalRaw returns m as json.Marshal writes a json.RawMessage, in new
// memory: compacted, with <, >, &, U+2028 and U+2029 escaped; or the error
// for m that is not JSON. Valid JSON is rewritten in one pass
// (compactEscape: a Nexmark bid's url holds '&'); anything else goes
// through json.Compact for its error.
func marshalRaw(m []byte) (json.RawMessage, error) {
	if gjson.ValidBytes(m) {
		b := compactEscape(make([]byte, 0, len(m)+16), m)
		return b[:len(b):len(b)], nil
	}
	var c, e bytes.Buffer
	if err := json.Compact(&c, m); err != nil {
		return nil, err
	}
	json.HTMLEscape(&e, c.Bytes())
	b := e.Bytes()
	return b[:len(b):len(b)], nil
}

// compactEscape appends the valid JSON m to dst as json.Compact then
// json.HTMLEscape write it: whitespace outside strings dropped, <, > and
// & written \u003c, \u003e and \u0026, U+2028 and U+2029 \u2028 and
// \u2029 (TestTopNCompactEscape compares it with them).
func compactEscape(dst, m []byte) []byte {
	const hex = "0123456789abcdef"
	inString, escaped := false, false
	for i := 0; i < len(m); i++ {
		c := m[i]
		switch {
		case c == '<' || c == '>' || c == '&':
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			escaped = false
			continue
		case c == 0xE2 && i+2 < len(m) && m[i+1] == 0x80 && m[i+2]&^1 == 0xA8:
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[m[i+2]&0xF])
			i += 2
			escaped = false
			continue
		}
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			dst = append(dst, c)
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			inString = true
		}
		dst = append(dst, c)
	}
	return dst
}

// knownTopNRow returns the row of a known ranking that is the memory of m.
func knownTopNRow(m []byte, known [][]topNRow) (json.RawMessage, bool) {
	for _, l := range known {
		for _, r := range l {
			if sameBytes(m, r.Row) {
				return r.Row, true
			}
		}
	}
	return nil, false
}

// AppendKept implements state.HeapSerializer: Append of a ranking Copy
// returned, whose rows are as json.Marshal writes them, written without
// reflection or checking the rows again: the same bytes as Append
// (TestTopNRowsAppendKept), `[{"row":...,"score":...,"ts":...},...]`. A
// score that is not a plain int64 (a double, a big integer) is written by
// json.Marshal.
func (s topNRowsSerializer) AppendKept(dst []byte, v []topNRow) ([]byte, error) {
	if v == nil {
		return append(dst, "null"...), nil
	}
	dst = append(dst, '[')
	for i, r := range v {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"row":`...)
		if r.Row == nil {
			dst = append(dst, "null"...)
		} else {
			dst = append(dst, r.Row...)
		}
		dst = append(dst, `,"score":`...)
		switch sc := r.Score; {
		case sc.Big == nil && !sc.IsFloat && sc.Float == 0 && sc.Int == 0:
			dst = append(dst, "{}"...)
		case sc.Big == nil && !sc.IsFloat && sc.Float == 0:
			dst = strconv.AppendInt(append(dst, `{"int":`...), sc.Int, 10)
			dst = append(dst, '}')
		default:
			b, err := json.Marshal(sc)
			if err != nil {
				return dst, fmt.Errorf("state: json encode: %w", err)
			}
			dst = append(dst, b...)
		}
		dst = strconv.AppendInt(append(dst, `,"ts":`...), r.TS, 10)
		dst = append(dst, '}')
	}
	return append(dst, ']'), nil
}

// View implements state.HeapSerializer: a new slice of the kept rows, so
// the caller may set or append rows, but must not change a row's bytes in
// place (they are the state's).
func (topNRowsSerializer) View(v []topNRow) []topNRow {
	if v == nil {
		return nil
	}
	return append([]topNRow(nil), v...)
}

// Size implements state.HeapSerializer: the rows' bytes and headers.
func (topNRowsSerializer) Size(v []topNRow) int {
	n := 24
	for _, r := range v {
		n += len(r.Row) + 80
	}
	return n
}

// TopN is the top_n operator (Flink's Top-N, ROW_NUMBER() OVER (PARTITION
// BY key ORDER BY by DESC) <= n with the rank number; with window, Flink's
// window Top-N): per key, and per tumbling event-time window when window
// is set, it keeps the n records with the best by (order desc: highest
// first; equal scores in arrival order) and emits the ranking's changes as
// a changelog, one row per rank: a record entering at rank r moves the
// rows at r.. down by one, so each rank from r to the end emits -U of its
// old row and +U of its new one, and a rank filled for the first time
// emits +I; a record that does not enter the ranking emits nothing.
//
// Each output row is keyed "<key>#<rank>" ("<key>@<window start
// ms>#<rank>" with window), so that an upsert sink's compacted topic holds
// the current ranking, one row per rank; its value is {"key": <key>,
// "rank": r, "window_start": ms, "window_end": ms (with window), "row":
// <the record's value>}, its timestamp the input record's.
//
// State: one MapState entry per key and window (TopNStateName) holding up
// to n rows (value, score, timestamp). With window an event-time timer at
// each window's end drops its ranking once the watermark passes it (the
// output keeps the final ranking); a record of a window already passed is
// dropped. Without window a key's ranking is kept forever.
//
// With RankField the output value is the ranked record's JSON object with
// `"<RankField>": r` added as its last member (Flink's Top-N row: the
// input's columns and the rank number), which spares a downstream map
// that re-reads every output row to build those columns (Nexmark q19:
// about 20 output rows per bid that enters the ranking at the top).
type TopN struct {
	p      TopNParams
	env    RecordEnv
	ranks  state.MapState[int64, []topNRow]
	timers TimerService
	// rankMember is `,"<RankField>":` (nil without RankField).
	rankMember []byte
}

// NewTopN returns the top_n function of params p (checked by
// CheckParams).
func NewTopN(p TopNParams) *TopN {
	f := &TopN{p: p}
	if p.RankField != "" {
		name, _ := json.Marshal(p.RankField) // a string: cannot fail
		f.rankMember = append(append([]byte{','}, name...), ':')
	}
	return f
}

// Open implements KeyedProcessFunction.
func (f *TopN) Open(ctx OpenContext) error {
	m, err := state.GetMapState(ctx.Backend, topNState)
	if err != nil {
		return fmt.Errorf("operators: %s %s: %w", TopNType, ctx.Operator, err)
	}
	f.ranks, f.timers = m, ctx.Timers
	return nil
}

// better reports whether score a ranks before b (strictly).
func (f *TopN) better(a, b number) bool {
	if f.p.Order == TopNAsc {
		return a.less(b)
	}
	return b.less(a)
}

// ProcessElement implements KeyedProcessFunction.
func (f *TopN) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	checked := rec.CheckedJSON() // the mark of a json source or map, across the key_by
	v, err := f.p.By.Program().Eval(f.env.Reset(&rec))
	if err != nil {
		return EvalRecordError(err)
	}
	score, ok := toNumber(v)
	if !ok {
		return resultError(f.p.By, "top_n by", "needs a finite number, got "+expression.TypeName(v))
	}
	ts := rec.Timestamp.UnixMilli()
	var start int64
	if f.p.Window > 0 {
		size := f.p.Window.Milliseconds()
		start = ts - ((ts%size)+size)%size
		if f.timers != nil && start+size-1 <= f.timers.CurrentWatermark().UnixMilli() {
			return nil // its window is closed
		}
	}
	cur, found, err := f.ranks.Get(start)
	if err != nil {
		return err
	}
	pos := len(cur)
	for i, r := range cur {
		if f.better(score, r.Score) {
			pos = i
			break
		}
	}
	if pos >= f.p.N {
		return nil
	}
	row := json.RawMessage(rec.Value)
	if rec.Format != runtime.FormatJSON || ((!checked || len(rec.Value) > topNCheckedJSONMax) && !json.Valid(rec.Value)) {
		row, _ = json.Marshal(string(rec.Value)) // a string: cannot fail
	}
	if f.rankMember != nil {
		if err := f.checkRankRow(row); err != nil {
			return err
		}
	}
	next := make([]topNRow, 0, min(len(cur)+1, f.p.N))
	next = append(next, cur[:pos]...)
	next = append(next, topNRow{Row: row, Score: score, TS: ts})
	next = append(next, cur[pos:min(len(cur), f.p.N-1)]...)
	if err := f.ranks.Put(start, next); err != nil {
		return err
	}
	if !found && f.p.Window > 0 && f.timers != nil {
		if err := f.timers.RegisterEventTimeTimer(time.UnixMilli(start + f.p.Window.Milliseconds() - 1)); err != nil {
			return err
		}
	}
	k, _ := json.Marshal(string(rec.Key)) // a string: cannot fail
	for i := pos; i < len(next); i++ {
		if i < len(cur) {
			if err := out.Collect(f.rankRecord(rec, k, start, i, cur[i], runtime.ChangeUpdateBefore)); err != nil {
				return err
			}
			if err := out.Collect(f.rankRecord(rec, k, start, i, next[i], runtime.ChangeUpdateAfter)); err != nil {
				return err
			}
			continue
		}
		if err := out.Collect(f.rankRecord(rec, k, start, i, next[i], runtime.ChangeInsert)); err != nil {
			return err
		}
	}
	return nil
}

// topNCheckedJSONMax is the longest record value whose mark of valid JSON
// (runtime.Record.CheckedJSON) top_n takes for encoding/json's check. The
// mark is a source's gjson check, which accepts values nested deeper than
// the 10,000 levels encoding/json decodes (it agrees with json.Valid
// otherwise: source's FuzzValidJSON); such a value holds at least 10,001
// brackets and their closers, so a shorter one is valid to both. A ranked
// row must be valid to encoding/json, which decodes the ranking's state
// (TestTopNDeepCheckedRecord).
const topNCheckedJSONMax = 2 * 10000

// checkRankRow returns the eval_error of a row that RankField cannot be
// added to: not a JSON object, or one with a member of that name.
func (f *TopN) checkRankRow(row []byte) error {
	if i := firstNonSpace(row); i < len(row) && row[i] == '{' && bytes.IndexByte(row, '\\') < 0 && bytes.IndexByte(f.rankMember, '\\') < 0 && !bytes.Contains(row, f.rankMember[1:len(f.rankMember)-1]) {
		// A valid JSON object without any escape holds a member of
		// that name (plain in JSON too) only as its quoted bytes.
		return nil
	}
	r := gjson.ParseBytes(row)
	if !r.IsObject() {
		return resultError(f.p.By, "top_n rank_field", "needs a JSON object record, got "+r.Type.String())
	}
	has := false
	r.ForEach(func(k, _ gjson.Result) bool {
		has = k.String() == f.p.RankField
		return !has
	})
	if has {
		return resultError(f.p.By, "top_n rank_field", fmt.Sprintf("the record already has a field %q", f.p.RankField))
	}
	return nil
}

// firstNonSpace returns the index of b's first byte that is not JSON
// whitespace (len(b) if none).
func firstNonSpace(b []byte) int {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// rankRecord is the output row of rank i (0-based) of window start for
// input rec, whose key is k as a JSON string.
func (f *TopN) rankRecord(rec runtime.Record, k []byte, start int64, i int, r topNRow, c runtime.ChangeKind) runtime.Record {
	if f.rankMember != nil {
		return f.rankFieldRecord(rec, i, r, c)
	}
	b := make([]byte, 0, len(k)+len(r.Row)+64)
	b = append(append(b, `{"key":`...), k...)
	b = append(b, `,"rank":`...)
	b = strconv.AppendInt(b, int64(i+1), 10)
	key := append([]byte(nil), rec.Key...)
	if f.p.Window > 0 {
		b = append(b, `,"window_start":`...)
		b = strconv.AppendInt(b, start, 10)
		b = append(b, `,"window_end":`...)
		b = strconv.AppendInt(b, start+f.p.Window.Milliseconds(), 10)
		key = strconv.AppendInt(append(key, '@'), start, 10)
	}
	b = append(append(append(b, `,"row":`...), r.Row...), '}')
	key = strconv.AppendInt(append(key, '#'), int64(i+1), 10)
	return runtime.Record{Key: key, Value: b, Timestamp: rec.Timestamp, Origin: rec.Origin, Change: c}
}

// OnTimer implements TimerFunction: the rankings of the windows the
// watermark passed leave the state.
func (f *TopN) OnTimer(_ context.Context, _ time.Time, _ TimerContext, _ Collector) error {
	wm := f.timers.CurrentWatermark().UnixMilli()
	var done []int64
	for start, err := range f.ranks.Keys() {
		if err != nil {
			return err
		}
		if start+f.p.Window.Milliseconds()-1 <= wm {
			done = append(done, start)
		}
	}
	for _, start := range done {
		if err := f.ranks.Remove(start); err != nil {
			return err
		}
	}
	return nil
}

// rankFieldRecord is rankRecord with RankField: the row (a JSON object,
// checked when it entered the ranking) with the rank number added as its
// last member.
func (f *TopN) rankFieldRecord(rec runtime.Record, i int, r topNRow, c runtime.ChangeKind) runtime.Record {
	row := bytes.TrimRight(r.Row, " \t\r\n")
	body := bytes.TrimRight(row[:len(row)-1], " \t\r\n") // without its '}'
	b := make([]byte, 0, len(row)+len(f.rankMember)+24)
	b = append(b, body...)
	if body[len(body)-1] == '{' { // an empty object
		b = append(b, f.rankMember[1:]...)
	} else {
		b = append(b, f.rankMember...)
	}
	b = append(strconv.AppendInt(b, int64(i+1), 10), '}')
	key := strconv.AppendInt(append(append(make([]byte, 0, len(rec.Key)+4), rec.Key...), '#'), int64(i+1), 10)
	return runtime.Record{Key: key, Value: b, Timestamp: rec.Timestamp, Origin: rec.Origin, Change: c}
}
