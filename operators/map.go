package operators

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// MapType is the pipeline name of the map operator.
const MapType = "map"

// MapParams are map's params; at least one field must be set.
type MapParams struct {
	// Value, when set, replaces the record's value with its result,
	// JSON-encoded. Unset keeps the value.
	Value Expression `yaml:"value" doc:"An expression whose result, as JSON, replaces the value, such as {\"id\": id, \"amount\": amount}; default: the value is kept."`
	// Key, when set, replaces the record's (Kafka) key with its result: a
	// string's bytes, a number's JSON text, bytes as they are; null removes
	// the key. Unset keeps the key.
	Key Expression `yaml:"key" doc:"An expression giving the Kafka key: a string, a number (its JSON text) or null (no key); default: the key is kept."`
	// Headers set headers: name to an expression giving the header's value
	// (a string or bytes). A header set replaces every header of that name.
	Headers map[string]Expression `yaml:"headers" doc:"Header name to an expression giving its string value, replacing the headers of that name; default: none."`
	// DropHeaders are header names removed from the record.
	DropHeaders []string `yaml:"drop_headers" doc:"Names of headers removed from the record; default: none."`
}

// CheckParams implements ParamsChecker.
func (p *MapParams) CheckParams(report func(field, msg string)) {
	if !p.Value.IsSet() && !p.Key.IsSet() && len(p.Headers) == 0 && len(p.DropHeaders) == 0 {
		report("value", "required (or at least one of key, headers, drop_headers)")
	}
	for name, e := range p.Headers {
		if name == "" {
			report("headers", "a header name is empty")
		}
		if !e.IsSet() {
			report("headers."+name, "required: an expression giving the header value")
		}
	}
	for i, name := range p.DropHeaders {
		switch {
		case name == "":
			report(fmt.Sprintf("drop_headers[%d]", i), "empty header name")
		case p.Headers[name].IsSet():
			report(fmt.Sprintf("drop_headers[%d]", i), fmt.Sprintf("header %q is also set in headers", name))
		}
	}
}

// Map transforms each record into one record (Flink's DataStream.map with a
// MapFunction): it replaces the value, the key and headers with the
// results of expressions over the record, each evaluated on the input
// record; what is not set is kept, and the timestamp and origin always
// are. Headers named in drop_headers are removed, then those in headers set
// (in name order, after the headers kept). A record on which an expression
// fails, or yields a key, header or value of a type it cannot take, is a
// bad record with reason eval_error and emits nothing.
type Map struct {
	value, key Expression
	headers    []headerExpr // sorted by name
	drop       []string     // names removed, those set included
	env        RecordEnv
	sizeHint   int // bytes to allocate for the next value: about the last one's
	// lends is whether the collector lends values (ValueLender), asked
	// at the first value written: 0 before, then lendYes or lendNo. When
	// it does, every value is written into lent, one buffer reused from
	// record to record (everything downstream copies it).
	lends int8
	lent  []byte
	// mark holds the decoded form of the value written last (its JSON
	// known valid, or the Go value it encodes), attached to its record
	// without an allocation per record (runtime.DecodedSlot).
	mark runtime.DecodedSlot
}

// headerExpr is one header map sets.
type headerExpr struct {
	name string
	expr Expression
}

// NewMap returns the map of p.
func NewMap(p *MapParams) *Map {
	m := &Map{value: p.Value, key: p.Key, drop: slices.Clone(p.DropHeaders)}
	for name, e := range p.Headers {
		m.headers = append(m.headers, headerExpr{name: name, expr: e})
		m.drop = append(m.drop, name)
	}
	sort.Slice(m.headers, func(i, j int) bool { return m.headers[i].name < m.headers[j].name })
	return m
}

func mapFactory() Factory {
	return Factory{
		Type:   MapType,
		Doc:    "Replaces each record's value, key or headers with the results of expressions over it.",
		Traits: Traits{Changelog: ChangelogTraits{Forwards: true}},
		Params: func() any { return &MapParams{} },
		New: func(ctx FactoryContext) (any, error) {
			return NewMap(ctx.Params.(*MapParams)), nil
		},
	}
}

