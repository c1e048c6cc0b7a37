package srformat

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/twmb/avro"
)

// The direct Avro codec: Avro binary straight to the JSON of Avro's shape
// (KindAvro) and back, walking the schema tree without building Go values
// in between (about 4x fewer allocations than decoding into any with
// twmb/avro and converting). It serves values read and written with the
// schema they were written with; a reader schema (schema resolution) and
// recursive schemas go through twmb/avro (avroCodec.decodeSlow). Tests
// check it against that path value by value.

var (
	errShort     = errors.New("unexpected end of the value")
	errBadLength = errors.New("negative or oversized length")
)

// supportsFast reports whether the direct codec handles n: every node is
// a known type (a recursive schema leaves named references in the tree).
func supportsFast(n *avro.SchemaNode) bool {
	switch n.Type {
	case "null", "boolean", "int", "long", "float", "double", "string", "bytes", "fixed", "enum":
		return true
	case "array":
		return supportsFast(n.Items)
	case "map":
		return supportsFast(n.Values)
	case "record", "error":
		for i := range n.Fields {
			if !supportsFast(&n.Fields[i].Type) {
				return false
			}
		}
		return true
	case "union":
		for i := range n.Branches {
			if !supportsFast(&n.Branches[i]) {
				return false
			}
		}
		return true
	}
	return false
}

func readLong(b []byte) (int64, []byte, error) {
	var u uint64
	var shift uint
	for i := 0; i < len(b); i++ {
		c := b[i]
		if shift == 63 && c > 1 {
			return 0, b, errors.New("varint overflows a long")
		}
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return int64(u>>1) ^ -int64(u&1), b[i+1:], nil
		}
		shift += 7
		if shift > 63 {
			return 0, b, errors.New("varint overflows a long")
		}
	}
	return 0, b, errShort
}

func readLen(b []byte) (int, []byte, error) {
	n, b, err := readLong(b)
	if err != nil {
		return 0, b, err
	}
	if n < 0 || n > int64(len(b)) {
		return 0, b, errBadLength
	}
	return int(n), b, nil
}

