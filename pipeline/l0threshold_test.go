package pipeline

import (
	"strings"
	"testing"
)

// TestL0CompactionThresholdSettings: state.l0_compaction_threshold reaches
// the job's settings (state.BackendConfig.L0CompactionThreshold), 0 when
// absent (the state package's default).
func TestL0CompactionThresholdSettings(t *testing.T) {
	const base = `job:
  name: j
kafka:
  brokers: [localhost:9092]
sources:
  - name: items
    topic: items
operators:
  - name: counter
    type: keyed_count
    input: items
    key_by: color
sinks:
  - name: counts
    input: counter
    topic: counts
state:
  backend: pebble
`
	for _, tc := range []struct {
		extra string
		want  int
	}{{"", 0}, {"  l0_compaction_threshold: 8\n", 8}} {
		cfg, err := Parse("j.yaml", []byte(base+tc.extra), nil)
		if err != nil {
			t.Fatalf("%q: %v", tc.extra, err)
		}
		if got := cfg.Settings().StateL0CompactionThreshold; got != tc.want {
			t.Fatalf("%q: StateL0CompactionThreshold = %d, want %d", strings.TrimSpace(tc.extra), got, tc.want)
		}
	}
}
