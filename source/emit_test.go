package source

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestEmitDoesNotAllocate: the source hands a fetched record to its
// output without a heap allocation, a timestamp expression included (it
// sees the subtask's scratch copy of the record, cleared afterwards).
// Before, the record escaped to the heap through the Timestamp function
// value, and the *RecordError checked after Emit was allocated for every
// record.
func TestEmitDoesNotAllocate(t *testing.T) {
	t.Run("format check", func(t *testing.T) { testEmitDoesNotAllocate(t, nil, nil) })
	// A Decoder (the source's connector.Format) sees the subtask's scratch
	// record too.
	t.Run("decoder", func(t *testing.T) { testEmitDoesNotAllocate(t, jsonMarker{}, nil) })
	// The job's sources reset one expression.Doc per record (NewJSONDoc).
	t.Run("shared doc", func(t *testing.T) { testEmitDoesNotAllocate(t, nil, newTestDoc) })
}

// newTestDoc is the job's source.Config.NewJSONDoc.
func newTestDoc() runtime.ReusableJSON { return new(expression.Doc) }

// jsonMarker is a Decoder that only marks the value JSON, as the json
// format does for a valid value.
type jsonMarker struct{}

func (jsonMarker) Decode(_ context.Context, rec *runtime.Record) error {
	rec.Format = runtime.FormatJSON
	return nil
}

func testEmitDoesNotAllocate(t *testing.T, dec Decoder, newDoc func() runtime.ReusableJSON) {
	ch := runtime.NewChannel(1)
	s := New(Config{
		Name: "in", Topic: "t", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Decoder: dec, NewJSONDoc: newDoc,
		Output:    runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{})),
		Timestamp: func(rec *runtime.Record) (time.Time, error) { return time.UnixMilli(int64(1000 * len(rec.Value))), nil },
	})
	s.wms = newWatermarks(WatermarkConfig{})
	r := &kgo.Record{Topic: "t", Partition: 1, Offset: 7, Key: []byte("k"), Value: []byte(`{"a":1}`), Timestamp: time.UnixMilli(1)}
	ctx := context.Background()
	var got runtime.Element
	allocs := testing.AllocsPerRun(100, func() {
		if err := s.emit(ctx, r); err != nil {
			t.Fatal(err)
		}
		got = <-ch
	})
	if allocs != 0 {
		t.Fatalf("emit allocates %v times per record, want 0", allocs)
	}
	want := runtime.Record{Key: r.Key, Value: r.Value, Timestamp: time.UnixMilli(7000), Origin: runtime.Origin{Topic: "t", Partition: 1, Offset: 7}}
	if got.Kind != runtime.KindRecord || string(got.Record.Key) != "k" || string(got.Record.Value) != `{"a":1}` ||
		!got.Record.Timestamp.Equal(want.Timestamp) || got.Record.Origin != want.Origin || got.Record.Headers != nil {
		t.Fatalf("emitted %v %+v, want record %+v", got.Kind, got.Record, want)
	}
	if s.scratch.Key != nil || s.scratch.Value != nil {
		t.Fatalf("scratch still holds key %q value %q after emit", s.scratch.Key, s.scratch.Value)
	}
	if s.wms.maxTs[1] != 7000 || len(s.wms.seen) != 1 || s.wms.seen[0] != 1 {
		t.Fatalf("watermarks: maxTs %v seen %v; want partition 1 at 7000, seen once", s.wms.maxTs, s.wms.seen)
	}
}

