package pipeline

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/runtime"
)

// memoParams are the params of the test sink type memo.
type memoParams struct {
	Dir       string `yaml:"dir"`
	RollBytes int    `yaml:"roll_bytes"`
}

// CheckParams implements operators.ParamsChecker.
func (p *memoParams) CheckParams(report func(field, msg string)) {
	if p.Dir == "" {
		report("dir", "required")
	}
	if p.RollBytes < 0 {
		report("roll_bytes", "must be >= 0")
	}
}

// upperParams are the params of the test format upper.
type upperParams struct {
	Subject string `yaml:"subject"`
}

// testConnectors returns the built-in connectors plus the sink type memo
// (params dir and roll_bytes, exactly-once or at-least-once, no format)
// and the source-only format upper (param subject).
func testConnectors(t *testing.T) *connector.Registry {
	t.Helper()
	r := job.NewBuiltinConnectors()
	if err := r.RegisterSink(connector.SinkFactory{
		Type: "memo", Doc: "test", Params: func() any { return &memoParams{RollBytes: 10} },
		Deliveries: []graph.Delivery{graph.DeliveryExactlyOnce, graph.DeliveryAtLeastOnce},
		Recover:    func(context.Context, connector.RecoverContext) error { return nil },
		New:        func(connector.SinkContext) (runtime.Operator, error) { return nil, errors.New("not built here") },
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterFormat(connector.FormatFactory{
		Type: "upper", Doc: "test", Params: func() any { return &upperParams{} }, Roles: []connector.Role{connector.RoleSource},
		New: func(connector.FormatContext) (connector.Format, error) { return connector.TextFormat{}, nil },
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

// connYAML is a job reading one Kafka source and writing one sink; the
// tests replace SOURCE and SINK with the vertices' extra lines.
const connYAML = `job:
  name: conn
kafka:
  brokers: [localhost:9092]
checkpoints:
  interval: 1s
sources:
  - name: in
    topic: in
SOURCE
sinks:
  - name: out
    input: in
SINK
`

func connConfig(source, sink string) string {
	return strings.Replace(strings.Replace(connYAML, "SOURCE", source, 1), "SINK", sink, 1)
}

// TestConnectorTypesPlanned: a sink of a registered type and a source
// format with params decode strictly into the graph: type, params struct
// (defaults kept where the config is silent), format and format params; a
// config naming no type plans the kafka type ("") exactly as before.
func TestConnectorTypesPlanned(t *testing.T) {
	cfg, err := ParseWith("c.yaml", []byte(connConfig("    format: upper\n    format_params:\n      subject: s-value",
		"    type: memo\n    delivery: exactly-once\n    params:\n      dir: /tmp/out")), Registries{Connectors: testConnectors(t)})
	if err != nil {
		t.Fatal(err)
	}
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	src, sk := g.Sources[0], g.Sinks[0]
	if src.Type != "" || src.Format != "upper" || !reflect.DeepEqual(src.FormatParams, &upperParams{Subject: "s-value"}) || src.Params != nil {
		t.Errorf("source planned as type %q format %q params %#v format params %#v", src.Type, src.Format, src.Params, src.FormatParams)
	}
	if sk.Type != "memo" || !reflect.DeepEqual(sk.Params, &memoParams{Dir: "/tmp/out", RollBytes: 10}) || sk.Topic != "" || sk.Format != "" || sk.FormatParams != nil {
		t.Errorf("sink planned as type %q params %#v topic %q format %q", sk.Type, sk.Params, sk.Topic, sk.Format)
	}
	if cfg.Connectors() == nil {
		t.Error("the config lost its connector registry")
	}

	plain, err := Parse("p.yaml", []byte(connConfig("", "    topic: out")), nil)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := plain.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if s, k := pg.Sources[0], pg.Sinks[0]; s.Type != "" || s.Format != graph.FormatJSON || s.FormatParams != nil || k.Type != "" || k.Topic != "out" || k.Format != "" || k.Params != nil {
		t.Errorf("a config without types planned source %+v sink %+v", s, k)
	}
}

// TestConnectorConfigErrors: every problem with a source's or sink's type,
// params, format and format params is a config error at its
// FILE:LINE:COL, with a did-you-mean for a misspelt type.
func TestConnectorConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, source, sink string
		want               []string
	}{
		{"unknown sink type", "", "    type: mem\n    topic: out",
			[]string{`c.yaml:14:5: sinks[0].type: unknown value "mem" (did you mean "memo"?); want one of file, kafka, memo, postgres`}},
		{"unknown sink type without a topic", "", "    type: fil\n    delivery: exactly-once",
			[]string{`c.yaml:14:5: sinks[0].type: unknown value "fil" (did you mean "file"?); want one of file, kafka, memo, postgres`}},
		{"unknown source type", "    type: kafak", "    topic: out",
			[]string{`c.yaml:10:5: sources[0].type: unknown value "kafak" (did you mean "kafka"?); want one of kafka`}},
		{"unknown sink param", "", "    type: memo\n    params:\n      dir: /x\n      rol_bytes: 3",
			[]string{`c.yaml:17:7: sinks[0].params.rol_bytes: unknown field (did you mean "roll_bytes"?)`}},
		{"sink param wrong type", "", "    type: memo\n    params:\n      dir: /x\n      roll_bytes: lots",
			[]string{`c.yaml:17:7: sinks[0].params.roll_bytes: must be an integer, got "lots"`}},
		{"sink params checked", "", "    type: memo\n    params:\n      roll_bytes: -1",
			[]string{`c.yaml:16:7: sinks[0].params.dir: required`, `c.yaml:16:7: sinks[0].params.roll_bytes: must be >= 0`}},
		{"kafka takes no params", "", "    topic: out\n    params:\n      dir: /x",
			[]string{`c.yaml:15:5: sinks[0].params: sink type kafka takes no params`}},
		{"delivery the type lacks", "", "    type: memo\n    delivery: none\n    params:\n      dir: /x",
			[]string{`c.yaml:15:5: sinks[0].delivery: sink type memo does not support none; it supports exactly-once, at-least-once`}},
		{"format on a sink type without formats", "", "    type: memo\n    format: json\n    params:\n      dir: /x",
			[]string{`c.yaml:15:5: sinks[0].format: sink type memo takes no format`}},
		{"source-only format at a sink", "", "    topic: out\n    format: upper",
			[]string{`c.yaml:15:5: sinks[0].format: format upper cannot be used by a sink`}},
		{"unknown format", "    format: uper", "    topic: out",
			[]string{`c.yaml:10:5: sources[0].format: unknown value "uper" (did you mean "upper"?); want one of json, string, bytes, avro, json_schema, protobuf, upper`}},
		{"unknown format param", "    format: upper\n    format_params:\n      subjct: x", "    topic: out",
			[]string{`c.yaml:12:7: sources[0].format_params.subjct: unknown field (did you mean "subject"?)`}},
		{"format params without format", "", "    topic: out\n    format_params:\n      subject: x",
			[]string{`c.yaml:15:5: sinks[0].format_params: applies to format, which is not set`}},
		{"postgres param misspelt", "", "    type: postgres\n    params:\n      connection: {dsn: \"postgres://h/d\"}\n      table: t\n      colums: [{name: id}]",
			[]string{`c.yaml:18:7: sinks[0].params.colums: unknown field (did you mean "columns"?)`}},
		{"postgres params checked", "", "    type: postgres\n    params:\n      connection: {host: h}\n      table: t\n      mode: upsert\n      columns: [{name: id, field: a, expression: b}]",
			[]string{`c.yaml:16:7: sinks[0].params.key_columns: required for mode upsert: the columns of the table's primary key or a unique index`,
				`c.yaml:16:19: sinks[0].params.connection.database: required`, `c.yaml:16:19: sinks[0].params.connection.user: required`,
				`c.yaml:19:38: sinks[0].params.columns[0].expression: exclusive with field`}},
		{"postgres insert from a changelog", "    table: true", "    type: postgres\n    params:\n      connection: {dsn: \"postgres://h/d\"}\n      table: t\n      columns: [{name: id}]",
			[]string{`c.yaml:16:7: sinks[0].params.mode: mode insert appends rows, but its input "in" is the changelog of source "in" (table: true); use mode upsert with key_columns (+I and +U upsert, -D deletes by key)`}},
		// the gids "<job>:<uid>-<subtask>-<checkpoint>" follow the uid (kept
		// through a rename), so the uid is what must fit
		{"postgres uid too long for gids", "", "    type: postgres\n    uid: uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu\n    delivery: exactly-once\n    params:\n      connection: {dsn: \"postgres://h/d\"}\n      table: t\n      key_columns: [id]\n      columns: [{name: id}]",
			[]string{`c.yaml:15:5: sinks[0].uid: job name and sink uid too long for PostgreSQL transaction ids: "conn:uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu-" is 176 bytes, at most 170`}},
		{"kafka fields at a sink of another type", "", "    type: memo\n    topic: out\n    pool_size: 7\n    changelog: header\n    params:\n      dir: /x",
			[]string{
				`c.yaml:15:5: sinks[0].topic: sink type memo does not read it (a setting of the kafka type); its settings go in params`,
				`c.yaml:16:5: sinks[0].pool_size: sink type memo does not read it (a setting of the kafka type); its settings go in params`,
				`c.yaml:17:5: sinks[0].changelog: sink type memo does not read it (a setting of the kafka type); its settings go in params`,
			}},
		{"the file sink ignores no kafka field", "", "    type: file\n    delivery: exactly-once\n    topic: out\n    transaction_timeout: 1m\n    params:\n      path: /x",
			[]string{
				`c.yaml:16:5: sinks[0].topic: sink type file does not read it (a setting of the kafka type); its settings go in params`,
				`c.yaml:17:5: sinks[0].transaction_timeout: sink type file does not read it (a setting of the kafka type); its settings go in params`,
			}},
		{"kafka sink needs a topic", "", "    delivery: none",
			[]string{`c.yaml:12:5: sinks[0].topic: required field is missing`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseWith("c.yaml", []byte(connConfig(tc.source, tc.sink)), Registries{Connectors: testConnectors(t)})
			var errs ConfigErrors
			if !errors.As(err, &errs) {
				t.Fatalf("error %v, want ConfigErrors", err)
			}
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("errors\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
