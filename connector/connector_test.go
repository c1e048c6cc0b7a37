package connector

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/runtime"
)

// noSink is a sink type's New that builds nothing.
func noSink(SinkContext) (runtime.Operator, error) { return nil, nil }

// TestRegistryRefuses: Register refuses an empty or duplicate type, a
// missing New, a sink without deliveries or with an unknown one, and an
// exactly-once sink without Recover; lookups default "" to kafka and
// list types sorted.
func TestRegistryRefuses(t *testing.T) {
	r := NewRegistry()
	recov := func(context.Context, RecoverContext) error { return nil }
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"empty source", r.RegisterSource(SourceFactory{New: func(SourceContext) (runtime.SourceTask, error) { return nil, nil }}), "connector: register source: empty type name"},
		{"source without New", r.RegisterSource(SourceFactory{Type: "s"}), `connector: register source "s": New is nil`},
		{"sink without deliveries", r.RegisterSink(SinkFactory{Type: "k", New: noSink}), `connector: register sink "k": no deliveries`},
		{"exactly-once without Recover", r.RegisterSink(SinkFactory{Type: "k", New: noSink, Deliveries: []graph.Delivery{graph.DeliveryExactlyOnce}}),
			`connector: register sink "k": exactly-once needs Recover`},
		{"unknown delivery", r.RegisterSink(SinkFactory{Type: "k", New: noSink, Deliveries: []graph.Delivery{"twice"}, Recover: recov}),
			`connector: register sink "k": unknown delivery "twice"`},
		{"format without New", r.RegisterFormat(FormatFactory{Type: "f"}), `connector: register format "f": New is nil`},
	} {
		if tc.err == nil || tc.err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, tc.err, tc.want)
		}
	}
	ok := SinkFactory{Type: "kafka", New: noSink, Deliveries: []graph.Delivery{graph.DeliveryAtLeastOnce}}
	if err := r.RegisterSink(ok); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterSink(ok); err == nil || err.Error() != `connector: register sink "kafka": type already registered` {
		t.Fatalf("duplicate: %v", err)
	}
	if err := r.RegisterSink(SinkFactory{Type: "file", New: noSink, Deliveries: []graph.Delivery{graph.DeliveryExactlyOnce}, Recover: recov}); err != nil {
		t.Fatal(err)
	}
	if f, found := r.Sink(""); !found || f.Type != DefaultType {
		t.Fatalf(`Sink("") = %v, %v; want the kafka type`, f, found)
	}
	if got := r.SinkTypes(); !slices.Equal(got, []string{"file", "kafka"}) {
		t.Fatalf("SinkTypes %v", got)
	}
	f, _ := r.Sink("kafka")
	if !f.Supports("") || !f.Supports(graph.DeliveryAtLeastOnce) || f.Supports(graph.DeliveryExactlyOnce) {
		t.Fatal("Supports: want the default (at-least-once) and nothing else")
	}
}

