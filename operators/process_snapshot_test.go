package operators

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unsafe"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// snapshotCacheFn is a BroadcastProcessFunction with broadcast states
// (name -> entry -> value) that, like GlobalTableJoin, returns the same
// bytes for a state until it changes; its encoding is indented, so the
// operator's snapshot must compact it. A broadcast record sets entry
// Value in state Key; a record on input 0 "set:state:entry" sets an entry,
// "drop:state" removes a state and "op:x" adds x to an operator list state (registered then).
type snapshotCacheFn struct {
	states map[string]map[string]string
	snaps  map[string]json.RawMessage
	store  *state.OperatorStateStore
}

var snapshotCacheList = state.ListStateDescriptor[string]{Name: "ops", Serializer: state.JSONSerializer[string]{}}

func (f *snapshotCacheFn) Open(OpenContext) error {
	f.states, f.snaps = map[string]map[string]string{}, map[string]json.RawMessage{}
	return nil
}

func (f *snapshotCacheFn) InitializeState(ctx FunctionInitializationContext) error {
	f.store = ctx.OperatorStateStore // the list is registered at its first "op:"
	return nil
}

func (f *snapshotCacheFn) SnapshotState(FunctionSnapshotContext) error { return nil }

func (f *snapshotCacheFn) set(name, entry, value string) {
	if f.states[name] == nil {
		f.states[name] = map[string]string{}
	}
	f.states[name][entry] = value
	delete(f.snaps, name)
}

func (f *snapshotCacheFn) ProcessBroadcastElement(_ context.Context, rec runtime.Record, _ Collector) error {
	f.set(string(rec.Key), string(rec.Value), string(rec.Value)+"!")
	return nil
}

func (f *snapshotCacheFn) ProcessElement(_ context.Context, rec runtime.Record, _ Collector) error {
	parts := strings.Split(string(rec.Value), ":")
	switch parts[0] {
	case "set":
		f.set(parts[1], parts[2], "set")
	case "drop":
		delete(f.states, parts[1])
		delete(f.snaps, parts[1])
	case "op":
		l, err := state.GetOperatorListState(f.store, snapshotCacheList)
		if err != nil {
			return err
		}
		return l.Add(parts[1])
	}
	return nil
}

func (f *snapshotCacheFn) SnapshotBroadcastState() (map[string]json.RawMessage, error) {
	out := make(map[string]json.RawMessage, len(f.states))
	for name, entries := range f.states {
		if f.snaps[name] == nil {
			b, err := json.MarshalIndent(entries, "", "  ")
			if err != nil {
				return nil, err
			}
			f.snaps[name] = b
		}
		out[name] = f.snaps[name]
	}
	return out, nil
}

func (f *snapshotCacheFn) RestoreBroadcastState(states map[string]json.RawMessage) error {
	for name, raw := range states {
		var entries map[string]string
		if err := json.Unmarshal(raw, &entries); err != nil {
			return err
		}
		f.states[name] = entries
	}
	return nil
}

