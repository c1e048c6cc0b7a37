package source

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestEmitDoesNotAllocate: the source hands a fetched record to its
// output without a heap allocation, a timestamp expression included (it
// sees the subtask's scratch copy of the record, cleared afterwards).
// Before, the record escaped to the heap through the Timestamp function
// value, and the *RecordError checked after Emit was allocated for every
// record.
func TestEmitDoesNotAllocate(t *testing.T) {
	t.Run("format check", func(t *testing.T) { testEmitDoesNotAllocate(t, nil) })
	// A Decoder (the source's connector.Format) sees the subtask's scratch
	// record too.
	t.Run("decoder", func(t *testing.T) { testEmitDoesNotAllocate(t, jsonMarker{}) })
}

// jsonMarker is a Decoder that only marks the value JSON, as the json
// format does for a valid value.
type jsonMarker struct{}

func (jsonMarker) Decode(_ context.Context, rec *runtime.Record) error {
	rec.Format = runtime.FormatJSON
	return nil
}

func testEmitDoesNotAllocate(t *testing.T, dec Decoder) {
	ch := runtime.NewChannel(1)
	s := New(Config{
		Name: "in", Topic: "t", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Decoder: dec,
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
