package operators

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// fieldPathRE matches a key_by that is a field path: identifiers joined by
// dots ("color", "user.id").
var fieldPathRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// IsFieldPath reports whether a key_by is a (possibly nested) JSON field
// path rather than an expression.
func IsFieldPath(s string) bool { return fieldPathRE.MatchString(s) }

// NewKeySelector returns the selector of a key_by text: a
// FieldKeySelector for a field path, an ExpressionKeySelector for any other
// text and for a path starting at a name expressions reserve (value, key,
// timestamp, headers: key_by: key is the Kafka key, value.id the id field,
// as in expressions). An expression that does not compile is a
// *CompileError.
func NewKeySelector(keyBy string) (runtime.KeySelector, error) {
	if keyBy == "key" {
		return recordKeySelector{}, nil
	}
	root, _, _ := strings.Cut(keyBy, ".")
	switch {
	case !IsFieldPath(keyBy):
	case root == "value" || root == "key" || root == "timestamp" || root == "headers":
	default:
		return NewFieldKeySelector(keyBy), nil
	}
	sel, err := NewExpressionKeySelector(keyBy)
	if err != nil {
		return nil, err
	}
	return sel, nil
}

// recordKeySelector is key_by: key, the Kafka record key as it is: what the
// expression "key" gives, without an evaluation. A record without a key
// (nil) is a missing_key *runtime.RecordError, as the expression's null
// result is.
type recordKeySelector struct{}

// SelectKey implements runtime.KeySelector.
func (recordKeySelector) SelectKey(rec *runtime.Record) ([]byte, error) {
	if rec.Key == nil {
		return nil, &runtime.RecordError{Reason: runtime.ReasonMissingKey, Detail: `key_by "key": result is null`}
	}
	return rec.Key, nil
}

// FieldKeySelector selects the key of a JSON object value by a field path
// (Flink's KeySelector over a nested field): a JSON string gives its
// characters, a number its JSON text. It implements runtime.KeySelector;
// its *runtime.RecordError reasons are malformed_json, not_object (the
// value, or a step of the path, is not an object), missing_key (absent or
// null) and wrong_type (an object, array or boolean key). The detail starts
// with "key_by PATH: " and says what was found: the JSON syntax error and
// its offset, "user is a JSON number, not an object", "user.id is absent",
// "user.id is null", "color is a JSON object, not a string or number".
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
	if key, ok := fieldKeyFast(rec.Value, s.path, rec.CheckedJSON()); ok {
		return key, nil
	}
	return s.selectKey(rec.Value)
}

// selectKey is SelectKey with encoding/json: every case, and the errors.
func (s *FieldKeySelector) selectKey(value []byte) ([]byte, error) {
	raw := json.RawMessage(value)
	for i, field := range s.path {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			var typeErr *json.UnmarshalTypeError
			if errors.As(err, &typeErr) {
				return nil, s.notObject(i, raw)
			}
			return nil, s.keyError(runtime.ReasonMalformedJSON, runtime.JSONSyntaxDetail(raw))
		}
		if obj == nil {
			return nil, s.notObject(i, raw)
		}
		v, ok := obj[field]
		if !ok {
			return nil, s.keyError(runtime.ReasonMissingKey, strings.Join(s.path[:i+1], ".")+" is absent")
		}
		if string(v) == "null" {
			return nil, s.keyError(runtime.ReasonMissingKey, strings.Join(s.path[:i+1], ".")+" is null")
		}
		raw = v
	}
	switch raw[0] {
	case '"':
		var str string
		if err := json.Unmarshal(raw, &str); err != nil {
			return nil, s.keyError(runtime.ReasonMalformedJSON, runtime.JSONSyntaxDetail(raw))
		}
		return []byte(str), nil
	case '{', '[', 't', 'f':
		return nil, s.keyError(runtime.ReasonWrongType, fmt.Sprintf("%s is a JSON %s, not a string or number", strings.Join(s.path, "."), runtime.JSONKind(raw)))
	}
	return []byte(raw), nil
}

