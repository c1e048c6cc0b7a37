package operators

import (
	"context"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// dedupLastRow is keep: last's state: the record kept for a key.
type dedupLastRow struct {
	Value   []byte           `json:"value"`
	TS      int64            `json:"ts"` // ms since the epoch
	Headers []runtime.Header `json:"headers,omitempty"`
}

// dedupLast is what DedupLast and AsyncDedupLast share.
type dedupLast struct {
	ttl *state.StateTtlConfig
}

func newDedupLast(p DedupParams) dedupLast {
	d := dedupLast{}
	if p.TTL > 0 {
		d.ttl = &state.StateTtlConfig{TTL: p.TTL, UpdateType: state.OnCreateAndWrite, Visibility: state.NeverReturnExpired, EventTime: p.Time == TTLEventTime}
	}
	return d
}

func (d *dedupLast) descriptor() state.ValueStateDescriptor[dedupLastRow] {
	return state.ValueStateDescriptor[dedupLastRow]{Name: DedupLastStateName, Serializer: dedupLastSerializer{}, TTL: d.ttl}
}

// dedupLastSerializer stores the kept row as state.JSONSerializer does
// (name "json", the same bytes: checkpoints of either restore in the
// other) and is a state.HeapSerializer: on Pebble without ttl the write
// cache keeps a key's row decoded, so a record that replaces it costs no
// JSON (base64) decode and encode of the row before; the row is encoded
// once when the cache writes it (before a checkpoint, on eviction).
type dedupLastSerializer struct {
	state.JSONSerializer[dedupLastRow]
}

var _ state.HeapSerializer[dedupLastRow] = dedupLastSerializer{}

// Copy implements state.HeapSerializer: the row Decode(Append(v)) would
// return, without the round trip: its value and headers copied (a nil
// value stays nil, an empty one empty; no headers are nil).
func (dedupLastSerializer) Copy(v dedupLastRow, _ []dedupLastRow) (dedupLastRow, error) {
	n := len(v.Value)
	for _, h := range v.Headers {
		n += len(h.Value)
	}
	buf := make([]byte, 0, n)
	own := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, b...)
		return buf[start:len(buf):len(buf)]
	}
	out := dedupLastRow{Value: own(v.Value), TS: v.TS}
	if len(v.Headers) > 0 {
		out.Headers = make([]runtime.Header, len(v.Headers))
		for i, h := range v.Headers {
			out.Headers[i] = runtime.Header{Key: h.Key, Value: own(h.Value)}
		}
	}
	return out, nil
}

// AppendKept implements state.HeapSerializer: Append.
func (s dedupLastSerializer) AppendKept(dst []byte, v dedupLastRow) ([]byte, error) {
	return s.Append(dst, v)
}

// View implements state.HeapSerializer: the kept row, sharing its value's
// and headers' memory, which nobody may change in place (the record of its
// -U carries them: no operator changes a record's bytes in place).
func (dedupLastSerializer) View(v dedupLastRow) dedupLastRow { return v }

// Size implements state.HeapSerializer: the row's bytes and headers.
func (dedupLastSerializer) Size(v dedupLastRow) int {
	n := 80 + len(v.Value)
	for _, h := range v.Headers {
		n += 40 + len(h.Key) + len(h.Value)
	}
	return n
}

// step returns what rec does given the kept row cur (found: there is
// one): the row to keep and the records to emit, none when rec is older
// than the row kept (a record out of order never replaces a later one).
func (d *dedupLast) step(rec runtime.Record, cur dedupLastRow, found bool) (next dedupLastRow, emit []runtime.Record) {
	ts := rec.Timestamp.UnixMilli()
	if found && ts < cur.TS {
		return cur, nil
	}
	next = dedupLastRow{Value: rec.Value, TS: ts, Headers: rec.Headers}
	if !found {
		rec.Change = runtime.ChangeInsert
		return next, []runtime.Record{rec}
	}
	before := runtime.Record{Key: rec.Key, Value: cur.Value, Timestamp: time.UnixMilli(cur.TS), Headers: cur.Headers,
		Format: rec.Format, Origin: rec.Origin, Change: runtime.ChangeUpdateBefore}
	rec.Change = runtime.ChangeUpdateAfter
	return next, []runtime.Record{before, rec}
}

