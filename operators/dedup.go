package operators

import (
	"context"
	"fmt"
	"time"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// DedupType is the pipeline name of the dedup operator.
const DedupType = "dedup"

// The dedup operator's keyed state names: DedupStateName is the ValueState
// marking a key seen (without by), DedupByStateName the MapState of the by
// values seen per key (with by). Both hold the timestamp (ms since the
// epoch) of the record that was let through.
const (
	DedupStateName   = "dedup"
	DedupByStateName = "dedup_by"
	// DedupLastStateName is keep: last's ValueState: the key's last record
	// (its value, timestamp and headers, as JSON).
	DedupLastStateName = "dedup_last"
)

// DedupKeep is the keep param of the dedup operator.
type DedupKeep string

// The values of DedupKeep.
const (
	// DedupKeepFirst lets the first record of a key (or by value) through
	// and drops the rest within ttl: an append-only output. The default.
	DedupKeepFirst DedupKeep = "first"
	// DedupKeepLast keeps the latest record of each key as a changelog
	// (Flink's deduplication keeping the last row, ROW_NUMBER() ... ORDER
	// BY time DESC = 1; Nexmark q18): +I for a key's first record, then -U
	// of the record kept before and +U of the new one.
	DedupKeepLast DedupKeep = "last"
)

// UnmarshalText implements encoding.TextUnmarshaler, refusing an unknown
// value.
func (k *DedupKeep) UnmarshalText(text []byte) error {
	return setEnum(k, text, DedupKeepFirst, DedupKeepLast)
}

// DedupParams are the params of the dedup operator:
//
//	params:
//	  ttl: 10m             # required with keep: first
//	  by: order.line_id    # optional; default: the record key
//	  time: event          # optional; default: processing
//	  keep: last           # optional; default: first
type DedupParams struct {
	// Keep is which record of a key is kept; "" means DedupKeepFirst.
	Keep DedupKeep `yaml:"keep" doc:"first (default: the first record of a key, or by value, within ttl goes through unchanged, later ones are dropped) or last (the latest record of each key, by timestamp, emitted as a changelog: +I, then -U of the record it replaces and +U; Flink's keep-last deduplication, Nexmark q18)."`
	// TTL is how long a key (or by value) is remembered after the record
	// that was let through (keep: last: after the key's latest record);
	// required with keep first, at least 1ms; 0 with keep last: forever.
	TTL time.Duration `yaml:"ttl" state:"on" doc:"How long a seen key (or by value) is remembered after the record let through (keep: last: after its latest record), on the clock time names, e.g. 10m; required with keep: first, at least 1ms; with keep: last 0 (the default there) keeps every key's record forever."`
	// By identifies duplicates within a key; unset: the key alone.
	By Expression `yaml:"by" doc:"An expression whose value (its JSON) identifies a duplicate among the records of one key; default: the key alone."`
	// Time is the clock ttl counts on (state.StateTtlConfig.EventTime);
	// "" means processing.
	Time TTLTime `yaml:"time" doc:"processing (default: the wall clock) or event: a seen key is remembered until the watermark (or a later record's own timestamp) passes ttl after the event time it was let through at (the later of its timestamp and the watermark), so a replayed backlog is deduplicated as live traffic was; not with async_state."`
}

// CheckParams implements ParamsChecker.
func (p *DedupParams) CheckParams(report func(field, msg string)) {
	if p.Keep == DedupKeepLast && p.By.IsSet() {
		report("by", "keep: last keeps one record per key (the changelog's row); by applies to keep: first only")
	}
	switch {
	case p.TTL == 0 && p.Keep == DedupKeepLast:
	case p.TTL == 0:
		report("ttl", "required: how long a seen record is remembered (a duration such as 10m)")
	case p.TTL < time.Millisecond:
		report("ttl", fmt.Sprintf("must be at least 1ms, got %v", p.TTL))
	}
}

// ProducesChangelog implements ChangelogOutputParams: keep: last emits a
// changelog, keep: first an append-only stream.
func (p *DedupParams) ProducesChangelog() bool { return p.Keep == DedupKeepLast }

// dedupFactory registers DedupType.
func dedupFactory() Factory {
	return Factory{
		Type:   DedupType,
		Doc:    "Drops a record whose key (or by value within the key) was seen within ttl; emits the first one unchanged (keep: first), or keeps each key's latest record as a changelog (keep: last).",
		Traits: Traits{Keyed: true, AsyncState: true, Changelog: ChangelogTraits{Produces: true}},
		Params: func() any { return &DedupParams{Keep: DedupKeepFirst} },
		State:  []string{DedupStateName, DedupByStateName, DedupLastStateName},
		New: func(ctx FactoryContext) (any, error) {
			p, ok := ctx.Params.(*DedupParams)
			if !ok {
				return nil, fmt.Errorf("operators: %s: params %T, want *DedupParams", DedupType, ctx.Params)
			}
			if ctx.AsyncState {
				if p.Time == TTLEventTime {
					return nil, fmt.Errorf("operators: %s %s: time event is not supported with async_state", DedupType, ctx.Operator)
				}
				if p.Keep == DedupKeepLast {
					return NewAsyncDedupLast(*p), nil
				}
				return NewAsyncDedup(*p), nil
			}
			if p.Keep == DedupKeepLast {
				return NewDedupLast(*p), nil
			}
			return NewDedup(*p), nil
		},
	}
}

// deduper is what Dedup and AsyncDedup share.
type deduper struct {
	by  Expression
	ttl *state.StateTtlConfig
	env RecordEnv
}

func newDeduper(p DedupParams) deduper {
	return deduper{by: p.By, ttl: &state.StateTtlConfig{
		TTL: p.TTL, UpdateType: state.OnCreateAndWrite, Visibility: state.NeverReturnExpired, EventTime: p.Time == TTLEventTime,
	}}
}

// byValue evaluates by on rec: the JSON of its value, or a
// *runtime.RecordError with reason eval_error.
func (d *deduper) byValue(rec *runtime.Record) (string, error) {
	v, err := d.by.Program().Eval(d.env.Reset(rec))
	if err != nil {
		return "", EvalRecordError(err)
	}
	raw, err := expression.EncodeJSON(v)
	if err != nil {
		return "", resultError(d.by, "dedup by", "has no JSON value: "+err.Error())
	}
	return string(raw), nil
}

func (d *deduper) seenDescriptor() state.ValueStateDescriptor[int64] {
	return state.ValueStateDescriptor[int64]{Name: DedupStateName, Serializer: state.Int64Serializer{}, TTL: d.ttl}
}

func (d *deduper) byDescriptor() state.MapStateDescriptor[string, int64] {
	return state.MapStateDescriptor[string, int64]{
		Name: DedupByStateName, KeySerializer: state.StringSerializer{}, ValueSerializer: state.Int64Serializer{}, TTL: d.ttl,
	}
}

// Dedup is the dedup operator: it lets through the first record of a key
// (or, with by, of a by value within the key) and drops every later one
// until ttl has passed since the one let through, in processing time (the
// state backend's clock) or, with time: event, in event time (the
// watermark, or a later record's own timestamp, passing ttl after the
// let-through record's event time, the later of its timestamp and the
// watermark then; see state.StateTtlConfig.EventTime): a
// dropped duplicate does not extend the time,
// since the state has TTL with OnCreateAndWrite and NeverReturnExpired and
// is written only for a record let through. The record let through is
// emitted unchanged. A by that fails to evaluate is a *runtime.RecordError
// with reason eval_error, before any state is touched.
//
// State: without by a ValueState (DedupStateName) per key, with by a
// MapState (DedupByStateName) from the by value's JSON, each holding the
// timestamp of the record let through; expired entries are removed when
// read and by the background TTL cleanup the keyed operator runs (see
// state.CleanupSchedule), so ids nobody repeats leave state and
// checkpoints about ttl after they were seen.
type Dedup struct {
	deduper
	seen   state.ValueState[int64]
	seenBy state.MapState[string, int64]
}

// NewDedup returns the dedup function of params p (checked by CheckParams).
func NewDedup(p DedupParams) *Dedup { return &Dedup{deduper: newDeduper(p)} }

// Open implements KeyedProcessFunction.
func (d *Dedup) Open(ctx OpenContext) error {
	var err error
	if d.by.IsSet() {
		d.seenBy, err = state.GetMapState(ctx.Backend, d.byDescriptor())
	} else {
		d.seen, err = state.GetValueState(ctx.Backend, d.seenDescriptor())
	}
	if err != nil {
		return fmt.Errorf("operators: %s %s: %w", DedupType, ctx.Operator, err)
	}
	return nil
}

// ProcessElement implements KeyedProcessFunction.
func (d *Dedup) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	ts := rec.Timestamp.UnixMilli()
	if d.by.IsSet() {
		by, err := d.byValue(&rec)
		if err != nil {
			return err
		}
		seen, err := d.seenBy.Contains(by)
		if err != nil || seen {
			return err
		}
		if err := d.seenBy.Put(by, ts); err != nil {
			return err
		}
		return out.Collect(rec)
	}
	_, seen, err := d.seen.Value()
	if err != nil || seen {
		return err
	}
	if err := d.seen.Update(ts); err != nil {
		return err
	}
	return out.Collect(rec)
}

