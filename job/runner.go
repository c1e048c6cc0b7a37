package job

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/state"
)

// ErrRestartsExhausted is wrapped, with the last failure, by Runner.Run's
// error when the restart strategy gave up.
var ErrRestartsExhausted = errors.New("job: the restart strategy gave up")

// RestartSuppressor is implemented by errors a restart cannot cure (a bad
// record under on_error: fail, a lost transaction): when a failure's chain
// holds one whose SuppressRestarts reports true, the job fails at once,
// whatever the strategy (Flink's SuppressRestartsException).
type RestartSuppressor interface{ SuppressRestarts() bool }

// ErrIncompatibleState is wrapped by Build's error when the restored
// checkpoint or savepoint holds state the job cannot take (state of an
// operator the pipeline no longer has). Like the other restore refusals
// IncompatibleRestore lists, it fails the job without a restart: every
// restart would restore the same checkpoint and be refused again.
var ErrIncompatibleState = errors.New("job: restored state is incompatible with the job")

// IncompatibleRestore reports whether err (anywhere in its chain) is a
// restore refused because the restored state does not fit the job, which
// no restart can cure: ErrIncompatibleState (a removed stateful operator),
// state.ErrStateMigration (a state's TTL switched on or off, its type or
// serializer changed: *state.StateMigrationError names the state),
// state.ErrMaxParallelismChanged, or checkpoint.ErrInconsistent (the
// checkpoint lacks state its metadata promises). Runner and Member fail the
// job on such an error at once, whatever the restart strategy, as on an
// error a RestartSuppressor marks (Flink's SuppressRestartsException).
func IncompatibleRestore(err error) bool {
	for _, target := range []error{ErrIncompatibleState, state.ErrStateMigration, state.ErrMaxParallelismChanged, checkpoint.ErrInconsistent} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// suppressesRestarts reports whether a restart cannot cure err: a
// RestartSuppressor in its chain says so, or IncompatibleRestore.
func suppressesRestarts(err error) bool {
	var s RestartSuppressor
	return errors.As(err, &s) && s.SuppressRestarts() || IncompatibleRestore(err)
}

// Runner runs a job graph and restarts it inside the process when a task
// fails, as the restart strategy of Settings.Restart allows (Flink's
// failover of the whole job, "restart all"): every task of the failed
// attempt is cancelled and its state closed, then, after the strategy's
// back-off, the graph is built again from the latest completed checkpoint
// (state, source offsets, pending transactions: Build) and run. A clean stop
// never restarts.
//
// Runner is the shell around Build and Job.Run; its methods other than Run
// are safe for concurrent use (the HTTP API reads the current attempt).
type Runner struct {
	g        *graph.Graph
	set      Settings
	deps     Deps
	strategy RestartBackoffTimeStrategy
	metrics  *Metrics
	logger   *slog.Logger
	notify   func(*Job)

	mu       sync.Mutex // guards the fields below
	current  *Job       // the running attempt; nil while restarting
	state    string     // StateRunning, StateRestarting, StateFailed; "" before the first attempt runs
	restarts int
}

// restart returns the restart strategy s configures: s.Restart, or
// DefaultRestartConfig for the zero value (the one place that default is
// applied, for Runner and the units of a member alike).
func (s Settings) restart() RestartConfig {
	if s.Restart == (RestartConfig{}) {
		return DefaultRestartConfig()
	}
	return s.Restart
}

// RunnerOption configures a Runner.
type RunnerOption func(*Runner)

// WithAttemptHook calls fn, synchronously on Run's goroutine, with each
// attempt's Job just before it runs and with nil as soon as it returned
// (the HTTP API follows the current attempt this way). fn must be fast.
func WithAttemptHook(fn func(*Job)) RunnerOption { return func(r *Runner) { r.notify = fn } }

// NewRunner returns the runner of g. Its metrics are deps.Metrics, or new
// ones registered with deps.Registerer; every attempt shares them. It fails
// when set.Restart is invalid or the metrics cannot be registered.
func NewRunner(g *graph.Graph, set Settings, deps Deps, opts ...RunnerOption) (*Runner, error) {
	set.Restart = set.restart()
	strategy, err := NewRestartStrategy(set.Restart, nil)
	if err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Metrics == nil {
		if deps.Metrics, err = NewMetrics(deps.Registerer); err != nil {
			return nil, err
		}
	}
	r := &Runner{g: g, set: set, deps: deps, strategy: strategy, metrics: deps.Metrics,
		logger: deps.Logger.With("component", "job"), notify: func(*Job) {}}
	for _, o := range opts {
		o(r)
	}
	return r, nil
}

// Run builds the job and runs it until ctx ends or the job stops itself
// (stop-with-savepoint), then returns nil; a failure of the first Build
// (a bad restore, a refused max parallelism) is returned as it is. After a
// task failure the job restarts as the strategy allows; each restart is
// logged with its cause and attempt number and counted in
// kstreamd_job_restarts_total. A rebuild that fails counts as another
// failure. When the strategy gives up, Run returns an error wrapping
// ErrRestartsExhausted and the last failure; a failure whose chain holds a
// RestartSuppressor, or a restore refused for incompatible state
// (IncompatibleRestore), fails the job without a restart. A failure while ctx is ending
// is returned without a restart; ctx ending during a back-off or a rebuild
// returns nil.
func (r *Runner) Run(ctx context.Context) error {
	j, err := Build(ctx, r.g, r.set, r.deps)
	if err != nil {
		return err
	}
	deps := r.deps
	l := &restartLoop{strategy: r.strategy, metrics: r.metrics, logger: r.logger,
		restartMsg: "job failed; restarting from the latest completed checkpoint", restartLevel: slog.LevelWarn}
	l.build = func(ctx context.Context) (*Job, error) {
		j, err := Build(ctx, r.g, r.set, deps)
		if err == nil {
			r.logger.Info("job restarted", "attempt", l.restarts, "restored_from", j.RestoredFrom())
		}
		return j, err
	}
	l.state = func(j *Job, state string) {
		r.mu.Lock()
		r.restarts = l.restarts
		r.mu.Unlock()
		r.setCurrent(j, state)
		if j != nil {
			r.notify(j)
		}
	}
	l.ran = func(j *Job) {
		r.notify(nil)
		if id, _ := j.Coordinator().LastCompleted(); id > 0 {
			// A newer checkpoint or savepoint than the one asked for:
			// restarts restore the latest (Storage.Latest sees both).
			deps.FromSavepoint = ""
		}
	}
	return l.run(ctx, j)
}

func (r *Runner) setCurrent(j *Job, state string) {
	r.mu.Lock()
	r.current, r.state = j, state
	r.mu.Unlock()
	if state != "" {
		r.metrics.setState(state)
	}
}

// Current returns the running attempt, or nil before the first one runs,
// while restarting and after Run returned.
func (r *Runner) Current() *Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current
}

// State returns StateRunning, StateRestarting or StateFailed, or "" before
// the first attempt runs and after a clean stop.
func (r *Runner) State() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

// Restarts returns how many times the job restarted in this process.
func (r *Runner) Restarts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restarts
}
