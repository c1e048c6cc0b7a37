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
	"github.com/tidwall/gjson"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestEmitCheckVerdictUnderPolicies attacks the json format's check in the
// Doc's index pass (ResetChecked) with values at the edges of JSON that
// the pass could accept where gjson's check (the source's check before
// the pass, and still the verdict on whatever the pass refuses) would
// not: a byte order mark, a NUL or garbage after the value, invalid UTF-8
// in a string or a key, repeated keys, numbers no float64 holds, nesting
// at, under and over the pass's bound of 64 and over encoding/json's
// 10000, lone surrogates, two values. Under each policy (skip, fail,
// dead-letter), with the Doc read before the record (the check indexes)
// or not, the json format as the source's own or as Decoder: a value
// gjson.ValidBytes accepts reaches the chain unchanged as checked JSON
// (field a as encoding/json reads it, where it can), and one it refuses
// meets the policy with reason malformed_json and its bytes intact
// (skipped and counted, a *BadRecordError, or the dead letter's value).
func TestEmitCheckVerdictUnderPolicies(t *testing.T) {
	deep := func(open, close string, n int) string {
		return strings.Repeat(open, n) + "1" + strings.Repeat(close, n)
	}
	values := []string{
		"\xef\xbb\xbf{\"a\":1}", "{\"a\":1}\x00", "\x00{\"a\":1}", "{\"a\":1} \n\t\r", " \r\n{\"a\":2}", "{\"a\":1}x", `{"a":1}{"a":2}`,
		"{\"a\":\"\xff\xfe\"}", "{\"\xff\":1,\"a\":2}", "{\"a\":\"\xed\xa0\x80\"}", `{"a":"\ud800"}`, `{"a":"\u0000"}`, "{\"a\":\"\x00\"}",
		`{"a":1,"a":2}`, `{"a":{"x":1},"a":3}`, `{"a":1e400}`, `{"a":123456789012345678901234567890}`, `{"a":-0.0}`, `{"a":-1}`, `{"a":01}`, `{"a":1.}`,
		`{"a":5,"b":` + deep("[", "]", 63) + `}`, `{"a":6,"b":` + deep("[", "]", 64) + `}`, `{"a":7,"b":` + deep(`{"c":`, "}", 65) + `}`,
		`{"a":8,"b":` + deep("[", "]", 10001) + `}`, `{"a":9,"b":` + deep("[", "]", 10001)[1:] + `}`, `{"a":"x","b":[1,2,]}`, `{"a":true,}`,
		"\f{\"a\":1}", `{"a":"\x"}`, `{"a":"tab	inside"}`, `[1,{"a":2}]`, `"a"`, `{"a":null}`,
	}
	for _, policy := range []OnError{OnErrorSkip, OnErrorFail, OnErrorDeadLetter} {
		for _, dec := range []Decoder{nil, connector.JSONFormat{}} {
			for _, folded := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/decoder=%T/folded=%v", policy, dec, folded), func(t *testing.T) {
					for _, v := range values {
						checkEmitVerdict(t, policy, dec, folded, v)
					}
				})
			}
		}
	}
}

// valueReader is a chained operator keeping each record's value, whether
// it came as checked JSON, and its field a as the Doc gives it.
type valueReader struct {
	value   []byte
	checked bool
	a       string
}

func (r *valueReader) Open(context.Context) error { return nil }
func (r *valueReader) ProcessRecord(_ context.Context, _ int, rec runtime.Record) error {
	r.value, r.checked, r.a = append([]byte(nil), rec.Value...), rec.CheckedJSON(), "unread"
	v, _ := rec.Decoded()
	d, ok := v.(*expression.Doc)
	if !ok {
		return nil
	}
	a, found, ok := d.Field("a")
	if !ok {
		m, isMap := d.Whole().(map[string]any)
		a, found = m["a"]
		if !isMap {
			found = false
		}
	}
	r.a = "none"
	if found {
		r.a = fmt.Sprint(a)
	}
	return nil
}
func (r *valueReader) EndInput(context.Context) error { return nil }
func (r *valueReader) Close() error                   { return nil }

func checkEmitVerdict(t *testing.T, policy OnError, dec Decoder, folded bool, v string) {
	t.Helper()
	out := runtime.NewOutput(nil)
	reader := &valueReader{}
	out.AddChained(&runtime.ChainedOperator{ID: runtime.TaskID{Operator: "r"}, Operator: reader})
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	dl := &captureWriter{}
	doc := new(expression.Doc)
	cfg := Config{
		Name: "in", Topic: "t", Format: FormatJSON, Decoder: dec, Metrics: m, OnError: policy,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Output: out,
		NewJSONDoc: func() runtime.ReusableJSON { return doc },
	}
	if policy == OnErrorDeadLetter {
		cfg.DeadLetterTopic, cfg.DeadLetters = "dlq", dl
	}
	s := New(cfg)
	s.wms = newWatermarks(WatermarkConfig{})
	if folded { // the chain read the previous value: the check indexes
		doc.ResetChecked([]byte(`{"prev":1}`))
		doc.Field("prev")
	}
	in := []byte(v)
	err = s.emit(context.Background(), &kgo.Record{Topic: "t", Partition: 1, Offset: 7, Value: in})
	valid := gjson.ValidBytes([]byte(v)) // the verdict of the check before the pass
	if valid {
		if err != nil || string(reader.value) != v || !reader.checked {
			t.Fatalf("%.60q (valid): err %v, chain got %.60q (checked %v), want the value unchanged as checked JSON", v, err, reader.value, reader.checked)
		}
		var model map[string]any
		if json.Unmarshal([]byte(v), &model) == nil {
			a, found := model["a"]
			want := "none"
			if found {
				want = fmt.Sprint(a)
			}
			if reader.a != want && a != nil { // (the Doc gives null as CEL's null)
				t.Fatalf("%.60q: the chain read a = %q, want %q (encoding/json)", v, reader.a, want)
			}
		}
		return
	}
	if reader.value != nil {
		t.Fatalf("%.60q (invalid): reached the chain", v)
	}
	switch policy {
	case OnErrorSkip:
		if err != nil || testutil.ToFloat64(m.Skipped("in", ReasonMalformedJSON)) != 1 {
			t.Fatalf("%.60q (invalid) under skip: err %v, skipped malformed_json %v, want nil and 1", v, err, testutil.ToFloat64(m.Skipped("in", ReasonMalformedJSON)))
		}
	case OnErrorFail:
		var be *BadRecordError
		if !errors.As(err, &be) || be.Reason != ReasonMalformedJSON || be.Offset != 7 || be.Detail != runtime.JSONSyntaxDetail([]byte(v)) {
			t.Fatalf("%.60q (invalid) under fail: %v, want the malformed_json bad record at offset 7", v, err)
		}
	case OnErrorDeadLetter:
		if err != nil || len(dl.recs) != 1 || string(dl.recs[0].Value) != v {
			t.Fatalf("%.60q (invalid) dead-lettered: err %v, %d dead letters, want 1 with the value unchanged", v, err, len(dl.recs))
		}
	}
}
