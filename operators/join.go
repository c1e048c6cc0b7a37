package operators

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// JoinType is the pipeline name of the regular (unbounded) join.
const JoinType = "join"

// The regular join's keyed state: per key and side, each distinct row
// (its value) with how many times it is in the side and how many rows of
// the other side it matches (Flink's JoinRecordStateView and
// OuterJoinRecordStateView). Part of the checkpoint format.
//
// JoinSizesState is, per key, the number of distinct rows stored in each
// side (kept without state_ttl): a record whose other side holds none
// skips the scan of that side, and one whose own side holds none the read
// of its row. A key with no rows on either side has no value. Checkpoints
// written before it existed (rows, no sizes) are migrated when the join
// opens (TestRegularJoinRestoresWithoutSizes). Since format 2 of its value
// (joinSizesSerializer) it also holds the rows of a side that has held at
// most joinInlineRows distinct rows since it was last empty (a Nexmark
// auction's or person's one row), which are then not in the side's
// MapState: a record of the other side reads them with the sizes it reads
// anyway, instead of a scan of the MapState (a Pebble iterator per
// record).
const (
	JoinLeftState  = "join.left"
	JoinRightState = "join.right"
	JoinSizesState = "join.sizes"
)

// JoinParams are the params of join:
//
//	inputs:
//	  left:  {from: orders, key_by: user}
//	  right: {from: users, key_by: key}
//	params:
//	  join: left                # inner (default), left, right or full
//	  state_ttl: {ttl: 24h}     # optional: rows expire (table.exec.state.ttl)
//	  upsert: [right]           # sides read from a table keyed by the join key
//	  select: '{"order": left.id, "country": right == null ? null : right.country}'
type JoinParams struct {
	Join     JoinKind       `yaml:"join" doc:"inner (default: the pairs of left and right rows of a key), left, right or full (also each row of that side, or of both, that matches nothing, with the other side null; retracted when a match arrives)."`
	StateTTL StateTTLParams `yaml:"state_ttl" doc:"Let each stored row expire a time after it was last written (Flink's table.exec.state.ttl), bounding the state; an expired row no longer joins. Default: rows are kept until retracted (see state_ttl)."`
	Upsert   []string       `yaml:"upsert" doc:"The roles (left, right) whose input is an upsert stream keyed by the join key, such as a table source with key_by: key: that side keeps one row per key, a +I or +U replacing it (its pairs retracted first) and a -U or -D deleting it whatever its value (a tombstone has none). A table source's updates carry no -U, so without this its old rows would stay. Default: none."`
	Select   Expression     `yaml:"select" doc:"An expression over left and right (each a row's value, null for the missing side of an outer row), key and timestamp, whose result, as JSON, is the output value; default {\"left\": left, \"right\": right}."`
}

// CheckParams implements ParamsChecker.
func (p *JoinParams) CheckParams(report func(field, msg string)) {
	p.StateTTL.Check("state_ttl", report)
	seen := map[string]bool{}
	for i, r := range p.Upsert {
		switch {
		case r != JoinLeft && r != JoinRight:
			report(fmt.Sprintf("upsert[%d]", i), fmt.Sprintf("unknown role %q; want left or right", r))
		case seen[r]:
			report(fmt.Sprintf("upsert[%d]", i), fmt.Sprintf("role %q listed twice", r))
		}
		seen[r] = true
	}
}

// UpsertRoles implements UpsertRolesParams: the roles listed in upsert.
func (p *JoinParams) UpsertRoles() []string { return p.Upsert }

// upsert reports whether side (0 left, 1 right) is an upsert side.
func (p *JoinParams) upsert(side int) bool {
	return slices.Contains(p.Upsert, [2]string{JoinLeft, JoinRight}[side])
}