// TestBuiltinFormats: json refuses a value that is not one JSON value with
// malformed_json and the syntax detail and marks a good one JSON; string
// and bytes mark the value text; every Encode leaves the record as it is.
func TestBuiltinFormats(t *testing.T) {
	r := NewRegistry()
	for _, f := range BuiltinFormats() {
		if err := r.RegisterFormat(f); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.FormatTypes(); !slices.Equal(got, []string{"bytes", "json", "string"}) {
		t.Fatalf("FormatTypes %v", got)
	}
	get := func(typ string) Format {
		f, _ := r.Format(typ)
		fm, err := f.New(FormatContext{})
		if err != nil {
			t.Fatal(err)
		}
		return fm
	}
	ctx := context.Background()
	rec := runtime.Record{Value: []byte(`{"a":}`), Format: runtime.FormatText}
	var re *runtime.RecordError
	if err := get("json").Decode(ctx, &rec); !errors.As(err, &re) || re.Reason != runtime.ReasonMalformedJSON ||
		re.Detail != "invalid character '}' looking for beginning of value at offset 6" {
		t.Fatalf("json decode of a bad value: %v", err)
	}
	rec = runtime.Record{Value: []byte(`[1]`), Format: runtime.FormatText}
	if err := get("json").Decode(ctx, &rec); err != nil || rec.Format != runtime.FormatJSON || string(rec.Value) != `[1]` {
		t.Fatalf("json decode of [1]: %v, %+v", err, rec)
	}
	for _, typ := range []string{"string", "bytes"} {
		rec = runtime.Record{Value: []byte(`{"a":}`)}
		if err := get(typ).Decode(ctx, &rec); err != nil || rec.Format != runtime.FormatText || string(rec.Value) != `{"a":}` {
			t.Fatalf("%s decode: %v, %+v", typ, err, rec)
		}
	}
	for _, typ := range []string{"json", "string", "bytes"} {
		rec = runtime.Record{Key: []byte("k"), Value: []byte(`v`)}
		if err := get(typ).Encode(ctx, "t", &rec); err != nil || string(rec.Value) != "v" || string(rec.Key) != "k" {
			t.Fatalf("%s encode: %v, %+v", typ, err, rec)
		}
	}
}

// fakeCommitter records what a TwoPhaseCommitSink asks of it.
type fakeCommitter struct {
	open      []string
	committed []string
	log       []string
}

func (c *fakeCommitter) BeginTransaction(context.Context) error {
	c.open = nil
	c.log = append(c.log, "begin")
	return nil
}
func (c *fakeCommitter) Write(_ context.Context, rec runtime.Record) error {
	c.open = append(c.open, string(rec.Value))
	return nil
}
func (c *fakeCommitter) PreCommit(_ context.Context, id int64) ([]byte, error) {
	c.log = append(c.log, "precommit")
	if len(c.open) == 0 {
		return nil, nil
	}
	return []byte(strings.Join(c.open, ",")), nil
}
func (c *fakeCommitter) Commit(_ context.Context, id int64, data []byte) error {
	c.committed = append(c.committed, string(data))
	return nil
}
func (c *fakeCommitter) AbortOpen(context.Context) error { c.log = append(c.log, "abort"); return nil }
func (c *fakeCommitter) Close() error                    { return nil }

type prefixFormat struct{ TextFormat }

func (prefixFormat) Encode(_ context.Context, topic string, rec *runtime.Record) error {
	rec.Value = append([]byte(topic+":"), rec.Value...)
	return nil
}

// TestTwoPhaseCommitSink: records are encoded with the sink's format and
// written into the open transaction; each snapshot holds every pending
// committable as an envelope of the sink's type (an empty epoch's too, as
// null data, so every subtask holds the required state), and
// checkpoint.DecodeCommittables reads them back; completing a checkpoint
// commits its pending epochs in order, skipping empty ones; end of input
// aborts the open transaction.
func TestTwoPhaseCommitSink(t *testing.T) {
	ctx := context.Background()
	c := &fakeCommitter{}
	s := NewTwoPhaseCommitSink("file", "out", 0, c, slog.New(slog.NewTextHandler(io.Discard, nil))).WithFormat(prefixFormat{}, "t")
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	snap := func(id int64) []checkpoint.Committable {
		fin, err := s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: id})
		if err != nil {
			t.Fatal(err)
		}
		ts, err := fin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var st checkpoint.TaskState
		if err := json.Unmarshal(ts.State, &st); err != nil {
			t.Fatal(err)
		}
		cs, err := checkpoint.DecodeCommittables(st)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	for _, v := range []string{"a", "b"} {
		if err := s.ProcessRecord(ctx, 0, runtime.Record{Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := snap(1); len(got) != 1 || got[0].Sink != "file" || string(got[0].Data) != "t:a,t:b" {
		t.Fatalf("snapshot 1: %+v", got)
	}
	if got := snap(2); len(got) != 2 || got[1].Sink != "file" || got[1].Data != nil {
		t.Fatalf("snapshot 2 (an empty epoch after a pending one): %+v", got)
	}
	if err := s.ProcessRecord(ctx, 0, runtime.Record{Value: []byte("c")}); err != nil {
		t.Fatal(err)
	}
	if got := snap(3); len(got) != 3 || string(got[2].Data) != "t:c" {
		t.Fatalf("snapshot 3: %+v", got)
	}
	if err := s.NotifyCheckpointComplete(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.committed, []string{"t:a,t:b"}) {
		t.Fatalf("committed after checkpoint 2: %q", c.committed)
	}
	if got := snap(4); len(got) != 2 || string(got[0].Data) != "t:c" || got[1].Data != nil {
		t.Fatalf("snapshot 4 keeps only what is pending: %+v", got)
	}
	if err := s.NotifyCheckpointComplete(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.committed, []string{"t:a,t:b", "t:c"}) || s.PendingCommits() {
		t.Fatalf("committed after checkpoint 4: %q", c.committed)
	}
	if err := s.EndInput(ctx); err != nil || c.log[len(c.log)-1] != "abort" {
		t.Fatalf("end of input: %v, log %v", err, c.log)
	}
}

// TestLegacyCommittables: checkpoint.DecodeCommittables reads the bare
// Kafka committables of metadata versions 1 and 2 as the kafka type's,
// after the envelopes, and refuses an entry that is no envelope.
func TestLegacyCommittables(t *testing.T) {
	env, _ := checkpoint.EncodeCommittable("file", []byte("x"))
	ts := checkpoint.TaskState{Operator: map[string]checkpoint.OperatorListState{
		checkpoint.CommittablesState:       {Entries: [][]byte{env}},
		checkpoint.LegacyKafkaCommittables: {Entries: [][]byte{[]byte(`{"transactional_id":"t-0-0"}`)}},
	}}
	cs, err := checkpoint.DecodeCommittables(ts)
	if err != nil || len(cs) != 2 || cs[0].Sink != "file" || string(cs[0].Data) != "x" ||
		cs[1].Sink != "kafka" || string(cs[1].Data) != `{"transactional_id":"t-0-0"}` {
		t.Fatalf("DecodeCommittables = %+v, %v", cs, err)
	}
	ts.Operator[checkpoint.CommittablesState] = checkpoint.OperatorListState{Entries: [][]byte{[]byte(`{"transactional_id":"t-0-0"}`)}}
	if _, err := checkpoint.DecodeCommittables(ts); err == nil {
		t.Fatal("a bare committable under sink-committables decoded")
	}
}

// TestResources: Get makes a resource once, keeps no failed one, and
// Close closes the closers newest first.
func TestResources(t *testing.T) {
	r := NewResources()
	type key string
	made := 0
	var closed []string
	for range 2 {
		v, err := r.Get(key("a"), func() (any, error) { made++; return closer{"a", &closed}, nil })
		if err != nil || v.(closer).name != "a" {
			t.Fatal(v, err)
		}
	}
	if _, err := r.Get(key("b"), func() (any, error) { return nil, errors.New("down") }); err == nil {
		t.Fatal("a failed open was not returned")
	}
	if v, err := r.Get(key("b"), func() (any, error) { return closer{"b", &closed}, nil }); err != nil || v.(closer).name != "b" {
		t.Fatal("a failed open was kept", v, err)
	}
	r.Set(key("c"), 3)
	if err := r.Close(); err != nil || made != 1 || !slices.Equal(closed, []string{"b", "a"}) {
		t.Fatalf("Close: %v, made %d, closed %v", err, made, closed)
	}
}

type closer struct {
	name   string
	closed *[]string
}

func (c closer) Close() error { *c.closed = append(*c.closed, c.name); return nil }

// countingCommitter counts the records written and keeps the last value;
// its Write allocates nothing.
type countingCommitter struct {
	fakeCommitter
	n    int
	last []byte
}

func (c *countingCommitter) Write(_ context.Context, rec runtime.Record) error {
	c.n++
	c.last = rec.Value
	return nil
}

// TestTwoPhaseCommitSinkWriteDoesNotAllocate: a record of a sink without a
// format reaches the committer with no allocation (the record used to move
// to the heap on every call, since the format's Encode takes its address),
// and one of a sink with a format still arrives encoded.
func TestTwoPhaseCommitSinkWriteDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	c := &countingCommitter{}
	s := NewTwoPhaseCommitSink("file", "out", 0, c, logger)
	rec := runtime.Record{Key: []byte("k"), Value: []byte("v"), Timestamp: time.UnixMilli(5)}
	allocs := testing.AllocsPerRun(100, func() {
		if err := s.ProcessRecord(ctx, 0, rec); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per record, want 0", allocs)
	}
	if c.n != 101 || string(c.last) != "v" {
		t.Fatalf("committer got %d records, last %q; want 101, \"v\"", c.n, c.last)
	}
	f := &countingCommitter{}
	sf := NewTwoPhaseCommitSink("file", "out", 0, f, logger).WithFormat(prefixFormat{}, "t")
	if err := sf.ProcessRecord(ctx, 0, rec); err != nil || string(f.last) != "t:v" || string(rec.Value) != "v" {
		t.Fatalf("with a format: err %v, committer got %q (want \"t:v\"), caller's value now %q (want \"v\")", err, f.last, rec.Value)
	}
}

// copyingCommitter is a fakeCommitter that is a runtime.ValueCopier
// answering ok.
type copyingCommitter struct {
	fakeCommitter
	ok     bool
	copies bool
}

func (c *copyingCommitter) CopyValues() bool { c.copies = c.ok; return c.ok }

// TestTwoPhaseCommitSinkCopyValues: the sink copies values when its
// committer does and it has no format; with a format it neither agrees
// nor switches the committer to copying.
func TestTwoPhaseCommitSinkCopyValues(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name      string
		committer Committer
		format    Format
		want      bool
	}{
		{"copying committer", &copyingCommitter{ok: true}, nil, true},
		{"committer refuses", &copyingCommitter{}, nil, false},
		{"no copier", &fakeCommitter{}, nil, false},
		{"with a format", &copyingCommitter{ok: true}, prefixFormat{}, false},
	} {
		s := NewTwoPhaseCommitSink("kafka", "out", 0, tc.committer, logger).WithFormat(tc.format, "t")
		var v runtime.ValueCopier = s
		if got := v.CopyValues(); got != tc.want {
			t.Errorf("%s: CopyValues() = %v, want %v", tc.name, got, tc.want)
		}
		if c, ok := tc.committer.(*copyingCommitter); ok && c.copies != tc.want {
			t.Errorf("%s: committer switched to copying: %v, want %v", tc.name, c.copies, tc.want)
		}
	}
}
