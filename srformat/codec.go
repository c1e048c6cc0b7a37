package srformat

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/sr"
)

// Kind is a Schema Registry format: the config's format value.
type Kind string

// Kinds of Schema Registry formats.
const (
	// KindAvro is Apache Avro binary (Confluent's KafkaAvroSerializer;
	// github.com/twmb/avro encodes, decodes and resolves schemas). The JSON
	// shape of an Avro value:
	//
	//   - null, boolean, string and enum (its symbol) are the JSON value;
	//     int and long are JSON integers, float and double JSON numbers
	//     (NaN and the infinities as the strings "NaN", "Infinity",
	//     "-Infinity");
	//   - bytes and fixed are base64 strings (standard alphabet, padded);
	//   - array is an array, map an object, record an object with the fields
	//     in schema order;
	//   - a union is its branch's value, untagged (null is null); encoding
	//     picks the first branch the JSON value fits;
	//   - logical types: decimal (bytes or fixed) is an exact decimal string
	//     with the schema's scale ("12.30"), so no precision is lost to
	//     float64 (encoding accepts a string or a JSON number);
	//     timestamp-millis, timestamp-micros and timestamp-nanos (and their
	//     local- forms) are integers since the Unix epoch in the schema's unit;
	//     time-millis and time-micros integers since midnight in theirs; date
	//     is a "YYYY-MM-DD" string (encoding also takes days since the epoch);
	//     uuid is its string.
	KindAvro Kind = "avro"
	// KindProtobuf is Protocol Buffers binary with the message indexes
	// (Confluent's KafkaProtobufSerializer). The JSON shape is the proto3
	// JSON mapping (google.golang.org/protobuf/encoding/protojson) with the
	// .proto field names and every field present (defaults included):
	// nested messages are objects, repeated fields arrays, enums their value
	// names, 64-bit integers strings (the mapping's rule), bytes base64.
	// Encoding accepts the .proto and the lowerCamel names and drops fields
	// the message does not have.
	KindProtobuf Kind = "protobuf"
	// KindJSONSchema is JSON text validated against a JSON Schema
	// (Confluent's KafkaJsonSchemaSerializer): the JSON shape is the
	// value itself, validated at the source and at the sink.
	KindJSONSchema Kind = "json_schema"
)

// Kinds returns every Kind in the order messages and the README list them.
func Kinds() []Kind { return []Kind{KindAvro, KindProtobuf, KindJSONSchema} }

// Valid reports whether k is one of Kinds.
func (k Kind) Valid() bool {
	switch k {
	case KindAvro, KindProtobuf, KindJSONSchema:
		return true
	}
	return false
}

// schemaType is k's Schema Registry schema type.
func (k Kind) schemaType() sr.SchemaType {
	switch k {
	case KindProtobuf:
		return sr.TypeProtobuf
	case KindJSONSchema:
		return sr.TypeJSON
	}
	return sr.TypeAvro
}

// Bad-record reasons of a Decoder (the source's on_error policy, metric
// label kstreamd_source_records_skipped_total{reason} and the dead letter's
// error header).
const (
	// ReasonSchemaNotFound: the value's schema id is not in the registry.
	ReasonSchemaNotFound = "schema_not_found"
	// ReasonDecodeError: the value is not in the Confluent framing, or its
	// bytes do not decode with the schema of its id (or, for JSON Schema,
	// do not validate).
	ReasonDecodeError = "decode_error"
)

// DecodeError is a value a Decoder could not decode: a bad record.
type DecodeError struct {
	// Reason is ReasonSchemaNotFound or ReasonDecodeError.
	Reason string
	// SchemaID is the id the value's framing names; -1 if the framing
	// itself is broken.
	SchemaID int
	// Err is the cause.
	Err error
}

// Error implements error: "schema id 7: <cause>".
func (e *DecodeError) Error() string { return e.Detail() }

// Unwrap returns the cause.
func (e *DecodeError) Unwrap() error { return e.Err }

// Detail is the bad record's detail text, naming the schema id.
func (e *DecodeError) Detail() string {
	if e.SchemaID < 0 {
		return e.Err.Error()
	}
	return "schema id " + strconv.Itoa(e.SchemaID) + ": " + e.Err.Error()
}

// codec is one compiled schema of a Kind.
type codec interface {
	// decode appends the JSON of the body b (after the framing) to dst;
	// index is the Protobuf message index path (nil otherwise).
	decode(dst, b []byte, index []int) ([]byte, error)
	// encode appends the body of the JSON value v to dst.
	encode(dst, v []byte) ([]byte, error)
	// index is the Protobuf message index path of encoded values.
	index() []int
}

// compile compiles s (with its references, fetched from reg) as k; reader,
// if not empty, is the Avro reader schema, msg the Protobuf message name.
func compile(ctx context.Context, k Kind, reg *Registry, s sr.Schema, reader *avroReader, msg string) (codec, error) {
	switch k {
	case KindAvro:
		return compileAvro(s.Schema, reader)
	case KindProtobuf:
		files, err := references(ctx, reg, s.References, nil)
		if err != nil {
			return nil, err
		}
		return compileProtobuf(s.Schema, files, msg)
	case KindJSONSchema:
		return compileJSONSchema(s.Schema)
	}
	return nil, fmt.Errorf("unknown format %q", k)
}

// references fetches the schemas s references (recursively), by name.
func references(ctx context.Context, reg *Registry, refs []sr.SchemaReference, into map[string]string) (map[string]string, error) {
	if into == nil {
		into = map[string]string{}
	}
	for _, ref := range refs {
		if _, ok := into[ref.Name]; ok {
			continue
		}
		var ss sr.SubjectSchema
		err := reg.Do(ctx, "get referenced schema "+ref.Subject, func(ctx context.Context) error {
			var err error
			ss, err = reg.cl.SchemaByVersion(ctx, ref.Subject, ref.Version)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("reference %s (subject %s version %d): %w", ref.Name, ref.Subject, ref.Version, err)
		}
		into[ref.Name] = ss.Schema.Schema
		if _, err := references(ctx, reg, ss.References, into); err != nil {
			return nil, err
		}
	}
	return into, nil
}

var header sr.ConfluentHeader

// DecoderConfig configures a Decoder.
type DecoderConfig struct {
	// Kind is the format; required.
	Kind Kind
	// Registry resolves schema ids; required.
	Registry *Registry
	// ReaderSchema, for Avro, is the reader schema (Avro schema
	// resolution): every writer schema is resolved to it, so records keep
	// one shape across writer schema changes (fields the writer lacks take
	// the reader's defaults; fields the reader lacks are dropped). Empty:
	// each record has the shape of the schema it was written with.
	ReaderSchema string
}

// Decoder decodes framed values of one Kind into JSON; one per source
// subtask (not safe for concurrent use). Compiled schemas are kept per id.
type Decoder struct {
	cfg    DecoderConfig
	reader *avroReader
	codecs map[int]codec
}

// NewDecoder returns a Decoder for cfg; a ReaderSchema that does not parse
// is an error.
func NewDecoder(cfg DecoderConfig) (*Decoder, error) {
	if !cfg.Kind.Valid() {
		return nil, fmt.Errorf("unknown format %q", cfg.Kind)
	}
	if cfg.Registry == nil {
		return nil, errors.New("no schema registry")
	}
	d := &Decoder{cfg: cfg, codecs: map[int]codec{}}
	if cfg.ReaderSchema != "" {
		if cfg.Kind != KindAvro {
			return nil, fmt.Errorf("a reader schema applies to avro only, not %s", cfg.Kind)
		}
		r, err := parseAvroReader(cfg.ReaderSchema)
		if err != nil {
			return nil, fmt.Errorf("reader schema: %w", err)
		}
		d.reader = r
	}
	return d, nil
}

// Decode appends the JSON of the framed value v to dst. A value that is
// not framed, whose schema id is unknown, or whose body does not decode
// returns a *DecodeError; a context error (the registry was down until ctx
// ended) is returned as is.
func (d *Decoder) Decode(ctx context.Context, dst, v []byte) ([]byte, error) {
	id, body, err := header.DecodeID(v)
	if err != nil {
		return dst, &DecodeError{Reason: ReasonDecodeError, SchemaID: -1, Err: fmt.Errorf("not in the Confluent wire format: %w", err)}
	}
	c, err := d.codec(ctx, id)
	if err != nil {
		return dst, err
	}
	var index []int
	if d.cfg.Kind == KindProtobuf {
		index, body, err = header.DecodeIndex(body, 64)
		if err != nil {
			return dst, &DecodeError{Reason: ReasonDecodeError, SchemaID: id, Err: fmt.Errorf("message indexes: %w", err)}
		}
	}
	out, err := c.decode(dst, body, index)
	if err != nil {
		return dst, &DecodeError{Reason: ReasonDecodeError, SchemaID: id, Err: err}
	}
	return out, nil
}

func (d *Decoder) codec(ctx context.Context, id int) (codec, error) {
	if c, ok := d.codecs[id]; ok {
		return c, nil
	}
	s, err := d.cfg.Registry.SchemaByID(ctx, id)
	if errors.Is(err, ErrSchemaNotFound) {
		return nil, &DecodeError{Reason: ReasonSchemaNotFound, SchemaID: id, Err: ErrSchemaNotFound}
	}
	if err != nil {
		return nil, err
	}
	if got := kindOf(s.Type); got != d.cfg.Kind {
		return nil, &DecodeError{Reason: ReasonDecodeError, SchemaID: id, Err: fmt.Errorf("the schema is %s, not %s", got, d.cfg.Kind)}
	}
	c, err := compile(ctx, d.cfg.Kind, d.cfg.Registry, s, d.reader, "")
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &DecodeError{Reason: ReasonDecodeError, SchemaID: id, Err: fmt.Errorf("schema does not compile: %w", err)}
	}
	if len(d.codecs) >= d.cfg.Registry.cfg.CacheSize {
		clear(d.codecs)
	}
	d.codecs[id] = c
	return c, nil
}