// DedupLast is the dedup operator with keep: last (Flink's deduplication
// keeping the last row per key, Nexmark q18): per key it keeps the latest
// record by timestamp (ties: the later arrival) and emits the changes as a
// changelog: +I of a key's first record, then -U of the record kept before
// (its value, timestamp and headers) and +U of the new one. A record older
// than the one kept is dropped. With ttl a key unseen for ttl is
// forgotten (its next record is a +I again). State: one ValueState per key
// (DedupLastStateName) holding the kept record's value, timestamp and
// headers.
//
// A per-subtask hint (dedupKeyHint) spares the state read of a key that
// holds no row yet, which is most of a large key space's records (Nexmark
// q18's bidder and auction).
type DedupLast struct {
	dedupLast
	row     state.ValueState[dedupLastRow]
	backend state.KeyedStateBackend
	maxHint int // the hint's bound, dedupHintMaxKeys but in tests
	// hint, when not nil, knows the keys that hold no row (dedupKeyHint);
	// nil: every key is read.
	hint *dedupKeyHint
}

// dedupHintMaxKeys bounds the keys a dedupKeyHint holds (about 20 bytes of
// heap each): past it the hint is dropped and every key is read, until
// the next Open.
const dedupHintMaxKeys = 1 << 21

// dedupKeyHint is a subtask's in-memory record of which keys hold a
// keep-last row: the set of 64-bit hashes of the serialized keys (the
// backend's CurrentKey) it wrote a row for. A key whose hash is not in it
// holds no row, so ProcessElement skips the read: on Pebble the read of an
// absent key goes through the write cache and every level's tables to find
// nothing (about 15% of q18's CPU, where most bidder/auction pairs are
// new). A key whose hash is in it may hold one (two keys can share a
// hash, a row may have expired with ttl) and is read as before. The hint
// is never wrong as long as every row written goes through add: the
// operator is the only writer of its state, and Open rebuilds the hint
// from the state itself (after a restore, a rescale); it is never
// checkpointed. Rows only leave the state by ttl, which the hint does not
// follow (those keys are read, and found absent, as before). Flink has no
// such hint (RocksDB's bloom filters are its only help for absent keys).
type dedupKeyHint struct {
	seed maphash.Seed
	keys map[uint64]struct{}
	max  int // dedupHintMaxKeys but in tests
}

func newDedupKeyHint(max int) *dedupKeyHint {
	return &dedupKeyHint{seed: maphash.MakeSeed(), keys: map[uint64]struct{}{}, max: max}
}

// mayHold reports whether key may hold a row (false: it holds none).
func (h *dedupKeyHint) mayHold(key []byte) bool {
	_, ok := h.keys[maphash.Bytes(h.seed, key)]
	return ok
}

// add records that key may hold a row now; false when the hint is full
// (dedupHintMaxKeys): the caller must stop using it.
func (h *dedupKeyHint) add(key []byte) bool {
	if len(h.keys) >= h.max {
		return false
	}
	h.keys[maphash.Bytes(h.seed, key)] = struct{}{}
	return true
}

// rebuildHint sets d's hint from the keys the state holds a row for (any
// row, expired or not), or to nil when there are more than
// dedupHintMaxKeys.
func (d *DedupLast) rebuildHint() error {
	h := newDedupKeyHint(d.maxHint)
	full := false
	d.hint = nil
	err := state.ApplyToAllValueKeys(d.backend, d.descriptor(), func(_ []byte, _ state.ValueState[dedupLastRow]) error {
		if !full && !h.add(d.backend.CurrentKey()) {
			full = true
		}
		return nil
	})
	if err != nil || full {
		return err
	}
	d.hint = h
	return nil
}

// NewDedupLast returns the keep-last dedup function of params p.
func NewDedupLast(p DedupParams) *DedupLast {
	return &DedupLast{dedupLast: newDedupLast(p), maxHint: dedupHintMaxKeys}
}

