package expression

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"cel.dev/cel-go/common/types"
	"github.com/tidwall/gjson"
)

// foldedDoc returns a Doc of b reset by ResetChecked after a read of a
// previous value, so that its check indexes b (as a source's Doc is for a
// chain that reads every record).
func foldedDoc(b []byte) *Doc {
	d := new(Doc)
	d.ResetChecked([]byte(`{"prev":1}`))
	d.Field("prev")
	d.ResetChecked(b)
	return d
}

// FuzzResetCheckedEqualsValid checks ResetChecked against gjson.ValidBytes
// (the source's check before the pass; encoding/json's Valid but for
// nesting deeper than encoding/json's bound of 10000 levels, which gjson
// accepts), with its index pass folded in and not: the same verdict on
// every input; the pass itself never accepts what encoding/json's Valid
// refuses (a value it does not accept goes to gjson, so a lenient pass
// would be hidden by the verdict alone); and a valid value's Doc lists
// exactly the fields index lists and reads each field as a Doc made valid
// and indexed on first read.
func FuzzResetCheckedEqualsValid(f *testing.F) {
	for _, s := range []string{
		`{"event_type":2,"bid":{"auction":1007,"bidder":2001,"price":4617,"channel":"c","url":"u","dateTime":1700000000123,"extra":"cc"}}`,
		`{"id":17,"key":"k000042","shape":"CIRCLE","amount":512,"note":"xx"}`,
		`[1,2.5e3,"x\u00e9",true,false,null]`, ` 1 `, `"\ud800"`, "\"\xff\"", `-0.1E+2`, `{"a":[{}]}`, ` { } `, `{"a":{}}`,
		``, ` `, `{`, `{"a":}`, `{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `-`, `1e`, `"\x"`, "\"a\tb\"", `nul`, `truex`,
		`{} {}`, `{"a" 1}`, `{1:2}`, `"\u12"`, `NaN`, `+1`, `{"a":1}x`, `{"a":1 "b":2}`, `{"a":{"b":1,}}`, `{"a":{"b" 1}}`,
		`{"a":-}`, `{"a":0.}`, `{"a":1.5e}`, `{"a":1e+}`, `{"a":-01}`, `{"a":tru}`, `{"a":[1 2]}`, `{"a":"\u00G0"}`,
		"{\"a\":\"x\x01\"}", "{\"a\x1f\":1}", `{"a\"b":1,"a\u0062":{"c\n":2}}`, `{"a":1e5}`, `{"a":{"b":[1E-2]}}`,
		`{"a":1,"a":{"x":2},"a":3}`, `{"n":` + strings.Repeat("9", 301) + `}`, `{"n":{"m":0.` + strings.Repeat("1", 301) + `}}`,
		`{"d":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`, strings.Repeat(`{"a":`, 80) + `1` + strings.Repeat(`}`, 80),
		`{"d":` + strings.Repeat("[", 70) + strings.Repeat("]", 69) + `}`, "{\"a\":1}\n\t", `{"":""}`, `{"a":null,"b":true,"c":false}`,
		`{"d":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, // gjson: valid; encoding/json: too deep
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := gjson.ValidBytes(b)
		if ok, _ := new(Doc).checkIndex(string(b)); ok && !json.Valid(b) {
			t.Fatalf("the check pass accepts %q, which is not valid JSON", b)
		}
		plain := new(Doc)
		if got := plain.ResetChecked(b); got != want || plain.state != 0 {
			t.Fatalf("ResetChecked(%q) on an unread Doc = %v (state %d), want %v and nothing indexed", b, got, plain.state, want)
		}
		d := new(Doc)
		d.ResetChecked([]byte(`{"prev":1}`))
		d.Field("prev")
		if got := d.ResetChecked(b); got != want {
			t.Fatalf("ResetChecked(%q) folded = %v, want %v", b, got, want)
		}
		if !want {
			return
		}
		if !d.CheckedJSON() {
			t.Fatalf("%q: a checked Doc is not CheckedJSON", b)
		}
		ref := NewValidDoc(b)
		if d.Fieldwise() != ref.Fieldwise() {
			t.Fatalf("%q: Fieldwise %v, want %v", b, d.Fieldwise(), ref.Fieldwise())
		}
		if !ref.Fieldwise() {
			if !reflect.DeepEqual(d.Whole(), ref.Whole()) {
				t.Fatalf("%q: Whole %#v, want %#v", b, d.Whole(), ref.Whole())
			}
			return
		}
		if !reflect.DeepEqual(d.fields, ref.fields) || !reflect.DeepEqual(d.sub, ref.sub) {
			t.Fatalf("%q: fields %+v / %+v, want index's %+v / %+v", b, d.fields, d.sub, ref.fields, ref.sub)
		}
		for _, f := range ref.fields {
			gv, gf, gok := d.Field(f.name)
			wv, wf, wok := ref.Field(f.name)
			if gf != wf || gok != wok || !reflect.DeepEqual(plainValue(gv), plainValue(wv)) {
				t.Fatalf("%q: Field(%q) = %#v, %v, %v; want %#v, %v, %v", b, f.name, gv, gf, gok, wv, wf, wok)
			}
		}
	})
}

// plainValue is v with a docObject replaced by its decoded object.
func plainValue(v any) any {
	if o, ok := v.(*docObject); ok {
		w, err := o.decoded()
		if err != nil {
			return err.Error()
		}
		return w
	}
	return v
}

// TestResetCheckedIndexesAfterARead: a Doc whose previous value was read
// indexes the next one in ResetChecked's check (the source reads the
// record once: state 1 right after it, so the first field read does not
// scan the JSON again); one whose value nobody read only checks (a copy
// job's source indexes nothing); an invalid value is refused either way,
// and a valid value the pass cannot follow (nesting deeper than
// checkDepth) is accepted by gjson and indexed on first read.
func TestResetCheckedIndexesAfterARead(t *testing.T) {
	d := new(Doc)
	rec := []byte(`{"event_type":2,"bid":{"price":7}}`)
	if !d.ResetChecked(rec) || d.state != 0 {
		t.Fatalf("first value: state %d, want checked and not indexed", d.state)
	}
	if !d.ResetChecked(rec) || d.state != 0 {
		t.Fatalf("after an unread value: state %d, want checked and not indexed", d.state)
	}
	if v, _, _ := d.Field("event_type"); v == nil {
		t.Fatal("no event_type")
	}
	if !d.ResetChecked(rec) || d.state != 1 || len(d.fields) != 2 || len(d.sub) != 1 {
		t.Fatalf("after a read value: state %d, fields %+v, sub %+v; want indexed in the check", d.state, d.fields, d.sub)
	}
	d.Field("bid")
	for _, bad := range []string{`{"event_type":2,"bid":{"price":}}`, `{"a":1}}`, "{\"a\":\"\x00\"}"} {
		if d.ResetChecked([]byte(bad)) {
			t.Fatalf("ResetChecked(%q) = true, want false", bad)
		}
		d.read = true // as if read: the next check folds too
	}
	deep := []byte(`{"a":` + strings.Repeat("[", checkDepth+5) + strings.Repeat("]", checkDepth+5) + `,"b":2}`)
	if !d.ResetChecked(deep) || d.state != 0 {
		t.Fatalf("deep value: state %d, want valid by gjson and not indexed", d.state)
	}
	if v, found, ok := d.Field("b"); !found || !ok || v == nil {
		t.Fatalf("deep value's b: %v %v %v", v, found, ok)
	}
}

// BenchmarkResetChecked measures a source's check of one record folded
// into the Doc's index pass (ResetChecked after a read): a Nexmark bid
// event and the bench's flat item.
func BenchmarkResetChecked(b *testing.B) {
	for _, bc := range []struct{ name, v string }{
		{"nexmark-bid", `{"event_type":2,"person":null,"auction":null,"bid":{"auction":1007,"bidder":2001,"price":4617,"channel":"channel-5901","url":"https://www.nexmark.com/aaaa/bbbb/item.htm?query=1&channel_id=1153433600","dateTime":1700000000123,"extra":"ccccccccccccccccccccc"}}`},
		{"item", `{"id":123456,"key":"k000042","shape":"CIRCLE","amount":317,"note":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			v := []byte(bc.v)
			d := new(Doc)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				d.look() // the chain read the previous value: the check indexes
				if !d.ResetChecked(v) {
					b.Fatal("invalid")
				}
			}
		})
	}
}

// TestCheckerKeyEqualsMemberKey checks that the check pass's one-scan key
// read gives what str and memberKey gave in two scans: the same end, the
// same key and the same refusal, for plain, escaped, non-ASCII and
// invalid keys.
func TestCheckerKeyEqualsMemberKey(t *testing.T) {
	for _, lit := range []string{
		`"a"`, `""`, `"event_type"`, `"a\"b"`, `"a\u0062"`, `"\u00e9t\u00e9"`, "\"\xc3\xa9t\xc3\xa9\"", "\"\xff\"",
		`"\ud800"`, `"a\/b"`, `"a\\"`, `"\n"`, "\"a\tb\"", "\"a\x1fb\"", `"a\x"`, `"a\u12"`, `"abc`, `"a\`, `"`, `"a"bc"`,
	} {
		var c checker
		end, key, ok := c.key(lit, 0)
		wantEnd := (&checker{}).str(lit, 0)
		if end != wantEnd {
			t.Errorf("key(%q) ends at %d, str at %d", lit, end, wantEnd)
		}
		if wantEnd < 0 {
			if ok {
				t.Errorf("key(%q) = %q, ok; want a refusal (not a string literal)", lit, key)
			}
			continue
		}
		want, err := memberKey(lit[:wantEnd])
		if ok != (err == nil) || key != want {
			t.Errorf("key(%q) = %q, %v; memberKey = %q, %v", lit, key, ok, want, err)
		}
	}
}

// TestResetCheckedValuesOutliveTheBytes checks that what a reader keeps of
// a record read through ResetChecked's pass, which reads the bytes in
// place (Doc.lent), stays whole after the bytes change and the Doc moves
// on: a field's string, an object field and its members' names and
// values, a direct expression's string result, a Clone. A source's bytes
// are not reused, but nothing may tie a kept value to them.
func TestResetCheckedValuesOutliveTheBytes(t *testing.T) {
	const rec = `{"name":"alice","n":7,"bid":{"channel":"ch-1","extra":"xyz","p\u0072ice":5},"tag":"t"}`
	b := []byte(rec)
	d := foldedDoc(b)
	prog, err := Compile(`bid.extra`)
	if err != nil {
		t.Fatal(err)
	}
	var env Env
	env.Reset(&Input{Doc: d})
	extra, err := prog.Eval(&env) // first: no Field read made the Doc own its bytes yet
	if err != nil {
		t.Fatal(err)
	}
	name, _, _ := d.Field("name")
	bid, _, _ := d.Field("bid")
	c := foldedDoc(b).Clone()
	for i := range b {
		b[i] = 'X' // the bytes change, then the Doc reads another record
	}
	d.ResetChecked([]byte(`{"name":"bob","bid":{"channel":"zz","extra":"qqq"}}`))
	d.Field("name")
	if name != types.String("alice") {
		t.Errorf("Field(name) kept = %v, want alice", name)
	}
	if extra != "xyz" {
		t.Errorf("Eval(bid.extra) kept = %v, want xyz", extra)
	}
	o, ok := bid.(*docObject)
	if !ok {
		t.Fatalf("Field(bid) = %T, want *docObject", bid)
	}
	got, err := o.decoded()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"channel": "ch-1", "extra": "xyz", "price": int64(5)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Field(bid) kept decodes to %#v, want %#v", got, want)
	}
	if v := o.scalarField("channel"); v.s != "ch-1" {
		t.Errorf("bid.channel kept = %q, want ch-1", v.s)
	}
	for _, f := range o.fields {
		if f.name != "channel" && f.name != "extra" && f.name != "price" {
			t.Errorf("bid kept a member named %q", f.name)
		}
	}
	if v, _, _ := c.Field("tag"); v != types.String("t") {
		t.Errorf("Clone's Field(tag) = %v, want t", v)
	}
}

// strEndBytewise is strEnd read one byte at a time (as before it read
// eight at a time): the reference TestStrEndEqualsBytewise checks it
// against.
func strEndBytewise(s string, i int) (end int, plain bool) {
	var high byte
	plain = true
	for ; i < len(s); i++ {
		b := s[i]
		switch strByte[b] {
		case strPlain:
			high |= b
			continue
		case strQuote:
			return i + 1, plain && high < 0x80
		case strBad:
			return -1, false
		}
		plain = false
		if i++; i >= len(s) {
			return -1, false
		}
		switch s[i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		case 'u':
			if len(s)-i < 5 || !isHex(s[i+1]) || !isHex(s[i+2]) || !isHex(s[i+3]) || !isHex(s[i+4]) {
				return -1, false
			}
			i += 4
		default:
			return -1, false
		}
	}
	return -1, false
}

// TestStrEndEqualsBytewise checks strEnd's eight-bytes-at-a-time scan
// against the bytewise one: every content of lengths 0 to 40 made of
// plain ASCII with one or two bytes of every class (a quote, a
// backslash and what follows it, a control byte, 0x1f and 0x20 at the
// class's edge, 0x7f, 0x80 and 0xff) at every position, with and without
// a closing quote, and 20,000 random strings over those bytes; the same
// end and the same plain.
func TestStrEndEqualsBytewise(t *testing.T) {
	specials := []byte{'"', '\\', 0x00, 0x1f, 0x20, '!', '#', '[', ']', 0x7f, 0x80, 0xc3, 0xff, 'u', 'n', '/'}
	check := func(s string) {
		t.Helper()
		for _, i := range []int{0, 1} {
			if i > len(s) {
				continue
			}
			end, plain := strEnd(s, i)
			wantEnd, wantPlain := strEndBytewise(s, i)
			if end != wantEnd || plain != wantPlain {
				t.Fatalf("strEnd(%q, %d) = %d, %v; bytewise %d, %v", s, i, end, plain, wantEnd, wantPlain)
			}
		}
	}
	n := 0
	for length := 0; length <= 40; length++ {
		base := []byte(strings.Repeat("abcdefgh", 6)[:length])
		for _, tail := range []string{`"`, `"xyz`, ""} {
			check(string(base) + tail)
			for p := 0; p < length; p++ {
				for _, c := range specials {
					b := append([]byte(nil), base...)
					b[p] = c
					check(string(b) + tail)
					for _, c2 := range []byte{'"', '\\', 0x01, 0x80} {
						for q := p + 1; q < length && q < p+10; q++ {
							b2 := append([]byte(nil), b...)
							b2[q] = c2
							check(string(b2) + tail)
							n++
						}
					}
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := append([]byte("abc0u\\\"/nt"), specials...)
	for range 20000 {
		b := make([]byte, r.IntN(50))
		for j := range b {
			b[j] = alphabet[r.IntN(len(alphabet))]
		}
		check(string(b))
	}
	if n < 10000 {
		t.Fatalf("only %d two-byte cases", n)
	}
}
