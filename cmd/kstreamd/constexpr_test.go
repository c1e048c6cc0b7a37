package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConstantExpressionErrors is issue 22's acceptance test of item 5:
// `kstreamd validate` and `kstreamd run` alike refuse, with exit status 2
// and the same FILE:LINE:COL message, a map whose expression divides a
// constant by zero (in a quoted scalar), and a filter whose condition
// overflows a constant (a plain scalar), at the column of the failing
// constant sub-expression in the YAML file.
func TestConstantExpressionErrors(t *testing.T) {
	t.Parallel()
	head := `job:
  name: constexpr
kafka:
  brokers: [127.0.0.1:9092]
sources:
  - name: payments
    topic: payments
operators:
`
	tail := `sinks:
  - {name: out, input: op, topic: out}
`
	cases := []struct {
		name, body, want string
	}{
		{
			name: "map divides by zero",
			body: `  - name: op
    type: map
    input: payments
    params:
      value: '{"id": id, "share": amount / (1 / 0)}'
`,
			want: `13:45: operators[0].params.value: expression "{\"id\": id, \"share\": amount / (1 / 0)}": 1:31: constant sub-expression 1 / 0 cannot be evaluated: division by zero`,
		},
		{
			name: "filter overflows",
			body: `  - name: op
    type: filter
    input: payments
    params:
      condition: amount > 0 && amount < 9223372036854775807 + 1
`,
			want: `13:41: operators[0].params.condition: expression "amount > 0 && amount < 9223372036854775807 + 1": 1:24: constant sub-expression 9223372036854775807 + 1 cannot be evaluated: integer overflow`,
		},
	}
	dir := t.TempDir()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "case"+string(rune('a'+i))+".yaml")
			if err := os.WriteFile(path, []byte(head+tc.body+tail), 0o644); err != nil {
				t.Fatal(err)
			}
			want := path + ":" + tc.want + "\n"
			for _, cmd := range []string{"validate", "run"} {
				var stdout, stderr bytes.Buffer
				// Bounded: without the check, run would go on to the broker.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				code := run(ctx, []string{cmd, "--config", path}, &stdout, &stderr)
				cancel()
				if code != 2 || stdout.Len() != 0 || stderr.String() != want {
					t.Errorf("kstreamd %s: exit %d, stdout %q, stderr:\n%s\nwant exit 2, no stdout, stderr:\n%s",
						cmd, code, stdout.String(), stderr.String(), want)
				}
			}
		})
	}
	// The line the first case points at, to show the column is the '1'
	// of (1 / 0): 13:45.
	line := strings.Split(head+cases[0].body, "\n")[12]
	if col := strings.Index(line, "(1 / 0)") + 2; col != 45 {
		t.Fatalf("the '1' of (1 / 0) is at column %d of %q, not 45", col, line)
	}
}
