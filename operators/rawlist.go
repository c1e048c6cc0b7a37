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
	return plainItem(m) && gjson.ValidBytes(m)
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

// Copy implements state.HeapSerializer: the list Decode(Append(v)) would
// return, without the round trip (nil for nil, an empty list for an empty
// one; items json.Marshal would rewrite, rewritten), or the error Append
// would return for an item that is not valid JSON. Items of known[0] (the
// same memory, in its order: a list read with Get, then appended to) and
// items equal to the last item of a known list (the record just stored
// under another rule) are shared and not checked again; the others are
// checked and copied into one new buffer. The matcher's keyed state on
// Pebble is kept decoded this way.
func (RawListSerializer) Copy(v []json.RawMessage, known [][]json.RawMessage) ([]json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	var order []json.RawMessage // known[0], matched in order
	if len(known) > 0 {
		order = known[0]
	}
	out := make([]json.RawMessage, len(v))
	n, j := 0, 0
	for i, m := range v {
		if j < len(order) && sameBytes(m, order[j]) {
			out[i] = order[j]
			j++
			continue
		}
		if k, ok := knownLast(m, known); ok {
			out[i] = k
			continue
		}
		if !plainJSON(m) { // rare: the items as json.Marshal writes them
			b, err := RawListSerializer{}.Append(nil, v)
			if err != nil {
				return nil, err
			}
			return RawListSerializer{}.Decode(b)
		}
		n += len(m)
	}
	if n == 0 {
		return out, nil
	}
	buf := make([]byte, 0, n)
	for i, m := range v {
		if out[i] == nil {
			start := len(buf)
			buf = append(buf, m...)
			out[i] = buf[start:len(buf):len(buf)]
		}
	}
	return out, nil
}

// knownLast returns the last item of a known list equal to m.
func knownLast(m json.RawMessage, known [][]json.RawMessage) (json.RawMessage, bool) {
	for _, l := range known {
		if len(l) > 0 {
			if k := l[len(l)-1]; len(k) == len(m) && string(k) == string(m) {
				return k, true
			}
		}
	}
	return nil, false
}

// AppendKept implements state.HeapSerializer: Append without the checks,
// for a list Copy returned, whose items are as json.Marshal writes them.
func (RawListSerializer) AppendKept(dst []byte, v []json.RawMessage) ([]byte, error) {
	if v == nil {
		return append(dst, "null"...), nil
	}
	dst = append(dst, '[')
	for i, m := range v {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, m...)
	}
	return append(dst, ']'), nil
}

// sameBytes reports whether a and b are the same memory.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && len(a) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// View implements state.HeapSerializer: a new slice of the same items
// (with room for one more: the matcher appends), so the caller may set or
// append items, but must not change an item's bytes in place (they are the
// state's).
func (RawListSerializer) View(v []json.RawMessage) []json.RawMessage {
	if v == nil {
		return nil
	}
	return append(make([]json.RawMessage, 0, len(v)+1), v...)
}

// Size implements state.HeapSerializer: the items' bytes and slice headers.
func (RawListSerializer) Size(v []json.RawMessage) int {
	n := 24 * (len(v) + 1)
	for _, m := range v {
		n += len(m)
	}
	return n
}
