package source

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/runtime"
)

// TestEmitChangelogHeader: a source reading a header-mode changelog sets
// each record's Change from the kstreamd-change header and removes that
// header (the record's other headers stay), reads a record without it as
// an insert, lets a -D with a null value through, and sends an unknown
// kind to the bad-record policy (fail: the error names the header). A
// source not reading a changelog leaves the header as it is.
func TestEmitChangelogHeader(t *testing.T) {
	upsertMark := kgo.RecordHeader{Key: runtime.ChangelogModeHeader, Value: []byte(runtime.UpsertChangelogMode)}
	hdr := func(kind string) []kgo.RecordHeader {
		return []kgo.RecordHeader{{Key: "trace", Value: []byte("t1")}, {Key: runtime.ChangeHeader, Value: []byte(kind)}}
	}
	for _, c := range []struct {
		name      string
		changelog bool
		upsert    bool
		value     []byte
		headers   []kgo.RecordHeader
		change    runtime.ChangeKind
		wantHdrs  []runtime.Header
		wantErr   string
	}{
		{name: "update before", changelog: true, value: []byte(`{"a":1}`), headers: hdr("-U"), change: runtime.ChangeUpdateBefore,
			wantHdrs: []runtime.Header{{Key: "trace", Value: []byte("t1")}}},
		{name: "update after", changelog: true, value: []byte(`{"a":1}`), headers: hdr("+U"), change: runtime.ChangeUpdateAfter,
			wantHdrs: []runtime.Header{{Key: "trace", Value: []byte("t1")}}},
		{name: "only the kind", changelog: true, value: []byte(`{"a":1}`), headers: hdr("-D")[1:], change: runtime.ChangeDelete},
		{name: "no header: insert", changelog: true, value: []byte(`{"a":1}`), change: runtime.ChangeInsert},
		{name: "delete with null value", changelog: true, value: nil, headers: hdr("-D"), change: runtime.ChangeDelete,
			wantHdrs: []runtime.Header{{Key: "trace", Value: []byte("t1")}}},
		{name: "unknown kind", changelog: true, value: []byte(`{"a":1}`), headers: hdr("+X"),
			wantErr: `source in: bad record at t/1@7: invalid: header kstreamd-change is "+X", want +I, -U, +U or -D (on_error: fail)`},
		{name: "upsert changelog read as full", changelog: true, value: []byte(`{"a":1}`), headers: append(hdr("+U"), upsertMark),
			wantErr: `source: in: record t/1@7 is an upsert changelog's (header kstreamd-changelog: upsert: a table's upserts, written by a sink with changelog: header), but the source reads a full changelog (changelog: header); read it with changelog: upsert_header (and changelog_normalize before an aggregate)`},
		{name: "upsert changelog", changelog: true, upsert: true, value: []byte(`{"a":1}`), headers: append(hdr("+U"), upsertMark), change: runtime.ChangeUpdateAfter,
			wantHdrs: []runtime.Header{{Key: "trace", Value: []byte("t1")}}},
		{name: "upsert changelog tombstone", changelog: true, upsert: true, value: nil, headers: append(hdr("-D"), upsertMark), change: runtime.ChangeDelete,
			wantHdrs: []runtime.Header{{Key: "trace", Value: []byte("t1")}}},
		{name: "upsert reader of a full changelog", changelog: true, upsert: true, value: []byte(`{"a":1}`), headers: hdr("+U"), change: runtime.ChangeUpdateAfter,
			wantHdrs: []runtime.Header{{Key: "trace", Value: []byte("t1")}}},
		{name: "not a changelog source", value: []byte(`{"a":1}`), headers: hdr("-U"), change: runtime.ChangeInsert,
			wantHdrs: []runtime.Header{{Key: "trace", Value: []byte("t1")}, {Key: runtime.ChangeHeader, Value: []byte("-U")}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ch := runtime.NewChannel(1)
			s := New(Config{
				Name: "in", Topic: "t", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Changelog: c.changelog, UpsertChangelog: c.upsert, OnError: OnErrorFail,
				Output: runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{})),
			})
			s.wms = newWatermarks(WatermarkConfig{})
			r := &kgo.Record{Topic: "t", Partition: 1, Offset: 7, Key: []byte("k"), Value: c.value, Timestamp: time.UnixMilli(1), Headers: c.headers}
			err := s.emit(context.Background(), r)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Fatalf("emit: %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := (<-ch).Record
			if got.Change != c.change || !reflect.DeepEqual(got.Headers, c.wantHdrs) || string(got.Value) != string(c.value) {
				t.Fatalf("emitted change %v headers %q value %q, want %v %q %q", got.Change, got.Headers, got.Value, c.change, c.wantHdrs, c.value)
			}
		})
	}
}

// captureWriter is a DeadLetterWriter keeping what WriteTo gets.
type captureWriter struct {
	runtime.SideOutputOperator // not called
	recs                       []runtime.Record
}

func (w *captureWriter) WriteTo(_ context.Context, _ string, rec runtime.Record) error {
	w.recs = append(w.recs, rec)
	return nil
}

// TestDeadLetterKeepsChangeKind: a changelog record dead-lettered by an
// operator's bad-record policy carries its kind in the kstreamd-change
// header after the error headers; an insert gets none.
func TestDeadLetterKeepsChangeKind(t *testing.T) {
	w := &captureWriter{}
	p := NewBadRecordPolicy(PolicyConfig{Source: "in", OnError: OnErrorDeadLetter, DeadLetterTopic: "dlq", Writer: w,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	re := &runtime.RecordError{Reason: runtime.ReasonEvalError, Detail: "x"}
	for _, c := range []runtime.ChangeKind{runtime.ChangeUpdateBefore, runtime.ChangeInsert} {
		if err := p.HandleBadRecord(context.Background(), runtime.Record{Key: []byte("k"), Value: []byte(`{}`), Change: c}, re); err != nil {
			t.Fatal(err)
		}
	}
	last := func(r runtime.Record) string { h := r.Headers[len(r.Headers)-1]; return h.Key + "=" + string(h.Value) }
	if got := last(w.recs[0]); got != "kstreamd-change=-U" {
		t.Errorf("-U dead-lettered with last header %s, want kstreamd-change=-U", got)
	}
	if got := last(w.recs[1]); got != HeaderOffset+"=0" {
		t.Errorf("+I dead-lettered with last header %s, want the offset header", got)
	}
}
