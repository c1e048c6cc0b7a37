package runtime

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// DefaultDrainTimeout is how long Job.Run waits, after its context ended,
// for the subtasks to finish their in-flight records before it cancels them.
const DefaultDrainTimeout = 10 * time.Second

// Job owns every subtask goroutine of one running job: it starts them,
// stops them (softly, then hard) and waits for them.
type Job struct {
	sources      []Task
	tasks        []Task
	drainTimeout time.Duration
	logger       *slog.Logger
}

// NewJob returns a job over source tasks (which watch the stop signal) and
// the other tasks. drainTimeout <= 0 means DefaultDrainTimeout.
func NewJob(logger *slog.Logger, drainTimeout time.Duration, sources, tasks []Task) *Job {
	if drainTimeout <= 0 {
		drainTimeout = DefaultDrainTimeout
	}
	return &Job{sources: sources, tasks: tasks, drainTimeout: drainTimeout, logger: logger}
}

// ErrDrainTimeout is the cause of the hard stop when the subtasks did not
// finish within the drain timeout after a stop.
var ErrDrainTimeout = errors.New("runtime: subtasks did not drain in time")

// Run starts every subtask and blocks until all returned. When ctx ends the
// sources are stopped; the job then drains and Run returns nil. If a subtask
// fails, every subtask is cancelled and Run returns the first failure. If
// the drain takes longer than the drain timeout, every subtask is cancelled
// and Run returns ErrDrainTimeout.
func (j *Job) Run(ctx context.Context) error {
	hard, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stop := make(chan struct{})
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex // guards firstErr
		firstErr error
	)
	start := func(t Task) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := t.Run(hard, stop)
			if err == nil {
				return
			}
			if cause := context.Cause(hard); cause != nil && errors.Is(err, context.Canceled) {
				return // cancelled because of another failure or the drain timeout
			}
			mu.Lock()
			if firstErr == nil {
				firstErr = err
				j.logger.Error("subtask failed", "task", t.Name(), "err", err)
			}
			mu.Unlock()
			cancel(err)
		}()
	}
	for _, t := range j.tasks {
		start(t)
	}
	for _, t := range j.sources {
		start(t)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	select {
	case <-done:
	case <-ctx.Done():
		j.logger.Info("stopping job: draining in-flight records")
		close(stop)
		timer := time.NewTimer(j.drainTimeout)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
			cancel(ErrDrainTimeout)
			<-done
			mu.Lock()
			defer mu.Unlock()
			if firstErr == nil {
				return ErrDrainTimeout
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return firstErr
}
