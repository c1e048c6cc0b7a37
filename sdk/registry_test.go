package sdk

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/pipeline"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestRegistryConnectors: NewRegistry holds the built-in operators and the
// built-in connector types; a sink type registered on it is what a
// pipeline parsed with it may name (with its params decoded), and a type
// the registry lacks is refused.
func TestRegistryConnectors(t *testing.T) {
	reg := NewRegistry()
	if _, ok := reg.Lookup("filter"); !ok {
		t.Fatal("no built-in operator filter")
	}
	if _, ok := reg.Connectors.Sink("kafka"); !ok {
		t.Fatal("no built-in kafka sink")
	}
	if _, ok := reg.Connectors.Format("json"); !ok {
		t.Fatal("no built-in json format")
	}
	type params struct {
		Dir string `yaml:"dir"`
	}
	if err := reg.RegisterSink(SinkFactory{
		Type: "discard", Doc: "drops records", Params: func() any { return &params{} },
		Deliveries: []graph.Delivery{graph.DeliveryAtLeastOnce},
		New:        func(connector.SinkContext) (runtime.Operator, error) { return nil, nil },
	}); err != nil {
		t.Fatal(err)
	}
	yaml := "job: {name: j}\nkafka: {brokers: [localhost:9092]}\nsources: [{name: in, topic: in}]\nsinks: [{name: out, input: in, type: discard, params: {dir: /x}}]\n"
	cfg, err := pipeline.ParseWith("j.yaml", []byte(yaml), reg.pipelineRegistries())
	if err != nil {
		t.Fatal(err)
	}
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if sk := g.Sinks[0]; sk.Type != "discard" || sk.Params.(*params).Dir != "/x" {
		t.Fatalf("sink planned as %q %#v", sk.Type, sk.Params)
	}
	if _, err := pipeline.ParseWith("j.yaml", []byte(yaml), pipeline.Registries{}); err == nil {
		t.Fatal("the built-in registry accepted sink type discard")
	}
}

// tagParams are the params of the test format "tag": prefix applies to
// sinks only, which CheckRole says with the SDK's role names.
type tagParams struct {
	Prefix string `yaml:"prefix"`
}

// CheckRole implements RoleParamsChecker.
func (p *tagParams) CheckRole(role Role, report func(field, msg string)) {
	if role != RoleSink && p.Prefix != "" {
		report("prefix", "applies to sinks only")
	}
}

// tagFormat prefixes values at a sink; it never decodes.
type tagFormat struct{ prefix string }

func (tagFormat) Decode(context.Context, *runtime.Record) error { return errors.New("sink only") }
func (f tagFormat) Encode(_ context.Context, _ string, rec *runtime.Record) error {
	rec.Value = append([]byte(f.prefix), rec.Value...)
	return nil
}

// TestRegistryFormatRoles: a format registered through the SDK's aliases
// (FormatFactory, Role, RoleSink, RoleParamsChecker, FormatContext) is
// limited to the roles it names, and its params' CheckRole is told the
// role they are used in: at a sink the format plans with its params; at a
// source the pipeline refuses the format, and CheckRole refuses a
// sink-only field with the role it was given (RoleSource).
func TestRegistryFormatRoles(t *testing.T) {
	reg := NewRegistry()
	var _ RoleParamsChecker = (*tagParams)(nil)
	var roles []Role
	if err := reg.RegisterFormat(FormatFactory{
		Type: "tag", Doc: "prefixes values at a sink", Roles: []Role{RoleSink},
		Params: func() any { return &tagParams{} },
		New: func(fc FormatContext) (Format, error) {
			roles = append(roles, fc.Role)
			return tagFormat{prefix: fc.Params.(*tagParams).Prefix}, nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	const base = "job: {name: j}\nkafka: {brokers: [localhost:9092]}\n"
	sinkYAML := base + "sources: [{name: in, topic: in}]\nsinks: [{name: out, input: in, topic: out, format: tag, format_params: {prefix: '>'}}]\n"
	cfg, err := pipeline.ParseWith("j.yaml", []byte(sinkYAML), reg.pipelineRegistries())
	if err != nil {
		t.Fatal(err)
	}
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if sk := g.Sinks[0]; sk.Format != "tag" || sk.FormatParams.(*tagParams).Prefix != ">" {
		t.Fatalf("sink planned with format %q params %#v", sk.Format, sk.FormatParams)
	}
	f, _ := reg.Connectors.Format("tag")
	if f.Allows(RoleSource) || !f.Allows(RoleSink) {
		t.Fatalf("format tag allows the source role %v, the sink role %v; want only the sink's", f.Allows(RoleSource), f.Allows(RoleSink))
	}
	fm, err := f.New(FormatContext{Role: RoleSink, Params: &tagParams{Prefix: ">"}})
	if err != nil {
		t.Fatal(err)
	}
	rec := runtime.Record{Value: []byte("v")}
	if err := fm.Encode(context.Background(), "out", &rec); err != nil || string(rec.Value) != ">v" || len(roles) != 1 || roles[0] != RoleSink {
		t.Fatalf("encoded %q (%v), roles %v; want \">v\" made for %s", rec.Value, err, roles, RoleSink)
	}
	srcYAML := base + "sources: [{name: in, topic: in, format: tag, format_params: {prefix: '>'}}]\nsinks: [{name: out, input: in, topic: out}]\n"
	_, err = pipeline.ParseWith("j.yaml", []byte(srcYAML), reg.pipelineRegistries())
	if err == nil || !strings.Contains(err.Error(), "sources[0].format: format tag cannot be used by a source") {
		t.Fatalf("a source with the sink-only format: %v, want it refused", err)
	}
	var reported []string
	(&tagParams{Prefix: ">"}).CheckRole(RoleSource, func(field, msg string) { reported = append(reported, field+": "+msg) })
	if len(reported) != 1 || reported[0] != "prefix: applies to sinks only" {
		t.Fatalf("CheckRole at a source reported %q", reported)
	}
}
