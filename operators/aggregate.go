package operators

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"time"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// AggregateType is the pipeline name of the aggregate operator.
const AggregateType = "aggregate"

// AggregateStateName is the name of the aggregate operator's ValueState
// holding every accumulator of a key; each count_distinct aggregate adds a
// MapState named AggregateStateName + "." + its name holding the distinct
// values seen. The names are part of the checkpoint format: renaming an
// aggregate starts it from zero.
const AggregateStateName = "aggregate"

// AggregateFn is the fn of one aggregate.
type AggregateFn string

// The aggregate functions. sum, min, max and avg take numbers (an of that
// evaluates to anything else, or to NaN or an infinity, is an eval_error);
// first, last and count_distinct take any JSON value.
const (
	// AggCount counts the key's records (it takes no of).
	AggCount AggregateFn = "count"
	// AggSum adds the values: an exact integer while every value is an
	// integer, however large (past int64 it is a math/big integer, written
	// as a JSON integer with every digit and no exponent, and kept so in
	// the state), a double from the first fraction on; a double sum beyond
	// the float64 range is emitted as null.
	AggSum AggregateFn = "sum"
	// AggMin is the smallest value, as given (integer or double).
	AggMin AggregateFn = "min"
	// AggMax is the largest value, as given (integer or double).
	AggMax AggregateFn = "max"
	// AggAvg is the sum divided by the count, always a double.
	AggAvg AggregateFn = "avg"
	// AggFirst is the value of the key's first record.
	AggFirst AggregateFn = "first"
	// AggLast is the value of the key's latest record.
	AggLast AggregateFn = "last"
	// AggCountDistinct counts the distinct values (two values are the same
	// when their compact JSON encodings, with object keys sorted, are
	// equal); the values seen are kept in a MapState, one entry each.
	AggCountDistinct AggregateFn = "count_distinct"
)

var aggregateFns = []AggregateFn{AggCount, AggSum, AggMin, AggMax, AggAvg, AggFirst, AggLast, AggCountDistinct}

// UnmarshalText implements encoding.TextUnmarshaler, refusing an unknown
// function.
func (f *AggregateFn) UnmarshalText(text []byte) error { return setEnum(f, text, aggregateFns...) }

// AggregateEmit is the emit param of the aggregate operator.
type AggregateEmit string

// The values of AggregateEmit.
const (
	// EmitEveryUpdate emits the results after every record. The default.
	EmitEveryUpdate AggregateEmit = "every_update"
	// EmitOnChange emits the results after a record only when some result
	// differs from its value before the record (a key's first record always
	// emits).
	EmitOnChange AggregateEmit = "on_change"
)

// UnmarshalText implements encoding.TextUnmarshaler, refusing an unknown
// value.
func (e *AggregateEmit) UnmarshalText(text []byte) error {
	return setEnum(e, text, EmitEveryUpdate, EmitOnChange)
}

// AggregateParams are the params of the aggregate operator:
//
//	params:
//	  aggregates:
//	    - {name: total, fn: sum, of: amount}
//	    - {name: n, fn: count}
//	  emit: every_update      # or on_change
//	  state_ttl: {ttl: 30m}   # optional, see StateTTLParams
type AggregateParams struct {
	// Aggregates are the results computed per key, in output order; at
	// least one.
	Aggregates []AggregateSpec `yaml:"aggregates" doc:"The aggregates, each {name, fn, of}, in output order; required, at least one."`
	// Emit says when results are emitted; default EmitEveryUpdate.
	Emit AggregateEmit `yaml:"emit" doc:"When to emit: every_update (default: after every record) or on_change (only when some result changed)."`
	// StateTTL expires a key's aggregates; default: never.
	StateTTL StateTTLParams `yaml:"state_ttl" doc:"Expire a key's aggregates a time after their last update, so the key starts again from zero; default: never (see state_ttl)."`
	// MiniBatch buffers records and folds each key's into one state read,
	// one state write and one output per batch; nil: off (one of each per
	// record). See MiniBatchParams.
	MiniBatch *MiniBatchParams `yaml:"mini_batch" doc:"Buffer records in memory and fold each key's records of a batch into one state read, one write and one output row (Flink's mini-batch aggregation); the batch ends at size records, at max_bytes buffered, allow_latency after its first record, before every checkpoint barrier, before every watermark (with allow_latency: watermarks are held to the batch's end instead), and at end of input; default: off. Not with async_state."`
}

// MiniBatchParams are the aggregate's mini_batch params (Flink's
// table.exec.mini-batch.enabled with table.exec.mini-batch.size): records
// are buffered per key in memory, in arrival order, and a batch ends when
// Size records or MaxBytes are buffered, AllowLatency after its first
// record (processing time, also while no record comes), before every
// checkpoint barrier is forwarded (so the buffer is empty in every
// checkpoint: nothing buffered is lost on a crash, the source rereads
// it), before every watermark is forwarded when AllowLatency is 0 (the
// rows precede it; with an AllowLatency a watermark arriving mid-batch is
// held, as Flink's mini-batch assigner forwards watermarks only at batch
// boundaries: it is forwarded after the batch's rows when the batch ends,
// so a batch spans many watermarks), before an idle status, and at end of
// input. At the end of a batch each
// key's records are folded in their order into its accumulators, read
// once and written once, and the key emits one change: +I (new key), -U
// of the row before the batch and +U of the row after (only +U when only
// upsert sinks read it; with emit on_change only when the row changed), or
// -D (retractions emptied it). A read_committed reader of an upsert sink
// sees the same table at every checkpoint as without mini_batch; only the
// rows in between are skipped.
type MiniBatchParams struct {
	// Size is the records buffered (over all keys of the subtask) that end
	// a batch; required, 1 to 10,000,000.
	Size int `yaml:"size" doc:"The records buffered (all keys of a subtask) that end a batch, e.g. 50000 (Flink's table.exec.mini-batch.size); required, 1 to 10000000. The buffer holds each record's aggregate inputs until the batch ends (an aggregate without count_distinct, without min or max over a changelog and without state_ttl holds each key's row instead, folding records as they come)."`
	// AllowLatency ends a batch once its first record waited this long
	// (wall clock), and makes watermarks wait for the batch's end instead
	// of ending it; 0: no time bound, every watermark ends the batch.
	AllowLatency time.Duration `yaml:"allow_latency" doc:"End a batch once its first record waited this long, by the wall clock, also while no record comes (Flink's table.exec.mini-batch.allow-latency), e.g. 2s; a watermark arriving within a batch is then held and forwarded after the batch's rows, so batches span watermarks; default 0: no time bound, and every watermark ends the batch; 1ms to 1h."`
	// MaxBytes ends a batch once its buffered inputs (values, keys,
	// headers, bookkeeping) reach this many bytes; 0: the default,
	// defaultMiniBatchBytes.
	MaxBytes int64 `yaml:"max_bytes" doc:"End a batch once the inputs it buffers (each record's aggregate inputs, keys, headers) reach this many bytes, e.g. 67108864; default 64 MiB; at least 1."`
}

