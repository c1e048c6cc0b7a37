package operators

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// TestAggregateKeyHint: a subtask that began without restored state
// knows the keys it never wrote hold no accumulators (aggKeyHint on: a
// written key is not absent, an unseen one is); after a restore the hint
// is off, so the restored keys are read and go on from their rows (a
// hint left on would restart them from zero: total 1, n 1). Both
// backends, with and without mini_batch.
func TestAggregateKeyHint(t *testing.T) {
	ctx := context.Background()
	specs := []AggregateSpec{{Name: "total", Fn: AggSum, Of: compiled(t, "amount")}, {Name: "n", Fn: AggCount}}
	for _, kind := range backends {
		for _, mb := range []*MiniBatchParams{nil, {Size: 3}} {
			t.Run(fmt.Sprintf("%s/mini_batch=%t", kind, mb != nil), func(t *testing.T) {
				dir := t.TempDir()
				var restore *Restore
				var f *Aggregate
				var op *KeyedOperator
				ch := runtime.NewChannel(64)
				open := func() {
					f = NewAggregate(AggregateParams{Emit: EmitEveryUpdate, Aggregates: specs, MiniBatch: mb}, false)
					out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
					op = NewKeyedProcessOperator(OpenContext{Operator: "op", Parallelism: 1}, opener(kind, t.TempDir()), restore, f, out)
					if err := op.Open(ctx); err != nil {
						t.Fatal(err)
					}
				}
				process := func(keys ...string) {
					for _, k := range keys {
						if err := op.ProcessRecord(ctx, 0, payment(k, 5, "u")); err != nil {
							t.Fatal(err)
						}
					}
				}
				open()
				if !f.hint.on {
					t.Fatal("hint off on a subtask without restored state")
				}
				process("a", "b", "a")
				finish, err := op.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1, Dir: dir})
				if err != nil {
					t.Fatal(err)
				}
				snap, err := finish(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if f.hint.absent([]byte("a")) || f.hint.absent([]byte("b")) || !f.hint.absent([]byte("c")) {
					t.Fatalf("hint: absent a %t, b %t, c %t; want false, false, true", f.hint.absent([]byte("a")), f.hint.absent([]byte("b")), f.hint.absent([]byte("c")))
				}
				if err := op.Close(); err != nil {
					t.Fatal(err)
				}
				elementsText(ch)
				var ts checkpoint.TaskState
				if err := json.Unmarshal(snap.State, &ts); err != nil {
					t.Fatal(err)
				}
				restore = &Restore{Keyed: []state.RestoreHandle{{Handle: ts.Keyed, Dir: dir}}}
				open()
				defer op.Close()
				if f.hint.on {
					t.Fatal("hint on after a restore")
				}
				process("a", "c")
				if err := op.EndInput(ctx); err != nil {
					t.Fatal(err)
				}
				want := []string{`-U {"key":"a","total":10,"n":2}`, `+U {"key":"a","total":15,"n":3}`, `+I {"key":"c","total":5,"n":1}`}
				if got := elementsText(ch); !reflect.DeepEqual(got, want) {
					t.Fatalf("after the restore:\n%v\nwant\n%v", got, want)
				}
			})
		}
	}
}

// TestAggKeyHintBound: the hint keeps at most max keys; the key that would
// pass the bound turns it off and drops its memory, and from then on no
// key is reported absent (every key is read), so a job whose keys grow
// without bound does not grow the heap with them.
func TestAggKeyHintBound(t *testing.T) {
	var h aggKeyHint
	h.reset(true)
	if h.max != aggHintMaxKeys {
		t.Fatalf("max %d, want aggHintMaxKeys %d", h.max, aggHintMaxKeys)
	}
	h.max = 3
	for _, k := range []string{"a", "b", "c"} {
		h.add([]byte(k))
	}
	if !h.on || len(h.keys) != 3 || h.absent([]byte("a")) || !h.absent([]byte("d")) {
		t.Fatalf("at the bound: on %t, %d keys, absent a %t, d %t; want on, 3, false, true", h.on, len(h.keys), h.absent([]byte("a")), h.absent([]byte("d")))
	}
	h.add([]byte("d"))
	if h.on || h.keys != nil {
		t.Fatalf("past the bound: on %t, keys %v; want off and dropped", h.on, h.keys)
	}
	for _, k := range []string{"a", "d", "e"} {
		if h.absent([]byte(k)) {
			t.Fatalf("%s reported absent by a hint turned off", k)
		}
	}
	h.add([]byte("f")) // off: a no-op, no panic on the nil map
	if h.on || h.keys != nil {
		t.Fatal("an add after the hint turned off turned it on again")
	}
}
