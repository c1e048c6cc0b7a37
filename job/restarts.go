package job

import (
	"slices"
	"time"
)

// RestartHistorySize is how many of the newest restarts Status.Restarts
// lists (Flink's web.exception-history-size, default 16).
const RestartHistorySize = 16

// Restart is one restart of the job inside the process (Status.Restarts;
// Flink's exception history entry): when the failed attempt ended and the
// failure that caused the restart.
type Restart struct {
	Time  time.Time `json:"time"`
	Cause string    `json:"cause"`
}

// recordRestart appends a restart caused by err at now to the loop's
// history, keeping the newest RestartHistorySize.
func (l *restartLoop) recordRestart(now time.Time, err error) {
	if len(l.history) == RestartHistorySize {
		l.history = slices.Delete(l.history, 0, 1)
	}
	l.history = append(l.history, Restart{Time: now, Cause: err.Error()})
}

// restartHistory returns the restarts before this attempt, oldest first;
// never nil, so the API shows an empty list.
func (j *Job) restartHistory() []Restart {
	if j.restarts == nil {
		return []Restart{}
	}
	return slices.Clone(j.restarts)
}