// defaultMiniBatchBytes is MiniBatchParams.MaxBytes's default: 64 MiB.
const defaultMiniBatchBytes = 64 << 20

// maxMiniBatchLatency bounds MiniBatchParams.AllowLatency.
const maxMiniBatchLatency = time.Hour

// maxMiniBatchSize bounds MiniBatchParams.Size: the batch is held in
// memory.
const maxMiniBatchSize = 10_000_000

// AggregateSpec is one aggregate of AggregateParams.
type AggregateSpec struct {
	// Name is the result's field in the output; required, unique, not
	// "key".
	Name string `yaml:"name" doc:"The result's field in the output; required, unique, not key."`
	// Fn is the aggregate function; required.
	Fn AggregateFn `yaml:"fn" doc:"count, sum, min, max, avg, first, last or count_distinct; required."`
	// Of is the expression aggregated, evaluated on each record; required
	// except for count, which takes none.
	Of Expression `yaml:"of" doc:"The expression aggregated, evaluated on each record (e.g. amount); required except for count, which takes none."`
	// Filter, count_distinct only, is SQL's FILTER (WHERE filter): the
	// values of records on which it is false are not counted (the record
	// still belongs to the key's row). count_distinct aggregates with the
	// same of share one MapState when some of them are filtered
	// (aggregate_distinct.go); optional.
	Filter BoolExpression `yaml:"filter" doc:"count_distinct of the aggregate operator only (a window refuses it): count the value only of records on which this bool expression is true (SQL's COUNT(DISTINCT x) FILTER (WHERE c)), e.g. price < 10000; count_distinct aggregates with the same of share one state entry per value when some of them have a filter; optional."`
}

// CheckParams implements ParamsChecker.
func (p *AggregateParams) CheckParams(report func(field, msg string)) {
	if len(p.Aggregates) == 0 {
		report("aggregates", "at least one aggregate is required")
	}
	names := map[string]int{}
	for i, a := range p.Aggregates {
		at := func(f string) string { return fmt.Sprintf("aggregates[%d].%s", i, f) }
		switch j, dup := names[a.Name]; {
		case a.Name == "":
			report(at("name"), "required")
		case a.Name == "key":
			report(at("name"), `"key" is the output's key field; choose another name`)
		case dup:
			report(at("name"), fmt.Sprintf("duplicate name %q (also aggregates[%d])", a.Name, j))
		default:
			names[a.Name] = i
		}
		switch {
		case a.Fn == "":
			report(at("fn"), "required: one of count, sum, min, max, avg, first, last, count_distinct")
		case a.Fn == AggCount && a.Of.IsSet():
			report(at("of"), "count counts records and takes no of")
		case a.Fn != AggCount && !a.Of.IsSet():
			report(at("of"), fmt.Sprintf("required for fn %s (an expression such as amount)", a.Fn))
		}
		checkDistinctFilter(i, a, report)
	}
	p.StateTTL.Check("state_ttl", report)
	if p.MiniBatch != nil && (p.MiniBatch.Size < 1 || p.MiniBatch.Size > maxMiniBatchSize) {
		what := "out of range"
		if p.MiniBatch.Size == 0 {
			what = "required"
		}
		report("mini_batch.size", fmt.Sprintf("%s: the records that end a batch, 1 to %d (e.g. 50000); got %d", what, maxMiniBatchSize, p.MiniBatch.Size))
	}
	if p.MiniBatch != nil && (p.MiniBatch.AllowLatency < 0 || p.MiniBatch.AllowLatency > maxMiniBatchLatency ||
		p.MiniBatch.AllowLatency%time.Millisecond != 0) {
		report("mini_batch.allow_latency", fmt.Sprintf("whole milliseconds from 1ms to %s (e.g. 2s), or 0 for none; got %s", maxMiniBatchLatency, p.MiniBatch.AllowLatency))
	}
	if p.MiniBatch != nil && p.MiniBatch.MaxBytes < 0 {
		report("mini_batch.max_bytes", fmt.Sprintf("at least 1 (bytes, e.g. 67108864), or 0 for the default 64 MiB; got %d", p.MiniBatch.MaxBytes))
	}
}

// CheckAsyncState implements AsyncStateChecker: mini_batch has no async
// state version.
func (p *AggregateParams) CheckAsyncState(report func(field, msg string)) {
	if p.MiniBatch != nil {
		report("mini_batch", "not supported with async_state: true (the batch is folded with synchronous state access); drop one of them")
	}
}

// CheckChangelogInput implements ChangelogInputChecker: first and last
// cannot retract a value (Flink keeps every value for its
// FIRST_VALUE/LAST_VALUE with retraction; this operator keeps one), so
// over a changelog input they are refused.
func (p *AggregateParams) CheckChangelogInput(report func(field, msg string)) {
	for i, a := range p.Aggregates {
		if a.Fn == AggFirst || a.Fn == AggLast {
			report(fmt.Sprintf("aggregates[%d].fn", i), fmt.Sprintf("%s cannot retract, and this aggregate's input is a changelog (updates retract the values they replace); use count, sum, min, max, avg or count_distinct", a.Fn))
		}
	}
}

// aggregateFactory registers AggregateType.
func aggregateFactory() Factory {
	return Factory{
		Type:   AggregateType,
		Doc:    "Per key, running aggregates (count, sum, min, max, avg, first, last, count_distinct) emitted as {\"key\", <name>: <result>, ...} on every update or on change, as a changelog (+I, then -U old and +U new per update, only +U when only upsert sinks read it, -D when retractions empty a key); over a changelog input it retracts (see Changelogs).",
		Traits: Traits{Keyed: true, AsyncState: true, Changelog: ChangelogTraits{Accepts: true, Produces: true, UpdateAfterOnly: true}},
		Params: func() any { return &AggregateParams{Emit: EmitEveryUpdate} },
		State:  []string{AggregateStateName, AggregateStateName + ".<name>"},
		New: func(ctx FactoryContext) (any, error) {
			p, ok := ctx.Params.(*AggregateParams)
			if !ok {
				return nil, fmt.Errorf("operators: %s: params %T, want *AggregateParams", AggregateType, ctx.Params)
			}
			if ctx.AsyncState {
				if p.MiniBatch != nil {
					return nil, fmt.Errorf("operators: %s %s: mini_batch is not supported with async_state", AggregateType, ctx.Operator)
				}
				if p.StateTTL.Time == TTLEventTime {
					return nil, fmt.Errorf("operators: %s %s: state_ttl.time event is not supported with async_state", AggregateType, ctx.Operator)
				}
				f := NewAsyncAggregate(*p, ctx.ChangelogInput)
				f.updateAfterOnly = ctx.UpdateAfterOnly
				return f, nil
			}
			f := NewAggregate(*p, ctx.ChangelogInput)
			f.updateAfterOnly = ctx.UpdateAfterOnly
			return f, nil
		},
	}
}

