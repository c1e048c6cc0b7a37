package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// entries returns the byte entries of names.
func entries(names ...string) [][]byte {
	out := make([][]byte, len(names))
	for i, n := range names {
		out[i] = []byte(n)
	}
	return out
}

// names returns the entries as strings.
func names(es [][]byte) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = string(e)
	}
	return out
}

// elems returns "e<from>".."e<to-1>".
func elems(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("e%d", i))
	}
	return out
}

// TestRedistributeOperatorStateRescales takes an even-split list of 10
// elements and a union list through parallelism 2 -> 3 -> 1 -> 4: the
// even-split elements are concatenated in subtask order and cut into
// contiguous runs whose sizes differ by at most one (every element exactly
// once), and every subtask gets the whole union list.
func TestRedistributeOperatorStateRescales(t *testing.T) {
	old := []TaskState{
		{Operator: map[string]OperatorListState{"split": {Mode: ModeSplit, Entries: entries(elems(0, 6)...)}, "union": {Mode: ModeUnion, Entries: entries("u0")}}},
		{Operator: map[string]OperatorListState{"split": {Mode: ModeSplit, Entries: entries(elems(6, 10)...)}, "union": {Mode: ModeUnion, Entries: entries("u1")}}},
	}
	for _, step := range []struct {
		p         int
		wantSplit [][]string
		wantUnion []string
	}{
		{3, [][]string{elems(0, 4), elems(4, 7), elems(7, 10)}, []string{"u0", "u1"}},
		{1, [][]string{elems(0, 10)}, []string{"u0", "u1", "u2"}},
		{4, [][]string{elems(0, 3), elems(3, 6), elems(6, 8), elems(8, 10)}, []string{"u0"}},
	} {
		shares, err := RedistributeOperatorState(old, step.p)
		if err != nil {
			t.Fatal(err)
		}
		if len(shares) != step.p {
			t.Fatalf("p=%d: %d shares", step.p, len(shares))
		}
		next := make([]TaskState, step.p)
		for i, sh := range shares {
			split, union := sh["split"], sh["union"]
			if split.Mode != ModeSplit || !reflect.DeepEqual(names(split.Entries), step.wantSplit[i]) {
				t.Fatalf("p=%d subtask %d split = %s %q, want %q", step.p, i, split.Mode, names(split.Entries), step.wantSplit[i])
			}
			if union.Mode != ModeUnion || !reflect.DeepEqual(names(union.Entries), step.wantUnion) {
				t.Fatalf("p=%d subtask %d union = %s %q, want %q", step.p, i, union.Mode, names(union.Entries), step.wantUnion)
			}
			// The next checkpoint: each subtask keeps its split share and
			// writes only its own union entry (as a source writes its own
			// offsets into union state).
			next[i] = TaskState{Operator: map[string]OperatorListState{
				"split": split, "union": {Mode: ModeUnion, Entries: entries(fmt.Sprintf("u%d", i))},
			}}
		}
		old = next
	}
}

// TestRedistributeEvenSplitSizes checks the even-split invariants over many
// shapes: every element exactly once and in order, sizes differing by at
// most one, the larger shares first.
func TestRedistributeEvenSplitSizes(t *testing.T) {
	for _, oldSizes := range [][]int{{0}, {1}, {10, 0}, {0, 0, 3}, {5, 5}, {7, 1, 0, 9}} {
		for newP := 1; newP <= 8; newP++ {
			var old []TaskState
			n := 0
			for _, size := range oldSizes {
				old = append(old, TaskState{Operator: map[string]OperatorListState{"s": {Mode: ModeSplit, Entries: entries(elems(n, n+size)...)}}})
				n += size
			}
			shares, err := RedistributeOperatorState(old, newP)
			if err != nil {
				t.Fatal(err)
			}
			var all []string
			for i, sh := range shares {
				got := len(sh["s"].Entries)
				want := n / newP
				if i < n%newP {
					want++
				}
				if got != want {
					t.Fatalf("%v -> %d: subtask %d got %d entries, want %d", oldSizes, newP, i, got, want)
				}
				all = append(all, names(sh["s"].Entries)...)
			}
			if !reflect.DeepEqual(all, elems(0, n)) && !(n == 0 && len(all) == 0) {
				t.Fatalf("%v -> %d: concatenated shares %q, want %q", oldSizes, newP, all, elems(0, n))
			}
		}
	}
}

func TestRedistributeOperatorStateErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		old  []TaskState
		want string
	}{
		{
			name: "two modes",
			old: []TaskState{
				{Operator: map[string]OperatorListState{"s": {Mode: ModeSplit}}},
				{Operator: map[string]OperatorListState{"s": {Mode: ModeUnion}}},
			},
			want: `checkpoint: operator state "s" has mode "union" in subtask 1 and "split" elsewhere`,
		},
		{
			name: "unknown mode",
			old:  []TaskState{{Operator: map[string]OperatorListState{"s": {Mode: "broadcast"}}}},
			want: `checkpoint: operator state "s" has unknown mode "broadcast"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := RedistributeOperatorState(tc.old, 2); err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestRedistributeOperatorStatePartial: a state only some old subtasks
// wrote is still given to every new subtask (an empty share included), and
// stateless subtasks get empty maps (a restore, not a fresh start).
func TestRedistributeOperatorStatePartial(t *testing.T) {
	old := []TaskState{{}, {Operator: map[string]OperatorListState{"s": {Mode: ModeSplit, Entries: entries("a")}}}}
	shares, err := RedistributeOperatorState(old, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string]OperatorListState{
		{"s": {Mode: ModeSplit, Entries: entries("a")}},
		{"s": {Mode: ModeSplit, Entries: [][]byte{}}},
		{"s": {Mode: ModeSplit, Entries: [][]byte{}}},
	}
	if !reflect.DeepEqual(shares, want) {
		t.Fatalf("shares = %v, want %v", shares, want)
	}
	shares, err = RedistributeOperatorState([]TaskState{{}, {}}, 2)
	if err != nil || len(shares) != 2 || shares[0] == nil || len(shares[0]) != 0 || shares[1] == nil {
		t.Fatalf("stateless shares = %#v, %v", shares, err)
	}
}

// TestRedistributeBroadcast: at the same or a lower parallelism each
// subtask takes its own old copy; scale-up subtasks take old copies
// round-robin, so every subtask has the rules.
func TestRedistributeBroadcast(t *testing.T) {
	copyOf := func(i int) map[string]json.RawMessage {
		return map[string]json.RawMessage{"rules": json.RawMessage(fmt.Sprintf(`{"from":%d}`, i))}
	}
	oldOf := func(p int) []TaskState {
		out := make([]TaskState, p)
		for i := range out {
			out[i].Broadcast = copyOf(i)
		}
		return out
	}
	for _, tc := range []struct {
		oldP, newP int
		want       []int // old subtask each new one reads
	}{
		{2, 2, []int{0, 1}},
		{2, 4, []int{0, 1, 0, 1}},
		{2, 3, []int{0, 1, 0}},
		{3, 1, []int{0}},
		{4, 2, []int{0, 1}},
		{1, 3, []int{0, 0, 0}},
	} {
		t.Run(fmt.Sprintf("%d->%d", tc.oldP, tc.newP), func(t *testing.T) {
			got := RedistributeBroadcast(oldOf(tc.oldP), tc.newP)
			if len(got) != tc.newP {
				t.Fatalf("%d copies, want %d", len(got), tc.newP)
			}
			for i, from := range tc.want {
				if !reflect.DeepEqual(got[i], copyOf(from)) {
					t.Fatalf("subtask %d got %s, want old subtask %d's copy", i, got[i]["rules"], from)
				}
			}
		})
	}
	if got := RedistributeBroadcast(nil, 2); len(got) != 2 || got[0] != nil || got[1] != nil {
		t.Fatalf("RedistributeBroadcast(nil, 2) = %v", got)
	}
}

// TestRedistributeKeyed: each new subtask gets exactly the old snapshots
// whose key-group ranges overlap its own, in old subtask order.
func TestRedistributeKeyed(t *testing.T) {
	const maxP = 128
	oldOf := func(p int) []TaskState {
		out := make([]TaskState, p)
		for i := range out {
			r := keygroup.RangeFor(maxP, p, i)
			out[i] = TaskState{KeyGroups: &r, Keyed: json.RawMessage(fmt.Sprintf(`{"old":%d}`, i))}
		}
		return out
	}
	for _, tc := range []struct {
		oldP, newP int
		want       [][]int
	}{
		{2, 2, [][]int{{0}, {1}}},
		{2, 3, [][]int{{0}, {0, 1}, {1}}}, // [0,42] [43,85] [86,127] over [0,63] [64,127]
		{3, 1, [][]int{{0, 1, 2}}},
		{1, 4, [][]int{{0}, {0}, {0}, {0}}},
		{3, 4, [][]int{{0}, {0, 1}, {1, 2}, {2}}}, // [0,31] [32,63] [64,95] [96,127] over [0,42] [43,85] [86,127]
	} {
		t.Run(fmt.Sprintf("%d->%d", tc.oldP, tc.newP), func(t *testing.T) {
			old := oldOf(tc.oldP)
			got := RedistributeKeyed(old, maxP, tc.newP)
			if len(got) != tc.newP {
				t.Fatalf("%d subtasks, want %d", len(got), tc.newP)
			}
			for i, want := range tc.want {
				var from []int
				for _, h := range got[i] {
					var v struct{ Old int }
					if err := json.Unmarshal(h.Handle, &v); err != nil {
						t.Fatal(err)
					}
					if h.KeyGroups != *old[v.Old].KeyGroups {
						t.Fatalf("handle of old %d with key groups %v, want %v", v.Old, h.KeyGroups, *old[v.Old].KeyGroups)
					}
					from = append(from, v.Old)
				}
				if !reflect.DeepEqual(from, want) {
					t.Fatalf("subtask %d restores old %v, want %v", i, from, want)
				}
			}
		})
	}
	// Subtasks without keyed state are skipped.
	r := keygroup.Range{Start: 0, End: 127}
	got := RedistributeKeyed([]TaskState{{}, {KeyGroups: &r}, {Keyed: json.RawMessage(`{}`)}}, maxP, 2)
	if len(got[0]) != 0 || len(got[1]) != 0 {
		t.Fatalf("handles from stateless subtasks: %v", got)
	}
}

func TestDecodeTaskStates(t *testing.T) {
	r := keygroup.Range{Start: 0, End: 63}
	good, _ := json.Marshal(TaskState{KeyGroups: &r, Keyed: json.RawMessage(`{"backend":"pebble"}`)})
	got, err := DecodeTaskStates(OperatorMetadata{Parallelism: 3, Subtasks: []json.RawMessage{good, json.RawMessage("null"), nil}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].KeyGroups == nil || *got[0].KeyGroups != r || string(got[0].Keyed) != `{"backend":"pebble"}` ||
		!reflect.DeepEqual(got[1], TaskState{}) || !reflect.DeepEqual(got[2], TaskState{}) {
		t.Fatalf("DecodeTaskStates = %+v", got)
	}
	_, err = DecodeTaskStates(OperatorMetadata{Subtasks: []json.RawMessage{good, json.RawMessage(`{"key_groups": 7}`)}})
	if !errors.Is(err, ErrCorruptMetadata) || !strings.Contains(err.Error(), "subtask 1") {
		t.Fatalf("DecodeTaskStates of a bad subtask = %v, want ErrCorruptMetadata naming subtask 1", err)
	}
}
