package operators

import (
	"context"
	"errors"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// failOnKeySink is a chained operator that fails (as a chained map with
// on_error fail, or a chained sink's produce error, does) on the records
// of key bad, and keeps the keys of the others.
type failOnKeySink struct {
	bad  string
	seen []string
}

func (s *failOnKeySink) Open(context.Context) error     { return nil }
func (s *failOnKeySink) EndInput(context.Context) error { return nil }
func (s *failOnKeySink) Close() error                   { return nil }
func (s *failOnKeySink) ProcessRecord(_ context.Context, _ int, rec runtime.Record) error {
	if string(rec.Key) == s.bad {
		return errors.New("chained operator failed")
	}
	s.seen = append(s.seen, string(rec.Key))
	return nil
}

// TestAggregateMiniBatchBarrierFailureFailsTask: when the end of a batch
// at a checkpoint barrier fails (here the operator chained after the
// aggregate fails on the second key's row), the batch is gone: k1's row
// was emitted, k2's failed, k3's records were dropped unfolded. Declining
// the checkpoint alone would let the task go on (the coordinator
// tolerates failed checkpoints) and the next checkpoint would commit
// state and output without k3's records. The failure must fail the task:
// SnapshotState returns it and reports it to the task's mailbox (which
// the task checks before its next snapshot and when the mail wakes it).
func TestAggregateMiniBatchBarrierFailureFailsTask(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			sink := &failOnKeySink{bad: "k2"}
			out := runtime.NewOutput(nil)
			out.AddChained(&runtime.ChainedOperator{Operator: sink})
			p := AggregateParams{Aggregates: []AggregateSpec{{Name: "total", Fn: AggSum, Of: compiled(t, "amount")}}, MiniBatch: &MiniBatchParams{Size: 100}}
			op := NewKeyedProcessOperator(OpenContext{Operator: "op", Parallelism: 1}, opener(kind, t.TempDir()), nil, NewAggregate(p, false), out)
			mb := runtime.NewMailbox()
			op.SetMailbox(mb)
			if err := op.Open(ctx); err != nil {
				t.Fatal(err)
			}
			defer op.Close()
			for _, k := range []string{"k1", "k2", "k3"} {
				if err := op.ProcessRecord(ctx, 0, changed(runtime.ChangeInsert, k, 5, "u")); err != nil {
					t.Fatal(err)
				}
			}
			if len(sink.seen) != 0 {
				t.Fatalf("emitted within the batch: %v", sink.seen)
			}
			_, err := op.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1, Dir: t.TempDir()})
			if err == nil {
				t.Fatal("SnapshotState: no error, want the chained operator's failure")
			}
			if got := len(sink.seen); got != 1 || sink.seen[0] != "k1" {
				t.Fatalf("rows before the failure: %v, want [k1]", sink.seen)
			}
			mb.TryYieldAll()
			if mb.Err() == nil {
				t.Fatalf("the batch's failure at the barrier (%v) was not reported to the mailbox: the task would go on without k3's records", err)
			}
		})
	}
}

// keySink is a chained sink keeping "<kind> <value>" of every record.
type keySink struct{ got []string }

func (s *keySink) Open(context.Context) error     { return nil }
func (s *keySink) EndInput(context.Context) error { return nil }
func (s *keySink) Close() error                   { return nil }
func (s *keySink) ProcessRecord(_ context.Context, _ int, rec runtime.Record) error {
	s.got = append(s.got, rec.Change.String()+" "+string(rec.Value))
	return nil
}

// TestAggregateMiniBatchBadRecordMidBatch: a record whose of fails in
// the middle of a batch is refused at once with a *runtime.RecordError
// (reason eval_error; the task's on_error policy skips or dead-letters it
// in the transaction it arrived in), and the batch keeps the records
// before and after it: at the barrier the key emits one +I of the two
// good amounts, 5 + 7.
func TestAggregateMiniBatchBadRecordMidBatch(t *testing.T) {
	ctx := context.Background()
	sink := &keySink{}
	out := runtime.NewOutput(nil)
	out.AddChained(&runtime.ChainedOperator{Operator: sink})
	p := AggregateParams{Aggregates: []AggregateSpec{{Name: "total", Fn: AggSum, Of: compiled(t, "amount")}, {Name: "n", Fn: AggCount}}, MiniBatch: &MiniBatchParams{Size: 100}}
	op := NewKeyedProcessOperator(OpenContext{Operator: "op", Parallelism: 1}, opener("hashmap", t.TempDir()), nil, NewAggregate(p, false), out)
	if err := op.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	for i, amount := range []any{5, "x", 7} {
		err := op.ProcessRecord(ctx, 0, changed(runtime.ChangeInsert, "k1", amount, "u"))
		var re *runtime.RecordError
		switch {
		case i == 1 && !errors.As(err, &re):
			t.Fatalf("record of amount %q: %v, want a *runtime.RecordError", amount, err)
		case i != 1 && err != nil:
			t.Fatal(err)
		}
	}
	if len(sink.got) != 0 {
		t.Fatalf("emitted within the batch: %q", sink.got)
	}
	if _, err := op.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1, Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if want := []string{`+I {"key":"k1","total":12,"n":2}`}; len(sink.got) != 1 || sink.got[0] != want[0] {
		t.Fatalf("at the barrier: %q, want %q", sink.got, want)
	}
}
