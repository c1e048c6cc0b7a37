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
	"github.com/kstreamd/kstreamd/sink"
)

// slowStore is a checkpoint.Store whose Download and Read of a _metadata
// (a restore reads it; small state files are inline in it) block, while
// slow is set, until their context ends: a takeover's state download that
// never finishes. blocked counts the downloads and reads it held.
type slowStore struct {
	checkpoint.Store
	slow    atomic.Bool
	blocked atomic.Int64
}

func (s *slowStore) Download(ctx context.Context, key, path string) error {
	if s.slow.Load() {
		s.blocked.Add(1)
		<-ctx.Done()
		return context.Cause(ctx)
	}
	return s.Store.Download(ctx, key, path)
}

func (s *slowStore) Read(ctx context.Context, key string) ([]byte, error) {
	if s.slow.Load() && strings.HasSuffix(key, "/"+checkpoint.MetadataFile) {
		s.blocked.Add(1)
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	return s.Store.Read(ctx, key)
}

// TestTakeoverTimeoutEnforced: a member takes over the units of a job
// that ran elsewhere, but the store's downloads hang: each unit's build
// fails once cluster.takeover_timeout (1s) passes, with an error wrapping
// job.ErrTakeoverTimeout that names the unit and the timeout, and is
// rebuilt by its restart strategy (kstreamd_job_restarts_total counts it);
// once the store answers the units restore and the output holds, per key,
// exactly the counts 1..n.
func TestTakeoverTimeoutEnforced(t *testing.T) {
	yaml := strings.Replace(unitsYAML, "units: 4", "units: 2", 1)
	f := newUnitFixture(t, "units.yaml", yaml, kfake.SeedTopics(2, "clicks", "counts"))
	const users, perUser = 5, 20
	committed := func() []*kgo.Record {
		return testkit.ReadTopicWith(t, f.opts, kgo.ReadCommitted(), "counts", 10*time.Second)
	}
	runUntilCommitted(t, f, "r1", 6*time.Second, users, perUser/2)

	set := f.set
	store := &slowStore{Store: set.Store}
	store.slow.Store(true)
	set.Store = store
	set.StateDir += "/r2"
	set.CheckpointDir += "/r2"
	set.Restart = job.RestartConfig{Strategy: job.RestartFixedDelay, Attempts: 1000, Delay: 100 * time.Millisecond}
	reg := prometheus.NewRegistry()
	var logs testkit.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- job.RunMember(ctx, f.st, set, job.Deps{Registerer: reg, ClientOpts: f.opts, Logger: slog.New(slog.NewTextHandler(&logs, nil))},
			job.MemberConfig{GroupID: "clicks-cluster", MemberID: "r2", SessionTimeout: 6 * time.Second,
				RebalanceTimeout: 20 * time.Second, RevokeTimeout: 10 * time.Second, TakeoverTimeout: time.Second})
	}()
	restarts := func() float64 { return counterSum(t, reg, "kstreamd_job_restarts_total", nil) }
	if !testkit.Poll(time.Minute, func() bool { return restarts() >= 8 }) {
		t.Fatalf("the units were rebuilt %v times, want at least 8 (2 each of 4 units); logs:\n%s", restarts(), logs.String())
	}
	if store.blocked.Load() < 8 {
		t.Errorf("the store held %d downloads, want at least 8", store.blocked.Load())
	}
	for _, want := range []string{job.ErrTakeoverTimeout.Error(), "unit 1/0 took over 1s", "unit 0/1 took over 1s"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no log line says %q:\n%s", want, logs.String())
		}
	}
	store.slow.Store(false)
	produceClicks(t, f.opts, perUser/2, perUser, users)
	if !testkit.Poll(2*time.Minute, func() bool { return len(committed()) >= users*perUser }) {
		t.Fatalf("output holds %d records, want %d; logs:\n%s", len(committed()), users*perUser, logs.String())
	}
	cancel()
	if err := memberReturned(t, done); err != nil {
		t.Errorf("RunMember: %v", err)
	}
	checkUserCounts(t, committed(), users, perUser)
}

// TestTransactionTimeoutAboveBrokerMax: a broker whose
// transaction.max.timeout.ms (1m) is below the repartition sinks'
// transaction timeout (cluster.repartition_transaction_timeout, 15m by
// default) makes RunMember refuse to start, naming both values and the
// setting, before it creates any topic or joins the group.
func TestTransactionTimeoutAboveBrokerMax(t *testing.T) {
	yaml := strings.Replace(unitsYAML, "units: 4", "units: 2", 1)
	f := newUnitFixture(t, "units.yaml", yaml, kfake.SeedTopics(2, "clicks", "counts"),
		kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "60000"}))
	err := job.RunMember(context.Background(), f.st, f.set, job.Deps{Registerer: prometheus.NewRegistry(), ClientOpts: f.opts},
		job.MemberConfig{GroupID: "clicks-cluster", MemberID: "m1", SessionTimeout: 6 * time.Second, RebalanceTimeout: 20 * time.Second, RevokeTimeout: 10 * time.Second})
	want := "job: cluster.repartition_transaction_timeout: sink: transaction timeout does not fit: sink repartition.1: transaction_timeout 15m0s exceeds the broker's transaction.max.timeout.ms 1m0s"
	if err == nil || err.Error() != want || !errors.Is(err, sink.ErrTransactionTimeout) {
		t.Fatalf("RunMember: %v, want %q", err, want)
	}
	topics, lerr := newAdmin(t, f.opts).ListTopics(context.Background())
	if lerr != nil {
		t.Fatal(lerr)
	}
	if names := topics.Names(); len(names) != 2 {
		t.Errorf("topics after the refusal: %v, want only the seeded clicks and counts", names)
	}
}
