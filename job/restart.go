package job

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// RestartStrategyName names a restart strategy (Flink's restart-strategy.type).
type RestartStrategyName string

// Restart strategies.
const (
	// RestartExponentialDelay restarts after a back-off that grows by a
	// multiplier from an initial to a maximum value, with jitter, and
	// resets once the job ran without failure for a threshold (Flink's
	// ExponentialDelayRestartBackoffTimeStrategy). The default.
	RestartExponentialDelay RestartStrategyName = "exponential-delay"
	// RestartFixedDelay restarts a fixed number of times, after a fixed
	// delay each (Flink's FixedDelayRestartBackoffTimeStrategy).
	RestartFixedDelay RestartStrategyName = "fixed-delay"
	// RestartFailureRate restarts after a fixed delay unless more failures
	// than allowed happened within an interval (Flink's
	// FailureRateRestartBackoffTimeStrategy).
	RestartFailureRate RestartStrategyName = "failure-rate"
	// RestartNone never restarts: the first failure fails the job (Flink's
	// NoRestartBackoffTimeStrategy).
	RestartNone RestartStrategyName = "none"
)

// RestartConfig selects and tunes the restart strategy. Only the fields of
// the chosen Strategy are read; DefaultRestartConfig holds every default.
type RestartConfig struct {
	// Strategy is one of the Restart* names; "" means RestartExponentialDelay.
	Strategy RestartStrategyName

	// InitialBackoff is exponential-delay's first back-off; > 0.
	InitialBackoff time.Duration
	// MaxBackoff caps exponential-delay's back-off; >= InitialBackoff.
	MaxBackoff time.Duration
	// BackoffMultiplier grows the back-off after each failure; >= 1.
	BackoffMultiplier float64
	// JitterFactor spreads each back-off uniformly over
	// [b - JitterFactor*b, b + JitterFactor*b] (capped at MaxBackoff); in [0, 1].
	JitterFactor float64
	// ResetBackoffThreshold resets the back-off to InitialBackoff (and the
	// attempt count to 0) when the job ran this long since the previous
	// failure; > 0.
	ResetBackoffThreshold time.Duration
	// AttemptsBeforeReset, when > 0, gives up after this many restarts
	// without a reset (Flink's attempts-before-reset-backoff); 0 means no
	// limit.
	AttemptsBeforeReset int

	// Attempts is fixed-delay's number of restarts: the failure after the
	// Attempts-th restart fails the job; >= 0.
	Attempts int
	// Delay is the back-off of fixed-delay and failure-rate; >= 0.
	Delay time.Duration

	// MaxFailuresPerInterval is failure-rate's number of restarts allowed
	// within FailureRateInterval: the next failure within the interval
	// fails the job; >= 1.
	MaxFailuresPerInterval int
	// FailureRateInterval is failure-rate's sliding window; > 0.
	FailureRateInterval time.Duration
}

// DefaultRestartConfig returns the defaults: exponential-delay with
// Flink 1.19's defaults (initial back-off 1s, max 1m, multiplier 1.5,
// jitter 0.1, reset after 1h without failure, no attempt limit);
// fixed-delay 1 attempt and failure-rate 1 failure per 1m, both with a 1s
// delay (Flink's defaults too).
func DefaultRestartConfig() RestartConfig {
	return RestartConfig{
		Strategy:       RestartExponentialDelay,
		InitialBackoff: time.Second, MaxBackoff: time.Minute, BackoffMultiplier: 1.5, JitterFactor: 0.1,
		ResetBackoffThreshold: time.Hour,
		Attempts:              1, Delay: time.Second,
		MaxFailuresPerInterval: 1, FailureRateInterval: time.Minute,
	}
}

// Validate returns an error listing every field of the chosen strategy
// out of range.
func (c RestartConfig) Validate() error {
	var errs []error
	bad := func(f string, args ...any) { errs = append(errs, fmt.Errorf("job: restart."+f, args...)) }
	switch c.Strategy {
	case "", RestartExponentialDelay:
		if c.InitialBackoff <= 0 {
			bad("initial_backoff: must be > 0, got %v", c.InitialBackoff)
		}
		if c.MaxBackoff < c.InitialBackoff {
			bad("max_backoff: must be >= initial_backoff %v, got %v", c.InitialBackoff, c.MaxBackoff)
		}
		if !(c.BackoffMultiplier >= 1) {
			bad("backoff_multiplier: must be >= 1, got %v", c.BackoffMultiplier)
		}
		if !(c.JitterFactor >= 0 && c.JitterFactor <= 1) {
			bad("jitter_factor: must be in [0, 1], got %v", c.JitterFactor)
		}
		if c.ResetBackoffThreshold <= 0 {
			bad("reset_backoff_threshold: must be > 0, got %v", c.ResetBackoffThreshold)
		}
		if c.AttemptsBeforeReset < 0 {
			bad("attempts_before_reset: must be >= 0 (0: no limit), got %d", c.AttemptsBeforeReset)
		}
	case RestartFixedDelay, RestartFailureRate:
		if c.Delay < 0 {
			bad("delay: must be >= 0, got %v", c.Delay)
		}
		if c.Strategy == RestartFixedDelay && c.Attempts < 0 {
			bad("attempts: must be >= 0, got %d", c.Attempts)
		}
		if c.Strategy == RestartFailureRate {
			if c.MaxFailuresPerInterval < 1 {
				bad("max_failures_per_interval: must be >= 1, got %d", c.MaxFailuresPerInterval)
			}
			if c.FailureRateInterval <= 0 {
				bad("failure_rate_interval: must be > 0, got %v", c.FailureRateInterval)
			}
		}
	case RestartNone:
	default:
		bad("strategy: unknown strategy %q", c.Strategy)
	}
	return errors.Join(errs...)
}