// aggregator is what Aggregate and AsyncAggregate share: the params, the
// evaluation of a record's inputs, the fold of them into the accumulators
// and the output.
type aggregator struct {
	specs    []AggregateSpec
	emit     AggregateEmit
	ttl      *state.StateTtlConfig
	distinct []int // indexes in specs of the count_distinct aggregates
	// changelog says the input is a changelog: records may retract.
	changelog bool
	// updateAfterOnly leaves the -U row of each update out of the output
	// (FactoryContext.UpdateAfterOnly: only upsert sinks read it, which
	// drop -U; Flink's ONLY_UPDATE_AFTER).
	updateAfterOnly bool
	// maps are the indexes in specs of the aggregates keeping a MapState
	// (aggregate.<name>): every count_distinct (a group of them sharing
	// one: its first's), and min and max over a changelog input (their
	// value multiset). groups[j] are the members of a shared map j (nil:
	// the map of maps[j] alone); slotOf and bitOf are each aggregate's map
	// (-1: none) and its bit in a shared map's entries
	// (aggregate_distinct.go).
	maps   []int
	groups []distinctGroup
	slotOf []int32
	bitOf  []uint8
	// filters are the distinct count_distinct filter expressions (by
	// text), filterOf each aggregate's (-1: none), passes their results
	// on the current record; ofOf is the aggregate whose of result an
	// aggregate of a shared map takes (-1: it evaluates its own).
	filters  []Expression
	filterOf []int
	passes   []bool
	ofOf     []int
	env      RecordEnv
	// names are the aggregates' names as JSON strings, in spec order.
	names [][]byte
	// validJSON marks the rows emitted as valid JSON (written here) for
	// the operator after this one in the chain, without an allocation.
	validJSON runtime.DecodedSlot
	// accs is the accumulators' serializer (their names, in spec and in
	// byte order).
	accs accumulatorsSerializer
	// rowLen is the length of the longest row output wrote: the room it
	// leaves after a row for the next one.
	rowLen int
	// seen filters the map entries keys born in this instance wrote, so
	// that absent values are not read (aggregate_seen.go).
	seen seenFilter
	// sameOf[i] is the index of the first aggregate before specs[i] whose
	// of has the same text (q17's min, max and sum of bid.price), whose
	// value inputsInto takes instead of evaluating it again; -1 for none.
	// vals holds a record's values of the aggregates others take
	// (scratch, cleared after each record).
	sameOf []int
	vals   []any
}

// markBorn marks the map-backed accumulators of next, a new key's, as
// born in generation gen (the filter's at the record's start).
func (a *aggregator) markBorn(next []aggAccumulator, gen uint64) {
	for _, i := range a.maps {
		if i < len(next) {
			next[i].born = gen
		}
	}
}

func newAggregator(p AggregateParams, changelog bool) aggregator {
	a := aggregator{specs: p.Aggregates, emit: p.Emit, ttl: p.StateTTL.Config(), changelog: changelog}
	a.accs = accumulatorsSerializer{newWindowEntrySerializer(p.Aggregates)}
	for i, s := range a.specs {
		name, _ := json.Marshal(s.Name) // a string: cannot fail
		a.names = append(a.names, name)
		if s.Fn == AggCountDistinct {
			a.distinct = append(a.distinct, i)
		}
	}
	a.sameOf = make([]int, len(a.specs))
	for i, s := range a.specs {
		a.sameOf[i] = -1
		if s.Fn == AggCount || !s.Of.IsSet() {
			continue
		}
		for j := range i {
			if o := a.specs[j]; o.Fn != AggCount && o.Of.IsSet() && o.Of.String() == s.Of.String() {
				a.sameOf[i] = a.sameOf[j]
				if a.sameOf[i] < 0 {
					a.sameOf[i] = j
				}
				a.vals = make([]any, len(a.specs))
				break
			}
		}
	}
	a.buildMaps()
	return a
}

// aggregateAccumulators is the stored form (the checkpoint format) of a
// key's accumulators, the aggregate operator's ValueState and a window's:
// each aggregate's accumulator by name, as JSON. In memory the operators
// hold them as a []aggAccumulator in the order of their aggregates
// (accumulatorsSerializer, windowEntrySerializer).
type aggregateAccumulators map[string]aggAccumulator

// aggAccumulator is the state of one aggregate of one key.
type aggAccumulator struct {
	// Fn is the function the accumulator belongs to; an accumulator of
	// another fn (the config changed) starts again from zero.
	Fn AggregateFn `json:"fn"`
	// Records is the number of records folded.
	Records int64 `json:"records"`
	// Distinct is count_distinct's number of distinct values.
	Distinct int64 `json:"distinct,omitempty"`
	// Num is the sum (sum, avg) or the extreme (min, max).
	Num number `json:"num,omitzero"`
	// Value is the JSON of first's or last's value.
	Value json.RawMessage `json:"value,omitempty"`
	// Seen are count_distinct's values (their JSON) when the accumulator
	// keeps them itself: a window's, which must merge (the aggregate
	// operator keeps them in a MapState instead).
	Seen []string `json:"seen,omitempty"`
	// born is the seenFilter generation in which the key's first record
	// was folded (0: unknown), set on the map-backed aggregates of the
	// aggregate operator only. It lives in memory only (the decoded
	// accumulators the write cache keeps): never written to the state.
	born uint64
}

// number is an integer or a double, as expression results are. An integer
// outside int64 (a sum past it, or a uint64 input above MaxInt64) is held
// exactly in Big; a Big within int64 is always normalised back to Int, so
// Big != nil means "outside int64". The JSON form is the state's: "big" is
// a JSON integer (math/big's encoding), absent in checkpoints written
// before it existed, which decode as before.
type number struct {
	Int     int64    `json:"int,omitempty"`
	Big     *big.Int `json:"big,omitempty"`
	Float   float64  `json:"float,omitempty"`
	IsFloat bool     `json:"is_float,omitempty"`
}

func (n number) float() float64 {
	switch {
	case n.IsFloat:
		return n.Float
	case n.Big != nil:
		f, _ := new(big.Float).SetInt(n.Big).Float64()
		return f
	}
	return float64(n.Int)
}

// bigInt returns the integer n as a new big.Int (n must not be a double).
func (n number) bigInt() *big.Int {
	if n.Big != nil {
		return new(big.Int).Set(n.Big)
	}
	return big.NewInt(n.Int)
}

