package job

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
)

// answerLost is a store whose Create writes and then answers with an
// error, as an S3 PUT whose answer was lost.
type answerLost struct{ checkpoint.FileStore }

func (s answerLost) Create(ctx context.Context, key string, data []byte) error {
	if err := s.FileStore.Create(ctx, key, data); err != nil {
		return err
	}
	return errors.New("connection reset by peer")
}

// createFails is a store whose Create writes nothing and fails.
type createFails struct{ checkpoint.FileStore }

func (s createFails) Create(context.Context, string, []byte) error {
	return errors.New("503 slow down")
}

// sourceStages plans a one-source job reading topic with format.
func sourceStages(t *testing.T, topic string, format graph.Format) *graph.Stages {
	t.Helper()
	g := &graph.Graph{Job: "j", MaxParallelism: 8, Sources: []*graph.Source{{Name: "in", Topic: topic, Format: format, Parallelism: 1}}}
	st, err := graph.Split(g, 2)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestRecordGraph: a graph is recorded once (a second daemon reads the
// first one's record, RecordedAt kept); a create whose answer is lost
// reads the record back; a create that wrote nothing fails naming the
// store's error.
func TestRecordGraph(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := sourceStages(t, "a", "")
	first, err := RecordGraph(ctx, checkpoint.FileStore{Root: root}, st)
	if err != nil || first.Fingerprint != st.Fingerprint || first.Layout.Job != "j" || len(first.Layout.Vertices) != 1 {
		t.Fatalf("record: %+v, %v", first, err)
	}
	again, err := RecordGraph(ctx, checkpoint.FileStore{Root: root}, st)
	if err != nil || !again.RecordedAt.Equal(first.RecordedAt) {
		t.Errorf("second record: %v (%v), want the first one's time %v", again.RecordedAt, err, first.RecordedAt)
	}
	other := sourceStages(t, "b", "")
	if rec, err := RecordGraph(ctx, answerLost{checkpoint.FileStore{Root: root}}, other); err != nil || rec.Fingerprint != other.Fingerprint {
		t.Errorf("record with the answer lost: %+v, %v", rec, err)
	}
	third := sourceStages(t, "c", "")
	if _, err := RecordGraph(ctx, createFails{checkpoint.FileStore{Root: root}}, third); err == nil || !strings.Contains(err.Error(), "record graph "+third.Fingerprint[:12]+" in filesystem "+root+": 503 slow down") {
		t.Errorf("record with the create failing: %v", err)
	}
}

// TestUpgradeCheckRestores: the upgrade check accepts its own graph and a
// compatible earlier one (another format: not state), and refuses, with
// an *UpgradeError that is an ErrIncompatibleState, a graph whose source
// reads another topic (naming it), a graph recorded after its own (a
// rollback) and a graph with no record.
func TestUpgradeCheckRestores(t *testing.T) {
	ctx := context.Background()
	store := checkpoint.FileStore{Root: t.TempDir()}
	old := sourceStages(t, "a", "")
	otherTopic := sourceStages(t, "b", "")
	for _, st := range []*graph.Stages{old, otherTopic} {
		if _, err := RecordGraph(ctx, store, st); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Millisecond) // the new graph is recorded after both
	next := sourceStages(t, "a", "avro")
	u, err := newUpgradeCheck(ctx, Settings{Store: store}, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.restores(ctx, next.Fingerprint); err != nil {
		t.Errorf("its own graph: %v", err)
	}
	if err := u.restores(ctx, old.Fingerprint); err != nil {
		t.Errorf("a compatible earlier graph: %v", err)
	}
	err = u.restores(ctx, otherTopic.Fingerprint)
	if !errors.Is(err, ErrIncompatibleUpgrade) || !errors.Is(err, ErrIncompatibleState) ||
		!strings.Contains(err.Error(), `"in" (uid in): source reads a, was b (its offsets are of the old topics)`) ||
		!strings.Contains(err.Error(), "take a savepoint of the running job") {
		t.Errorf("another topic: %v", err)
	}
	if err := u.restores(ctx, "unrecorded"); !errors.Is(err, ErrIncompatibleUpgrade) || !strings.Contains(err.Error(), "graph unrecorded has no record in "+store.String()+" (j/graphs/unrecorded.json") {
		t.Errorf("an unrecorded graph: %v", err)
	}
	later := sourceStages(t, "a", "csv")
	if _, err := RecordGraph(ctx, store, later); err != nil {
		t.Fatal(err)
	}
	if err := u.restores(ctx, later.Fingerprint); !errors.Is(err, ErrIncompatibleUpgrade) || !strings.Contains(err.Error(), "after this daemon's graph") || !strings.Contains(err.Error(), "going back to an earlier graph is not an upgrade") {
		t.Errorf("a graph recorded later: %v", err)
	}
}
