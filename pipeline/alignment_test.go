package pipeline

import (
	"strings"
	"testing"
	"time"
)

// alignHead is a job with one kafka source "clicks" whose lines 7 on are
// its watermark_alignment (a case appends them), then a sink.
const alignHead = `job:
  name: align
kafka:
  brokers: [localhost:9092]
sources:
  - name: clicks
    topic: clicks
`

const alignTail = `sinks:
  - {name: out, input: clicks, topic: out}
`

// TestWatermarkAlignmentConfigErrors: validate refuses a
// watermark_alignment without max_drift (at the mapping), a max_drift or
// update_interval under 1ms, a negative one, and an unknown field, each at
// its key's FILE:LINE:COL.
func TestWatermarkAlignmentConfigErrors(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{"    watermark_alignment: {update_interval: 10ms}\n", `a.yaml:8:26: sources[0].watermark_alignment.max_drift: required: how far ahead of its group's least watermark a partition may read, e.g. max_drift: 1s`},
		{"    watermark_alignment: {}\n", `a.yaml:8:26: sources[0].watermark_alignment.max_drift: required: how far ahead`},
		{"    watermark_alignment:\n      max_drift: 500us\n", `a.yaml:9:7: sources[0].watermark_alignment.max_drift: must be >= 1ms, got 500µs`},
		{"    watermark_alignment:\n      max_drift: -1s\n", `a.yaml:9:7: sources[0].watermark_alignment.max_drift: must be >= 1ms, got -1s`},
		{"    watermark_alignment: {max_drift: 1s, update_interval: 10us}\n", `a.yaml:8:42: sources[0].watermark_alignment.update_interval: must be 0 (100ms) or >= 1ms, got 10µs`},
		{"    watermark_alignment: {max_drift: 1s, max_drfit: 2s}\n", `a.yaml:8:42: sources[0].watermark_alignment.max_drfit: unknown field (did you mean "max_drift"?)`},
	} {
		_, err := Parse("a.yaml", []byte(alignHead+c.body+alignTail), planRegistry(t))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want it to contain %q", c.body, err, c.want)
		}
	}
}

// TestPlanWatermarkAlignment: a source's watermark_alignment reaches its
// graph vertex, its group defaulting to the source's name; a source
// without it has none.
func TestPlanWatermarkAlignment(t *testing.T) {
	for _, c := range []struct {
		body, group string
		drift, upd  time.Duration
	}{
		{"", "", 0, 0},
		{"    watermark_alignment: {max_drift: 1s}\n", "clicks", time.Second, 0},
		{"    watermark_alignment: {group: g, max_drift: 20ms, update_interval: 5ms}\n", "g", 20 * time.Millisecond, 5 * time.Millisecond},
	} {
		cfg, err := Parse("a.yaml", []byte(alignHead+c.body+alignTail), planRegistry(t))
		if err != nil {
			t.Fatalf("%q: %v", c.body, err)
		}
		g, err := cfg.Plan()
		if err != nil {
			t.Fatal(err)
		}
		s := g.Sources[0]
		if s.AlignmentGroup != c.group || s.AlignmentMaxDrift != c.drift || s.AlignmentUpdateInterval != c.upd {
			t.Errorf("%q: group %q drift %v update %v, want %q %v %v", c.body, s.AlignmentGroup, s.AlignmentMaxDrift, s.AlignmentUpdateInterval, c.group, c.drift, c.upd)
		}
	}
}
