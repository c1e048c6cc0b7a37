package checkpoint

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// TestCheckpointHistory runs checkpoints on the fake clock: checkpoint 1
// acknowledged after 30 ms with alignments of 7 and 14 ms, checkpoint 2
// declined by op[1], savepoint 3 (30 ms) and checkpoint 4 still in flight;
// History reports each with its exact trigger time, duration, size,
// longest alignment, directory and failure reason.
func TestCheckpointHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewStorage(t.TempDir(), "job", 3, nil)
		var j *fakeJob
		j = newFakeJob(2, func(b *runtime.Barrier, task runtime.TaskID) answer {
			if b.CheckpointID == 2 {
				if task.Operator == "op" && task.Subtask == 1 {
					return decline
				}
				return ack
			}
			if task.Operator == "op" {
				j.c.AlignmentDuration(task, b.CheckpointID, time.Duration(task.Subtask+1)*7*time.Millisecond)
			}
			return slowAck
		})
		j.ackDelay = 30 * time.Millisecond
		c := j.coordinator(t, CoordinatorConfig{Job: "job", MaxParallelism: 128, Storage: s, Interval: 100 * time.Millisecond, TolerableFailures: 5})
		start := time.Now()
		r := runCoordinator(c)
		defer r.stop()
		if h := c.History(); len(h) != 0 {
			t.Fatalf("History before any checkpoint: %+v", h)
		}

		time.Sleep(250 * time.Millisecond) // checkpoint 1 at 100 ms (done at 130), 2 at 200 ms (declined)
		synctest.Wait()
		sp, err := c.TriggerSavepoint(context.Background(), t.TempDir(), false) // 250 ms to 280 ms
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond) // checkpoint 4 triggered at 300 ms; now 310 ms
		synctest.Wait()
		want := []CheckpointStats{
			{ID: 1, Status: StatusCompleted, Triggered: start.Add(100 * time.Millisecond), Duration: 30 * time.Millisecond,
				Bytes: 3 * taskSnapshotBytes, Alignment: 14 * time.Millisecond, Dir: s.CheckpointDir(1)},
			{ID: 2, Status: StatusFailed, Triggered: start.Add(200 * time.Millisecond), Dir: s.CheckpointDir(2),
				Failure: "declined by op[1]: injected decline"},
			{ID: 3, Savepoint: true, Status: StatusCompleted, Triggered: start.Add(250 * time.Millisecond), Duration: 30 * time.Millisecond,
				Bytes: 3 * taskSnapshotBytes, Alignment: 14 * time.Millisecond, Dir: sp},
			{ID: 4, Status: StatusInProgress, Triggered: start.Add(300 * time.Millisecond), Duration: 10 * time.Millisecond,
				Alignment: 14 * time.Millisecond, Dir: s.CheckpointDir(4)},
		}
		got := c.History()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("History:\n%+v\nwant\n%+v", got, want)
		}
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		j.wg.Wait()
		// Stopping aborts checkpoint 4.
		if h := c.History(); len(h) != 4 || h[3].Status != StatusFailed || h[3].Failure != "job stopping" {
			t.Fatalf("checkpoint 4 after the stop: %+v, want failed with \"job stopping\"", h[len(h)-1])
		}
	})
}

// TestHistoryBounded: the history keeps the newest HistorySize entries.
func TestHistoryBounded(t *testing.T) {
	var h history
	at := time.Unix(1000, 0)
	for id := int64(1); id <= HistorySize+5; id++ {
		h.started(id, false, fmt.Sprint("chk-", id), at)
		h.completed(id, false, fmt.Sprint("chk-", id), id*10, at.Add(time.Duration(id)*time.Millisecond))
	}
	got := h.snapshot(at)
	if len(got) != HistorySize || got[0].ID != 6 || got[HistorySize-1].ID != HistorySize+5 {
		t.Fatalf("%d entries from %d to %d, want %d from 6 to %d", len(got), got[0].ID, got[len(got)-1].ID, HistorySize, HistorySize+5)
	}
	if e := got[0]; e.Bytes != 60 || e.Duration != 6*time.Millisecond || e.Status != StatusCompleted || e.Dir != "chk-6" {
		t.Fatalf("oldest kept entry %+v", e)
	}
	h.aligned(3, time.Second) // dropped: ignored
	h.aligned(7, time.Second)
	if got := h.snapshot(at); got[1].Alignment != time.Second || got[0].Alignment != 0 {
		t.Fatalf("alignments %v %v, want 0 and 1s", got[0].Alignment, got[1].Alignment)
	}
}