// Open implements ProcessFunction.
func (m *Map) Open(OpenContext) error { return nil }

// ProcessElement implements ProcessFunction.
//
// A tombstone of an upsert changelog (a -D with a null value, as a table
// source emits for a deleted row) keeps its null value: the value
// expression is not evaluated (the row is unknown, and the tombstone
// deletes the key's row whatever its shape); key and headers are.
func (m *Map) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	env := m.env.Reset(&rec)
	o := rec
	if m.value.IsSet() && !(rec.Change == runtime.ChangeDelete && rec.Value == nil) {
		// Evaluated and encoded at once (EvalJSON writes what EncodeJSON
		// writes of Eval's result; a map literal's straight from CEL's
		// values), into a new slice (the record may be held downstream,
		// in a sink's buffer, after this returns) or the lent buffer.
		b, v, same, err := m.value.Program().EvalJSON(m.valueBuf(out), env)
		if err != nil {
			var ee *expression.EvalError
			if errors.As(err, &ee) {
				return EvalRecordError(err)
			}
			return resultError(m.value, "value", "is not JSON: "+err.Error())
		}
		if m.lends == lendYes {
			m.lent = b // keeps what it grew to
		} else {
			m.sizeHint = len(b) + len(b)/8
		}
		o.Value = b
		o.Format = runtime.FormatJSON
		// The next operator of the chain reads the result without
		// decoding it (it is what the JSON decodes to), or at least
		// without checking the JSON again. The slot describes only
		// this record's bytes, so a record held downstream past the
		// next one finds nothing there, as one never marked.
		m.mark.Clear()
		if same {
			o.SetDecodedIn(&m.mark, v)
		} else {
			o.SetDecodedIn(&m.mark, runtime.ValidJSON{})
		}
	}
	if m.key.IsSet() {
		v, err := m.key.Program().Eval(env)
		if err != nil {
			return EvalRecordError(err)
		}
		switch k := v.(type) {
		case nil:
			o.Key = nil
		case string:
			o.Key = []byte(k)
		case []byte:
			o.Key = k
		case int64, uint64, float64:
			if o.Key, err = expression.EncodeJSON(k); err != nil {
				return resultError(m.key, "key", "is not a JSON number: "+err.Error())
			}
		default:
			return resultError(m.key, "key", "must be a string, a number or null, got "+expression.TypeName(v))
		}
	}
	if len(m.drop) > 0 {
		o.Headers = make([]runtime.Header, 0, len(rec.Headers)+len(m.headers))
		for _, h := range rec.Headers {
			if !slices.Contains(m.drop, h.Key) {
				o.Headers = append(o.Headers, h)
			}
		}
		for _, h := range m.headers {
			v, err := h.expr.Program().Eval(env)
			if err != nil {
				return EvalRecordError(err)
			}
			switch s := v.(type) {
			case string:
				o.Headers = append(o.Headers, runtime.Header{Key: h.name, Value: []byte(s)})
			case []byte:
				o.Headers = append(o.Headers, runtime.Header{Key: h.name, Value: s})
			default:
				return resultError(h.expr, "header "+h.name, "must be a string, got "+expression.TypeName(v))
			}
		}
		if len(o.Headers) == 0 {
			o.Headers = nil
		}
	}
	m.env.Keep(&o) // only while o's value is rec's (runtime.Record.Decoded)
	return out.Collect(o)
}

// valueBuf returns the empty buffer the next value is written into: the
// lent one when out lends values (ValueLender: the sink chained after the
// map copies each value before Collect returns), else a new one of about
// the last value's size.
func (m *Map) valueBuf(out Collector) []byte {
	if m.lends == 0 {
		m.lends = lendNo
		if l, ok := out.(ValueLender); ok && l.LendsValues() {
			m.lends = lendYes
		}
	}
	if m.lends == lendYes {
		return m.lent[:0]
	}
	return make([]byte, 0, m.sizeHint)
}
