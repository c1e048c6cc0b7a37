package srformat

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/runtime"
)

// SectionName is the job-level config section the formats read their
// Registry from (connector.FormatContext.Sections): its value is a
// RegistryConfig, validated and with its secrets and TLS files loaded.
const SectionName = "schema_registry"

// Params are the format_params of avro, protobuf and json_schema (decoded
// strictly by the pipeline; CheckParams reads SchemaFile).
type Params struct {
	// Subject is the subject a sink's schema is registered under. Default:
	// "<topic>-value" (Confluent's TopicNameStrategy). Sources take none:
	// each value names its schema by id.
	Subject string `yaml:"subject" doc:"Sinks: the subject the schema is registered under; default <topic>-value (the topic-name strategy). Sources take none: each value names its schema id."`
	// Schema is schema text. At a sink: the schema values are encoded with
	// (default: the subject's latest version). At an Avro source: the
	// reader schema every writer schema is resolved to (default: none,
	// each record has its writer schema's shape). Exclusive with
	// SchemaFile.
	Schema string `yaml:"schema" doc:"Sinks: the schema text values are encoded with; default the subject's latest version. Avro sources: the reader schema every writer schema is resolved to; default none (each record in its writer's shape)."`
	// SchemaFile is a file holding Schema, read at validation.
	SchemaFile string `yaml:"schema_file" doc:"A file holding schema, read at validation; exclusive with schema."`
	// AutoRegister registers a sink's Schema under Subject when it is not
	// there yet (Confluent's auto.register.schemas). Default false: the
	// schema must be registered already, and a sink whose schema is not
	// fails at start.
	AutoRegister bool `yaml:"auto_register" doc:"Sinks: register the schema under the subject at start if it is not there; default false (it must be registered)."`
	// Message is the full name of the Protobuf message a sink writes
	// (e.g. shop.Order); default: the schema's first message.
	Message string `yaml:"message" doc:"Protobuf sinks: the full name of the message written, e.g. shop.Order; default the schema's first message."`

	// kind is the format these params are of (set by Factories), for
	// CheckRole.
	kind Kind
}

// CheckRole implements connector.RoleParamsChecker: it refuses, at
// validation, the fields the role (and format) does not use, which would
// otherwise be ignored (subject, auto_register and message at a source;
// message at an avro or json_schema sink) or fail the job only at start
// (a schema at a protobuf or json_schema source, which reads every value
// with the schema of its id and takes no reader schema).
func (p *Params) CheckRole(role connector.Role, report func(field, msg string)) {
	if role == connector.RoleSource {
		if p.Subject != "" {
			report("subject", "applies to sinks only: a source reads each value with the schema its id names")
		}
		if p.AutoRegister {
			report("auto_register", "applies to sinks only: a source registers no schema")
		}
		if p.Message != "" {
			report("message", "applies to protobuf sinks only: a source reads the message its value's indexes name")
		}
		if p.kind != KindAvro && p.Schema != "" {
			report(p.schemaField(), fmt.Sprintf("a reader schema applies to avro sources only; a %s source reads each value with the schema its id names", p.kind))
		}
		if p.kind == KindAvro && p.Schema != "" {
			if _, err := parseAvroReader(p.Schema); err != nil {
				report(p.schemaField(), fmt.Sprintf("the avro reader schema does not compile: %v", err))
			}
		}
		return
	}
	if p.Message != "" && p.kind != KindProtobuf {
		report("message", fmt.Sprintf("applies to protobuf sinks only, not to %s", p.kind))
		return
	}
	if p.Schema == "" {
		return
	}
	// A sink's schema names no references, so it compiles alone here as
	// the encoder compiles it at start (and before auto_register
	// registers it: a registry may accept a schema that does not compile).
	if _, err := compileSchemaText(p.kind, p.Schema, p.Message); err != nil {
		report(p.schemaField(), fmt.Sprintf("the %s schema does not compile: %v", p.kind, err))
	}
}

// schemaField names the field the schema came from, for messages.
func (p *Params) schemaField() string {
	if p.SchemaFile != "" {
		return "schema_file"
	}
	return "schema"
}

// compileSchemaText compiles a self-contained schema text of kind k (a
// sink's format_params.schema: it has no references); msg is the Protobuf
// message name.
func compileSchemaText(k Kind, text, msg string) (codec, error) {
	switch k {
	case KindAvro:
		return compileAvro(text, nil)
	case KindProtobuf:
		return compileProtobuf(text, nil, msg)
	case KindJSONSchema:
		return compileJSONSchema(text)
	}
	return nil, fmt.Errorf("unknown format %q", k)
}

// CheckParams implements operators.ParamsChecker: it reads SchemaFile into
// Schema.
func (p *Params) CheckParams(report func(field, msg string)) {
	if p.SchemaFile == "" {
		return
	}
	if p.Schema != "" {
		report("schema_file", "schema is also set: set one of schema and schema_file")
		return
	}
	b, err := os.ReadFile(p.SchemaFile)
	switch {
	case err != nil:
		report("schema_file", fmt.Sprintf("cannot read it: %v", errors.Unwrap(err)))
	case len(b) == 0:
		report("schema_file", "the file is empty")
	default:
		p.Schema = string(b)
	}
}

// registryKey and metricsKey are the connector.Resources keys of a job's
// Registry and of the Metrics it reports to.
type (
	registryKey struct{}
	metricsKey  struct{}
)

// SetMetrics makes m the metrics of the Registry SharedRegistry makes from
// res (the job registers them once per process; a schema_registry
// section's own RegistryConfig.Metrics wins).
func SetMetrics(res *connector.Resources, m *Metrics) {
	if m != nil {
		res.Set(metricsKey{}, m)
	}
}

