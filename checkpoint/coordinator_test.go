package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/runtime"
)

// The coordinator tests run in a synctest bubble: the coordinator's ticker,
// timeout timers and time.Now use the bubble's fake clock, so trigger times
// and counts are exact. Ticks come every Interval from the start of Run.

// TestCommitFailureKeepsPreviousCheckpoint injects a failure between the
// task snapshots and the metadata rename of checkpoint 2 (the issue's
// acceptance): checkpoint 1 stays the latest, chk-2 is left without
// metadata and listed incomplete, and the next completed checkpoint's
// retention deletes it.
func TestCommitFailureKeepsPreviousCheckpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewStorage(t.TempDir(), "job", 3, nil)
		injected := errors.New("injected crash before the metadata rename")
		var hooked []int64
		s.beforeCommit = func(id int64) error {
			hooked = append(hooked, id)
			if id == 2 {
				return injected
			}
			return nil
		}
		j := newFakeJob(2, nil)
		c := j.coordinator(t, CoordinatorConfig{Job: "job", MaxParallelism: 128, Storage: s, Interval: 100 * time.Millisecond, TolerableFailures: 1,
			RequiredStates: map[string][]string{"op": {"b", "a"}}})
		start := time.Now()
		if id, at := c.LastCompleted(); id != 0 || !at.IsZero() {
			t.Fatalf("LastCompleted before any checkpoint = %d, %v", id, at)
		}
		r := runCoordinator(c)
		defer r.stop()

		time.Sleep(250 * time.Millisecond) // checkpoint 1 at 100 ms, 2 at 200 ms
		synctest.Wait()
		if id, at := c.LastCompleted(); id != 1 || !at.Equal(start.Add(100*time.Millisecond)) {
			t.Fatalf("LastCompleted = %d at %v, want 1 at +100ms", id, at.Sub(start))
		}
		dir, m, err := s.Latest()
		if err != nil {
			t.Fatalf("Latest: %v", err)
		}
		if dir != s.CheckpointDir(1) {
			t.Fatalf("Latest dir = %s, want %s", dir, s.CheckpointDir(1))
		}
		want := &Metadata{
			Version: MetadataVersion, Job: "job", CheckpointID: 1, MaxParallelism: 128,
			Timestamp: m.Timestamp, Completed: m.Completed, Bytes: 3 * taskSnapshotBytes,
			Operators: map[string]OperatorMetadata{
				"src": {Parallelism: 1, Subtasks: []json.RawMessage{taskStateJSON(runtime.TaskID{Operator: "src"})}},
				"op": {Parallelism: 2, Subtasks: []json.RawMessage{
					taskStateJSON(runtime.TaskID{Operator: "op", Subtask: 0}), taskStateJSON(runtime.TaskID{Operator: "op", Subtask: 1}),
				}, RequiredStates: []string{"a", "b"}},
			},
		}
		assertMetadata(t, m, want)
		if got := listStates(t, s); !slices.Equal(got, []string{"1:completed", "2:incomplete"}) {
			t.Fatalf("List = %q, want [1:completed 2:incomplete]", got)
		}
		chk2 := s.CheckpointDir(2)
		if !exists(t, filepath.Join(chk2, "op", "1", "state")) {
			t.Fatal("chk-2 lost its task files before retention ran")
		}
		if exists(t, filepath.Join(chk2, MetadataFile)) {
			t.Fatal("chk-2 has metadata although its commit failed")
		}
		if !exists(t, filepath.Join(chk2, MetadataFile+".tmp")) {
			t.Fatal("chk-2 has no temporary metadata: the failure was not injected between the temp file and the rename")
		}
		for _, tk := range j.tasks {
			completed, aborted := tk.notices()
			if !slices.Equal(completed, []int64{1}) || !slices.Equal(aborted, []int64{2}) {
				t.Fatalf("%s: completed %v aborted %v, want [1] and [2]", tk.id, completed, aborted)
			}
		}

		time.Sleep(100 * time.Millisecond) // checkpoint 3 at 300 ms
		synctest.Wait()
		if got := listStates(t, s); !slices.Equal(got, []string{"1:completed", "3:completed"}) {
			t.Fatalf("List after checkpoint 3 = %q, want [1:completed 3:completed]", got)
		}
		if exists(t, chk2) {
			t.Fatal("retention after checkpoint 3 left the failed chk-2")
		}
		if dir, m, err := s.Latest(); err != nil || dir != s.CheckpointDir(3) || m.CheckpointID != 3 {
			t.Fatalf("Latest = %s, %+v, %v; want chk-3", dir, m, err)
		}
		if id, at := c.LastCompleted(); id != 3 || !at.Equal(start.Add(300*time.Millisecond)) {
			t.Fatalf("LastCompleted = %d at %v, want 3 at +300ms", id, at.Sub(start))
		}
		if !slices.Equal(hooked, []int64{1, 2, 3}) {
			t.Fatalf("beforeCommit ran for %v, want [1 2 3]", hooked)
		}
		if err := r.stop(); err != nil {
			t.Fatalf("Run = %v, want nil after cancel", err)
		}
	})
}

