package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// countingDoc is the job's expression.Doc counting how the source ties it
// to each record: Reset (after a check of its own) or ResetChecked (the
// check folded into the Doc's index pass).
type countingDoc struct {
	*expression.Doc
	resets, checks int
}

func (c *countingDoc) Reset(b []byte, valid bool) { c.resets++; c.Doc.Reset(b, valid) }
func (c *countingDoc) ResetChecked(b []byte) bool { c.checks++; return c.Doc.ResetChecked(b) }

// fieldReader is a chained operator reading field a of each record's Doc,
// as a filter does, and noting the values.
type fieldReader struct{ got []string }

func (r *fieldReader) Open(context.Context) error { return nil }
func (r *fieldReader) ProcessRecord(_ context.Context, _ int, rec runtime.Record) error {
	v, _ := rec.Decoded()
	d, ok := v.(*countingDoc)
	if !ok || !rec.CheckedJSON() {
		r.got = append(r.got, "no checked doc")
		return nil
	}
	a, found, ok := d.Field("a")
	if !ok { // not read field by field (1e5): the whole value
		a, found = d.Whole().(map[string]any)["a"]
	}
	if !found {
		a = "none"
	}
	r.got = append(r.got, string(d.JSON())+"="+fmt.Sprint(a))
	return nil
}
func (r *fieldReader) EndInput(context.Context) error { return nil }
func (r *fieldReader) Close() error                   { return nil }

// TestEmitChecksJSONInTheDocPass: a source whose check is the json
// format's (its own, or connector.JSONFormat as Decoder) checks each value
// with its Doc's ResetChecked, which indexes the value in the same pass
// once the chain reads the Doc, and never checks it a second time (Reset):
// on the base, the source ran gjson's check and then Reset, and the first
// field read scanned the JSON again. A malformed value still meets the
// bad-record policy as before: counted under on_error skip with reason
// malformed_json, and under fail the same reason and detail
// (runtime.JSONSyntaxDetail). A Decoder that is not the plain json check
// keeps the old way.
func TestEmitChecksJSONInTheDocPass(t *testing.T) {
	values := []string{`{"a":1}`, `{"a":}`, `{"a":2,"b":{"c":[1e5]}}`, `{"a":3}x`, "{\"a\":\"\x01\"}",
		`{"b":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, `{"a":4}`}
	wantGot := []string{`{"a":1}=1`, `{"a":2,"b":{"c":[1e5]}}=2`, `{"b":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}=none`, `{"a":4}=4`}
	for _, tc := range []struct {
		name                   string
		dec                    Decoder
		wantChecks, wantResets int
	}{
		{"format json", nil, len(values), 0},
		{"json format decoder", connector.JSONFormat{}, len(values), 0},
		{"other checking decoder", validJSONDecoder{}, 0, len(wantGot)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := runtime.NewChannel(16) // the writer's edge too: room for every record
			out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
			reader := &fieldReader{}
			out.AddChained(&runtime.ChainedOperator{ID: runtime.TaskID{Operator: "r"}, Operator: reader})
			doc := &countingDoc{Doc: new(expression.Doc)}
			m, err := NewMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			s := New(Config{
				Name: "in", Topic: "t", Format: FormatJSON, Decoder: tc.dec, Metrics: m,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Output: out,
				NewJSONDoc: func() runtime.ReusableJSON { return doc },
			})
			s.wms = newWatermarks(WatermarkConfig{})
			for _, v := range values {
				if err := s.emit(context.Background(), &kgo.Record{Topic: "t", Value: []byte(v)}); err != nil {
					t.Fatal(err)
				}
			}
			if strings.Join(reader.got, "|") != strings.Join(wantGot, "|") {
				t.Fatalf("the chain read %q, want %q", reader.got, wantGot)
			}
			if doc.checks != tc.wantChecks || doc.resets != tc.wantResets {
				t.Fatalf("ResetChecked %d times, Reset %d times; want %d and %d", doc.checks, doc.resets, tc.wantChecks, tc.wantResets)
			}
			if got := testutil.ToFloat64(m.Skipped("in", ReasonMalformedJSON)); got != 3 {
				t.Fatalf("skipped malformed_json %v, want 3", got)
			}
		})
	}
	// Under on_error fail, the reason and the detail are the json
	// format's.
	for _, dec := range []Decoder{nil, connector.JSONFormat{}} {
		doc := &countingDoc{Doc: new(expression.Doc)}
		s := New(Config{
			Name: "in", Topic: "t", Format: FormatJSON, Decoder: dec, OnError: OnErrorFail,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NewJSONDoc: func() runtime.ReusableJSON { return doc },
			Output: runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{runtime.NewChannel(1)}, runtime.ForwardPartitioner{})),
		})
		s.wms = newWatermarks(WatermarkConfig{})
		doc.read() // the chain read the previous value: the check indexes
		err := s.emit(context.Background(), &kgo.Record{Topic: "t", Partition: 2, Offset: 5, Value: []byte(`{"a":}`)})
		var be *BadRecordError
		if !errors.As(err, &be) || be.Reason != ReasonMalformedJSON || be.Detail != "invalid character '}' looking for beginning of value at offset 6" {
			t.Fatalf("decoder %T: %v, want the malformed_json bad record", dec, err)
		}
		if doc.checks != 1 {
			t.Fatalf("decoder %T: ResetChecked %d times, want 1", dec, doc.checks)
		}
	}
}

// validJSONDecoder is a Decoder that checks JSON (a JSONChecker) with
// encoding/json, not the json format's plain check.
type validJSONDecoder struct{}

func (validJSONDecoder) Decode(_ context.Context, rec *runtime.Record) error {
	if !json.Valid(rec.Value) {
		return &runtime.RecordError{Reason: ReasonMalformedJSON, Detail: runtime.JSONSyntaxDetail(rec.Value)}
	}
	rec.Format = runtime.FormatJSON
	return nil
}
func (validJSONDecoder) ChecksJSON() bool { return true }

// read reads the Doc's value as a chain would (any field).
func (c *countingDoc) read() { c.Doc.ResetChecked([]byte(`{}`)); c.Doc.Field("x") }
