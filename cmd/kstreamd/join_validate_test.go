package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/operators"
)

// joinSinks is the sink section of most join cases (2 lines).
const joinSinks = `sinks:
  - {name: out, input: j, topic: out}
`

// TestJoinConfigErrors is issue 23's acceptance test of invalid join
// configurations: each is refused by `kstreamd validate` and `kstreamd run`
// alike, exit status 2, with exact FILE:LINE:COL messages. graphHead takes
// lines 1 to 12 (sources clicks, rules, wide); operators start on line 13.
func TestJoinConfigErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body string
		want       []string
	}{
		{
			name: "missing role",
			body: `operators:
  - name: j
    type: interval_join
    inputs:
      left: {from: clicks, key_by: user}
` + joinSinks,
			want: []string{`17:7: operators[0].inputs.right: missing role right of operator type interval_join: {from: <source or operator>, key_by: <key>}`},
		},
		{
			name: "unknown role",
			body: `operators:
  - name: j
    type: interval_join
    inputs:
      left: {from: clicks, key_by: user}
      rigth: {from: wide, key_by: user}
` + joinSinks,
			want: []string{`18:7: operators[0].inputs.rigth: unknown role "rigth" of operator type interval_join (did you mean "right"?); its roles are left and right`},
		},
		{
			name: "no inputs at all",
			body: `operators:
  - name: j
    type: interval_join
    params: {upper: 10s}
` + joinSinks,
			want: []string{`14:5: operators[0].inputs: required for operator type interval_join: its left and right inputs, e.g. inputs: {left: {from: orders, key_by: id}, right: {from: payments, key_by: order_id}}`},
		},
		{
			name: "unknown field of an input",
			body: `operators:
  - name: j
    type: interval_join
    inputs:
      left: {from: clicks, key_by: user}
      right: {from: wide, keyby: user}
` + joinSinks,
			want: []string{`18:27: operators[0].inputs.right.keyby: unknown field (did you mean "key_by"?)`},
		},
		{
			name: "input and key_by on a two-input type",
			body: `operators:
  - name: j
    type: interval_join
    input: clicks
    key_by: user
    inputs:
      left: {from: clicks, key_by: user}
      right: {from: wide, key_by: user}
` + joinSinks,
			want: []string{
				`16:5: operators[0].input: operator type interval_join reads two inputs, listed by role under inputs (left and right); input does not apply`,
				`17:5: operators[0].key_by: operator type interval_join keys each input by its own inputs.<role>.key_by; key_by does not apply`,
			},
		},
		{
			name: "inputs on a one-input type",
			body: `operators:
  - name: j
    type: keyed_count
    key_by: user
    inputs:
      left: {from: clicks, key_by: user}
` + joinSinks,
			want: []string{`17:5: operators[0].inputs: operator type keyed_count reads one input (input, key_by); inputs applies to two-input types: ` + typesWith(func(t operators.Traits) bool { return t.TwoInput() })},
		},
		{
			name: "unknown from, missing key_by",
			body: `operators:
  - name: j
    type: interval_join
    inputs:
      left: {from: clikcs, key_by: user}
      right: {from: wide}
` + joinSinks,
			want: []string{
				`17:14: operators[0].inputs.left.from: no source or operator is called "clikcs" (did you mean "clicks"?)`,
				`18:14: operators[0].inputs.right.key_by: required for the right input of operator type interval_join: a field path (such as user.id) or an expression giving the key`,
			},
		},
		{
			name: "a side on processing time",
			body: `operators:
  - name: w
    type: window
    input: wide
    key_by: user
    params: {kind: tumbling, size: 10s, time: processing, aggregates: [{name: n, fn: count}]}
  - name: j
    type: interval_join
    inputs:
      left: {from: clicks, key_by: user}
      right: {from: w, key_by: key}
` + joinSinks,
			want: []string{`23:15: operators[1].inputs.right.from: the right input reads records stamped with processing time (operator "w", type window on processing time); operator type interval_join joins on event time: read an event-time stream`},
		},
		{
			name: "bounds the wrong way round",
			body: `operators:
  - name: j
    type: interval_join
    inputs:
      left: {from: clicks, key_by: user}
      right: {from: wide, key_by: user}
    params:
      lower: 10s
      upper: -5s
` + joinSinks,
			want: []string{`21:7: operators[0].params.upper: must be at least lower 10s, got -5s`},
		},
		{
			name: "unknown join kind, select that does not compile",
			body: `operators:
  - name: j
    type: interval_join
    inputs:
      left: {from: clicks, key_by: user}
      right: {from: wide, key_by: user}
    params:
      join: outer
      select: '{"a": left.id +}'
` + joinSinks,
			want: []string{
				`20:7: operators[0].params.join: must be one of inner, left, right, full, got "outer"`,
				`21:31: operators[0].params.select: expression "{\"a\": left.id +}": 1:16: syntax error: mismatched input '}' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}`,
			},
		},
		{
			name: "window_join: session windows, sliding without slide",
			body: `operators:
  - name: j
    type: window_join
    inputs:
      left: {from: clicks, key_by: user}
      right: {from: wide, key_by: user}
    params: {kind: session, size: 10s}
  - name: k
    type: window_join
    inputs:
      left: {from: clicks, key_by: user}
      right: {from: wide, key_by: user}
    params: {kind: sliding, size: 10s}
` + joinSinks,
			want: []string{
				`19:14: operators[0].params.kind: session windows do not apply to window_join; want tumbling or sliding`,
				`25:13: operators[1].params.slide: required for kind sliding, at least 1ms, got 0s`,
			},
		},
		{
			name: "window_join: an unknown dedup, block and flow style",
			body: `operators:
  - name: j
    type: window_join
    inputs:
      left: {from: clicks, key_by: user}
      right: {from: wide, key_by: user}
    params:
      kind: tumbling
      size: 10s
      dedup: rigth
  - name: k
    type: window_join
    inputs:
      left: {from: clicks, key_by: user}
      right: {from: wide, key_by: user}
    params: {kind: tumbling, size: 10s, dedup: first}
` + joinSinks,
			want: []string{
				`22:7: operators[0].params.dedup: must be one of none, left, right, both, got "rigth"`,
				`28:41: operators[1].params.dedup: must be one of none, left, right, both, got "first"`,
			},
		},
		{
			name: "a cycle through the right input",
			body: `operators:
  - name: j
    type: interval_join
    inputs:
      left: {from: clicks, key_by: user}
      right: {from: m, key_by: user}
  - {name: m, type: map, input: j, params: {value: value}}
` + joinSinks,
			want: []string{`18:15: operators[0].inputs.right.from: cycle: j -> m -> j`},
		},
	}
	dir := t.TempDir()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("join%02d.yaml", i))
			if err := os.WriteFile(path, []byte(graphHead+tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			var want strings.Builder
			for _, m := range tc.want {
				want.WriteString(path + ":" + m + "\n")
			}
			for _, cmd := range []string{"validate", "run"} {
				var stdout, stderr bytes.Buffer
				code := run(context.Background(), []string{cmd, "--config", path}, &stdout, &stderr)
				if code != 2 || stdout.Len() != 0 || stderr.String() != want.String() {
					t.Errorf("kstreamd %s: exit %d, stdout %q, stderr:\n%s\nwant exit 2, no stdout, stderr:\n%s",
						cmd, code, stdout.String(), stderr.String(), want.String())
				}
			}
		})
	}
}
