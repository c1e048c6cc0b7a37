package operators

import (
	"encoding/json"
	"fmt"
	"unsafe"

	"github.com/tidwall/gjson"
)

// RawListSerializer is state.JSONSerializer[[]json.RawMessage] without
// reflection: the same name ("json") and the same bytes (a JSON array of
// the items as json.Marshal writes them), so state written by either reads
// with the other. Items that are compact JSON without HTML characters (a
// Kafka record's JSON value usually is) are copied as they are; others go
// through json.Marshal. Decode walks the array with gjson; anything but a
// valid array or null goes through json.Unmarshal for its error.
// FuzzRawListSerializer compares both directions with encoding/json.
type RawListSerializer struct{}

// Name returns "json".
func (RawListSerializer) Name() string { return "json" }

// Append appends the JSON array of v ("null" for nil), as json.Marshal.
func (RawListSerializer) Append(dst []byte, v []json.RawMessage) ([]byte, error) {
	if v == nil {
		return append(dst, "null"...), nil
	}
	dst = append(dst, '[')
	for i, m := range v {
		if i > 0 {
			dst = append(dst, ',')
		}
		if plainJSON(m) {
			dst = append(dst, m...)
			continue
		}
		b, err := json.Marshal(m)
		if err != nil {
			return dst, fmt.Errorf("operators: json encode: %w", err)
		}
		dst = append(dst, b...)
	}
	return append(dst, ']'), nil
}

// plainJSON reports whether m is valid JSON json.Marshal writes as it is:
// no whitespace, no <, > or &, no U+2028 or U+2029 (whose UTF-8 starts
// with 0xE2), which it would compact or escape.
func plainJSON(m []byte) bool {
	if len(m) == 0 {
		return false
	}
	for _, c := range m {
		switch c {
		case ' ', '\t', '\r', '\n', '<', '>', '&', 0xe2:
			return false
		}
	}
	return gjson.ValidBytes(m)
}

// Decode decodes a JSON array of items (or null: nil), as json.Unmarshal.
func (RawListSerializer) Decode(b []byte) ([]json.RawMessage, error) {
	if gjson.ValidBytes(b) {
		// One copy of b (Decode must not retain it) that the items slice;
		// gjson reads it through a string view, without another copy.
		buf := append([]byte(nil), b...)
		base := unsafe.SliceData(buf)
		switch r := gjson.Parse(unsafe.String(base, len(buf))); {
		case r.Type == gjson.Null:
			return nil, nil
		case r.IsArray():
			out := []json.RawMessage{}
			r.ForEach(func(_, e gjson.Result) bool {
				// e.Raw is a substring of buf: its offset is its address's.
				i := int(uintptr(unsafe.Pointer(unsafe.StringData(e.Raw))) - uintptr(unsafe.Pointer(base)))
				out = append(out, json.RawMessage(buf[i:i+len(e.Raw):i+len(e.Raw)]))
				return true
			})
			return out, nil
		}
	}
	var v []json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("operators: json decode: %w", err)
	}
	return v, nil
}
