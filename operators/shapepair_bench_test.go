package operators

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// BenchmarkShapePairMatcher measures one record through the shape-pair
// matcher on Pebble (write cache on), the shape of `kstreamd bench
// --scenario matcher-10-rules`: 10 rules (every pair of 5 shapes), 5,000
// keys (the share of one of its two subtasks), uniform keys and shapes, values of about 100 bytes, so each record
// touches 4 rules and emits about 2 matches (built, then dropped: no
// output); the records are marked runtime.ValidJSON, as the job's JSON
// source marks them (the mark crosses the key_by). Every 50,000 records the backend's write cache is flushed to
// Pebble (state.EntryCount, which also counts the entries), as the
// checkpoint before each snapshot does. allocs/op is per record.
//
// Each record's key and shape are drawn anew (one of a value per key and
// shape made in advance), as the bench's generator draws them, so the
// stored items per key stay bounded however long it runs (a replayed
// ring of records would give some keys a first shape without its second
// in every round, whose lists then grow without end until the write
// cache evicts). items/key reports the stored items per key at the end
// (about 10), and the run fails if they grew past benchMaxItemsPerKey;
// cpu-ns/op is the process's CPU time per record (getrusage).
func BenchmarkShapePairMatcher(b *testing.B) { benchShapePairMatcher(b, nil) }

// BenchmarkShapePairMatcherChained is BenchmarkShapePairMatcher with the
// matches going to a chained sink that copies each value before it
// returns (as the Kafka sink does with CopyValues) into a buffer it
// reuses: the matcher builds them in its lent buffer, not in slabs of
// its own.
func BenchmarkShapePairMatcherChained(b *testing.B) {
	out := runtime.NewOutput(nil)
	out.AddChained(&runtime.ChainedOperator{Operator: &benchCopySink{}})
	benchShapePairMatcher(b, out)
}

// benchCopySink is a chained sink, a runtime.ValueCopier, that copies
// every value into one buffer it reuses.
type benchCopySink struct{ buf []byte }

func (s *benchCopySink) CopyValues() bool               { return true }
func (s *benchCopySink) Open(context.Context) error     { return nil }
func (s *benchCopySink) EndInput(context.Context) error { return nil }
func (s *benchCopySink) Close() error                   { return nil }
func (s *benchCopySink) ProcessRecord(_ context.Context, _ int, rec runtime.Record) error {
	s.buf = append(s.buf[:0], rec.Value...)
	return nil
}

func benchShapePairMatcher(b *testing.B, out *runtime.Output) {
	shapes := []string{"CIRCLE", "SQUARE", "TRIANGLE", "RECTANGLE", "HEXAGON"}
	const nkeys, warm, flushEvery = 5000, 1 << 16, 50000
	rng := rand.New(rand.NewPCG(1, 2))
	recs := make([]runtime.Record, nkeys*len(shapes)) // key k, shape s at k*len(shapes)+s
	for i := range recs {
		k, s := i/len(shapes), i%len(shapes)
		key := fmt.Sprintf("k%06d", k)
		v := fmt.Appendf(nil, `{"id":%d,"key":"%s","shape":"%s","amount":%d,"note":"`, i, key, shapes[s], rng.IntN(1000))
		for len(v) < 98 {
			v = append(v, 'x')
		}
		recs[i] = runtime.Record{Key: []byte(key), Value: append(v, `"}`...)}
		recs[i].SetDecoded(runtime.ValidJSON{}) // as the job's source marks them, before the key_by
	}
	next := func() runtime.Record { return recs[rng.IntN(nkeys)*len(shapes)+rng.IntN(len(shapes))] }
	fn := &ShapePairMatcher{}
	op := NewKeyedBroadcastOperator(OpenContext{Operator: "matcher", Subtask: 0, Parallelism: 1}, opener(state.KindPebble, b.TempDir()), nil, fn, out)
	ctx := context.Background()
	if err := op.Open(ctx); err != nil {
		b.Fatal(err)
	}
	defer op.Close()
	n := 0
	for i := range shapes {
		for j := i + 1; j < len(shapes); j++ {
			v := fmt.Appendf(nil, `{"name":"R%02d","first":%q,"second":%q}`, n, shapes[i], shapes[j])
			if err := op.ProcessRecord(ctx, 1, runtime.Record{Key: fmt.Appendf(nil, "R%02d", n), Value: v}); err != nil {
				b.Fatal(err)
			}
			n++
		}
	}
	for range warm { // warm the cache and the stored lists
		if err := op.ProcessRecord(ctx, 0, next()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	cpu := processCPU()
	for b.Loop() {
		if err := op.ProcessRecord(ctx, 0, next()); err != nil {
			b.Fatal(err)
		}
		if i++; i%flushEvery == 0 {
			if _, err := state.EntryCount(fn.backend); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	// CPU per record (the process's, Pebble's goroutines included):
	// steadier than ns/op on a loaded machine.
	b.ReportMetric(float64(processCPU()-cpu)/float64(i), "cpu-ns/op")
	keys, items := 0, 0
	err := state.ApplyToAllValueKeys(fn.backend, ShapePairListsState, func(_ []byte, vs state.ValueState[*ShapePairLists]) error {
		l, err := listsValue(vs)
		for _, pl := range l.lists {
			items += len(pl.items)
		}
		keys++
		return err
	})
	if err != nil || keys == 0 {
		b.Fatalf("counting the stored items: %d keys, %v", keys, err)
	}
	b.ReportMetric(float64(items)/float64(keys), "items/key")
	if items > benchMaxItemsPerKey*keys {
		b.Fatalf("%d stored items over %d keys: the input let some lists grow without end", items, keys)
	}
}

// benchMaxItemsPerKey bounds the stored items per key at the end of
// benchShapePairMatcher: about 10 with uniform shapes (about one per rule:
// a rule's first shape is as likely as its second), twice that only when
// the input lets lists grow (the earlier replayed ring passed 20 at about
// 500,000 records and kept growing).
const benchMaxItemsPerKey = 20
