package pipeline

import (
	"strconv"
	"strings"
	"testing"
)

// TestExpressionErrorColumnInEscapedScalar reproduces a defect found by a
// new user's trial: the column of an expression error inside a quoted YAML
// scalar is the column in the decoded string plus one for the opening
// quote (decodeText), so every escape before the error (\" or \t in a
// double-quoted scalar, a doubled quote in a single-quoted one) moves the reported
// column left of the character the expression engine points at. In each
// case below the expression is `key == "a" +* 1` (or 'a'), whose error is
// at the '*' (1:13); Parse reports a column 2 to the left of the '*' in
// both quoted forms. The plain case (no escapes) is right today and
// guards the fix.
func TestExpressionErrorColumnInEscapedScalar(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"plain", `key == 1 +* 1`},
		{"double-quoted", `"key == \"a\" +* 1"`},
		{"single-quoted", `'key == ''a'' +* 1'`},
		{"double-quoted-tab", `"\tkey == 1 +* 1"`},
		{"double-quoted-unicode", `"key == \"\u00e9\x41\" +* 1"`},
		{"single-quoted-twice", `'key == '''' + ''a'' +* 1'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := `job:
  name: pos
kafka:
  embedded:
    enabled: true
sources:
  - name: events
    topic: events
operators:
  - name: f
    type: filter
    input: events
    params: {condition: ` + tc.value + `}
sinks:
  - {name: out, input: f, topic: out}
`
			col := strings.Index(strings.Split(src, "\n")[12], "*") + 1 // of the '*' on line 13
			_, err := Parse("pos.yaml", []byte(src), nil)
			if err == nil {
				t.Fatal("Parse accepted a bad expression")
			}
			want := "pos.yaml:13:" + strconv.Itoa(col) + ": operators[0].params.condition: "
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q; want it to start %q (the column of the '*')", err, want)
			}
		})
	}
}
