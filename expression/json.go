package expression

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// DecodeJSON decodes one JSON value b into the Go values expressions
// evaluate on: objects as map[string]any, arrays as []any, integers that
// fit int64 as int64 (so ids and counts keep their precision), other
// numbers (fractions, exponents, integers beyond int64) as float64,
// strings as string, booleans as bool and null as nil.
//
// It returns an error, prefixed "expression: ", when b is not exactly one
// JSON value (empty input and trailing data are errors) or holds a number
// beyond the float64 range.
//
// Valid JSON is walked with gjson (about 3x faster than encoding/json's
// Decoder on 100-byte objects); strings with escapes or non-ASCII bytes,
// invalid input and values nested deeper than gjsonMaxDepth go through
// encoding/json, so the result and the errors are encoding/json's
// (FuzzDecodeJSON compares the two; encoding/json refuses nesting deeper
// than 10000 levels with an error).
func DecodeJSON(b []byte) (any, error) {
	if !gjson.ValidBytes(b) {
		return decodeJSONStd(b)
	}
	v, err := fromGJSON(gjson.ParseBytes(b), 0)
	if err == errTooDeep {
		return decodeJSONStd(b)
	}
	return v, err
}

// gjsonMaxDepth is the nesting fromGJSON walks: each level of a gjson walk
// scans the rest of the value again, so a walk costs depth squared (about
// 0.7 s for 20,000 nested arrays); deeper values are decoded by
// encoding/json, whose cost is linear.
const gjsonMaxDepth = 64

// errTooDeep is fromGJSON's signal that a value nests deeper than
// gjsonMaxDepth; never returned by DecodeJSON.
var errTooDeep = errors.New("expression: decode json: nested deeper than the gjson walk")

// decodeGJSON is DecodeJSON of raw, one valid JSON value.
func decodeGJSON(raw string) (any, error) {
	v, err := fromGJSON(gjson.Parse(raw), 0)
	if err == errTooDeep {
		return decodeJSONStd([]byte(raw))
	}
	return v, err
}

// fromGJSON converts one valid value r at nesting depth as DecodeJSON
// does, or returns errTooDeep past gjsonMaxDepth.
func fromGJSON(r gjson.Result, depth int) (any, error) {
	switch r.Type {
	case gjson.Null:
		return nil, nil
	case gjson.False:
		return false, nil
	case gjson.True:
		return true, nil
	case gjson.Number:
		return number(r.Raw)
	case gjson.String:
		return jsonString(r.Raw)
	}
	if depth++; depth > gjsonMaxDepth {
		return nil, errTooDeep
	}
	var err error
	if r.IsArray() {
		out := []any{}
		r.ForEach(func(_, v gjson.Result) bool {
			var e any
			if e, err = fromGJSON(v, depth); err != nil {
				return false
			}
			out = append(out, e)
			return true
		})
		return out, err
	}
	out := map[string]any{}
	r.ForEach(func(k, v gjson.Result) bool {
		var key string
		if key, err = jsonString(k.Raw); err != nil {
			return false
		}
		if out[key], err = fromGJSON(v, depth); err != nil {
			return false
		}
		return true
	})
	return out, err
}

// jsonString returns the string of the JSON string literal raw: its bytes
// between the quotes when they are plain ASCII without escapes, else what
// encoding/json makes of it (escapes, and invalid UTF-8 as U+FFFD).
func jsonString(raw string) (string, error) {
	for i := 1; i < len(raw)-1; i++ {
		if c := raw[i]; c == '\\' || c >= 0x80 {
			var s string
			if err := json.Unmarshal([]byte(raw), &s); err != nil {
				return "", fmt.Errorf("expression: decode json: %w", err)
			}
			return s, nil
		}
	}
	return raw[1 : len(raw)-1], nil
}

// number converts a JSON number literal: int64 when it is an integer that
// fits, float64 otherwise.
func number(s string) (any, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("expression: decode json: number %s is out of range", s)
	}
	return f, nil
}

// decodeJSONStd is DecodeJSON with encoding/json alone: the reference
// DecodeJSON agrees with, and its error messages.
func decodeJSONStd(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("expression: decode json: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("expression: decode json: data after the value")
	}
	return numbers(v)
}

// numbers replaces every json.Number in v, in place, by int64 or float64.
func numbers(v any) (any, error) {
	var err error
	switch x := v.(type) {
	case json.Number:
		return number(string(x))
	case map[string]any:
		for k, e := range x {
			if x[k], err = numbers(e); err != nil {
				return nil, err
			}
		}
	case []any:
		for i, e := range x {
			if x[i], err = numbers(e); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

// EncodeJSON encodes v, typically a result of [Program.Eval], as compact
// JSON with map keys sorted, as encoding/json does, and without escaping
// <, > and &. It returns an error, prefixed "expression: ", for values JSON
// cannot hold (NaN or infinite numbers, channels, functions, cyclic data).
//
// The values an evaluation returns are written directly ([AppendJSON]);
// others go through encoding/json's Encoder, whose bytes both write
// (FuzzAppendJSONEqualsEncodeJSON).
func EncodeJSON(v any) ([]byte, error) {
	b, _, err := AppendJSON(nil, v)
	return b, err
}

// encodeJSONStd is EncodeJSON with encoding/json alone: the reference
// AppendJSON agrees with, and its errors.
func encodeJSONStd(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("expression: encode json: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
