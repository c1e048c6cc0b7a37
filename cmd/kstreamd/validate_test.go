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

// graphHead is the head of every graph-error config of TestGraphErrors:
// lines 1 to 12, the sources clicks, rules and wide (parallelism 8). The
// cases append their operators and sinks from line 13 on.
const graphHead = `job:
  name: graph
kafka:
  brokers: [127.0.0.1:9092]
sources:
  - name: clicks
    topic: clicks
  - name: rules
    topic: rules
  - name: wide
    topic: wide
    parallelism: 8
`

// typesWith renders, as the validator does, the built-in types whose traits
// match: "only a does", "only a and b do", "only a, b and c do".
func typesWith(match func(operators.Traits) bool) string {
	reg := operators.NewBuiltinRegistry()
	var out []string
	for _, typ := range reg.Types() {
		if f, _ := reg.Lookup(typ); match(f.Traits) {
			out = append(out, typ)
		}
	}
	switch len(out) {
	case 0:
		return "none does"
	case 1:
		return "only " + out[0] + " does"
	}
	return "only " + strings.Join(out[:len(out)-1], ", ") + " and " + out[len(out)-1] + " do"
}

// TestGraphErrors is issue 9's acceptance test of graph errors: each
// invalid pipeline is refused by `kstreamd validate` and by `kstreamd run`
// alike, exit status 2, with the same exact FILE:LINE:COL messages (run
// plans the graph with the code validate runs, before it touches Kafka or
// disk).
func TestGraphErrors(t *testing.T) {
	t.Parallel()
	reg := operators.NewBuiltinRegistry()
	cases := []struct {
		name string
		// head replaces graphHead when set.
		head, body string
		// want are the messages after "FILE:", one a line.
		want []string
	}{
		{
			name: "unknown operator type",
			body: `operators:
  - name: counts
    type: keyed_cuont
    input: clicks
    key_by: user
sinks:
  - name: out
    input: counts
    topic: out
`,
			want: []string{fmt.Sprintf(`15:5: operators[0].type: unknown value "keyed_cuont" (did you mean "keyed_count"?); want one of %s`, strings.Join(reg.Types(), ", "))},
		},
		{
			name: "unknown input",
			body: `operators:
  - name: counts
    type: keyed_count
    input: clikcs
    key_by: user
sinks:
  - name: out
    input: counts
    topic: out
`,
			want: []string{`16:5: operators[0].input: no source or operator is called "clikcs" (did you mean "clicks"?)`},
		},
		{
			name: "input is a sink",
			body: `operators:
  - name: counts
    type: keyed_count
    input: out
    key_by: user
sinks:
  - name: out
    input: clicks
    topic: out
`,
			want: []string{`16:5: operators[0].input: "out" is a sink (sinks[0]); an input must be a source or an operator`},
		},
		{
			name: "cycle of two operators",
			body: `operators:
  - name: a
    type: keyed_count
    input: b
    key_by: user
  - name: b
    type: keyed_count
    input: a
    key_by: key
sinks:
  - name: out
    input: b
    topic: out
`,
			want: []string{`16:5: operators[0].input: cycle: a -> b -> a`},
		},
		{
			name: "an operator reading itself",
			body: `operators:
  - name: a
    type: keyed_count
    input: a
    key_by: user
sinks:
  - name: out
    input: a
    topic: out
`,
			want: []string{`16:5: operators[0].input: an operator cannot read its own output`},
		},
		{
			name: "broadcast on a type that takes none",
			body: `operators:
  - name: counts
    type: keyed_count
    input: clicks
    key_by: user
    broadcast: rules
sinks:
  - name: out
    input: counts
    topic: out
`,
			want: []string{`18:5: operators[0].broadcast: operator type keyed_count takes no broadcast input; ` + typesWith(func(t operators.Traits) bool { return t.Broadcast })},
		},
		{
			name: "broadcast missing for shape_pair_matcher",
			body: `operators:
  - name: matcher
    type: shape_pair_matcher
    input: clicks
    key_by: color
sinks:
  - name: out
    input: matcher
    topic: out
`,
			want: []string{`14:5: operators[0].broadcast: required for operator type shape_pair_matcher: the source of the rules broadcast to every subtask`},
		},
		{
			name: "broadcast input that is an operator",
			body: `operators:
  - name: counts
    type: keyed_count
    input: rules
    key_by: name
  - name: matcher
    type: shape_pair_matcher
    input: clicks
    key_by: color
    broadcast: counts
sinks:
  - name: out
    input: matcher
    topic: out
`,
			want: []string{`22:5: operators[1].broadcast: "counts" is operators[0]; a broadcast input must be a source`},
		},
		{
			name: "keyed type without key_by",
			body: `operators:
  - name: counts
    type: keyed_count
    input: clicks
sinks:
  - name: out
    input: counts
    topic: out
`,
			want: []string{`14:5: operators[0].key_by: required for operator type keyed_count: a field path (such as user.id) or an expression giving the key`},
		},
		{
			name: "key_by that is neither a field path nor an expression",
			body: `operators:
  - name: counts
    type: keyed_count
    input: clicks
    key_by: "nosuch(user)"
sinks:
  - name: out
    input: counts
    topic: out
`,
			want: []string{`17:5: operators[0].key_by: neither a field path (identifiers joined by dots, such as user.id) nor an expression: expression "nosuch(user)": 1:7: undeclared reference to 'nosuch'`},
		},
		{
			name: "params on a type that takes none",
			body: `operators:
  - name: counts
    type: keyed_count
    input: clicks
    key_by: user
    params:
      window: 10
sinks:
  - name: out
    input: counts
    topic: out
`,
			want: []string{`18:5: operators[0].params: operator type keyed_count takes no params`},
		},
		{
			name: "async_state on shape_pair_matcher",
			body: `operators:
  - name: matcher
    type: shape_pair_matcher
    input: clicks
    key_by: color
    broadcast: rules
    async_state: true
sinks:
  - name: out
    input: matcher
    topic: out
`,
			want: []string{`19:5: operators[0].async_state: operator type shape_pair_matcher has no async state version; ` + typesWith(func(t operators.Traits) bool { return t.AsyncState })},
		},
		{
			name: "a broadcast source also used as a main input",
			body: `operators:
  - name: matcher
    type: shape_pair_matcher
    input: clicks
    key_by: color
    broadcast: rules
  - name: rule_counts
    type: keyed_count
    input: rules
    key_by: name
sinks:
  - name: out
    input: matcher
    topic: out
`,
			want: []string{`21:5: operators[1].input: "rules" is the broadcast input of operators[0] ("matcher"); a broadcast source cannot also be a main input`},
		},
		{
			name: "operator parallelism above job.max_parallelism",
			head: strings.Replace(graphHead, "  name: graph\n", "  name: graph\n  max_parallelism: 4\n", 1),
			body: `operators:
  - name: counts
    type: keyed_count
    input: clicks
    key_by: user
    parallelism: 8
sinks:
  - name: out
    input: counts
    topic: out
`,
			want: []string{`3:3: job.max_parallelism: 4 is less than the parallelism 8 of operators[0] ("counts")`},
		},
		{
			name: "job.parallelism inherited by a keyed operator above job.max_parallelism",
			head: strings.Replace(graphHead, "  name: graph\n", "  name: graph\n  parallelism: 8\n  max_parallelism: 4\n", 1),
			body: `operators:
  - name: counts
    type: keyed_count
    input: clicks
    key_by: user
sinks:
  - name: out
    input: counts
    topic: out
`,
			want: []string{`4:3: job.max_parallelism: 4 is less than the parallelism 8 of operators[0] ("counts")`},
		},
		{
			name: "a source's parallelism inherited by an operator without key_by above job.max_parallelism",
			head: strings.Replace(graphHead, "  name: graph\n", "  name: graph\n  max_parallelism: 4\n", 1),
			body: `operators:
  - name: some
    type: filter
    input: wide
    params:
      condition: "true"
sinks:
  - name: out
    input: some
    topic: out
`,
			want: []string{`3:3: job.max_parallelism: 4 is less than the parallelism 8 of operators[0] ("some")`},
		},
		{
			name: "duplicate names",
			body: `operators:
  - name: clicks
    type: keyed_count
    input: clicks
    key_by: user
sinks:
  - name: out
    input: clicks
    topic: out
  - name: out
    input: clicks
    topic: out2
`,
			want: []string{
				`14:5: operators[0].name: duplicate name "clicks": sources[0] already uses it`,
				`22:5: sinks[1].name: duplicate name "out": sinks[0] already uses it`,
			},
		},
	}
	dir := t.TempDir()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			head := graphHead
			if tc.head != "" {
				head = tc.head
			}
			path := filepath.Join(dir, fmt.Sprintf("case%02d.yaml", i))
			if err := os.WriteFile(path, []byte(head+tc.body), 0o644); err != nil {
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

// TestShippedConfigsValidate: no valid pipeline is refused; every config
// the repository ships (configs/*.yaml, configs/examples/*.yaml,
// configs/nexmark/*.yaml) passes `kstreamd validate`.
func TestShippedConfigsValidate(t *testing.T) {
	t.Parallel()
	var files []string
	for _, pattern := range []string{"*.yaml", "examples/*.yaml", "nexmark/*.yaml"} {
		m, err := filepath.Glob(filepath.Join("..", "..", "configs", pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Fatal("no configs/*.yaml")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), []string{"validate", "--config", path}, &stdout, &stderr); code != 0 ||
				stdout.String() != path+": ok\n" || stderr.Len() != 0 {
				t.Errorf("kstreamd validate --config %s: exit %d, stdout %q, stderr:\n%s", path, code, stdout.String(), stderr.String())
			}
		})
	}
}
