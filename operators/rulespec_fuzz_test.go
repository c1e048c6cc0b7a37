package operators

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// FuzzDecodeRuleRecord: decoding and compiling an arbitrary rules-topic
// record (null: the value is null) never panics and every error wraps ErrBadRuleRecord; an accepted
// rule has an id (the key when there is one), its stored JSON compiles
// again (as a restore does) and routing records through it does not panic.
// Seeds in testdata/fuzz/FuzzDecodeRuleRecord.
func FuzzDecodeRuleRecord(f *testing.F) {
	f.Add([]byte("big-spender"), []byte(`{"id":"big-spender","state":"active","filter":"method == 'card'","group_by":["payee_id","currency"],"aggregate":{"fn":"sum","of":"amount"},"window":"20m","alert_when":"> 500","emit":{"note":"x"}}`), false)
	f.Add([]byte(""), []byte(`{"id":"c","group_by":["payee_id"],"aggregate":{"fn":"count_distinct","of":"card"},"window":"1h","alert_when":"<= 3"}`), false)
	f.Add([]byte("r"), []byte(""), true)
	f.Add([]byte("r"), []byte(`{"control":"export"}`), false)
	f.Add([]byte("syntax"), []byte(`{"id":"syntax","filter":"amount >","aggregate":{"fn":"count"},"window":"1m","alert_when":"> 1"}`), false)
	f.Add([]byte("neg"), []byte(`{"id":"neg","aggregate":{"fn":"avg","of":"amount * 2"},"window":"-5m","alert_when":"!= 1e400"}`), false)
	recs := []runtime.Record{
		{Value: []byte(`{"id":1,"payee_id":"p1","currency":"EUR","method":"card","card":"c1","amount":612}`), Timestamp: time.UnixMilli(1000)},
		{Value: []byte(`{"amount":"text","payee_id":null}`), Timestamp: time.UnixMilli(2000)},
		{Value: []byte(`plain text`), Format: runtime.FormatText, Timestamp: time.UnixMilli(3000)},
	}
	f.Fuzz(func(t *testing.T, key, value []byte, null bool) {
		if null {
			value = nil // a deletion
		}
		rr, err := DecodeRuleRecord(key, value)
		if err != nil {
			if !errors.Is(err, ErrBadRuleRecord) {
				t.Fatalf("error %v does not wrap ErrBadRuleRecord", err)
			}
			return
		}
		if rr.Control != "" {
			return
		}
		if rr.ID == "" || (len(key) > 0 && rr.ID != string(key)) {
			t.Fatalf("accepted rule id %q for key %q", rr.ID, key)
		}
		if rr.Rule == nil {
			return // a deletion
		}
		if _, err := compileStored(rr.Rule.JSON, DefaultRuleLimits()); err != nil {
			t.Fatalf("stored JSON %s of an accepted rule does not compile again: %v", rr.Rule.JSON, err)
		}
		r := NewRulesRouter(RulesConfig{Operator: "fuzz"})
		if err := r.Open(OpenContext{Operator: "fuzz.route"}); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := r.ProcessBroadcastElement(ctx, runtime.Record{Key: key, Value: value}, &sliceCollector{}); err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			if err := r.ProcessElement(ctx, rec, &sliceCollector{}); err != nil {
				t.Fatalf("routing %s: %v", rec.Value, err)
			}
		}
	})
}