// AsyncDedup is Dedup through the async state API: the same state, input
// and output. It is the dedup operator with async_state: true.
type AsyncDedup struct {
	deduper
	seen   state.AsyncValueState[int64]
	seenBy state.AsyncMapState[string, int64]
	free   []*dedupStep // continuations to reuse (subtask goroutine only)
}

// dedupStep is the continuation of one record's read in AsyncDedup, as
// countStep is AsyncKeyedCount's: the record (kept here, not captured by a
// closure, which would move every record to the heap) and its methods as
// func values made once. A step is taken from AsyncDedup.free by
// ProcessElement and given back when its chain is done with the record
// (the key or by value was seen, or the record was emitted); if the chain
// fails it is simply not reused.
type dedupStep struct {
	d       *AsyncDedup
	rec     runtime.Record
	out     Collector
	by      string
	ts      int64
	seenFn  func(bool) (state.StateFuture[state.Void], error)                  // s.afterBy
	valueFn func(state.Optional[int64]) (state.StateFuture[state.Void], error) // s.afterValue
	emitFn  func(state.Void) error                                             // s.emit
}

// step returns a step of d's holding rec, out, by and ts.
func (d *AsyncDedup) step(rec runtime.Record, out Collector, by string, ts int64) *dedupStep {
	var s *dedupStep
	if n := len(d.free); n > 0 {
		s = d.free[n-1]
		d.free[n-1] = nil
		d.free = d.free[:n-1]
	} else {
		s = &dedupStep{d: d}
		s.seenFn, s.valueFn, s.emitFn = s.afterBy, s.afterValue, s.emit
	}
	s.rec, s.out, s.by, s.ts = rec, out, by, ts
	return s
}

