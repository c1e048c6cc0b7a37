package expression

import (
	"fmt"
	"reflect"
	"testing"
)

// FuzzFieldwiseEqualsWholeDecode checks that reading fields of an
// undecoded value one by one (Input.JSON: the Env reads each field from
// the JSON alone when it can) gives exactly what evaluating on the whole
// decoded value gives (Input.Value: DecodeJSON's result, or the string of
// the bytes when it fails): the same results and the same errors, for
// programs reading one field, two fields, a field twice, a field after
// value, a nested field of a field (amount.x, has(amount.x)), three fields
// and value in one list, conversions (int, string) and size; the seeds
// run with every go test.
func FuzzFieldwiseEqualsWholeDecode(f *testing.F) {
	for _, s := range []string{
		`{"id":17,"key":"k000042","shape":"CIRCLE","amount":512,"note":"xx"}`,
		`{"amount":1,"amount":700}`, `{"amount":"a lot"}`, `{"a":{"b":[{"c":"d"}]},"a":2}`,
		`{"\u0061mount":3,"id":4}`, "{\"am\xffount\":1,\"id\":2}", `{"amount":5,"big":1e400}`, `{"amount":5,"big":1e4}`,
		`{"amount":5,"n":"1e9999"}`, `{"amount":2.5e1,"id":-0}`, `[{"amount":1}]`, `{"amount":1`, `"amount"`, `null`, ``,
		`  {"amount":9223372036854775808,"id":9223372036854775807}`, `{"id":1}`, `{"amount":null,"id":true}`,
		`{"amount":[1,2,{"x":1e400}]}`, `{"bid":{"price":46,"x":{"y":{"z":1}},"price":7},"id":"price"}`, `{"bid":{"price":1e400}}`, "{\"amount\":\"\\ud800\",\"id\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	progs := []string{`amount.x`, `has(amount.x) ? amount.x : id`, `[amount, id, note, value.id]`, `amount == id`, `int(amount) + 1`, `string(amount)`, `size(note) > 1`, `amount`, `amount < 500`, `{"id": id, "amount": amount}`, `amount + amount`, `value.amount == amount`, `has(value.id) ? id : 0`}
	progs = append(progs, nestedProgs...)
	compiled := make([]*Program, len(progs))
	for i, src := range progs {
		p, err := Compile(src)
		if err != nil {
			f.Fatal(err)
		}
		compiled[i] = p
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var whole any
		if v, err := DecodeJSON(b); err == nil {
			whole = v
		} else {
			whole = string(b)
		}
		for i, p := range compiled {
			lazy := NewEnv(&Input{JSON: b})
			got, gerr := p.Eval(lazy)
			want, werr := p.Eval(NewEnv(&Input{Value: whole}))
			if fmt.Sprint(gerr) != fmt.Sprint(werr) || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s on %q: fieldwise %#v, %v; whole %#v, %v", progs[i], b, got, gerr, want, werr)
			}
			// A second program on the same Env sees the same record.
			got2, gerr2 := compiled[0].Eval(lazy)
			want2, werr2 := compiled[0].Eval(NewEnv(&Input{Value: whole}))
			if fmt.Sprint(gerr2) != fmt.Sprint(werr2) || !reflect.DeepEqual(got2, want2) {
				t.Fatalf("amount after %s on %q: fieldwise %#v, %v; whole %#v, %v", progs[i], b, got2, gerr2, want2, werr2)
			}
		}
	})
}

// TestFieldwiseDecodesOnlyWhatIsRead: an expression reading fields of an
// object reads them from the JSON alone (Env.Decoded reports no whole
// decode), one reading value decodes the whole; a repeated key gives its
// last value either way.
func TestFieldwiseDecodesOnlyWhatIsRead(t *testing.T) {
	p, err := Compile(`amount < 500`)
	if err != nil {
		t.Fatal(err)
	}
	env := NewEnv(&Input{JSON: []byte(`{"amount":700,"note":"x","amount":12}`)})
	if ok, err := p.EvalBool(env); err != nil || !ok {
		t.Fatalf("amount < 500 = %v, %v; want true (the last amount, 12)", ok, err)
	}
	if _, decoded := env.Decoded(); decoded {
		t.Error("reading one field decoded the whole value")
	}
	pv, err := Compile(`value.note`)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := pv.Eval(env); err != nil || v != "x" {
		t.Fatalf("value.note = %v, %v", v, err)
	}
	if v, decoded := env.Decoded(); !decoded || !reflect.DeepEqual(v, map[string]any{"amount": int64(12), "note": "x"}) {
		t.Errorf("after value: Decoded() = %#v, %v; want the whole value", v, decoded)
	}
}

// FuzzSkipString checks skipString's IndexByte path against the byte by
// byte reading on every '"' of the input.
func FuzzSkipString(f *testing.F) {
	for _, s := range []string{`"abc"x`, `"a\"b"`, `"a\\"b"`, `"abc`, `"a\`, `"\\\\"`, `""`, `"`, `"x\"`, `"é\u00e9"":`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i := 0; i < len(s); i++ {
			if s[i] != '"' {
				continue
			}
			if got, want := skipString(s, i), skipStringBytewise(s, i); got != want {
				t.Fatalf("skipString(%q, %d) = %d, byte by byte %d", s, i, got, want)
			}
		}
	})
}
