package pipeline

import (
	"fmt"
	"strings"
	"testing"
)

// TestPoolSizeDefaultFollowsTolerableFailures: a sink that does not set
// pool_size gets max(5, checkpoints.tolerable_failures + 3), at most 100 (a
// pool of n transactional ids rides out n - 3 failed checkpoints in a row,
// sink.TestFailedCheckpointsInARowAndThePool), and a pool_size the file
// sets is kept whatever tolerable_failures is.
func TestPoolSizeDefaultFollowsTolerableFailures(t *testing.T) {
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
    delivery: exactly-once
%s  - name: copies
    input: items
    topic: copies
checkpoints:
  interval: 1s
%s`
	cases := []struct {
		name      string
		sinkPool  string // first sink's pool_size line
		chk       string // checkpoints section
		wantFirst int
		wantOther int
	}{
		{"defaults", "", "", 6, 6},
		{"none tolerated", "", "  tolerable_failures: 0\n", 5, 5},
		{"two tolerated", "", "  tolerable_failures: 2\n", 5, 5},
		{"ten tolerated", "", "  tolerable_failures: 10\n", 13, 13},
		{"capped", "", "  tolerable_failures: 500\n", 100, 100},
		{"set below", "    pool_size: 4\n", "  tolerable_failures: 10\n", 4, 13},
		{"set above", "    pool_size: 9\n", "", 9, 6},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("c.yaml", []byte(fmt.Sprintf(base, tc.sinkPool, tc.chk)), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Sinks[0].PoolSize; got != tc.wantFirst {
				t.Errorf("sinks[0].pool_size = %d, want %d", got, tc.wantFirst)
			}
			if got := c.Sinks[1].PoolSize; got != tc.wantOther {
				t.Errorf("sinks[1].pool_size = %d, want %d", got, tc.wantOther)
			}
		})
	}
	_, err := Parse("c.yaml", []byte(fmt.Sprintf(base, "    pool_size: 101\n", "")), nil)
	if err == nil || !strings.Contains(err.Error(), "c.yaml:18:5: sinks[0].pool_size: must be in [3, 100], got 101") {
		t.Fatalf("pool_size 101: %v", err)
	}
}
