package job

import (
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/sink"
)

// TestKafkaTxnPoolFollowsTolerableFailures: a Kafka sink whose graph leaves
// PoolSize 0 (a sink built in code, a cluster unit's repartition sink) and
// the dead-letter writers get sink.PoolSizeFor the job's tolerable
// checkpoint failures, so their pools ride out as many failed checkpoints
// in a row as the job tolerates; a configured pool size is kept.
func TestKafkaTxnPoolFollowsTolerableFailures(t *testing.T) {
	for _, tc := range []struct {
		tolerable, configured, want int
	}{{0, 0, 5}, {2, 0, 5}, {3, 0, 6}, {10, 0, 13}, {1000, 0, 100}, {10, 4, 4}} {
		b := &build{set: Settings{TolerableFailures: tc.tolerable}}
		timeout, pool := b.kafkaTxn(&graph.Sink{PoolSize: tc.configured})
		if pool != tc.want || timeout != sink.DefaultTransactionTimeout {
			t.Errorf("tolerable %d, configured %d: pool %d, timeout %v; want %d, %v", tc.tolerable, tc.configured, pool, timeout, tc.want, sink.DefaultTransactionTimeout)
		}
		if _, pool := b.kafkaTxn(&graph.Sink{PoolSize: tc.configured, TransactionTimeout: time.Minute}); pool != tc.want {
			t.Errorf("tolerable %d: pool %d with a timeout set", tc.tolerable, pool)
		}
		if tc.configured == 0 {
			if got := b.poolSize(0); got != tc.want {
				t.Errorf("tolerable %d: dead-letter pool %d, want %d", tc.tolerable, got, tc.want)
			}
		}
	}
}
