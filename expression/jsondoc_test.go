package expression

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"cel.dev/cel-go/common/types"
	"github.com/tidwall/gjson"
)

// FuzzDocEqualsWholeDecode checks that Envs reading one shared Doc, as the
// operators of a chain do (one Env each, in turn), see exactly what an
// Env of the whole decoded value sees (DecodeJSON's result, or the string
// of the bytes when it fails): the same results and errors for programs
// reading fields (present, missing, repeated, nested, escaped keys), value,
// and both, in every order; a Doc whose JSON the source checked
// (NewValidDoc), a Doc reused for another record before (Reset) and a
// Clone of a Doc one program read already read the same. Numbers (int, float, exponents, beyond
// int64 and float64), unicode, escapes and null are in the seeds.
func FuzzDocEqualsWholeDecode(f *testing.F) {
	for _, s := range []string{
		`{"event_type":2,"bid":{"auction":1000,"bidder":7,"price":46,"url":"https://x/y?channel_id=3","extra":"cc"}}`,
		`{"id":17,"key":"k000042","amount":512,"note":"xx"}`, `{"amount":1,"amount":700}`, `{"amount":"a lot"}`,
		`{"\u0061mount":3,"id":4}`, "{\"am\xffount\":1,\"id\":2}", `{"amount":5,"big":1e400}`, `{"amount":5,"big":1e4}`,
		`{"amount":2.5e1,"id":-0}`, `[{"amount":1}]`, `{"amount":1`, `"amount"`, `null`, ``, `{}`,
		`  {"amount":9223372036854775808,"id":9223372036854775807}`, `{"amount":null,"id":true}`,
		`{"amount":{"x":[1,2.5,"\u00e9\n"]},"id":"日本"}`,
		`{"bid":{"price":46,"price":47,"x":{"y":{"z":1.5}},"\u0070rice2":"p","e":{},"n":null,"l":[{"a":1}]},"id":1}`,
		`{"bid":{"x":{"y":[1,{"z":"\u00e9"}],"y":2},"price":-0,"s":"a\"b"},"amount":{"x":1e400}}`,
		`{"bid":{"price":1e5},"id":2}`, `{"bid":{"price":9223372036854775808,"b":true,"f":false}}`, `{"bid":[1,2],"amount":{}}`,
		`{"bid":"str","amount":{"x":{"x":{"x":{}}}}}`, `{"bid":{"日":"本","price":2.50}}`, "\n\t {\"id\" : 1 , \"amount\":[1, 2] , \"note\": \"n\" }", "{\"amount\":\"\\ud800\",\"id\":\"\xff\"}",
	} {
		f.Add([]byte(s), uint8(0))
	}
	progs := []string{`amount`, `id`, `amount.x`, `has(amount.x) ? amount.x : id`, `value`, `[amount, id, value.id]`,
		`amount < 500`, `{"id": id, "amount": amount}`, `note`, `has(value.id) ? id : 0`}
	progs = append(progs, nestedProgs...)
	compiled := make([]*Program, len(progs))
	for i, src := range progs {
		p, err := Compile(src)
		if err != nil {
			f.Fatal(err)
		}
		compiled[i] = p
	}
	// reused reads another record before each input (Doc.Reset); unread
	// is Reset to a valid record nobody reads, then to the input (Reset's
	// path for an unread Doc, as a source's for a record no operator read).
	var reused, unread Doc
	f.Fuzz(func(t *testing.T, b []byte, order uint8) {
		var whole any
		if v, err := DecodeJSON(b); err == nil {
			whole = v
		} else {
			whole = string(b)
		}
		docs := []*Doc{NewDoc(b)}
		if gjson.ValidBytes(b) {
			docs = append(docs, NewValidDoc(b))
		}
		reused.Reset([]byte(`{"amount":1,"id":2,"note":3,"a":4,"b":5,"c":6,"d":7}`), true)
		if _, err := compiled[5].Eval(NewEnv(&Input{Doc: &reused})); err != nil {
			t.Fatal(err)
		}
		reused.Reset(b, false)
		half := NewDoc(b)
		if _, err := compiled[int(order)%len(compiled)].Eval(NewEnv(&Input{Doc: half})); err != nil && err.Error() == "" {
			t.Fatal(err)
		}
		unread.Reset([]byte(`{"amount":1,"id":2}`), true)
		unread.Reset(b, false)
		docs = append(docs, &reused, half.Clone(), &unread)
		for _, doc := range docs {
			for j := range compiled {
				i := (j + int(order)) % len(compiled)
				p := compiled[i]
				got, gerr := p.Eval(NewEnv(&Input{Doc: doc, JSON: []byte("ignored")}))
				want, werr := p.Eval(NewEnv(&Input{Value: whole}))
				if fmt.Sprint(gerr) != fmt.Sprint(werr) || !reflect.DeepEqual(got, want) {
					t.Fatalf("%s on %q (valid %v, after %d programs): doc %#v, %v; whole %#v, %v", progs[i], b, doc.valid, j, got, gerr, want, werr)
				}
			}
		}
	})
}