// RestartBackoffTimeStrategy decides, at each failure of the job, whether
// it restarts and after what back-off (Flink's RestartBackoffTimeStrategy,
// its canRestart, getBackoffTime and notifyFailure in one call). The
// caller passes the time, so implementations are pure; not safe for
// concurrent use.
type RestartBackoffTimeStrategy interface {
	// NotifyFailure records a failure at now and returns the back-off to
	// wait before the restart, or restart false when the job must fail.
	NotifyFailure(now time.Time) (backoff time.Duration, restart bool)
	// String describes the strategy and its parameters, for logs and errors.
	String() string
}

// NewRestartStrategy returns the strategy of c, which must be valid.
// rng draws exponential-delay's jitter; nil means a randomly seeded one.
func NewRestartStrategy(c RestartConfig, rng *rand.Rand) (RestartBackoffTimeStrategy, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch c.Strategy {
	case RestartFixedDelay:
		return &fixedDelay{attempts: c.Attempts, delay: c.Delay}, nil
	case RestartFailureRate:
		return &failureRate{max: c.MaxFailuresPerInterval, interval: c.FailureRateInterval, delay: c.Delay}, nil
	case RestartNone:
		return noRestart{}, nil
	}
	if rng == nil {
		rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return &exponentialDelay{c: c, rng: rng}, nil
}

// noRestart is RestartNone.
type noRestart struct{}

func (noRestart) NotifyFailure(time.Time) (time.Duration, bool) { return 0, false }
func (noRestart) String() string                                { return "none" }

// fixedDelay is RestartFixedDelay.
type fixedDelay struct {
	attempts, failures int
	delay              time.Duration
}

func (f *fixedDelay) NotifyFailure(time.Time) (time.Duration, bool) {
	f.failures++
	return f.delay, f.failures <= f.attempts
}

func (f *fixedDelay) String() string {
	return fmt.Sprintf("fixed-delay (attempts %d, delay %v)", f.attempts, f.delay)
}

// failureRate is RestartFailureRate.
type failureRate struct {
	max      int
	interval time.Duration
	delay    time.Duration
	failures []time.Time // the last max+1 failures at most, oldest first
}

func (f *failureRate) NotifyFailure(now time.Time) (time.Duration, bool) {
	f.failures = append(f.failures, now)
	if len(f.failures) > f.max+1 {
		f.failures = f.failures[1:]
	}
	// More than max failures within the interval: the oldest of the last
	// max+1 is younger than the interval.
	if len(f.failures) == f.max+1 && now.Sub(f.failures[0]) < f.interval {
		return 0, false
	}
	return f.delay, true
}

func (f *failureRate) String() string {
	return fmt.Sprintf("failure-rate (max %d failures per %v, delay %v)", f.max, f.interval, f.delay)
}

// exponentialDelay is RestartExponentialDelay.
type exponentialDelay struct {
	c           RestartConfig
	rng         *rand.Rand
	current     time.Duration // back-off of the last failure; 0 before the first
	attempts    int           // restarts since the last reset
	lastFailure time.Time
}

func (e *exponentialDelay) NotifyFailure(now time.Time) (time.Duration, bool) {
	switch {
	case e.current == 0 || now.Sub(e.lastFailure) >= e.c.ResetBackoffThreshold:
		e.current, e.attempts = e.c.InitialBackoff, 0
	default:
		e.current = min(time.Duration(float64(e.current)*e.c.BackoffMultiplier), e.c.MaxBackoff)
	}
	e.lastFailure = now
	e.attempts++
	if e.c.AttemptsBeforeReset > 0 && e.attempts > e.c.AttemptsBeforeReset {
		return 0, false
	}
	b := e.current
	if j := e.c.JitterFactor; j > 0 {
		b += time.Duration((e.rng.Float64()*2 - 1) * j * float64(b))
	}
	return max(0, min(b, e.c.MaxBackoff)), true
}

func (e *exponentialDelay) String() string {
	return fmt.Sprintf("exponential-delay (initial %v, max %v, multiplier %v, jitter %v, reset after %v)",
		e.c.InitialBackoff, e.c.MaxBackoff, e.c.BackoffMultiplier, e.c.JitterFactor, e.c.ResetBackoffThreshold)
}
