package expression

import (
	"fmt"
	"testing"
)

// TestEqualsConstant: the filters of the form operand == int or string
// literal (either side) give their operand and constant, others none; and
// over records of every kind (ints, doubles, strings, missing fields,
// nulls) the filter is true exactly when the operand evaluates without
// error to an int64 or string equal to the constant, and, where the
// operand fails or gives another type, the filter's own result is what
// the caller must use (checked: where the operand yields int64 or string
// the filter never fails).
func TestEqualsConstant(t *testing.T) {
	for _, tc := range []struct {
		src, operand string
		c            any
	}{
		{"amount % 10 == 3", "amount % 10", int64(3)},
		{"3 == amount % 10", "amount % 10", int64(3)},
		{`currency == "EUR"`, "currency", "EUR"},
		{`value.a.b == "x"`, "value.a.b", "x"},
		{"(amount + 1) * 2 - key_n / 3 == -4", "(amount + 1) * 2 - key_n / 3", int64(-4)},
		{"amount == 1.5", "", nil},
		{"amount > 3", "", nil},
		{"amount % 10 == 3 && x == 1", "", nil},
		{"size(s) == 3", "", nil},
		{"has(a.b) == true", "", nil},
		{"s.startsWith('a') == true", "", nil},
		{"a == b", "", nil},
		{`a.?b.orValue("") == "x"`, "", nil},
	} {
		p, err := Compile(tc.src, ExpectBool())
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		e, c, ok := p.EqualsConstant()
		if ok != (tc.operand != "") {
			t.Fatalf("%s: indexable %v, want %v", tc.src, ok, tc.operand != "")
		}
		if !ok {
			continue
		}
		if e.Source() != tc.operand || c != tc.c {
			t.Fatalf("%s: operand %q, constant %#v; want %q, %#v", tc.src, e.Source(), c, tc.operand, tc.c)
		}
	}
	values := []any{nil, int64(0), int64(3), int64(13), int64(-7), 3.0, 13.5, "3", "EUR", "eur", true, uint64(3), []any{int64(3)}}
	for _, src := range []string{"amount % 10 == 3", "3 == amount % 10", `currency == "EUR"`, "amount == 3", "amount * 2 == 6", "amount - 1 == 2"} {
		p, err := Compile(src, ExpectBool())
		if err != nil {
			t.Fatal(err)
		}
		e, c, ok := p.EqualsConstant()
		if !ok {
			t.Fatalf("%s: not indexable", src)
		}
		for _, v := range append(values, "missing") {
			rec := map[string]any{}
			if v != "missing" {
				rec["amount"], rec["currency"] = v, v
			}
			env := NewEnv(&Input{Value: rec})
			want, werr := p.EvalBool(env)
			got, gerr := e.Eval(env)
			switch g := got.(type) {
			case int64, string:
				if gerr != nil || werr != nil || want != (g == c) {
					t.Fatalf("%s on %#v: operand %#v (%v), filter %v (%v)", src, v, got, gerr, want, werr)
				}
			default:
				_ = fmt.Sprint(want, werr) // the caller evaluates the filter itself
			}
		}
	}
}
