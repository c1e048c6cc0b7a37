package srformat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/avro"
)

// wideSchema covers every type and logical type the direct codec handles.
const wideSchema = `{"type":"record","name":"W","namespace":"t","fields":[
 {"name":"n","type":"null"},
 {"name":"b","type":"boolean"},
 {"name":"i","type":"int"},
 {"name":"l","type":"long"},
 {"name":"f","type":"float"},
 {"name":"d","type":"double"},
 {"name":"s","type":"string"},
 {"name":"by","type":"bytes"},
 {"name":"fx","type":{"type":"fixed","name":"F3","size":3}},
 {"name":"e","type":{"type":"enum","name":"E","symbols":["A","B","C"]}},
 {"name":"a","type":{"type":"array","items":{"type":"record","name":"Item","fields":[{"name":"k","type":"string"},{"name":"q","type":["null","int"]}]}}},
 {"name":"m","type":{"type":"map","values":"long"}},
 {"name":"u","type":["null","string","long","t.Item",{"type":"array","items":"double"}]},
 {"name":"date","type":{"type":"int","logicalType":"date"}},
 {"name":"tms","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"tus","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"tm","type":{"type":"int","logicalType":"time-millis"}},
 {"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":30,"scale":4}},
 {"name":"decf","type":{"type":"fixed","name":"D8","size":8,"logicalType":"decimal","precision":18,"scale":2}},
 {"name":"uu","type":{"type":"string","logicalType":"uuid"}},
 {"name":"opt","type":["null",{"type":"long","logicalType":"timestamp-millis"}],"default":null}]}`

// randAvro returns a random Go value twmb/avro encodes as n.
func randAvro(r *rand.Rand, n *avro.SchemaNode) any {
	switch n.Type {
	case "null":
		return nil
	case "boolean":
		return r.IntN(2) == 1
	case "int":
		switch n.LogicalType {
		case "date":
			return time.Unix(int64(r.IntN(40000)-20000)*86400, 0).UTC()
		case "time-millis":
			return time.Duration(r.IntN(86400000)) * time.Millisecond
		}
		return int32(r.Uint32())
	case "long":
		switch n.LogicalType {
		case "timestamp-millis":
			return time.UnixMilli(r.Int64N(1<<42) - 1<<41).UTC()
		case "timestamp-micros":
			return time.UnixMicro(r.Int64N(1<<52) - 1<<51).UTC()
		}
		return int64(r.Uint64())
	case "float":
		return float32(r.NormFloat64() * 1e3)
	case "double":
		return r.NormFloat64() * 1e9
	case "string":
		if n.LogicalType == "uuid" {
			return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint64()&0xffffffffffff)
		}
		runes := []rune("aZ09 \"\\\n\t/é€😀<>&")
		s := make([]rune, r.IntN(8))
		for i := range s {
			s[i] = runes[r.IntN(len(runes))]
		}
		return string(s)
	case "bytes", "fixed":
		if n.LogicalType == "decimal" {
			var ds []byte
			for range 1 + r.IntN(n.Precision) {
				ds = append(ds, byte('0'+r.IntN(10)))
			}
			x, _ := new(big.Int).SetString(string(ds), 10)
			if r.IntN(2) == 0 {
				x.Neg(x)
			}
			return new(big.Rat).SetFrac(x, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n.Scale)), nil))
		}
		size := r.IntN(6)
		if n.Type == "fixed" {
			size = n.Size
		}
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	case "enum":
		return n.Symbols[r.IntN(len(n.Symbols))]
	case "array":
		a := make([]any, r.IntN(4))
		for i := range a {
			a[i] = randAvro(r, n.Items)
		}
		return a
	case "map":
		m := map[string]any{}
		for i := range r.IntN(4) {
			m[fmt.Sprintf("k%d", i)] = randAvro(r, n.Values)
		}
		return m
	case "record":
		m := map[string]any{}
		for i := range n.Fields {
			m[n.Fields[i].Name] = randAvro(r, &n.Fields[i].Type)
		}
		return m
	case "union":
		b := &n.Branches[r.IntN(len(n.Branches))]
		if b.Type == "null" {
			return nil
		}
		return map[string]any{branchName(b): randAvro(r, b)}
	}
	panic(n.Type)
}

