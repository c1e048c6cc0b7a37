package operators

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// valueSink is a chained sink that keeps a copy of every value it gets
// (it copies, so a map before it may lend its buffer) and the bad records
// its branch's filter met, in order, in log; with a nil log it counts the
// values only (n).
type valueSink struct {
	name string
	log  *[]string
	n    int
}

func (s *valueSink) CopyValues() bool               { return true }
func (s *valueSink) Open(context.Context) error     { return nil }
func (s *valueSink) EndInput(context.Context) error { return nil }
func (s *valueSink) Close() error                   { return nil }
func (s *valueSink) ProcessRecord(_ context.Context, _ int, rec runtime.Record) error {
	if s.n++; s.log == nil {
		return nil
	}
	*s.log = append(*s.log, s.name+" <- "+string(rec.Value))
	return nil
}

// HandleBadRecord implements runtime.BadRecordHandler for the filter of
// s's branch.
func (s *valueSink) HandleBadRecord(_ context.Context, rec runtime.Record, err *runtime.RecordError) error {
	*s.log = append(*s.log, fmt.Sprintf("%s bad %s: %s: %s", s.name, rec.Value, err.Reason, err.Detail))
	return nil
}

// intervalJoinFanOut builds interval-join's split of its source, chained
// as a job chains it: the source's Output hands each record to the filter
// id % 2 == 0 and then to the filter id % 2 == 1 (runtime.Output.Emit, by
// value). With mapped, the even branch maps what it keeps to a new value
// ({"id": id, "twice": id * 2}) before its sink, so the odd filter reads
// the source's record after a branch before it wrote bytes of its own.
// emit hands one value to the split as the source does (its checked Doc
// when shared, the mark of checked JSON when not).
func intervalJoinFanOut(tb testing.TB, mapped bool, log *[]string) (emit func(value []byte, shared bool)) {
	ctx := context.Background()
	expr := func(src string) Expression {
		e, err := CompileExpression(src)
		if err != nil {
			tb.Fatal(err)
		}
		return e
	}
	open := func(op *ProcessOperator) *ProcessOperator {
		if err := op.Open(ctx); err != nil {
			tb.Fatal(err)
		}
		return op
	}
	src := runtime.NewOutput(nil)
	for _, b := range []struct{ name, cond string }{{"even", "id % 2 == 0"}, {"odd", "id % 2 == 1"}} {
		sink := &valueSink{name: b.name, log: log}
		out := runtime.NewOutput(nil)
		out.AddChained(&runtime.ChainedOperator{Operator: sink})
		if mapped && b.name == "even" {
			m := open(NewProcessOperator(OpenContext{Operator: "twice", Parallelism: 1}, nil,
				NewMap(&MapParams{Value: expr(`{"id": id, "twice": id * 2}`)}), out))
			out = runtime.NewOutput(nil)
			out.AddChained(&runtime.ChainedOperator{Operator: m})
		}
		f := open(NewProcessOperator(OpenContext{Operator: b.name, Parallelism: 1}, nil,
			NewFilter(&FilterParams{Condition: BoolExpression{expr(b.cond)}}), out))
		src.AddChained(&runtime.ChainedOperator{Operator: f, BadRecords: sink})
	}
	var doc expression.Doc
	var slot runtime.DecodedSlot
	return func(value []byte, shared bool) {
		rec := runtime.Record{Value: value, Format: runtime.FormatJSON}
		if shared {
			// As the source emits a record its check indexed
			// (source/kafka.go: ResetChecked, SetDecodedIn).
			if !doc.ResetChecked(value) {
				tb.Fatalf("%s is not valid JSON", value)
			}
			rec.SetDecodedIn(&slot, &doc)
		} else {
			rec.SetDecodedIn(&slot, runtime.ValidJSON{})
		}
		if err := src.Emit(ctx, rec); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestFanOutFiltersShareDocMappedBranch: interval-join's two filters on
// one source share the source's Doc while the first one's branch maps
// what it keeps to new bytes: every output and bad record is exactly the
// one each filter gives on a record of its own (the mark of checked
// JSON: each branch reads the JSON itself), a repeated key's last value
// decides both filters, and a record read after others (the Doc reset
// for it) keeps nothing of theirs.
func TestFanOutFiltersShareDocMappedBranch(t *testing.T) {
	inputs := []string{
		`{"id":1,"k":"a"}`,
		`{"id":2,"k":"b"}`,
		`{"id":2,"id":3}`,
		`{"id":4.5}`,
		`{"k":"x"}`,
		`{"id":-6,"n":{"id":7}}`,
		`{"n":{"id":8},"id":9}`,
		`[2]`,
	}
	want := []string{
		`odd <- {"id":1,"k":"a"}`,
		`even <- {"id":2,"twice":4}`,
		`odd <- {"id":2,"id":3}`,
		`even bad {"id":4.5}: eval_error: expression "id % 2 == 0": 1:4: no operator % for double and int`,
		`odd bad {"id":4.5}: eval_error: expression "id % 2 == 1": 1:4: no operator % for double and int`,
		`even bad {"k":"x"}: eval_error: expression "id % 2 == 0": 1:1: no field "id" in the record value`,
		`odd bad {"k":"x"}: eval_error: expression "id % 2 == 1": 1:1: no field "id" in the record value`,
		`even <- {"id":-6,"twice":-12}`,
		`odd <- {"n":{"id":8},"id":9}`,
		`even bad [2]: eval_error: expression "id % 2 == 0": 1:1: no field "id": the record value is an array, not an object`,
		`odd bad [2]: eval_error: expression "id % 2 == 1": 1:1: no field "id": the record value is an array, not an object`,
	}
	run := func(shared bool, rounds int) []string {
		var log []string
		emit := intervalJoinFanOut(t, true, &log)
		for range rounds {
			for _, in := range inputs {
				emit([]byte(in), shared)
			}
		}
		return log
	}
	alone := run(false, 1)
	if got := run(true, 1); !slices.Equal(got, alone) {
		t.Fatalf("shared Doc:\n%q\nwant (each branch its own):\n%q", got, alone)
	}
	// The outputs themselves, and a second round on the same Doc.
	if !slices.Equal(alone, want) {
		t.Fatalf("outputs:\n%q\nwant:\n%q", alone, want)
	}
	if got := run(true, 2); !slices.Equal(got, slices.Concat(alone, alone)) {
		t.Fatalf("two rounds on the shared Doc:\n%q", got)
	}
}

// BenchmarkChainFanOut measures one record through interval-join's
// split of its source (intervalJoinFanOut without the map: two filters,
// id % 2 == 0 and id % 2 == 1, each before a sink), with the source's
// check pass as the source runs it; cpu-ns/op is the process's CPU time
// per record (getrusage).
func BenchmarkChainFanOut(b *testing.B) {
	emit := intervalJoinFanOut(b, false, nil)
	values := make([][]byte, 64)
	for i := range values {
		values[i] = fmt.Appendf(nil, `{"id":%d,"key":"k%06d","shape":"CIRCLE","amount":%d,"note":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`, 1_000_000+i, i*7919%10000, i*37%1000)
	}
	b.ReportAllocs()
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	i := 0
	for b.Loop() {
		emit(values[i&63], true)
		i++
	}
	b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
}
