package job_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
)

// outageStore is a checkpoint.Store whose every call fails while down is
// set, as an unreachable shared filesystem or object store does; refused
// counts the calls it refused.
type outageStore struct {
	checkpoint.Store
	down    atomic.Bool
	refused atomic.Int64
}

var errStoreDown = errors.New("store unreachable (test outage)")

func (s *outageStore) fail() error {
	if s.down.Load() {
		s.refused.Add(1)
		return errStoreDown
	}
	return nil
}

func (s *outageStore) Create(ctx context.Context, key string, data []byte) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.Create(ctx, key, data)
}

func (s *outageStore) Upload(ctx context.Context, key, path string) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.Upload(ctx, key, path)
}

func (s *outageStore) Read(ctx context.Context, key string) ([]byte, error) {
	if err := s.fail(); err != nil {
		return nil, err
	}
	return s.Store.Read(ctx, key)
}

func (s *outageStore) Download(ctx context.Context, key, path string) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.Download(ctx, key, path)
}

func (s *outageStore) List(ctx context.Context, prefix string) ([]string, error) {
	if err := s.fail(); err != nil {
		return nil, err
	}
	return s.Store.List(ctx, prefix)
}

func (s *outageStore) Delete(ctx context.Context, keys ...string) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.Delete(ctx, keys...)
}

// TestUnitsStoreOutage is docs/scale-out.md's "store unreachable" case: a
// member runs the 4 units of a two-stage keyed count; after the first half
// of the input is committed the store refuses every call while the second
// half is produced. Without a HEAD nothing commits: the read_committed
// output stays at exactly the first half through the outage (checkpoints
// fail, units fail, their rebuilds' claims fail).
//
// "restarts": each unit's restart strategy (exponential-delay) keeps
// rebuilding it; when the store is back the units claim again, restore
// their last HEAD, and the member, which never exits, completes the output.
// "gives up": with fixed-delay and 2 attempts the member fails as a job
// does when its strategy gives up, with an error wrapping
// ErrRestartsExhausted and the store's error; a member started after the
// store is back completes the output. Either way the output holds, per
// key, exactly the counts 1..n.
func TestUnitsStoreOutage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart job.RestartConfig
	}{
		{"restarts", job.RestartConfig{Strategy: job.RestartExponentialDelay, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
			BackoffMultiplier: 2, JitterFactor: 0.1, ResetBackoffThreshold: time.Hour}},
		{"gives up", job.RestartConfig{Strategy: job.RestartFixedDelay, Attempts: 2, Delay: 50 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) { testUnitsStoreOutage(t, tc.restart) })
	}
}

func testUnitsStoreOutage(t *testing.T, restart job.RestartConfig) {
	yaml := strings.Replace(unitsYAML, "units: 4", "units: 2", 1)
	yaml = strings.Replace(yaml, "  timeout: 1m", "  timeout: 1m\n  tolerable_failures: 1", 1)
	f := newUnitFixture(t, "units.yaml", yaml, kfake.SeedTopics(2, "clicks", "counts"))
	opts, st, set := f.opts, f.st, f.set
	store := &outageStore{Store: set.Store} // the filesystem store under f.dir
	set.StateBackend, set.Store = "pebble", store
	set.Restart = restart
	ctx := context.Background()
	const users, perUser = 5, 20
	produce := func(from, to int) { produceClicks(t, opts, from, to, users) }
	committed := func() []*kgo.Record {
		return testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "counts", 10*time.Second)
	}
	var logs testkit.SyncBuffer
	member := func(ctx context.Context) chan error {
		done := make(chan error, 1)
		go func() {
			done <- job.RunMember(ctx, st, set, job.Deps{Registerer: prometheus.NewRegistry(), ClientOpts: opts,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))},
				job.MemberConfig{GroupID: "clicks-cluster", MemberID: "m1",
					SessionTimeout: 10 * time.Second, RebalanceTimeout: time.Minute, RevokeTimeout: 50 * time.Second})
		}()
		return done
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := member(mctx)
	produce(0, perUser/2)
	if !testkit.Poll(2*time.Minute, func() bool { return len(committed()) >= users*perUser/2 }) {
		t.Fatalf("output holds %d records, want %d; logs:\n%s", len(committed()), users*perUser/2, logs.String())
	}
	store.down.Store(true)
	produce(perUser/2, perUser)
	if restart.Strategy == job.RestartFixedDelay {
		select {
		case err := <-done:
			if !errors.Is(err, job.ErrRestartsExhausted) || !errors.Is(err, errStoreDown) {
				t.Errorf("RunMember returned %v, want an error wrapping job.ErrRestartsExhausted and %q", err, errStoreDown)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("RunMember did not fail when the restart strategy gave up")
		}
	} else if !testkit.Poll(2*time.Minute, func() bool { return store.refused.Load() >= 40 }) {
		// The outage lasts until the store refused many calls: failed
		// checkpoints of every unit, failed units, their failed claims.
		t.Fatalf("the store refused %d calls, want 40", store.refused.Load())
	}
	if got := len(committed()); got != users*perUser/2 {
		t.Errorf("output during the outage holds %d records, want exactly the first half's %d (nothing commits without a HEAD)", got, users*perUser/2)
	}
	store.down.Store(false)
	if restart.Strategy == job.RestartFixedDelay {
		done = member(mctx)
	}
	if !testkit.Poll(2*time.Minute, func() bool { return len(committed()) >= users*perUser }) {
		t.Fatalf("after the outage the output holds %d records, want %d; logs:\n%s", len(committed()), users*perUser, logs.String())
	}
	cancel()
	if err := memberReturned(t, done); err != nil {
		t.Errorf("RunMember: %v", err)
	}
	checkUserCounts(t, committed(), users, perUser)
	if !strings.Contains(logs.String(), "msg=\"unit failed; rebuilding\"") || !strings.Contains(logs.String(), errStoreDown.Error()) {
		t.Errorf("no log line reports a unit rebuilt after the store's error %q:\n%s", errStoreDown, logs.String())
	}
}

// checkUserCounts checks the read_committed output out of a keyed count by
// user over users keys u0, u1, ... with perUser records each: per key
// exactly the counts 1..perUser in order, and nothing else.
func checkUserCounts(t *testing.T, out []*kgo.Record, users, perUser int) {
	t.Helper()
	checkCountsFrom(t, "output", out, users, 1, int64(perUser))
}
