package job

import "time"

// checkpointPhase returns whether the job's periodic checkpoints are
// aligned to the wall clock (checkpoint.CoordinatorConfig.Aligned) and at
// which phase: a whole job's are not; a cluster-mode unit of stage s
// triggers at s half intervals modulo interval (stage 0 on the interval's
// multiples, stage 1 half an interval later, stage 2 on the multiples
// again...). A stage's checkpoint then falls about half an interval after
// the upstream stage's, when the upstream units' checkpoints have
// completed and committed the records they wrote to the repartition
// topic, instead of at a random moment: the records it reads wait less for
// its barrier (docs/scale-out.md, Latency). Half an interval leaves the
// upstream checkpoint that much time to complete; one that takes longer
// makes its records wait for the downstream checkpoint after.
func (sc scope) checkpointPhase(interval time.Duration) (bool, time.Duration) {
	if sc.unit == nil || interval <= 0 {
		return false, 0
	}
	return true, time.Duration(sc.unit.Stage%2) * (interval / 2)
}
