package sink

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// newKafkaSink returns the exactly-once Kafka sink subtask as the job
// builds it: the generic connector.TwoPhaseCommitSink over a KafkaCommitter
// of k, and that committer (for EnableMarkers).
func newKafkaSink(name string, sub int, k TwoPhaseCommitter, m *Metrics, logger *slog.Logger) (*connector.TwoPhaseCommitSink, *KafkaCommitter) {
	kc := NewKafkaCommitter(name, k, m)
	return connector.NewTwoPhaseCommitSink(CommittableType, name, sub, kc, logger), kc
}

// snapshotCommittables returns the Kafka committables of a sink's snapshot.
func snapshotCommittables(t *testing.T, fin runtime.SnapshotFinisher) []Committable {
	t.Helper()
	snap, err := fin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ts checkpoint.TaskState
	if err := json.Unmarshal(snap.State, &ts); err != nil {
		t.Fatal(err)
	}
	envs, err := checkpoint.DecodeCommittables(ts)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := DecodeCommittables("s", envs)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// fixedCommitter is a TwoPhaseCommitter whose pre-commits return the
// committables of cs in turn, and which logs the calls the generic sink
// makes (Snapshotted, CheckpointCompleted) in order.
type fixedCommitter struct {
	cs  []Committable
	log []string
}

func (f *fixedCommitter) BeginTransaction(context.Context) error {
	f.log = append(f.log, "begin")
	return nil
}
func (f *fixedCommitter) Write(context.Context, runtime.Record) error { return nil }
func (f *fixedCommitter) AbortOpen(context.Context) error             { return nil }
func (f *fixedCommitter) Close() error                                { return nil }
func (f *fixedCommitter) Snapshotted(id int64)                        { f.log = append(f.log, "snapshotted:"+itoa(id)) }
func (f *fixedCommitter) CheckpointCompleted(id int64)                { f.log = append(f.log, "completed:"+itoa(id)) }
func (f *fixedCommitter) Commit(_ context.Context, c Committable) error {
	f.log = append(f.log, "commit:"+c.TransactionalID)
	return nil
}
func (f *fixedCommitter) PreCommit(_ context.Context, id int64) (Committable, error) {
	c := f.cs[0]
	f.cs = f.cs[1:]
	f.log = append(f.log, "precommit:"+itoa(id))
	return c, nil
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestKafkaCommittablesEncoding: the Kafka sink behind the generic
// two-phase-commit sink snapshots exactly the bytes the Kafka sink wrote
// before the two were folded into one (checkpoint metadata version 3:
// the operator list state CommittablesState, even split, one envelope of
// sink type "kafka" per pending Committable as JSON, in checkpoint order),
// and calls the Kafka committer's hooks in the order it did: Snapshotted
// after the pre-commit and before the next transaction opens,
// CheckpointCompleted after the commits, the empty epoch committed too.
func TestKafkaCommittablesEncoding(t *testing.T) {
	ctx := context.Background()
	cs := []Committable{
		{TransactionalID: "p-0-0", ProducerID: 7, Epoch: 2, CheckpointID: 1, Records: 3, Topic: "out", Partition: 1, Offset: 40},
		{TransactionalID: "p-0-1", ProducerID: 8, CheckpointID: 2}, // an empty epoch
	}
	f := &fixedCommitter{cs: append([]Committable(nil), cs...)}
	s, _ := newKafkaSink("out", 0, f, nil, slog.New(slog.DiscardHandler))
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1}); err != nil {
		t.Fatal(err)
	}
	fin, err := s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 2})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := fin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The layout the Kafka sink's own SnapshotState built.
	var entries [][]byte
	for _, c := range cs {
		data, _ := json.Marshal(c)
		e, err := checkpoint.EncodeCommittable(CommittableType, data)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	want, _ := json.Marshal(checkpoint.TaskState{Operator: map[string]state.OperatorListSnapshot{
		CommittablesState: {Mode: state.ModeSplit, Entries: entries},
	}})
	if string(snap.State) != string(want) {
		t.Fatalf("snapshot\n%s\nwant\n%s", snap.State, want)
	}
	if err := s.NotifyCheckpointComplete(ctx, 2); err != nil {
		t.Fatal(err)
	}
	wantLog := []string{"begin", "precommit:1", "snapshotted:1", "begin", "precommit:2", "snapshotted:2", "begin", "commit:p-0-0", "commit:p-0-1", "completed:2"}
	if got := f.log; len(got) != len(wantLog) || string(mustJSON(got)) != string(mustJSON(wantLog)) {
		t.Fatalf("calls %q, want %q", got, wantLog)
	}
	if s.PendingCommits() {
		t.Fatal("pending commits after the checkpoint completed")
	}
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }
