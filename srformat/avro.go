package srformat

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/twmb/avro"
)

type avroReader struct{ schema *avro.Schema }

func parseAvroReader(text string) (*avroReader, error) {
	s, err := avro.Parse(text)
	if err != nil {
		return nil, err
	}
	return &avroReader{schema: s}, nil
}

type avroCodec struct {
	writer *avro.Schema // what values are decoded with (resolved when a reader is set)
	shape  *avro.SchemaNode
	enc    *avro.Schema
	// fastDec and fastEnc say the direct codec (avrofast.go) decodes and
	// encodes: no reader schema, no recursive type
	fastDec bool
	fastEnc *fastEncoder
}

func compileAvro(text string, reader *avroReader) (*avroCodec, error) {
	w, err := avro.Parse(text)
	if err != nil {
		return nil, err
	}
	c := &avroCodec{writer: w, enc: w, shape: w.Root().ExpandReferences()}
	if supportsFast(c.shape) {
		c.fastDec = reader == nil
		c.fastEnc = newFastEncoder(c.shape)
	}
	if reader != nil {
		r, err := avro.Resolve(w, reader.schema)
		if err != nil {
			return nil, fmt.Errorf("the writer schema does not resolve to the reader schema: %w", err)
		}
		c.writer = r
		c.shape = reader.schema.Root().ExpandReferences()
	}
	return c, nil
}

func (c *avroCodec) index() []int { return nil }

func (c *avroCodec) decode(dst, b []byte, _ []int) ([]byte, error) {
	if c.fastDec {
		out, rest, err := fastDecode(dst, b, c.shape)
		if err != nil {
			return dst, err
		}
		if len(rest) > 0 {
			return dst, fmt.Errorf("%d bytes left after the value", len(rest))
		}
		return out, nil
	}
	return c.decodeSlow(dst, b)
}

// decodeSlow decodes with twmb/avro into Go values (schema resolution,
// recursive types) and converts them.
func (c *avroCodec) decodeSlow(dst, b []byte) ([]byte, error) {
	var v any
	rest, err := c.writer.Decode(b, &v, avro.TaggedUnions(), avro.TagLogicalTypes())
	if err != nil {
		return dst, err
	}
	if len(rest) > 0 {
		return dst, fmt.Errorf("%d bytes left after the value", len(rest))
	}
	return appendAvroJSON(dst, v, c.shape)
}

func (c *avroCodec) encode(dst, v []byte) ([]byte, error) {
	if c.fastEnc != nil {
		if !gjson.ValidBytes(v) {
			return dst, errors.New("not JSON")
		}
		// Encoding is deterministic: a value that fails untracked fails
		// the same way again with its paths tracked, for the error.
		// A view of v, not a copy (ParseBytes copies it into a string):
		// v is not changed while encode runs and nothing encode returns
		// refers to it (strings are appended to dst, errors formatted).
		j := gjson.Parse(unsafe.String(unsafe.SliceData(v), len(v)))
		out, err := c.fastEnc.encode(dst, j, c.shape, untracked)
		if err != nil {
			return c.fastEnc.encode(dst, j, c.shape, nil)
		}
		return out, nil
	}
	return c.encodeSlow(dst, v)
}

// encodeSlow converts v to Go values and encodes them with twmb/avro.
func (c *avroCodec) encodeSlow(dst, v []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	var j any
	if err := d.Decode(&j); err != nil {
		return dst, fmt.Errorf("not JSON: %w", err)
	}
	a, err := toAvro(j, c.shape, "")
	if err != nil {
		return dst, err
	}
	return c.enc.AppendEncode(dst, a)
}

// branchName is the name a tagged union uses for branch n: the full name of
// a named type, else the type name qualified with its logical type.
func branchName(n *avro.SchemaNode) string {
	switch n.Type {
	case "record", "enum", "fixed", "error":
		if n.Namespace != "" && !strings.Contains(n.Name, ".") {
			return n.Namespace + "." + n.Name
		}
		return n.Name
	}
	if n.LogicalType != "" {
		return n.Type + "." + n.LogicalType
	}
	return n.Type
}

