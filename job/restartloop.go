package job

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// restartLoop is the failover loop Runner and every cluster-mode unit of a
// member share (Flink's restart-all failover with a
// RestartBackoffTimeStrategy): run an attempt; when it fails, fail for
// good when a restart cannot cure the failure (suppressesRestarts), else
// ask the strategy, wait for its back-off and build the next attempt from
// the latest checkpoint. Each restart counts in
// kstreamd_job_restarts_total. A rebuild that fails counts as another
// failure.
type restartLoop struct {
	strategy RestartBackoffTimeStrategy
	metrics  *Metrics
	logger   *slog.Logger
	// unit names the unit in errors ("unit 1/0"); "" for a whole job.
	unit string
	// build builds the next attempt.
	build func(ctx context.Context) (*Job, error)
	// state, if not nil, is told each attempt as it runs (j and
	// StateRunning), then StateRestarting while restarting, StateFailed
	// when the loop gives up, and "" when it ends otherwise (j nil).
	state func(j *Job, state string)
	// ran, if not nil, is called with each attempt after its Run returned.
	ran func(j *Job)
	// final, if not nil, says a failure ends the loop without a restart
	// and without an error (a unit revoked or taken over).
	final func(err error) bool
	// restartMsg is logged at restartLevel at each restart with attempt,
	// backoff, strategy and err.
	restartMsg   string
	restartLevel slog.Level
	// restarts is the number of restarts so far.
	restarts int
	// history holds the newest restarts with their causes; each attempt
	// gets a copy before it runs (Job.Status's Restarts).
	history []Restart
}

// setState tells state, when there is one.
func (l *restartLoop) setState(j *Job, s string) {
	if l.state != nil {
		l.state(j, s)
	}
}

// run runs j (nil: builds the first attempt, whose failure counts as a
// failure of the loop) and its successors until one ends without an error
// or ctx ends (nil; also while it builds or backs off), an attempt fails
// while ctx ends (that failure), or the loop
// gives up: an error wrapping the failure a restart cannot cure, or
// ErrRestartsExhausted with the last failure.
func (l *restartLoop) run(ctx context.Context, j *Job) error {
	for {
		var err error
		if j == nil {
			j, err = l.build(ctx)
			if err != nil && ctx.Err() != nil {
				l.setState(nil, "")
				return nil // ctx ended during the (re)build
			}
			if err != nil && l.restarts > 0 && l.unit == "" {
				err = fmt.Errorf("job: restart %d: %w", l.restarts, err)
			}
		}
		if j != nil {
			j.restarts = slices.Clone(l.history)
			l.setState(j, StateRunning)
			err = j.Run(ctx)
			if l.ran != nil {
				l.ran(j)
			}
			j = nil
		}
		switch {
		case err == nil:
			l.setState(nil, "")
			return nil
		case ctx.Err() != nil:
			l.setState(nil, "")
			return err // failed while stopping: no restart
		case l.final != nil && l.final(err):
			l.setState(nil, "")
			return nil
		case suppressesRestarts(err):
			l.setState(nil, StateFailed)
			if l.unit != "" {
				return fmt.Errorf("job: %s not restarted (a restart cannot cure this failure): %w", l.unit, err)
			}
			return fmt.Errorf("job: not restarted (a restart cannot cure this failure): %w", err)
		}
		backoff, ok := l.strategy.NotifyFailure(time.Now())
		if !ok {
			l.setState(nil, StateFailed)
			if l.unit != "" {
				return fmt.Errorf("job: %s: %w after %d restarts (%s); last failure: %w", l.unit, ErrRestartsExhausted, l.restarts, l.strategy, err)
			}
			return fmt.Errorf("%w after %d restarts (%s); last failure: %w", ErrRestartsExhausted, l.restarts, l.strategy, err)
		}
		l.restarts++
		l.recordRestart(time.Now(), err)
		l.setState(nil, StateRestarting)
		l.metrics.restarts.Inc()
		l.logger.Log(ctx, l.restartLevel, l.restartMsg, "attempt", l.restarts, "backoff", backoff, "strategy", l.strategy.String(), "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			l.setState(nil, "")
			return nil
		case <-t.C:
		}
	}
}
