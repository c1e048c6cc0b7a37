package pipeline

import (
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestWatermarkAlignmentNonKafkaSource: watermark_alignment on a source of
// another type (a test source type "gen") is refused at its key's
// FILE:LINE:COL (the source holds back nothing: only the Kafka source
// aligns), while the same source without it, and a kafka source with it,
// are valid.
func TestWatermarkAlignmentNonKafkaSource(t *testing.T) {
	conns := testConnectors(t)
	if err := conns.RegisterSource(connector.SourceFactory{
		Type: "gen", Doc: "test", Params: func() any { return &struct{}{} },
		New: func(connector.SourceContext) (runtime.SourceTask, error) { return nil, nil },
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ source, want string }{
		{"    type: gen\n    watermark_alignment: {max_drift: 1s}", `c.yaml:11:5: sources[0].watermark_alignment: applies to kafka sources only, not to source type gen`},
		{"    type: gen\n    watermark_alignment: {}", `c.yaml:11:5: sources[0].watermark_alignment: applies to kafka sources only, not to source type gen`},
		{"    type: gen", ""},
		{"    type: kafka\n    watermark_alignment: {group: g, max_drift: 1ms, update_interval: 1ms}", ""},
	} {
		_, err := ParseWith("c.yaml", []byte(connConfig(c.source, "    topic: out")), Registries{Connectors: conns})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v, want valid", c.source, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: err = %v, want it to contain %q", c.source, err, c.want)
		}
	}
}
