package operators

import (
	"errors"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// TestKeySelectorErrors checks the reason and the exact detail of every
// bad-record error a key selector gives (the kstreamd.error header of a
// dead-lettered record is "reason: detail"), and the keys it selects.
func TestKeySelectorErrors(t *testing.T) {
	for _, tc := range []struct {
		keyBy, value string
		key          string
		reason       string
		detail       string
	}{
		{keyBy: "color", value: `{"color":"red"}`, key: "red"},
		{keyBy: "user.id", value: `{"user":{"id":42}}`, key: "42"},
		{keyBy: "color", value: `{not json`, reason: runtime.ReasonMalformedJSON,
			detail: "key_by color: invalid character 'n' looking for beginning of object key string at offset 2"},
		{keyBy: "color", value: `{"color":"red"`, reason: runtime.ReasonMalformedJSON,
			detail: "key_by color: unexpected end of JSON input at offset 14"},
		{keyBy: "color", value: `["red"]`, reason: runtime.ReasonNotObject,
			detail: "key_by color: the value is a JSON array, not an object"},
		{keyBy: "color", value: `null`, reason: runtime.ReasonNotObject,
			detail: "key_by color: the value is a JSON null, not an object"},
		{keyBy: "user.id", value: `{"user":7}`, reason: runtime.ReasonNotObject,
			detail: "key_by user.id: user is a JSON number, not an object"},
		{keyBy: "user.id", value: `{"user":{}}`, reason: runtime.ReasonMissingKey,
			detail: "key_by user.id: user.id is absent"},
		{keyBy: "user.id", value: `{"user":null}`, reason: runtime.ReasonMissingKey,
			detail: "key_by user.id: user is null"},
		{keyBy: "color", value: `{"color":null}`, reason: runtime.ReasonMissingKey,
			detail: "key_by color: color is null"},
		{keyBy: "color", value: `{"color":{"name":"red"}}`, reason: runtime.ReasonWrongType,
			detail: "key_by color: color is a JSON object, not a string or number"},
		{keyBy: "color", value: `{"color":true}`, reason: runtime.ReasonWrongType,
			detail: "key_by color: color is a JSON boolean, not a string or number"},
		{keyBy: "color + '/' + shape", value: `{"color":"red","shape":"CIRCLE"}`, key: "red/CIRCLE"},
		{keyBy: "size(color) > 2 ? null : color", value: `{"color":"red"}`, reason: runtime.ReasonMissingKey,
			detail: `key_by "size(color) > 2 ? null : color": result is null`},
		{keyBy: "color == 'red'", value: `{"color":"red"}`, reason: runtime.ReasonWrongType,
			detail: `key_by "color == 'red'": result is a bool, not a string or number`},
	} {
		sel, err := NewKeySelector(tc.keyBy)
		if err != nil {
			t.Fatalf("NewKeySelector(%q): %v", tc.keyBy, err)
		}
		key, err := sel.SelectKey(&runtime.Record{Value: []byte(tc.value)})
		var re *runtime.RecordError
		switch {
		case tc.reason == "" && (err != nil || string(key) != tc.key):
			t.Errorf("key_by %s of %s = %q, %v; want key %q", tc.keyBy, tc.value, key, err, tc.key)
		case tc.reason != "" && (!errors.As(err, &re) || re.Reason != tc.reason || re.Detail != tc.detail):
			t.Errorf("key_by %s of %s: error %#v, want reason %s detail %q", tc.keyBy, tc.value, err, tc.reason, tc.detail)
		}
	}
}
