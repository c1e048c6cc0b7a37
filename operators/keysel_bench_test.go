package operators

import (
	"testing"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// BenchmarkKeySelector measures key_by on a bench record: the Kafka key
// (key), a top-level field and an expression over a field; and Nexmark
// q8's key_bys after the source (the dedup's expression on an auction, in
// configs/nexmark/q8.yaml until session 45 folded the dedup into the
// window_join; the window_join's person.id on a person), on a record
// carrying the source's checked expression.Doc as in the job.
func BenchmarkKeySelector(b *testing.B) {
	rec := runtime.Record{Key: []byte("k000042"), Value: []byte(`{"id":17,"key":"k000042","shape":"CIRCLE","amount":512,"note":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)}
	exprKey, err := NewExpressionKeySelector("key")
	if err != nil {
		b.Fatal(err)
	}
	q8Dedup, err := NewExpressionKeySelector("string(auction.seller) + '@' + string(auction.dateTime - auction.dateTime % 10000)")
	if err != nil {
		b.Fatal(err)
	}
	checked := func(value string) *runtime.Record {
		r := &runtime.Record{Value: []byte(value)}
		doc := new(expression.Doc)
		if !doc.ResetChecked(r.Value) {
			b.Fatal("invalid JSON")
		}
		r.SetDecoded(doc)
		return r
	}
	auction := checked(`{"event_type":1,"person":null,"auction":{"id":1000,"itemName":"aaaaaaaaaaaaaaaa","description":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","initialBid":2231,"reserve":2571,"dateTime":1700000012345,"expires":1700000022345,"seller":1234,"category":10,"extra":"cccccccccccccccccccccccc"},"bid":null}`)
	person := checked(`{"event_type":0,"person":{"id":1234,"name":"Peter Jones","emailAddress":"peter@example.com","creditCard":"1234 5678 9012 3456","city":"Portland","state":"OR","dateTime":1700000012345,"extra":"cccccccccccccccccccccccc"},"auction":null,"bid":null}`)
	for _, c := range []struct {
		name string
		sel  runtime.KeySelector
		rec  *runtime.Record
	}{
		{"kafka-key", recordKeySelector{}, &rec},
		{"kafka-key-expression", exprKey, &rec},
		{"field", NewFieldKeySelector("shape"), &rec},
		{"nexmark-q8-dedup", q8Dedup, auction},
		{"nexmark-q8-person", NewFieldKeySelector("person.id"), person},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.sel.SelectKey(c.rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