// nestedProgs read objects inside the value (a Doc reads them field by
// field, docObject) in every way CEL can: a field, a field of a field, a
// missing one, presence tests, optional selection, an index by a constant
// and by a computed key, the whole object as a value (equality both ways,
// size, in, comprehensions, in a list and a map literal, conversions,
// its type, a string function given it), arithmetic on a field.
var nestedProgs = []string{`bid.price`, `bid.x.y.z`, `bid.missing`, `has(bid.price)`, `has(bid.x.y)`, `has(bid.nope)`,
	`bid.?price.orValue(0)`, `bid.?x.?y.?z`, `bid["price"]`, `bid["pr" + "ice"]`, `bid[id]`, `bid == {"price": 47}`,
	`{"price": 47} == bid`, `bid == bid`, `bid.x == amount`, `size(bid)`, `"price" in bid`, `bid.exists(k, k == "x")`,
	`bid.filter(k, k != "x").size()`, `bid.all(k, has(bid.price))`, `[bid, bid.x]`, `{"b": bid, "p": bid.price, "l": bid.l}`, `dyn(bid)`, `type(bid) == map`, `string(bid)`,
	`bid.price * 908`, `double(bid.price * 908) / 1000.0`, `bid.s + "x"`, `bid.l[0].a`, `bid.e`, `bid.n == null`,
	`amount.x.x`, `bid.price2`, `bid["日"]`, `value.bid.price`, `bid.x.y`, `[bid.x.y, bid.x]`}

// TestDocDecodesOnce: Envs sharing a Doc decode a field once (the second
// Env gets the very map the first decoded) and the whole value once; an
// Env whose Doc was decoded whole starts from that value.
func TestDocDecodesOnce(t *testing.T) {
	doc := NewValidDoc([]byte(`{"event_type":2,"bid":{"auction":5,"extra":"c"},"bid":{"auction":6}}`))
	p, err := Compile(`bid`)
	if err != nil {
		t.Fatal(err)
	}
	e1 := NewEnv(&Input{Doc: doc})
	v1, err := p.Eval(e1)
	if err != nil || !reflect.DeepEqual(v1, map[string]any{"auction": int64(6)}) {
		t.Fatalf("bid = %#v, %v; want the last bid", v1, err)
	}
	if e1.Doc() != doc {
		t.Error("Env.Doc is not the Doc it was given")
	}
	if _, decoded := doc.Decoded(); decoded {
		t.Error("reading a field decoded the whole value")
	}
	v2, err := p.Eval(NewEnv(&Input{Doc: doc}))
	if err != nil || reflect.ValueOf(v2).UnsafePointer() != reflect.ValueOf(v1).UnsafePointer() {
		t.Errorf("a second Env decoded bid again (%p vs %p), %v", v2, v1, err)
	}
	pv, err := Compile(`value.event_type`)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := pv.Eval(NewEnv(&Input{Doc: doc})); err != nil || v != int64(2) {
		t.Fatalf("value.event_type = %v, %v", v, err)
	}
	w1, decoded := doc.Decoded()
	if !decoded {
		t.Fatal("reading value left the Doc undecoded")
	}
	e3 := NewEnv(&Input{Doc: doc})
	if w, ok := e3.Decoded(); !ok || reflect.ValueOf(w).UnsafePointer() != reflect.ValueOf(w1).UnsafePointer() {
		t.Errorf("an Env of a decoded Doc: Decoded() = %v, %v; want the Doc's whole value", w, ok)
	}
}

