package expression

import (
	"reflect"
	"strings"
	"testing"
)

// TestDecodeJSONDeepNesting: past gjsonMaxDepth DecodeJSON decodes with
// encoding/json (linear, where the gjson walk costs depth squared: about
// 0.7 s for 20,000 levels), so its value and its error are encoding/json's
// at every depth: nesting beyond encoding/json's 10000 levels is an error
// (the record goes to the malformed-record policy), not a value decoded
// slowly. Fails with the gjson walk unbounded (20,000 levels decode).
func TestDecodeJSONDeepNesting(t *testing.T) {
	nest := func(open, close string, inner string, n int) string {
		return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
	}
	for _, tc := range []struct {
		name    string
		in      string
		wantErr bool
	}{
		{"arrays 63", nest("[", "]", "1", 63), false},
		{"arrays 64", nest("[", "]", "1", 64), false},
		{"arrays 65", nest("[", "]", "1", 65), false},
		{"objects 200", nest(`{"a":`, "}", `"x"`, 200), false},
		{"mixed 5000", nest(`{"a":[`, "]}", `-1.5`, 2500), false},
		{"arrays 10000", nest("[", "]", "", 10000), false},
		{"arrays 20000", nest("[", "]", "", 20000), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeJSON([]byte(tc.in))
			want, wantErr := decodeJSONStd([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				if err.Error() != wantErr.Error() {
					t.Fatalf("err = %q, want encoding/json's %q", err, wantErr)
				}
				return
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("value differs from encoding/json's")
			}
			if v, err := decodeGJSON(tc.in); err != nil || !reflect.DeepEqual(v, want) {
				t.Fatalf("decodeGJSON: err %v, value equal %v", err, reflect.DeepEqual(v, want))
			}
		})
	}
}
