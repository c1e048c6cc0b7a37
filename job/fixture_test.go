package job_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/pipeline"
)

// newKafka starts a one-broker kfake cluster with the topics seeds create
// (kfake.SeedTopics), closed when the test ends, and returns it with the
// client options that reach it. A test installs its ControlKey hooks on
// the cluster before it starts any client.
func newKafka(t *testing.T, seeds ...kfake.Opt) (*kfake.Cluster, []kgo.Opt) {
	t.Helper()
	kc, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, seeds...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	return kc, []kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...)}
}

// unitFixture is the setup the cluster-mode (unit) job tests share: a
// kfake cluster, the pipeline file parsed and planned into stages, and
// the job settings of one process whose staging directory, state
// directory and filesystem store lie in a fresh temporary directory.
type unitFixture struct {
	kc   *kfake.Cluster
	opts []kgo.Opt     // reach kc
	st   *graph.Stages // the stages cfg plans
	dir  string        // the test's temporary directory
	// set is cfg.Settings() with CheckpointDir dir/staging, StateDir
	// dir/state, the hashmap backend and the checkpoint.FileStore rooted
	// at dir/store; a test changes what it needs after the call.
	set job.Settings
}

// parseConfig parses the pipeline file yaml (named file in errors) with
// the built-in operators, failing the test on an error.
func parseConfig(t *testing.T, file, yaml string) *pipeline.Config {
	t.Helper()
	cfg, err := pipeline.Parse(file, []byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// planStages is parseConfig(t, file, yaml)'s stages (Config.PlanStages),
// failing the test on an error.
func planStages(t *testing.T, file, yaml string) *graph.Stages {
	t.Helper()
	st, err := parseConfig(t, file, yaml).PlanStages()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// newUnitFixture starts the cluster of newKafka(t, seeds...), parses yaml
// (named file in errors) and plans its stages, failing the test on any
// error.
func newUnitFixture(t *testing.T, file, yaml string, seeds ...kfake.Opt) *unitFixture {
	t.Helper()
	kc, opts := newKafka(t, seeds...)
	cfg := parseConfig(t, file, yaml)
	st, err := cfg.PlanStages()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	set := cfg.Settings()
	set.CheckpointDir, set.StateDir, set.StateBackend = dir+"/staging", dir+"/state", "hashmap"
	set.Store = checkpoint.FileStore{Root: dir + "/store"}
	return &unitFixture{kc: kc, opts: opts, st: st, dir: dir, set: set}
}

// newAdmin returns an admin client on a client of its own reaching opts,
// closed when the test ends.
func newAdmin(t *testing.T, opts []kgo.Opt) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// produceEach writes to topic one record of value value(i) for each i in
// [from, to), in order, one ProduceSync each on a client of its own.
func produceEach(t *testing.T, opts []kgo.Opt, topic string, from, to int, value func(i int) []byte) {
	t.Helper()
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := from; i < to; i++ {
		if err := prod.ProduceSync(context.Background(), &kgo.Record{Value: value(i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// produceClicks writes to "clicks", for each i in [from, to) and within it
// each user u in [0, users), the record {"user":"u<u>","i":<i>}: the input
// checkUserCounts expects counted per user.
func produceClicks(t *testing.T, opts []kgo.Opt, from, to, users int) {
	t.Helper()
	produceEach(t, opts, "clicks", from*users, to*users, func(k int) []byte {
		return fmt.Appendf(nil, `{"user":"u%d","i":%d}`, k%users, k/users)
	})
}

// copyValue is record i of the copy job's input: {"i":<i>}.
func copyValue(i int) []byte { return fmt.Appendf(nil, `{"i":%d}`, i) }

// clickOf5 is record i of a click stream over the 5 users u0..u4 taken in
// turn: {"user":"u<i%5>","i":<i>}.
func clickOf5(i int) []byte { return fmt.Appendf(nil, `{"user":"u%d","i":%d}`, i%5, i) }

// ensureRepartitions creates the repartition topics of f's stages
// (job.EnsureRepartitionTopics), failing the test on an error.
func (f *unitFixture) ensureRepartitions(t *testing.T) {
	t.Helper()
	if err := job.EnsureRepartitionTopics(context.Background(), f.opts, f.st); err != nil {
		t.Fatal(err)
	}
}

// memberReturned waits up to 2 minutes for RunMember's result on done and
// returns it; the test fails at once if none arrives.
func memberReturned(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatal("RunMember did not return")
		return nil
	}
}

// crashPoints are the two points of a checkpoint's commit order at which
// the crash tests stop a unit's owner: right after its HEAD is written,
// and between the pre-commit and the HEAD.
var crashPoints = []struct {
	name  string
	point checkpoint.FaultPoint
}{
	{"after the HEAD", checkpoint.FaultAfterHead},
	{"before the HEAD", checkpoint.FaultBeforeHead},
}

// buildOwner builds the one unit (stage 0, unit 0 of 1) of f's job as
// owned by member, with f.set's staging and state directories each in a
// subdirectory named member, the coordinator's fault seam fault (nil:
// none) and, if log is not nil, a JSON log written into log.
func (f *unitFixture) buildOwner(t *testing.T, member string, fault func(checkpoint.FaultPoint, int64) bool, log *testkit.SyncBuffer) *job.Job {
	t.Helper()
	s := f.set
	s.StateDir += "/" + member
	s.CheckpointDir += "/" + member
	s.Unit = &job.Unit{Stage: 0, Index: 0, Units: 1, Member: member, Fingerprint: f.st.Fingerprint}
	deps := job.Deps{ClientOpts: f.opts, CheckpointFault: fault}
	if log != nil {
		deps.Logger = slog.New(slog.NewJSONHandler(log, nil))
	}
	j, err := job.Build(context.Background(), f.st.Stages[0].Graph, s, deps)
	if err != nil {
		t.Fatalf("build %s: %v", member, err)
	}
	return j
}

// stoppedByFault waits up to a minute for the result of an owner's Run on
// done and fails the test unless the owner stopped at its fault point
// (checkpoint.ErrFaultInjected).
func stoppedByFault(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, checkpoint.ErrFaultInjected) {
			t.Fatalf("a stopped with %v, want ErrFaultInjected", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a never reached the fault point")
	}
}

// runUnits builds every unit of st as owned by member, with set's
// staging and state directories under dir/member, the job metrics m (nil:
// each unit its own) and warnings and errors logged into logs; runs them
// until done reports true (polled for up to 2 minutes: the test fails
// with logs if it never does), stops them and fails the test on any
// unit's error. It returns what each stage-1 unit restored from ("" for
// a fresh start).
func runUnits(t *testing.T, st *graph.Stages, set job.Settings, dir, member string, opts []kgo.Opt, m *job.Metrics, logs *testkit.SyncBuffer, done func() bool) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(st.Stages)*st.Units)
	var restored []string
	for _, stage := range st.Stages {
		for u := range st.Units {
			s := set
			s.CheckpointDir, s.StateDir = dir+"/"+member+"/staging", dir+"/"+member+"/state"
			s.Unit = &job.Unit{Stage: stage.Index, Index: u, Units: st.Units, Member: member, Fingerprint: st.Fingerprint}
			j, err := job.Build(ctx, stage.Graph, s, job.Deps{ClientOpts: opts, Metrics: m,
				Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			if err != nil {
				t.Fatalf("%s: build stage %d unit %d: %v", member, stage.Index, u, err)
			}
			if stage.Index == 1 {
				restored = append(restored, j.RestoredFrom())
			}
			wg.Go(func() {
				if err := j.Run(ctx); err != nil {
					errs <- fmt.Errorf("%s: stage %d unit %d: %w", member, stage.Index, u, err)
				}
			})
		}
	}
	if !testkit.Poll(2*time.Minute, done) {
		t.Fatalf("%s: the units did not get done within 2 minutes; warnings:\n%s", member, logs.String())
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return restored
}

// checkRestoredFrom fails the test unless every stage-1 unit of restored
// (runUnits) restored a checkpoint downloaded into member's staging
// directory under dir, of job.
func checkRestoredFrom(t *testing.T, restored []string, dir, member, job string) {
	t.Helper()
	for u, r := range restored {
		if want := fmt.Sprintf("%s/%s/staging/%s/units/1/%d/chk-", dir, member, job, u); !strings.HasPrefix(r, want) {
			t.Errorf("%s's stage-1 unit %d restored %q, want a checkpoint downloaded into %s", member, u, r, want)
		}
	}
}