// TestAvroFastMatchesGeneric: on 3,000 random values of wideSchema the
// direct codec decodes to exactly the JSON the generic path (twmb/avro
// into Go values, then converted) gives, and its encoding of that JSON
// decodes back to it; a truncated value fails in both.
func TestAvroFastMatchesGeneric(t *testing.T) {
	c, err := compileAvro(wideSchema, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.fastDec || c.fastEnc == nil {
		t.Fatal("the direct codec is not used for wideSchema")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		v := randAvro(r, c.shape)
		bin, err := c.enc.Encode(v)
		if err != nil {
			t.Fatalf("%d: reference encode: %v", i, err)
		}
		fast, err := c.decode(nil, bin, nil)
		if err != nil {
			t.Fatalf("%d: direct decode: %v", i, err)
		}
		slow, err := c.decodeSlow(nil, bin)
		if err != nil {
			t.Fatalf("%d: generic decode: %v", i, err)
		}
		// the generic path sorts map keys, the direct one keeps the wire order
		if !sameJSON(t, fast, slow) {
			t.Fatalf("%d: direct\n%s\ngeneric\n%s", i, fast, slow)
		}
		back, err := c.encode(nil, fast)
		if err != nil {
			t.Fatalf("%d: direct encode of %s: %v", i, fast, err)
		}
		again, err := c.decodeSlow(nil, back)
		if err != nil || !sameJSON(t, again, fast) {
			t.Fatalf("%d: direct encode round trip\n%s\n%s %v", i, fast, again, err)
		}
		slowBack, err := c.encodeSlow(nil, fast)
		if err != nil {
			t.Fatalf("%d: generic encode of %s: %v", i, fast, err)
		}
		if again, _ := c.decodeSlow(nil, slowBack); !sameJSON(t, again, fast) {
			t.Fatalf("%d: generic encode round trip differs", i)
		}
		if _, err := c.decode(nil, bin[:len(bin)/2], nil); err == nil && len(bin) > 1 {
			// a cut value may still parse as a shorter one only if the rest check catches it
			t.Fatalf("%d: a truncated value decoded", i)
		}
	}
}

// sameJSON reports whether a and b are the same JSON value (numbers
// compared as written).
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	parse := func(x []byte) any {
		d := json.NewDecoder(bytes.NewReader(x))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("%s: %v", x, err)
		}
		return v
	}
	return reflect.DeepEqual(parse(a), parse(b))
}

func TestDecimalBytes(t *testing.T) {
	for _, tc := range []struct {
		s     string
		scale int
		size  int
		want  []byte
	}{
		{"0", 2, -1, []byte{0}},
		{"1.27", 2, -1, []byte{0x7f}},
		{"1.28", 2, -1, []byte{0, 0x80}},
		{"-1.28", 2, -1, []byte{0x80}},
		{"-0.01", 2, -1, []byte{0xff}},
		{"-1.29", 2, -1, []byte{0xff, 0x7f}},
		{"-1", 0, 4, []byte{0xff, 0xff, 0xff, 0xff}},
		{"5", 1, 3, []byte{0, 0, 50}},
	} {
		got, err := decimalBytes(tc.s, tc.scale, tc.size)
		if err != nil || string(got) != string(tc.want) {
			t.Errorf("decimalBytes(%s, %d, %d) = % x %v, want % x", tc.s, tc.scale, tc.size, got, err, tc.want)
		}
		if dec := appendDecimal(nil, got, tc.scale); tc.size < 0 {
			r1, _ := new(big.Rat).SetString(tc.s)
			r2, _ := new(big.Rat).SetString(string(dec[1 : len(dec)-1]))
			if r1.Cmp(r2) != 0 {
				t.Errorf("appendDecimal(% x) = %s, want %s", got, dec, tc.s)
			}
		}
	}
	if _, err := decimalBytes("1.005", 2, -1); err == nil {
		t.Error("a value with more digits than the scale was rounded, not refused")
	}
	if _, err := decimalBytes("100000", 0, 2); err == nil {
		t.Error("a value too large for the fixed size was accepted")
	}
}
