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
	// Doc, when not nil and Value is nil, is the undecoded value shared
	// by the Envs of a chain (what JSON is for one Env): the fields and
	// the whole value one Env decoded, the next reads again without
	// decoding. It wins over JSON.
	Doc *Doc
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
	doc     *Doc           // the undecoded value (Input.Doc, or own), or nil
	pending bool           // doc is still to decode whole
	keyRaw  []byte
	ts      int64
	hdrsRaw []Header
	topic   string

	key      any // nil or the key as a string, once keyDone
	keyDone  bool
	headers  map[string]string // once hdrsDone
	hdrsDone bool

	// own is the Doc of Input.JSON, reused from record to record (made on
	// first need, so that an Env of a shared Doc resets in a few stores).
	// While the value is pending, a field is read from the JSON alone.
	own *Doc

	// memo holds the direct evaluator's results of a program's repeated
	// subexpressions (dmemo), kept from record to record; nil until a
	// program with such subexpressions evaluates on the Env.
	memo *dmemoState
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
	*e = Env{own: e.own, memo: e.memo}
	if in == nil {
		return
	}
	e.value = in.Value
	if in.Value == nil {
		switch {
		case in.Doc != nil:
			e.doc = in.Doc
		case in.JSON != nil:
			if e.own == nil {
				e.own = new(Doc)
			}
			e.own.Reset(in.JSON, false)
			e.doc = e.own
		}
		if e.doc != nil {
			e.value, e.pending = e.doc.Decoded()
			e.pending = !e.pending
		}
	}
	e.fields, _ = e.value.(map[string]any)
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
	if e.doc == nil || e.pending {
		return nil, false
	}
	return e.value, true
}

// Doc returns the Doc e reads the value from: Input.Doc, or for
// Input.JSON e's own Doc, valid until the next Reset (not to be kept
// beyond it); nil when the value was given decoded (Input.Value) or there
// is none.
func (e *Env) Doc() *Doc { return e.doc }

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
	if a.pending {
		if v, ok := a.field(name); ok {
			return v, true
		}
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
	a.value = a.doc.Whole()
	a.fields, _ = a.value.(map[string]any)
}

// field returns the top-level field name of the pending value without
// decoding the whole value (an expression reading a few fields of a large
// record decodes only those; Doc), and true; false when the JSON is not
// an object whose fields decode one by one exactly as DecodeJSON decodes
// the whole (invalid JSON, another kind of value, a number DecodeJSON
// could refuse: see fieldwise): then the caller decodes the whole value. A
// field the object lacks is the error value of a missing field. A key that
// repeats gives its last value, as DecodeJSON's map does.
func (a *activation) field(name string) (any, bool) {
	v, found, ok := a.doc.field(name)
	if !ok {
		return nil, false
	}
	if !found {
		// A new error value each time: CEL labels it with the node of
		// the program that reached it.
		return types.NewErr("%s", missing(map[string]any(nil), name)), true
	}
	return v, true
}

// isASCII reports whether s is plain ASCII.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
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
