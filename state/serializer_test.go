package state

import (
	"bytes"
	"math"
	"slices"
	"testing"
)

func roundTrip[T any](t *testing.T, s Serializer[T], v T, eq func(a, b T) bool) {
	t.Helper()
	b, err := s.Append([]byte("prefix"), v)
	if err != nil {
		t.Fatalf("%s: Append(%v): %v", s.Name(), v, err)
	}
	if !bytes.HasPrefix(b, []byte("prefix")) {
		t.Fatalf("%s: Append dropped dst", s.Name())
	}
	got, err := s.Decode(b[len("prefix"):])
	if err != nil || !eq(got, v) {
		t.Fatalf("%s: round trip of %v = %v, %v", s.Name(), v, got, err)
	}
}

type jsonThing struct {
	A string         `json:"a"`
	B []int          `json:"b"`
	C map[string]int `json:"c"`
}

func TestSerializers(t *testing.T) {
	for _, v := range []int64{0, 1, -1, math.MinInt64, math.MaxInt64} {
		roundTrip(t, Serializer[int64](Int64Serializer{}), v, func(a, b int64) bool { return a == b })
	}
	for _, v := range []float64{0, -0.5, math.Inf(1), math.MaxFloat64, math.SmallestNonzeroFloat64} {
		roundTrip(t, Serializer[float64](Float64Serializer{}), v, func(a, b float64) bool { return a == b })
	}
	for _, v := range []string{"", "x", "héllo\x00"} {
		roundTrip(t, Serializer[string](StringSerializer{}), v, func(a, b string) bool { return a == b })
	}
	for _, v := range [][]byte{{}, {0}, []byte("abc")} {
		roundTrip(t, Serializer[[]byte](BytesSerializer{}), v, bytes.Equal)
	}
	roundTrip(t, Serializer[jsonThing](JSONSerializer[jsonThing]{}), jsonThing{A: "a", B: []int{1, 2}, C: map[string]int{"x": 1}},
		func(a, b jsonThing) bool { return a.A == b.A && slices.Equal(a.B, b.B) && a.C["x"] == b.C["x"] })

	// Int64 byte order is numeric order.
	vals := []int64{math.MinInt64, -5, -1, 0, 1, 7, math.MaxInt64}
	for i := 1; i < len(vals); i++ {
		a, _ := Int64Serializer{}.Append(nil, vals[i-1])
		b, _ := Int64Serializer{}.Append(nil, vals[i])
		if bytes.Compare(a, b) >= 0 {
			t.Fatalf("encoding of %d does not sort before %d", vals[i-1], vals[i])
		}
	}
	// Bad lengths are errors.
	if _, err := (Int64Serializer{}).Decode([]byte{1}); err == nil {
		t.Fatal("int64 of 1 byte decoded")
	}
	if _, err := (Float64Serializer{}).Decode(nil); err == nil {
		t.Fatal("float64 of 0 bytes decoded")
	}
	if _, err := (JSONSerializer[jsonThing]{}).Decode([]byte("{")); err == nil {
		t.Fatal("bad json decoded")
	}
	if _, err := (JSONSerializer[func()]{}).Append(nil, func() {}); err == nil {
		t.Fatal("func encoded as json")
	}
}

func TestKeyLayout(t *testing.T) {
	k := stateKey{id: 0x01020304, kg: 0x7fff, key: []byte("key")}
	b := append(appendStateKey(nil, k), "uk"...)
	want := []byte{0x7f, 0xff, 1, 2, 3, 4, 3, 'k', 'e', 'y', 'u', 'k'}
	if !bytes.Equal(b, want) {
		t.Fatalf("state key = %x, want %x", b, want)
	}
	got, uk, err := parseStateKey(b)
	if err != nil || got.id != k.id || got.kg != k.kg || string(got.key) != "key" || string(uk) != "uk" {
		t.Fatalf("parse = %+v, %q, %v", got, uk, err)
	}
	for _, bad := range [][]byte{nil, {0, 0, 0, 0, 0}, {0xff, 's', 0, 0, 0, 0}, {0, 0, 0, 0, 0, 1, 5, 'a'}} {
		if _, _, err := parseStateKey(bad); err == nil {
			t.Errorf("parseStateKey(%x) succeeded", bad)
		}
	}
	ends := []struct{ p, want []byte }{
		{[]byte{1, 2}, []byte{1, 3}},
		{[]byte{1, 0xff}, []byte{2}},
		{[]byte{0xff, 0xff}, nil},
	}
	for _, e := range ends {
		if got := prefixEnd(e.p); !bytes.Equal(got, e.want) {
			t.Errorf("prefixEnd(%x) = %x, want %x", e.p, got, e.want)
		}
	}
	// A key is never a prefix of another key's state key.
	a := appendStateKey(nil, stateKey{id: 1, kg: 0, key: []byte("ab")})
	c := appendStateKey(nil, stateKey{id: 1, kg: 0, key: []byte("abc")})
	if bytes.HasPrefix(c, a) {
		t.Fatal("state key of \"ab\" is a prefix of that of \"abc\"")
	}
}

func FuzzListElements(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 'a', 0})
	f.Add([]byte{5, 'a'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		var elems [][]byte
		if err := forEachElement(b, func(e []byte) error { elems = append(elems, e); return nil }); err != nil {
			return
		}
		// Length prefixes may be non-canonical varints; the elements must
		// survive a canonical re-encoding.
		var re []byte
		for _, e := range elems {
			re = appendLen(re, e)
		}
		var again [][]byte
		if err := forEachElement(re, func(e []byte) error { again = append(again, e); return nil }); err != nil {
			t.Fatalf("re-encoding of %x does not decode: %v", b, err)
		}
		if !slices.EqualFunc(elems, again, bytes.Equal) {
			t.Fatalf("elements of %x changed on re-encoding: %q, %q", b, elems, again)
		}
	})
}

func appendLen(dst, e []byte) []byte {
	var tmp [10]byte
	n := putUvarint(tmp[:], uint64(len(e)))
	return append(append(dst, tmp[:n]...), e...)
}

func putUvarint(buf []byte, x uint64) int {
	i := 0
	for x >= 0x80 {
		buf[i] = byte(x) | 0x80
		x >>= 7
		i++
	}
	buf[i] = byte(x)
	return i + 1
}

func FuzzSnapshotLoad(f *testing.F) {
	f.Add([]byte("KSSNAP01"))
	f.Add(append([]byte("KSSNAP01"), 0, 0, 0, 0, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &hashmapStore{tables: map[uint32][]hmGroup{}}
		s.kgs.End = 127
		_ = s.load(b) // must not panic
	})
}

func FuzzDecoders(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte(`{"a":"x","b":[1],"c":{"k":2}}`))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = Int64Serializer{}.Decode(b)
		_, _ = Float64Serializer{}.Decode(b)
		_, _ = JSONSerializer[jsonThing]{}.Decode(b)
		_, _, _ = parseStateKey(b)
		_, _, _ = splitTimestamp(b)
	})
}