func kindOf(t sr.SchemaType) Kind {
	switch t {
	case sr.TypeProtobuf:
		return KindProtobuf
	case sr.TypeJSON:
		return KindJSONSchema
	}
	return KindAvro
}

// TopicSubject is the subject of a topic's values under Confluent's
// TopicNameStrategy, the default: "<topic>-value".
func TopicSubject(topic string) string { return topic + "-value" }

// EncoderConfig configures an Encoder.
type EncoderConfig struct {
	// Kind is the format; required.
	Kind Kind
	// Registry resolves and registers the schema; required.
	Registry *Registry
	// Subject is the subject the schema is registered under, e.g.
	// TopicSubject(topic); required.
	Subject string
	// Schema is the schema text values are encoded with. Empty: the
	// subject's latest version (which must exist).
	Schema string
	// AutoRegister registers Schema under Subject if it is not there yet
	// (Confluent's auto.register.schemas); otherwise Schema must already
	// be registered under Subject.
	AutoRegister bool
	// MessageName, for Protobuf, is the full name of the message values
	// are (e.g. "shop.Order"); empty: the schema's first message.
	MessageName string
}

// Encoder encodes JSON values into framed values of one schema; safe for
// concurrent use once built.
type Encoder struct {
	cfg   EncoderConfig
	id    int
	codec codec
}

// NewEncoder resolves cfg's schema id (registering the schema when
// AutoRegister), retrying while the registry is down until ctx ends, and
// compiles the schema. A schema not registered under the subject (without
// AutoRegister), a subject with no version, a schema the registry refuses
// (incompatible) or one that does not compile is an error.
func NewEncoder(ctx context.Context, cfg EncoderConfig) (*Encoder, error) {
	if !cfg.Kind.Valid() {
		return nil, fmt.Errorf("unknown format %q", cfg.Kind)
	}
	if cfg.Registry == nil || cfg.Subject == "" {
		return nil, errors.New("an encoder needs a registry and a subject")
	}
	reg := cfg.Registry
	var ss sr.SubjectSchema
	var err error
	switch {
	case cfg.Schema == "":
		err = reg.Do(ctx, "get latest schema of "+cfg.Subject, func(ctx context.Context) error {
			ss, err = reg.cl.SchemaByVersion(ctx, cfg.Subject, -1)
			return err
		})
	case cfg.AutoRegister:
		// compiled first: a registry (srfake, the embedded one) may accept
		// a schema that does not compile, which would then stay registered
		if _, err := compileSchemaText(cfg.Kind, cfg.Schema, cfg.MessageName); err != nil {
			return nil, fmt.Errorf("subject %s: the schema to register does not compile: %w", cfg.Subject, err)
		}
		s := sr.Schema{Schema: cfg.Schema, Type: cfg.Kind.schemaType()}
		err = reg.Do(ctx, "register schema under "+cfg.Subject, func(ctx context.Context) error {
			ss, err = reg.cl.CreateSchema(ctx, cfg.Subject, s)
			return err
		})
	default:
		s := sr.Schema{Schema: cfg.Schema, Type: cfg.Kind.schemaType()}
		err = reg.Do(ctx, "look up schema under "+cfg.Subject, func(ctx context.Context) error {
			ss, err = reg.cl.LookupSchema(ctx, cfg.Subject, s)
			return err
		})
	}
	if err != nil {
		if errors.Is(err, ErrSchemaNotFound) {
			return nil, fmt.Errorf("subject %s: the schema is not registered (register it, or set auto_register): %w", cfg.Subject, err)
		}
		return nil, fmt.Errorf("subject %s: %w", cfg.Subject, err)
	}
	if got := kindOf(ss.Type); got != cfg.Kind {
		return nil, fmt.Errorf("subject %s: its schema is %s, not %s", cfg.Subject, got, cfg.Kind)
	}
	c, err := compile(ctx, cfg.Kind, reg, ss.Schema, nil, cfg.MessageName)
	if err != nil {
		return nil, fmt.Errorf("subject %s version %d (id %d): %w", cfg.Subject, ss.Version, ss.ID, err)
	}
	return &Encoder{cfg: cfg, id: ss.ID, codec: c}, nil
}

// SchemaID is the id of the schema values are encoded with.
func (e *Encoder) SchemaID() int { return e.id }

// Encode appends the framed encoding of the JSON value v to dst. A value
// the schema cannot hold (a missing field without default, a wrong type)
// is an error naming the subject.
func (e *Encoder) Encode(dst, v []byte) ([]byte, error) {
	dst, err := header.AppendEncode(dst, e.id, e.codec.index())
	if err != nil {
		return nil, err
	}
	out, err := e.codec.encode(dst, v)
	if err != nil {
		return nil, fmt.Errorf("%s value for subject %s (schema id %d): %w", e.cfg.Kind, e.cfg.Subject, e.id, err)
	}
	return out, nil
}
