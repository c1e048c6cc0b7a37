package operators

import (
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestFieldKeySelectorCheckedDeepNesting: a value nested deeper than
// encoding/json's 10000 levels is valid to gjson (a source's check marks
// it ValidJSON) but not to encoding/json, which the general path decodes
// with. Marked or not, key_by gives it the same answer: the general path's
// malformed_json error, never the key the fast path would read.
func TestFieldKeySelectorCheckedDeepNesting(t *testing.T) {
	for _, depth := range []int{9999, 10000, 10001} {
		value := []byte(`{"user":"u1","d":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`)
		sel := NewFieldKeySelector("user")
		plain := runtime.Record{Value: value}
		marked := runtime.Record{Value: value}
		marked.SetDecoded(runtime.ValidJSON{})
		withDoc := runtime.Record{Value: value}
		doc := new(expression.Doc)
		if !doc.ResetChecked(value) {
			t.Fatalf("depth %d: the source's check refused it", depth)
		}
		withDoc.SetDecoded(doc)
		p, m, d := selectKeyResult(sel, &plain), selectKeyResult(sel, &marked), selectKeyResult(sel, &withDoc)
		want := "key u1"
		if depth > 10000 {
			want = "error malformed_json"
		}
		for name, got := range map[string]string{"unmarked": p, "marked": m, "with its Doc": d} {
			if !strings.HasPrefix(got, want) {
				t.Errorf("depth %d, %s: %.80q, want %q", depth, name, got, want)
			}
		}
	}
}