// bigNumber returns the integer z as a number: Int when it fits in int64.
func bigNumber(z *big.Int) number {
	if z.IsInt64() {
		return number{Int: z.Int64()}
	}
	return number{Big: z}
}

// add returns n+m: an exact integer when both are integers (math/big past
// int64), a double otherwise. Neither operand is modified.
func (n number) add(m number) number {
	if !n.IsFloat && !m.IsFloat {
		if n.Big == nil && m.Big == nil {
			s := n.Int + m.Int
			if (s > n.Int) == (m.Int > 0) {
				return number{Int: s}
			}
		}
		z := n.bigInt()
		return bigNumber(z.Add(z, m.bigInt()))
	}
	return number{Float: n.float() + m.float(), IsFloat: true}
}

// less reports n < m: exactly for two integers, as doubles otherwise.
func (n number) less(m number) bool {
	if !n.IsFloat && !m.IsFloat {
		if n.Big == nil && m.Big == nil {
			return n.Int < m.Int
		}
		return n.bigInt().Cmp(m.bigInt()) < 0
	}
	return n.float() < m.float()
}

// appendJSON appends n as JSON: an integer with all its digits (no
// exponent, however large), or a double as encoding/json writes it.
func (n number) appendJSON(dst []byte) []byte {
	switch {
	case n.IsFloat:
		return appendFloat(dst, n.Float)
	case n.Big != nil:
		return n.Big.Append(dst, 10)
	}
	return strconv.AppendInt(dst, n.Int, 10)
}

// appendFloat appends f as encoding/json does, and null for NaN and the
// infinities, which JSON cannot hold.
func appendFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	// Finite: AppendJSON writes it as encoding/json does, without
	// allocating.
	b, _, _ := expression.AppendJSON(dst, f)
	return b
}

// toNumber returns v as a number when it is a finite integer or double.
func toNumber(v any) (number, bool) {
	switch x := v.(type) {
	case int64:
		return number{Int: x}, true
	case uint64:
		if x <= math.MaxInt64 {
			return number{Int: int64(x)}, true
		}
		return number{Big: new(big.Int).SetUint64(x)}, true
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return number{}, false
		}
		return number{Float: x, IsFloat: true}, true
	}
	return number{}, false
}

// aggInput is one aggregate's input from one record: the number (sum, min,
// max, avg) or the JSON of the value (first, last, count_distinct); a
// count_distinct with a filter false on the record has no raw (nil:
// aggregator.filteredOut).
type aggInput struct {
	num number
	raw []byte
}

// inputs evaluates every aggregate's of on rec, before any state is
// touched: a failure is a *runtime.RecordError with reason eval_error.
func (a *aggregator) inputs(rec *runtime.Record) ([]aggInput, error) {
	return a.inputsInto(make([]aggInput, len(a.specs)), rec)
}

// inputsInto is inputs writing into in (one per aggregate, overwritten).
// An of with the same text as an earlier aggregate's is not evaluated
// again (aggregator.sameOf): a program is a function of the record alone,
// so its value and its error are the earlier one's, and that one's error
// came first.
func (a *aggregator) inputsInto(in []aggInput, rec *runtime.Record) ([]aggInput, error) {
	env := a.env.Reset(rec)
	if err := a.evalFilters(env); err != nil {
		return nil, err
	}
	if a.vals != nil {
		defer clear(a.vals) // no record's values kept past it
	}
	for i, s := range a.specs {
		in[i] = aggInput{}
		if s.Fn == AggCount {
			continue
		}
		if o := a.ofOf[i]; o >= 0 { // a shared map's: the same of as aggregate o, before it
			in[i].raw = in[o].raw
			continue
		}
		var v any
		if j := a.sameOfAt(i); j >= 0 {
			v = a.vals[j]
		} else {
			var err error
			if v, err = s.Of.Program().Eval(env); err != nil {
				return nil, EvalRecordError(err)
			}
			if a.vals != nil {
				a.vals[i] = v
			}
		}
		switch s.Fn {
		case AggSum, AggMin, AggMax, AggAvg:
			n, ok := toNumber(v)
			if !ok {
				what := expression.TypeName(v)
				if f, isFloat := v.(float64); isFloat {
					what = strconv.FormatFloat(f, 'g', -1, 64)
				}
				return nil, resultError(s.Of, "aggregate "+s.Name+" ("+string(s.Fn)+")", "needs a finite number, got "+what)
			}
			in[i].num = n
		default:
			raw, err := expression.EncodeJSON(v)
			if err != nil {
				return nil, resultError(s.Of, "aggregate "+s.Name+" ("+string(s.Fn)+")", "has no JSON value: "+err.Error())
			}
			in[i].raw = raw
		}
	}
	if len(a.filters) > 0 { // after every of: a filtered aggregate's may be shared
		for i, f := range a.filterOf {
			if f >= 0 && !a.passes[f] {
				in[i].raw = nil
			}
		}
	}
	return in, nil
}

// sameOfAt returns sameOf[i], or -1 for an aggregator without sameOf (one
// not made by newAggregator).
func (a *aggregator) sameOfAt(i int) int {
	if i < len(a.sameOf) {
		return a.sameOf[i]
	}
	return -1
}

// accumulate returns the accumulators (in the order of the aggregates)
// after folding one record's inputs in into cur (nil: none yet), folding
// in place when cur has one per aggregate; isNew as for foldOne.
func (a *aggregator) accumulate(cur []aggAccumulator, in []aggInput, isNew []bool) []aggAccumulator {
	next := a.rowOf(cur)
	d := 0
	for i := range a.specs {
		next[i] = a.foldOne(i, next[i], in[i], isNew, &d)
	}
	return next
}

// rowOf returns cur when it holds one accumulator per aggregate (to be
// changed in place), else a new row holding cur's (nil: none; an absent
// one, Fn "", starts from zero).
func (a *aggregator) rowOf(cur []aggAccumulator) []aggAccumulator {
	if len(cur) == len(a.specs) {
		return cur
	}
	next := make([]aggAccumulator, len(a.specs))
	copy(next, cur)
	return next
}

// foldOne returns accumulator acc of specs[i] (restarted when it belongs
// to another fn) after folding in one record's input; *d is the index in
// isNew of the next count_distinct aggregate, advanced past this one.
func (a *aggregator) foldOne(i int, acc aggAccumulator, in aggInput, isNew []bool, d *int) aggAccumulator {
	s := a.specs[i]
	if acc.Fn != s.Fn {
		acc = aggAccumulator{Fn: s.Fn}
	}
	switch s.Fn {
	case AggSum, AggAvg:
		acc.Num = acc.Num.add(in.num)
	case AggMin:
		if acc.Records == 0 || in.num.less(acc.Num) {
			acc.Num = in.num
		}
	case AggMax:
		if acc.Records == 0 || acc.Num.less(in.num) {
			acc.Num = in.num
		}
	case AggFirst:
		if acc.Records == 0 {
			acc.Value = in.raw
		}
	case AggLast:
		acc.Value = in.raw
	case AggCountDistinct:
		if isNew[*d] {
			acc.Distinct++
		}
		*d++
	}
	acc.Records++
	return acc
}

