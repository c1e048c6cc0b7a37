package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Bad-record reasons: the bounded values of the reason label of
// kstreamd_source_records_skipped_total and of the kstreamd.error header of
// dead-lettered records.
const (
	// ReasonMalformedJSON: a json-format value is not valid JSON.
	ReasonMalformedJSON = "malformed_json"
	// ReasonNotObject: a key field was asked of a JSON value that is not an
	// object.
	ReasonNotObject = "not_object"
	// ReasonMissingKey: the key_by field is absent or null.
	ReasonMissingKey = "missing_key"
	// ReasonWrongType: the key_by value is an object, array or boolean.
	ReasonWrongType = "wrong_type"
	// ReasonEmptyValue: the record has no value.
	ReasonEmptyValue = "empty_value"
	// ReasonTooLarge: the value exceeds the source's max_record_bytes.
	ReasonTooLarge = "too_large"
	// ReasonInvalid: refused by a consumer's check (an undecodable rule).
	ReasonInvalid = "invalid"
	// ReasonEvalError: an expression failed on the record at run time (a
	// missing field, a wrong type); the detail names the expression.
	ReasonEvalError = "eval_error"
	// ReasonEventTimeOutOfRange: the record's event time cannot be right:
	// the windows or timers it needs lie outside int64 milliseconds.
	ReasonEventTimeOutOfRange = "event_time_out_of_range"
)

// Reasons lists every bad-record reason, in the order metrics initialise
// them.
var Reasons = []string{ReasonMalformedJSON, ReasonNotObject, ReasonMissingKey, ReasonWrongType, ReasonEmptyValue, ReasonTooLarge, ReasonInvalid, ReasonEvalError, ReasonEventTimeOutOfRange}

// RecordError says that one record cannot be processed because of what it
// holds (not because the job is broken): a key that cannot be selected, an
// expression that fails on it. Operators and key selectors return it (wrapped
// or not); the task then hands the record to its BadRecordHandler, which
// applies the source's on_error policy, and goes on with the next record.
// Any other error fails the task.
type RecordError struct {
	// Reason is one of Reasons.
	Reason string
	// Detail says what is wrong with the record for a person to read: the
	// key_by and the type it found, the expression and its error, the JSON
	// syntax error and its offset, the size and the limit. Every reason
	// the engine reports carries one; a custom operator's may be "".
	Detail string
}

// Error formats the reason and the detail.
func (e *RecordError) Error() string {
	if e.Detail == "" {
		return "bad record: " + e.Reason
	}
	return fmt.Sprintf("bad record: %s: %s", e.Reason, e.Detail)
}

// BadRecordHandler applies a bad-record policy (fail, skip with a metric, or
// a dead-letter topic) to a record that failed with a *RecordError. It runs
// on the subtask goroutine of the task that met the record and may block
// (a dead-letter write waits for the broker). It returns nil when the record
// was dealt with and the task goes on, or an error that fails the task (the
// fail policy, or a dead-letter write abandoned because ctx ended).
type BadRecordHandler interface {
	HandleBadRecord(ctx context.Context, rec Record, err *RecordError) error
}

// KeySelector extracts the key of a record before it crosses a key-group
// edge (Flink's KeySelector). It returns the serialized key (the bytes key
// groups are computed from) or a *RecordError when the record has no usable
// key. Called on the upstream subtask goroutine; must not keep rec.
type KeySelector interface {
	SelectKey(rec *Record) ([]byte, error)
}

// BadRecordAware is implemented by an Operator that meets bad records
// outside ProcessRecord's return (an async keyed operator runs a record's
// function later, from its mailbox). OperatorTask hands it the handlers of
// its inputs before Open; the operator calls them on the subtask goroutine.
type BadRecordAware interface {
	SetBadRecordHandlers(handlers []BadRecordHandler)
}

// JSONSyntaxDetail is the detail of a ReasonMalformedJSON error for value:
// encoding/json's syntax error and the byte offset it is at, such as
// "invalid character 'n' looking for beginning of object key string at
// offset 2" or "unexpected end of JSON input at offset 14". It returns ""
// for valid JSON.
func JSONSyntaxDetail(value []byte) string {
	var v json.RawMessage
	err := json.Unmarshal(value, &v)
	var se *json.SyntaxError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &se):
		return fmt.Sprintf("%s at offset %d", se.Error(), se.Offset)
	}
	return err.Error()
}

// JSONKind names the type of the valid JSON value v: "object", "array",
// "string", "number", "boolean" or "null" ("" when v is empty).
func JSONKind(v []byte) string {
	v = bytes.TrimLeft(v, " \t\r\n")
	if len(v) == 0 {
		return ""
	}
	switch v[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}
