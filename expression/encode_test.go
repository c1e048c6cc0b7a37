package expression

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"
)

// valueGen builds a random value of the kinds an evaluation returns from
// fuzz bytes.
type valueGen struct{ b []byte }

func (g *valueGen) byte() byte {
	if len(g.b) == 0 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return c
}

func (g *valueGen) u64() uint64 {
	var x [8]byte
	n := copy(x[:], g.b)
	g.b = g.b[n:]
	return binary.LittleEndian.Uint64(x[:])
}

// str is a string of the next bytes: plain, escapes, control characters,
// unicode, U+2028, invalid UTF-8.
func (g *valueGen) str() string {
	pieces := []string{"a", "id", "\"", "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "<&>", "é", "日本", "\u2028", "\u2029", "\xff", "\xe6\x97", "😀", "\ufffd", "/", " "}
	n := int(g.byte() % 6)
	s := ""
	for range n {
		s += pieces[int(g.byte())%len(pieces)]
	}
	return s
}

func (g *valueGen) value(depth int) any {
	kind := g.byte() % 12
	if depth > 3 && kind >= 9 {
		kind %= 9
	}
	switch kind {
	case 0:
		return nil
	case 1:
		return g.byte()%2 == 0
	case 2:
		ints := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, 1 << 53, 1<<53 + 1, int64(g.u64())}
		return ints[int(g.byte())%len(ints)]
	case 3:
		us := []uint64{0, 7, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64, g.u64()}
		return us[int(g.byte())%len(us)]
	case 4:
		fs := []float64{0, math.Copysign(0, -1), 1, -1.5, 0.1, 1e-6, 1e-7, 9.99e-7, 1e20, 1e21, 123456789e13, 1 << 63, -(1 << 63), 1 << 64,
			4540, 41.768, math.MaxFloat64, math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1), math.Float64frombits(g.u64())}
		return fs[int(g.byte())%len(fs)]
	case 5, 6:
		return g.str()
	case 7:
		return []byte(g.str())
	case 8:
		return time.Duration(g.u64() % 1e12)
	case 9:
		if g.byte()%5 == 0 {
			return []any(nil)
		}
		l := []any{}
		for range int(g.byte() % 4) {
			l = append(l, g.value(depth+1))
		}
		return l
	default:
		if g.byte()%7 == 0 {
			return map[string]any(nil)
		}
		m := map[string]any{}
		for range int(g.byte() % 5) {
			m[g.str()] = g.value(depth + 1)
		}
		return m
	}
}

// FuzzAppendJSONEqualsEncodeJSON checks that AppendJSON and EncodeJSON
// write exactly the bytes encoding/json writes, or fail with its error, for random values
// of every kind an evaluation returns (ints at the int64 limits, uint64,
// floats integral or not, tiny, huge, negative zero, NaN; strings with
// escapes, control characters, unicode, U+2028 and invalid UTF-8; nested,
// empty and nil lists and maps; bytes and durations, which go through
// encoding/json), and that a value it says round-trips is exactly what
// DecodeJSON reads back from those bytes.
func FuzzAppendJSONEqualsEncodeJSON(f *testing.F) {
	for _, s := range []string{"", "\x0a\x05\x03a\x02\x04", "\x0b\x03\x04\x00\x02\x02\x01", "\x09\x03\x04\x12\x04\x0e\x05\x01\x0c"} {
		f.Add([]byte(s))
	}
	for i := range 64 {
		f.Add([]byte{byte(i % 12), byte(i), byte(i * 7), byte(i * 13), 3, 9, 200, 17, 1, 2, 3, 4, 5, 6, 7, 8})
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		g := &valueGen{b: b}
		v := g.value(0)
		want, werr := encodeJSONStd(v)
		got, same, gerr := AppendJSON([]byte("prefix"), v)
		if e, eerr := EncodeJSON(v); !bytes.Equal(e, want) || fmt.Sprint(eerr) != fmt.Sprint(werr) {
			t.Fatalf("%#v: EncodeJSON %s, %v; encoding/json %s, %v", v, e, eerr, want, werr)
		}
		if fmt.Sprint(gerr) != fmt.Sprint(werr) {
			t.Fatalf("%#v: AppendJSON error %v, EncodeJSON error %v", v, gerr, werr)
		}
		if werr != nil {
			if string(got) != "prefix" {
				t.Fatalf("%#v: failed AppendJSON returned %q, want the prefix alone", v, got)
			}
			return
		}
		if !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("%#v: AppendJSON %s, EncodeJSON %s", v, got[len("prefix"):], want)
		}
		back, err := DecodeJSON(want)
		if err != nil {
			t.Fatalf("%s does not decode: %v", want, err)
		}
		if same && !reflect.DeepEqual(back, v) {
			t.Fatalf("%#v said to round-trip, but %s decodes to %#v", v, want, back)
		}
	})
}

