package operators

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

const testMaxP = 128

var backends = []string{state.KindHashmap, state.KindPebble}

// opener opens a backend of kind owning every key group, restoring handles;
// a pebble DB lives in dir.
func opener(kind, dir string) BackendOpener {
	return func(restore []state.RestoreHandle) (state.KeyedStateBackend, error) {
		cfg := state.BackendConfig{Kind: kind, MaxParallelism: testMaxP, KeyGroupRange: keygroup.Range{Start: 0, End: testMaxP - 1}}
		if kind == state.KindPebble {
			cfg.Dir = dir
		}
		return state.OpenBackendRestored(cfg, restore)
	}
}

// harness drives one KeyedOperator directly, as runtime.OperatorTask does:
// records in, the mailbox yielded between records, output collected from a
// runtime.Channel.
type harness struct {
	t   *testing.T
	op  *KeyedOperator
	mb  *runtime.Mailbox
	ch  runtime.Channel
	ctx context.Context
}

// newHarness builds the operator: fn is a KeyedProcessFunction or an
// AsyncKeyedProcessFunction. capacity bounds the output channel.
func newHarness(t *testing.T, kind, dir string, restore *Restore, fn any, capacity int) *harness {
	t.Helper()
	h := &harness{t: t, mb: runtime.NewMailbox(), ch: runtime.NewChannel(capacity), ctx: context.Background()}
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{h.ch}, runtime.ForwardPartitioner{}))
	info := OpenContext{Operator: "op", Subtask: 0, Parallelism: 1}
	switch f := fn.(type) {
	case AsyncKeyedProcessFunction:
		h.op = NewAsyncKeyedProcessOperator(info, opener(kind, dir), restore, f, out, h.mb)
	case KeyedProcessFunction:
		h.op = NewKeyedProcessOperator(info, opener(kind, dir), restore, f, out)
	default:
		t.Fatalf("%T is no keyed process function", fn)
	}
	if err := h.op.Open(h.ctx); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) process(recs ...runtime.Record) {
	h.t.Helper()
	for _, r := range recs {
		if err := h.op.ProcessRecord(h.ctx, 0, r); err != nil {
			h.t.Fatal(err)
		}
		h.mb.TryYieldAll() // the task loop runs completions between records
	}
}

