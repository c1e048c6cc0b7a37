package job

import (
	"testing"
	"time"
)

// TestCheckpointPhase: a whole job's checkpoints are not aligned; a unit's
// are, stage 0 on the interval's multiples, stage 1 half an interval later,
// stage 2 with stage 0; no periodic checkpoints, no alignment.
func TestCheckpointPhase(t *testing.T) {
	for _, tc := range []struct {
		unit     *Unit
		interval time.Duration
		aligned  bool
		phase    time.Duration
	}{
		{nil, time.Second, false, 0},
		{&Unit{Stage: 0}, time.Second, true, 0},
		{&Unit{Stage: 1, Index: 3}, time.Second, true, 500 * time.Millisecond},
		{&Unit{Stage: 2}, time.Second, true, 0},
		{&Unit{Stage: 1}, 0, false, 0},
	} {
		aligned, phase := scope{unit: tc.unit}.checkpointPhase(tc.interval)
		if aligned != tc.aligned || phase != tc.phase {
			t.Errorf("unit %+v, interval %v: aligned %t phase %v, want %t %v", tc.unit, tc.interval, aligned, phase, tc.aligned, tc.phase)
		}
	}
}
