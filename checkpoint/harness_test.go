package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/kstreamd/kstreamd/runtime"
)

// answer is what a fake task does when a checkpoint reaches it.
type answer int

const (
	ack     answer = iota // acknowledge at once
	decline               // decline at once
	silent                // never answer (the checkpoint times out)
	slowAck               // acknowledge after fakeJob.ackDelay, from another goroutine
)

// fakeJob is a job of fake subtasks for a Coordinator: tasks[0] is the
// source the coordinator triggers; a trigger reaches every task at once (as
// if the barrier flowed through the graph instantly) and each answers as
// decide says. Each acknowledging task writes one small file under the
// barrier's directory, as a real subtask writes its snapshot there.
type fakeJob struct {
	tasks    []*fakeTask
	decide   func(b *runtime.Barrier, task runtime.TaskID) answer
	ackDelay time.Duration
	c        *Coordinator

	mu       sync.Mutex
	barriers []runtime.Barrier // every barrier triggered, in order
	wg       sync.WaitGroup    // slow acknowledgements in flight
}

// fakeTask is one subtask of a fakeJob; it records the completion and abort
// notices it gets.
type fakeTask struct {
	id  runtime.TaskID
	job *fakeJob

	mu        sync.Mutex
	completed []int64
	aborted   []int64
}

// taskSnapshotBytes is the Bytes every fake acknowledgement reports.
const taskSnapshotBytes = 10

// newFakeJob returns a job with one source "src[0]" and the subtasks of
// "op" at parallelism p; decide nil acknowledges everything.
func newFakeJob(p int, decide func(b *runtime.Barrier, task runtime.TaskID) answer) *fakeJob {
	j := &fakeJob{decide: decide}
	if j.decide == nil {
		j.decide = func(*runtime.Barrier, runtime.TaskID) answer { return ack }
	}
	j.tasks = append(j.tasks, &fakeTask{id: runtime.TaskID{Operator: "src", Subtask: 0}, job: j})
	for i := 0; i < p; i++ {
		j.tasks = append(j.tasks, &fakeTask{id: runtime.TaskID{Operator: "op", Subtask: i}, job: j})
	}
	return j
}

// coordinator creates the job's coordinator over cfg and marks the source
// caught up.
func (j *fakeJob) coordinator(t *testing.T, cfg CoordinatorConfig) *Coordinator {
	t.Helper()
	targets := make([]runtime.CheckpointTarget, len(j.tasks))
	for i, tk := range j.tasks {
		targets[i] = tk
	}
	c, err := NewCoordinator(cfg, []runtime.SourceTask{j.tasks[0]}, targets)
	if err != nil {
		t.Fatal(err)
	}
	j.c = c
	c.SourceCaughtUp(j.tasks[0].id)
	return c
}

// triggered returns the barriers triggered so far.
func (j *fakeJob) triggered() []runtime.Barrier {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.barriers)
}

// triggeredIDs returns the ids of the barriers triggered so far.
func (j *fakeJob) triggeredIDs() []int64 {
	var ids []int64
	for _, b := range j.triggered() {
		ids = append(ids, b.CheckpointID)
	}
	return ids
}

func (j *fakeJob) trigger(b *runtime.Barrier) {
	j.mu.Lock()
	j.barriers = append(j.barriers, *b)
	j.mu.Unlock()
	for _, tk := range j.tasks {
		switch j.decide(b, tk.id) {
		case ack:
			j.c.Acknowledge(tk.id, b.CheckpointID, tk.snapshot(b))
		case decline:
			j.c.Decline(tk.id, b.CheckpointID, errors.New("injected decline"))
		case slowAck:
			j.wg.Add(1)
			go func() {
				defer j.wg.Done()
				time.Sleep(j.ackDelay)
				j.c.Acknowledge(tk.id, b.CheckpointID, tk.snapshot(b))
			}()
		case silent:
		}
	}
}

// taskStateJSON is the TaskState every fake subtask reports: one even-split
// operator list state holding the subtask's name.
func taskStateJSON(id runtime.TaskID) json.RawMessage {
	raw, err := json.Marshal(TaskState{Operator: map[string]OperatorListState{
		"names": {Mode: ModeSplit, Entries: [][]byte{[]byte(id.String())}},
	}})
	if err != nil {
		panic(err)
	}
	return raw
}

func (tk *fakeTask) snapshot(b *runtime.Barrier) runtime.TaskSnapshot {
	dir := filepath.Join(b.Dir, tk.id.Operator, fmt.Sprint(tk.id.Subtask))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		panic(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state"), make([]byte, taskSnapshotBytes), 0o644); err != nil {
		panic(err)
	}
	return runtime.TaskSnapshot{State: taskStateJSON(tk.id), Bytes: taskSnapshotBytes}
}

func (tk *fakeTask) Name() string                                     { return tk.id.String() }
func (tk *fakeTask) Run(ctx context.Context, _ <-chan struct{}) error { <-ctx.Done(); return nil }
func (tk *fakeTask) ID() runtime.TaskID                               { return tk.id }
func (tk *fakeTask) TriggerCheckpoint(b *runtime.Barrier)             { tk.job.trigger(b) }

func (tk *fakeTask) NotifyCheckpointComplete(id int64) {
	tk.mu.Lock()
	tk.completed = append(tk.completed, id)
	tk.mu.Unlock()
}

func (tk *fakeTask) NotifyCheckpointAborted(id int64) {
	tk.mu.Lock()
	tk.aborted = append(tk.aborted, id)
	tk.mu.Unlock()
}

// notices returns the completion and abort notices the task got.
func (tk *fakeTask) notices() (completed, aborted []int64) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	return slices.Clone(tk.completed), slices.Clone(tk.aborted)
}

// running is a Coordinator.Run in progress on its own goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error         // Run's error, once done is closed
}

// runCoordinator runs c.Run on its own goroutine.
func runCoordinator(c *Coordinator) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() {
		r.err = c.Run(ctx)
		close(r.done)
	}()
	return r
}

// stop cancels Run and returns its error.
func (r *running) stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// listStates returns "id:state" for every checkpoint of s.
func listStates(t *testing.T, s *Storage) []string {
	t.Helper()
	infos, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, in := range infos {
		out = append(out, fmt.Sprintf("%d:%s", in.ID, in.State))
	}
	return out
}

// exists reports whether path exists.
func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// Metric helpers. prometheus/testutil needs a module go.sum does not hold
// (github.com/kylelemons/godebug), so these read the registry directly.

// metricValue returns the value of a collector of one counter or gauge.
func metricValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	close(ch)
	var pb dto.Metric
	if err := (<-ch).Write(&pb); err != nil {
		t.Fatal(err)
	}
	switch {
	case pb.Counter != nil:
		return pb.Counter.GetValue()
	case pb.Gauge != nil:
		return pb.Gauge.GetValue()
	}
	t.Fatalf("metric %v is neither a counter nor a gauge", pb.String())
	return 0
}

// gatherText returns the text exposition of the named metric families.
func gatherText(t *testing.T, g prometheus.Gatherer, names ...string) string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if slices.Contains(names, mf.GetName()) {
			if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b.String()
}

// lint returns the problems promlint finds in every metric of g.
func lint(t *testing.T, g prometheus.Gatherer) []promlint.Problem {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	return problems
}
