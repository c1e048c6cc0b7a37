package operators

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzRawListSerializer checks that RawListSerializer writes exactly the
// bytes json.Marshal writes, and decodes as json.Unmarshal does (values
// and whether it fails); the seeds run with every go test.
func FuzzRawListSerializer(f *testing.F) {
	for _, s := range []string{
		`[{"id":1,"shape":"CIRCLE"},{"id":2}]`, `[]`, `null`, `[ 1 , "a b" ]`, `[{"a":"<&>"}]`, "[\"\u2028\"]",
		`{"a":1}`, `1`, `[1,]`, ``, `[null,true,[[]]]`, " [1] ",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gerr := RawListSerializer{}.Decode(b)
		var want []json.RawMessage
		werr := json.Unmarshal(b, &want)
		if (gerr != nil) != (werr != nil) {
			t.Fatalf("Decode(%q) error %v, json.Unmarshal %v", b, gerr, werr)
		}
		if gerr != nil {
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Decode(%q) = %q, json.Unmarshal %q", b, got, want)
		}
		enc, eerr := RawListSerializer{}.Append(nil, got)
		std, serr := json.Marshal(want)
		if (eerr != nil) != (serr != nil) || string(enc) != string(std) {
			t.Fatalf("Append(%q) = %q, %v; json.Marshal %q, %v", got, enc, eerr, std, serr)
		}
	})
}
