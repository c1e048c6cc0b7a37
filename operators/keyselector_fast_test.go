package operators

import (
	"strings"
	"testing"
)

// fieldKeyCases are values and paths on which the fast key path must
// agree with encoding/json's (or leave the value to it).
var fieldKeyCases = []struct{ value, path string }{
	{`{"user":"u1"}`, "user"},
	{`{"user":42}`, "user"},
	{` {"user" : -1.5e3 } `, "user"},
	{`{"user":{"id":"a","id":"b"}}`, "user.id"},      // the last repeated key wins
	{`{"user":"a","user":7}`, "user"},                // the last, of another type
	{`{"user":"caf\u00e9"}`, "user"},                 // an escape: general path
	{`{"user":"café"}`, "user"},                      // non-ASCII: general path
	{`{"us\u0065r":"x","user":"y"}`, "user"},         // an escaped key
	{`{"user":null}`, "user"},                        // null: missing_key
	{`{"other":1}`, "user"},                          // absent
	{`{"user":true}`, "user"},                        // wrong_type
	{`{"user":[1]}`, "user"},                         // wrong_type
	{`{"user":{"id":1}}`, "user"},                    // wrong_type
	{`[1,2]`, "user"},                                // not_object
	{`{"user":1}x`, "user"},                          // malformed
	{`{"user":01}`, "user"},                          // malformed number
	{`{"user":1,}`, "user"},                          // malformed
	{`{"user":"a` + "\x01" + `"}`, "user"},           // a control character: malformed
	{`{"user":{"id":{"x":"deep"}}}`, "user.id.x"},    // nested
	{`{"user":{"id":"a"},"user":"flat"}`, "user.id"}, // the last user is not an object
	{`{"a":"\"","user":"q"}`, "user"},                // an escape elsewhere
	{`{"user":""}`, "user"},                          // the empty string
	{"{\"user\":\"\xff\"}", "user"},                  // invalid UTF-8: general path
	{`{"bid":{"auction":1007,"bidder":1001}}`, "bid.auction"},
}

// TestFieldKeyFast: wherever the fast path answers, its key is the one
// encoding/json's path gives without error; it answers the common cases
// (plain string and number fields, nested, repeated keys).
func TestFieldKeyFast(t *testing.T) {
	answered := 0
	for _, c := range fieldKeyCases {
		checkFieldKeyFast(t, []byte(c.value), c.path)
		if _, ok := fieldKeyFast([]byte(c.value), strings.Split(c.path, ".")); ok {
			answered++
		}
	}
	if answered != 9 {
		t.Errorf("the fast path answered %d cases, want 9", answered)
	}
}

func checkFieldKeyFast(t *testing.T, value []byte, path string) {
	t.Helper()
	s := NewFieldKeySelector(path)
	fast, ok := fieldKeyFast(value, s.path)
	if !ok {
		return
	}
	slow, err := s.selectKey(value)
	if err != nil || string(slow) != string(fast) {
		t.Errorf("%s on %q: fast %q, encoding/json %q (%v)", path, value, fast, slow, err)
	}
}

// FuzzFieldKeyFast compares the fast path with encoding/json's on any
// value.
func FuzzFieldKeyFast(f *testing.F) {
	for _, c := range fieldKeyCases {
		f.Add([]byte(c.value), c.path)
	}
	f.Fuzz(func(t *testing.T, value []byte, path string) {
		if !IsFieldPath(path) {
			return
		}
		checkFieldKeyFast(t, value, path)
	})
}
