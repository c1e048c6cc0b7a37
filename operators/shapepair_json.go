package operators

import (
	"encoding/json"

	"github.com/tidwall/gjson"
)

// topLevelString returns the string value of the top-level field name of
// the JSON object value, as json.Unmarshal into a map[string]json.RawMessage
// then into a string would (the last of duplicate fields wins); ok is false
// when value is not valid JSON, not an object, lacks the field, or the field
// is not a string. It walks the object with gjson instead of building the
// map. Strings with escapes or non-ASCII bytes go through json.Unmarshal
// (its invalid UTF-8 replacement). FuzzTopLevelString compares it with
// encoding/json.
func topLevelString(value []byte, name string) (s string, ok bool) {
	if !gjson.ValidBytes(value) {
		return "", false
	}
	r := gjson.ParseBytes(value)
	if !r.IsObject() {
		return "", false
	}
	var raw string
	found := false
	r.ForEach(func(k, v gjson.Result) bool {
		if k.Str == name {
			raw, found = v.Raw, true
		}
		return true
	})
	if !found || len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	if plainASCII(raw[1 : len(raw)-1]) {
		return raw[1 : len(raw)-1], true
	}
	if json.Unmarshal([]byte(raw), &s) != nil {
		return "", false
	}
	return s, true
}

// plainASCII reports whether s holds only printable ASCII other than '"'
// and '\\', with no <, > or &: characters JSON strings carry unescaped and
// json.Marshal writes as they are.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// appendMatch appends the JSON of Match{rule, key, first, second}, the
// bytes json.Marshal writes; first and second must be valid JSON. Plain
// strings and items (plainASCII; plainJSON without its validation) are
// appended as they are, anything else through json.Marshal.
// TestAppendMatch compares it with json.Marshal.
func appendMatch(dst []byte, rule, key string, first, second json.RawMessage) ([]byte, error) {
	return appendMatchPlain(dst, rule, key, first, second, plainASCII(rule) && plainASCII(key) && plainItem(second))
}

// appendMatchPlain is appendMatch for a caller that checked rule, key and
// second once for several matches: plain reports plainASCII(rule),
// plainASCII(key) and plainItem(second).
func appendMatchPlain(dst []byte, rule, key string, first, second json.RawMessage, plain bool) ([]byte, error) {
	if !plain || !plainItem(first) {
		b, err := json.Marshal(Match{Rule: rule, Key: key, First: first, Second: second})
		return append(dst, b...), err
	}
	dst = append(append(append(dst, `{"rule":"`...), rule...), `","key":"`...)
	dst = append(append(append(dst, key...), `","first":`...), first...)
	return append(append(append(dst, `,"second":`...), second...), '}'), nil
}

// matchSize is the length of appendMatch's output when every part is
// plain (else a lower bound: a capacity hint).
func matchSize(rule, key string, first, second json.RawMessage) int {
	return len(`{"rule":"","key":"","first":,"second":}`) + len(rule) + len(key) + len(first) + len(second)
}

// plainItem is plainJSON without the validation: m has no byte
// json.Marshal would compact or escape in a RawMessage.
func plainItem(m []byte) bool {
	if len(m) == 0 {
		return false
	}
	for _, c := range m {
		switch c {
		case ' ', '\t', '\r', '\n', '<', '>', '&', 0xe2:
			return false
		}
	}
	return true
}
