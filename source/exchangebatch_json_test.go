package source

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/runtime"
)

// countingJSONDecoder is the json format's Decoder (connector.JSONFormat:
// a JSON check that marks the value runtime.FormatJSON) that records each
// value it checked.
type countingJSONDecoder struct{ checked []string }

func (d *countingJSONDecoder) Decode(_ context.Context, rec *runtime.Record) error {
	d.checked = append(d.checked, string(rec.Value))
	if !gjson.ValidBytes(rec.Value) {
		return &runtime.RecordError{Reason: runtime.ReasonMalformedJSON, Detail: runtime.JSONSyntaxDetail(rec.Value)}
	}
	rec.Format = runtime.FormatJSON
	return nil
}

func (*countingJSONDecoder) ChecksJSON() bool { return true }

// changeRecord is a repartition record of the format before exchange
// batches: one +I data record.
func changeRecord(v string) *kgo.Record {
	return &kgo.Record{Key: []byte("k"), Value: []byte(v), Timestamp: time.UnixMilli(100), Headers: []kgo.RecordHeader{{Key: runtime.ChangeHeader, Value: []byte("+I")}}}
}

// TestRepartitionSourceTrustsBatchJSON: a repartition source does not run
// its format's JSON check on the records of an exchange batch (a kstreamd
// repartition sink wrote them; their values were checked upstream), yet
// marks them checked JSON as the check would have; it still checks every
// record of the format before batches, and a malformed one of those goes
// to the bad-record policy.
func TestRepartitionSourceTrustsBatchJSON(t *testing.T) {
	opts, produce := exchangeTopic(t)
	var b runtime.ExchangeBatch
	b.Append(time.UnixMilli(300), []byte("a"), []byte(`{"b":1}`), 1)
	b.AppendHeader(runtime.ChangeHeader, []byte("+I"))
	b.Append(time.UnixMilli(301), []byte("b"), []byte(`{"b":2}`), 1)
	b.AppendHeader(runtime.ChangeHeader, []byte("+I"))
	produce(
		changeRecord(`{"o":1}`),        // 0: checked
		exchangeBatchRecord(b.Take(0)), // 1: two records, not checked
		changeRecord(`{"o":`),          // 2: checked, malformed: skipped
		changeRecord(`{"o":3}`),        // 3: checked
	)
	dec := &countingJSONDecoder{}
	var checked []bool
	got, err := runExchangeSourceWith(t, opts, []string{"0/0"}, 4, func(c *Config) {
		c.Decoder = dec
		c.OnError = OnErrorSkip
		// Called after decode, with the record the chain gets (as in
		// TestEmitMarksCheckedJSON): a Writer sends only the mark.
		c.Timestamp = func(r *runtime.Record) (time.Time, error) {
			checked = append(checked, r.CheckedJSON() && r.Format == runtime.FormatJSON)
			return r.Timestamp, nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`@0 {"o":1} ts=100 +I key=k []`,
		`@1 {"b":1} ts=300 +I key=a []`,
		`@1 {"b":2} ts=301 +I key=b []`,
		`@3 {"o":3} ts=100 +I key=k []`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("repartition source emitted\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if wantChecked := []string{`{"o":1}`, `{"o":`, `{"o":3}`}; !slices.Equal(dec.checked, wantChecked) {
		t.Errorf("the format checked %q, want only the records of the format before batches %q", dec.checked, wantChecked)
	}
	if !slices.Equal(checked, []bool{true, true, true, true}) {
		t.Errorf("emitted records marked checked JSON: %v, want all", checked)
	}
}

// TestJobSourceChecksBatchShapedRecords: a source of a job's own input
// topic (no Upstream) never trusts a record that looks like an exchange
// batch: its value is checked, and a malformed one goes to the
// bad-record policy (fail: the source fails naming the record).
func TestJobSourceChecksBatchShapedRecords(t *testing.T) {
	for _, withDecoder := range []bool{false, true} {
		name := "json format"
		if withDecoder {
			name = "json decoder"
		}
		t.Run(name, func(t *testing.T) {
			opts, produce := exchangeTopic(t)
			var b runtime.ExchangeBatch
			b.Append(time.UnixMilli(300), []byte("a"), []byte(`{"b":1}`), 0)
			produce(changeRecord(`{"o":1}`), exchangeBatchRecord(b.Take(0)))
			dec := &countingJSONDecoder{}
			got, err := runExchangeSourceWith(t, opts, nil, 2, func(c *Config) {
				c.Name, c.Changelog, c.OnError = "in", false, OnErrorFail
				if withDecoder {
					c.Decoder = dec
				}
			})
			var bre *BadRecordError
			if len(got) != 1 || !errors.As(err, &bre) || bre.Reason != runtime.ReasonMalformedJSON || bre.Offset != 1 {
				t.Errorf("emitted %q, err %v; want one record, then offset 1's %s bad record", got, err, runtime.ReasonMalformedJSON)
			}
			if withDecoder && len(dec.checked) != 2 {
				t.Errorf("the format checked %d records, want 2", len(dec.checked))
			}
		})
	}
}
