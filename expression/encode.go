package expression

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// AppendJSON appends to dst the JSON of v, byte for byte what
// encoding/json's Encoder writes for it without HTML escaping and without
// the newline (FuzzAppendJSONEqualsEncodeJSON), and returns the extended
// slice. It writes the values an evaluation returns (nil, bool, int64,
// uint64, float64, string, []any and map[string]any of those) directly,
// without reflection; any other value, and a value encoding/json refuses
// (NaN or infinite numbers), goes through encoding/json, whose error it
// returns prefixed "expression: encode json: " (dst is then returned as it
// was). [EncodeJSON] is AppendJSON(nil, v).
//
// roundTrips reports whether v is exactly what [DecodeJSON] makes of the
// JSON written (so an operator can hand v on as the decoded form of its
// output and spare the next one the decode): false when a number would
// come back as another type (an integral float64 in the int64 range reads
// back as int64, a uint64 as int64 or float64), a string holds invalid
// UTF-8 (written as U+FFFD), a list or map is nil (written null), or the
// value went through encoding/json.
func AppendJSON(dst []byte, v any) (out []byte, roundTrips bool, err error) {
	e := jsonAppender{buf: dst, same: true}
	if !e.value(v) {
		b, err := encodeJSONStd(v)
		if err != nil {
			return dst, false, err
		}
		return append(dst, b...), false, nil
	}
	return e.buf, e.same, nil
}

// jsonAppender writes JSON as encoding/json's Encoder does with
// SetEscapeHTML(false), minus the newline.
type jsonAppender struct {
	buf  []byte
	same bool // what was written decodes to the value written
	keys []string
}

// value appends v; false when v holds something it does not write itself
// (the caller then encodes the whole with encoding/json).
func (e *jsonAppender) value(v any) bool {
	switch x := v.(type) {
	case nil:
		e.buf = append(e.buf, "null"...)
	case bool:
		e.buf = strconv.AppendBool(e.buf, x)
	case int64:
		e.buf = strconv.AppendInt(e.buf, x, 10)
	case uint64:
		e.buf = strconv.AppendUint(e.buf, x, 10)
		e.same = false
	case float64:
		return e.float(x)
	case string:
		e.string(x)
	case []any:
		if x == nil {
			e.buf = append(e.buf, "null"...)
			e.same = false
			return true
		}
		e.buf = append(e.buf, '[')
		for i, el := range x {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			if !e.value(el) {
				return false
			}
		}
		e.buf = append(e.buf, ']')
	case map[string]any:
		if x == nil {
			e.buf = append(e.buf, "null"...)
			e.same = false
			return true
		}
		// encoding/json writes the keys sorted.
		start := len(e.keys)
		for k := range x {
			e.keys = append(e.keys, k)
		}
		keys := e.keys[start:]
		slices.Sort(keys)
		e.buf = append(e.buf, '{')
		for i, k := range keys {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			e.string(k)
			e.buf = append(e.buf, ':')
			if !e.value(x[k]) {
				return false
			}
		}
		e.buf = append(e.buf, '}')
		clear(keys)
		e.keys = e.keys[:start]
	default:
		return false
	}
	return true
}

// float appends f as encoding/json's float64 encoder does (ES6 number to
// string: shortest digits, exponent form below 1e-6 and from 1e21 on);
// false for NaN and infinities, which it refuses.
func (e *jsonAppender) float(f float64) bool {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	e.buf = strconv.AppendFloat(e.buf, f, format, -1, 64)
	if format == 'e' {
		// e-09 becomes e-9, as encoding/json writes it.
		if n := len(e.buf); n >= 4 && e.buf[n-4] == 'e' && e.buf[n-3] == '-' && e.buf[n-2] == '0' {
			e.buf[n-2] = e.buf[n-1]
			e.buf = e.buf[:n-1]
		}
	}
	// An integral value in the int64 range is written without a fraction
	// and reads back as an int64.
	if f == math.Trunc(f) && f >= -(1<<63) && f < 1<<63 {
		e.same = false
	}
	return true
}

const hexDigits = "0123456789abcdef"

// string appends s as a JSON string literal as encoding/json does without
// HTML escaping: '"', '\\' and control characters escaped, invalid UTF-8
// bytes written as \ufffd, U+2028 and U+2029 escaped.
func (e *jsonAppender) string(s string) {
	b := append(e.buf, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			e.same = false
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	e.buf = append(b, '"')
}

// refValue appends the JSON of the CEL value v as value appends native(v)
// (byte for byte: FuzzEvalJSONEqualsEval), without converting v to Go
// values first: scalars, and maps a map literal built (their keys sorted,
// as value sorts a Go map's), are written directly, anything else through
// native. False when v holds what value would not write (NaN, bytes, a
// timestamp...) or native refuses (a map key that is not a string): the
// caller then takes the general path, whose result or error counts.
func (e *jsonAppender) refValue(v ref.Val) bool {
	switch x := v.(type) {
	case types.Bool:
		e.buf = strconv.AppendBool(e.buf, bool(x))
	case types.Int:
		e.buf = strconv.AppendInt(e.buf, int64(x), 10)
	case types.Uint:
		e.buf = strconv.AppendUint(e.buf, uint64(x), 10)
	case types.Double:
		return e.float(float64(x))
	case types.String:
		e.string(string(x))
	case types.Null:
		e.buf = append(e.buf, "null"...)
	default:
		if m, ok := v.Value().(map[ref.Val]ref.Val); ok {
			if _, isMapper := v.(traits.Mapper); isMapper {
				return e.refMap(m)
			}
		}
		g, err := native(v)
		if err != nil {
			return false
		}
		return e.value(g)
	}
	return true
}

// refMap appends the JSON of a CEL map literal's entries m, keys sorted;
// false when a key is not a string or a value is not written (refValue).
func (e *jsonAppender) refMap(m map[ref.Val]ref.Val) bool {
	var small [16]refEntry
	ents := small[:0]
	for k, v := range m {
		s, ok := k.(types.String)
		if !ok {
			return false
		}
		ents = append(ents, refEntry{string(s), v})
	}
	slices.SortFunc(ents, func(a, b refEntry) int { return strings.Compare(a.key, b.key) })
	e.buf = append(e.buf, '{')
	for i, en := range ents {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		e.string(en.key)
		e.buf = append(e.buf, ':')
		if !e.refValue(en.val) {
			return false
		}
	}
	e.buf = append(e.buf, '}')
	return true
}

// refEntry is one entry of a CEL map refMap writes.
type refEntry struct {
	key string
	val ref.Val
}
