package expression

import (
	"fmt"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// ebreakNumberForms are the forms a JSON value of a field read as a
// number takes (s45-ebreak): signed zeros, exponents, a fraction of zero,
// integers past 2^53, at and past the int64 limits and past 2^64, 18 and
// 19 digits (docField.rawScalar's plainInt reads at most 18), doubles out
// of range (1e400) and below the smallest, and non-numbers.
var ebreakNumberForms = []string{
	`0`, `-0`, `1`, `-1`, `2`, `-8`, `7`, `-7`, `3`, `1.0`, `1e0`, `1E2`, `-0.0`, `0e0`, `2.5`, `-2.5`, `1e400`, `-1e400`,
	`1e-400`, `4.9e-324`, `9007199254740993`, `9007199254740992`, `123456789012345678`, `999999999999999999`,
	`1234567890123456789`, `-1234567890123456789`, `9223372036854775807`, `-9223372036854775808`, `9223372036854775808`,
	`-9223372036854775809`, `18446744073709551615`, `18446744073709551616`, `1e19`, `0.1`, `"1"`, `"x"`, `""`, `true`,
	`false`, `null`, `[]`, `[1]`, `{}`, `{"price":1}`,
}

// TestDirectNumberFormsEqualsCEL is FuzzDirectEqualsCEL's check (every
// input form) of arithmetic and comparisons (directPrograms' from the
// constant-operand ones on, and a few of the base's) on
// records whose integer fields (amount, d, id, event_type, bid.price,
// bid.auction) take each of ebreakNumberForms, one field at a time and all
// together: a field that is an integer in one record and a string, a
// double, null, missing or an object in the next.
func TestDirectNumberFormsEqualsCEL(t *testing.T) {
	srcs := []string{`amount < 500`, `amount == 317`, `amount > 500.5`, `-amount < 0`, `-d > 0.0`, `bid.auction % 123 == 0`,
		`bid.price * 908`, `double(bid.price * 908) / 1000.0`, `{"id": id, "key": key, "amount": amount}`, `amount + 9223372036854775807 > 0`,
		`amount / 0 == 1`, `amount % -7 == 2`, `amount == null`, `string(amount) + '@'`}
	for i, s := range directPrograms {
		if s == `amount % 2 == 0` {
			srcs = append(srcs, directPrograms[i:]...) // s45-chain's and s45-ebreak's
			break
		}
	}
	fast := make([]*Program, len(srcs))
	general := make([]*Program, len(srcs))
	for i, src := range srcs {
		fast[i] = mustCompile(t, src)
		g := *fast[i]
		g.direct = nil
		general[i] = &g
	}
	for _, v := range ebreakNumberForms {
		recs := []string{
			`{"amount":` + v + `,"d":2.5,"note":"x","flag":true,"n":null}`,
			`{"amount":` + v + `,"d":` + v + `,"id":` + v + `,"event_type":` + v + `,"bid":{"price":` + v + `,"auction":3},"note":` + v + `,"flag":` + v + `}`,
			`{"bid":{"price":7,"auction":` + v + `},"amount":-3,"value":1}`,
		}
		for _, r := range recs {
			directEqualsCELOf(t, srcs, fast, general, []byte(r))
		}
	}
}

// TestDirectComparisonsExact checks exact values and errors of
// comparisons and arithmetic with a constant on either side (the right
// one held as its value, dbinary.rc), against CEL's interpreter and
// against the values CEL's specification gives: heterogeneous equality
// and ordering of int, uint and double, the int64 corners and their
// overflow errors, truncated division and modulo (the sign of the
// dividend), NaN, and operands of another kind than the constant's.
func TestDirectComparisonsExact(t *testing.T) {
	for _, c := range []struct {
		src, rec string
		want     string // fmt %#v of the value, or "error: " and its text
	}{
		{`amount % 2 == 0`, `{"amount":-8}`, `true`},
		{`0 == amount % 2`, `{"amount":-7}`, `false`},
		{`amount % 2 == -1`, `{"amount":-7}`, `true`},
		{`-7 % amount`, `{"amount":3}`, `-1`},
		{`7 % amount`, `{"amount":-3}`, `1`},
		{`amount / 2`, `{"amount":-7}`, `-3`},
		{`amount % -1 == 0`, `{"amount":-9223372036854775808}`, `error: expression "amount % -1 == 0": 1:8: integer overflow`},
		{`amount / -1`, `{"amount":-9223372036854775808}`, `error: expression "amount / -1": 1:8: integer overflow`},
		{`amount / 0`, `{"amount":1}`, `error: expression "amount / 0": 1:8: division by zero`},
		{`amount % 0`, `{"amount":1}`, `error: expression "amount % 0": 1:8: modulus by zero`},
		{`amount - -9223372036854775807 > 0`, `{"amount":1}`, `error: expression "amount - -9223372036854775807 > 0": 1:8: integer overflow`},
		{`9223372036854775807 + amount`, `{"amount":1}`, `error: expression "9223372036854775807 + amount": 1:21: integer overflow`},
		{`amount * -9223372036854775808`, `{"amount":-1}`, `error: expression "amount * -9223372036854775808": 1:8: integer overflow`},
		{`amount * -9223372036854775808`, `{"amount":1}`, `-9223372036854775808`},
		{`amount == -9223372036854775808`, `{"amount":-9223372036854775808}`, `true`},
		{`amount == 1u`, `{"amount":1}`, `true`},
		{`1u == amount`, `{"amount":-1}`, `false`},
		{`amount < 2u`, `{"amount":-1}`, `true`},
		{`amount == 1.0`, `{"amount":1}`, `true`},
		{`1.0 == amount`, `{"amount":1.0}`, `true`},
		{`amount == 317`, `{"amount":317.0}`, `true`},
		{`amount == 317`, `{"amount":3.17e2}`, `true`},
		{`amount < 500`, `{"amount":499.5}`, `true`},
		{`amount < 1.5`, `{"amount":1}`, `true`},
		{`amount == 1`, `{"amount":"1"}`, `false`},
		{`amount < 500`, `{"amount":"1"}`, `error: expression "amount < 500": 1:8: no operator < for string and int`},
		{`amount == null`, `{"amount":0}`, `false`},
		{`null == amount`, `{}`, `error: expression "null == amount": 1:9: no field "amount" in the record value`},
		{`amount % 2 == 0`, `{"amount":2.0}`, `error: expression "amount % 2 == 0": 1:8: no operator % for double and int`},
		{`d == 2`, `{"d":-0.0}`, `false`},
		{`d == -0.0`, `{"d":0}`, `true`},
		{`d == -0.0`, `{"d":0.0}`, `true`},
		{`d != d`, `{"d":1e400}`, `error: expression "d != d": 1:1: no field "d": the record value is a string, not an object`},
		{`d * 1e308 > 1e308`, `{"d":10.0}`, `true`},
		{`0.0 / d`, `{"d":0.0}`, `NaN`},
		{`amount / 0.0`, `{"amount":1.0}`, `+Inf`},
		{`d + 1`, `{"d":1.0}`, `error: expression "d + 1": 1:3: no operator + for double and int`},
		{`amount + 1u`, `{"amount":1}`, `error: expression "amount + 1u": 1:8: no operator + for int and uint`},
		{`flag < true`, `{"flag":false}`, `true`},
		{`true == flag`, `{"flag":true}`, `true`},
		{`null == null`, `{}`, `true`},
		{`note == b"x"`, `{"note":"x"}`, `false`},
		{`"m" > note`, `{"note":"a"}`, `true`},
		{`note + "\u00e9" > note`, `{"note":"a"}`, `true`},
		{`amount == 9007199254740993`, `{"amount":9007199254740993}`, `true`},
		{`amount == 1234567890123456789`, `{"amount":1234567890123456789}`, `true`},
		{`amount + 1`, `{"amount":9223372036854775807}`, `error: expression "amount + 1": 1:8: integer overflow`},
		{`amount > 0`, `{"amount":9223372036854775808}`, `true`},
		{`amount`, `{"amount":9223372036854775808}`, `9.223372036854776e+18`},
		{`amount`, `{"amount":-0}`, `0`},
		{`amount`, `{"amount":1E2}`, `100`},
		{`bid.price % 7 == bid.auction % 7`, `{"bid":{"price":15,"auction":-6}}`, `false`},
		{`bid.price - bid.auction`, `{"bid":{"price":15,"auction":-6}}`, `21`},
		{`value.bid.price * 2 > 0`, `{"bid":{"price":1}}`, `true`},
		{`timestamp(amount) < timestamp("1970-01-01T00:00:02Z")`, `{"amount":1}`, `true`},
		{`timestamp(amount) < timestamp("1970-01-01T00:00:02Z")`, `{"amount":2}`, `false`},
		{`timestamp == 1500`, `{}`, `true`},
		{`duration("1s") == duration("1000ms")`, `{}`, `true`},
	} {
		p := mustCompile(t, c.src)
		g := *p
		g.direct = nil
		env := func() *Env {
			return NewEnv(&Input{Doc: NewValidDoc([]byte(c.rec)), Timestamp: time.UnixMilli(1500)})
		}
		show := func(v any, err error) string {
			if err != nil {
				return "error: " + err.Error()
			}
			if f, ok := v.(float64); ok {
				return fmt.Sprint(f)
			}
			return fmt.Sprintf("%#v", v)
		}
		got, want := show(p.Eval(env())), show(g.Eval(env()))
		if got != want {
			t.Errorf("%s on %s: direct %s, CEL %s", c.src, c.rec, got, want)
		}
		if want != c.want {
			t.Errorf("%s on %s: CEL %s, want %s", c.src, c.rec, want, c.want)
		}
	}
}

// TestDirectConstantOperandConcurrent evaluates one compiled program with
// constant operands (dbinary.rc, held in the shared node) from four
// goroutines at once, as a job's parallel subtasks share a Program: each
// gives the exact count of even ids and of overflow errors of its records
// (run with -race, it also checks that the nodes are only read).
func TestDirectConstantOperandConcurrent(t *testing.T) {
	p := mustCompile(t, `id % 2 == 0 && id * 3 > -9223372036854775807`)
	if p.direct == nil {
		t.Fatal("no direct form")
	}
	type result struct{ even, odd, errs int }
	out := make(chan result, 4)
	for w := range 4 {
		go func() {
			var r result
			for i := range 1000 {
				id := int64(w*1000 + i)
				if i%100 == 0 {
					id = 4611686018427387904 // id * 3 overflows
				}
				b, err := p.EvalBool(NewEnv(&Input{Doc: NewValidDoc([]byte(fmt.Sprintf(`{"id":%d}`, id)))}))
				switch {
				case err != nil:
					r.errs++
				case b:
					r.even++
				default:
					r.odd++
				}
			}
			out <- r
		}()
	}
	for range 4 {
		if r := <-out; r != (result{even: 490, odd: 500, errs: 10}) {
			t.Errorf("got %+v, want 490 even, 500 odd, 10 errors", r)
		}
	}
}

// FuzzDirectArithEqualsCEL fuzzes the JSON text of two integer fields
// (amount, id) under every comparison and arithmetic operator, the two
// fields against each other and each against constants of every kind on
// either side (the right one held as its value, dbinary.rc): the direct
// evaluator's Eval gives CEL's value and error, through a Doc known
// valid and the record's JSON. Its programs are fewer than
// FuzzDirectEqualsCEL's, so it runs thousands of records a second.
func FuzzDirectArithEqualsCEL(f *testing.F) {
	for _, v := range ebreakNumberForms {
		f.Add(v, `3`)
		f.Add(`-9223372036854775808`, v)
	}
	var srcs []string
	for _, op := range []string{"==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%"} {
		srcs = append(srcs, "amount "+op+" id", "bid.price "+op+" amount")
		for _, c := range []string{"0", "1", "-1", "2", "-2", "-9223372036854775808", "9223372036854775807", "0.0", "-0.0", "1.5",
			`"x"`, "true", "null", "1u"} {
			srcs = append(srcs, "amount "+op+" "+c, c+" "+op+" amount")
		}
	}
	var fast, general []*Program
	for _, src := range srcs {
		p, err := Compile(src)
		if err != nil {
			continue // a constant expression CEL's checker refuses (null < null)
		}
		g := *p
		g.direct = nil
		fast, general = append(fast, p), append(general, &g)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		rec := []byte(`{"amount":` + a + `,"id":` + b + `,"bid":{"price":` + b + `}}`)
		inputs := []func() *Input{func() *Input { return &Input{JSON: rec} }}
		if gjson.ValidBytes(rec) {
			inputs = append(inputs, func() *Input { return &Input{Doc: NewValidDoc(rec)} })
		}
		for i := range fast {
			for _, in := range inputs {
				fv, ferr := fast[i].Eval(NewEnv(in()))
				gv, gerr := general[i].Eval(NewEnv(in()))
				if fmt.Sprintf("%#v %v", fv, ferr) != fmt.Sprintf("%#v %v", gv, gerr) {
					t.Fatalf("%s on %s: direct %#v, %v; CEL %#v, %v", fast[i].Source(), rec, fv, ferr, gv, gerr)
				}
			}
		}
	})
}
