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