// TestProcessSnapshotCachedBroadcast: while the function returns the same
// broadcast bytes, ProcessOperator's snapshot is the last one's very bytes
// (not marshalled again); every change (a broadcast record, a change made
// on the main input, a new or dropped state, operator state) shows in the
// next snapshot; a restore round-trips; and every snapshot is byte for
// byte json.Marshal of its checkpoint.TaskState, the encoding checkpoints
// had before the cache.
func TestProcessSnapshotCachedBroadcast(t *testing.T) {
	ctx := context.Background()
	open := func(restore *Restore) (*ProcessOperator, *snapshotCacheFn) {
		t.Helper()
		fn := &snapshotCacheFn{}
		op := NewProcessOperator(OpenContext{Operator: "p", Parallelism: 1}, restore, fn, runtime.NewOutput(nil, runtime.NewWriter(nil, runtime.ForwardPartitioner{})))
		if err := op.Open(ctx); err != nil {
			t.Fatal(err)
		}
		return op, fn
	}
	snapshot := func(op *ProcessOperator, id int64) []byte {
		t.Helper()
		fin, err := op.SnapshotState(ctx, &runtime.Barrier{CheckpointID: id})
		if err != nil {
			t.Fatal(err)
		}
		s, err := fin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.Bytes != int64(len(s.State)) {
			t.Fatalf("snapshot %d: Bytes %d, len %d", id, s.Bytes, len(s.State))
		}
		return s.State
	}
	// want encodes the function's states afresh, as SnapshotState did
	// before the cache: json.Marshal of the TaskState.
	want := func(op *ProcessOperator, fn *snapshotCacheFn) string {
		t.Helper()
		var ts checkpoint.TaskState
		if ops := op.opStore.Snapshot(); len(ops) > 0 {
			ts.Operator = ops
		}
		ts.Broadcast = map[string]json.RawMessage{}
		for name, entries := range fn.states {
			b, err := json.MarshalIndent(entries, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			ts.Broadcast[name] = b
		}
		b, err := json.Marshal(ts)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	rec := func(op *ProcessOperator, input int, key, value string) {
		t.Helper()
		if err := op.ProcessRecord(ctx, input, runtime.Record{Key: []byte(key), Value: []byte(value)}); err != nil {
			t.Fatal(err)
		}
	}
	same := func(a, b []byte) bool { return unsafe.SliceData(a) == unsafe.SliceData(b) }

	op, fn := open(nil)
	if got, w := string(snapshot(op, 1)), want(op, fn); got != w || got != "{}" {
		t.Fatalf("empty snapshot %s, want %s and {}", got, w)
	}
	rec(op, 1, "table", "a")
	rec(op, 1, "rules", "r1")
	last := snapshot(op, 2)
	if w := want(op, fn); string(last) != w {
		t.Fatalf("snapshot 2:\n got %s\nwant %s", last, w)
	}
	if !strings.Contains(string(last), `"table":{"a":"a!"}`) {
		t.Fatalf("snapshot 2 %s is not compacted", last)
	}
	rec(op, 0, "", "nothing")
	if s := snapshot(op, 3); !same(s, last) {
		t.Fatalf("unchanged state marshalled again: %s", s)
	}
	steps := []struct {
		name         string
		input        int
		key, value   string
		wantContains string
	}{
		{"broadcast record, existing state", 1, "table", "b", `"b":"b!"`},
		{"broadcast record, new state", 1, "more", "m", `"more":{"m":"m!"}`},
		{"change on the main input", 0, "", "set:rules:r2", `"r2":"set"`},
		{"state dropped", 0, "", "drop:more", ""},
		{"operator state", 0, "", "op:x", `"operator":{"ops":`},
	}
	id := int64(4)
	for _, st := range steps {
		rec(op, st.input, st.key, st.value)
		s := snapshot(op, id)
		id++
		if same(s, last) {
			t.Fatalf("%s: snapshot is the last one's bytes %s", st.name, s)
		}
		if w := want(op, fn); string(s) != w {
			t.Fatalf("%s:\n got %s\nwant %s", st.name, s, w)
		}
		if !strings.Contains(string(s), st.wantContains) || (st.name == "state dropped" && strings.Contains(string(s), "more")) {
			t.Fatalf("%s: snapshot %s", st.name, s)
		}
		last = s
	}
	// With operator state every snapshot is encoded afresh (and equal).
	if s := snapshot(op, id); same(s, last) || string(s) != string(last) {
		t.Fatalf("with operator state: %s after %s", s, last)
	}

	// Restore round-trips, and the restored operator caches again.
	var ts checkpoint.TaskState
	if err := json.Unmarshal(last, &ts); err != nil {
		t.Fatal(err)
	}
	op2, _ := open(&Restore{Operator: ts.Operator, Broadcast: ts.Broadcast})
	if s := snapshot(op2, 1); string(s) != string(last) {
		t.Fatalf("restored snapshot\n got %s\nwant %s", s, last)
	}
	op3, fn3 := open(&Restore{Broadcast: ts.Broadcast})
	first := snapshot(op3, 1)
	if w := want(op3, fn3); string(first) != w || strings.Contains(w, "operator") {
		t.Fatalf("restored without operator state:\n got %s\nwant %s", first, w)
	}
	if s := snapshot(op3, 2); !same(s, first) {
		t.Fatal("restored, unchanged state marshalled again")
	}
	rec(op3, 1, "table", "c")
	if s := snapshot(op3, 3); same(s, first) || string(s) != want(op3, fn3) {
		t.Fatalf("after restore and a change: %s", s)
	}
}
