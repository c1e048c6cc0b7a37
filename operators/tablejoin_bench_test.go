package operators

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// BenchmarkTableJoinLatest measures table_join (latest, left) as the
// table-join bench scenario runs it: 10,000 keys, every 8th record a table
// row ({"amount": n}, an aggregate's +U) and the others stream records of
// the bench's 100-byte shape, select {"id", "amount", "last"}; per op one
// record, on Pebble. A key here gets either table rows or stream records,
// never both, so every stream record joins null (see
// BenchmarkTableJoinLatestMatched).
func BenchmarkTableJoinLatest(b *testing.B) {
	recs := make([]runtime.Record, 80_000)
	sides := make([]int, len(recs))
	for i := range recs {
		recs[i], sides[i] = tableJoinBenchRecord(i, (i*7919)%tableJoinBenchKeys)
	}
	benchTableJoin(b, nil, recs, sides)
}

// BenchmarkTableJoinLatestMatched is BenchmarkTableJoinLatest with the
// keys drawn at random (as the bench scenario's generator draws them) and
// a row for every key written first: nearly every stream record joins a
// row, as in the scenario after its first records.
func BenchmarkTableJoinLatestMatched(b *testing.B) {
	pre, recs, sides := tableJoinMatchedRecords(false)
	benchTableJoin(b, pre, recs, sides)
}

// BenchmarkTableJoinLatestChecked is BenchmarkTableJoinLatestMatched with
// the stream records marked valid JSON (runtime.ValidJSON), as records
// from a json source reach the join across its key_by in the bench
// scenario.
func BenchmarkTableJoinLatestChecked(b *testing.B) {
	pre, recs, sides := tableJoinMatchedRecords(true)
	benchTableJoin(b, pre, recs, sides)
}

// tableJoinMatchedRecords returns the records of
// BenchmarkTableJoinLatestMatched: pre, a table row for every key, then
// 80,000 records of keys drawn at random and their inputs (sides). With
// checked the stream records are marked valid JSON (runtime.ValidJSON).
func tableJoinMatchedRecords(checked bool) (pre, recs []runtime.Record, sides []int) {
	rng := rand.New(rand.NewPCG(12, 34))
	pre = make([]runtime.Record, tableJoinBenchKeys)
	for k := range pre {
		pre[k], _ = tableJoinBenchRecord(0, k)
	}
	recs = make([]runtime.Record, 80_000)
	sides = make([]int, len(recs))
	for i := range recs {
		recs[i], sides[i] = tableJoinBenchRecord(i, rng.IntN(tableJoinBenchKeys))
		if checked && sides[i] == 0 {
			recs[i].SetDecoded(runtime.ValidJSON{})
		}
	}
	return pre, recs, sides
}

// tableJoinBenchKeys is the number of keys of the table join benchmarks.
const tableJoinBenchKeys = 10_000

// tableJoinBenchRecord returns record i of the table join benchmarks, of
// key k, and its input (1: a table row, every 8th; 0: a stream record).
func tableJoinBenchRecord(i, k int) (runtime.Record, int) {
	key := fmt.Sprintf("key-%d", k)
	if i%8 == 0 {
		return runtime.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"amount":%d}`, i%1000), Change: runtime.ChangeUpdateAfter}, 1
	}
	v := fmt.Appendf(nil, `{"id":%d,"key":"%s","shape":"circle","amount":%d,"note":"`, i, key, i%1000)
	for len(v) < 98 {
		v = append(v, 'x')
	}
	return runtime.Record{Key: []byte(key), Value: append(v, `"}`...)}, 0
}

// benchTableJoin runs the table join benchmark: the table records pre
// (input 1) untimed, then per op the next of recs on its input sides[n].
func benchTableJoin(b *testing.B, pre, recs []runtime.Record, sides []int) {
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
	for _, rec := range pre {
		if err := op.ProcessRecord(ctx, 1, rec); err != nil {
			b.Fatal(err)
		}
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