// finish ends the input, closes the operator and returns what it emitted.
func (h *harness) finish() []runtime.Record {
	h.t.Helper()
	if err := h.op.EndInput(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	if err := h.op.Close(); err != nil {
		h.t.Fatal(err)
	}
	return h.emitted()
}

func (h *harness) emitted() []runtime.Record {
	var out []runtime.Record
	for {
		select {
		case el := <-h.ch:
			out = append(out, el.Record)
		default:
			return out
		}
	}
}

func valueRecord(key string, v int64) runtime.Record {
	return runtime.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"key":%q,"value":%v}`, key, v)}
}

// TestCountWindowAverage is the seed example: (1,3),(1,5),(1,7),(1,4),(1,2)
// emit exactly (1,4) and (1,5), synchronously and asynchronously, on both
// backends.
func TestCountWindowAverage(t *testing.T) {
	for _, kind := range backends {
		for _, mode := range []string{"sync", "async"} {
			t.Run(kind+"/"+mode, func(t *testing.T) {
				var fn any = &CountWindowAverage{}
				if mode == "async" {
					fn = &AsyncCountWindowAverage{}
				}
				h := newHarness(t, kind, t.TempDir(), nil, fn, 16)
				for _, v := range []int64{3, 5, 7, 4, 2} {
					h.process(valueRecord("1", v))
				}
				// Records without an integer value meet the on_error policy:
				// the sync path returns the *runtime.RecordError, the async
				// path hands it to the task's handler.
				bad := &recordingHandler{}
				h.op.SetBadRecordHandlers([]runtime.BadRecordHandler{bad})
				for _, v := range []string{`{"other":1}`, `{"value":2.5}`, `{"value":"3"}`, `not json`} {
					rec := runtime.Record{Key: []byte("1"), Value: []byte(v)}
					var re *runtime.RecordError
					switch err := h.op.ProcessRecord(h.ctx, 0, rec); {
					case errors.As(err, &re):
						_ = bad.HandleBadRecord(h.ctx, rec, re)
					case err != nil:
						t.Fatal(err)
					}
					h.mb.TryYieldAll()
				}
				got := h.finish()
				if len(bad.reasons) != 4 || slices.ContainsFunc(bad.reasons, func(r string) bool { return r != runtime.ReasonInvalid }) {
					t.Fatalf("bad records %v, want 4 with reason invalid", bad.reasons)
				}
				var avgs []json.Number
				for _, r := range got {
					var o struct {
						Key     string      `json:"key"`
						Average json.Number `json:"average"`
					}
					if err := json.Unmarshal(r.Value, &o); err != nil {
						t.Fatal(err)
					}
					if o.Key != "1" || string(r.Key) != "1" {
						t.Fatalf("output %s with key %q, want key 1", r.Value, r.Key)
					}
					avgs = append(avgs, o.Average)
				}
				if !slices.Equal(avgs, []json.Number{"4", "5"}) {
					t.Fatalf("averages = %v, want exactly [4 5]", avgs)
				}
			})
		}
	}
}

// TestAsyncCountWindowAverageInterleavedKeys checks key scoping: the windows
// of two keys interleaved do not mix, and the open window of key 2 is in
// the state when the input ends.
func TestAsyncCountWindowAverageInterleavedKeys(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind, t.TempDir(), nil, &AsyncCountWindowAverage{}, 16)
			h.process(valueRecord("1", 3), valueRecord("2", 10), valueRecord("1", 5), valueRecord("2", 20), valueRecord("2", 1))
			got := map[string][]string{}
			for _, r := range h.finish() {
				got[string(r.Key)] = append(got[string(r.Key)], string(r.Value))
			}
			want := map[string][]string{"1": {`{"average":4,"key":"1"}`}, "2": {`{"average":15,"key":"2"}`}}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("outputs = %v, want %v", got, want)
			}
		})
	}
}

// slowInt64 is state.Int64Serializer with every decode, that is every
// state read, delayed by a random 0-1 ms on the reading goroutine (a read
// worker for Pebble): the read-delaying backend of the async tests.
type slowInt64 struct{ state.Int64Serializer }

func (s slowInt64) Decode(b []byte) (int64, error) {
	time.Sleep(time.Duration(rand.IntN(1001)) * time.Microsecond) // injected read latency, not synchronisation
	return s.Int64Serializer.Decode(b)
}

var slowCountState = state.ValueStateDescriptor[int64]{Name: KeyedCountState.Name, Serializer: slowInt64{}}

// countInput is n records over nkeys keys drawn with a fixed seed.
func countInput(n, nkeys int) []runtime.Record {
	rng := rand.New(rand.NewPCG(3, 5))
	recs := make([]runtime.Record, n)
	for i := range recs {
		k := fmt.Sprintf("k%03d", rng.IntN(nkeys))
		recs[i] = runtime.Record{Key: []byte(k), Value: fmt.Appendf(nil, `{"key":%q,"seq":%d}`, k, i)}
	}
	return recs
}

type countOut struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
}

// runCountTask runs keyed_count (sync or async) under a real
// runtime.OperatorTask sharing the operator's mailbox, so completions run
// when the task loop sees the mailbox ready. It returns the outputs in
// emission order.
func runCountTask(t *testing.T, kind string, async bool, recs []runtime.Record) []countOut {
	t.Helper()
	var got []countOut
	for _, r := range runCountRecords(t, kind, async, recs) {
		var o countOut
		if err := json.Unmarshal(r.Value, &o); err != nil {
			t.Fatal(err)
		}
		got = append(got, o)
	}
	return got
}

// runCountRecords is runCountTask returning the output records themselves.
func runCountRecords(t *testing.T, kind string, async bool, recs []runtime.Record) []runtime.Record {
	t.Helper()
	in, down := runtime.NewChannel(len(recs)+1), runtime.NewChannel(len(recs)+1)
	for _, r := range recs {
		in <- runtime.Element{Kind: runtime.KindRecord, Record: r}
	}
	in <- runtime.Element{Kind: runtime.KindEndOfInput}
	mb := runtime.NewMailbox()
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{down}, runtime.ForwardPartitioner{}))
	info := OpenContext{Operator: "count", Parallelism: 1}
	var op *KeyedOperator
	if async {
		op = NewAsyncKeyedProcessOperator(info, opener(kind, t.TempDir()), nil, &AsyncKeyedCount{desc: &slowCountState}, out, mb)
	} else {
		op = NewKeyedProcessOperator(info, opener(kind, t.TempDir()), nil, &KeyedCount{desc: &slowCountState}, out)
	}
	task := runtime.NewOperatorTask(runtime.OperatorTaskConfig{
		ID: runtime.TaskID{Operator: "count"}, Gate: runtime.NewInputGate([]runtime.InputChannel{{Ch: in}}),
		Operator: op, Output: out, Mailbox: mb, BootstrapInput: -1,
	})
	if err := task.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	var got []runtime.Record
	for el := range down {
		if el.Kind == runtime.KindEndOfInput {
			break
		}
		got = append(got, el.Record)
	}
	return got
}

// TestAsyncKeyedCountReusedStepsExact: AsyncKeyedCount reuses the
// continuation object of a record (countStep) once its read's continuation
// ran. With reads on workers (Pebble, slowed) many records are in flight at
// once and steps are reused while others wait; every output must carry
// exactly its own record's key, timestamp (unique per record) and count
// (the record's rank among its key's records), so no step lent to a
// waiting record was handed to another.
func TestAsyncKeyedCountReusedStepsExact(t *testing.T) {
	recs := countInput(1000, 50)
	rank := make([]int64, len(recs))
	seen := map[string]int64{}
	for i := range recs {
		recs[i].Timestamp = time.UnixMilli(int64(i) + 1)
		seen[string(recs[i].Key)]++
		rank[i] = seen[string(recs[i].Key)]
	}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			outs := runCountRecords(t, kind, true, recs)
			if len(outs) != len(recs) {
				t.Fatalf("%d outputs, want %d", len(outs), len(recs))
			}
			emitted := make([]bool, len(recs))
			for _, o := range outs {
				i := int(o.Timestamp.UnixMilli()) - 1
				if i < 0 || i >= len(recs) || emitted[i] {
					t.Fatalf("output with timestamp %v: no input record, or a second output of one", o.Timestamp)
				}
				emitted[i] = true
				want := fmt.Sprintf(`{"count":%d,"key":%q}`, rank[i], recs[i].Key)
				if string(o.Key) != string(recs[i].Key) || string(o.Value) != want {
					t.Fatalf("output of record %d: key %s value %s, want key %s value %s", i, o.Key, o.Value, recs[i].Key, want)
				}
			}
		})
	}
}

// TestAsyncKeyedCountMatchesSync: keyed_count over many keys with every
// state read delayed gives, async, the same per-key counts as sync; per key
// the counts come out in arrival order (1, 2, 3, ...); on Pebble, whose
// reads run on read workers, keys overtake each other.
func TestAsyncKeyedCountMatchesSync(t *testing.T) {
	recs := countInput(1000, 50)
	arrival := make([]string, len(recs))
	for i, r := range recs {
		arrival[i] = string(r.Key)
	}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			final := func(outs []countOut) map[string][]int64 {
				m := map[string][]int64{}
				for _, o := range outs {
					m[o.Key] = append(m[o.Key], o.Count)
				}
				return m
			}
			syncOut := runCountTask(t, kind, false, recs)
			asyncOut := runCountTask(t, kind, true, recs)
			if len(syncOut) != len(recs) || len(asyncOut) != len(recs) {
				t.Fatalf("outputs: sync %d, async %d, want %d each", len(syncOut), len(asyncOut), len(recs))
			}
			want, got := final(syncOut), final(asyncOut)
			for k, counts := range got {
				for i, c := range counts {
					if c != int64(i+1) {
						t.Fatalf("key %s: async counts %v, want 1, 2, 3, ... in arrival order", k, counts)
					}
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("async per-key counts differ from sync:\n got %v\nwant %v", got, want)
			}
			order := make([]string, len(asyncOut))
			for i, o := range asyncOut {
				order[i] = o.Key
			}
			overtook := !slices.Equal(order, arrival)
			t.Logf("%s: async output order differs from arrival order: %v", kind, overtook)
			if kind == state.KindPebble && !overtook {
				t.Fatal("async outputs came in arrival order: no key overtook another although reads ran on workers")
			}
		})
	}
}

// TestAsyncKeyedCountSnapshotDrainsAndRestores takes a checkpoint snapshot
// in the middle of an async run without draining first: the operator
// drains, so the snapshot holds the counts of exactly the records before
// the barrier. The second half of the input after a restore from it ends
// with the counts of the whole input.
func TestAsyncKeyedCountSnapshotDrainsAndRestores(t *testing.T) {
	recs := countInput(400, 20)
	half := len(recs) / 2
	counts := func(rs []runtime.Record) map[string]int64 {
		m := map[string]int64{}
		for _, r := range rs {
			m[string(r.Key)]++
		}
		return m
	}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind, t.TempDir(), nil, &AsyncKeyedCount{desc: &slowCountState}, len(recs))
			for _, r := range recs[:half] {
				if err := h.op.ProcessRecord(h.ctx, 0, r); err != nil { // no yields: completions stay pending
					t.Fatal(err)
				}
			}
			if kind == state.KindPebble && h.op.aec.InFlight() == 0 {
				t.Fatal("no record in flight before the barrier; the test would not show the drain")
			}
			cpDir := t.TempDir()
			finish, err := h.op.SnapshotState(h.ctx, &runtime.Barrier{CheckpointID: 1, Dir: cpDir})
			if err != nil {
				t.Fatal(err)
			}
			if n := h.op.aec.InFlight(); n != 0 {
				t.Fatalf("%d records in flight after the snapshot's synchronous part, want 0", n)
			}
			if got := len(h.emitted()); got != half {
				t.Fatalf("%d outputs before the barrier, want %d", got, half)
			}
			// Records after the barrier change the live state, not the snapshot.
			h.process(recs[half:]...)
			snap, err := finish(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			h.finish()
			var ts checkpoint.TaskState
			if err := json.Unmarshal(snap.State, &ts); err != nil {
				t.Fatal(err)
			}
			restore := &Restore{Keyed: []state.RestoreHandle{{Handle: ts.Keyed, Dir: cpDir}}}

			snapCounts := readCounts(t, kind, restore)
			if want := counts(recs[:half]); !reflect.DeepEqual(snapCounts, want) {
				t.Fatalf("snapshot counts = %v, want those of the first %d records %v", snapCounts, half, want)
			}
			h2 := newHarness(t, kind, t.TempDir(), restore, &AsyncKeyedCount{}, len(recs))
			h2.process(recs[half:]...)
			last := map[string]int64{}
			for _, r := range h2.finish() {
				var o countOut
				if err := json.Unmarshal(r.Value, &o); err != nil {
					t.Fatal(err)
				}
				last[o.Key] = o.Count
			}
			all := counts(recs)
			for k := range counts(recs[half:]) {
				if last[k] != all[k] {
					t.Fatalf("key %s: count after restore %d, want %d", k, last[k], all[k])
				}
			}
		})
	}
}

// readCounts restores a backend and reads every key's count synchronously.
func readCounts(t *testing.T, kind string, restore *Restore) map[string]int64 {
	t.Helper()
	b, err := opener(kind, filepath.Join(t.TempDir(), "read"))(restore.Keyed)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := state.GetValueState(b, KeyedCountState)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for i := range 1000 {
		k := fmt.Sprintf("k%03d", i)
		b.SetCurrentKey([]byte(k))
		if n, ok, err := s.Value(); err != nil {
			t.Fatal(err)
		} else if ok {
			out[k] = n
		}
	}
	return out
}

// failingAsync fails the record with key "bad" from a continuation.
type failingAsync struct{ AsyncKeyedCount }

var errBad = errors.New("bad record")

func (f *failingAsync) ProcessElement(ctx context.Context, rec runtime.Record, out Collector) error {
	if string(rec.Key) != "bad" {
		return f.AsyncKeyedCount.ProcessElement(ctx, rec, out)
	}
	f.count.AsyncValue().ThenAccept(func(state.Optional[int64]) error { return errBad })
	return nil
}

// TestAsyncOperatorFailureFailsTask: an error of a continuation fails the
// task with the error, naming the task.
func TestAsyncOperatorFailureFailsTask(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			in := runtime.NewChannel(8)
			for _, k := range []string{"a", "bad", "b"} {
				in <- runtime.Element{Kind: runtime.KindRecord, Record: runtime.Record{Key: []byte(k), Value: []byte(`{}`)}}
			}
			in <- runtime.Element{Kind: runtime.KindEndOfInput}
			mb := runtime.NewMailbox()
			out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{runtime.NewChannel(8)}, runtime.ForwardPartitioner{}))
			op := NewAsyncKeyedProcessOperator(OpenContext{Operator: "count", Parallelism: 1}, opener(kind, t.TempDir()), nil, &failingAsync{}, out, mb)
			task := runtime.NewOperatorTask(runtime.OperatorTaskConfig{
				ID: runtime.TaskID{Operator: "count", Subtask: 0}, Gate: runtime.NewInputGate([]runtime.InputChannel{{Ch: in}}),
				Operator: op, Output: out, Mailbox: mb, BootstrapInput: -1,
			})
			err := task.Run(context.Background(), nil)
			var re *state.RecordError
			if !errors.Is(err, errBad) || !errors.As(err, &re) || string(re.Key) != "bad" {
				t.Fatalf("task error = %v, want the record error of key bad wrapping %v", err, errBad)
			}
			if want := "count[0]"; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
				t.Fatalf("task error %q does not start with %s", err, want)
			}
		})
	}
}

// TestAsyncOperatorNeedsMailbox: without the task's mailbox Open refuses.
func TestAsyncOperatorNeedsMailbox(t *testing.T) {
	op := NewAsyncKeyedProcessOperator(OpenContext{Operator: "avg"}, opener(state.KindHashmap, ""), nil, &AsyncCountWindowAverage{}, nil, nil)
	if err := op.Open(context.Background()); err == nil || err.Error() != "operators: avg[0]: async state needs the task's mailbox" {
		t.Fatalf("Open = %v", err)
	}
}

// recordingHandler is a runtime.BadRecordHandler that records the reasons.
type recordingHandler struct{ reasons []string }

func (r *recordingHandler) HandleBadRecord(_ context.Context, _ runtime.Record, err *runtime.RecordError) error {
	r.reasons = append(r.reasons, err.Reason)
	return nil
}
