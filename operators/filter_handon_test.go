package operators

import (
	"context"
	"testing"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// decodedProbe is a chained runtime.Operator that records whether each
// record it receives carries a decoded expression.Doc.
type decodedProbe struct{ docs, records int }

func (p *decodedProbe) Open(context.Context) error { return nil }
func (p *decodedProbe) ProcessRecord(_ context.Context, _ int, rec runtime.Record) error {
	p.records++
	if v, ok := rec.Decoded(); ok {
		if _, isDoc := v.(*expression.Doc); isDoc {
			p.docs++
		}
	}
	return nil
}
func (p *decodedProbe) EndInput(context.Context) error { return nil }
func (p *decodedProbe) Close() error                   { return nil }

// TestFilterHandsOnDecodedOnlyWhenChained: a filter (and a map) whose
// output has an operator chained hands the Doc it read on with the record
// (the chained operator reads it, no second check of the JSON); one whose
// records only cross channels (no chained operator: a Writer drops the
// decoded form) does not copy its Doc for it, one allocation less per
// record kept.
func TestFilterHandsOnDecodedOnlyWhenChained(t *testing.T) {
	ctx := context.Background()
	value := []byte(`{"id":4,"key":"k1","amount":7}`)
	rec := runtime.Record{Key: []byte("k1"), Value: value}
	fns := map[string]func() ProcessFunction{
		"filter": func() ProcessFunction {
			return NewFilter(&FilterParams{Condition: mustExpr[BoolExpression](t, "id % 2 == 0")})
		},
		"map": func() ProcessFunction {
			return NewMap(&MapParams{Key: mustExpr[Expression](t, "key + string(id)")})
		},
	}
	for name, newFn := range fns {
		t.Run(name, func(t *testing.T) {
			probe := &decodedProbe{}
			chained := runtime.NewOutput(nil)
			chained.AddChained(&runtime.ChainedOperator{Operator: probe})
			fn := newFn()
			c := &collector{ctx: ctx, out: chained}
			if !c.HandsOnDecoded() {
				t.Fatal("an output with a chained operator: HandsOnDecoded false")
			}
			if err := fn.ProcessElement(ctx, rec, c); err != nil {
				t.Fatal(err)
			}
			if probe.records != 1 || probe.docs != 1 {
				t.Fatalf("chained operator got %d records, %d with a Doc; want 1, 1", probe.records, probe.docs)
			}
			alone := &collector{ctx: ctx, out: runtime.NewOutput(nil)}
			if alone.HandsOnDecoded() {
				t.Fatal("an output without a chained operator: HandsOnDecoded true")
			}
			fn = newFn()
			withChain := testing.AllocsPerRun(200, func() { _ = fn.ProcessElement(ctx, rec, c) })
			fn = newFn()
			without := testing.AllocsPerRun(200, func() { _ = fn.ProcessElement(ctx, rec, alone) })
			if withChain-without < 1 {
				t.Errorf("allocations per record: %v chained, %v without a chained operator; want at least one fewer", withChain, without)
			}
		})
	}
}
