package operators

import (
	"encoding/json"
	"unsafe"

	"github.com/tidwall/gjson"
)

// fieldKeyFast is FieldKeySelector.SelectKey's common case without
// encoding/json's map per step: the value is checked with json.Valid (the
// scanner json.Unmarshal runs, so exactly the values it accepts) and the
// path walked with gjson, the last of repeated keys winning as in
// Unmarshal's map. ok is false whenever the answer could differ from the
// general path's or be an error: a step that is not an object, a key
// missing or null, a key or string with escapes or non-ASCII bytes, a key
// that is an object, array or boolean; SelectKey then takes the general
// path, which gives the errors. The key is a new slice (value is read in
// place, not copied). checked is true
// when value is already known to be one valid JSON value
// (runtime.Record.CheckedJSON: the source's check, or a ValidJSON mark
// across a key_by): json.Valid, about half of this read, is then skipped
// but on a value long enough to nest deeper than encoding/json allows
// (minTooDeepJSON).
func fieldKeyFast(value []byte, path []string, checked bool) (key []byte, ok bool) {
	if len(value) == 0 || ((!checked || len(value) >= minTooDeepJSON) && !json.Valid(value)) {
		return nil, false
	}
	// gjson reads value in place (ParseBytes would copy it to a string):
	// the key returned is a copy, and nothing gjson returns outlives this
	// call.
	r := gjson.Parse(unsafe.String(unsafe.SliceData(value), len(value)))
	for _, field := range path {
		if !r.IsObject() {
			return nil, false
		}
		var found gjson.Result
		plain := true
		r.ForEach(func(k, v gjson.Result) bool {
			if !plainJSONString(k.Raw) {
				plain = false
				return false
			}
			if k.Raw[1:len(k.Raw)-1] == field {
				found = v // the last one wins
			}
			return true
		})
		if !plain || !found.Exists() || found.Type == gjson.Null {
			return nil, false
		}
		r = found
	}
	switch r.Type {
	case gjson.String:
		if !plainJSONString(r.Raw) {
			return nil, false
		}
		return []byte(r.Raw[1 : len(r.Raw)-1]), true
	case gjson.Number:
		return []byte(r.Raw), true
	}
	return nil, false
}

// minTooDeepJSON is the length of the shortest JSON value nested deeper
// than encoding/json's 10000 levels (10001 brackets opened and closed).
// The check that marks a record checked (gjson's) accepts such nesting and
// encoding/json, which the general path decodes with, does not: a checked
// value this long is checked again, so the fast path never reads a key
// where the general path gives malformed_json.
const minTooDeepJSON = 2 * 10001

// plainJSONString reports whether raw is a JSON string literal of plain
// ASCII without escapes: its characters are the bytes between the quotes.
func plainJSONString(raw string) bool {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return false
	}
	for i := 1; i < len(raw)-1; i++ {
		if c := raw[i]; c == '\\' || c >= 0x80 || c < 0x20 {
			return false
		}
	}
	return true
}
