package expression_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/kstreamd/kstreamd/expression"
)

func Example() {
	filter, err := expression.Compile(`user.country == 'NL' && amount >= 10`, expression.ExpectBool())
	if err != nil {
		panic(err)
	}
	project, err := expression.Compile(`{"id": event_id, "amount": amount, "key": key}`, expression.ExpectMap())
	if err != nil {
		panic(err)
	}
	v, err := expression.DecodeJSON([]byte(`{"event_id":"e-123","user":{"id":"u42","country":"NL"},"amount":512}`))
	if err != nil {
		panic(err)
	}
	// One Env per record, shared by the record's expressions.
	env := expression.NewEnv(&expression.Input{Value: v, Key: []byte("u42"), Timestamp: time.UnixMilli(1700000000000)})
	keep, err := filter.EvalBool(env)
	if err != nil {
		panic(err)
	}
	out, err := project.Eval(env)
	if err != nil {
		panic(err)
	}
	b, err := expression.EncodeJSON(out)
	if err != nil {
		panic(err)
	}
	fmt.Println(keep, string(b))
	// Output: true {"amount":512,"id":"e-123","key":"u42"}
}

func ExampleCompileError() {
	_, err := expression.Compile("amount >\n  100 +")
	var ce *expression.CompileError
	if errors.As(err, &ce) {
		fmt.Println(ce.Line, ce.Column)
	}
	fmt.Println(err)
	// Output:
	// 2 8
	// expression "amount >\n  100 +": 2:8: syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}
}

func ExampleEvalError() {
	p, err := expression.Compile(`amount > 100`)
	if err != nil {
		panic(err)
	}
	for _, record := range []string{`{"amount": 12}`, `{"amount": "12"}`, `{"total": 12}`} {
		v, err := expression.DecodeJSON([]byte(record))
		if err != nil {
			panic(err)
		}
		ok, err := p.EvalBool(expression.NewEnv(&expression.Input{Value: v}))
		fmt.Println(ok, err)
	}
	// Output:
	// false <nil>
	// false expression "amount > 100": 1:8: no operator > for string and int
	// false expression "amount > 100": 1:1: no field "amount" in the record value
}
