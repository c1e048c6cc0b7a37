package expression

import (
	"errors"
	"strings"
	"testing"
)

// FuzzCompile checks that compiling arbitrary text never panics, that a
// refusal is a *CompileError with a position inside the text, and that a
// compiled program evaluates on a record without panicking.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		`amount > 100`,
		`user.country == 'NL' && amount >= 10`,
		`{"id": event_id, "amount": amount}`,
		`tags`,
		`tags.map(t, t + '!')`,
		`value.?user.?country.orValue('')`,
		`headers.trace == 't' || key == null`,
		`timestamp > 1700000000000`,
		"amount >\n 'x' +",
		`in == 1`,
		`((((1))))`,
	} {
		f.Add(s)
	}
	in := &Input{
		Value:   map[string]any{"amount": int64(512), "user": map[string]any{"country": "NL"}, "tags": []any{"a", "b"}, "event_id": "e-1"},
		Key:     []byte("k"),
		Headers: []Header{{Key: "trace", Value: []byte("t")}},
	}
	f.Fuzz(func(t *testing.T, src string) {
		p, err := Compile(src, WithLimits(Limits{MaxLength: 512, MaxNodes: 200, MaxCost: 10_000}))
		if err != nil {
			var ce *CompileError
			if errors.As(err, &ce) {
				lines := strings.Count(src, "\n") + 1
				if ce.Expr != src || ce.Line < 1 || ce.Line > lines || ce.Column < 1 {
					t.Fatalf("bad position %d:%d (%d lines) in %v", ce.Line, ce.Column, lines, err)
				}
			} else if !strings.HasPrefix(err.Error(), "expression: ") {
				t.Fatalf("error %v (%T) is neither a *CompileError nor prefixed", err, err)
			}
			return
		}
		env := NewEnv(in)
		_, err = p.Eval(env)
		var ee *EvalError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("Eval error %v (%T) is not an *EvalError", err, err)
		}
		if _, err := p.EvalBool(env); err != nil && !errors.As(err, &ee) {
			t.Fatalf("EvalBool error %v (%T) is not an *EvalError", err, err)
		}
	})
}
