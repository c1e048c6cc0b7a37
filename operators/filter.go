package operators

import (
	"context"

	"github.com/kstreamd/kstreamd/runtime"
)

// FilterType is the pipeline name of the filter operator.
const FilterType = "filter"

// FilterParams are filter's params.
type FilterParams struct {
	// Condition is evaluated on every record; the record is kept when it is
	// true. Required.
	Condition BoolExpression `yaml:"condition" doc:"A bool expression over the record, such as amount > 100: a record is kept when it is true; required."`
}

// CheckParams implements ParamsChecker.
func (p *FilterParams) CheckParams(report func(field, msg string)) {
	if !p.Condition.IsSet() {
		report("condition", "required")
	}
}

// Filter keeps the records on which its condition is true and drops the
// others (Flink's DataStream.filter with a FilterFunction). A record on
// which the condition fails (a missing field, a wrong type) or is not a
// bool is a bad record with reason eval_error: it meets its source's
// on_error policy. Records kept are passed on unchanged.
type Filter struct {
	cond BoolExpression
	env  RecordEnv
}

// NewFilter returns the filter of p.
func NewFilter(p *FilterParams) *Filter { return &Filter{cond: p.Condition} }

func filterFactory() Factory {
	return Factory{
		Type:   FilterType,
		Doc:    "Keeps the records on which a bool expression (condition) is true.",
		Traits: Traits{Changelog: ChangelogTraits{Forwards: true}},
		Params: func() any { return &FilterParams{} },
		New: func(ctx FactoryContext) (any, error) {
			return NewFilter(ctx.Params.(*FilterParams)), nil
		},
	}
}

// Open implements ProcessFunction.
func (f *Filter) Open(OpenContext) error { return nil }

// ProcessElement implements ProcessFunction.
//
// A tombstone of an upsert changelog (a -D with a null value, as a table
// source emits for a deleted row) is passed on without the condition: its
// row is unknown, so the condition cannot be evaluated, and dropping it
// (or taking it for a bad record) would keep the deleted row downstream
// (in an upsert sink's compacted topic, in a table_join's table); a
// delete of a key whose rows the filter never passed is a no-op there.
func (f *Filter) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	if rec.Change == runtime.ChangeDelete && rec.Value == nil {
		return out.Collect(rec)
	}
	keep, err := f.cond.Program().EvalBool(f.env.Reset(&rec))
	if err != nil {
		return EvalRecordError(err)
	}
	if !keep {
		return nil
	}
	f.env.Keep(&rec) // the next operator of the chain reuses the decoded value
	return out.Collect(rec)
}
