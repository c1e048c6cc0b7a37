package checkpoint

import (
	"slices"
	"sync"
	"time"
)

// HistorySize is how many of the newest checkpoints and savepoints
// Coordinator.History keeps (Flink's web.checkpoints.history, whose
// default is 10; kstreamd keeps a few more because savepoints share it).
const HistorySize = 20

// The statuses of a CheckpointStats (Flink's CheckpointStatsStatus).
const (
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"
	StatusFailed     = "failed"
)

// CheckpointStats is one checkpoint or savepoint this coordinator
// triggered, as Coordinator.History reports it (Flink's
// AbstractCheckpointStats with its CompletedCheckpointStats and
// FailedCheckpointStats): what the web UI's checkpoint history shows.
type CheckpointStats struct {
	ID        int64
	Savepoint bool
	// Status is StatusInProgress, StatusCompleted or StatusFailed.
	Status string
	// Triggered is when the barrier was triggered (for a checkpoint that
	// failed before its trigger: when it failed).
	Triggered time.Time
	// Duration runs from the trigger to the commit (completed) or the
	// abort (failed); for one in progress, the time it has run so far.
	Duration time.Duration
	// Bytes is the size of the state the subtasks wrote (completed only;
	// Metadata.Bytes).
	Bytes int64
	// Alignment is the longest barrier alignment any subtask reported
	// (Flink's alignment duration: from the first barrier of the
	// checkpoint at a task to the last); 0 when none had to align.
	Alignment time.Duration
	// Dir is the checkpoint's or savepoint's directory.
	Dir string
	// Failure is the reason a failed one failed (a decline, a timeout, a
	// commit error).
	Failure string
}

// history is a coordinator's bounded record of its newest checkpoints;
// every method is safe for concurrent use (alignments are reported from
// task goroutines).
type history struct {
	mu      sync.Mutex
	entries []CheckpointStats // oldest first, at most HistorySize
}

// find returns the entry of id, adding one (status in progress, trigger
// time now) when there is none. Call with h.mu held.
func (h *history) find(id int64, savepoint bool, now time.Time) *CheckpointStats {
	for i := len(h.entries) - 1; i >= 0; i-- {
		if h.entries[i].ID == id {
			return &h.entries[i]
		}
	}
	if len(h.entries) == HistorySize {
		h.entries = slices.Delete(h.entries, 0, 1)
	}
	h.entries = append(h.entries, CheckpointStats{ID: id, Savepoint: savepoint, Status: StatusInProgress, Triggered: now})
	return &h.entries[len(h.entries)-1]
}

// started records the trigger of checkpoint id at at into dir.
func (h *history) started(id int64, savepoint bool, dir string, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.find(id, savepoint, at)
	e.Triggered, e.Dir = at, dir
}

// aligned records a subtask's alignment of checkpoint id; the longest
// counts. An id no longer (or not yet) in the history is ignored.
func (h *history) aligned(id int64, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.entries {
		if e := &h.entries[i]; e.ID == id && d > e.Alignment {
			e.Alignment = d
		}
	}
}

// completed records the commit of checkpoint id at at with bytes of state.
func (h *history) completed(id int64, savepoint bool, dir string, bytes int64, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.find(id, savepoint, at)
	e.Status, e.Bytes, e.Dir, e.Duration = StatusCompleted, bytes, dir, at.Sub(e.Triggered)
}

// failed records the abort of checkpoint id at at with its reason.
func (h *history) failed(id int64, savepoint bool, dir string, reason error, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.find(id, savepoint, at)
	e.Status, e.Dir, e.Duration = StatusFailed, dir, at.Sub(e.Triggered)
	if reason != nil {
		e.Failure = reason.Error()
	}
}

// snapshot returns a copy of the entries, oldest first, the duration of
// the ones in progress taken at now.
func (h *history) snapshot(now time.Time) []CheckpointStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := slices.Clone(h.entries)
	for i := range out {
		if out[i].Status == StatusInProgress {
			out[i].Duration = now.Sub(out[i].Triggered)
		}
	}
	return out
}

// History returns the newest checkpoints and savepoints this coordinator
// triggered (at most HistorySize, oldest first): completed, failed and the
// one in progress, with duration, size, longest alignment and failure
// reason (Flink's CheckpointStatsTracker, shown by its web UI). It covers
// this coordinator only: a restarted job's attempt starts an empty
// history (the checkpoints on disk are Storage.List). Safe for concurrent
// use.
func (c *Coordinator) History() []CheckpointStats { return c.history.snapshot(time.Now()) }