func appendAvroJSON(dst []byte, v any, n *avro.SchemaNode) ([]byte, error) {
	switch n.Type {
	case "null":
		return append(dst, "null"...), nil
	case "boolean":
		b, _ := v.(bool)
		return strconv.AppendBool(dst, b), nil
	case "int", "long":
		return appendAvroInt(dst, v, n)
	case "float", "double":
		var f float64
		switch x := v.(type) {
		case float32:
			f = float64(x)
		case float64:
			f = x
		}
		switch {
		case math.IsNaN(f):
			return append(dst, `"NaN"`...), nil
		case math.IsInf(f, 1):
			return append(dst, `"Infinity"`...), nil
		case math.IsInf(f, -1):
			return append(dst, `"-Infinity"`...), nil
		}
		bits := 64
		if n.Type == "float" {
			bits = 32
		}
		return strconv.AppendFloat(dst, f, 'g', -1, bits), nil
	case "string":
		s, ok := v.(string)
		if !ok {
			if u, isUUID := v.([16]byte); isUUID {
				s = uuidString(u)
			}
		}
		return appendJSONString(dst, s), nil
	case "enum":
		s, _ := v.(string)
		return appendJSONString(dst, s), nil
	case "bytes", "fixed":
		return appendAvroBytes(dst, v, n)
	case "array":
		items, _ := v.([]any)
		dst = append(dst, '[')
		for i, it := range items {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendAvroJSON(dst, it, n.Items); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case "map":
		m, _ := v.(map[string]any)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, k)
			dst = append(dst, ':')
			var err error
			if dst, err = appendAvroJSON(dst, m[k], n.Values); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	case "record", "error":
		m, _ := v.(map[string]any)
		dst = append(dst, '{')
		for i := range n.Fields {
			f := &n.Fields[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, f.Name)
			dst = append(dst, ':')
			var err error
			if dst, err = appendAvroJSON(dst, m[f.Name], &f.Type); err != nil {
				return dst, fmt.Errorf("field %s: %w", f.Name, err)
			}
		}
		return append(dst, '}'), nil
	case "union":
		if v == nil {
			return append(dst, "null"...), nil
		}
		tagged, ok := v.(map[string]any)
		if !ok || len(tagged) != 1 {
			return dst, fmt.Errorf("union value %T is not tagged", v)
		}
		for name, bv := range tagged {
			for i := range n.Branches {
				if branchName(&n.Branches[i]) == name {
					return appendAvroJSON(dst, bv, &n.Branches[i])
				}
			}
			return dst, fmt.Errorf("union has no branch %q", name)
		}
	}
	return dst, fmt.Errorf("unsupported avro type %q", n.Type)
}

func appendAvroInt(dst []byte, v any, n *avro.SchemaNode) ([]byte, error) {
	switch x := v.(type) {
	case int32:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case time.Time:
		switch n.LogicalType {
		case "date":
			return append(append(append(dst, '"'), x.UTC().Format(time.DateOnly)...), '"'), nil
		case "timestamp-millis", "local-timestamp-millis":
			return strconv.AppendInt(dst, x.UnixMilli(), 10), nil
		case "timestamp-micros", "local-timestamp-micros":
			return strconv.AppendInt(dst, x.UnixMicro(), 10), nil
		case "timestamp-nanos", "local-timestamp-nanos":
			return strconv.AppendInt(dst, x.UnixNano(), 10), nil
		}
	case time.Duration:
		switch n.LogicalType {
		case "time-millis":
			return strconv.AppendInt(dst, x.Milliseconds(), 10), nil
		case "time-micros":
			return strconv.AppendInt(dst, x.Microseconds(), 10), nil
		}
	}
	return dst, fmt.Errorf("unexpected %T for %s %s", v, n.Type, n.LogicalType)
}

