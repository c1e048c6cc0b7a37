package operators

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
)

// topLevelString returns the string value of the top-level field name of
// the JSON object value, as json.Unmarshal into a map[string]json.RawMessage
// then into a string would (the last of duplicate fields wins); ok is false
// when value is not valid JSON, not an object, lacks the field, or the field
// is not a string. A plain ASCII string is returned without a copy: it
// shares value's memory and is valid while value is unchanged. ok true
// means value is valid JSON. It validates value with gjson, then walks the object's
// top level itself (no copy of value, no value parsed but the field's).
// Keys with escapes and strings with escapes or non-ASCII bytes go through
// json.Unmarshal (its unescaping and invalid UTF-8 replacement).
// FuzzTopLevelString compares it with encoding/json.
func topLevelString(value []byte, name string) (s string, ok bool) {
	if !gjson.ValidBytes(value) {
		return "", false
	}
	return checkedTopLevelString(value, name)
}

// checkedTopLevelString is topLevelString of a value known to be valid
// JSON (runtime.ValidJSON: the source checked it), without checking it
// again.
func checkedTopLevelString(value []byte, name string) (s string, ok bool) {
	i := skipSpace(value, 0)
	if i >= len(value) || value[i] != '{' {
		return "", false
	}
	var raw []byte
	found := false
	for i++; ; {
		i = skipSpace(value, i)
		if i >= len(value) || value[i] == '}' {
			break
		}
		if value[i] == ',' {
			i++
			continue
		}
		kend := skipString(value, i)
		key := value[i:kend]
		i = skipSpace(value, kend) + 1 // past ':'
		i = skipSpace(value, i)
		vend := skipValue(value, i)
		if keyIs(key, name) {
			raw, found = value[i:vend], true
			if !mayHoldKey(value[vend:], name) {
				break // no later duplicate can replace it
			}
		}
		i = vend
	}
	if !found || len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if inner := raw[1 : len(raw)-1]; plainASCII(unsafe.String(unsafe.SliceData(inner), len(inner))) {
		return unsafe.String(unsafe.SliceData(inner), len(inner)), true
	}
	var u string // not s: a result whose address is taken escapes on every call
	if json.Unmarshal(raw, &u) != nil {
		return "", false
	}
	return u, true
}

// keyIs reports whether the JSON string key (with its quotes) decodes to
// name.
func keyIs(key []byte, name string) bool {
	inner := key[1 : len(key)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner) == name
	}
	var k string
	return json.Unmarshal(key, &k) == nil && k == name
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// mayHoldKey reports whether rest (the object after a field named name)
// may hold another key that decodes to name, which json.Unmarshal would
// take instead (the last duplicate wins): for a plain ASCII name, only if
// rest holds name's bytes or a backslash (an escape could spell it); for
// any other name, always.
func mayHoldKey(rest []byte, name string) bool {
	return !plainASCII(name) || bytes.IndexByte(rest, '\\') >= 0 || bytes.Contains(rest, unsafe.Slice(unsafe.StringData(name), len(name)))
}

// skipString returns the index after the JSON string starting at b[i]
// (valid JSON: b[i] is its opening quote): the first quote after it that
// an even run of backslashes precedes, found with bytes.IndexByte.
func skipString(b []byte, i int) int {
	for i++; i < len(b); {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		q := i + j
		n := 0
		for p := q - 1; p >= i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		i = q + 1 // an escaped quote
	}
	return len(b)
}

// skipValue returns the index after the JSON value starting at b[i], in
// valid JSON.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
		i++
	}
	return i
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
	return appendMatchKept(dst, rule, key, first, second, plainASCII(rule) && plainASCII(key) && plainItem(second) && plainItem(first))
}

// appendMatchKept is appendMatch for a caller that checked the parts once
// for several matches: plain reports plainASCII(rule), plainASCII(key),
// plainItem(second) and plainItem(first), which holds for every stored
// item of ShapePairLists (kept as json.Marshal writes it).
func appendMatchKept(dst []byte, rule, key string, first, second json.RawMessage, plain bool) ([]byte, error) {
	if !plain {
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
	// A table lookup per byte, 8 bytes per step: the or of the table's
	// entries is 0 only when none is a byte json.Marshal changes.
	var bad byte
	for len(m) >= 8 {
		bad |= notPlain[m[0]] | notPlain[m[1]] | notPlain[m[2]] | notPlain[m[3]] |
			notPlain[m[4]] | notPlain[m[5]] | notPlain[m[6]] | notPlain[m[7]]
		m = m[8:]
	}
	for _, c := range m {
		bad |= notPlain[c]
	}
	return bad == 0
}

// notPlain is 1 at the bytes json.Marshal compacts or escapes in a
// RawMessage (whitespace, <, > and &, 0xE2: the first byte of U+2028 and
// U+2029), 0 elsewhere.
var notPlain = [256]byte{' ': 1, '\t': 1, '\r': 1, '\n': 1, '<': 1, '>': 1, '&': 1, 0xe2: 1}
