package source

import (
	"encoding/json"
	"testing"
)

// FuzzValidJSON checks that validJSON (gjson) accepts exactly what
// json.Valid accepts; the seeds run with every go test.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{
		`{"id":17,"key":"k000042","shape":"CIRCLE","amount":512,"note":"xx"}`,
		`[1,2.5e3,"x\u00e9",true,false,null]`, ` 1 `, `"\ud800"`, "\"\xff\"", `-0.1E+2`, `{"a":[{}]}`,
		``, ` `, `{`, `{"a":}`, `{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `-`, `1e`, `"\x"`, "\"a\tb\"", `nul`, `truex`,
		`{} {}`, `{"a" 1}`, `{1:2}`, `"\u12"`, `NaN`, `+1`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid %v", b, got, want)
		}
	})
}
