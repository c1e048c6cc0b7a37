package expression

import (
	"fmt"
	"testing"
)

// TestDirectStringOfNumberFormsEqualsCEL: string() of a record's number
// or of arithmetic on it, in programs that take the direct form since
// boundedSizes bounds a scalar's text (s44-src), gives CEL's value or
// error on every form a JSON number takes: signed zero, exponents, the
// int64 limits and past them, doubles with and without a fraction, and
// non-numbers (a string, a bool, null, a list, an object).
func TestDirectStringOfNumberFormsEqualsCEL(t *testing.T) {
	srcs := []string{`string(amount) + '@'`, `string(amount - amount % 10) + '@' + note`, `string(-amount) + note`,
		`string(amount * 2) + note`, `string(amount / 3) + note`, `note + string(amount - 1)`}
	vals := []string{`0`, `-0`, `1e3`, `1E3`, `1.0`, `-1.0`, `1e300`, `9223372036854775807`, `9223372036854775808`,
		`-9223372036854775808`, `-9223372036854775809`, `12345678901234567890`, `1e-7`, `0.1`, `"7"`, `true`, `null`,
		`[1]`, `{"a":1}`, `0e0`, `-0.0`, `123456789012345678`, `2e18`, `1.5e3`, `100000000000000000000000`}
	for _, src := range srcs {
		p := mustCompile(t, src)
		if p.direct == nil {
			t.Fatalf("%s: no direct form", src)
		}
		g := *p
		g.direct = nil
		for _, v := range vals {
			rec := `{"amount":` + v + `,"note":"n"}`
			env := func() *Env { return NewEnv(&Input{Doc: NewValidDoc([]byte(rec))}) }
			a, aerr := p.Eval(env())
			b, berr := g.Eval(env())
			if fmt.Sprintf("%#v", a) != fmt.Sprintf("%#v", b) || fmt.Sprint(aerr) != fmt.Sprint(berr) {
				t.Errorf("%s on %s: %#v, %v; CEL %#v, %v", src, rec, a, aerr, b, berr)
			}
		}
	}
	// Exact values of the first program on ints.
	for v, want := range map[string]string{`0`: "0@", `-9223372036854775808`: "-9223372036854775808@", `42`: "42@"} {
		got, err := mustCompile(t, `string(amount) + '@'`).Eval(NewEnv(&Input{Doc: NewValidDoc([]byte(`{"amount":` + v + `}`))}))
		if err != nil || got != want {
			t.Errorf("string(%s) + '@': %v, %v; want %q", v, got, err, want)
		}
	}
}