// assertMetadata compares m with want field by field (the JSON of subtask
// states compacted).
func assertMetadata(t *testing.T, m, want *Metadata) {
	t.Helper()
	g, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if string(g) != string(w) {
		t.Fatalf("metadata\n got %s\nwant %s", g, w)
	}
}

// TestCoordinatorFailures covers timeouts, declines and the tolerable
// failure count: a failed checkpoint is aborted (every task gets the abort
// notice) and counted; only consecutive failures count; more of them than
// tolerated make Run return ErrTooManyFailures.
func TestCoordinatorFailures(t *testing.T) {
	const interval = 100 * time.Millisecond
	byID := func(m map[int64]answer) func(*runtime.Barrier, runtime.TaskID) answer {
		return func(b *runtime.Barrier, task runtime.TaskID) answer {
			if a, ok := m[b.CheckpointID]; ok && task == (runtime.TaskID{Operator: "op", Subtask: 1}) {
				return a
			}
			return ack
		}
	}
	for _, tc := range []struct {
		name       string
		answers    map[int64]answer // of op[1]; everything else acknowledges
		timeout    time.Duration
		tolerable  int
		run        time.Duration
		wantErr    string // "" while Run still runs at the end
		completed  []int64
		aborted    []int64
		wantFailed float64
	}{
		{
			// 1 at 100 ms times out at 350 ms; ticks at 200 and 300 ms find
			// it in flight; 2 at 400 ms completes and resets the count.
			name: "timeout aborts and counts", answers: map[int64]answer{1: silent}, timeout: 250 * time.Millisecond,
			tolerable: 1, run: 450 * time.Millisecond, completed: []int64{2}, aborted: []int64{1}, wantFailed: 1,
		},
		{
			// 1, 2 and 3 time out at 1050, 2050 and 3050 ms.
			name: "timeouts beyond tolerance fail the job", answers: map[int64]answer{1: silent, 2: silent, 3: silent, 4: silent},
			timeout: 950 * time.Millisecond, tolerable: 2, run: 5 * time.Second,
			wantErr:    "checkpoint: too many consecutive failed checkpoints: 3 failed in a row (tolerable: 2); last: checkpoint 3: timed out after 950ms",
			aborted:    []int64{1, 2, 3},
			wantFailed: 3,
		},
		{
			name: "decline aborts", answers: map[int64]answer{1: decline}, tolerable: 1, run: 250 * time.Millisecond,
			completed: []int64{2}, aborted: []int64{1}, wantFailed: 1,
		},
		{
			name: "decline without tolerance fails the job", answers: map[int64]answer{1: decline}, tolerable: 0, run: time.Second,
			wantErr:    "checkpoint: too many consecutive failed checkpoints: 1 failed in a row (tolerable: 0); last: checkpoint 1: declined by op[1]: injected decline",
			aborted:    []int64{1},
			wantFailed: 1,
		},
		{
			// Never two failures in a row: tolerating one is enough.
			name: "only consecutive failures count", answers: map[int64]answer{1: decline, 3: decline, 5: decline}, tolerable: 1,
			run: 650 * time.Millisecond, completed: []int64{2, 4, 6}, aborted: []int64{1, 3, 5}, wantFailed: 3,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reg := prometheus.NewRegistry()
				metrics, err := NewMetrics(reg)
				if err != nil {
					t.Fatal(err)
				}
				s := NewStorage(t.TempDir(), "job", 3, nil)
				j := newFakeJob(2, byID(tc.answers))
				c := j.coordinator(t, CoordinatorConfig{Job: "job", MaxParallelism: 128, Storage: s, Interval: interval,
					Timeout: tc.timeout, TolerableFailures: tc.tolerable, Metrics: metrics})
				r := runCoordinator(c)
				defer r.stop()
				var runErr error
				select {
				case <-r.done:
					runErr = r.err
				case <-time.After(tc.run):
				}
				synctest.Wait()
				switch {
				case tc.wantErr == "" && runErr != nil:
					t.Fatalf("Run returned %v, want it still running", runErr)
				case tc.wantErr != "" && runErr == nil:
					t.Fatalf("Run still running after %v, want %q", tc.run, tc.wantErr)
				case tc.wantErr != "" && (!errors.Is(runErr, ErrTooManyFailures) || runErr.Error() != tc.wantErr):
					t.Fatalf("Run = %v, want %q wrapping ErrTooManyFailures", runErr, tc.wantErr)
				}
				for _, tk := range j.tasks {
					completed, aborted := tk.notices()
					if !slices.Equal(completed, tc.completed) || !slices.Equal(aborted, tc.aborted) {
						t.Fatalf("%s: completed %v aborted %v, want %v and %v", tk.id, completed, aborted, tc.completed, tc.aborted)
					}
				}
				if got := metricValue(t, metrics.total.WithLabelValues("checkpoint", "failed")); got != tc.wantFailed {
					t.Fatalf("failed checkpoints metric = %v, want %v", got, tc.wantFailed)
				}
				if got := metricValue(t, metrics.total.WithLabelValues("checkpoint", "completed")); got != float64(len(tc.completed)) {
					t.Fatalf("completed checkpoints metric = %v, want %d", got, len(tc.completed))
				}
				var wantList []string
				for _, id := range tc.completed {
					wantList = append(wantList, completedState(id))
				}
				if tc.wantErr != "" {
					// Nothing completed: nothing ran retention, every
					// aborted checkpoint directory is still there.
					wantList = nil
					for _, id := range tc.aborted {
						wantList = append(wantList, incompleteState(id))
					}
				}
				if got := listStates(t, s); !slices.Equal(got, wantList) {
					t.Fatalf("List = %q, want %q", got, wantList)
				}
			})
		})
	}
}