// joinFactory registers JoinType.
func joinFactory() Factory {
	return Factory{
		Type: JoinType,
		Doc: "Joins the left and right rows of equal keys without time bounds (Flink's regular streaming join, StreamingJoinOperator): both inputs may be append-only streams, changelogs or tables; inner, left, right or full outer; " +
			"emits a changelog of select(left, right): +I for each new pair, -D when a row of either side is retracted, and for outer joins the null-padded row retracted (-D) at the first match and re-emitted (+I) when the last goes; state_ttl bounds the state.",
		Traits: Traits{Keyed: true, Inputs: [2]string{JoinLeft, JoinRight}, Changelog: ChangelogTraits{Accepts: true, Produces: true}},
		Params: func() any { return &JoinParams{Join: JoinInner} },
		State:  []string{JoinLeftState, JoinRightState, JoinSizesState},
		New: func(ctx FactoryContext) (any, error) {
			p, ok := ctx.Params.(*JoinParams)
			if !ok {
				return nil, fmt.Errorf("operators: %s: params %T, want *JoinParams", JoinType, ctx.Params)
			}
			return NewRegularJoin(*p), nil
		},
	}
}

// joinCount is a stored row's multiplicity in its side and the number of
// rows of the other side it matches (kept up to date for an outer side).
// Byte format (serializer "join-count-v1"): two uvarints.
type joinCount struct {
	Count int64
	Assoc int64
}

type joinCountSerializer struct{}

func (joinCountSerializer) Name() string { return "join-count-v1" }

func (joinCountSerializer) Append(dst []byte, c joinCount) ([]byte, error) {
	return binary.AppendUvarint(binary.AppendUvarint(dst, uint64(c.Count)), uint64(c.Assoc)), nil
}

func (joinCountSerializer) Decode(b []byte) (joinCount, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return joinCount{}, errors.New("operators: malformed join row count")
	}
	a, m := binary.Uvarint(b[k:])
	if m <= 0 || k+m != len(b) {
		return joinCount{}, errors.New("operators: malformed join row count")
	}
	return joinCount{Count: int64(n), Assoc: int64(a)}, nil
}

// joinSizes is the number of distinct rows stored per side (left, right)
// of a key.
type joinSizes [2]int64

// joinInlineRows is how many distinct rows a side keeps in its key's
// joinHead (not in its MapState) while it has held no more since it was
// last empty.
const joinInlineRows = 1

// joinHead is a key's JoinSizesState value: the number of distinct rows
// of each side and, for a side whose rows are inline, those rows (sorted
// by row key, at most joinInlineRows). An inline side has no entries in
// its MapState; a side that is not inline keeps every row there. A side
// becomes inline when it is empty and stops being inline (its rows moved
// to the MapState) when a record would leave it with more than
// joinInlineRows rows.
type joinHead struct {
	sizes  joinSizes
	inline [2]bool
	rows   [2][]joinStoredRow
}

// joinSizesFormat2 is the byte after the two sizes in format 2 of a
// joinHead.
const joinSizesFormat2 = 2

// joinSizesSerializer encodes a joinHead. Byte format (serializer name
// "join-sizes-v1", kept so that checkpoints of format 1 restore): format 1
// is the two sizes as uvarints (no side inline); format 2 is the same two
// uvarints, the byte 2, then per side (left, right) a byte (0: not inline,
// 1: inline) and, when inline, the number of rows and each row as uvarint
// length, the row key's bytes, uvarint count and uvarint match count. A
// binary that knows only format 1 refuses a format 2 value (malformed join
// sizes) instead of missing the inline rows.
type joinSizesSerializer struct{}

func (joinSizesSerializer) Name() string { return "join-sizes-v1" }

func (joinSizesSerializer) Append(dst []byte, h joinHead) ([]byte, error) {
	dst = binary.AppendUvarint(binary.AppendUvarint(dst, uint64(h.sizes[0])), uint64(h.sizes[1]))
	dst = append(dst, joinSizesFormat2)
	for side := range 2 {
		if !h.inline[side] {
			dst = append(dst, 0)
			continue
		}
		dst = binary.AppendUvarint(append(dst, 1), uint64(len(h.rows[side])))
		for _, r := range h.rows[side] {
			dst = append(binary.AppendUvarint(dst, uint64(len(r.key))), r.key...)
			dst = binary.AppendUvarint(binary.AppendUvarint(dst, uint64(r.Count)), uint64(r.Assoc))
		}
	}
	return dst, nil
}