// SharedRegistry returns the job's Registry from res, made on first use
// from the schema_registry section in sections.
func SharedRegistry(res *connector.Resources, sections map[string]any) (*Registry, error) {
	// looked up first: Resources.Get holds its lock while open runs
	var m *Metrics
	if v, err := res.Get(metricsKey{}, func() (any, error) { return nil, errors.New("none set") }); err == nil {
		m = v.(*Metrics)
	}
	v, err := res.Get(registryKey{}, func() (any, error) {
		cfg, ok := sections[SectionName].(RegistryConfig)
		if !ok {
			return nil, errors.New("the schema_registry section is not set")
		}
		if cfg.Metrics == nil {
			cfg.Metrics = m
		}
		return NewRegistry(cfg)
	})
	if err != nil {
		return nil, err
	}
	return v.(*Registry), nil
}

// Factories returns the format factories of avro, protobuf and json_schema,
// for connector.Registry.RegisterFormat.
func Factories() []connector.FormatFactory {
	docs := map[Kind]string{
		KindAvro:       "Avro in the Confluent wire format with a Schema Registry; values become JSON (decimals exact strings, timestamps epoch integers)",
		KindProtobuf:   "Protobuf in the Confluent wire format (message indexes) with a Schema Registry; values become proto3 JSON",
		KindJSONSchema: "JSON validated against a JSON Schema in the Confluent wire format with a Schema Registry",
	}
	out := make([]connector.FormatFactory, 0, 3)
	for _, k := range Kinds() {
		out = append(out, connector.FormatFactory{
			Type:    string(k),
			Doc:     docs[k],
			Params:  func() any { return &Params{kind: k} },
			Reasons: []string{ReasonSchemaNotFound, ReasonDecodeError},
			New:     func(fc connector.FormatContext) (connector.Format, error) { return newFormat(k, fc) },
		})
	}
	return out
}

func newFormat(k Kind, fc connector.FormatContext) (connector.Format, error) {
	reg, err := SharedRegistry(fc.Resources, fc.Sections)
	if err != nil {
		return nil, fmt.Errorf("%s format of %s: %w", k, fc.Vertex, err)
	}
	p, _ := fc.Params.(*Params)
	if p == nil {
		p = &Params{}
	}
	f := &Format{kind: k, reg: reg, params: *p, vertex: fc.Vertex}
	if fc.Role == connector.RoleSource {
		if k != KindAvro && p.Schema != "" {
			return nil, fmt.Errorf("%s format of source %s: a schema applies to avro sources only (the reader schema)", k, fc.Vertex)
		}
		f.dec, err = NewDecoder(DecoderConfig{Kind: k, Registry: reg, ReaderSchema: p.Schema})
		if err != nil {
			return nil, fmt.Errorf("%s format of source %s: %w", k, fc.Vertex, err)
		}
	}
	f.subject = p.Subject
	if f.subject == "" && fc.Topic != "" {
		f.subject = TopicSubject(fc.Topic)
	}
	return f, nil
}

// Format is the connector.Format of avro, protobuf and json_schema for one
// source or sink subtask.
type Format struct {
	kind    Kind
	reg     *Registry
	params  Params
	vertex  string
	subject string
	dec     *Decoder
	enc     *Encoder
}

// Decode implements connector.Format: rec.Value, in the Confluent wire
// format, becomes its JSON value (runtime.FormatJSON). A value that is not
// framed or does not decode is a *runtime.RecordError with reason
// decode_error, one whose schema id the registry does not know one with
// reason schema_not_found, each with the id in the detail. A registry that
// does not answer is retried until ctx ends (then ctx's error).
func (f *Format) Decode(ctx context.Context, rec *runtime.Record) error {
	// One allocation: the JSON of an Avro value is about twice its size
	// (field names, quotes), a growing nil slice took four to six.
	out, err := f.dec.Decode(ctx, make([]byte, 0, 2*len(rec.Value)+64), rec.Value)
	if err != nil {
		var de *DecodeError
		if errors.As(err, &de) {
			return &runtime.RecordError{Reason: de.Reason, Detail: de.Detail()}
		}
		return err
	}
	rec.Value = out
	rec.Format = runtime.FormatJSON
	return nil
}

// Encode implements connector.Format: rec.Value, a JSON value, becomes its
// framed encoding under the subject (format_params.subject, default
// "<topic>-value"). The schema id is resolved once, on the first record
// (registering the schema under auto_register), retrying while the
// registry is down until ctx ends. A value the schema cannot hold is an
// error naming the subject and the field.
func (f *Format) Encode(ctx context.Context, topic string, rec *runtime.Record) error {
	if f.enc == nil {
		subject := f.subject
		if subject == "" {
			subject = TopicSubject(topic)
		}
		enc, err := NewEncoder(ctx, EncoderConfig{Kind: f.kind, Registry: f.reg, Subject: subject,
			Schema: f.params.Schema, AutoRegister: f.params.AutoRegister, MessageName: f.params.Message})
		if err != nil {
			return fmt.Errorf("%s format of sink %s: %w", f.kind, f.vertex, err)
		}
		f.enc = enc
	}
	if rec.Format == runtime.FormatText {
		return fmt.Errorf("%s format of sink %s: the record's value is text, not JSON", f.kind, f.vertex)
	}
	// The framed encoding is at most about the JSON's size (no field
	// names) plus the header: one allocation.
	out, err := f.enc.Encode(make([]byte, 0, len(rec.Value)+16), rec.Value)
	if err != nil {
		return fmt.Errorf("sink %s: %w", f.vertex, err)
	}
	rec.Value = out
	return nil
}