func completedState(id int64) string  { return strconv.FormatInt(id, 10) + ":" + StateCompleted }
func incompleteState(id int64) string { return strconv.FormatInt(id, 10) + ":" + StateIncomplete }

// TestMinPause drives the coordinator with a 10 ms interval and a 35 ms
// minimum pause: a checkpoint is triggered at the first tick at least
// MinPause after the previous one ended, so the trigger times follow from
// how long the acknowledgements take.
func TestMinPause(t *testing.T) {
	for _, tc := range []struct {
		name     string
		minPause time.Duration
		ackDelay time.Duration
		want     []time.Duration // trigger times in the first 200 ms
	}{
		{name: "no pause", ackDelay: 0, want: durations(10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180, 190, 200)},
		// Ends at 10, 50, 90...: the next tick at least 35 ms later is 40 ms later.
		{name: "instant acks", minPause: 35 * time.Millisecond, want: durations(10, 50, 90, 130, 170)},
		// Ends 25 ms after each trigger: 35, 95, 155: next ticks 70, 130, 190.
		{name: "slow acks", minPause: 35 * time.Millisecond, ackDelay: 25 * time.Millisecond, want: durations(10, 70, 130, 190)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				s := NewStorage(t.TempDir(), "job", 3, nil)
				a := ack
				if tc.ackDelay > 0 {
					a = slowAck
				}
				j := newFakeJob(1, func(*runtime.Barrier, runtime.TaskID) answer { return a })
				j.ackDelay = tc.ackDelay
				c := j.coordinator(t, CoordinatorConfig{Job: "job", MaxParallelism: 128, Storage: s, Interval: 10 * time.Millisecond,
					MinPause: tc.minPause, TolerableFailures: 0})
				r := runCoordinator(c)
				time.Sleep(205 * time.Millisecond)
				if err := r.stop(); err != nil {
					t.Fatalf("Run = %v", err)
				}
				j.wg.Wait()
				var got []time.Duration
				for _, b := range j.triggered() {
					got = append(got, b.Timestamp.Sub(start))
				}
				if !slices.Equal(got, tc.want) {
					t.Fatalf("triggered at %v, want %v", got, tc.want)
				}
			})
		})
	}
}