// merge returns the accumulators of the union of two windows' records
// (session windows): earlier holds the records before those of later, so
// first comes from earlier and last from later. count_distinct merges the
// Seen sets both keep.
func (a *aggregator) merge(earlier, later aggregateAccumulators) aggregateAccumulators {
	out := make(aggregateAccumulators, len(a.specs))
	for _, s := range a.specs {
		out[s.Name] = mergeAccumulators(s.Fn, earlier[s.Name], later[s.Name])
	}
	return out
}

// mergeAccumulators returns the accumulator of fn over the records of x
// and then those of y (see aggregator.merge).
func mergeAccumulators(fn AggregateFn, x, y aggAccumulator) aggAccumulator {
	switch {
	case x.Records == 0:
		return y
	case y.Records == 0:
		return x
	}
	m := aggAccumulator{Fn: fn, Records: x.Records + y.Records}
	switch fn {
	case AggSum, AggAvg:
		m.Num = x.Num.add(y.Num)
	case AggMin:
		m.Num = x.Num
		if y.Num.less(x.Num) {
			m.Num = y.Num
		}
	case AggMax:
		m.Num = x.Num
		if x.Num.less(y.Num) {
			m.Num = y.Num
		}
	case AggFirst:
		m.Value = x.Value
	case AggLast:
		m.Value = y.Value
	case AggCountDistinct:
		m.Seen = slices.Clone(x.Seen)
		for _, v := range y.Seen {
			if !slices.Contains(m.Seen, v) {
				m.Seen = append(m.Seen, v)
			}
		}
		m.Distinct = int64(len(m.Seen))
	}
	return m
}

// output renders {"key": <key as a string>, <name>: <result>, ...} in the
// order of the aggregates, in a new buffer with room after the row for
// another as long (emitChanges writes the row after an update there).
func (a *aggregator) output(key []byte, accs []aggAccumulator) []byte {
	return a.appendOutput(make([]byte, 0, 2*(a.rowLen+len(key))+32), key, accs)
}

// appendOutput appends the row of output to dst.
func (a *aggregator) appendOutput(dst []byte, key []byte, accs []aggAccumulator) []byte {
	start := len(dst)
	b := appendJSONString(append(dst, `{"key":`...), key)
	b = append(a.appendResults(b, accs), '}')
	if n := len(b) - start - len(key); n > a.rowLen {
		a.rowLen = n
	}
	return b
}

// appendResults appends `,<name>:<result>` for every aggregate, in order.
func (a *aggregator) appendResults(b []byte, accs []aggAccumulator) []byte {
	for i := range a.specs {
		b = a.appendResult(b, i, accAt(accs, i))
	}
	return b
}

// appendResult appends `,<name>:<result>` of specs[i] from acc.
func (a *aggregator) appendResult(b []byte, i int, acc aggAccumulator) []byte {
	s := a.specs[i]
	var name []byte
	if i < len(a.names) {
		name = a.names[i]
	} else {
		name, _ = json.Marshal(s.Name) // an aggregator not made by newAggregator
	}
	b = append(append(append(b, ','), name...), ':')
	switch s.Fn {
	case AggCount:
		b = strconv.AppendInt(b, acc.Records, 10)
	case AggCountDistinct:
		b = strconv.AppendInt(b, acc.Distinct, 10)
	case AggSum, AggMin, AggMax:
		b = acc.Num.appendJSON(b)
	case AggAvg:
		b = appendFloat(b, acc.Num.float()/float64(acc.Records))
	case AggFirst, AggLast:
		b = append(b, acc.Value...)
	}
	return b
}

// aggregateRecord is the output record of value v and change kind c for
// input rec: rec's key, timestamp, headers and origin.
func aggregateRecord(rec runtime.Record, v []byte, c runtime.ChangeKind) runtime.Record {
	return runtime.Record{Key: rec.Key, Value: v, Timestamp: rec.Timestamp, Headers: rec.Headers, Origin: rec.Origin, Change: c}
}

// outputHead is what aggregateRecord takes of an input record, kept by an
// async continuation in place of the whole record: a runtime.Record is
// too large for a closure to capture by value, so capturing one moves it
// to the heap on every call; an outputHead is captured by value.
type outputHead struct {
	key     []byte
	ts      time.Time
	headers []runtime.Header
	origin  runtime.Origin
}

// outputHeadOf returns rec's outputHead.
func outputHeadOf(rec runtime.Record) outputHead {
	return outputHead{key: rec.Key, ts: rec.Timestamp, headers: rec.Headers, origin: rec.Origin}
}

// record returns a record with h's fields, which aggregateRecord reads
// as it reads those of the record h was taken from.
func (h outputHead) record() runtime.Record {
	return runtime.Record{Key: h.key, Timestamp: h.ts, Headers: h.headers, Origin: h.origin}
}

// row is aggregateRecord marked as valid JSON (runtime.ValidJSON: output
// wrote it), so that an operator after this one in the chain (a map of the
// results) reads its fields without checking the JSON again.
func (a *aggregator) row(rec runtime.Record, v []byte, c runtime.ChangeKind) runtime.Record {
	r := aggregateRecord(rec, v, c)
	r.SetDecodedIn(&a.validJSON, runtime.ValidJSON{})
	return r
}

// accDescriptor describes the accumulators' ValueState.
func (a *aggregator) accDescriptor() state.ValueStateDescriptor[[]aggAccumulator] {
	return state.ValueStateDescriptor[[]aggAccumulator]{
		Name: AggregateStateName, Serializer: a.accs, TTL: a.ttl,
	}
}

// accumulatorsSerializer is the aggregate state's serializer: a key's
// accumulators in the order of the aggregates in memory, written as
// exactly the bytes state.JSONSerializer writes for their stored form
// (aggregateAccumulators: each under its aggregate's name, names in byte
// order) under its name, so checkpoints are unchanged both ways; decoding
// keeps the accumulators of the operator's aggregates and drops those of
// names it no longer has (a fold would have dropped them). It is a
// state.HeapSerializer, so on Pebble with the write cache (and no
// state_ttl) a key's accumulators stay decoded between its records: one
// slice per copy instead of a JSON decode and encode, or a map, per
// record.
type accumulatorsSerializer struct {
	names windowEntrySerializer
}