func appendAvroBytes(dst []byte, v any, n *avro.SchemaNode) ([]byte, error) {
	switch x := v.(type) {
	case *big.Rat:
		scale := n.Scale
		if n.LogicalType == "big-decimal" {
			scale = decimalDigits(x)
		}
		return appendJSONString(dst, x.FloatString(scale)), nil
	case []byte:
		return appendBase64(dst, x), nil
	case [16]byte:
		if n.LogicalType == "uuid" {
			return appendJSONString(dst, uuidString(x)), nil
		}
		return appendBase64(dst, x[:]), nil
	case avro.Duration:
		dst = append(dst, `{"months":`...)
		dst = strconv.AppendUint(dst, uint64(x.Months), 10)
		dst = append(dst, `,"days":`...)
		dst = strconv.AppendUint(dst, uint64(x.Days), 10)
		dst = append(dst, `,"milliseconds":`...)
		dst = strconv.AppendUint(dst, uint64(x.Milliseconds), 10)
		return append(dst, '}'), nil
	}
	return dst, fmt.Errorf("unexpected %T for %s %s", v, n.Type, n.LogicalType)
}

// decimalDigits is the number of fraction digits r's exact decimal
// expansion needs (its denominator is 2^a*5^b: max(a, b)).
func decimalDigits(r *big.Rat) int {
	d := new(big.Int).Set(r.Denom())
	two, five, zero := big.NewInt(2), big.NewInt(5), new(big.Int)
	var a, b int
	m := new(big.Int)
	for d.Cmp(big.NewInt(1)) > 0 {
		if m.Mod(d, two); m.Cmp(zero) == 0 {
			d.Quo(d, two)
			a++
			continue
		}
		if m.Mod(d, five); m.Cmp(zero) == 0 {
			d.Quo(d, five)
			b++
			continue
		}
		break
	}
	return max(a, b)
}