// TestAlignedTriggers: with Aligned, periodic checkpoints trigger at the
// wall-clock times that are Phase modulo Interval (Phase 24 ms with a 10 ms
// interval: 4 ms past each 10 ms), whenever the coordinator started, and a
// checkpoint still in flight at an aligned time skips that one (the next
// trigger is the following aligned time, not a delayed one).
func TestAlignedTriggers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ackDelay time.Duration
		want     []time.Duration // trigger times after the clock's start (a multiple of 10 ms)
	}{
		{name: "instant acks", want: durations(14, 24, 34, 44, 54, 64, 74, 84, 94)},
		// Each checkpoint ends 15 ms after its trigger: every other aligned time is skipped.
		{name: "slow acks", ackDelay: 15 * time.Millisecond, want: durations(14, 34, 54, 74, 94)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				if start.UnixNano()%int64(10*time.Millisecond) != 0 {
					t.Fatalf("the fake clock starts at %v, not on a 10 ms boundary", start)
				}
				time.Sleep(7 * time.Millisecond) // the coordinator starts off the phase
				a := ack
				if tc.ackDelay > 0 {
					a = slowAck
				}
				j := newFakeJob(1, func(*runtime.Barrier, runtime.TaskID) answer { return a })
				j.ackDelay = tc.ackDelay
				c := j.coordinator(t, CoordinatorConfig{Job: "job", MaxParallelism: 128, Storage: NewStorage(t.TempDir(), "job", 3, nil),
					Interval: 10 * time.Millisecond, Aligned: true, Phase: 24 * time.Millisecond})
				r := runCoordinator(c)
				time.Sleep(90 * time.Millisecond) // until 97 ms
				if err := r.stop(); err != nil {
					t.Fatalf("Run = %v", err)
				}
				j.wg.Wait()
				var got []time.Duration
				for _, b := range j.triggered() {
					got = append(got, b.Timestamp.Sub(start))
				}
				if !slices.Equal(got, tc.want) {
					t.Fatalf("triggered at %v, want %v", got, tc.want)
				}
			})
		})
	}
}

// TestNextAligned: the first time strictly after now that is phase modulo
// interval; phases beyond the interval or negative are reduced.
func TestNextAligned(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		now, phase, want time.Duration // now and want after base
	}{
		{0, 0, time.Second},
		{1, 0, time.Second},
		{0, 500 * time.Millisecond, 500 * time.Millisecond},
		{500 * time.Millisecond, 500 * time.Millisecond, 1500 * time.Millisecond},
		{700 * time.Millisecond, 2500 * time.Millisecond, 1500 * time.Millisecond},
		{100 * time.Millisecond, -250 * time.Millisecond, 750 * time.Millisecond},
	} {
		if got := nextAligned(base.Add(tc.now), time.Second, tc.phase).Sub(base); got != tc.want {
			t.Errorf("nextAligned(base+%v, 1s, %v) = base+%v, want base+%v", tc.now, tc.phase, got, tc.want)
		}
	}
}

