package state

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"
)

var (
	offsets = ListStateDescriptor[int64]{Name: "offsets", Serializer: Int64Serializer{}}
	owners  = ListStateDescriptor[string]{Name: "owners", Serializer: StringSerializer{}}
)

func listOf[T any](t *testing.T, l *OperatorListState[T]) []T {
	t.Helper()
	v, err := l.Get()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestOperatorListStateOperations: Add, AddAll, Update, Clear and Get on a
// fresh store; the same name asked again is the same list; Snapshot holds
// copies with each list's mode.
func TestOperatorListStateOperations(t *testing.T) {
	s := NewOperatorStateStore(nil)
	if s.IsRestored() {
		t.Fatal("a fresh store reports a restore")
	}
	split := must1(GetOperatorListState(s, offsets))(t)
	union := must1(GetUnionListState(s, owners))(t)
	if got := listOf(t, split); len(got) != 0 {
		t.Fatalf("fresh list holds %v", got)
	}
	must(t, split.Add(1))
	must(t, split.AddAll([]int64{2, 3}))
	must(t, union.Update([]string{"a", "b"}))
	must(t, union.Update([]string{"c"}))
	if got := listOf(t, split); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("split = %v", got)
	}
	again := must1(GetOperatorListState(s, offsets))(t)
	must(t, again.Add(4))
	if got := listOf(t, split); !slices.Equal(got, []int64{1, 2, 3, 4}) {
		t.Fatalf("the list asked for again is not the same list: %v", got)
	}
	snap := s.Snapshot()
	want := map[string]OperatorListSnapshot{
		"offsets": {Mode: ModeSplit, Entries: [][]byte{enc(t, 1), enc(t, 2), enc(t, 3), enc(t, 4)}},
		"owners":  {Mode: ModeUnion, Entries: [][]byte{[]byte("c")}},
	}
	if !reflect.DeepEqual(snap, want) {
		t.Fatalf("Snapshot = %v, want %v", snap, want)
	}
	split.Clear()
	must(t, split.Add(9))
	if !reflect.DeepEqual(snap, want) {
		t.Fatalf("a snapshot changed with the list: %v", snap)
	}
	if got := s.Snapshot()["offsets"]; !reflect.DeepEqual(got, OperatorListSnapshot{Mode: ModeSplit, Entries: [][]byte{enc(t, 9)}}) {
		t.Fatalf("Snapshot after Clear and Add = %v", got)
	}
}

func enc(t *testing.T, v int64) []byte {
	t.Helper()
	return must1(Int64Serializer{}.Append(nil, v))(t)
}

// TestOperatorStateRestore: a store created from restored lists reports a
// restore (even when they are empty), serves the restored entries, keeps
// restored lists nobody asked for in its snapshots, and refuses a list
// asked for with the other redistribution mode.
func TestOperatorStateRestore(t *testing.T) {
	if !NewOperatorStateStore(map[string]OperatorListSnapshot{}).IsRestored() {
		t.Fatal("a store restored with no lists does not report a restore")
	}
	restored := map[string]OperatorListSnapshot{
		"offsets":   {Mode: ModeSplit, Entries: [][]byte{enc(t, 7), enc(t, 8)}},
		"owners":    {Mode: ModeUnion, Entries: [][]byte{[]byte("x"), []byte("y")}},
		"untouched": {Mode: ModeUnion, Entries: [][]byte{[]byte("kept")}},
	}
	s := NewOperatorStateStore(restored)
	if !s.IsRestored() {
		t.Fatal("IsRestored = false")
	}
	split := must1(GetOperatorListState(s, offsets))(t)
	if got := listOf(t, split); !slices.Equal(got, []int64{7, 8}) {
		t.Fatalf("restored split = %v", got)
	}
	union := must1(GetUnionListState(s, owners))(t)
	if got := listOf(t, union); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("restored union = %v", got)
	}
	must(t, split.Add(9))
	if got := restored["offsets"].Entries; len(got) != 2 {
		t.Fatalf("adding to a restored list changed the restore input: %d entries", len(got))
	}
	snap := s.Snapshot()
	if got := slices.Sorted(maps.Keys(snap)); !slices.Equal(got, []string{"offsets", "owners", "untouched"}) {
		t.Fatalf("Snapshot lists %q", got)
	}
	if !reflect.DeepEqual(snap["untouched"], restored["untouched"]) {
		t.Fatalf("untouched restored list snapshotted as %v", snap["untouched"])
	}

	s2 := NewOperatorStateStore(restored)
	_, err := GetUnionListState(s2, offsets)
	if !errors.Is(err, ErrStateMigration) {
		t.Fatalf("even-split state asked as union = %v, want ErrStateMigration", err)
	}
}

func TestOperatorListStateRefusals(t *testing.T) {
	s := NewOperatorStateStore(nil)
	must1(GetOperatorListState(s, offsets))(t)
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"other mode", func() error { _, err := GetUnionListState(s, offsets); return err }(),
			`state: operator list state "offsets" registered as split/int64, asked as union/int64`},
		{"other serializer", func() error {
			_, err := GetOperatorListState(s, ListStateDescriptor[string]{Name: "offsets", Serializer: StringSerializer{}})
			return err
		}(), `state: operator list state "offsets" registered as split/int64, asked as split/string`},
		{"empty name", func() error {
			_, err := GetOperatorListState(s, ListStateDescriptor[int64]{Serializer: Int64Serializer{}})
			return err
		}(), "state: operator list state with an empty name"},
		{"no serializer", func() error { _, err := GetOperatorListState(s, ListStateDescriptor[int64]{Name: "n"}); return err }(),
			`state: operator list state "n" has no serializer`},
		{"ttl", func() error {
			_, err := GetUnionListState(s, ListStateDescriptor[int64]{Name: "n", Serializer: Int64Serializer{}, TTL: &StateTtlConfig{TTL: time.Minute}})
			return err
		}(), `state: operator list state "n": operator state has no TTL`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil || tc.err.Error() != tc.want {
				t.Fatalf("err = %v, want %q", tc.err, tc.want)
			}
		})
	}
}
