package state

import (
	"math"
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

// TestL0ThresholdHuge: a threshold whose 3 times overflows an int (the
// config only refuses negatives) opens a backend, with writes stopping
// at the largest int, not at a wrapped negative that Pebble replaces by
// its 12 and then refuses as below the compaction threshold.
func TestL0ThresholdHuge(t *testing.T) {
	n := math.MaxInt/L0StopWritesFactor + 1
	var o pebble.Options
	setL0Thresholds(&o, n)
	if o.L0CompactionThreshold != n || o.L0StopWritesThreshold != math.MaxInt {
		t.Fatalf("n=%d: thresholds %d/%d, want %d/%d", n, o.L0CompactionThreshold, o.L0StopWritesThreshold, n, math.MaxInt)
	}
	cfg := testConfig(t, KindPebble)
	cfg.L0CompactionThreshold = n
	b, err := OpenBackend(cfg)
	if err != nil {
		t.Fatalf("l0 compaction threshold %d: %v", n, err)
	}
	must(t, b.Close())
}