func durations(ms ...int) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, m := range ms {
		out[i] = time.Duration(m) * time.Millisecond
	}
	return out
}

// TestSavepointsAndRetention takes checkpoints with Retained 2 and a
// savepoint in between: the savepoint goes to its own directory (never
// under the job's checkpoint directory), is self-contained (no shared
// directory even with incremental checkpoints), survives every retention,
// and exactly the two newest checkpoints are kept.
func TestSavepointsAndRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		s := NewStorage(filepath.Join(root, "checkpoints"), "job", 2, nil)
		spDir := filepath.Join(root, "savepoints")
		j := newFakeJob(2, nil)
		c := j.coordinator(t, CoordinatorConfig{Job: "job", MaxParallelism: 128, Storage: s, Interval: 100 * time.Millisecond, Incremental: true})
		r := runCoordinator(c)
		defer r.stop()

		time.Sleep(250 * time.Millisecond) // checkpoints 1 and 2
		path, err := c.TriggerSavepoint(context.Background(), spDir, false)
		if err != nil {
			t.Fatalf("TriggerSavepoint: %v", err)
		}
		// Savepoint 3 at 250 ms; the bubble's clock starts at 2000-01-01 UTC.
		if want := filepath.Join(spDir, "savepoint-3-946684800"); path != want {
			t.Fatalf("savepoint path = %s, want %s", path, want)
		}
		time.Sleep(600 * time.Millisecond) // checkpoints 4..9 at 300..800 ms
		synctest.Wait()

		if got, want := listStates(t, s), []string{"8:completed", "9:completed"}; !slices.Equal(got, want) {
			t.Fatalf("List = %q, want %q", got, want)
		}
		m, err := ReadMetadata(path)
		if err != nil {
			t.Fatalf("savepoint metadata after retention: %v", err)
		}
		if !m.Savepoint || m.CheckpointID != 3 || len(m.SharedFiles) != 0 || m.Bytes != 3*taskSnapshotBytes {
			t.Fatalf("savepoint metadata = %+v", m)
		}
		var sharedDirs []string
		for _, b := range j.triggered() {
			sharedDirs = append(sharedDirs, b.SharedDir)
		}
		want := []string{s.SharedDir(), s.SharedDir(), "", s.SharedDir(), s.SharedDir(), s.SharedDir(), s.SharedDir(), s.SharedDir(), s.SharedDir()}
		if !slices.Equal(sharedDirs, want) {
			t.Fatalf("barriers' shared dirs = %q, want %q", sharedDirs, want)
		}
		if ids := j.triggeredIDs(); !slices.Equal(ids, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}) {
			t.Fatalf("triggered %v", ids)
		}
		if b := j.triggered()[2]; !b.Savepoint || b.Dir != path || b.StopAfter {
			t.Fatalf("savepoint barrier = %+v", b)
		}
		completed, _ := j.tasks[1].notices()
		if !slices.Equal(completed, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}) {
			t.Fatalf("completion notices %v", completed)
		}
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSavepointWaitsForSources: a savepoint asked for before every source
// caught up is not taken; ctx ending first reports ErrNotReady.
func TestSavepointWaitsForSources(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewStorage(t.TempDir(), "job", 2, nil)
		j := newFakeJob(1, nil)
		targets := []runtime.CheckpointTarget{j.tasks[0], j.tasks[1]}
		c, err := NewCoordinator(CoordinatorConfig{Job: "job", MaxParallelism: 128, Storage: s, Interval: 10 * time.Millisecond}, []runtime.SourceTask{j.tasks[0]}, targets)
		if err != nil {
			t.Fatal(err)
		}
		j.c = c
		r := runCoordinator(c)
		defer r.stop()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := c.TriggerSavepoint(ctx, t.TempDir(), false); !errors.Is(err, ErrNotReady) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("TriggerSavepoint before the sources caught up = %v, want ErrNotReady and the deadline", err)
		}
		if ids := j.triggeredIDs(); len(ids) != 0 {
			t.Fatalf("triggered %v before the sources caught up", ids)
		}
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCoordinatorMetrics checks the values of every checkpoint metric after
// two completed checkpoints, a failed one and a savepoint.
func TestCoordinatorMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		metrics, err := NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		s := NewStorage(t.TempDir(), "job", 3, nil)
		j := newFakeJob(2, func(b *runtime.Barrier, _ runtime.TaskID) answer {
			if b.CheckpointID == 2 {
				return decline
			}
			return slowAck
		})
		j.ackDelay = 20 * time.Millisecond
		c := j.coordinator(t, CoordinatorConfig{Job: "job", MaxParallelism: 128, Storage: s, Interval: 100 * time.Millisecond,
			TolerableFailures: 1, Metrics: metrics})
		r := runCoordinator(c)
		defer r.stop()
		c.AlignmentDuration(j.tasks[1].id, 1, 3*time.Millisecond)
		time.Sleep(350 * time.Millisecond) // 1 ok, 2 declined, 3 ok
		if _, err := c.TriggerSavepoint(context.Background(), t.TempDir(), false); err != nil {
			t.Fatal(err)
		}
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		j.wg.Wait()
		// The savepoint (id 4) was triggered at 350 ms and completed 20 ms later.
		expected := `
# HELP kstreamd_checkpoint_last_completed_id Id of the last completed checkpoint or savepoint; 0 when none completed in this process.
# TYPE kstreamd_checkpoint_last_completed_id gauge
kstreamd_checkpoint_last_completed_id 4
# HELP kstreamd_checkpoint_last_completed_timestamp_seconds Unix time the last checkpoint or savepoint completed.
# TYPE kstreamd_checkpoint_last_completed_timestamp_seconds gauge
kstreamd_checkpoint_last_completed_timestamp_seconds 9.4668480037e+08
# HELP kstreamd_checkpoint_size_bytes Bytes written by the last completed checkpoint or savepoint.
# TYPE kstreamd_checkpoint_size_bytes gauge
kstreamd_checkpoint_size_bytes 30
# HELP kstreamd_checkpoints_total Checkpoints and savepoints by kind (checkpoint, savepoint) and result (completed, failed).
# TYPE kstreamd_checkpoints_total counter
kstreamd_checkpoints_total{kind="checkpoint",result="completed"} 2
kstreamd_checkpoints_total{kind="checkpoint",result="failed"} 1
kstreamd_checkpoints_total{kind="savepoint",result="completed"} 1
kstreamd_checkpoints_total{kind="savepoint",result="failed"} 0
`
		got := gatherText(t, reg, "kstreamd_checkpoint_last_completed_id", "kstreamd_checkpoint_last_completed_timestamp_seconds",
			"kstreamd_checkpoint_size_bytes", "kstreamd_checkpoints_total")
		if got != strings.TrimPrefix(expected, "\n") {
			t.Fatalf("metrics:\n%s\nwant:\n%s", got, expected)
		}
		// Every completed checkpoint and savepoint took exactly 20 ms.
		for _, h := range []struct {
			name  string
			count uint64
			sum   float64
		}{
			{"kstreamd_checkpoint_duration_seconds", 3, 0.06},
			{"kstreamd_checkpoint_alignment_duration_seconds", 1, 0.003},
		} {
			count, sum := histogram(t, reg, h.name)
			if count != h.count || !near(sum, h.sum) {
				t.Fatalf("%s: count %d sum %v, want %d and %v", h.name, count, sum, h.count, h.sum)
			}
		}
		if problems := lint(t, reg); len(problems) != 0 {
			t.Fatalf("lint: %v", problems)
		}
	})
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// histogram returns the sample count and sum of the histogram name.
func histogram(t *testing.T, g prometheus.Gatherer, name string) (uint64, float64) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0, 0
}

