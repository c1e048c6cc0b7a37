package pipeline

import (
	"strings"
	"testing"
)

// aggregateMiniBatchYAML is an aggregate job whose operator sets params
// (line 13 on) and options (after params).
func aggregateMiniBatchYAML(params, options string) string {
	return `job:
  name: mb
kafka:
  embedded:
    enabled: true
sources:
  - name: events
    topic: events
operators:
  - name: totals
    type: aggregate
    params:
` + params + `      aggregates: [{name: n, fn: count}]
    input: events
    key_by: user
` + options + `sinks:
  - {name: out, input: totals, topic: out}
`
}

// TestAggregateMiniBatchParams: the aggregate's mini_batch is refused at
// its FILE:LINE:COL without a size, with a size below 1 or above
// 10,000,000, with an allow_latency below 0, of a fraction of a
// millisecond or above 1h, with a negative max_bytes, with an unknown
// key, and with async_state; a good one parses and plans.
func TestAggregateMiniBatchParams(t *testing.T) {
	for _, tc := range []struct{ name, params, options, want string }{
		{"no size", "      mini_batch: {}\n", "", "mb.yaml:13:19: operators[0].params.mini_batch.size: required: the records that end a batch, 1 to 10000000 (e.g. 50000); got 0"},
		{"negative", "      mini_batch: {size: -1}\n", "", "mb.yaml:13:20: operators[0].params.mini_batch.size: out of range: the records that end a batch, 1 to 10000000 (e.g. 50000); got -1"},
		{"too big", "      mini_batch: {size: 10000001}\n", "", "mb.yaml:13:20: operators[0].params.mini_batch.size: out of range: the records that end a batch, 1 to 10000000 (e.g. 50000); got 10000001"},
		{"unknown", "      mini_batch: {size: 5, latency: 2s}\n", "", "mb.yaml:13:29: operators[0].params.mini_batch.latency: unknown field; known fields are size, allow_latency, max_bytes"},
		{"negative latency", "      mini_batch: {size: 5, allow_latency: -1s}\n", "", "mb.yaml:13:29: operators[0].params.mini_batch.allow_latency: whole milliseconds from 1ms to 1h0m0s (e.g. 2s), or 0 for none; got -1s"},
		{"sub-ms latency", "      mini_batch: {size: 5, allow_latency: 1500us}\n", "", "mb.yaml:13:29: operators[0].params.mini_batch.allow_latency: whole milliseconds from 1ms to 1h0m0s (e.g. 2s), or 0 for none; got 1.5ms"},
		{"long latency", "      mini_batch: {size: 5, allow_latency: 2h}\n", "", "mb.yaml:13:29: operators[0].params.mini_batch.allow_latency: whole milliseconds from 1ms to 1h0m0s (e.g. 2s), or 0 for none; got 2h0m0s"},
		{"negative max_bytes", "      mini_batch: {size: 5, max_bytes: -1}\n", "", "mb.yaml:13:29: operators[0].params.mini_batch.max_bytes: at least 1 (bytes, e.g. 67108864), or 0 for the default 64 MiB; got -1"},
		{"async_state", "      mini_batch: {size: 5}\n", "    async_state: true\n", "mb.yaml:13:7: operators[0].params.mini_batch: not supported with async_state: true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("mb.yaml", []byte(aggregateMiniBatchYAML(tc.params, tc.options)), nil)
			if err == nil {
				_, err = cfg.Plan()
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to start %q", err, tc.want)
			}
		})
	}
	cfg, err := Parse("mb.yaml", []byte(aggregateMiniBatchYAML("      mini_batch: {size: 50000, allow_latency: 2s, max_bytes: 1048576}\n", "")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Plan(); err != nil {
		t.Fatal(err)
	}
}
