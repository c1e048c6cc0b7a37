package sdk

import (
	"context"
	"strings"
	"testing"
)

// TestBenchBadFlagsRefused reproduces a defect found by a new user's
// trial: `kstreamd bench` accepts flag values it cannot honour. A value of
// --records, --keys or --partitions below 1 is silently replaced by the
// default (--records 0 ran 500,000 records while the header line said
// "0 records"), and an unknown --delivery or --scenario is only noticed
// after the broker was started and the header printed, with exit 1. Like
// every other bad command line (README, Commands: "2 for a bad command
// line"), each should exit 2 naming the flag before anything starts.
//
// The context is cancelled and --brokers names a port nobody listens on,
// so a bench that does start fails at once instead of running.
func TestBenchBadFlagsRefused(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		args []string
		flag string // named in the error
	}{
		{[]string{"--records", "0"}, "--records"},
		{[]string{"--records", "-5"}, "--records"},
		{[]string{"--keys", "0"}, "--keys"},
		{[]string{"--partitions", "0"}, "--partitions"},
		{[]string{"--delivery", "foo"}, "--delivery"},
		{[]string{"--scenario", "nope"}, "--scenario"},
		{[]string{"--scenario", "copy,nope"}, `--scenario "nope": unknown`},
		{[]string{"--scenario", "copy,"}, `--scenario "": unknown`},
		{[]string{"--zipf", "0.5"}, "--zipf"},
		{[]string{"--zipf", "1"}, "--zipf"},
		{[]string{"--zipf", "-2"}, "--zipf"},
		{[]string{"--parallelism", "0"}, "--parallelism"},
		{[]string{"--interval", "0s"}, "--interval"},
		{[]string{"--scenario", "state-scaling", "--keys", "0"}, "--keys"},
		{[]string{"--scenario", "cluster", "--records", "0"}, "--records"},
		{[]string{"--scenario", "nexmark-q1", "--nexmark-rate", "0"}, "--nexmark-rate"},
		{[]string{"--scenario", "nexmark-q1", "--nexmark-rate", "-10"}, "--nexmark-rate"},
		{[]string{"--scenario", "nexmark-q1", "--nexmark-rate", "NaN"}, "--nexmark-rate"},
		{[]string{"--scenario", "keyed-count-hashmap", "--preload-state"}, "--preload-state"},
		{[]string{"--scenario", "keyed-count-pebble,rules-10", "--preload-state"}, "--preload-state"},
		{[]string{"--scenario", "state-scaling", "--preload-state"}, "--preload-state"},
		{[]string{"--all", "--preload-state"}, "--preload-state"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := append([]string{"bench", "--brokers", "127.0.0.1:1", "--latency-duration", "1s"}, tc.args...)
			var stdout, stderr strings.Builder
			code := Run(ctx, args, &stdout, &stderr, NewRegistry())
			if code != 2 || !strings.Contains(stderr.String(), tc.flag) || strings.Contains(stderr.String(), "records over") || strings.Contains(stderr.String(), "Nexmark events at") {
				t.Errorf("exit %d, stderr %q; want 2, an error naming %s, and no run started (no \"records over\" header)", code, stderr.String(), tc.flag)
			}
			if strings.Contains(stderr.String(), "bench: bench:") {
				t.Errorf("stderr %q says the prefix twice", stderr.String())
			}
		})
	}
}
