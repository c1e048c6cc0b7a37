package operators

import (
	"context"
	"fmt"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// FlatMapType is the pipeline name of the flat_map operator.
const FlatMapType = "flat_map"

// FlatMapParams are flat_map's params.
type FlatMapParams struct {
	// Values is evaluated on every record; each element of the list it
	// yields becomes one output record. Required.
	Values ListExpression `yaml:"values" doc:"A list expression over the record, such as items: each element becomes one record whose value is its JSON; required."`
}

// CheckParams implements ParamsChecker.
func (p *FlatMapParams) CheckParams(report func(field, msg string)) {
	if !p.Values.IsSet() {
		report("values", "required")
	}
}

// FlatMap emits one record per element of the list its expression yields
// (Flink's DataStream.flatMap with a FlatMapFunction): each element
// JSON-encoded as the value, in list order, with the input's key,
// timestamp, headers and origin; an empty list emits nothing. A record on
// which the expression fails or yields something other than a list, or
// with an element JSON cannot hold, is a bad record with reason eval_error
// and emits nothing.
type FlatMap struct {
	values ListExpression
	env    RecordEnv
}

// NewFlatMap returns the flat_map of p.
func NewFlatMap(p *FlatMapParams) *FlatMap { return &FlatMap{values: p.Values} }

func flatMapFactory() Factory {
	return Factory{
		Type:   FlatMapType,
		Doc:    "Emits one record per element of the list an expression (values) yields.",
		Traits: Traits{Changelog: ChangelogTraits{Forwards: true}},
		Params: func() any { return &FlatMapParams{} },
		New: func(ctx FactoryContext) (any, error) {
			return NewFlatMap(ctx.Params.(*FlatMapParams)), nil
		},
	}
}

// Open implements ProcessFunction.
func (f *FlatMap) Open(OpenContext) error { return nil }

// ProcessElement implements ProcessFunction.
//
// A tombstone of an upsert changelog (a -D with a null value, as a table
// source emits for a deleted row) passes on unchanged, once: its row is
// unknown, so values is not evaluated, and it deletes its key's row
// whatever the row expanded to.
func (f *FlatMap) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	if rec.Change == runtime.ChangeDelete && rec.Value == nil {
		return out.Collect(rec)
	}
	elems, err := f.values.Program().EvalList(f.env.Reset(&rec))
	if err != nil {
		return EvalRecordError(err)
	}
	values := make([][]byte, len(elems))
	for i, e := range elems {
		if values[i], err = expression.EncodeJSON(e); err != nil {
			return resultError(f.values.Expression, fmt.Sprintf("element %d", i), "is not JSON: "+err.Error())
		}
	}
	for _, v := range values {
		o := rec
		o.Value, o.Format = v, runtime.FormatJSON
		if err := out.Collect(o); err != nil {
			return err
		}
	}
	return nil
}
