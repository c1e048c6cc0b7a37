package operators

import (
	"errors"
	"fmt"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// This file is the one place operators meet the expression package: the
// params types an expression is written in (Expression, BoolExpression,
// ListExpression), the record an expression sees (RecordEnv) and the bad
// record an evaluation failure becomes (EvalRecordError).

// Expression is an expression in operator params, of any result type: a
// params field of this type is compiled when the pipeline decodes it
// (UnmarshalText), so an expression that does not compile is a config error
// at its FILE:LINE:COL. The zero Expression is unset (IsSet is false).
type Expression struct {
	prog *expression.Program
}

// BoolExpression is an Expression whose result must be a bool (filter's
// condition): one known not to be is refused at compile time, one that is
// not a bool on a record is an evaluation error.
type BoolExpression struct{ Expression }

// ListExpression is an Expression whose result must be a list (flat_map's
// values), checked as BoolExpression checks a bool.
type ListExpression struct{ Expression }

// CompileError is an expression of operator params that did not compile. It
// wraps the *expression.CompileError (errors.As finds it) and has Position,
// the 1-based line and column within the expression text, with which the
// pipeline decoder reports the error at the exact place in the file.
type CompileError struct {
	*expression.CompileError
}

// Position returns the 1-based line and column of the error within the
// expression text (1:1 for an error about the whole expression).
func (e *CompileError) Position() (line, col int) { return e.Line, e.Column }

// Unwrap returns the *expression.CompileError.
func (e *CompileError) Unwrap() error { return e.CompileError }

// CompileExpression compiles src with opts; a compile error is a
// *CompileError when the expression package reports its position.
func CompileExpression(src string, opts ...expression.Option) (Expression, error) {
	p, err := expression.Compile(src, opts...)
	if err != nil {
		var ce *expression.CompileError
		if errors.As(err, &ce) {
			return Expression{}, &CompileError{ce}
		}
		return Expression{}, err
	}
	return Expression{prog: p}, nil
}

// UnmarshalText implements encoding.TextUnmarshaler: it compiles text.
func (e *Expression) UnmarshalText(text []byte) error {
	x, err := CompileExpression(string(text))
	*e = x
	return err
}

// UnmarshalText implements encoding.TextUnmarshaler: it compiles text,
// refusing a result type known not to be bool.
func (e *BoolExpression) UnmarshalText(text []byte) error {
	x, err := CompileExpression(string(text), expression.ExpectBool())
	e.Expression = x
	return err
}

// UnmarshalText implements encoding.TextUnmarshaler: it compiles text,
// refusing a result type known not to be a list.
func (e *ListExpression) UnmarshalText(text []byte) error {
	x, err := CompileExpression(string(text), expression.ExpectList())
	e.Expression = x
	return err
}

// IsSet reports whether the expression was given (compiled).
func (e Expression) IsSet() bool { return e.prog != nil }

// Program returns the compiled program; nil when unset.
func (e Expression) Program() *expression.Program { return e.prog }

// String returns the expression text; "" when unset.
func (e Expression) String() string {
	if e.prog == nil {
		return ""
	}
	return e.prog.Source()
}

// MarshalText returns the expression text (the inverse of UnmarshalText),
// so params holding expressions encode as their source, as the graph
// fingerprint needs.
func (e Expression) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// RecordEnv is the environment expressions evaluate in, one record at a
// time (expression.Env over a runtime.Record): Reset decodes the record's
// value once, and every expression of the operator then evaluates on the
// returned Env. What an expression sees:
//   - value: the value decoded by expression.DecodeJSON, when an expression
//     first reads value or a field (an expression of key, timestamp or
//     headers alone does not decode it); a value that is not
//     valid JSON (string and bytes source formats) is seen as a string of
//     its bytes, and a nil value (a Kafka tombstone) as null;
//   - its top-level fields, when the value is a JSON object (an
//     expression reading fields only reads them from the JSON alone, the
//     whole value being decoded only when an expression reads value;
//     expression.Env);
//   - key: the key as a string (null when nil);
//   - timestamp: the record time in milliseconds since the Unix epoch;
//   - headers: header key to string value (the last of a repeated key);
//   - topic: the Kafka topic the record was read from (its Origin).
//
// The zero RecordEnv is ready for use. It is owned by one goroutine (a
// subtask's); the Env Reset returns is valid until the next Reset and
// refers to the record's key and headers without copying them.
type RecordEnv struct {
	// src is the value of the record Reset was given, for Keep.
	src     []byte
	in      expression.Input
	headers []expression.Header
	env     expression.Env
	// own is the Doc of a record that came with none, reused from record
	// to record; Keep hands it on in slot (no copy): a record handed on
	// earlier (kept by an operator downstream) no longer finds it once
	// own is Reset for the next record (runtime.DecodedSlot), and decodes
	// its own bytes again if it is evaluated later.
	own  expression.Doc
	slot runtime.DecodedSlot
}

// resetOwn makes own the Doc of b, first taking it from every record it
// was handed on with.
func (e *RecordEnv) resetOwn(b []byte, valid bool) {
	e.slot.Clear()
	e.own.Reset(b, valid)
}

// Reset makes e the environment of rec and returns it.
func (e *RecordEnv) Reset(rec *runtime.Record) *expression.Env {
	e.in.Value, e.in.JSON = nil, nil
	e.src = rec.Value
	e.in.Doc = nil
	if rec.Format == runtime.FormatText {
		e.in.Value = string(rec.Value) // a string or bytes source: never decoded
	} else if v, ok := rec.Decoded(); ok {
		switch d := v.(type) {
		case *expression.Doc:
			e.in.Doc = d // read (fields, or whole) by an operator before this one in the chain
		case runtime.ValidJSON:
			// Checked by the source, or written by an operator: not
			// checked again.
			e.resetOwn(rec.Value, true)
			e.in.Doc = &e.own
		default:
			e.in.Value = v // decoded by an operator before this one in the chain
		}
	} else if rec.Value != nil {
		// Read on first need, and only the fields read: an expression of
		// key alone never decodes it.
		e.resetOwn(rec.Value, false)
		e.in.Doc = &e.own
	}
	e.in.Key = rec.Key
	e.in.Timestamp = rec.Timestamp
	e.in.Topic = rec.Origin.Topic
	e.headers = e.headers[:0]
	for _, h := range rec.Headers {
		e.headers = append(e.headers, expression.Header(h))
	}
	e.in.Headers = e.headers
	e.env.Reset(&e.in)
	return &e.env
}

// Keep attaches to rec what the environment read of rec's value
// (runtime.Record.SetDecoded): the fields its expressions read from the
// JSON, or the whole value they decoded (an expression.Doc, or the value
// itself). An operator that passes rec on with its value unchanged calls
// it, so that the next operator of the chain reads the value without
// checking or decoding the JSON again (one decode per record per chain).
// A record whose value is not the one e was Reset with (the same bytes)
// gets nothing.
func (e *RecordEnv) Keep(rec *runtime.Record) {
	if len(rec.Value) == 0 || len(rec.Value) != len(e.src) || &rec.Value[0] != &e.src[0] {
		return
	}
	if e.in.Doc == &e.own {
		// Reused by the next Reset, which takes it back from rec first.
		rec.SetDecodedIn(&e.slot, &e.own)
		return
	}
	if e.in.Doc != nil {
		if v, ok := rec.Decoded(); !ok || v != any(e.in.Doc) {
			rec.SetDecoded(e.in.Doc)
		}
	}
}

// Value returns the value of the record e was Reset with as its
// expressions see it (value): decoded at most once per chain (through the
// record's expression.Doc), the string of its bytes for a text format or
// a value that is not JSON, nil for a nil value. For an operator that
// hands the whole value to an expression of its own (a join's select).
func (e *RecordEnv) Value() any {
	if e.src == nil {
		return nil
	}
	if e.in.Doc != nil {
		return e.in.Doc.Whole()
	}
	return e.in.Value
}

// EvalRecordError turns an evaluation failure into the bad record it is:
// an *expression.EvalError (wrapped or not) becomes a *runtime.RecordError
// with reason eval_error whose detail is the error's text (the expression
// and the reason, as `expression "amount > 100": no such overload`); the
// record then meets its source's on_error policy. Any other error, and nil,
// is returned as it is.
func EvalRecordError(err error) error {
	var ee *expression.EvalError
	if errors.As(err, &ee) {
		return &runtime.RecordError{Reason: runtime.ReasonEvalError, Detail: ee.Error()}
	}
	return err
}

// resultError is the eval_error of an expression whose result cannot be
// used, formatted as the expression package formats evaluation errors:
// what names the use ("key", "header x-id"), msg says why.
func resultError(e Expression, what, msg string) error {
	return EvalRecordError(&expression.EvalError{Expr: e.String(), Err: fmt.Errorf("%s %s", what, msg)})
}