// Name implements state.Serializer: "json", as state.JSONSerializer.
func (accumulatorsSerializer) Name() string {
	return state.JSONSerializer[aggregateAccumulators]{}.Name()
}

// Append implements state.Serializer: the bytes state.JSONSerializer
// writes for the stored form of v (null for nil).
func (s accumulatorsSerializer) Append(dst []byte, v []aggAccumulator) ([]byte, error) {
	if v == nil {
		return append(dst, "null"...), nil
	}
	return s.names.appendAccs(dst, v)
}

// Decode implements state.Serializer: the stored form, its accumulators
// put in the order of the aggregates.
func (s accumulatorsSerializer) Decode(b []byte) ([]aggAccumulator, error) {
	m, err := state.JSONSerializer[aggregateAccumulators]{}.Decode(b)
	if err != nil {
		return nil, err
	}
	return s.names.accsOf(m), nil
}

// Copy implements state.HeapSerializer: v itself, or the error Append
// returns for v (a double accumulator beyond the float64 range, which JSON
// cannot hold). The row is not copied because the aggregate hands it
// over: every row it updates is a new one (View's copy of the kept row, or
// a new key's), and it changes none of a row's memory (the slice, a Big,
// a first or last value, Seen) once it passed the row to Update, so v
// shares no memory the caller changes. One copy per record (View's)
// instead of two; the window operators keep their own serializer.
func (s accumulatorsSerializer) Copy(v []aggAccumulator, _ [][]aggAccumulator) ([]aggAccumulator, error) {
	for _, a := range v {
		if a.Num.IsFloat && (math.IsNaN(a.Num.Float) || math.IsInf(a.Num.Float, 0)) {
			_, err := s.Append(nil, v)
			return nil, err
		}
	}
	return v, nil
}

// AppendKept implements state.HeapSerializer: Append.
func (s accumulatorsSerializer) AppendKept(dst []byte, v []aggAccumulator) ([]byte, error) {
	return s.Append(dst, v)
}

// View implements state.HeapSerializer: a copy of the row, which the
// caller may change (set accumulators); it shares the first and last
// values and count_distinct's Seen lists, which nobody writes into (the
// operator replaces them), and copies a Big.
func (accumulatorsSerializer) View(v []aggAccumulator) []aggAccumulator {
	if v == nil {
		return nil
	}
	out := slices.Clone(v)
	for i := range out {
		if out[i].Num.Big != nil {
			out[i].Num.Big = new(big.Int).Set(out[i].Num.Big)
		}
	}
	return out
}

// Size implements state.HeapSerializer: an estimate of v's bytes.
func (s accumulatorsSerializer) Size(v []aggAccumulator) int {
	n := 64
	for i, a := range v {
		if i < len(s.names.names) {
			n += len(s.names.names[i])
		}
		n += accumulatorSize(a)
	}
	return n
}

// accumulatorSize estimates the bytes a holds.
func accumulatorSize(a aggAccumulator) int {
	n := 112 + len(a.Value)
	for _, s := range a.Seen {
		n += 16 + len(s)
	}
	if a.Num.Big != nil {
		n += 32 + len(a.Num.Big.Bits())*8
	}
	return n
}

// copyAccumulator returns a copy of a sharing no memory anyone changes: a
// Big, a first or last value and the Seen list are copied (an empty Seen
// becomes nil, as JSON's omitempty drops it).
func copyAccumulator(a aggAccumulator) aggAccumulator {
	if a.Num.Big != nil {
		a.Num.Big = new(big.Int).Set(a.Num.Big)
	}
	a.Value = slices.Clone(a.Value)
	if len(a.Seen) == 0 {
		a.Seen = nil
	} else {
		a.Seen = slices.Clone(a.Seen)
	}
	return a
}

// setDescriptor describes map j, the MapState of the map-backed aggregate
// specs[maps[j]] (a count_distinct, or a min or max over a changelog
// input): the values' JSON to their count (aggregate_retract.go), or a
// group's shared map (distinctMembersSerializer, aggregate_distinct.go).
func (a *aggregator) setDescriptor(j int) state.MapStateDescriptor[string, []byte] {
	var vs state.Serializer[[]byte] = state.BytesSerializer{}
	if a.shared(j) {
		vs = distinctMembersSerializer{}
	}
	return state.MapStateDescriptor[string, []byte]{
		Name: AggregateStateName + "." + a.specs[a.maps[j]].Name, KeySerializer: state.StringSerializer{},
		ValueSerializer: vs, TTL: a.ttl,
	}
}

// putSeen says whether a count_distinct value seen before is written again:
// with TTL refreshed by writes only, so that a value stays remembered ttl
// after its last occurrence.
func (a *aggregator) putSeen() bool {
	return a.ttl != nil && a.ttl.UpdateType == state.OnCreateAndWrite
}

// Aggregate is the aggregate operator (Flink's keyed aggregate over a
// global window, emitting on every update, as Flink SQL's unbounded GROUP
// BY): per key it folds each record into running aggregates and emits
// {"key": <key>, <name>: <result>, ...} in the aggregates' order, with the
// input's key, timestamp, headers and origin, as a changelog (Flink's
// GroupAggFunction): +I for the key's first row, then -U of the previous
// row and +U of the new one per record (emit on_change: only when the row
// changed). An upsert sink writes exactly the +I and +U rows, one per
// record as before changelogs existed.
//
// Over a changelog input (a -U or -D record) it retracts the record's
// values: sum and avg subtract, count decrements, min and max take the
// extreme of the values left (a value -> count multiset in a MapState, as
// Flink's MaxWithRetractAggFunction), count_distinct drops a value whose
// count reaches 0; a retraction that leaves the key without rows emits -D
// of the last row and clears the key's state. A retraction of a key
// without state (never seen, or expired) is ignored, as in Flink.
//
// Its state is one ValueState (AggregateStateName, the accumulators as
// JSON) plus one MapState per count_distinct aggregate, and per min and
// max over a changelog input; with state_ttl every one of them expires ttl
// after its last refresh: a key whose accumulators expired starts again
// from zero (its maps are cleared), and a count_distinct value is
// remembered for ttl after its last occurrence. A key whose first record
// this instance processed reads no map entry of a value it never held
// (seenFilter, aggregate_seen.go); nothing stored changes.
//
// Every of is evaluated before the state is read: a record on which one
// fails (a missing field, a sum over a string) is a *runtime.RecordError
// with reason eval_error and leaves the state untouched.
type Aggregate struct {
	aggregator
	acc  state.ValueState[[]aggAccumulator]
	sets []state.MapState[string, []byte] // one per aggregator.maps
	in   []aggInput                       // a record's inputs (scratch)
	// sums are the filter's hashes of a record's map entries, where
	// tracked says the key's entries are added to the filter; steps are
	// its map steps, localAt their entries in local (-1: none) (scratch).
	sums    []uint64
	tracked []bool
	steps   []aggMapStep
	localAt []int32
	// local is the mini-batch's table of the current key's count_distinct
	// map entries, on while FinishBundle folds a key (aggregate_local.go).
	local aggLocal
	// backend is the subtask's keyed state backend (for the keys of a
	// mini-batch); batch is the mini-batch buffer, nil without mini_batch
	// (aggregate_minibatch.go).
	backend state.KeyedStateBackend
	batch   *aggBatch
	// hint knows the keys that hold no accumulators, on a subtask that
	// began without restored state (aggregate_hint.go).
	hint aggKeyHint
}

