package sdk

import (
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
