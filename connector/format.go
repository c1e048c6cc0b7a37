package connector

import (
	"context"
	"log/slog"

	"github.com/tidwall/gjson"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/runtime"
)

// Format decodes record values at a source and encodes them at a sink
// (Flink's DeserializationSchema and SerializationSchema in one). One
// Format is made per source or sink subtask (FormatFactory.New) and is
// called from that subtask's goroutine only.
type Format interface {
	// Decode turns the value of rec, as read (rec.Key, rec.Headers and
	// rec.Origin, with the topic, partition and offset, are set), into
	// the record model operators and expressions see: it may replace
	// rec.Value (binary Avro into its JSON value), and sets rec.Format to
	// runtime.FormatJSON for one JSON value or runtime.FormatText for a
	// value passed on as text or bytes. A record the format refuses is a
	// *runtime.RecordError, which meets the source's on_error policy: its
	// Reason is one of runtime.Reasons or of FormatFactory.Reasons, its
	// Detail says why (a schema id, the offending byte). Any other error
	// fails the subtask (a restart retries it): a Schema Registry that
	// cannot be reached is retried by the format, with back-off, until ctx
	// ends, and never skips the record. Null and empty values never reach
	// Decode (the source handles them).
	Decode(ctx context.Context, rec *runtime.Record) error
	// Encode turns rec, as the sink's input delivers it, into the bytes
	// written to topic: it replaces rec.Value (and may set rec.Key or
	// rec.Headers, e.g. to frame the value for a Schema Registry). An
	// error fails the sink subtask; a *runtime.RecordError's detail is
	// included in it.
	Encode(ctx context.Context, topic string, rec *runtime.Record) error
}

// Role says which end of a job a format serves.
type Role string

// Roles.
const (
	RoleSource Role = "source"
	RoleSink   Role = "sink"
)

// RoleParamsChecker is implemented by format params (FormatFactory.Params)
// whose fields apply to one role only, e.g. a Schema Registry format's
// subject, which a source does not use. The pipeline calls CheckRole at
// validation, after the strict decoding and operators.ParamsChecker, so
// `kstreamd validate` reports such a field at FILE:LINE:COL instead of the
// job failing at start; report takes the field's yaml name (dotted for a
// nested one) and a message.
type RoleParamsChecker interface {
	CheckRole(role Role, report func(field, msg string))
}

// FormatFactory declares one format type: the name sources[].format and
// sinks[].format use, its one-line doc, its params schema
// (format_params:, decoded strictly as operator params are) and its
// constructor.
type FormatFactory struct {
	// Type is the name format: uses: lowercase, snake_case.
	Type string
	// Doc is one line for the format reference.
	Doc string
	// Params returns a pointer to a new params struct holding the
	// defaults, decoded from format_params: by its yaml tags (as
	// operators.Factory.Params; a struct implementing
	// operators.ParamsChecker reports further problems). Nil: the type
	// takes no params.
	Params func() any
	// Reasons are the bad-record reasons Decode may give beyond
	// runtime.Reasons (e.g. schema_not_found, decode_error): the bounded
	// values of the reason label of the source's bad-record metrics.
	Reasons []string
	// Roles are where the format may be used; nil means both.
	Roles []Role
	// New returns the Format of one source or sink subtask; it is called
	// at every (re)start of the job.
	New func(ctx FormatContext) (Format, error)
}

// Allows reports whether the format may be used in role r.
func (f *FormatFactory) Allows(r Role) bool {
	if len(f.Roles) == 0 {
		return true
	}
	for _, x := range f.Roles {
		if x == r {
			return true
		}
	}
	return false
}

// FormatContext is what FormatFactory.New gets.
type FormatContext struct {
	// Vertex is the source's or sink's configured name; Role which it is.
	Vertex string
	Role   Role
	// Topic is the topic the source reads or the sink writes ("" for a
	// type that has none): a subject's default under the topic-name
	// strategy.
	Topic string
	// Subtask is the subtask index in [0, Parallelism).
	Subtask, Parallelism int
	// Params is the decoded params struct (what FormatFactory.Params
	// returned, filled in and checked); nil when the type takes none.
	Params any
	// Sections are the job-level config sections connectors and formats
	// share, by name (graph.Graph.Sections: e.g. "schema_registry").
	Sections map[string]any
	// Resources are shared by every connector and format of the job (one
	// Schema Registry client and its cache for all of them).
	Resources *Resources
	// Logger is scoped to the vertex and subtask.
	Logger *slog.Logger
}

// BuiltinFormats returns the factories of the built-in formats: json,
// string and bytes (graph.Formats), whose Encode passes the value on as
// it is.
func BuiltinFormats() []FormatFactory {
	return []FormatFactory{
		{Type: string(graph.FormatJSON), Doc: "each value is one JSON value (object, array or scalar); anything else is a bad record with reason malformed_json",
			New: func(FormatContext) (Format, error) { return JSONFormat{}, nil }},
		{Type: string(graph.FormatString), Doc: "values pass through unchecked as text; expressions see a string",
			New: func(FormatContext) (Format, error) { return TextFormat{}, nil }},
		{Type: string(graph.FormatBytes), Doc: "values pass through unchecked as opaque bytes; expressions see a string",
			New: func(FormatContext) (Format, error) { return TextFormat{}, nil }},
	}
}

// JSONFormat is the json format: Decode checks that the value is one JSON
// value (gjson.ValidBytes, which agrees with encoding/json.Valid and is
// about 3x faster on 100-byte records), Encode passes it on.
type JSONFormat struct{}

// Decode implements Format: a value that is not one JSON value is a
// *runtime.RecordError with reason runtime.ReasonMalformedJSON and the
// syntax error's detail.
func (JSONFormat) Decode(_ context.Context, rec *runtime.Record) error {
	if !gjson.ValidBytes(rec.Value) {
		return &runtime.RecordError{Reason: runtime.ReasonMalformedJSON, Detail: runtime.JSONSyntaxDetail(rec.Value)}
	}
	rec.Format = runtime.FormatJSON
	return nil
}

// ChecksJSON implements source.JSONChecker: Decode accepts only valid
// JSON, so the source marks the values it passes as checked and the
// operators of the chain do not check them again.
func (JSONFormat) ChecksJSON() bool { return true }

// DecodesPlainJSON implements source.PlainJSONDecoder: Decode only
// checks the value, so a source runs the same check in the pass that
// indexes the value for its chain (expression.Doc.ResetChecked).
func (JSONFormat) DecodesPlainJSON() bool { return true }

// Encode implements Format: the value is written as it is.
func (JSONFormat) Encode(context.Context, string, *runtime.Record) error { return nil }

// TextFormat is the string and bytes formats: Decode marks the value
// runtime.FormatText, Encode passes it on.
type TextFormat struct{}

// Decode implements Format.
func (TextFormat) Decode(_ context.Context, rec *runtime.Record) error {
	rec.Format = runtime.FormatText
	return nil
}

// Encode implements Format.
func (TextFormat) Encode(context.Context, string, *runtime.Record) error { return nil }