// notObject is the not_object error of step i of the path, whose value raw
// (the record's value when i is 0) is not an object.
func (s *FieldKeySelector) notObject(i int, raw []byte) *runtime.RecordError {
	what := "the value"
	if i > 0 {
		what = strings.Join(s.path[:i], ".")
	}
	return s.keyError(runtime.ReasonNotObject, fmt.Sprintf("%s is a JSON %s, not an object", what, runtime.JSONKind(raw)))
}

// keyError is the bad-record error of reason with the detail "key_by PATH: msg".
func (s *FieldKeySelector) keyError(reason, msg string) *runtime.RecordError {
	return &runtime.RecordError{Reason: reason, Detail: "key_by " + strings.Join(s.path, ".") + ": " + msg}
}

// ExpressionKeySelector selects the key of a record by an expression over
// it (a key_by that is not a field path, such as
// "user.country + '/' + string(user.id)"): a string result gives its bytes,
// a number its JSON text, bytes themselves. It implements
// runtime.KeySelector; its *runtime.RecordError reasons are missing_key (a
// null result), wrong_type (a bool, map or list result) and eval_error (the
// expression fails on the record: a missing field, a wrong type); the
// detail names the expression. Safe for concurrent use by several
// subtasks: each call evaluates in its own environment.
type ExpressionKeySelector struct {
	expr Expression
}

// NewExpressionKeySelector compiles src and returns its selector; a compile
// error is a *CompileError.
func NewExpressionKeySelector(src string) (*ExpressionKeySelector, error) {
	e, err := CompileExpression(src)
	if err != nil {
		return nil, err
	}
	return &ExpressionKeySelector{expr: e}, nil
}

// recordEnvs are the environments ExpressionKeySelector evaluates in,
// one per call at a time: reused from call to call instead of a RecordEnv
// (a few hundred bytes, with its Doc) allocated per record.
var recordEnvs = sync.Pool{New: func() any { return new(RecordEnv) }}

// SelectKey implements runtime.KeySelector.
func (s *ExpressionKeySelector) SelectKey(rec *runtime.Record) ([]byte, error) {
	env := recordEnvs.Get().(*RecordEnv)
	key, err := s.selectKey(env, rec)
	recordEnvs.Put(env)
	return key, err
}

// selectKey is SelectKey in env. The key it returns is its own copy (a
// string result's bytes are copied, a number's JSON is new), so env may
// evaluate the next record at once.
func (s *ExpressionKeySelector) selectKey(env *RecordEnv, rec *runtime.Record) ([]byte, error) {
	v, err := s.expr.Program().Eval(env.Reset(rec))
	if err != nil {
		return nil, EvalRecordError(err)
	}
	switch k := v.(type) {
	case string:
		return []byte(k), nil
	case []byte:
		return k, nil
	case int64, uint64, float64:
		b, err := expression.EncodeJSON(k)
		if err != nil { // NaN or an infinity
			return nil, s.keyError(runtime.ReasonWrongType, err.Error())
		}
		return b, nil
	case nil:
		return nil, s.keyError(runtime.ReasonMissingKey, "result is null")
	default:
		return nil, s.keyError(runtime.ReasonWrongType, "result is a "+expression.TypeName(v)+", not a string or number")
	}
}

// keyError is the bad-record error of a key the expression cannot give.
func (s *ExpressionKeySelector) keyError(reason, msg string) *runtime.RecordError {
	return &runtime.RecordError{Reason: reason, Detail: fmt.Sprintf("key_by %q: %s", s.expr.String(), msg)}
}

// RecordKeySelector selects the record's key as it is: the key an upstream
// stage set (the routing stage of a dynamically keyed type). A nil key is
// a *runtime.RecordError with reason missing_key.
type RecordKeySelector struct{}

// SelectKey implements runtime.KeySelector.
func (RecordKeySelector) SelectKey(rec *runtime.Record) ([]byte, error) {
	if rec.Key == nil {
		return nil, &runtime.RecordError{Reason: runtime.ReasonMissingKey, Detail: "the routing stage set no key"}
	}
	return rec.Key, nil
}