func (joinSizesSerializer) Decode(b []byte) (joinHead, error) {
	bad := errors.New("operators: malformed join sizes")
	var h joinHead
	uv := func() (int64, bool) {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, false
		}
		b = b[k:]
		return int64(v), true
	}
	var ok0, ok1 bool
	h.sizes[0], ok0 = uv()
	h.sizes[1], ok1 = uv()
	if !ok0 || !ok1 {
		return joinHead{}, bad
	}
	if len(b) == 0 { // format 1
		return h, nil
	}
	if b[0] != joinSizesFormat2 {
		return joinHead{}, bad
	}
	b = b[1:]
	for side := range 2 {
		if len(b) == 0 || b[0] > 1 {
			return joinHead{}, bad
		}
		inline := b[0] == 1
		b = b[1:]
		if !inline {
			continue
		}
		h.inline[side] = true
		n, ok := uv()
		if !ok || n > joinInlineRows || n != h.sizes[side] {
			return joinHead{}, bad
		}
		for range n {
			l, ok := uv()
			if !ok || l < 1 || l > int64(len(b)) {
				return joinHead{}, bad
			}
			r := joinStoredRow{key: string(b[:l])}
			b = b[l:]
			c, okc := uv()
			a, oka := uv()
			if !okc || !oka || c < 1 {
				return joinHead{}, bad
			}
			r.Count, r.Assoc = c, a
			h.rows[side] = append(h.rows[side], r)
		}
	}
	if len(b) != 0 {
		return joinHead{}, bad
	}
	return h, nil
}

var _ state.HeapSerializer[joinHead] = joinSizesSerializer{}

// Copy implements state.HeapSerializer: h with its own rows slices, except
// a side's slice that is a known value's (the head a record read, written
// back with the same inline rows: Nexmark q4's auction row, kept while each
// bid only changes the sizes). The rows' keys are strings (immutable).
func (joinSizesSerializer) Copy(h joinHead, known []joinHead) (joinHead, error) {
	for side := range 2 {
		if len(h.rows[side]) == 0 {
			h.rows[side] = nil
			continue
		}
		if !slices.ContainsFunc(known, func(k joinHead) bool { return sameRows(k.rows[side], h.rows[side]) }) {
			h.rows[side] = slices.Clone(h.rows[side])
		}
	}
	return h, nil
}

// sameRows reports whether a and b are the same slice (same first element
// and length), not merely equal.
func sameRows(a, b []joinStoredRow) bool {
	return len(a) == len(b) && len(a) > 0 && &a[0] == &b[0]
}

// AppendKept implements state.HeapSerializer: Append.
func (s joinSizesSerializer) AppendKept(dst []byte, h joinHead) ([]byte, error) {
	return s.Append(dst, h)
}

// View implements state.HeapSerializer: the kept head, sharing its rows
// slices, which the join never changes in place (rows and inlineWrite
// clone them before a change).
func (joinSizesSerializer) View(h joinHead) joinHead { return h }

// Size implements state.HeapSerializer: the struct, and per inline row its
// key's bytes and its slice element.
func (joinSizesSerializer) Size(h joinHead) int {
	n := 96
	for side := range 2 {
		for _, r := range h.rows[side] {
			n += len(r.key) + 40
		}
	}
	return n
}

// joinStoredRow is one distinct row of a side with its counts.
type joinStoredRow struct {
	key string // the map key: rowKey
	joinCount
}

// rowKey is a row's identity and map key: a flag byte (1: text format),
// then the value's bytes.
func rowKey(rec runtime.Record) string {
	f := byte(0)
	if rec.Format == runtime.FormatText {
		f = 1
	}
	return string(append([]byte{f}, rec.Value...))
}

// joinRowOf returns the row of map key k.
func joinRowOf(k string) *joinRow {
	return &joinRow{Value: []byte(k[1:]), Text: k[0] == 1}
}

