package source

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/runtime"
)

// eventTimeSource is a source subtask (not running) under on_error fail,
// whose emit returns the *BadRecordError of a bad record, over a channel
// of 16 elements.
func eventTimeSource(ts func(*runtime.Record) (time.Time, error), maxAhead time.Duration, now func() time.Time) (*KafkaSource, runtime.Channel) {
	ch := runtime.NewChannel(16)
	s := New(Config{
		Name: "in", Topic: "t", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), OnError: OnErrorFail,
		Output:    runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{})),
		Timestamp: ts, MaxAhead: maxAhead, Now: now,
	})
	s.wms = newWatermarks(WatermarkConfig{})
	return s, ch
}

// TestEventTimeOutOfRange: a Kafka timestamp outside [0, 253402300799999]
// ms (µs and ns values of today, int64's extremes, -2) is a bad record
// with reason event_time_out_of_range naming the Kafka timestamp, and so is
// an assigner's own event_time_out_of_range error (its detail kept); none
// of them is emitted or moves the partition's max timestamp. The bounds
// themselves are good records.
func TestEventTimeOutOfRange(t *testing.T) {
	ctx := context.Background()
	s, ch := eventTimeSource(nil, 0, nil)
	now := int64(1_733_000_000_000) // December 2024, in ms
	for _, ms := range []int64{now * 1000, now * 1_000_000, math.MaxInt64, math.MinInt64, -2, runtime.MaxEventTime + 1} {
		r := &kgo.Record{Topic: "t", Partition: 1, Offset: 3, Value: []byte(`{}`), Timestamp: time.UnixMilli(ms)}
		var be *BadRecordError
		if err := s.emit(ctx, r); !errors.As(err, &be) || be.Reason != ReasonEventTimeOutOfRange ||
			!strings.HasPrefix(be.Detail, "the Kafka timestamp gave ") || be.Offset != 3 {
			t.Fatalf("Kafka timestamp %d: emit = %v, want a bad record event_time_out_of_range from the Kafka timestamp at offset 3", ms, err)
		}
		if _, seen := s.wms.maxTs[1]; seen || len(ch) != 0 {
			t.Fatalf("Kafka timestamp %d: watermarks saw partition 1 (%v) or %d elements emitted", ms, s.wms.maxTs, len(ch))
		}
	}
	for _, ms := range []int64{runtime.MinEventTime, now, runtime.MaxEventTime} {
		r := &kgo.Record{Topic: "t", Partition: 1, Value: []byte(`{}`), Timestamp: time.UnixMilli(ms)}
		if err := s.emit(ctx, r); err != nil {
			t.Fatalf("Kafka timestamp %d: %v", ms, err)
		}
		if el := <-ch; el.Record.Timestamp.UnixMilli() != ms || s.wms.maxTs[1] != ms {
			t.Fatalf("Kafka timestamp %d: emitted %d, max timestamp %d", ms, el.Record.Timestamp.UnixMilli(), s.wms.maxTs[1])
		}
	}

	assigned := &runtime.RecordError{Reason: ReasonEventTimeOutOfRange, Detail: "timestamp expression \"ts\" gave 1733000000000000 ms, outside ..."}
	s, ch = eventTimeSource(func(*runtime.Record) (time.Time, error) { return time.Time{}, assigned }, 0, nil)
	var be *BadRecordError
	if err := s.emit(ctx, &kgo.Record{Topic: "t", Partition: 0, Value: []byte(`{"ts":1733000000000000}`), Timestamp: time.UnixMilli(now)}); !errors.As(err, &be) ||
		be.Reason != ReasonEventTimeOutOfRange || be.Detail != assigned.Detail {
		t.Fatalf("assigner's error: emit = %v, want reason %s detail %q", err, ReasonEventTimeOutOfRange, assigned.Detail)
	}
	if len(s.wms.maxTs) != 0 || len(ch) != 0 {
		t.Fatalf("assigner's error moved the watermarks %v or emitted %d", s.wms.maxTs, len(ch))
	}
	// Other assigner errors keep their reason, with the assigner's detail.
	s, _ = eventTimeSource(func(*runtime.Record) (time.Time, error) {
		return time.Time{}, &runtime.RecordError{Reason: ReasonEvalError, Detail: `expression "ts": no field "ts"`}
	}, 0, nil)
	if err := s.emit(ctx, &kgo.Record{Topic: "t", Value: []byte(`{}`)}); !errors.As(err, &be) || be.Reason != ReasonEvalError || be.Detail != `expression "ts": no field "ts"` {
		t.Fatalf("eval error: emit = %v", err)
	}
}

