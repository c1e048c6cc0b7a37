package pipeline

import (
	"strings"
	"testing"
)

// TestOperatorParamsReportEveryProblem: the README (Commands, "Config
// decoding is strict") promises every problem of a config file at once,
// as FILE:LINE:COL each. Outside operator params it holds (an unknown
// field and a bad max_drift of one watermark_alignment are both
// reported); inside an operator's params an unknown field hides every
// value check of the same params: mini_batch {size: 0, latency: 2s}
// reports only latency, and the size 0 shows up after the user fixed it.
func TestOperatorParamsReportEveryProblem(t *testing.T) {
	_, err := Parse("mb.yaml", []byte(aggregateMiniBatchYAML("      mini_batch: {size: 0, latency: 2s}\n", "")), nil)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"mb.yaml:13:29: operators[0].params.mini_batch.latency: unknown field",
		"mb.yaml:13:20: operators[0].params.mini_batch.size: required",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
