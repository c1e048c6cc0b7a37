package operators

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// copyingSink is a chained sink that is a runtime.ValueCopier answering
// copies: it keeps a copy of every record's value, and the address of
// the first byte of the first value after each next().
type copyingSink struct {
	copies bool
	got    []string
	at     []*byte
	first  bool
}

// next says a new input record starts.
func (s *copyingSink) next() { s.first = true }

func (s *copyingSink) CopyValues() bool               { return s.copies }
func (s *copyingSink) Open(context.Context) error     { return nil }
func (s *copyingSink) EndInput(context.Context) error { return nil }
func (s *copyingSink) Close() error                   { return nil }
func (s *copyingSink) ProcessRecord(_ context.Context, _ int, rec runtime.Record) error {
	s.got = append(s.got, string(rec.Key)+" "+string(rec.Value))
	if s.first {
		s.at, s.first = append(s.at, &rec.Value[0]), false
	}
	return nil
}

// TestShapePairLentMatches: chained to a sink that copies values (the
// Output lends them, runtime.Output.LendsValues), the matcher builds every
// record's matches in one buffer it reuses, and the sink gets exactly the
// matches it gets when values are not lent (each record's in buffers of
// their own), on random items, rules and keys.
func TestShapePairLentMatches(t *testing.T) {
	run := func(lend bool) *copyingSink {
		sink := &copyingSink{copies: lend}
		out := runtime.NewOutput(nil)
		out.AddChained(&runtime.ChainedOperator{Operator: sink})
		cfg := state.BackendConfig{Kind: state.KindHashmap, MaxParallelism: ckMaxP, KeyGroupRange: keygroup.RangeFor(ckMaxP, 1, 0)}
		open := func(r []state.RestoreHandle) (state.KeyedStateBackend, error) {
			return state.OpenBackendRestored(cfg, r)
		}
		fn := &ShapePairMatcher{}
		op := NewKeyedBroadcastOperator(OpenContext{Operator: "matcher", Subtask: 0, Parallelism: 1}, open, nil, fn, out)
		ctx := context.Background()
		if err := op.Open(ctx); err != nil {
			t.Fatal(err)
		}
		defer op.Close()
		shapes := []string{"CIRCLE", "SQUARE", "TRIANGLE", "STAR"}
		for i, r := range [][2]string{{"CIRCLE", "SQUARE"}, {"SQUARE", "CIRCLE"}, {"TRIANGLE", "TRIANGLE"}, {"STAR", "CIRCLE"}, {"SQUARE", "STAR"}} {
			v := fmt.Appendf(nil, `{"name":"R%d","first":%q,"second":%q}`, i, r[0], r[1])
			if err := op.ProcessRecord(ctx, 1, runtime.Record{Key: fmt.Appendf(nil, "R%d", i), Value: v}); err != nil {
				t.Fatal(err)
			}
		}
		rng := rand.New(rand.NewPCG(7, 9))
		for i := range 3000 {
			color := fmt.Sprintf("c%d", rng.IntN(20))
			v := fmt.Appendf(nil, `{"id":%d,"color":%q,"shape":%q,"pad":"%*s"}`, i, color, shapes[rng.IntN(len(shapes))], rng.IntN(40), "")
			rec := runtime.Record{Key: []byte(color), Value: v}
			rec.SetDecoded(runtime.ValidJSON{})
			sink.next()
			if err := op.ProcessRecord(ctx, 0, rec); err != nil {
				t.Fatal(err)
			}
		}
		if fn.lends != map[bool]int8{true: lendYes, false: lendNo}[lend] {
			t.Fatalf("lend %v: the matcher's lends = %d", lend, fn.lends)
		}
		return sink
	}
	lent, own := run(true), run(false)
	if len(own.got) < 1000 {
		t.Fatalf("only %d matches: the workload does not exercise the matcher", len(own.got))
	}
	if !slices.Equal(lent.got, own.got) {
		t.Fatalf("lent values: %d matches, own buffers: %d; first difference at %d", len(lent.got), len(own.got), firstDifference(lent.got, own.got))
	}
	// Lent: the first match of every record starts the one buffer (a
	// few addresses: it grows to the largest record's matches); own
	// buffers are carved from slabs, never twice.
	if distinct(lent.at) > 8 {
		t.Fatalf("lent: the first matches of %d records start at %d addresses, want the reused buffer's few", len(lent.at), distinct(lent.at))
	}
	if distinct(own.at) != len(own.at) {
		t.Fatalf("own buffers: the first matches of %d records start at %d addresses", len(own.at), distinct(own.at))
	}
}

func distinct(ps []*byte) int {
	seen := make(map[*byte]bool)
	for _, p := range ps {
		seen[p] = true
	}
	return len(seen)
}

func firstDifference(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