// TestAppendJSONRoundTrips: the usual map results round-trip (so map hands
// them on decoded), and each kind that reads back as another does not.
func TestAppendJSONRoundTrips(t *testing.T) {
	for _, c := range []struct {
		v    any
		want bool
	}{
		{map[string]any{"id": int64(7), "key": "k", "amount": 41.768, "tags": []any{"a", nil, true}, "n": map[string]any{}}, true},
		{map[string]any{"price": 4540.0}, false},
		{map[string]any{"x": float64(math.MaxInt64) * 4}, true},
		{uint64(3), false},
		{"\xff", false},
		{[]any(nil), false},
		{map[string]any(nil), false},
		{[]byte("x"), false},
		{"\u2028 ok", true},
	} {
		if _, same, err := AppendJSON(nil, c.v); err != nil || same != c.want {
			t.Errorf("AppendJSON(%#v) round-trips %v, %v; want %v", c.v, same, err, c.want)
		}
	}
}

// FuzzEvalJSONEqualsEval checks that EvalJSON, which writes a map
// literal's result from CEL's values directly, appends exactly what
// AppendJSON writes of Eval's result, with the same errors, and leaves dst
// as it was on an error: for map literals of every kind of value (fields,
// nested objects and arrays of the record, nested literals, lists,
// doubles integral or not and NaN, uint, bytes, timestamps, durations,
// strings with escapes and invalid UTF-8, null, optional values, a
// non-string key, more than 16 keys, unsorted keys, a missing field), and
// for results that are not map literals, over records fuzzed as bytes.
// With the direct path off (the general path alone) it returns Eval's
// result and AppendJSON's roundTrips.
func FuzzEvalJSONEqualsEval(f *testing.F) {
	for _, s := range []string{
		`{"id":17,"key":"k\u00e9","amount":512.5,"note":"a\"b\u2028","bid":{"price":46,"x":[1,{"y":2}],"s":"\ud800"},"l":[1,2.0,null]}`,
		`{"id":-0,"key":null,"amount":1e300,"note":"","bid":{},"l":[]}`, `{"id":9223372036854775807,"amount":3}`,
		`{"amount":{"a":1},"id":[1],"note":true}`, `[1]`, `"s"`, `{"bid":{"price":1e400}}`, "{\"note\":\"\xff\",\"id\":1}",
	} {
		f.Add([]byte(s))
	}
	progs := []string{
		`{"id": id, "key": key, "amount": amount}`, `{"z": id, "a": note, "m": amount}`, `{"b": bid, "l": l, "p": bid.price}`,
		`{"n": {"x": id, "y": [note, amount]}, "e": {}}`, `{"d": double(id) / 3.0, "i": double(id), "z": 0.0 / 0.0}`,
		`{"u": uint(1), "f": 1e-7, "g": 1e21, "h": -0.0}`, `{"b": b"xy"}`, `{"t": timestamp(0)}`, `{"d": duration("1s")}`,
		`{"s": "a\u2028b\x01", "n": null, "v": value}`, `{"o": optional.of(1), "p": optional.none()}`, `{1: id}`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":id}`,
		`{"m": missing}`, `{"p": double(bid.price * 908) / 1000.0, "x": bid.x}`, `value`, `[id, {"a": note}]`, `id`,
		`{"nested": {"deep": {"deeper": bid}}}`, `{"ts": timestamp}`, `{"x": {id: note}}`, `{"x": [b"a"]}`,
	}
	compiled := make([]*Program, len(progs))
	for i, src := range progs {
		compiled[i] = mustCompile(f, src)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for i, p := range compiled {
			env := NewEnv(&Input{JSON: b, Key: []byte("k"), Timestamp: time.UnixMilli(1500)})
			got, _, _, gerr := p.EvalJSON([]byte("prefix"), env)
			v, verr := p.Eval(env)
			want, wsame, werr := []byte("prefix"), false, verr
			if verr == nil {
				want, wsame, werr = AppendJSON([]byte("prefix"), v)
			}
			if fmt.Sprint(gerr) != fmt.Sprint(werr) || !bytes.Equal(got, want) {
				t.Fatalf("%s on %q: EvalJSON %q, %v; AppendJSON(Eval) %q, %v", progs[i], b, got, gerr, want, werr)
			}
			general := *p
			general.fastJSON = false
			got2, v2, same2, gerr2 := general.EvalJSON([]byte("prefix"), NewEnv(&Input{JSON: b, Key: []byte("k"), Timestamp: time.UnixMilli(1500)}))
			if fmt.Sprint(gerr2) != fmt.Sprint(werr) || !bytes.Equal(got2, want) || fmt.Sprintf("%#v", v2) != fmt.Sprintf("%#v", v) || same2 != wsame { // (NaN is not DeepEqual to itself)
				t.Fatalf("%s on %q, general path: %q, %#v, %v, %v; want %q, %#v, %v, %v", progs[i], b, got2, v2, same2, gerr2, want, v, wsame, werr)
			}
		}
	})
}