// TestEmitTable: a table source (Config.Table) emits an upsert as
// ChangeUpdateAfter and a tombstone as ChangeDelete with a nil value, and
// refuses a record without a key (reason missing_key); the same null value
// on a source that is not a table stays a bad record (empty_value), as
// before.
func TestEmitTable(t *testing.T) {
	read := func(table bool, recs ...*kgo.Record) (out []runtime.Record, skipped []string) {
		ch := runtime.NewChannel(len(recs) + 1)
		s := New(Config{
			Name: "users", Topic: "users", Table: table, OnError: OnErrorFail, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Output: runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{})),
		})
		s.wms = newWatermarks(WatermarkConfig{})
		for _, r := range recs {
			var bad *BadRecordError
			if err := s.emit(context.Background(), r); errors.As(err, &bad) {
				skipped = append(skipped, bad.Reason)
			} else if err != nil {
				t.Fatal(err)
			}
		}
		for len(ch) > 0 {
			if el := <-ch; el.Kind == runtime.KindRecord {
				out = append(out, el.Record)
			}
		}
		return out, skipped
	}
	recs := []*kgo.Record{
		{Topic: "users", Key: []byte("u1"), Value: []byte(`{"country":"NL"}`), Timestamp: time.UnixMilli(10)},
		{Topic: "users", Key: []byte("u1"), Value: nil, Timestamp: time.UnixMilli(20), Offset: 1},
		{Topic: "users", Key: nil, Value: []byte(`{"country":"DE"}`), Timestamp: time.UnixMilli(30), Offset: 2},
	}
	out, skipped := read(true, recs...)
	if len(out) != 2 || out[0].Change != runtime.ChangeUpdateAfter || string(out[0].Value) != `{"country":"NL"}` ||
		out[1].Change != runtime.ChangeDelete || out[1].Value != nil || string(out[1].Key) != "u1" || !out[1].Timestamp.Equal(time.UnixMilli(20)) {
		t.Fatalf("table emitted %+v", out)
	}
	if len(skipped) != 1 || skipped[0] != ReasonMissingKey {
		t.Fatalf("table skipped %v, want [missing_key]", skipped)
	}
	out, skipped = read(false, recs...)
	if len(out) != 2 || out[0].Change != runtime.ChangeInsert || out[1].Change != runtime.ChangeInsert || string(out[1].Value) != `{"country":"DE"}` {
		t.Fatalf("plain source emitted %+v", out)
	}
	if len(skipped) != 1 || skipped[0] != ReasonEmptyValue {
		t.Fatalf("plain source skipped %v, want [empty_value]", skipped)
	}
}

// BenchmarkEmitJSON measures one record through emit with the json check:
// the source's own (Config.Format) and the json format behind the
// connector seam (Config.Decoder = connector.JSONFormat), which a job
// builds for every kafka source now.
func BenchmarkEmitJSON(b *testing.B) {
	for _, bc := range []struct {
		name string
		dec  Decoder
	}{{"format-check", nil}, {"json-format-decoder", connector.JSONFormat{}}} {
		b.Run(bc.name, func(b *testing.B) {
			ch := runtime.NewChannel(1)
			s := New(Config{Name: "in", Topic: "t", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Decoder: bc.dec,
				Output: runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))})
			s.wms = newWatermarks(WatermarkConfig{})
			r := &kgo.Record{Topic: "t", Partition: 1, Offset: 7, Key: []byte("k"),
				Value: []byte(`{"id":12345,"user":"u-1234","amount":17.5,"currency":"EUR","ts":1700000000000,"tags":["a","b"]}`), Timestamp: time.UnixMilli(1)}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := s.emit(ctx, r); err != nil {
					b.Fatal(err)
				}
				<-ch
			}
		})
	}
}