// RegularJoin is the join function (Flink's StreamingJoinOperator, the
// regular join of Flink SQL): a KeyedCoProcessFunction whose first input is
// the left side. Per key and side it keeps every row in state (a MapState
// from the row's value to its multiplicity and, for an outer side, the
// number of rows of the other side it matches). A record is added to its
// side when it is an insert (+I) or update-after (+U), and retracted from
// it when an update-before (-U) or delete (-D), so either input may be an
// append-only stream, a changelog or, listed in upsert, a table keyed by
// the join key (upserts +U without -U, tombstones -D without a value):
// that side keeps at most one row per key (Flink's join input whose unique
// key contains the join key), a +I or +U retracting the row before it.
//
// Output, keyed by the join key at the input record's timestamp, a
// changelog of select(left, right) with Flink's kinds:
//   - an added row emits +I for each row of the other side (in row-value
//     order, each as often as it is stored); on an outer side without any
//     match it emits +I of itself with the other side null; when it is the
//     first match of an outer row of the other side, -D of that row's
//     null-padded output comes first;
//   - a retracted row emits -D of the pairs it formed (or of its
//     null-padded row), then +I of the null-padded row of each outer row
//     of the other side whose last match it was.
//
// With state_ttl each stored row expires ttl after it was last written
// (per row, as table.exec.state.ttl); a retraction of an expired row still
// retracts its pairs with the rows still stored. Select failing is a bad
// record (eval_error, the source's on_error policy), and all or nothing:
// a record whose select fails for any of its output rows emits none of
// them and leaves the state as it was (every output is evaluated before
// the first is emitted or any row or match count is written), so the
// changelog and the stored match counts stay consistent.
type RegularJoin struct {
	p     JoinParams
	sides [2]state.MapState[string, joinCount]
	// sizes counts each key's distinct rows per side and holds its inline
	// sides' rows (joinHead); nil with state_ttl (rows expire unseen: every
	// record scans, as without it).
	sizes  state.ValueState[joinHead]
	output joinOutput
	change changeCollector
	// cur is the current key's sizes while a record is processed (known:
	// sizes is not nil).
	cur   joinSizes
	known bool
	// inline and irows are the current key's inline sides and their rows
	// (joinHead) while a record is processed (known); irows changes only
	// when the record's writes are applied.
	inline [2]bool
	irows  [2][]joinStoredRow
	// pending holds the current record's outputs and row writes until
	// every output of the record evaluated (all or nothing).
	pending joinPending
	// filter tells a row certainly absent from a spilled side's MapState
	// without reading it (joinRowFilter; only with sizes); spilled is the
	// current key's sides it answers for while a record is processed.
	filter  joinRowFilter
	spilled uint8
}

// joinPending is a record's outputs and row writes, applied once all of
// its outputs evaluated.
type joinPending struct {
	outs   []runtime.Record
	writes []joinWrite
}

// joinWrite is a pending Put (or, with remove, Remove) of row key of side.
type joinWrite struct {
	side   int
	key    string
	c      joinCount
	remove bool
}

// Collect implements Collector: it holds rec for the end of the record.
func (p *joinPending) Collect(rec runtime.Record) error {
	p.outs = append(p.outs, rec)
	return nil
}

// lookup returns the last pending write of side's row key k.
func (p *joinPending) lookup(side int, k string) (joinWrite, bool) {
	for i := len(p.writes) - 1; i >= 0; i-- {
		if w := p.writes[i]; w.side == side && w.key == k {
			return w, true
		}
	}
	return joinWrite{}, false
}

// reset empties p, keeping its slices' capacity (dropping their records'
// and keys' references).
func (p *joinPending) reset() {
	clear(p.outs)
	clear(p.writes)
	p.outs, p.writes = p.outs[:0], p.writes[:0]
}

// NewRegularJoin returns the regular join of params p (checked by
// CheckParams).
func NewRegularJoin(p JoinParams) *RegularJoin {
	if p.Join == "" {
		p.Join = JoinInner
	}
	return &RegularJoin{p: p, output: joinOutput{sel: p.Select}}
}

