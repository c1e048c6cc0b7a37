package expression

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
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
func DecodeJSON(b []byte) (any, error) {
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
		s := string(x)
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
func EncodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("expression: encode json: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