// TestEmitMarksCheckedJSON: a record whose value the source's decode
// checked as JSON reaches the chain marked checked (runtime.Record.CheckedJSON:
// the source's valid expression.Doc; the
// timestamp expression, the first to see it, reads it as such), whether
// the source checked it itself (format json, no Decoder) or its Decoder
// is the json format (connector.JSONFormat, a JSONChecker); a Decoder that
// does not say it checks JSON (jsonMarker, the string format) leaves it
// unmarked. Before, a job's sources, which
// always have their format as Decoder, never marked it, and the first
// expression of every chain checked the JSON again.
func TestEmitMarksCheckedJSON(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format Format
		dec    Decoder
		want   bool
	}{
		{"format json", FormatJSON, nil, true},
		{"format string", FormatString, nil, false},
		{"json format decoder", FormatJSON, connector.JSONFormat{}, true},
		{"decoder not a checker", FormatJSON, jsonMarker{}, false},
		{"text format decoder", FormatString, connector.TextFormat{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := runtime.NewChannel(1)
			var marked, seen bool
			s := New(Config{
				Name: "in", Topic: "t", Format: tc.format, Decoder: tc.dec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				NewJSONDoc: newTestDoc,
				Output:     runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{})),
				Timestamp: func(rec *runtime.Record) (time.Time, error) {
					marked, seen = rec.CheckedJSON(), true
					if v, _ := rec.Decoded(); marked {
						if _, ok := v.(*expression.Doc); !ok {
							t.Errorf("the checked value's decoded form is %#v, want the source's expression.Doc", v)
						}
					}
					return time.UnixMilli(1), nil
				},
			})
			s.wms = newWatermarks(WatermarkConfig{})
			if err := s.emit(context.Background(), &kgo.Record{Topic: "t", Value: []byte(`{"a":1}`)}); err != nil {
				t.Fatal(err)
			}
			<-ch
			if !seen || marked != tc.want {
				t.Fatalf("timestamp saw the value marked ValidJSON: %v (called %v), want %v", marked, seen, tc.want)
			}
		})
	}
}

// docRecorder is a chained operator noting the decoded form of each
// record it gets.
type docRecorder struct{ seen []any }

func (r *docRecorder) Open(context.Context) error { return nil }
func (r *docRecorder) ProcessRecord(_ context.Context, _ int, rec runtime.Record) error {
	v, _ := rec.Decoded()
	r.seen = append(r.seen, v)
	if d, ok := v.(*expression.Doc); ok {
		d.Field("a") // what a branch's expression reads: once for every branch
	}
	return nil
}
func (r *docRecorder) EndInput(context.Context) error { return nil }
func (r *docRecorder) Close() error                   { return nil }

// TestEmitSharesOneDocAcrossAFanOut: every operator chained to the
// source (the branches of a fan-out) gets the record with one
// expression.Doc, the source's, valid without a check: the JSON is
// indexed once per record however many branches read it (before, each
// branch got the mark of checked JSON and indexed a Doc of its own). The
// Doc is checked (CheckedJSON), so a record the source sends over a
// channel still carries runtime.ValidJSON's mark (runtime's
// TestValidJSONCrossesAChannel).
func TestEmitSharesOneDocAcrossAFanOut(t *testing.T) {
	ch := runtime.NewChannel(4)
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
	b1, b2 := &docRecorder{}, &docRecorder{}
	out.AddChained(&runtime.ChainedOperator{ID: runtime.TaskID{Operator: "b1"}, Operator: b1})
	out.AddChained(&runtime.ChainedOperator{ID: runtime.TaskID{Operator: "b2"}, Operator: b2})
	s := New(Config{
		Name: "in", Topic: "t", Format: FormatJSON, Decoder: connector.JSONFormat{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Output: out, NewJSONDoc: newTestDoc,
	})
	s.wms = newWatermarks(WatermarkConfig{})
	for _, v := range []string{`{"a":1}`, `{"a":2,"b":[3]}`} {
		if err := s.emit(context.Background(), &kgo.Record{Topic: "t", Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
		<-ch
	}
	for i := range 2 {
		d, ok := b1.seen[i].(*expression.Doc)
		if !ok || b2.seen[i] != any(d) || !d.CheckedJSON() {
			t.Fatalf("record %d: branches got %#v and %#v, want one checked expression.Doc", i, b1.seen[i], b2.seen[i])
		}
	}
	if b1.seen[0] != b1.seen[1] {
		t.Errorf("the source made a Doc per record (%p, %p), want its one reused Doc", b1.seen[0], b1.seen[1])
	}
	if got := string(b1.seen[1].(*expression.Doc).JSON()); got != `{"a":2,"b":[3]}` {
		t.Errorf("the shared Doc reads %s, want the second record", got)
	}
}
