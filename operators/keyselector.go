package operators

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"

	"github.com/kstreamd/kstreamd/runtime"
)

// fieldPathRE matches a key_by that is a field path: identifiers joined by
// dots ("color", "user.id").
var fieldPathRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// IsFieldPath reports whether a key_by is a (possibly nested) JSON field
// path rather than an expression.
func IsFieldPath(s string) bool { return fieldPathRE.MatchString(s) }

// FieldKeySelector selects the key of a JSON object value by a field path
// (Flink's KeySelector over a nested field): a JSON string gives its
// characters, a number its JSON text. It implements runtime.KeySelector;
// its *runtime.RecordError reasons are malformed_json, not_object (the
// value, or a step of the path, is not an object), missing_key (absent or
// null) and wrong_type (an object, array or boolean key).
type FieldKeySelector struct {
	path []string
}

// NewFieldKeySelector returns the selector of path, a dot-separated field
// path that IsFieldPath accepts.
func NewFieldKeySelector(path string) *FieldKeySelector {
	return &FieldKeySelector{path: strings.Split(path, ".")}
}

// SelectKey implements runtime.KeySelector.
func (s *FieldKeySelector) SelectKey(rec *runtime.Record) ([]byte, error) {
	raw := json.RawMessage(rec.Value)
	for _, field := range s.path {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			var typeErr *json.UnmarshalTypeError
			if errors.As(err, &typeErr) {
				return nil, &runtime.RecordError{Reason: runtime.ReasonNotObject}
			}
			return nil, &runtime.RecordError{Reason: runtime.ReasonMalformedJSON}
		}
		if obj == nil {
			return nil, &runtime.RecordError{Reason: runtime.ReasonNotObject}
		}
		v, ok := obj[field]
		if !ok || string(v) == "null" {
			return nil, &runtime.RecordError{Reason: runtime.ReasonMissingKey, Detail: "key_by " + strings.Join(s.path, ".")}
		}
		raw = v
	}
	switch raw[0] {
	case '"':
		var str string
		if err := json.Unmarshal(raw, &str); err != nil {
			return nil, &runtime.RecordError{Reason: runtime.ReasonMalformedJSON}
		}
		return []byte(str), nil
	case '{', '[', 't', 'f':
		return nil, &runtime.RecordError{Reason: runtime.ReasonWrongType, Detail: "key_by " + strings.Join(s.path, ".")}
	}
	return []byte(raw), nil
}