// TestNestedFieldReadsOnlyThatField: bid.price on a Doc reads the bid
// object field by field (a docObject, never decoded whole, only price
// decoded), gives the last of a repeated key, and an expression using
// the whole object (size(bid)) then sees the map DecodeJSON makes of it.
func TestNestedFieldReadsOnlyThatField(t *testing.T) {
	doc := NewValidDoc([]byte(`{"event_type":2,"bid":{"auction":1,"price":46,"extra":"x","price":47}}`))
	if v, err := mustCompile(t, `bid.price * 908`).Eval(NewEnv(&Input{Doc: doc})); err != nil || v != int64(47*908) {
		t.Fatalf("bid.price * 908 = %#v, %v; want %d", v, err, 47*908)
	}
	v, found, ok := doc.field("bid")
	o, isObj := v.(*docObject)
	if !found || !ok || !isObj {
		t.Fatalf("bid in the Doc is %#v (found %v, ok %v), want a *docObject", v, found, ok)
	}
	if o.wholeDone {
		t.Error("bid.price decoded the whole bid object")
	}
	decoded := func() []string {
		var done []string
		for _, f := range o.fields {
			if f.done {
				done = append(done, f.name)
			}
		}
		return done
	}
	// The direct evaluator reads price from the JSON as it is, keeping
	// nothing decoded (Doc.scalarField); CEL's interpreter decodes it.
	if done := decoded(); len(done) != 0 {
		t.Errorf("decoded fields of bid after the direct evaluator: %v, want none", done)
	}
	general := *mustCompile(t, `bid.price * 908`)
	general.direct = nil
	if v, err := general.Eval(NewEnv(&Input{Doc: doc})); err != nil || v != int64(47*908) {
		t.Fatalf("bid.price * 908 through CEL = %#v, %v; want %d", v, err, 47*908)
	}
	if done := decoded(); !reflect.DeepEqual(done, []string{"price"}) {
		t.Errorf("decoded fields of bid: %v, want [price] (the last one)", done)
	}
	if v, err := mustCompile(t, `size(bid) == 3 && bid == {"auction": 1, "price": 47, "extra": "x"}`).Eval(NewEnv(&Input{Doc: doc})); err != nil || v != true {
		t.Fatalf("whole bid: %#v, %v; want true", v, err)
	}
}