// Open implements KeyedCoProcessFunction.
func (j *RegularJoin) Open(ctx OpenContext) error {
	j.filter.reset() // the state may be a restored one: no side spilled since Open
	ttl := j.p.StateTTL.Config() != nil
	// Before registering: a checkpoint of the layout without sizes.
	migrate := !ttl && !state.HasState(ctx.Backend, JoinSizesState) &&
		(state.HasState(ctx.Backend, JoinLeftState) || state.HasState(ctx.Backend, JoinRightState))
	for i, name := range []string{JoinLeftState, JoinRightState} {
		m, err := state.GetMapState(ctx.Backend, state.MapStateDescriptor[string, joinCount]{
			Name: name, KeySerializer: state.StringSerializer{}, ValueSerializer: joinCountSerializer{}, TTL: j.p.StateTTL.Config(),
		})
		if err != nil {
			return fmt.Errorf("operators: %s %s: %w", JoinType, ctx.Operator, err)
		}
		j.sides[i] = m
	}
	if ttl {
		return nil
	}
	sizes, err := state.GetValueState(ctx.Backend, state.ValueStateDescriptor[joinHead]{Name: JoinSizesState, Serializer: joinSizesSerializer{}})
	if err != nil {
		return fmt.Errorf("operators: %s %s: %w", JoinType, ctx.Operator, err)
	}
	j.sizes = sizes
	if migrate {
		if err := j.countRows(ctx.Backend); err != nil {
			return fmt.Errorf("operators: %s %s: counting the rows of a checkpoint without sizes: %w", JoinType, ctx.Operator, err)
		}
	}
	return nil
}