// NewAggregate returns the aggregate function of params p (checked by
// CheckParams); changelog says its input is a changelog (min and max then
// keep their value multisets, so that they can retract).
func NewAggregate(p AggregateParams, changelog bool) *Aggregate {
	f := &Aggregate{aggregator: newAggregator(p, changelog)}
	if p.MiniBatch != nil {
		f.batch = &aggBatch{size: max(p.MiniBatch.Size, 1), maxBytes: p.MiniBatch.MaxBytes, latency: p.MiniBatch.AllowLatency}
		if f.batch.maxBytes <= 0 {
			f.batch.maxBytes = defaultMiniBatchBytes
		}
	}
	return f
}

// Open implements KeyedProcessFunction. It fails with a
// *state.StateMigrationError naming the state when the restored state was
// written with TTL and the params have none, or the other way round.
func (f *Aggregate) Open(ctx OpenContext) error {
	f.hint.reset(!state.HasState(ctx.Backend, AggregateStateName)) // before the state is registered
	acc, err := state.GetValueState(ctx.Backend, f.accDescriptor())
	if err != nil {
		return fmt.Errorf("operators: %s %s: %w", AggregateType, ctx.Operator, err)
	}
	f.acc = acc
	f.backend = ctx.Backend
	f.batch.reset()
	f.local.init(&f.aggregator)
	if f.batch != nil {
		f.batch.early = f.foldsEarly()
	}
	f.sets = nil
	f.seen.reset()
	for j := range f.maps {
		m, err := state.GetMapState(ctx.Backend, f.setDescriptor(j))
		if err != nil {
			return fmt.Errorf("operators: %s %s: %w", AggregateType, ctx.Operator, err)
		}
		f.sets = append(f.sets, m)
	}
	return nil
}

// ProcessElement implements KeyedProcessFunction. With mini_batch it
// buffers the record's inputs (aggregate_minibatch.go).
func (f *Aggregate) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	if len(f.in) != len(f.specs) {
		f.in = make([]aggInput, len(f.specs))
	}
	in, err := f.inputsInto(f.in, &rec)
	if err != nil {
		return err
	}
	retract := rec.Change.Retracts()
	if f.batch != nil {
		return f.buffer(rec, in, retract, out)
	}
	cur, found, err := f.value(rec.Key)
	if err != nil || (retract && !found) {
		return err
	}
	var prev []byte
	if f.emitsOld(found, retract) {
		prev = f.output(rec.Key, cur) // before fold, which may fold into cur
	}
	next, kept, err := f.fold(rec.Key, in, retract, cur, found)
	if err != nil {
		return err
	}
	if kept {
		err = f.update(rec.Key, next)
	} else {
		err = f.acc.Clear()
	}
	if err != nil {
		return err
	}
	return f.emitChanges(rec, prev, found, retract, next, out)
}

// value reads the accumulators of the current key, key: none without a
// read when the hint knows the key holds none.
func (f *Aggregate) value(key []byte) ([]aggAccumulator, bool, error) {
	if f.hint.absent(key) {
		return nil, false, nil
	}
	return f.acc.Value()
}

// update writes the accumulators of the current key, key, and adds it to
// the hint.
func (f *Aggregate) update(key []byte, accs []aggAccumulator) error {
	f.hint.add(key)
	return f.acc.Update(accs)
}

// fold folds one record of the current key, key (its inputs in; retract:
// a -U or -D), into the key's accumulators cur (found: it has some),
// making the record's reads and writes of the key's maps, and returns the
// accumulators after it (cur changed in place, or a new row) and whether
// the key keeps them (false: a retraction emptied it, and its maps are
// cleared). It neither reads nor writes the accumulators' ValueState: the
// caller read cur and writes the result (Update, or Clear when not kept),
// once per record or, with mini_batch, once per key and batch. A
// retraction of a key without accumulators changes nothing: cur, false.
func (f *Aggregate) fold(key []byte, in []aggInput, retract bool, cur []aggAccumulator, found bool) ([]aggAccumulator, bool, error) {
	if retract && !found {
		return cur, false, nil
	}
	if len(f.steps) != len(f.maps) {
		f.steps = make([]aggMapStep, len(f.maps))
		f.sums, f.tracked, f.localAt = make([]uint64, len(f.maps)), make([]bool, len(f.maps)), make([]int32, len(f.maps))
	}
	steps := f.steps
	clear(steps)
	gen := f.seen.gen // the generation at the record's start (see bornIn)
	for j := range f.maps {
		if !found && f.ttl != nil {
			if err := f.sets[j].Clear(); err != nil { // values of an expired run of the key
				return nil, false, err
			}
			f.local.cleared(j)
		}
		f.localAt[j] = -1
		pass := f.passMask(j, in)
		if pass == 0 { // every aggregate of the map filtered the record out
			steps[j], f.tracked[j] = aggMapStep{}, false
			continue
		}
		k := f.slotKey(j, in)
		var v []byte
		var present bool
		born := found && bornIn(cur, f.maps[j], gen)
		if f.tracked[j] = born || !found; f.tracked[j] {
			f.sums[j] = f.seen.sum(key, j, k)
		}
		local := f.local.kept(j)
		if local {
			f.localAt[j], v, present = f.local.get(j, k)
		}
		// A new key's maps are empty, and a key born in gen holds only
		// entries the filter has (aggregate_seen.go); an entry in the
		// mini-batch's table is read from there (aggregate_local.go).
		if f.localAt[j] < 0 && found && (!born || f.seen.has(f.sums[j])) {
			var err error
			v, present, err = f.sets[j].Get(k)
			if err != nil {
				return nil, false, err
			}
		}
		if local && f.localAt[j] < 0 {
			f.localAt[j] = f.local.add(j, k, v, present)
		}
		steps[j] = f.mapStep(j, in, cur, v, present, pass, retract)
		if steps[j].rescan {
			keys, err := f.mapKeys(j)
			if err != nil {
				return nil, false, err
			}
			f.rescanExtreme(j, &steps[j], keys)
		}
	}
	next := f.apply(cur, in, steps, retract)
	if f.deletes(found, retract, next) {
		for j, m := range f.sets {
			if err := m.Clear(); err != nil {
				return nil, false, err
			}
			f.local.cleared(j)
		}
		return next, false, nil
	}
	for j, st := range steps {
		v, put, remove := f.mapWrite(j, st)
		var err error
		switch {
		case put:
			if f.tracked[j] {
				f.seen.add(f.sums[j])
			}
			if at := f.localAt[j]; at >= 0 {
				f.local.set(at, v, true)
			} else {
				err = f.sets[j].Put(st.key, v)
			}
		case remove:
			if at := f.localAt[j]; at >= 0 {
				f.local.set(at, nil, false)
			} else {
				err = f.sets[j].Remove(st.key)
			}
		}
		if err != nil {
			return nil, false, err
		}
	}
	if !found {
		f.markBorn(next, gen)
	}
	return next, true, nil
}

