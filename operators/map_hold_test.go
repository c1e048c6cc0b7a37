package operators

import (
	"context"
	"fmt"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// holdingOp is a chained operator that keeps every record it gets (as a
// window, a dedup or a batching sink keeps them), without copying.
type holdingOp struct{ held []runtime.Record }

func (h *holdingOp) Open(context.Context) error     { return nil }
func (h *holdingOp) EndInput(context.Context) error { return nil }
func (h *holdingOp) Close() error                   { return nil }
func (h *holdingOp) ProcessRecord(_ context.Context, _ int, rec runtime.Record) error {
	h.held = append(h.held, rec)
	return nil
}

// TestMapDoesNotLendToHolders attacks map's lent buffer: wherever an
// operator after the map keeps values (a copying sink beside a second
// chained operator, a copying sink beside a channel writer, a sink that
// does not copy, a filter before the copying sink, a second map before
// it), the map must not reuse its buffer, and every value kept downstream
// must still be its own record's bytes, with its mark (or its re-check)
// giving its own value, after 500 more records of other sizes.
func TestMapDoesNotLendToHolders(t *testing.T) {
	ctx := context.Background()
	value := `{"i": i, "pad": pad}`
	type Output = runtime.Output
	type rig struct {
		name  string
		build func() (*Output, *holdingOp)
	}
	chained := func(op runtime.Operator) *runtime.ChainedOperator { return &runtime.ChainedOperator{Operator: op} }
	rigs := []rig{
		{"copier and holder chained", func() (*Output, *holdingOp) {
			h := &holdingOp{}
			out := runtime.NewOutput(nil)
			out.AddChained(chained(&discardingCopier{}))
			out.AddChained(chained(h))
			return out, h
		}},
		{"copier chained and a writer", func() (*Output, *holdingOp) {
			h := &holdingOp{}
			out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{runtime.NewChannel(1024)}, runtime.ForwardPartitioner{}))
			out.AddChained(chained(&copyingSink{copies: true}))
			out.AddChained(chained(h))
			return out, h
		}},
		{"sink that does not copy", func() (*Output, *holdingOp) {
			h := &holdingOp{}
			out := runtime.NewOutput(nil)
			out.AddChained(chained(h))
			return out, h
		}},
		{"filter, then a copier and a holder", func() (*Output, *holdingOp) {
			h := &holdingOp{}
			fout := runtime.NewOutput(nil)
			fout.AddChained(chained(&discardingCopier{}))
			fout.AddChained(chained(h))
			f := NewProcessOperator(OpenContext{Operator: "filter", Parallelism: 1}, nil, NewFilter(&FilterParams{Condition: BoolExpression{compiled(t, `value.i >= 0`)}}), fout)
			if err := f.Open(ctx); err != nil {
				t.Fatal(err)
			}
			out := runtime.NewOutput(nil)
			out.AddChained(chained(f))
			return out, h
		}},
		{"second map, then a copier and a holder", func() (*Output, *holdingOp) {
			h := &holdingOp{}
			mout := runtime.NewOutput(nil)
			mout.AddChained(chained(h))
			mout.AddChained(chained(&discardingCopier{}))
			m2 := NewProcessOperator(OpenContext{Operator: "map2", Parallelism: 1}, nil, NewMap(&MapParams{Value: compiled(t, `value`)}), mout)
			if err := m2.Open(ctx); err != nil {
				t.Fatal(err)
			}
			out := runtime.NewOutput(nil)
			out.AddChained(chained(m2))
			return out, h
		}},
	}
	for _, r := range rigs {
		out, h := r.build()
		m := NewMap(&MapParams{Value: compiled(t, value)})
		op := NewProcessOperator(OpenContext{Operator: "map", Parallelism: 1}, nil, m, out)
		if err := op.Open(ctx); err != nil {
			t.Fatal(err)
		}
		want := make([]string, 0, 500)
		for i := range 500 {
			pad := make([]byte, (i*37)%200)
			for j := range pad {
				pad[j] = 'a' + byte((i+j)%26)
			}
			rec := testRecord(fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, pad))
			if err := op.ProcessRecord(ctx, 0, rec); err != nil {
				t.Fatal(err)
			}
			want = append(want, fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, pad))
		}
		if m.lends == lendYes {
			t.Errorf("%s: the map lends its buffer", r.name)
		}
		if len(h.held) != len(want) {
			t.Fatalf("%s: %d records held, want %d", r.name, len(h.held), len(want))
		}
		var env RecordEnv
		for i := range h.held {
			if got := string(h.held[i].Value); got != want[i] {
				t.Fatalf("%s: held record %d is %s, want %s", r.name, i, got, want[i])
			}
			if !h.held[i].CheckedJSON() && i == len(h.held)-1 && r.name == "sink that does not copy" {
				t.Errorf("%s: the last record lost its mark", r.name)
			}
			got, err := compiled(t, `pad`).Program().Eval(env.Reset(&h.held[i]))
			if err != nil || fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, got) != want[i] {
				t.Fatalf("%s: held record %d reads pad %v, %v", r.name, i, got, err)
			}
		}
	}
}
