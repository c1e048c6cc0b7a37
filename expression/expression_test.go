package expression

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"cel.dev/cel-go/interpreter"
)

// testRecord has a field of every reserved name, so that precedence shows.
const testRecord = `{
	"event_id": "e-123",
	"user": {"id": "u42", "country": "NL"},
	"amount": 512,
	"price": 12.5,
	"currency": "EUR",
	"type": "card",
	"tags": ["a", "b"],
	"big": 9007199254740993,
	"key": "field-key",
	"timestamp": "field-ts",
	"value": "field-value",
	"headers": "field-headers",
	"in": 7
}`

func decoded(t testing.TB, s string) any {
	t.Helper()
	v, err := DecodeJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func testInput(t testing.TB) *Input {
	return &Input{
		Value:     decoded(t, testRecord),
		Key:       []byte("u42"),
		Timestamp: time.UnixMilli(1700000000123),
		Headers: []Header{
			{Key: "trace", Value: []byte("t-1")},
			{Key: "dup", Value: []byte("first")},
			{Key: "dup", Value: []byte("second")},
		},
		Topic: "orders-eu",
	}
}

func TestActivationIsCELActivation(t *testing.T) {
	var _ interpreter.Activation = (*activation)(nil)
}

func TestEval(t *testing.T) {
	in := testInput(t)
	tests := []struct {
		name, src string
		want      any
	}{
		{"field", `amount`, int64(512)},
		{"filter", `amount > 100`, true},
		{"nested field", `user.country`, "NL"},
		{"nested and", `user.country == 'NL' && amount >= 10`, true},
		{"index", `user["id"]`, "u42"},
		{"field named type", `type == 'card'`, true},
		{"keyword field by index", `value["in"]`, int64(7)},
		{"reserved key wins", `key`, "u42"},
		{"field key via value", `value.key`, "field-key"},
		{"field key via index", `value["key"]`, "field-key"},
		{"reserved timestamp wins", `timestamp`, int64(1700000000123)},
		{"field timestamp via value", `value.timestamp`, "field-ts"},
		{"timestamp arithmetic", `timestamp - 123`, int64(1700000000000)},
		{"guarded constant failure", `amount >= 0 ? amount : int('negative amount')`, int64(512)},
		{"orValue of a constant failure", `value.?amount.orValue(1 / 0)`, int64(512)},
		{"timestamp function still a function", `timestamp("2020-01-01T00:00:00Z")`, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"reserved value wins", `value.value`, "field-value"},
		{"reserved headers wins", `value.headers`, "field-headers"},
		{"header", `headers.trace`, "t-1"},
		{"header repeated, last wins", `headers["dup"]`, "second"},
		{"topic", `topic`, "orders-eu"},
		{"topic in a filter", `topic.startsWith('orders-') && amount > 100`, true},
		{"headers map", `headers`, map[string]any{"trace": "t-1", "dup": "second"}},
		{"header absent", `'x' in headers`, false},
		{"projection", `{"id": event_id, "amount": amount}`, map[string]any{"id": "e-123", "amount": int64(512)}},
		{"nested projection", `{"u": {"c": user.country}, "t": [type]}`, map[string]any{"u": map[string]any{"c": "NL"}, "t": []any{"card"}}},
		{"record map returned as is", `user`, map[string]any{"id": "u42", "country": "NL"}},
		{"list", `tags`, []any{"a", "b"}},
		{"built list", `tags.map(t, t + '!')`, []any{"a!", "b!"}},
		{"filtered list", `tags.filter(t, t != 'a')`, []any{"b"}},
		{"int64 exact", `big`, int64(9007199254740993)},
		{"int64 arithmetic exact", `big + 1`, int64(9007199254740994)},
		{"double", `price`, 12.5},
		{"int compares with double", `amount > 511.5`, true},
		{"explicit double arithmetic", `double(amount) * 1.5`, 768.0},
		{"optional absent is nil", `value.?missing`, nil},
		{"optional present", `value.?amount`, int64(512)},
		{"optional default", `value.?missing.orValue('d')`, "d"},
		{"has", `has(value.missing)`, false},
		{"missing absorbed by &&", `false && missing`, false},
		{"missing absorbed by ||", `true || missing`, true},
		{"missing in untaken branch", `type == 'cash' ? missing : 'ok'`, "ok"},
		{"null", `null`, nil},
		{"bytes", `b"hi"`, []byte("hi")},
		{"duration", `duration("1500ms")`, 1500 * time.Millisecond},
		{"uint", `7u`, uint64(7)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Eval(NewEnv(in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Eval(%s) = %#v, want %#v", tt.src, got, tt.want)
			}
		})
	}
}

func TestEvalValue(t *testing.T) {
	in := testInput(t)
	p, err := Compile(`value`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Eval(NewEnv(in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in.Value) {
		t.Errorf("value = %#v, want the decoded record", got)
	}
	// value is any JSON type, not only an object.
	for _, v := range []any{nil, "s", int64(3), []any{int64(1)}, true} {
		got, err := p.Eval(NewEnv(&Input{Value: v}))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, v) {
			t.Errorf("value = %#v, want %#v", got, v)
		}
	}
}

func TestKeyAndEmptyEnv(t *testing.T) {
	p, err := Compile(`[key, timestamp, headers, value]`)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  *Env
		want []any
	}{
		{"nil key is null", NewEnv(&Input{Key: nil}), []any{nil, int64(0), map[string]any{}, nil}},
		{"empty key is empty", NewEnv(&Input{Key: []byte{}}), []any{"", int64(0), map[string]any{}, nil}},
		{"nil input", NewEnv(nil), []any{nil, int64(0), map[string]any{}, nil}},
		{"zero env", &Env{}, []any{nil, int64(0), map[string]any{}, nil}},
		{"nil env", nil, []any{nil, int64(0), map[string]any{}, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.EvalList(tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestEnvReset(t *testing.T) {
	p, err := Compile(`key + ':' + headers.h + ':' + string(n)`)
	if err != nil {
		t.Fatal(err)
	}
	var env Env
	for i, k := range []string{"a", "b", "c"} {
		env.Reset(&Input{
			Value:   map[string]any{"n": int64(i)},
			Key:     []byte(k),
			Headers: []Header{{Key: "h", Value: []byte("h" + k)}},
		})
		got, err := p.Eval(&env)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%s:h%s:%d", k, k, i); got != want {
			t.Errorf("record %d: got %q, want %q", i, got, want)
		}
	}
}

func TestEvalBoolAndList(t *testing.T) {
	env := NewEnv(testInput(t))
	tests := []struct {
		src  string
		eval func(*Program, *Env) (any, error)
		want any
	}{
		{`amount > 100`, func(p *Program, e *Env) (any, error) { return p.EvalBool(e) }, true},
		{`amount < 100`, func(p *Program, e *Env) (any, error) { return p.EvalBool(e) }, false},
		{`tags`, func(p *Program, e *Env) (any, error) { return p.EvalList(e) }, []any{"a", "b"}},
		{`[amount, type]`, func(p *Program, e *Env) (any, error) { return p.EvalList(e) }, []any{int64(512), "card"}},
		{`[]`, func(p *Program, e *Env) (any, error) { return p.EvalList(e) }, []any{}},
	}
	for _, tt := range tests {
		p, err := Compile(tt.src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tt.eval(p, env)
		if err != nil {
			t.Fatalf("%s: %v", tt.src, err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s = %#v, want %#v", tt.src, got, tt.want)
		}
	}
}

func TestProjectionJSON(t *testing.T) {
	p, err := Compile(`{"id": event_id, "amount": amount, "big": big, "price": price, "tags": tags, "html": "<&>"}`, ExpectMap())
	if err != nil {
		t.Fatal(err)
	}
	v, err := p.Eval(NewEnv(testInput(t)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := EncodeJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"amount":512,"big":9007199254740993,"html":"<&>","id":"e-123","price":12.5,"tags":["a","b"]}`
	if string(got) != want {
		t.Errorf("json = %s, want %s", got, want)
	}
}

func TestEvalErrors(t *testing.T) {
	rec := testInput(t)
	tests := []struct {
		name, src string
		in        *Input
		eval      string // "", "bool" or "list"
		opts      []Option
		want      string // in the message, after the expression
		line, col int
	}{
		{"missing field", `missing > 1`, rec, "", nil, `no field "missing" in the record value`, 1, 1},
		{"missing field later", `amount > 1 && nope == 2`, rec, "", nil, `no field "nope"`, 1, 15},
		{"missing field named like a type", `int == 1`, rec, "", nil, `no field "int"`, 1, 1},
		{"wrong type", `amount > 100`, &Input{Value: map[string]any{"amount": "12"}}, "", nil, "no operator > for string and int", 1, 8},
		{"int times double", `amount * 1.5`, rec, "", nil, "no operator * for int and double", 1, 8},
		{"function on wrong type", `size(amount)`, rec, "", nil, "no function size(int)", 1, 5},
		{"missing nested key", `user.missing`, rec, "", nil, "no such key: missing", 1, 5},
		{"missing header", `headers.nope`, rec, "", nil, "no such key: nope", 1, 8},
		{"overflow", `9223372036854775807 + amount`, rec, "", nil, "integer overflow", 1, 21},
		{"value not an object", `amount`, &Input{Value: []any{int64(1)}}, "", nil, "the record value is an array, not an object", 1, 1},
		{"value null", `amount`, &Input{}, "", nil, "the record value is null", 1, 1},
		{"not bool", `amount`, rec, "bool", nil, "result is int, want bool", 0, 0},
		{"not list", `amount`, rec, "list", nil, "result is int, want list", 0, 0},
		{"not map", `value`, &Input{Value: []any{}}, "", []Option{ExpectMap()}, "result is list, want map", 0, 0},
		{"map key not string", `{1: 2}`, rec, "", nil, "map key 1 is int, want string", 0, 0},
		{"no JSON form", `type(amount)`, rec, "", nil, "has no JSON form", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(tt.src, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			env := NewEnv(tt.in)
			switch tt.eval {
			case "bool":
				_, err = p.EvalBool(env)
			case "list":
				_, err = p.EvalList(env)
			default:
				_, err = p.Eval(env)
			}
			var ee *EvalError
			if !errors.As(err, &ee) {
				t.Fatalf("err = %v (%T), want *EvalError", err, err)
			}
			if ee.Expr != tt.src {
				t.Errorf("Expr = %q, want %q", ee.Expr, tt.src)
			}
			prefix := fmt.Sprintf("expression %q: ", tt.src)
			if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tt.want) {
				t.Errorf("err = %q, want prefix %q and %q", msg, prefix, tt.want)
			}
			if ee.Line != tt.line || ee.Column != tt.col {
				t.Errorf("position = %d:%d, want %d:%d", ee.Line, ee.Column, tt.line, tt.col)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	long := strings.Repeat("a", DefaultMaxLength+1)
	many := "[" + strings.Repeat("1,", DefaultMaxNodes) + "1]" // 1002 nodes
	loop := "[1,2,3,4,5,6,7,8,9,10]"
	costly := loop + ".map(a, " + loop + ".map(b, " + loop + ".map(c, " + loop + ".map(d, " + loop + ".map(e, a)))))"
	tests := []struct {
		name, src string
		opts      []Option
		line, col int
		want      string
	}{
		{"syntax", `amount >`, nil, 1, 9, "syntax error: mismatched input '<EOF>'"},
		{"syntax line 2", "amount >\n  'x' + ", nil, 2, 9, "syntax error"},
		{"syntax column in characters", `'é' ++`, nil, 1, 6, "syntax error"},
		{"keyword as identifier", `in == 1`, nil, 1, 1, "syntax error"},
		{"unknown function", `foo(amount)`, nil, 1, 4, "undeclared reference to 'foo'"},
		{"timestamp is an int", `timestamp + 'x'`, nil, 1, 11, "found no matching overload for '_+_'"},
		{"headers are strings", `headers.x > 1`, nil, 1, 11, "found no matching overload for '_>_'"},
		{"too long", long, nil, 1, 1, "4097 bytes, longer than the limit of 4096"},
		{"too long for custom limit", `amount > 100`, []Option{WithLimits(Limits{MaxLength: 10})}, 1, 1, "12 bytes, longer than the limit of 10"},
		{"too many nodes", many, nil, 1, 1, "node count exceeds limit"},
		{"too many nodes for custom limit", `a + b + c`, []Option{WithLimits(Limits{MaxNodes: 3})}, 1, 1, "count 5, limit 3"},
		{"certainly too costly", costly, nil, 1, 1, "estimated cost of at least"},
		{"too costly for custom limit", `[1, 2, 3].map(x, x)`, []Option{WithLimits(Limits{MaxCost: 5})}, 1, 1, "exceeds the limit of 5"},
		{"invalid utf-8", "a\xff", nil, 1, 2, "invalid UTF-8"},
		{"want bool", `'x' + 'y'`, []Option{ExpectBool()}, 1, 1, "result is string, want bool"},
		{"want list", `1 > 2`, []Option{ExpectList()}, 1, 1, "result is bool, want list"},
		{"want map", `[1]`, []Option{ExpectMap()}, 1, 1, "result is list(int), want map"},
		// A constant sub-expression that cannot be evaluated fails on every
		// record: a compile error at its first character.
		{"constant division by zero", `1 / 0`, nil, 1, 1, "constant sub-expression 1 / 0 cannot be evaluated: division by zero"},
		{"constant division by zero inside", `amount + (1 / 0)`, nil, 1, 11, "constant sub-expression 1 / 0 cannot be evaluated: division by zero"},
		{"constant modulo by zero", `amount > 2 && 7 % (3 - 3) == 1`, nil, 1, 15, "constant sub-expression 7 % (3 - 3) cannot be evaluated: modulus by zero"},
		{"constant overflow line 2", "amount > 0 ||\n  9223372036854775807 + 1 > 0", nil, 2, 3, "constant sub-expression 9223372036854775807 + 1 cannot be evaluated: integer overflow"},
		{"constant overflow innermost", `amount + (2 * (9223372036854775807 + 1))`, nil, 1, 16, "constant sub-expression 9223372036854775807 + 1 cannot be evaluated"},
		{"constant negation overflow", `amount - -(-9223372036854775807 - 2)`, nil, 1, 12, "constant sub-expression -9223372036854775807 - 2 cannot be evaluated: integer overflow"},
		{"constant index out of range", `[1][2] + amount`, nil, 1, 1, "constant sub-expression [1][2] cannot be evaluated: index out of bounds: 2"},
		{"constant missing key", `{'a': 1}['b'] == amount`, nil, 1, 1, "no such key: b"},
		{"constant column in characters", `'é' + string(1/0)`, nil, 1, 14, "constant sub-expression 1 / 0 cannot be evaluated"},
		{"constant bool", `amount > 0 && 1 / 0 == 1`, []Option{ExpectBool()}, 1, 15, "constant sub-expression 1 / 0 cannot be evaluated"},
		// A ternary's condition, whatever its branches, and what is beside
		// it; a comprehension's range.
		{"constant ternary condition", `1 / 0 == 1 ? amount : 2`, nil, 1, 1, "constant sub-expression 1 / 0 cannot be evaluated"},
		{"constant beside a ternary", `(amount > 0 ? 1 : 2) + [1][3]`, nil, 1, 24, "constant sub-expression [1][3] cannot be evaluated"},
		{"constant comprehension range", `[1 / 0].exists(x, x == amount)`, nil, 1, 2, "constant sub-expression 1 / 0 cannot be evaluated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(tt.src, tt.opts...)
			var ce *CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("Compile = %v, %v; want *CompileError", p, err)
			}
			if ce.Expr != tt.src || ce.Line != tt.line || ce.Column != tt.col || !strings.Contains(ce.Msg, tt.want) {
				t.Errorf("got %q at %d:%d (Msg %q), want %d:%d %q", ce.Expr, ce.Line, ce.Column, ce.Msg, tt.line, tt.col, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "expression \"") {
				t.Errorf("Error() = %q, want the prefix expression \"", err)
			}
		})
	}
}

func TestCompileAccepts(t *testing.T) {
	for _, tt := range []struct {
		src  string
		opts []Option
	}{
		{`amount`, []Option{ExpectBool()}}, // a field: known per record only
		{`tags`, []Option{ExpectList()}},
		{`{"a": amount}`, []Option{ExpectMap()}},
		{`value.?x.orValue(1) > 0`, []Option{ExpectBool()}},
		{strings.Repeat("a", DefaultMaxLength), nil},
		{`a + b + c`, []Option{WithLimits(Limits{MaxNodes: 5})}},
		// Constants that evaluate, and failures that depend on the record.
		{`amount * (60 * 1000) + 9223372036854775806 + 1 - 9223372036854775807`, nil},
		{`true || 1 / 0 == 1`, []Option{ExpectBool()}}, // never fails: || absorbs the error
		{`amount / 0`, nil},
		{`[1, 2].map(x, x / 0)`, nil}, // a comprehension is left to evaluation
		{`optional.of(1).value() + amount`, nil},
		{`int('42') + amount`, nil},
		// A constant failure where the record decides whether it runs: a
		// ?: branch (a deliberate error that dead-letters the records the
		// condition picks), an orValue argument, a comprehension's loop.
		{`amount >= 0 ? amount : int('negative amount')`, nil},
		{`amount > 0 ? 1 / 0 : 2`, nil},
		{`amount > 0 ? 1 : [1][3]`, nil},
		{`value.?x.orValue(1 / 0) + amount`, nil},
		{`[amount].exists(x, x > 0 || 1 / 0 == 1)`, []Option{ExpectBool()}},
	} {
		if _, err := Compile(tt.src, tt.opts...); err != nil {
			t.Errorf("Compile(%.40q) = %v", tt.src, err)
		}
	}
}

func TestErrorMessageShortensExpression(t *testing.T) {
	src := strings.Repeat("x", 100) + " >"
	_, err := Compile(src)
	if err == nil || strings.Contains(err.Error(), src) || !strings.Contains(err.Error(), `..."`) {
		t.Errorf("err = %v, want the expression shortened", err)
	}
	var ce *CompileError
	if errors.As(err, &ce) && ce.Expr != src {
		t.Errorf("Expr = %q, want the whole expression", ce.Expr)
	}
}

func TestCostLimit(t *testing.T) {
	arr := make([]any, 1000)
	for i := range arr {
		arr[i] = int64(i)
	}
	big := strings.Repeat("0123456789", 10_000) // 100 kB
	env := NewEnv(&Input{Value: map[string]any{"arr": arr, "s": big, "tags": []any{"a", "b"}}})
	tests := []struct {
		name, src string
		limits    Limits
		wantLimit uint64
	}{
		{"nested loops over a record list", `arr.all(a, arr.all(b, arr.all(c, true)))`, Limits{}, DefaultMaxCost},
		{"string concatenation of a field", `s + s + s + s + s + s + s + s + s + s + s + s + s + s + s`, Limits{}, DefaultMaxCost},
		{"concatenation in a loop", `arr.map(a, s + s).size() > 0`, Limits{}, DefaultMaxCost},
		{"regex over a large field in a loop", `arr.exists(a, s.matches('x+y'))`, Limits{}, DefaultMaxCost},
		{"custom limit", `tags.exists(t, t == 'z')`, Limits{MaxCost: 3}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(tt.src, WithLimits(tt.limits))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = p.Eval(env)
			var ee *EvalError
			want := fmt.Sprintf("evaluation cost exceeds the limit of %d", tt.wantLimit)
			if !errors.As(err, &ee) || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v, want *EvalError %q", err, want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("stopped after %v", d)
			}
		})
	}
	// Within the limit, the same expressions evaluate.
	small := NewEnv(&Input{Value: map[string]any{"arr": arr[:10], "s": "ab", "tags": []any{"a"}}})
	for _, src := range []string{`arr.all(a, arr.all(b, arr.all(c, true)))`, `s + s + s`, `tags.exists(t, t == 'a')`} {
		p, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Eval(small); err != nil {
			t.Errorf("%s: %v", src, err)
		}
	}
}

func TestCostTrackingOnlyWhenNeeded(t *testing.T) {
	for _, tt := range []struct {
		src     string
		tracked bool
	}{
		{`amount > 100`, false},
		{`user.country == 'NL' && amount >= 10`, false},
		{`{"id": event_id, "amount": amount}`, false},
		{`[1, 2, 3].map(x, x * 2)`, false},
		{`tags.exists(t, t == 'b')`, true},
		{`event_id + 'x'`, true},
	} {
		p, err := Compile(tt.src)
		if err != nil {
			t.Fatal(err)
		}
		if p.tracked != tt.tracked {
			t.Errorf("%s: tracked = %v, want %v", tt.src, p.tracked, tt.tracked)
		}
	}
}

func TestConcurrentEval(t *testing.T) {
	p, err := Compile(`{"k": key, "n": n, "ok": n % 2 == 0, "h": headers.h}`)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			var env Env
			for i := range 200 {
				n := int64(g*1000 + i)
				env.Reset(&Input{Value: map[string]any{"n": n}, Key: []byte{byte('a' + g)}, Headers: []Header{{Key: "h", Value: []byte{byte(i)}}}})
				v, err := p.Eval(&env)
				if err != nil {
					t.Error(err)
					return
				}
				m := v.(map[string]any)
				if m["n"] != n || m["k"] != string(rune('a'+g)) || m["ok"] != (n%2 == 0) || m["h"] != string([]byte{byte(i)}) {
					t.Errorf("goroutine %d record %d: %v", g, i, m)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestDecodeJSON(t *testing.T) {
	tests := []struct {
		in   string
		want any
	}{
		{`9007199254740993`, int64(9007199254740993)},
		{`-9223372036854775808`, int64(math.MinInt64)},
		{`9223372036854775808`, 9223372036854775808.0}, // beyond int64
		{`-0`, int64(0)},
		{`1.5`, 1.5},
		{`1e3`, 1000.0},
		{`2.0`, 2.0},
		{`"s"`, "s"},
		{`true`, true},
		{`null`, nil},
		{` [1, "a", null, false, 0.5] `, []any{int64(1), "a", nil, false, 0.5}},
		{`{"a": {"b": [1, {"c": 2}]}}`, map[string]any{"a": map[string]any{"b": []any{int64(1), map[string]any{"c": int64(2)}}}}},
	}
	for _, tt := range tests {
		got, err := DecodeJSON([]byte(tt.in))
		if err != nil {
			t.Errorf("DecodeJSON(%s): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DecodeJSON(%s) = %#v, want %#v", tt.in, got, tt.want)
		}
	}
	for _, bad := range []string{``, `{`, `1 2`, `{"a":1}x`, `1e400`, `[1e400]`, `nul`} {
		if v, err := DecodeJSON([]byte(bad)); err == nil || !strings.HasPrefix(err.Error(), "expression: decode json: ") {
			t.Errorf("DecodeJSON(%q) = %v, %v; want an expression: error", bad, v, err)
		}
	}
}

func TestEncodeJSON(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{map[string]any{"b": int64(1), "a": []any{"x", nil, true}, "c": 0.5}, `{"a":["x",null,true],"b":1,"c":0.5}`},
		{int64(9007199254740993), `9007199254740993`},
		{"<a&b>", `"<a&b>"`},
		{nil, `null`},
	}
	for _, tt := range tests {
		got, err := EncodeJSON(tt.in)
		if err != nil || string(got) != tt.want {
			t.Errorf("EncodeJSON(%#v) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	if _, err := EncodeJSON(math.NaN()); err == nil || !strings.HasPrefix(err.Error(), "expression: encode json: ") {
		t.Errorf("EncodeJSON(NaN) err = %v", err)
	}
}

// TestStringFunctions: CEL's strings extension is on (word counts split a
// line; case and trimming work).
func TestStringFunctions(t *testing.T) {
	cases := []struct {
		expr string
		in   any
		want any
	}{
		{`value.split(' ')`, "to be or", []any{"to", "be", "or"}},
		{`value.upperAscii()`, "ab", "AB"},
		{`value.trim()`, "  x ", "x"},
		{`name.lowerAscii() + "/" + string(size(tags))`, map[string]any{"name": "NL", "tags": []any{"a"}}, "nl/1"},
	}
	for _, tc := range cases {
		p, err := Compile(tc.expr)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		got, err := p.Eval(NewEnv(&Input{Value: tc.in}))
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s = %#v, want %#v", tc.expr, got, tc.want)
		}
	}
}

func TestEnvJSONDecodedOnNeed(t *testing.T) {
	tests := []struct {
		name, expr string
		json       string
		want       any
	}{
		{"field", `amount + 1`, `{"amount":41}`, int64(42)},
		{"value", `value.k`, `{"k":"v"}`, "v"},
		{"key only", `key`, `{"amount":`, "k1"}, // never decoded: its syntax does not matter
		{"not json is its string", `value`, `not json`, "not json"},
		{"array value", `size(value)`, `[1,2,3]`, int64(3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Eval(NewEnv(&Input{JSON: []byte(tt.json), Key: []byte("k1")}))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
	// A field missing from a value that is not an object names the value's kind.
	p, _ := Compile(`amount`)
	if _, err := p.Eval(NewEnv(&Input{JSON: []byte(`[1]`)})); err == nil || !strings.Contains(err.Error(), "the record value is an array") {
		t.Errorf("err = %v, want the array message", err)
	}
}
