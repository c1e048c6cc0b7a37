package operators

import (
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// BenchmarkKeySelector measures key_by on a bench record: the Kafka key
// (key), a top-level field and an expression over a field.
func BenchmarkKeySelector(b *testing.B) {
	rec := runtime.Record{Key: []byte("k000042"), Value: []byte(`{"id":17,"key":"k000042","shape":"CIRCLE","amount":512,"note":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)}
	exprKey, err := NewExpressionKeySelector("key")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		sel  runtime.KeySelector
	}{
		{"kafka-key", recordKeySelector{}},
		{"kafka-key-expression", exprKey},
		{"field", NewFieldKeySelector("shape")},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.sel.SelectKey(&rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