// countRows writes the sizes of every key with rows (the migration of a
// checkpoint written before JoinSizesState).
func (j *RegularJoin) countRows(b state.KeyedStateBackend) error {
	for side, name := range []string{JoinLeftState, JoinRightState} {
		d := state.MapStateDescriptor[string, joinCount]{Name: name, KeySerializer: state.StringSerializer{}, ValueSerializer: joinCountSerializer{}}
		err := state.ApplyToAllKeys(b, d, func(_ []byte, m state.MapState[string, joinCount]) error {
			var n int64
			for _, err := range m.Keys() {
				if err != nil {
					return err
				}
				n++
			}
			h, _, err := j.sizes.Value()
			if err != nil {
				return err
			}
			h.sizes[side] = n
			return j.sizes.Update(h)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ProcessElement1 implements KeyedCoProcessFunction: a left record.
func (j *RegularJoin) ProcessElement1(_ context.Context, rec runtime.Record, out Collector) error {
	return j.process(0, rec, out)
}

// ProcessElement2 implements KeyedCoProcessFunction: a right record.
func (j *RegularJoin) ProcessElement2(_ context.Context, rec runtime.Record, out Collector) error {
	return j.process(1, rec, out)
}

// rows returns the current key's stored rows of side in row-key order
// (none without a scan when its size is 0).
func (j *RegularJoin) rows(side int) ([]joinStoredRow, error) {
	if j.known && j.cur[side] == 0 {
		return nil, nil
	}
	if j.known && j.inline[side] {
		return slices.Clone(j.irows[side]), nil // the caller updates match counts in place
	}
	var rows []joinStoredRow
	for e, err := range j.sides[side].Entries() {
		if err != nil {
			return nil, err
		}
		rows = append(rows, joinStoredRow{key: e.Key, joinCount: e.Value})
	}
	slices.SortFunc(rows, func(a, b joinStoredRow) int { return cmp.Compare(a.key, b.key) })
	return rows, nil
}

// changeCollector sets the change kind of the records it passes on.
type changeCollector struct {
	out  Collector
	kind runtime.ChangeKind
}

func (c *changeCollector) Collect(rec runtime.Record) error {
	rec.Change = c.kind
	return c.out.Collect(rec)
}

// emit writes select over the pair of in (a row of side) and other (a row
// of the other side; either may be nil: null) with change kind kind.
func (j *RegularJoin) emit(side int, key []byte, in, other *joinRow, ts int64, kind runtime.ChangeKind, out Collector) error {
	j.change = changeCollector{out: &j.pending, kind: kind}
	if side == 0 {
		return j.output.emit(key, in, other, ts, "", &j.change)
	}
	return j.output.emit(key, other, in, ts, "", &j.change)
}

// process adds rec to its side or retracts it, emitting the changes. On
// an upsert side a +I or +U first retracts the key's row, and a -U or -D
// retracts it whatever its value (a tombstone has none).
func (j *RegularJoin) process(side int, rec runtime.Record, out Collector) error {
	j.known = false
	if j.sizes != nil {
		h, _, err := j.sizes.Value()
		if err != nil {
			return err
		}
		j.cur, j.known = h.sizes, true
		j.inline, j.irows = h.inline, h.rows
		for side := range 2 {
			if j.cur[side] == 0 { // an empty side's next rows go inline
				j.inline[side], j.irows[side] = true, nil
			}
		}
		j.spilled = 0
		if !j.inline[0] || !j.inline[1] {
			j.spilled = j.filter.sides(rec.Key)
		}
		defer func() { j.known, j.irows = false, [2][]joinStoredRow{} }()
	}
	before := j.cur
	inlined := false // an inline side's rows changed
	// All or nothing: the outputs and row writes wait in j.pending until
	// every output evaluated; a failing select (a bad record, the job may
	// go on) leaves rows, match counts and sizes as they were
	// (TestRegularJoinSelectFailureAllOrNothing).
	j.pending.reset()
	defer j.pending.reset()
	if err := j.apply(side, rec, out); err != nil {
		j.cur = before
		return err
	}
	for _, w := range j.pending.writes {
		if j.known && j.inline[w.side] {
			j.irows[w.side] = inlineWrite(j.irows[w.side], w)
			inlined = true
			continue
		}
		var err error
		if w.remove {
			err = j.sides[w.side].Remove(w.key)
		} else {
			if j.known {
				j.filter.add(rec.Key, w.side, w.key)
			}
			err = j.sides[w.side].Put(w.key, w.c)
		}
		if err != nil {
			return err
		}
	}
	for _, o := range j.pending.outs {
		if err := out.Collect(o); err != nil {
			return err
		}
	}
	if !j.known {
		return nil
	}
	for side := range 2 {
		if !j.inline[side] || len(j.irows[side]) <= joinInlineRows {
			continue
		}
		// More rows than a head holds: the side's rows move to its
		// MapState for good (until the side is empty again). The MapState
		// was empty (the side was inline), so from here every row in it
		// passes the filter (joinRowFilter).
		for _, r := range j.irows[side] {
			j.filter.add(rec.Key, side, r.key)
			if err := j.sides[side].Put(r.key, r.joinCount); err != nil {
				return err
			}
		}
		j.filter.setSpilled(rec.Key, side, true)
		j.inline[side], j.irows[side] = false, nil
		inlined = true
	}
	for side := range 2 {
		if j.cur[side] == 0 && j.spilled&(1<<side) != 0 {
			j.filter.setSpilled(rec.Key, side, false) // empty: inline again
		}
	}
	switch {
	case j.cur == before && !inlined:
		return nil
	case j.cur == joinSizes{}:
		return j.sizes.Clear()
	}
	h := joinHead{sizes: j.cur}
	for side := range 2 {
		if j.inline[side] && j.cur[side] > 0 {
			h.inline[side], h.rows[side] = true, j.irows[side]
		}
	}
	return j.sizes.Update(h)
}

// inlineWrite applies w to an inline side's rows (sorted by row key) and
// returns them.
func inlineWrite(rows []joinStoredRow, w joinWrite) []joinStoredRow {
	i, found := slices.BinarySearchFunc(rows, w.key, func(r joinStoredRow, k string) int { return cmp.Compare(r.key, k) })
	switch {
	case w.remove && found:
		return slices.Delete(slices.Clone(rows), i, i+1)
	case w.remove:
		return rows
	case found:
		rows = slices.Clone(rows)
		rows[i].joinCount = w.c
		return rows
	}
	return slices.Insert(slices.Clone(rows), i, joinStoredRow{key: w.key, joinCount: w.c})
}

// apply is process without the sizes' read and write.
func (j *RegularJoin) apply(side int, rec runtime.Record, out Collector) error {
	others, err := j.rows(1 - side)
	if err != nil {
		return err
	}
	ts := rec.Timestamp.UnixMilli()
	accumulate := rec.Change == runtime.ChangeInsert || rec.Change == runtime.ChangeUpdateAfter
	if j.p.upsert(side) {
		stored, err := j.rows(side)
		if err != nil {
			return err
		}
		for _, r := range stored {
			for range r.Count {
				if err := j.retract(side, rec.Key, r.key, ts, others, out); err != nil {
					return err
				}
			}
		}
		if !accumulate {
			return nil
		}
		return j.add(side, rec.Key, rowKey(rec), ts, others, out)
	}
	if accumulate {
		return j.add(side, rec.Key, rowKey(rec), ts, others, out)
	}
	return j.retract(side, rec.Key, rowKey(rec), ts, others, out)
}

// add adds the row of map key k to side, given the other side's rows
// (whose match counts it updates in place).
func (j *RegularJoin) add(side int, key []byte, k string, ts int64, others []joinStoredRow, out Collector) error {
	other := 1 - side
	in := joinRowOf(k)
	var matches int64
	for _, o := range others {
		matches += o.Count
	}
	cur, err := j.stored(side, key, k)
	if err != nil {
		return err
	}
	if j.p.Join.outer(side) && matches == 0 {
		if err := j.emit(side, key, in, nil, ts, runtime.ChangeInsert, out); err != nil {
			return err
		}
	}
	if j.p.Join.outer(other) {
		for i := range others {
			o := &others[i]
			if o.Assoc == 0 {
				for range o.Count {
					if err := j.emit(other, key, joinRowOf(o.key), nil, ts, runtime.ChangeDelete, out); err != nil {
						return err
					}
				}
			}
			o.Assoc++
			j.put(other, o.key, o.joinCount)
		}
	}
	for _, o := range others {
		for range o.Count {
			if err := j.emit(side, key, in, joinRowOf(o.key), ts, runtime.ChangeInsert, out); err != nil {
				return err
			}
		}
	}
	if cur.Count == 0 {
		j.cur[side]++
	}
	j.put(side, k, joinCount{Count: cur.Count + 1, Assoc: matches})
	return nil
}

// put writes side's row k with counts c when the record's outputs all
// evaluated (joinPending).
func (j *RegularJoin) put(side int, k string, c joinCount) {
	j.pending.writes = append(j.pending.writes, joinWrite{side: side, key: k, c: c})
}

// stored returns the counts of the current key's (key's) row k of side
// (zero when not stored; not read when the side holds no row or the row
// filter knows it absent).
func (j *RegularJoin) stored(side int, key []byte, k string) (joinCount, error) {
	if w, ok := j.pending.lookup(side, k); ok {
		return w.c, nil // a removed row's c is zero
	}
	if j.known && j.cur[side] == 0 {
		return joinCount{}, nil
	}
	if j.known && j.inline[side] {
		for _, r := range j.irows[side] {
			if r.key == k {
				return r.joinCount, nil
			}
		}
		return joinCount{}, nil
	}
	if j.known && j.filter.absent(j.spilled, key, side, k) {
		return joinCount{}, nil
	}
	c, _, err := j.sides[side].Get(k)
	return c, err
}

// retract removes one occurrence of the row of map key k from side (if
// stored: an expired row is gone already), retracting its pairs with the
// other side's rows (whose match counts it updates in place).
func (j *RegularJoin) retract(side int, key []byte, k string, ts int64, others []joinStoredRow, out Collector) error {
	other := 1 - side
	in := joinRowOf(k)
	var matches int64
	for _, o := range others {
		matches += o.Count
	}
	cur, err := j.stored(side, key, k)
	if err != nil {
		return err
	}
	if j.p.Join.outer(side) && matches == 0 {
		if err := j.emit(side, key, in, nil, ts, runtime.ChangeDelete, out); err != nil {
			return err
		}
	}
	for _, o := range others {
		for range o.Count {
			if err := j.emit(side, key, in, joinRowOf(o.key), ts, runtime.ChangeDelete, out); err != nil {
				return err
			}
		}
	}
	if j.p.Join.outer(other) {
		for i := range others {
			o := &others[i]
			if o.Assoc == 1 {
				for range o.Count {
					if err := j.emit(other, key, joinRowOf(o.key), nil, ts, runtime.ChangeInsert, out); err != nil {
						return err
					}
				}
			}
			o.Assoc = max(o.Assoc-1, 0)
			j.put(other, o.key, o.joinCount)
		}
	}
	switch {
	case cur.Count > 1:
		j.put(side, k, joinCount{Count: cur.Count - 1, Assoc: cur.Assoc})
	case cur.Count == 1:
		j.cur[side] = max(j.cur[side]-1, 0)
		j.pending.writes = append(j.pending.writes, joinWrite{side: side, key: k, remove: true})
	}
	return nil
}