// TestNoKafkaTimestampPassesOn: a record without a Kafka timestamp
// (Kafka's NO_TIMESTAMP -1, or the zero time of a v0 message) and no
// timestamp expression is not a bad record, even under on_error fail: it
// is emitted with its timestamp unchanged and does not move the
// partition's max timestamp (a good record after it does). With a
// timestamp expression the expression's time is what is checked.
func TestNoKafkaTimestampPassesOn(t *testing.T) {
	ctx := context.Background()
	s, ch := eventTimeSource(nil, time.Hour, nil)
	for _, ts := range []time.Time{time.UnixMilli(-1), {}} {
		if err := s.emit(ctx, &kgo.Record{Topic: "t", Partition: 1, Offset: 7, Value: []byte(`{"a":1}`), Timestamp: ts}); err != nil {
			t.Fatalf("Kafka timestamp %v: emit = %v, want the record emitted", ts, err)
		}
		if el := <-ch; !el.Record.Timestamp.Equal(ts) || string(el.Record.Value) != `{"a":1}` || el.Record.Origin.Offset != 7 {
			t.Fatalf("Kafka timestamp %v: emitted %+v", ts, el.Record)
		}
		if _, seen := s.wms.maxTs[1]; seen {
			t.Fatalf("Kafka timestamp %v moved partition 1's max timestamp to %d", ts, s.wms.maxTs[1])
		}
	}
	good := time.UnixMilli(1_733_000_000_000)
	if err := s.emit(ctx, &kgo.Record{Topic: "t", Partition: 1, Value: []byte(`{}`), Timestamp: good}); err != nil {
		t.Fatal(err)
	}
	<-ch
	if s.wms.maxTs[1] != good.UnixMilli() {
		t.Fatalf("max timestamp %d, want %d", s.wms.maxTs[1], good.UnixMilli())
	}
	s, ch = eventTimeSource(func(*runtime.Record) (time.Time, error) { return good, nil }, 0, nil)
	if err := s.emit(ctx, &kgo.Record{Topic: "t", Partition: 0, Value: []byte(`{}`), Timestamp: time.UnixMilli(-1)}); err != nil {
		t.Fatal(err)
	}
	if el := <-ch; !el.Record.Timestamp.Equal(good) || s.wms.maxTs[0] != good.UnixMilli() {
		t.Fatalf("with an expression: emitted ts %v, max timestamp %d; want %v", el.Record.Timestamp, s.wms.maxTs[0], good)
	}
}

// TestEventTimeMaxAhead: with max_ahead 1m against an injected clock, a
// record stamped exactly 1m ahead passes and one stamped 1m1ms ahead is a
// bad record event_time_out_of_range (from the expression's time, not the
// Kafka timestamp), which does not move the watermark; the clock is read
// per record, so a record good at a later clock passes then. Off (0), any
// time within the bounds passes.
func TestEventTimeMaxAhead(t *testing.T) {
	ctx := context.Background()
	clock := time.UnixMilli(1_700_000_000_000)
	fromValue := func(rec *runtime.Record) (time.Time, error) {
		var ms int64
		for _, c := range rec.Value {
			ms = ms*10 + int64(c-'0')
		}
		return time.UnixMilli(ms), nil
	}
	s, ch := eventTimeSource(fromValue, time.Minute, func() time.Time { return clock })
	rec := func(ms int64) *kgo.Record {
		return &kgo.Record{Topic: "t", Partition: 2, Value: strconv.AppendInt(nil, ms, 10), Timestamp: clock}
	}
	if err := s.emit(ctx, rec(clock.UnixMilli()+60_000)); err != nil {
		t.Fatalf("1m ahead: %v", err)
	}
	<-ch
	var be *BadRecordError
	if err := s.emit(ctx, rec(clock.UnixMilli()+60_001)); !errors.As(err, &be) || be.Reason != ReasonEventTimeOutOfRange ||
		!strings.Contains(be.Detail, "the timestamp expression gave 1700000060001 ms") || !strings.Contains(be.Detail, "1m0.001s ahead") {
		t.Fatalf("1m1ms ahead: emit = %v", err)
	}
	if s.wms.maxTs[2] != clock.UnixMilli()+60_000 || len(ch) != 0 {
		t.Fatalf("max timestamp %d (%d emitted), want the good record's %d", s.wms.maxTs[2], len(ch), clock.UnixMilli()+60_000)
	}
	clock = clock.Add(time.Millisecond)
	if err := s.emit(ctx, rec(clock.UnixMilli()+59_999+1)); err != nil {
		t.Fatalf("1m ahead of the later clock: %v", err)
	}
	s, _ = eventTimeSource(fromValue, 0, func() time.Time { return clock })
	if err := s.emit(ctx, rec(runtime.MaxEventTime)); err != nil {
		t.Fatalf("max_ahead off: %v", err)
	}
}

// TestRestoredMaxTimestampOutOfRange: a checkpoint written before event
// times were bounded may hold a partition's max timestamp of int64's
// maximum; the restore drops it (the partition starts with no timestamp,
// holding the watermark back until its next good record) instead of
// holding the watermark out of range for good, and keeps a good one.
func TestRestoredMaxTimestampOutOfRange(t *testing.T) {
	huge, good := int64(math.MaxInt64), int64(1_733_000_000_000)
	s, _ := eventTimeSource(nil, 0, nil)
	s.cfg.Partitions = 2
	s.cfg.Restored = &Restored{Splits: []Split{
		{Topic: "t", Partition: 0, Offset: 5, MaxTimestamp: &huge},
		{Topic: "t", Partition: 1, Offset: 9, MaxTimestamp: &good},
	}, Known: []int32{0, 1}}
	if err := s.assign(); err != nil {
		t.Fatal(err)
	}
	if s.wms.maxTs[0] != noTimestamp || s.wms.maxTs[1] != good || s.pos[0] != 5 || s.pos[1] != 9 {
		t.Fatalf("restored max timestamps %v, offsets %v; want partition 0 none, 1 at %d, offsets 5 and 9", s.wms.maxTs, s.pos, good)
	}
	if _, ok := s.wms.next(time.Now()); ok {
		t.Fatal("a watermark was emitted with partition 0 holding it back")
	}
}