// TestTriggerCheckpoint: without periodic checkpoints, TriggerCheckpoint
// takes a unit's checkpoint at once through its HEAD chain: the barrier is
// a checkpoint (not a savepoint) with StopAfter as asked, into the job's
// storage; it returns its id once HEAD-2 names it and every task was told
// to commit, and Committed saw it. Once another owner claimed the unit, the
// next one fails with ErrHeadExists and Committed is not called.
func TestTriggerCheckpoint(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := NewStorage(filepath.Join(root, "staging", "job", "units", "0"), "0", 3, nil)
	ns := Namespace{Store: FileStore{Root: filepath.Join(root, "store")}, Prefix: UnitPrefix("job", 0, 0), Local: s}
	heads := ns.Heads()
	o, _, err := Claim(ctx, ns, "a", "fp", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	j := newFakeJob(2, nil)
	var committed []int64 // Committed runs on the coordinator's goroutine
	c := j.coordinator(t, CoordinatorConfig{Job: "job", MaxParallelism: 128, Storage: s, Owner: o,
		Committed: func(id int64, m *Metadata) { committed = append(committed, id) }})
	r := runCoordinator(c)
	defer r.stop()
	id, err := c.TriggerCheckpoint(context.Background(), true)
	if err != nil || id != 1 {
		t.Fatalf("TriggerCheckpoint = %d, %v; want 1, nil", id, err)
	}
	if b := j.triggered(); len(b) != 1 || b[0].Savepoint || !b[0].StopAfter || b[0].Dir != s.CheckpointDir(1) {
		t.Fatalf("barriers %+v, want one checkpoint barrier with StopAfter into %s", b, s.CheckpointDir(1))
	}
	if h, err := heads.Latest(ctx); err != nil || withoutToken(h) != (Head{Seq: 2, CheckpointID: 1, Owner: "a", Fingerprint: "fp", Units: 1, MetadataClaim: 1}) {
		t.Fatalf("newest HEAD %+v (%v), want HEAD-2 naming checkpoint 1", h, err)
	}
	for _, tk := range j.tasks {
		if done, _ := tk.notices(); !slices.Equal(done, []int64{1}) {
			t.Errorf("%s completion notices %v, want [1]", tk.id, done)
		}
	}
	if _, _, err := Claim(ctx, Namespace{Store: ns.Store, Prefix: ns.Prefix}, "b", "fp", 1, 3); err != nil { // b takes the unit over: HEAD-3
		t.Fatal(err)
	}
	if _, err := c.TriggerCheckpoint(context.Background(), false); !errors.Is(err, ErrHeadExists) {
		t.Fatalf("TriggerCheckpoint after the takeover = %v, want ErrHeadExists", err)
	}
	if err := r.stop(); !errors.Is(err, ErrHeadExists) {
		t.Fatalf("Run = %v, want ErrHeadExists", err)
	}
	if !slices.Equal(committed, []int64{1}) {
		t.Errorf("Committed saw %v, want [1]", committed)
	}
}

// TestUnitCheckpointsStaged: a cluster unit's checkpoint barriers (an
// Owner staging in a local Storage) are marked Staging, so the tasks and
// the local metadata skip their fsyncs (the store holds the durable copy;
// the unit's start wipes the staging directory), and the staged checkpoint
// still commits, uploads and names its metadata in the store. A
// single-process job's checkpoints and every savepoint are not staged.
func TestUnitCheckpointsStaged(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := NewStorage(filepath.Join(root, "staging", "job", "units", "0"), "0", 3, nil)
	ns := Namespace{Store: FileStore{Root: filepath.Join(root, "store")}, Prefix: UnitPrefix("job", 0, 0), Local: s}
	o, _, err := Claim(ctx, ns, "a", "fp", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	j := newFakeJob(2, nil)
	c := j.coordinator(t, CoordinatorConfig{Job: "job", MaxParallelism: 128, Storage: s, Owner: o})
	r := runCoordinator(c)
	if id, err := c.TriggerCheckpoint(ctx, false); err != nil || id != 1 {
		t.Fatalf("TriggerCheckpoint = %d, %v; want 1, nil", id, err)
	}
	if _, err := c.TriggerSavepoint(ctx, filepath.Join(root, "savepoints"), false); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	b := j.triggered()
	if len(b) != 2 || !b[0].Staging || b[0].Savepoint || b[1].Staging || !b[1].Savepoint {
		t.Fatalf("barriers %+v, want a staged checkpoint then an unstaged savepoint", b)
	}
	if m, err := ReadMetadata(s.CheckpointDir(1)); err != nil || m.CheckpointID != 1 {
		t.Fatalf("staged metadata %+v, %v; want checkpoint 1", m, err)
	}
	got, err := ns.Store.Read(ctx, ns.Prefix+"chk-1/"+MetadataFile)
	var sm Metadata
	if err == nil {
		err = json.Unmarshal(got, &sm)
	}
	if err != nil || sm.CheckpointID != 1 {
		t.Fatalf("store's chk-1/_metadata %q, %v; want checkpoint 1", got, err)
	}

	single := NewStorage(filepath.Join(root, "single"), "job", 3, nil)
	j = newFakeJob(2, nil)
	c = j.coordinator(t, CoordinatorConfig{Job: "job", MaxParallelism: 128, Storage: single})
	r = runCoordinator(c)
	if _, err := c.TriggerCheckpoint(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if b := j.triggered(); len(b) != 1 || b[0].Staging {
		t.Fatalf("single-process barriers %+v, want one unstaged", b)
	}
}

// TestTriggerAfterRunStopped: a TriggerCheckpoint or TriggerSavepoint
// posted after Run returned (a unit whose retention found the next owner's
// HEAD, a job stopping) is answered with ErrStopped wrapping Run's reason
// instead of waiting for ever; a request Run never took leaves nothing
// behind. The contexts here never end.
func TestTriggerAfterRunStopped(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := NewStorage(filepath.Join(root, "staging", "job", "units", "0"), "0", 3, nil)
	ns := Namespace{Store: FileStore{Root: filepath.Join(root, "store")}, Prefix: UnitPrefix("job", 0, 0), Local: s}
	o, _, err := Claim(ctx, ns, "a", "fp", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	j := newFakeJob(2, nil)
	c := j.coordinator(t, CoordinatorConfig{Job: "job", MaxParallelism: 128, Storage: s, Owner: o})
	r := runCoordinator(c)
	if id, err := c.TriggerCheckpoint(ctx, false); err != nil || id != 1 {
		t.Fatalf("TriggerCheckpoint = %d, %v; want 1, nil", id, err)
	}
	if _, _, err := Claim(ctx, Namespace{Store: ns.Store, Prefix: ns.Prefix}, "b", "fp", 1, 3); err != nil {
		t.Fatal(err)
	}
	// The next checkpoint finds b's claim and stops Run.
	if _, err := c.TriggerCheckpoint(ctx, false); !errors.Is(err, ErrHeadExists) {
		t.Fatalf("TriggerCheckpoint after the takeover = %v, want ErrHeadExists", err)
	}
	if err := r.stop(); !errors.Is(err, ErrHeadExists) {
		t.Fatalf("Run = %v, want ErrHeadExists", err)
	}
	sent := len(j.triggered())
	// Run has returned: nothing takes these requests any more.
	if _, err := c.TriggerCheckpoint(ctx, false); !errors.Is(err, ErrStopped) || !errors.Is(err, ErrHeadExists) {
		t.Fatalf("TriggerCheckpoint after Run returned = %v, want ErrStopped wrapping ErrHeadExists", err)
	}
	if _, err := c.TriggerSavepoint(ctx, t.TempDir(), false); !errors.Is(err, ErrStopped) {
		t.Fatalf("TriggerSavepoint after Run returned = %v, want ErrStopped", err)
	}
	if b := j.triggered(); len(b) != sent {
		t.Fatalf("%d barriers after Run returned, want the %d sent before", len(b), sent)
	}
}