// release clears s and gives it back; nothing may use s after.
func (s *dedupStep) release() {
	s.rec, s.out, s.by = runtime.Record{}, nil, ""
	s.d.free = append(s.d.free, s)
}

// afterBy continues after the by value's read: a seen value drops the
// record, else it is marked and the record emitted.
func (s *dedupStep) afterBy(seen bool) (state.StateFuture[state.Void], error) {
	if seen {
		s.release()
		return state.CompletedVoidFuture(), nil
	}
	return s.d.seenBy.AsyncPut(s.by, s.ts).ThenAccept(s.emitFn), nil
}

// afterValue continues after the key's read, as afterBy.
func (s *dedupStep) afterValue(cur state.Optional[int64]) (state.StateFuture[state.Void], error) {
	if cur.OK {
		s.release()
		return state.CompletedVoidFuture(), nil
	}
	return s.d.seen.AsyncUpdate(s.ts).ThenAccept(s.emitFn), nil
}

// emit gives s back and emits its record.
func (s *dedupStep) emit(state.Void) error {
	rec, out := s.rec, s.out
	s.release()
	return out.Collect(rec)
}

// NewAsyncDedup returns the async dedup function of params p.
func NewAsyncDedup(p DedupParams) *AsyncDedup { return &AsyncDedup{deduper: newDeduper(p)} }

// Open implements AsyncKeyedProcessFunction.
func (d *AsyncDedup) Open(ctx AsyncOpenContext) error {
	var err error
	if d.by.IsSet() {
		d.seenBy, err = state.GetAsyncMapState(ctx.AEC, d.byDescriptor())
	} else {
		d.seen, err = state.GetAsyncValueState(ctx.AEC, d.seenDescriptor())
	}
	if err != nil {
		return fmt.Errorf("operators: %s %s: %w", DedupType, ctx.Operator, err)
	}
	return nil
}

// ProcessElement implements AsyncKeyedProcessFunction: read whether the key
// (or by value) was seen; if not, mark it and emit the record.
func (d *AsyncDedup) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	ts := rec.Timestamp.UnixMilli()
	if d.by.IsSet() {
		by, err := d.byValue(&rec)
		if err != nil {
			return err
		}
		state.ThenCompose(d.seenBy.AsyncContains(by), d.step(rec, out, by, ts).seenFn)
		return nil
	}
	state.ThenCompose(d.seen.AsyncValue(), d.step(rec, out, "", ts).valueFn)
	return nil // failures of the chain reach the controller, which fails the task
}