// fastDecode appends the JSON of the value of n at the start of b and
// returns the rest of b.
func fastDecode(dst, b []byte, n *avro.SchemaNode) ([]byte, []byte, error) {
	switch n.Type {
	case "null":
		return append(dst, "null"...), b, nil
	case "boolean":
		if len(b) < 1 {
			return dst, b, errShort
		}
		switch b[0] {
		case 0:
			return append(dst, "false"...), b[1:], nil
		case 1:
			return append(dst, "true"...), b[1:], nil
		}
		return dst, b, fmt.Errorf("boolean byte %d", b[0])
	case "int", "long":
		v, rest, err := readLong(b)
		if err != nil {
			return dst, b, err
		}
		if n.Type == "int" && (v < math.MinInt32 || v > math.MaxInt32) {
			return dst, b, errors.New("varint overflows an int")
		}
		if n.LogicalType == "date" {
			dst = append(dst, '"')
			dst = time.Unix(v*86400, 0).UTC().AppendFormat(dst, time.DateOnly)
			return append(dst, '"'), rest, nil
		}
		return strconv.AppendInt(dst, v, 10), rest, nil
	case "float":
		if len(b) < 4 {
			return dst, b, errShort
		}
		f := math.Float32frombits(binary.LittleEndian.Uint32(b))
		return appendFloat(dst, float64(f), 32), b[4:], nil
	case "double":
		if len(b) < 8 {
			return dst, b, errShort
		}
		return appendFloat(dst, math.Float64frombits(binary.LittleEndian.Uint64(b)), 64), b[8:], nil
	case "string", "bytes":
		l, rest, err := readLen(b)
		if err != nil {
			return dst, b, err
		}
		v := rest[:l]
		switch {
		case n.Type == "string":
			return appendJSONString(dst, v), rest[l:], nil
		case n.LogicalType == "decimal":
			return appendDecimal(dst, v, n.Scale), rest[l:], nil
		case n.LogicalType == "big-decimal":
			return dst, b, errors.New("big-decimal is decoded by the generic path")
		}
		return appendBase64(dst, v), rest[l:], nil
	case "fixed":
		if len(b) < n.Size {
			return dst, b, errShort
		}
		v := b[:n.Size]
		switch n.LogicalType {
		case "decimal":
			return appendDecimal(dst, v, n.Scale), b[n.Size:], nil
		case "uuid":
			if n.Size == 16 {
				return appendJSONString(dst, uuidString([16]byte(v))), b[n.Size:], nil
			}
		case "duration":
			if n.Size == 12 {
				dst = append(dst, `{"months":`...)
				dst = strconv.AppendUint(dst, uint64(binary.LittleEndian.Uint32(v)), 10)
				dst = append(dst, `,"days":`...)
				dst = strconv.AppendUint(dst, uint64(binary.LittleEndian.Uint32(v[4:])), 10)
				dst = append(dst, `,"milliseconds":`...)
				dst = strconv.AppendUint(dst, uint64(binary.LittleEndian.Uint32(v[8:])), 10)
				return append(dst, '}'), b[12:], nil
			}
		}
		return appendBase64(dst, v), b[n.Size:], nil
	case "enum":
		i, rest, err := readLong(b)
		if err != nil {
			return dst, b, err
		}
		if i < 0 || i >= int64(len(n.Symbols)) {
			return dst, b, fmt.Errorf("enum %s index %d out of range", n.Name, i)
		}
		return appendJSONString(dst, n.Symbols[i]), rest, nil
	case "array", "map":
		open, close := byte('['), byte(']')
		if n.Type == "map" {
			open, close = '{', '}'
		}
		dst = append(dst, open)
		first := true
		for {
			count, rest, err := readLong(b)
			if err != nil {
				return dst, b, err
			}
			b = rest
			if count == 0 {
				break
			}
			if count < 0 {
				count = -count
				if _, b, err = readLong(b); err != nil { // the block's byte size
					return dst, b, err
				}
			}
			if count > int64(len(b))+1 {
				return dst, b, errBadLength
			}
			for ; count > 0; count-- {
				if !first {
					dst = append(dst, ',')
				}
				first = false
				if n.Type == "map" {
					l, rest, err := readLen(b)
					if err != nil {
						return dst, b, err
					}
					dst = appendJSONString(dst, rest[:l])
					dst = append(dst, ':')
					b = rest[l:]
					if dst, b, err = fastDecode(dst, b, n.Values); err != nil {
						return dst, b, err
					}
					continue
				}
				if dst, b, err = fastDecode(dst, b, n.Items); err != nil {
					return dst, b, err
				}
			}
		}
		return append(dst, close), b, nil
	case "record", "error":
		dst = append(dst, '{')
		var err error
		for i := range n.Fields {
			f := &n.Fields[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, f.Name)
			dst = append(dst, ':')
			if dst, b, err = fastDecode(dst, b, &f.Type); err != nil {
				return dst, b, fmt.Errorf("field %s: %w", f.Name, err)
			}
		}
		return append(dst, '}'), b, nil
	case "union":
		i, rest, err := readLong(b)
		if err != nil {
			return dst, b, err
		}
		if i < 0 || i >= int64(len(n.Branches)) {
			return dst, b, fmt.Errorf("union branch %d out of range", i)
		}
		return fastDecode(dst, rest, &n.Branches[i])
	}
	return dst, b, fmt.Errorf("unsupported avro type %q", n.Type)
}

func appendFloat(dst []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Infinity"`...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, bits)
}