// FuzzMembersEqualsGJSON checks the object scanner a Doc indexes with
// (members) against gjson's ForEach, which it replaced: on every valid
// JSON object, nested or not, the same keys and raw values in the same
// order (white space, escapes in strings and keys, nested arrays and
// objects holding brackets in strings); on anything else it reads no
// member past what it refuses, and does not panic.
func FuzzMembersEqualsGJSON(f *testing.F) {
	for _, s := range []string{`{}`, ` { "a" : 1 , "b":[1,{"c":"]}"}], "\"k\\"":"v\\\"}" ,"d":{"e":[]}, "t":true,"n":null,"x":-1.5e3}`,
		`{"a":"\u00e9","a":2}`, "{\"a\"\t:\n\"b\"\r}", `[1]`, `{"a":`, `"s"`, `{"a":{"b":{"c":{}}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := string(b)
		type member struct{ key, val string }
		var got []member
		ok := members(s, 0, func(k string, from, to int) bool {
			got = append(got, member{k, s[from:to]})
			return true
		})
		r := gjson.Parse(s)
		if !gjson.Valid(s) || !r.IsObject() {
			return
		}
		var want []member
		r.ForEach(func(k, v gjson.Result) bool {
			want = append(want, member{k.Raw, v.Raw})
			return true
		})
		if !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("members(%q) = %q, %v; gjson %q", s, got, ok, want)
		}
	})
}

// TestPlainIntAsNumber: plainInt reads exactly the integers number reads as
// int64 (and refuses the rest, which number then reads), at the edges of
// its 18 digits and of int64.
func TestPlainIntAsNumber(t *testing.T) {
	for _, s := range []string{"0", "-0", "7", "-7", "255", "256", "123456789012345678", "-123456789012345678",
		"999999999999999999", "-999999999999999999", "1234567890123456789", "9223372036854775807", "-9223372036854775808",
		"9223372036854775808", "1.5", "1e3", "-", "", "12a", "1.0", "-1E2"} {
		n, ok := plainInt(s)
		v, err := number(s)
		i, isInt := v.(int64)
		if ok && (err != nil || !isInt || i != n) {
			t.Errorf("plainInt(%q) = %d, number gives %v, %v", s, n, v, err)
		}
		if !ok && len(s) <= 18 && isInt && s != "" && s != "-" {
			t.Errorf("plainInt(%q) refused an integer number reads as %d", s, i)
		}
	}
}

// TestDocFieldwiseSafeNumbers: a Doc reads its fields one by one
// (Fieldwise) exactly when its value is an object holding no unsafe
// number (one with an exponent or of more than 300 bytes, at any depth:
// safeNumber), checked against every number gjson finds walking the whole
// value, on random nested objects and on edge cases. Strings that look
// like numbers ("1e5") no longer send a record to the whole decode.
func TestDocFieldwiseSafeNumbers(t *testing.T) {
	var safe func(r gjson.Result) bool
	safe = func(r gjson.Result) bool {
		switch {
		case r.Type == gjson.Number:
			for _, run := range strings.FieldsFunc(r.Raw, func(c rune) bool { return c < '0' || c > '9' }) {
				if len(run) > 300 {
					return false
				}
			}
			return !strings.ContainsAny(r.Raw, "eE")
		case r.IsObject(), r.IsArray():
			ok := true
			r.ForEach(func(_, v gjson.Result) bool { ok = ok && safe(v); return ok })
			return ok
		}
		return true
	}
	ref := func(b []byte) bool { r := gjson.ParseBytes(b); return r.IsObject() && safe(r) }
	rng := rand.New(rand.NewPCG(3, 4))
	scalars := []string{`1`, `-0`, `2.5`, `1e5`, `1.5E5`, `2E-3`, `true`, `false`, `null`, `"1e5"`, `"e"`, `"x\"1e5"`,
		strings.Repeat("7", 300), strings.Repeat("7", 301), "1." + strings.Repeat("5", 299), `"日本"`, "-" + strings.Repeat("7", 301) + ".5"}
	var value func(depth int) string
	value = func(depth int) string {
		switch n := rng.IntN(6); {
		case n == 0 && depth < 3:
			var parts []string
			for i := range rng.IntN(4) {
				parts = append(parts, fmt.Sprintf(`"k%d":%s`, i%3, value(depth+1)))
			}
			return "{" + strings.Join(parts, ",") + "}"
		case n == 1 && depth < 3:
			var parts []string
			for range rng.IntN(4) {
				parts = append(parts, value(depth+1))
			}
			return "[" + strings.Join(parts, ", ") + "]"
		}
		return scalars[rng.IntN(len(scalars))]
	}
	for range 20000 {
		b := []byte(value(0))
		if !gjson.ValidBytes(b) {
			t.Fatalf("generated invalid JSON %q", b)
		}
		if got, want := NewValidDoc(b).Fieldwise(), ref(b); got != want {
			t.Fatalf("Fieldwise(%s) = %v, want %v", b, got, want)
		}
	}
	for s, want := range map[string]bool{
		`{"a":"1e5"}`: true, `{"a":{"b":"2E3","c":[true,false,"1.e"]}}`: true, `{"a":1e5}`: false,
		`{"a":{"b":[1,{"c":1.5E5}]}}`: false, `{"a":{"b":1e5}}`: false, `{"e":"E"}`: true, ` {"a":[1.5, -2]} `: true,
		`{"n":` + strings.Repeat("7", 300) + `}`: true, `{"n":{"m":[` + strings.Repeat("7", 301) + `]}}`: false,
		`[1]`: false, `"s"`: false,
	} {
		if got := NewValidDoc([]byte(s)).Fieldwise(); got != want {
			t.Errorf("Fieldwise(%s) = %v, want %v", s, got, want)
		}
	}
}

// TestDocNestedIndexKeptAfterReset: the object value of a top-level field
// is indexed with the Doc (Doc.sub); the docObject handed out for it keeps
// its own copy of those fields, so that it reads the same after the Doc
// is Reset to another record (the values a Doc returns may outlive it).
func TestDocNestedIndexKeptAfterReset(t *testing.T) {
	d := NewValidDoc([]byte(`{"event_type":2,"bid":{"auction":1000,"price":46,"url":"u1","x":{"y":1}},"z":{}}`))
	v, found, ok := d.Field("bid")
	if !found || !ok {
		t.Fatalf("bid: found %v, ok %v", found, ok)
	}
	o := v.(*docObject)
	if !o.indexed || len(o.fields) != 4 {
		t.Fatalf("bid indexed %v with %d fields, want 4 indexed with the Doc", o.indexed, len(o.fields))
	}
	d.Reset([]byte(`{"event_type":2,"bid":{"auction":7,"price":8,"url":"u2"},"w":{"q":1,"r":2,"s":3}}`), true)
	if _, _, ok := d.Field("w"); !ok {
		t.Fatal("w not read")
	}
	for name, want := range map[string]any{"auction": types.Int(1000), "price": types.Int(46), "url": types.String("u1")} {
		if got, found := o.FindStringKey(name); !found || got != want {
			t.Errorf("old bid.%s = %v (found %v), want %v", name, got, found, want)
		}
	}
	if got, _, _ := d.Field("bid"); got.(*docObject).scalarField("price").i != 8 {
		t.Errorf("new bid.price = %v, want 8", got.(*docObject).scalarField("price"))
	}
}

// TestDocFieldPlainString: a string field of plain ASCII without escapes
// is marked plain on its first read and read again as its JSON's bytes
// (and written to JSON as they are: dval.plain); one with escapes or
// non-ASCII bytes is decoded on every read; all read the same as
// jsonString each time.
func TestDocFieldPlainString(t *testing.T) {
	d := NewValidDoc([]byte(`{"a":"x\ny","b":"plain","c":"日本","bid":{"u":"https://x/y","e":"\u00e9"}}`))
	for range 2 {
		for name, want := range map[string]string{"a": "x\ny", "b": "plain", "c": "日本"} {
			v, found, ok := d.scalarField(name)
			if !found || !ok || v.k != dString || v.s != want {
				t.Fatalf("%s: %+v found %v ok %v, want %q", name, v, found, ok, want)
			}
		}
		o, _, _ := d.Field("bid")
		for name, want := range map[string]string{"u": "https://x/y", "e": "é"} {
			if v := o.(*docObject).scalarField(name); v.k != dString || v.s != want {
				t.Fatalf("bid.%s: %+v, want %q", name, v, want)
			}
		}
	}
	plain := map[string]bool{}
	for _, f := range d.fields {
		plain[f.name] = f.plain
	}
	if plain["a"] || !plain["b"] || plain["c"] {
		t.Errorf("plain marks %v, want b only", plain)
	}
	o, _, _ := d.Field("bid")
	if f := o.(*docObject).fields; !f[0].plain || f[1].plain {
		t.Errorf("bid plain marks u %v e %v, want u only", f[0].plain, f[1].plain)
	}
}
