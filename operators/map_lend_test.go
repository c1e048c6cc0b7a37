package operators

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestMapLentValues: chained to a sink that copies values (the Output
// lends them, runtime.Output.LendsValues), the map writes every record's
// value into one buffer it reuses, and the sink gets exactly the values
// it gets when they are not lent (each in a buffer of its own), for a map
// literal (written by the direct evaluator) and a list (Eval's value,
// written by AppendJSON), on random bids of growing and shrinking sizes,
// some failing (a missing field: eval_error, nothing emitted).
func TestMapLentValues(t *testing.T) {
	for _, value := range []string{
		`{"auction": bid.auction, "bidder": bid.bidder, "price": bid.price, "dateTime": bid.dateTime, "extra": bid.extra}`,
		`[bid.auction, bid.extra, bid.price * 2]`,
	} {
		run := func(lend bool) (*copyingSink, *Map, int) {
			sink := &copyingSink{copies: lend}
			out := runtime.NewOutput(nil)
			out.AddChained(&runtime.ChainedOperator{Operator: sink})
			m := NewMap(&MapParams{Value: compiled(t, value)})
			op := NewProcessOperator(OpenContext{Operator: "q0", Parallelism: 1}, nil, m, out)
			ctx := context.Background()
			if err := op.Open(ctx); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(3, 5))
			failed := 0
			for i := range 3000 {
				v := fmt.Appendf(nil, `{"event_type":2,"bid":{"auction":%d,"bidder":%d,"price":%d,"dateTime":%d,"extra":"%s"}}`,
					rng.IntN(1000), rng.IntN(5000), rng.IntN(1e6), 1_700_000_000_000+int64(i), make([]byte, rng.IntN(300)))
				if i%97 == 5 {
					v = fmt.Appendf(nil, `{"event_type":2,"bid":{"auction":%d}}`, i) // no extra, no price: eval_error
				}
				rec := runtime.Record{Key: fmt.Appendf(nil, "k%d", i%7), Value: v}
				rec.SetDecoded(runtime.ValidJSON{})
				sink.next()
				if err := op.ProcessRecord(ctx, 0, rec); err != nil {
					if _, ok := err.(*runtime.RecordError); !ok {
						t.Fatal(err)
					}
					failed++
				}
			}
			return sink, m, failed
		}
		lent, lm, lfailed := run(true)
		own, om, ofailed := run(false)
		if lm.lends != lendYes || om.lends != lendNo {
			t.Fatalf("%s: lends = %d with a copying sink, %d without; want %d, %d", value, lm.lends, om.lends, lendYes, lendNo)
		}
		if len(own.got) < 2900 || ofailed == 0 || lfailed != ofailed {
			t.Fatalf("%s: %d values, %d failed (lent: %d failed)", value, len(own.got), ofailed, lfailed)
		}
		if !slices.Equal(lent.got, own.got) {
			t.Fatalf("%s: lent values: %d, own buffers: %d; first difference at %d", value, len(lent.got), len(own.got), firstDifference(lent.got, own.got))
		}
		// Lent: one buffer, regrown a few times to the largest value; own
		// buffers: a new one per record.
		if distinct(lent.at) > 8 {
			t.Fatalf("%s: lent: %d values start at %d addresses, want the reused buffer's few", value, len(lent.at), distinct(lent.at))
		}
		if distinct(own.at) != len(own.at) {
			t.Fatalf("%s: own buffers: %d values start at %d addresses", value, len(own.at), distinct(own.at))
		}
	}
}

