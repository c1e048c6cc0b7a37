package expression

import (
	"reflect"
	"testing"
)

// FuzzDecodeJSON checks that DecodeJSON (gjson) gives exactly what
// encoding/json gives (decodeJSONStd): the same values, and an error for
// the same inputs; the seeds run with every go test.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"id":17,"key":"k000042","shape":"CIRCLE","amount":512,"note":"xx"}`,
		`[1,-0,2.5e3,1E2,9223372036854775807,9223372036854775808,"x\u00e9",true,false,null,{},[]]`,
		`{"a":{"b":[{"c":"d"}]},"a":2}`, ` "s" `, `"\ud800"`, "\"\xff\"", "{\"\xffk\":1}", `{"\u0061":1,"a":2}`,
		`1e400`, `[1e400]`, `-1e-400`, `{"a":"<&>"}`, ``, `{`, `[1,]`, `{} {}`, `nul`, `"a\/b\n"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gerr := DecodeJSON(b)
		want, werr := decodeJSONStd(b)
		if (gerr != nil) != (werr != nil) {
			t.Fatalf("DecodeJSON(%q) error %v, encoding/json %v", b, gerr, werr)
		}
		if gerr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeJSON(%q) = %#v, encoding/json %#v", b, got, want)
		}
	})
}

// BenchmarkDecodeJSONVsStd compares DecodeJSON with encoding/json on a bench
// record.
func BenchmarkDecodeJSONVsStd(b *testing.B) {
	rec := []byte(`{"id":17,"key":"k000042","shape":"CIRCLE","amount":512,"note":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	for _, c := range []struct {
		name string
		fn   func([]byte) (any, error)
	}{{"gjson", DecodeJSON}, {"encoding-json", decodeJSONStd}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.fn(rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
