package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestTwoPhaseCommitSinkWriteTo: a dead-letter writer (a TwoPhaseCommitSink
// with no topic of its own) writes records to two topics in its open
// transaction; the committable counts both and names the topic of the
// first acknowledged one (either: two produce requests); read_committed sees nothing before the
// commit and each record, with its key, value and headers, after it.
func TestTwoPhaseCommitSinkWriteTo(t *testing.T) {
	opts := newCluster(t, kfake.SeedTopics(1, "dlq-a", "dlq-b"))
	ctx := context.Background()
	logger, _ := testLogger()
	s, _ := newKafkaSink("in.dead-letters", 0, NewKafkaTxnCommitter(KafkaTxnConfig{
		Name: "in.dead-letters", TransactionalIDPrefix: "dl", TransactionTimeout: time.Minute, ClientOpts: opts, Logger: logger,
	}), nil, logger)
	defer s.Close()
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	h := []runtime.Header{{Key: "kstreamd.error", Value: []byte("malformed_json: x")}}
	if err := s.WriteTo(ctx, "dlq-a", runtime.Record{Key: []byte("k1"), Value: []byte("v1"), Headers: h}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteTo(ctx, "dlq-b", runtime.Record{Key: []byte("k2"), Value: []byte("v2"), Headers: h}); err != nil {
		t.Fatal(err)
	}
	fin, err := s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := snapshotCommittables(t, fin); len(got) != 1 || got[0].Records != 2 || (got[0].Topic != "dlq-a" && got[0].Topic != "dlq-b") || got[0].Offset != 0 || got[0].TransactionalID != "dl-0-0" {
		t.Fatalf("pending committables %+v, want one of dl-0-0 with 2 records, the first acknowledged at offset 0 of dlq-a or dlq-b", got)
	}
	read := func(topic string) []string {
		var out []string
		for _, r := range testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), topic, 10*time.Second) {
			out = append(out, fmt.Sprintf("%s=%s %s=%s", r.Key, r.Value, r.Headers[0].Key, r.Headers[0].Value))
		}
		return out
	}
	if a, b := read("dlq-a"), read("dlq-b"); len(a)+len(b) != 0 {
		t.Fatalf("read_committed sees %v %v before the commit", a, b)
	}
	if err := s.NotifyCheckpointComplete(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got, want := read("dlq-a"), []string{"k1=v1 kstreamd.error=malformed_json: x"}; !slices.Equal(got, want) {
		t.Errorf("dlq-a holds %q, want %q", got, want)
	}
	if got, want := read("dlq-b"), []string{"k2=v2 kstreamd.error=malformed_json: x"}; !slices.Equal(got, want) {
		t.Errorf("dlq-b holds %q, want %q", got, want)
	}
	if err := s.EndInput(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestNoOpenTransaction: once BeginTransaction failed (every id of a pool
// of 1 pending), a pre-commit declines and a write fails with
// ErrNoOpenTransaction instead of touching a missing transaction.
func TestNoOpenTransaction(t *testing.T) {
	opts := newCluster(t)
	ctx := context.Background()
	logger, _ := testLogger()
	s, _ := newKafkaSink("out", 0, NewKafkaTxnCommitter(KafkaTxnConfig{
		Name: "out", Topic: testTopic, TransactionalIDPrefix: "one", PoolSize: 1, TransactionTimeout: time.Minute, ClientOpts: opts, Logger: logger,
	}), nil, logger)
	defer s.Close()
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1}); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("snapshot 1: %v, want ErrPoolExhausted (the only id is pending)", err)
	}
	if _, err := s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 2}); !errors.Is(err, ErrNoOpenTransaction) {
		t.Errorf("snapshot 2: %v, want ErrNoOpenTransaction", err)
	}
	if err := s.ProcessRecord(ctx, 0, runtime.Record{Value: []byte("x")}); !errors.Is(err, ErrNoOpenTransaction) {
		t.Errorf("write: %v, want ErrNoOpenTransaction", err)
	}
	if err := s.WriteTo(ctx, "dlq", runtime.Record{Value: []byte("x")}); !errors.Is(err, ErrNoOpenTransaction) {
		t.Errorf("write to dlq: %v, want ErrNoOpenTransaction", err)
	}
}