// TestMapMarksItsValue: the record the map emits reads back its value's
// decoded form (the JSON marked checked, or the Go value it encodes) while
// it is the last one written, and a record emitted earlier and kept
// downstream finds none once the map wrote the next (the mark is kept in
// the map's runtime.DecodedSlot, not allocated per record), reading its
// own value again when evaluated.
func TestMapMarksItsValue(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		value, read string
		want        func(v any) bool
	}{
		{`{"a": amount, "n": note}`, `n`, func(v any) bool { _, ok := v.(runtime.ValidJSON); return ok }},
		{`[amount, note]`, `value[1]`, func(v any) bool { l, ok := v.([]any); return ok && len(l) == 2 }},
	} {
		m := NewMap(&MapParams{Value: compiled(t, tc.value)})
		kept := &sliceCollector{}
		for _, v := range []string{`{"amount":17,"note":"first"}`, `{"amount":42,"note":"second"}`} {
			if err := m.ProcessElement(ctx, testRecord(v), kept); err != nil {
				t.Fatal(err)
			}
		}
		if v, ok := kept.recs[1].Decoded(); !ok || !tc.want(v) {
			t.Errorf("%s: the last record emitted reads Decoded() = %#v, %v", tc.value, v, ok)
		}
		if v, ok := kept.recs[0].Decoded(); ok {
			t.Errorf("%s: the first record still finds a decoded form %#v after the map wrote the next", tc.value, v)
		}
		var env RecordEnv
		for i, want := range []string{"first", "second"} {
			got, err := compiled(t, tc.read).Program().Eval(env.Reset(&kept.recs[i]))
			if err != nil || got != want {
				t.Errorf("%s: emitted record %d reads %#v, %v; want %q", tc.value, i, got, err, want)
			}
		}
	}
}

// discardingCopier is a chained sink that copies (runtime.ValueCopier)
// and keeps nothing: the end of a chain whose values are lent.
type discardingCopier struct{ n int }

func (s *discardingCopier) CopyValues() bool               { return true }
func (s *discardingCopier) Open(context.Context) error     { return nil }
func (s *discardingCopier) EndInput(context.Context) error { return nil }
func (s *discardingCopier) Close() error                   { return nil }
func (s *discardingCopier) ProcessRecord(context.Context, int, runtime.Record) error {
	s.n++
	return nil
}

// chainSpec is a job's record path after the source's check: a
// timestamp expression ("" for none), its filters' conditions in chain
// order, a map's value, and the records the source emits (in turn) with
// the event times the timestamp gives them.
type chainSpec struct {
	name, ts string
	filters  []string
	value    string
	records  []chainRecord
}

// chainRecord is one record a chainSpec's source emits and its event time
// in ms (unused without a timestamp).
type chainRecord struct {
	value []byte
	ms    int64
}

// q0 is Nexmark q0's chain (configs/nexmark/q0.yaml) on a bid;
// filterMap the filter-map scenario's (internal/bench) on an item.
var (
	q0 = chainSpec{"nexmark-q0", nexmarkTimestamp, []string{"event_type == 2"},
		`{"auction": bid.auction, "bidder": bid.bidder, "price": bid.price, "dateTime": bid.dateTime, "extra": bid.extra}`,
		[]chainRecord{{[]byte(`{"event_type":2,"person":null,"auction":null,"bid":{"auction":1007,"bidder":2001,"price":4617,"channel":"channel-5901","url":"https://www.nexmark.com/aaaa/bbbb/item.htm?query=1&channel_id=1153433600","dateTime":1700000000123,"extra":"ccccccccccccccccccccc"}}`),
			1700000000123}}}
	filterMap = chainSpec{"filter-map", "", []string{"amount < 500"}, `{"id": id, "key": key, "amount": amount}`,
		[]chainRecord{{[]byte(`{"id":123456,"key":"k000042","shape":"CIRCLE","amount":317,"note":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`), 0}}}
)

