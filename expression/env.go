package expression

import (
	"fmt"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/interpreter"
)

// The reserved names an expression sees besides the record's fields; they
// win over a field of the same name.
const (
	nameValue     = "value"
	nameKey       = "key"
	nameTimestamp = "timestamp"
	nameHeaders   = "headers"
	nameTopic     = "topic"
)

// Input is what an expression sees of one Kafka record.
type Input struct {
	// Value is the decoded record value, normally from [DecodeJSON]; its
	// top-level fields are bare identifiers when it is a map[string]any.
	// Other Go values are adapted by CEL where it can (nil is null).
	Value any
	// JSON, when not nil and Value is nil, is the undecoded value: the Env
	// decodes it with [DecodeJSON] the first time an expression reads value
	// or a field, so an expression that reads only key, timestamp or
	// headers never decodes it. JSON that does not decode is seen as the
	// string of its bytes.
	JSON []byte
	// Key is the record key, seen as the string key; nil is null, an empty
	// non-nil slice the empty string.
	Key []byte
	// Timestamp is the record time, seen as timestamp in int milliseconds
	// since the Unix epoch (Timestamp.UnixMilli()); the zero Time is 0.
	Timestamp time.Time
	// Headers are the record headers, seen as the map headers from key to
	// string value; when a key repeats, the last header wins.
	Headers []Header
	// Topic is the Kafka topic the record was read from (its
	// runtime.Origin), seen as the string topic; "" when not known.
	Topic string
}

// Header is one Kafka record header.
type Header struct {
	// Key is the header key, the key of the headers map.
	Key string
	// Value is the header value, seen as a string of these bytes.
	Value []byte
}

// Env is the evaluation environment built from one [Input]: build it once
// per record and pass it to every [Program] that evaluates on that record,
// so the key string and the headers map are built at most once.
//
// An Env refers to the Input's value, key and headers without copying
// them; do not modify them while the Env is in use. An Env is not safe for
// concurrent use; the zero Env is an empty record (null value, no key, no
// headers, timestamp 0).
type Env struct {
	value   any
	fields  map[string]any // value as a JSON object, or nil
	json    []byte         // undecoded value, while pending
	pending bool           // json is still to decode
	keyRaw  []byte
	ts      int64
	hdrsRaw []Header
	topic   string

	key      any // nil or the key as a string, once keyDone
	keyDone  bool
	headers  map[string]string // once hdrsDone
	hdrsDone bool
}

// NewEnv returns the Env of in. A nil in is an empty record.
func NewEnv(in *Input) *Env {
	e := new(Env)
	e.Reset(in)
	return e
}

// Reset makes e the Env of in, reusing e's memory; it lets one goroutine
// evaluate record after record without allocating an Env each time. A nil
// in is an empty record.
func (e *Env) Reset(in *Input) {
	*e = Env{}
	if in == nil {
		return
	}
	e.value = in.Value
	e.fields, _ = in.Value.(map[string]any)
	e.json = in.JSON
	e.pending = in.Value == nil && in.JSON != nil
	e.keyRaw = in.Key
	if !in.Timestamp.IsZero() {
		e.ts = in.Timestamp.UnixMilli()
	}
	e.hdrsRaw = in.Headers
	e.topic = in.Topic
}

// Decoded returns the value e decoded from Input.JSON and true once an
// expression read the value or a field (the decode happened); nil and
// false when the value was given decoded (Input.Value) or not decoded
// yet. An operator hands it on with the record, so that the next
// operator's Env starts from it (Input.Value) instead of decoding again.
func (e *Env) Decoded() (any, bool) {
	if e.json == nil || e.pending {
		return nil, false
	}
	return e.value, true
}

// activation is Env as CEL sees it; the conversion from *Env is free and
// keeps ResolveName out of Env's documented methods.
type activation Env

// ResolveName implements interpreter.Activation: reserved names first,
// then the value's top-level fields. A name that is neither resolves to an
// error value, so that reaching it fails the evaluation (rather than CEL
// falling back to a type of that name, as it does for int or string).
func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case nameValue:
		a.decode()
		return a.value, true
	case nameKey:
		if !a.keyDone {
			if a.keyRaw != nil {
				a.key = string(a.keyRaw)
			}
			a.keyDone = true
		}
		return a.key, true
	case nameTimestamp:
		return a.ts, true
	case nameHeaders:
		if !a.hdrsDone {
			a.headers = make(map[string]string, len(a.hdrsRaw))
			for _, h := range a.hdrsRaw {
				a.headers[h.Key] = string(h.Value)
			}
			a.hdrsDone = true
		}
		return a.headers, true
	case nameTopic:
		return a.topic, true
	}
	a.decode()
	if v, ok := a.fields[name]; ok {
		return v, true
	}
	return types.NewErr("%s", missing(a.value, name)), true
}

// decode decodes the undecoded value (Input.JSON) on first need.
func (a *activation) decode() {
	if !a.pending {
		return
	}
	a.pending = false
	v, err := DecodeJSON(a.json)
	if err != nil {
		v = string(a.json)
	}
	a.value = v
	a.fields, _ = v.(map[string]any)
}

// Parent implements interpreter.Activation.
func (a *activation) Parent() interpreter.Activation { return nil }

// missing describes why the bare identifier name has no value in value.
func missing(value any, name string) string {
	switch value.(type) {
	case map[string]any:
		return fmt.Sprintf("no field %q in the record value", name)
	case nil:
		return fmt.Sprintf("no field %q: the record value is null", name)
	case []any:
		return fmt.Sprintf("no field %q: the record value is an array, not an object", name)
	case string:
		return fmt.Sprintf("no field %q: the record value is a string, not an object", name)
	case bool:
		return fmt.Sprintf("no field %q: the record value is a bool, not an object", name)
	case int64, float64:
		return fmt.Sprintf("no field %q: the record value is a number, not an object", name)
	default:
		return fmt.Sprintf("no field %q: the record value is a %T, not a JSON object", name, value)
	}
}
