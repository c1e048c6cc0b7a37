package state

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestL0Thresholds: a Pebble backend compacts L0 at
// BackendConfig.L0CompactionThreshold sublevels (16 by default, not
// Pebble's 4) and stops writes at 3 times it.
func TestL0Thresholds(t *testing.T) {
	for _, tc := range []struct{ n, compact, stop int }{
		{0, 16, 48}, {-1, 16, 48}, {4, 4, 12}, {10, 10, 30},
	} {
		var o pebble.Options
		setL0Thresholds(&o, tc.n)
		if o.L0CompactionThreshold != tc.compact || o.L0StopWritesThreshold != tc.stop {
			t.Fatalf("n=%d: thresholds %d/%d, want %d/%d", tc.n, o.L0CompactionThreshold, o.L0StopWritesThreshold, tc.compact, tc.stop)
		}
	}
}