// appendDecimal appends the two's-complement big-endian unscaled value v
// with scale digits after the point, as a JSON string.
func appendDecimal(dst, v []byte, scale int) []byte {
	var digits []byte
	neg := false
	if len(v) <= 8 {
		var x int64
		if len(v) > 0 && v[0]&0x80 != 0 {
			x = -1
		}
		for _, c := range v {
			x = x<<8 | int64(c)
		}
		if x < 0 {
			neg = true
			digits = strconv.AppendUint(nil, uint64(-x), 10) // -MinInt64 wraps to itself: as uint64 it is right
		} else {
			digits = strconv.AppendInt(nil, x, 10)
		}
	} else {
		x := new(big.Int).SetBytes(v)
		if v[0]&0x80 != 0 {
			x.Sub(x, new(big.Int).Lsh(big.NewInt(1), uint(8*len(v))))
		}
		neg = x.Sign() < 0
		digits = x.Abs(x).Append(nil, 10)
	}
	dst = append(dst, '"')
	if neg {
		dst = append(dst, '-')
	}
	if scale <= 0 {
		dst = append(dst, digits...)
		return append(dst, '"')
	}
	if len(digits) <= scale {
		dst = append(dst, '0', '.')
		for range scale - len(digits) {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
		return append(dst, '"')
	}
	dst = append(dst, digits[:len(digits)-scale]...)
	dst = append(dst, '.')
	dst = append(dst, digits[len(digits)-scale:]...)
	return append(dst, '"')
}

func appendLong(dst []byte, v int64) []byte {
	u := uint64(v<<1) ^ uint64(v>>63)
	for u >= 0x80 {
		dst = append(dst, byte(u)|0x80)
		u >>= 7
	}
	return append(dst, byte(u))
}

// fastEncoder encodes JSON into Avro binary for one schema; fieldIndex
// holds, per record node, its fields by name.
type fastEncoder struct {
	fieldIndex map[*avro.SchemaNode]map[string]int
}

func newFastEncoder(root *avro.SchemaNode) *fastEncoder {
	e := &fastEncoder{fieldIndex: map[*avro.SchemaNode]map[string]int{}}
	var walk func(n *avro.SchemaNode)
	walk = func(n *avro.SchemaNode) {
		switch n.Type {
		case "array":
			walk(n.Items)
		case "map":
			walk(n.Values)
		case "union":
			for i := range n.Branches {
				walk(&n.Branches[i])
			}
		case "record", "error":
			idx := make(map[string]int, len(n.Fields))
			for i := range n.Fields {
				idx[n.Fields[i].Name] = i
				walk(&n.Fields[i].Type)
			}
			e.fieldIndex[n] = idx
		}
	}
	walk(root)
	return e
}

func kindOfResult(j gjson.Result) string {
	switch j.Type {
	case gjson.Null:
		return "null"
	case gjson.True, gjson.False:
		return "a boolean"
	case gjson.Number:
		return "a number"
	case gjson.String:
		return "a string"
	}
	if j.IsArray() {
		return "an array"
	}
	return "an object"
}

// fieldPath is where a value sits in the record being encoded, built
// into a string only for an error: a field name or an array index below
// a parent.
type fieldPath struct {
	parent *fieldPath
	name   string
	index  int // an array index when name is ""
}

// untracked is the path of an encoding that does not track paths (the
// first attempt of every value: see avroCodec.encode): its fields and
// items are untracked too, so no fieldPath is allocated. (A fieldPath
// built in the recursion always escapes to the heap, golang.org/issue/35518:
// one allocation per field and value, about a third of the encoding's
// cost on a flat record.)
var untracked = &fieldPath{name: "(untracked)"}

// field returns the path of p's field name.
func (p *fieldPath) field(name string) *fieldPath {
	if p == untracked {
		return untracked
	}
	return &fieldPath{parent: p, name: name}
}

// item returns the path of p's array item i.
func (p *fieldPath) item(i int) *fieldPath {
	if p == untracked {
		return untracked
	}
	return &fieldPath{parent: p, index: i}
}

func (p *fieldPath) String() string {
	if p == nil {
		return "value"
	}
	if p.name == "" {
		return p.parent.String() + "[" + strconv.Itoa(p.index) + "]"
	}
	return p.parent.String() + "." + p.name
}

// badValue formats path with String, not as an operand: a *fieldPath
// handed to fmt escapes, and then every field's path would be allocated
// on the heap, the error or not.
func badValue(path *fieldPath, j gjson.Result, want string) error {
	return fmt.Errorf("%s: %s is not %s", path.String(), kindOfResult(j), want)
}

// encode appends the Avro binary of the JSON value j as n.
func (e *fastEncoder) encode(dst []byte, j gjson.Result, n *avro.SchemaNode, path *fieldPath) ([]byte, error) {
	switch n.Type {
	case "null":
		if j.Type != gjson.Null {
			return dst, badValue(path, j, "null")
		}
		return dst, nil
	case "boolean":
		switch j.Type {
		case gjson.True:
			return append(dst, 1), nil
		case gjson.False:
			return append(dst, 0), nil
		}
		return dst, badValue(path, j, "a boolean")
	case "int", "long":
		switch j.Type {
		case gjson.Number:
			v, err := strconv.ParseInt(j.Raw, 10, 64)
			if err != nil {
				return dst, badValue(path, j, "an integer")
			}
			if n.Type == "int" && (v < math.MinInt32 || v > math.MaxInt32) {
				return dst, fmt.Errorf("%s: %d overflows an avro int", path.String(), v)
			}
			return appendLong(dst, v), nil
		case gjson.String:
			switch n.LogicalType {
			case "date":
				t, err := time.Parse(time.DateOnly, j.Str)
				if err != nil {
					return dst, badValue(path, j, "a YYYY-MM-DD date")
				}
				return appendLong(dst, t.Unix()/86400), nil
			case "timestamp-millis", "local-timestamp-millis":
				t, err := time.Parse(time.RFC3339Nano, j.Str)
				if err != nil {
					return dst, badValue(path, j, "a timestamp")
				}
				return appendLong(dst, t.UnixMilli()), nil
			case "timestamp-micros", "local-timestamp-micros":
				t, err := time.Parse(time.RFC3339Nano, j.Str)
				if err != nil {
					return dst, badValue(path, j, "a timestamp")
				}
				return appendLong(dst, t.UnixMicro()), nil
			case "timestamp-nanos", "local-timestamp-nanos":
				t, err := time.Parse(time.RFC3339Nano, j.Str)
				if err != nil {
					return dst, badValue(path, j, "a timestamp")
				}
				return appendLong(dst, t.UnixNano()), nil
			}
		}
		return dst, badValue(path, j, "an integer")
	case "float", "double":
		var f float64
		switch {
		case j.Type == gjson.Number:
			var err error
			if f, err = strconv.ParseFloat(j.Raw, 64); err != nil {
				return dst, badValue(path, j, "a number")
			}
		case j.Type == gjson.String && j.Str == "NaN":
			f = math.NaN()
		case j.Type == gjson.String && j.Str == "Infinity":
			f = math.Inf(1)
		case j.Type == gjson.String && j.Str == "-Infinity":
			f = math.Inf(-1)
		default:
			return dst, badValue(path, j, "a number")
		}
		if n.Type == "float" {
			return binary.LittleEndian.AppendUint32(dst, math.Float32bits(float32(f))), nil
		}
		return binary.LittleEndian.AppendUint64(dst, math.Float64bits(f)), nil
	case "string":
		if j.Type != gjson.String {
			return dst, badValue(path, j, "a string")
		}
		dst = appendLong(dst, int64(len(j.Str)))
		return append(dst, j.Str...), nil
	case "enum":
		if j.Type == gjson.String {
			if i := slices.Index(n.Symbols, j.Str); i >= 0 {
				return appendLong(dst, int64(i)), nil
			}
		}
		return dst, badValue(path, j, "a symbol of enum "+n.Name)
	case "bytes", "fixed":
		var raw []byte
		switch n.LogicalType {
		case "decimal":
			if j.Type != gjson.Number && j.Type != gjson.String {
				return dst, badValue(path, j, "a decimal")
			}
			s := j.Str
			if j.Type == gjson.Number {
				s = j.Raw
			}
			size := -1
			if n.Type == "fixed" {
				size = n.Size
			}
			b, err := decimalBytes(s, n.Scale, size)
			if err != nil {
				return dst, fmt.Errorf("%s: %q is not a decimal of scale %d: %w", path.String(), s, n.Scale, err)
			}
			raw = b
		case "uuid":
			if n.Type == "fixed" && j.Type == gjson.String && n.Size == 16 {
				s := strings.ReplaceAll(j.Str, "-", "")
				var u [16]byte
				if len(s) != 32 {
					return dst, badValue(path, j, "a uuid")
				}
				if _, err := fmt.Sscanf(s, "%32x", &u); err != nil {
					return dst, badValue(path, j, "a uuid")
				}
				return append(dst, u[:]...), nil
			}
			fallthrough
		default:
			if j.Type != gjson.String {
				return dst, badValue(path, j, "a base64 string")
			}
			b, err := base64.StdEncoding.DecodeString(j.Str)
			if err != nil {
				return dst, badValue(path, j, "a base64 string")
			}
			raw = b
		}
		if n.Type == "fixed" {
			if len(raw) != n.Size {
				return dst, fmt.Errorf("%s: %d bytes, fixed %s has %d", path.String(), len(raw), n.Name, n.Size)
			}
			return append(dst, raw...), nil
		}
		dst = appendLong(dst, int64(len(raw)))
		return append(dst, raw...), nil
	case "array":
		if !j.IsArray() {
			return dst, badValue(path, j, "an array")
		}
		// ForEach, twice, rather than Array, which allocates the items
		count := 0
		j.ForEach(func(_, _ gjson.Result) bool { count++; return true })
		if count > 0 {
			dst = appendLong(dst, int64(count))
			var err error
			i := 0
			j.ForEach(func(_, it gjson.Result) bool {
				dst, err = e.encode(dst, it, n.Items, path.item(i))
				i++
				return err == nil
			})
			if err != nil {
				return dst, err
			}
		}
		return append(dst, 0), nil
	case "map":
		if !j.IsObject() {
			return dst, badValue(path, j, "an object")
		}
		var err error
		count := 0
		j.ForEach(func(k, _ gjson.Result) bool { count++; return true })
		if count > 0 {
			dst = appendLong(dst, int64(count))
			j.ForEach(func(k, v gjson.Result) bool {
				dst = appendLong(dst, int64(len(k.Str)))
				dst = append(dst, k.Str...)
				dst, err = e.encode(dst, v, n.Values, path.field(k.Str))
				return err == nil
			})
		}
		if err != nil {
			return dst, err
		}
		return append(dst, 0), nil
	case "record", "error":
		if !j.IsObject() {
			return dst, badValue(path, j, "an object (record "+n.Name+")")
		}
		idx := e.fieldIndex[n]
		var small [16]gjson.Result
		vals := small[:0]
		if len(n.Fields) > len(small) {
			vals = make([]gjson.Result, 0, len(n.Fields))
		}
		vals = vals[:len(n.Fields)]
		j.ForEach(func(k, v gjson.Result) bool {
			if i, ok := idx[k.Str]; ok {
				vals[i] = v
			}
			return true
		})
		for i := range n.Fields {
			f := &n.Fields[i]
			v := vals[i]
			var err error
			if !v.Exists() {
				if !f.HasDefault {
					return dst, fmt.Errorf("%s: missing field %s (no default)", path.String(), f.Name)
				}
				if dst, err = encodeDefault(dst, f); err != nil {
					return dst, fmt.Errorf("%s: default of %s: %w", path.String(), f.Name, err)
				}
				continue
			}
			if dst, err = e.encode(dst, v, &f.Type, path.field(f.Name)); err != nil {
				return dst, err
			}
		}
		return dst, nil
	case "union":
		if j.Type == gjson.Null {
			for i := range n.Branches {
				if n.Branches[i].Type == "null" {
					return appendLong(dst, int64(i)), nil
				}
			}
			return dst, badValue(path, j, "one of the union's branches")
		}
		for i := range n.Branches {
			b := &n.Branches[i]
			if b.Type == "null" || !fitsResult(j, b) {
				continue
			}
			out, err := e.encode(appendLong(dst, int64(i)), j, b, path)
			if err != nil {
				continue
			}
			return out, nil
		}
		return dst, fmt.Errorf("%s: %w (%s)", path.String(), errNoBranch, kindOfResult(j))
	}
	return dst, fmt.Errorf("%s: unsupported avro type %q", path.String(), n.Type)
}

// encodeDefault appends field f's default value, encoded by twmb/avro.
func encodeDefault(dst []byte, f *avro.SchemaField) ([]byte, error) {
	s, err := f.Type.Schema()
	if err != nil {
		return dst, err
	}
	v := f.Default
	if f.Type.Type == "union" {
		// a union's default is a value of its first branch
		if v != nil {
			v = map[string]any{branchName(&f.Type.Branches[0]): v}
		}
	}
	return s.AppendEncode(dst, v)
}

func fitsResult(j gjson.Result, b *avro.SchemaNode) bool {
	switch j.Type {
	case gjson.True, gjson.False:
		return b.Type == "boolean"
	case gjson.Number:
		switch b.Type {
		case "int", "long", "float", "double":
			return true
		case "bytes", "fixed":
			return b.LogicalType == "decimal"
		}
	case gjson.String:
		switch b.Type {
		case "string", "enum", "bytes", "fixed", "float", "double":
			return true
		case "int", "long":
			return b.LogicalType != ""
		}
	case gjson.JSON:
		if j.IsArray() {
			return b.Type == "array"
		}
		return b.Type == "record" || b.Type == "error" || b.Type == "map"
	}
	return false
}

// decimalBytes is the two's-complement big-endian unscaled value of the
// decimal string s at scale (a value with more fraction digits than scale
// is refused, not rounded), minimal, or sign-extended to size when size
// >= 0.
func decimalBytes(s string, scale, size int) ([]byte, error) {
	if x, ok := smallDecimal(s, scale); ok {
		var buf [8]byte
		binary.BigEndian.PutUint64(buf[:], uint64(x))
		b := buf[:]
		for len(b) > 1 && ((b[0] == 0 && b[1]&0x80 == 0) || (b[0] == 0xff && b[1]&0x80 != 0)) {
			b = b[1:]
		}
		return padDecimal(append([]byte(nil), b...), size)
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil, errors.New("not a number")
	}
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)))
	if !r.IsInt() {
		return nil, errors.New("more fraction digits than the scale")
	}
	x := r.Num()
	var b []byte
	if x.Sign() >= 0 {
		b = x.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
	} else {
		// two's complement: 2^(8n) + x for the smallest n that holds x
		n := (x.BitLen() + 8) / 8
		t := new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), uint(8*n)), x)
		b = t.Bytes()
		for len(b) < n {
			b = append([]byte{0xff}, b...)
		}
		if b[0]&0x80 == 0 {
			b = append([]byte{0xff}, b...)
		}
		for len(b) > 1 && b[0] == 0xff && b[1]&0x80 != 0 {
			b = b[1:]
		}
	}
	return padDecimal(b, size)
}

// padDecimal sign-extends b to size bytes (size < 0: leaves it).
func padDecimal(b []byte, size int) ([]byte, error) {
	if size < 0 {
		return b, nil
	}
	if len(b) > size {
		return nil, fmt.Errorf("needs %d bytes, fixed has %d", len(b), size)
	}
	pad := byte(0)
	if b[0]&0x80 != 0 {
		pad = 0xff
	}
	for len(b) < size {
		b = append([]byte{pad}, b...)
	}
	return b, nil
}

// smallDecimal parses the plain decimal s ([-]digits[.digits], no
// exponent) as its unscaled value at scale, when that fits in 18 digits
// and s has at most scale fraction digits; ok false sends s to big.Rat.
func smallDecimal(s string, scale int) (x int64, ok bool) {
	neg := false
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	intPart, frac, dot := strings.Cut(s, ".")
	if intPart == "" || (dot && frac == "") || len(frac) > scale || len(intPart)+scale > 18 {
		return 0, false
	}
	for _, part := range []string{intPart, frac} {
		for i := 0; i < len(part); i++ {
			c := part[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			x = x*10 + int64(c-'0')
		}
	}
	for range scale - len(frac) {
		x *= 10
	}
	if neg {
		x = -x
	}
	return x, true
}
