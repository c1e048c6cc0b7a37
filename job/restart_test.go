package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/state"
)

// step is one failure fed to a strategy: at (after the test's start) and
// the expected answer.
type step struct {
	at      time.Duration
	backoff time.Duration
	restart bool
}

func TestRestartStrategies(t *testing.T) {
	exp := DefaultRestartConfig()
	exp.JitterFactor = 0
	capped := exp
	capped.AttemptsBeforeReset = 2
	fixed := DefaultRestartConfig()
	fixed.Strategy, fixed.Attempts, fixed.Delay = RestartFixedDelay, 3, 2*time.Second
	rate := DefaultRestartConfig()
	rate.Strategy, rate.MaxFailuresPerInterval, rate.FailureRateInterval, rate.Delay = RestartFailureRate, 2, time.Minute, 500*time.Millisecond
	none := DefaultRestartConfig()
	none.Strategy = RestartNone
	for _, tc := range []struct {
		name  string
		cfg   RestartConfig
		steps []step
	}{
		{"exponential-delay grows to the max and resets after an hour", exp, []step{
			{0, time.Second, true},
			{10 * time.Second, 1500 * time.Millisecond, true},
			{20 * time.Second, 2250 * time.Millisecond, true},
			{30 * time.Second, 3375 * time.Millisecond, true},
			{40 * time.Second, 5062500 * time.Microsecond, true},
			{50 * time.Second, 7593750 * time.Microsecond, true},
			{60 * time.Second, 11390625 * time.Microsecond, true},
			{70 * time.Second, 17085937500, true},
			{80 * time.Second, 25628906250, true},
			{90 * time.Second, 38443359375, true},
			{100 * time.Second, 57665039062, true},
			{110 * time.Second, time.Minute, true},
			{120 * time.Second, time.Minute, true},
			{120*time.Second + time.Hour, time.Second, true},
		}},
		{"exponential-delay gives up after attempts_before_reset", capped, []step{
			{0, time.Second, true},
			{time.Second, 1500 * time.Millisecond, true},
			{2 * time.Second, 0, false},
		}},
		{"exponential-delay attempts count again after a reset", capped, []step{
			{0, time.Second, true},
			{time.Second, 1500 * time.Millisecond, true},
			{time.Second + time.Hour, time.Second, true},
			{2*time.Second + time.Hour, 1500 * time.Millisecond, true},
			{3*time.Second + time.Hour, 0, false},
		}},
		{"fixed-delay restarts attempts times", fixed, []step{
			{0, 2 * time.Second, true},
			{time.Hour, 2 * time.Second, true},
			{2 * time.Hour, 2 * time.Second, true},
			{3 * time.Hour, 2 * time.Second, false},
		}},
		{"failure-rate fails on the third failure within a minute", rate, []step{
			{0, 500 * time.Millisecond, true},
			{30 * time.Second, 500 * time.Millisecond, true},
			{59 * time.Second, 0, false},
		}},
		{"failure-rate forgets failures older than the interval", rate, []step{
			{0, 500 * time.Millisecond, true},
			{30 * time.Second, 500 * time.Millisecond, true},
			{90 * time.Second, 500 * time.Millisecond, true},
			{100 * time.Second, 500 * time.Millisecond, true},
			{110 * time.Second, 0, false},
		}},
		{"none never restarts", none, []step{{0, 0, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewRestartStrategy(tc.cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i, st := range tc.steps {
				b, ok := s.NotifyFailure(start.Add(st.at))
				if b != st.backoff || ok != st.restart {
					t.Errorf("failure %d at +%v: got (%v, %v), want (%v, %v)", i+1, st.at, b, ok, st.backoff, st.restart)
				}
			}
		})
	}
}

// TestExponentialDelayJitter checks the jitter spreads each back-off
// within +-jitter_factor of it, capped at max_backoff.
func TestExponentialDelayJitter(t *testing.T) {
	c := DefaultRestartConfig()
	c.JitterFactor = 0.5
	s, err := NewRestartStrategy(c, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	base := float64(time.Second)
	distinct := map[time.Duration]bool{}
	for i := range 30 {
		b, ok := s.NotifyFailure(start.Add(time.Duration(i) * time.Second))
		if !ok {
			t.Fatalf("failure %d: no restart", i+1)
		}
		lo, hi := time.Duration(base*0.5), min(time.Duration(base*1.5), time.Minute)
		if b < lo || b > hi {
			t.Errorf("failure %d: back-off %v outside [%v, %v]", i+1, b, lo, hi)
		}
		distinct[b] = true
		base = min(base*1.5, float64(time.Minute))
	}
	if len(distinct) < 10 {
		t.Errorf("only %d distinct back-offs in 30 failures: no jitter?", len(distinct))
	}
}

func TestRestartConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*RestartConfig)
		want string
	}{
		{"defaults", func(*RestartConfig) {}, ""},
		{"unknown", func(c *RestartConfig) { c.Strategy = "sometimes" }, `job: restart.strategy: unknown strategy "sometimes"`},
		{"exponential", func(c *RestartConfig) {
			c.InitialBackoff, c.MaxBackoff, c.BackoffMultiplier, c.JitterFactor, c.ResetBackoffThreshold, c.AttemptsBeforeReset = 0, -1, 0.5, 2, 0, -1
		}, "job: restart.initial_backoff: must be > 0, got 0s\n" +
			"job: restart.max_backoff: must be >= initial_backoff 0s, got -1ns\n" +
			"job: restart.backoff_multiplier: must be >= 1, got 0.5\n" +
			"job: restart.jitter_factor: must be in [0, 1], got 2\n" +
			"job: restart.reset_backoff_threshold: must be > 0, got 0s\n" +
			"job: restart.attempts_before_reset: must be >= 0 (0: no limit), got -1"},
		{"fixed", func(c *RestartConfig) { c.Strategy, c.Attempts, c.Delay = RestartFixedDelay, -1, -time.Second },
			"job: restart.delay: must be >= 0, got -1s\njob: restart.attempts: must be >= 0, got -1"},
		{"rate", func(c *RestartConfig) {
			c.Strategy, c.MaxFailuresPerInterval, c.FailureRateInterval = RestartFailureRate, 0, 0
		},
			"job: restart.max_failures_per_interval: must be >= 1, got 0\njob: restart.failure_rate_interval: must be > 0, got 0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultRestartConfig()
			tc.edit(&c)
			got := ""
			if err := c.Validate(); err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

type suppressing struct{}

func (suppressing) Error() string          { return "bad record" }
func (suppressing) SuppressRestarts() bool { return true }

func TestSuppressesRestarts(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"plain", errors.New("dial"), false},
		{"suppressing", suppressing{}, true},
		{"wrapped", fmt.Errorf("job: restart 2: %w", suppressing{}), true},
		{"state ttl switched", fmt.Errorf("operators: counts[0]: open: %w", &state.StateMigrationError{State: "aggregate", Property: "ttl", Stored: "disabled", Requested: "enabled"}), true},
		{"max parallelism changed", fmt.Errorf("job: restart 1: %w", fmt.Errorf("state: ... : %w", state.ErrMaxParallelismChanged)), true},
		{"checkpoint lacks state", fmt.Errorf("job: restore /x: %w", checkpoint.ErrInconsistent), true},
		{"removed stateful operator", fmt.Errorf("job: restore /x: %w", func() error {
			_, err := matchRestoredOperators(&graph.Graph{}, &checkpoint.Metadata{Operators: map[string]checkpoint.OperatorMetadata{"gone": {Subtasks: []json.RawMessage{json.RawMessage(`{"k":1}`)}}}}, false, slog.New(slog.DiscardHandler))
			return err
		}()), true},
		{"state conflict (a code bug, not a restore)", fmt.Errorf("x: %w", state.ErrStateConflict), false},
		{"too many failed checkpoints", fmt.Errorf("x: %w", checkpoint.ErrTooManyFailures), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := suppressesRestarts(tc.err); got != tc.want {
				t.Errorf("suppressesRestarts(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestRestoreReadErrorRestarts: verify (run by every restore) on a
// checkpoint whose keyed state file it cannot stat (a symlink loop here;
// an I/O error or a stale network mount in production) gives an error a
// restart may cure: suppressesRestarts is false, so the restart strategy
// applies. A file that is really missing is refused without a restart.
func TestRestoreReadErrorRestarts(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "op", "0", "MANIFEST")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(file, file); err != nil { // stat: ELOOP
		t.Fatal(err)
	}
	keyed := `{"keyed":{"backend":"pebble","key_groups":{"Start":0,"End":127},"max_parallelism":128,"files":[{"name":"MANIFEST","path":"op/0/MANIFEST","size":4}]}}`
	m := &checkpoint.Metadata{Version: checkpoint.MetadataVersion, Job: "j", CheckpointID: 7, MaxParallelism: 128,
		Operators: map[string]checkpoint.OperatorMetadata{"op": {Parallelism: 1, Subtasks: []json.RawMessage{json.RawMessage(keyed)}}}}
	err := fmt.Errorf("job: restore %s: %w", dir, verify(dir, m))
	if !errors.Is(err, syscall.ELOOP) || suppressesRestarts(err) {
		t.Fatalf("verify with an unreadable file: %v, suppressesRestarts %v; want ELOOP and false", err, suppressesRestarts(err))
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	err = fmt.Errorf("job: restore %s: %w", dir, verify(dir, m))
	if !errors.Is(err, checkpoint.ErrInconsistent) || !suppressesRestarts(err) {
		t.Fatalf("verify with a missing file: %v, suppressesRestarts %v; want ErrInconsistent and true", err, suppressesRestarts(err))
	}
}