// chain returns spec's record path (the timestamp expression, the
// filters, the map, a sink that copies values, chained) as a function
// that emits the next of spec's records (in turn) through it as the
// source does, and the sink that counts what reached it.
func chain(tb testing.TB, spec chainSpec) (emit func(), sink *discardingCopier) {
	ctx := context.Background()
	expr := func(src string) Expression {
		e, err := CompileExpression(src)
		if err != nil {
			tb.Fatal(err)
		}
		return e
	}
	sink = &discardingCopier{}
	out := runtime.NewOutput(nil)
	out.AddChained(&runtime.ChainedOperator{Operator: sink})
	first := NewProcessOperator(OpenContext{Operator: "map", Parallelism: 1}, nil, NewMap(&MapParams{Value: expr(spec.value)}), out)
	ops := []*ProcessOperator{first}
	for i := len(spec.filters) - 1; i >= 0; i-- {
		out = runtime.NewOutput(nil)
		out.AddChained(&runtime.ChainedOperator{Operator: first})
		first = NewProcessOperator(OpenContext{Operator: fmt.Sprintf("filter%d", i), Parallelism: 1}, nil,
			NewFilter(&FilterParams{Condition: BoolExpression{expr(spec.filters[i])}}), out)
		ops = append(ops, first)
	}
	for _, op := range ops {
		if err := op.Open(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	var assign func(rec *runtime.Record) (time.Time, error)
	if spec.ts != "" {
		assign = NewTimestampAssigner(expr(spec.ts), "")
	}
	var doc expression.Doc
	var slot runtime.DecodedSlot
	var rec runtime.Record
	next := 0
	return func() {
		r := spec.records[next]
		if next++; next == len(spec.records) {
			next = 0
		}
		// As the source emits a record its check indexed
		// (source/kafka.go: ResetChecked, SetDecodedIn).
		if !doc.ResetChecked(r.value) {
			tb.Fatal("the record is not valid JSON")
		}
		rec = runtime.Record{Value: r.value, Format: runtime.FormatJSON}
		rec.SetDecodedIn(&slot, &doc)
		if assign != nil {
			ts, err := assign(&rec)
			if err != nil || ts != time.UnixMilli(r.ms) {
				tb.Fatalf("timestamp %v, %v; want %v", ts, err, time.UnixMilli(r.ms))
			}
			rec.Timestamp = ts
		}
		if err := first.ProcessRecord(ctx, 0, rec); err != nil {
			tb.Fatal(err)
		}
	}, sink
}

// TestChainAllocs: Nexmark q0's and the filter-map scenario's record
// paths after the source's check (chain) allocate nothing per record: the
// timestamp's int result is not boxed (expression.Program.EvalInt64), the
// map writes into its lent buffer and marks the value in its slot. Nor do
// those of Nexmark q1, q2, q14, q21 and q22 as configured
// (nexmarkChain), over bids of every branch: q21's channel compared
// lowered without building the lowered string (the direct evaluator's
// dlowerEq, dlowerIn), q14's count of c's without building the string
// without them (dsizeReplace).
func TestChainAllocs(t *testing.T) {
	specs := []chainSpec{q0, filterMap}
	for _, q := range statelessNexmark {
		specs = append(specs, nexmarkChain(t, q))
	}
	for _, spec := range specs {
		emit, sink := chain(t, spec)
		for range spec.records {
			emit() // the first records size the buffers and ask whether values are lent
		}
		sink.n = 0
		// Per round of the records: AllocsPerRun's average is rounded
		// down, so an allocation on some records only would not show per
		// record.
		allocs := testing.AllocsPerRun(10, func() {
			for range spec.records {
				emit()
			}
		})
		if want := chainKept(t, spec) * 11; sink.n != want { // AllocsPerRun runs once more first
			t.Fatalf("%s: the sink got %d records, want %d", spec.name, sink.n, want)
		}
		if !raceEnabled && allocs != 0 { // the race detector allocates for itself
			t.Errorf("%s: %d records cost %v allocations, want 0", spec.name, len(spec.records), allocs)
		}
	}
}

// chainKept returns how many of spec's records its chain passes to the
// sink, failing when none: each chain's allocations are measured on
// records kept.
func chainKept(t *testing.T, spec chainSpec) int {
	emit, sink := chain(t, spec)
	for range spec.records {
		emit()
	}
	if sink.n == 0 {
		t.Fatalf("%s: no record reaches the sink", spec.name)
	}
	return sink.n
}

// BenchmarkChain measures one record through Nexmark q0's and the
// filter-map scenario's record paths after the source (chain): the check
// pass, the timestamp, filter and map; cpu-ns/op is the process's CPU
// time per record (getrusage), which load distorts less than ns/op.
func BenchmarkChain(b *testing.B) {
	specs := []chainSpec{q0, filterMap}
	for _, q := range statelessNexmark {
		specs = append(specs, nexmarkChain(b, q))
	}
	for _, spec := range specs {
		b.Run(spec.name, func(b *testing.B) {
			emit, _ := chain(b, spec)
			b.ReportAllocs()
			cpu := func() time.Duration {
				var ru syscall.Rusage
				if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
					b.Fatal(err)
				}
				return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			}
			start := cpu()
			for b.Loop() {
				emit()
			}
			b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}