func uuidString(u [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

func appendBase64(dst, b []byte) []byte {
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}

// appendJSONString appends s as a JSON string.
func appendJSONString[T string | []byte](dst []byte, s T) []byte {
	simple := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			simple = false
			break
		}
	}
	if simple {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	b, _ := json.Marshal(string(s))
	return append(dst, b...)
}

var errNoBranch = errors.New("no union branch fits the value")

// toAvro converts the JSON value j (decoded with UseNumber) to the Go value
// twmb/avro encodes as n; path names the position in errors.
func toAvro(j any, n *avro.SchemaNode, path string) (any, error) {
	bad := func(want string) error {
		return fmt.Errorf("%s: %s is not %s", pathOrRoot(path), jsonKind(j), want)
	}
	switch n.Type {
	case "null":
		if j != nil {
			return nil, bad("null")
		}
		return nil, nil
	case "boolean":
		if _, ok := j.(bool); !ok {
			return nil, bad("a boolean")
		}
		return j, nil
	case "int", "long":
		switch x := j.(type) {
		case json.Number:
			i, err := strconv.ParseInt(string(x), 10, 64)
			if err != nil {
				return nil, bad("an integer")
			}
			if n.Type == "int" && (i < math.MinInt32 || i > math.MaxInt32) {
				return nil, fmt.Errorf("%s: %d overflows an avro int", pathOrRoot(path), i)
			}
			return i, nil
		case string:
			switch n.LogicalType {
			case "date":
				t, err := time.Parse(time.DateOnly, x)
				if err != nil {
					return nil, bad("a YYYY-MM-DD date")
				}
				return t, nil
			case "timestamp-millis", "timestamp-micros", "timestamp-nanos",
				"local-timestamp-millis", "local-timestamp-micros", "local-timestamp-nanos":
				t, err := time.Parse(time.RFC3339Nano, x)
				if err != nil {
					return nil, bad("a timestamp")
				}
				return t, nil
			}
		}
		return nil, bad("an integer")
	case "float", "double":
		switch x := j.(type) {
		case json.Number:
			f, err := strconv.ParseFloat(string(x), 64)
			if err != nil {
				return nil, bad("a number")
			}
			return f, nil
		case string:
			switch x {
			case "NaN":
				return math.NaN(), nil
			case "Infinity":
				return math.Inf(1), nil
			case "-Infinity":
				return math.Inf(-1), nil
			}
		}
		return nil, bad("a number")
	case "string":
		if s, ok := j.(string); ok {
			return s, nil
		}
		return nil, bad("a string")
	case "enum":
		s, ok := j.(string)
		if !ok || !slices.Contains(n.Symbols, s) {
			return nil, bad("a symbol of enum " + n.Name)
		}
		return s, nil
	case "bytes", "fixed":
		switch n.LogicalType {
		case "decimal", "big-decimal":
			var s string
			switch x := j.(type) {
			case json.Number:
				s = string(x)
			case string:
				s = x
			default:
				return nil, bad("a decimal")
			}
			r, ok := new(big.Rat).SetString(s)
			if !ok {
				return nil, bad("a decimal")
			}
			return r, nil
		case "uuid":
			if s, ok := j.(string); ok && n.Type == "fixed" {
				return s, nil
			}
		}
		s, ok := j.(string)
		if !ok {
			return nil, bad("a base64 string")
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, bad("a base64 string")
		}
		if n.Type == "fixed" && len(b) != n.Size {
			return nil, fmt.Errorf("%s: %d bytes, fixed %s has %d", pathOrRoot(path), len(b), n.Name, n.Size)
		}
		return b, nil
	case "array":
		items, ok := j.([]any)
		if !ok {
			return nil, bad("an array")
		}
		out := make([]any, len(items))
		for i, it := range items {
			v, err := toAvro(it, n.Items, path+"["+strconv.Itoa(i)+"]")
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case "map":
		m, ok := j.(map[string]any)
		if !ok {
			return nil, bad("an object")
		}
		out := make(map[string]any, len(m))
		for k, it := range m {
			v, err := toAvro(it, n.Values, path+"."+k)
			if err != nil {
				return nil, err
			}
			out[k] = v
		}
		return out, nil
	case "record", "error":
		m, ok := j.(map[string]any)
		if !ok {
			return nil, bad("an object (record " + n.Name + ")")
		}
		out := make(map[string]any, len(n.Fields))
		for i := range n.Fields {
			f := &n.Fields[i]
			fv, present := m[f.Name]
			if !present {
				if !f.HasDefault {
					return nil, fmt.Errorf("%s: missing field %s (no default)", pathOrRoot(path), f.Name)
				}
				continue // twmb/avro writes the default
			}
			v, err := toAvro(fv, &f.Type, path+"."+f.Name)
			if err != nil {
				return nil, err
			}
			out[f.Name] = v
		}
		return out, nil
	case "union":
		if j == nil {
			for i := range n.Branches {
				if n.Branches[i].Type == "null" {
					return nil, nil
				}
			}
			return nil, bad("one of the union's branches")
		}
		for i := range n.Branches {
			b := &n.Branches[i]
			if b.Type == "null" || !fits(j, b) {
				continue
			}
			v, err := toAvro(j, b, path)
			if err != nil {
				continue
			}
			return map[string]any{branchName(b): v}, nil
		}
		return nil, fmt.Errorf("%s: %w (%s)", pathOrRoot(path), errNoBranch, jsonKind(j))
	}
	return nil, fmt.Errorf("%s: unsupported avro type %q", pathOrRoot(path), n.Type)
}

// fits reports whether the JSON value j is of a kind branch b can hold
// (the union branch choice; toAvro then checks the details).
func fits(j any, b *avro.SchemaNode) bool {
	switch j.(type) {
	case bool:
		return b.Type == "boolean"
	case json.Number:
		switch b.Type {
		case "int", "long", "float", "double":
			return true
		case "bytes", "fixed":
			return b.LogicalType == "decimal" || b.LogicalType == "big-decimal"
		}
	case string:
		switch b.Type {
		case "string", "enum", "bytes", "fixed", "float", "double":
			return true
		case "int", "long":
			return b.LogicalType != ""
		}
	case []any:
		return b.Type == "array"
	case map[string]any:
		return b.Type == "record" || b.Type == "error" || b.Type == "map"
	}
	return false
}

func jsonKind(j any) string {
	switch j.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", j)
}

func pathOrRoot(p string) string {
	if p == "" {
		return "value"
	}
	return "value" + p
}
