package operators

import (
	"context"
	"fmt"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// BenchmarkKeyedCountPebble measures one record through the keyed_count
// operator on Pebble (write cache on, 10,000 hot keys, output dropped) with
// the synchronous and the async state API, as the task loop drives it:
// ProcessRecord, then the mailbox's completions. allocs/op is per record;
// `kstreamd bench --scenario keyed-count-pebble[-async]` measures the same
// path end to end.
func BenchmarkKeyedCountPebble(b *testing.B) {
	const nkeys = 10000
	recs := make([]runtime.Record, nkeys)
	for i := range recs {
		k := fmt.Appendf(nil, "k%06d", i)
		recs[i] = runtime.Record{Key: k, Value: k}
	}
	for _, c := range []struct {
		name string
		fn   any
	}{
		{"sync", &KeyedCount{}},
		{"async", &AsyncKeyedCount{}},
	} {
		b.Run(c.name, func(b *testing.B) {
			mb := runtime.NewMailbox()
			info := OpenContext{Operator: "op", Subtask: 0, Parallelism: 1}
			var op *KeyedOperator
			switch f := c.fn.(type) {
			case AsyncKeyedProcessFunction:
				op = NewAsyncKeyedProcessOperator(info, opener(state.KindPebble, b.TempDir()), nil, f, nil, mb)
			case KeyedProcessFunction:
				op = NewKeyedProcessOperator(info, opener(state.KindPebble, b.TempDir()), nil, f, nil)
			}
			ctx := context.Background()
			if err := op.Open(ctx); err != nil {
				b.Fatal(err)
			}
			defer op.Close()
			for i := range recs { // warm the cache: every key read once
				if err := op.ProcessRecord(ctx, 0, recs[i]); err != nil {
					b.Fatal(err)
				}
			}
			if err := op.EndInput(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := op.ProcessRecord(ctx, 0, recs[i%nkeys]); err != nil {
					b.Fatal(err)
				}
				mb.TryYieldAll()
				i++
			}
			if err := op.EndInput(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}
