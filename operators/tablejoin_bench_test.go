package operators

import (
	"context"
	"fmt"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// BenchmarkTableJoinLatest measures table_join (latest, left) as the
// table-join bench scenario runs it: 10,000 keys, every 8th record a table
// row ({"amount": n}, an aggregate's +U) and the others stream records of
// the bench's 100-byte shape, select {"id", "amount", "last"}; per op one
// record, on Pebble.
func BenchmarkTableJoinLatest(b *testing.B) {
	sel, err := CompileExpression(`{"id": left.id, "amount": left.amount, "last": right == null ? null : right.amount}`)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	ch := runtime.NewChannel(1 << 16)
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
	j := NewTableJoin(TableJoinParams{Join: TableJoinLeft, Select: sel})
	op := NewKeyedCoProcessOperator(OpenContext{Operator: "tj", Parallelism: 1}, opener("pebble", b.TempDir()), nil, j, out)
	op.SetMailbox(runtime.NewMailbox())
	if err := op.Open(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = op.Close() }()
	const keys = 10_000
	recs := make([]runtime.Record, 80_000)
	sides := make([]int, len(recs))
	for i := range recs {
		k := fmt.Sprintf("key-%d", (i*7919)%keys)
		if i%8 == 0 {
			recs[i] = runtime.Record{Key: []byte(k), Value: fmt.Appendf(nil, `{"amount":%d}`, i%1000), Change: runtime.ChangeUpdateAfter}
			sides[i] = 1
			continue
		}
		v := fmt.Appendf(nil, `{"id":%d,"key":"%s","shape":"circle","amount":%d,"note":"`, i, k, i%1000)
		for len(v) < 98 {
			v = append(v, 'x')
		}
		recs[i] = runtime.Record{Key: []byte(k), Value: append(v, `"}`...)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		n := i % len(recs)
		if err := op.ProcessRecord(ctx, sides[n], recs[n]); err != nil {
			b.Fatal(err)
		}
		if len(ch) > 1<<15 {
			for len(ch) > 0 {
				<-ch
			}
		}
	}
}