// mapKeys returns the keys of the map of aggregate maps[j] (the values of
// its multiset). It is a function of its own because a return from inside
// a range-over-func loop moves the result of the function holding it to
// the heap, on every call (ProcessElement's: an allocation per record).
func (f *Aggregate) mapKeys(j int) ([]string, error) {
	var keys []string
	for uk, err := range f.sets[j].Keys() {
		if err != nil {
			return nil, err
		}
		keys = append(keys, uk)
	}
	return keys, nil
}

// AsyncAggregate is Aggregate through the async state API: the same state,
// input and output; the reads of the accumulators and of the maps are
// futures, the writes follow them. It is the aggregate operator with
// async_state: true.
type AsyncAggregate struct {
	aggregator
	acc  state.AsyncValueState[[]aggAccumulator]
	sets []state.AsyncMapState[string, []byte]
}

// NewAsyncAggregate returns the async aggregate function of params p;
// changelog as for NewAggregate.
func NewAsyncAggregate(p AggregateParams, changelog bool) *AsyncAggregate {
	return &AsyncAggregate{aggregator: newAggregator(p, changelog)}
}

// Open implements AsyncKeyedProcessFunction; errors as Aggregate.Open.
func (f *AsyncAggregate) Open(ctx AsyncOpenContext) error {
	acc, err := state.GetAsyncValueState(ctx.AEC, f.accDescriptor())
	if err != nil {
		return fmt.Errorf("operators: %s %s: %w", AggregateType, ctx.Operator, err)
	}
	f.acc = acc
	f.sets = nil
	f.seen.reset()
	for j := range f.maps {
		m, err := state.GetAsyncMapState(ctx.AEC, f.setDescriptor(j))
		if err != nil {
			return fmt.Errorf("operators: %s %s: %w", AggregateType, ctx.Operator, err)
		}
		f.sets = append(f.sets, m)
	}
	return nil
}

// ProcessElement implements AsyncKeyedProcessFunction: evaluate the inputs
// (an eval_error is returned at once), read the accumulators, then the
// maps' entries of the record's values, then (a min or max retracting its
// extreme) the keys of its multiset, then write and emit.
func (f *AsyncAggregate) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	in, err := f.inputs(&rec)
	if err != nil {
		return err
	}
	retract := rec.Change.Retracts()
	head := outputHeadOf(rec) // what the continuations keep of rec
	state.ThenCompose(f.acc.AsyncValue(), func(cur state.Optional[[]aggAccumulator]) (state.StateFuture[state.Void], error) {
		if retract && !cur.OK {
			return state.CompletedVoidFuture(), nil
		}
		gets := make([]state.StateFuture[state.Optional[[]byte]], len(f.maps))
		gen := f.seen.gen // the generation at the record's start (see bornIn)
		sums, tracked := make([]uint64, len(f.maps)), make([]bool, len(f.maps))
		for j, i := range f.maps {
			if !cur.OK && f.ttl != nil {
				f.sets[j].AsyncClear() // ordered before the read below; its failure fails the record
			}
			if f.passMask(j, in) == 0 { // every aggregate of the map filtered the record out
				gets[j] = state.CompletedFuture(state.Optional[[]byte]{})
				continue
			}
			k := f.slotKey(j, in)
			born := cur.OK && bornIn(cur.Value, i, gen)
			if tracked[j] = born || !cur.OK; tracked[j] {
				sums[j] = f.seen.sum(head.key, j, k)
			}
			// A new key's maps are empty (with state_ttl once cleared: the
			// read stays, after the clear), and a key born in gen holds
			// only entries the filter has (aggregate_seen.go).
			if (!cur.OK && f.ttl == nil) || (born && !f.seen.has(sums[j])) {
				gets[j] = state.CompletedFuture(state.Optional[[]byte]{})
				continue
			}
			gets[j] = f.sets[j].AsyncGet(k)
		}
		return state.ThenCompose(state.CombineAll(gets), func(vals []state.Optional[[]byte]) (state.StateFuture[state.Void], error) {
			steps := make([]aggMapStep, len(f.maps))
			scans := make([]state.StateFuture[[]string], len(f.maps))
			for j := range f.maps {
				steps[j] = f.mapStep(j, in, cur.Value, vals[j].Value, vals[j].OK, f.passMask(j, in), retract)
				if steps[j].rescan {
					scans[j] = state.ToIterable(f.sets[j].AsyncKeys())
				} else {
					scans[j] = state.CompletedFuture[[]string](nil)
				}
			}
			return state.ThenCompose(state.CombineAll(scans), func(keys [][]string) (state.StateFuture[state.Void], error) {
				for j := range steps {
					if steps[j].rescan {
						f.rescanExtreme(j, &steps[j], keys[j])
					}
				}
				var prev []byte
				if f.emitsOld(cur.OK, retract) {
					prev = f.output(head.key, cur.Value) // before apply, which may fold into cur.Value
				}
				next := f.apply(cur.Value, in, steps, retract)
				var writes []state.StateFuture[state.Void]
				if f.deletes(cur.OK, retract, next) {
					writes = append(writes, f.acc.AsyncClear())
					for _, m := range f.sets {
						writes = append(writes, m.AsyncClear())
					}
				} else {
					for j, st := range steps {
						switch v, put, remove := f.mapWrite(j, st); {
						case put:
							if tracked[j] {
								f.seen.add(sums[j])
							}
							writes = append(writes, f.sets[j].AsyncPut(st.key, v))
						case remove:
							writes = append(writes, f.sets[j].AsyncRemove(st.key))
						}
					}
					if !cur.OK {
						f.markBorn(next, gen)
					}
					writes = append(writes, f.acc.AsyncUpdate(next))
				}
				return state.CombineAll(writes).ThenAccept(func([]state.Void) error {
					return f.emitChanges(head.record(), prev, cur.OK, retract, next, out)
				}), nil
			}), nil
		}), nil
	})
	return nil // failures of the chain reach the controller, which fails the task
}