// Open implements KeyedProcessFunction.
func (d *DedupLast) Open(ctx OpenContext) error {
	row, err := state.GetValueState(ctx.Backend, d.descriptor())
	if err != nil {
		return fmt.Errorf("operators: %s %s: %w", DedupType, ctx.Operator, err)
	}
	d.row, d.backend = row, ctx.Backend
	if err := d.rebuildHint(); err != nil {
		return fmt.Errorf("operators: %s %s: %w", DedupType, ctx.Operator, err)
	}
	return nil
}

// ProcessElement implements KeyedProcessFunction.
func (d *DedupLast) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	var cur dedupLastRow
	found := false
	if d.hint == nil || d.hint.mayHold(d.backend.CurrentKey()) {
		var err error
		if cur, found, err = d.row.Value(); err != nil {
			return err
		}
	}
	next, emit := d.step(rec, cur, found)
	if emit == nil {
		return nil
	}
	if !found && d.hint != nil && !d.hint.add(d.backend.CurrentKey()) {
		d.hint = nil // full: every key is read from now on
	}
	if err := d.row.Update(next); err != nil {
		return err
	}
	for _, r := range emit {
		if err := out.Collect(r); err != nil {
			return err
		}
	}
	return nil
}

// AsyncDedupLast is DedupLast through the async state API.
type AsyncDedupLast struct {
	dedupLast
	row  state.AsyncValueState[dedupLastRow]
	free []*dedupLastStep // continuations to reuse (subtask goroutine only)
}

// dedupLastStep is the continuation of one record's read in
// AsyncDedupLast, as dedupStep is AsyncDedup's: the record (not captured
// by a closure, which would move every record to the heap), the records to
// emit once the row is written, and its methods as func values made once.
// It is given back when its chain is done with it; if the chain fails it
// is simply not reused.
type dedupLastStep struct {
	d      *AsyncDedupLast
	rec    runtime.Record
	out    Collector
	emit   []runtime.Record
	readFn func(state.Optional[dedupLastRow]) (state.StateFuture[state.Void], error) // s.afterRead
	emitFn func(state.Void) error                                                    // s.emitAll
}

// release clears s and gives it back; nothing may use s after.
func (s *dedupLastStep) release() {
	s.rec, s.out, s.emit = runtime.Record{}, nil, nil
	s.d.free = append(s.d.free, s)
}

// afterRead continues after the kept row's read: write the new row, then
// emit; a record older than the row kept is dropped.
func (s *dedupLastStep) afterRead(cur state.Optional[dedupLastRow]) (state.StateFuture[state.Void], error) {
	next, emit := s.d.step(s.rec, cur.Value, cur.OK)
	if emit == nil {
		s.release()
		return state.CompletedVoidFuture(), nil
	}
	s.emit = emit
	return s.d.row.AsyncUpdate(next).ThenAccept(s.emitFn), nil
}

// emitAll gives s back and emits its records.
func (s *dedupLastStep) emitAll(state.Void) error {
	emit, out := s.emit, s.out
	s.release()
	for _, r := range emit {
		if err := out.Collect(r); err != nil {
			return err
		}
	}
	return nil
}

// NewAsyncDedupLast returns the async keep-last dedup function of params
// p.
func NewAsyncDedupLast(p DedupParams) *AsyncDedupLast {
	return &AsyncDedupLast{dedupLast: newDedupLast(p)}
}

// Open implements AsyncKeyedProcessFunction.
func (d *AsyncDedupLast) Open(ctx AsyncOpenContext) error {
	row, err := state.GetAsyncValueState(ctx.AEC, d.descriptor())
	if err != nil {
		return fmt.Errorf("operators: %s %s: %w", DedupType, ctx.Operator, err)
	}
	d.row = row
	return nil
}

// ProcessElement implements AsyncKeyedProcessFunction: read the kept row,
// write the new one, emit.
func (d *AsyncDedupLast) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	var s *dedupLastStep
	if n := len(d.free); n > 0 {
		s = d.free[n-1]
		d.free[n-1] = nil
		d.free = d.free[:n-1]
	} else {
		s = &dedupLastStep{d: d}
		s.readFn, s.emitFn = s.afterRead, s.emitAll
	}
	s.rec, s.out = rec, out
	state.ThenCompose(d.row.AsyncValue(), s.readFn)
	return nil // failures of the chain reach the controller, which fails the task
}
