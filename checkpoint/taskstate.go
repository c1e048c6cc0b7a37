package checkpoint

import (
	"encoding/json"
	"fmt"

	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// Operator list state redistribution modes (Flink's OperatorStateHandle.Mode).
const (
	ModeSplit = state.ModeSplit // even-split redistribution
	ModeUnion = state.ModeUnion // union redistribution
)

// OperatorListState is one operator list state of one subtask: its mode and
// serialized entries.
type OperatorListState = state.OperatorListSnapshot

// TaskState is the state description one subtask writes into the metadata
// (runtime.TaskSnapshot.State): its keyed state, operator list states and
// broadcast states. Every part is optional.
type TaskState struct {
	// KeyGroups is the key-group range the keyed snapshot covers.
	KeyGroups *keygroup.Range `json:"key_groups,omitempty"`
	// Keyed is the keyed state backend's snapshot handle (its shape belongs
	// to package state), or nil.
	Keyed json.RawMessage `json:"keyed,omitempty"`
	// Operator holds the operator list states by name.
	Operator map[string]OperatorListState `json:"operator,omitempty"`
	// Broadcast holds the broadcast states by name (each a JSON object of
	// the state's entries).
	Broadcast map[string]json.RawMessage `json:"broadcast,omitempty"`
}

// DecodeTaskStates decodes the subtask states of one operator's metadata;
// a null subtask state decodes to an empty TaskState.
func DecodeTaskStates(op OperatorMetadata) ([]TaskState, error) {
	out := make([]TaskState, len(op.Subtasks))
	for i, raw := range op.Subtasks {
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			return nil, fmt.Errorf("%w: subtask %d: %v", ErrCorruptMetadata, i, err)
		}
	}
	return out, nil
}

// KeyedHandle is a keyed snapshot together with the key groups it covers.
type KeyedHandle struct {
	KeyGroups keygroup.Range
	Handle    json.RawMessage
}

// RedistributeKeyed returns, for each of newP subtasks, the old keyed
// snapshots whose key groups overlap the subtask's range
// keygroup.RangeFor(maxP, newP, i); restoring reads only the key groups in
// that range from them. At unchanged parallelism each subtask gets exactly
// its own old snapshot.
func RedistributeKeyed(old []TaskState, maxP, newP int) [][]KeyedHandle {
	out := make([][]KeyedHandle, newP)
	for i := range out {
		r := keygroup.RangeFor(maxP, newP, i)
		for _, ts := range old {
			if ts.KeyGroups == nil || ts.Keyed == nil || ts.KeyGroups.Intersect(r).Len() == 0 {
				continue
			}
			out[i] = append(out[i], KeyedHandle{KeyGroups: *ts.KeyGroups, Handle: ts.Keyed})
		}
	}
	return out
}

// RedistributeOperatorState returns each of newP subtasks' operator list
// states: even-split states are concatenated in old subtask order and cut
// into contiguous runs (the first total%newP subtasks get one more), union
// states are given whole to every subtask (Flink's
// RoundRobinOperatorStateRepartitioner). A state written with two modes is
// an error.
func RedistributeOperatorState(old []TaskState, newP int) ([]map[string]OperatorListState, error) {
	type acc struct {
		mode    string
		entries [][]byte
	}
	all := map[string]*acc{}
	var names []string
	for i, ts := range old {
		for name, ls := range ts.Operator {
			a, ok := all[name]
			if !ok {
				a = &acc{mode: ls.Mode}
				all[name] = a
				names = append(names, name)
			}
			if a.mode != ls.Mode {
				return nil, fmt.Errorf("checkpoint: operator state %q has mode %q in subtask %d and %q elsewhere", name, ls.Mode, i, a.mode)
			}
			a.entries = append(a.entries, ls.Entries...)
		}
	}
	out := make([]map[string]OperatorListState, newP)
	for i := range out {
		out[i] = map[string]OperatorListState{}
	}
	for _, name := range names {
		a := all[name]
		switch a.mode {
		case ModeUnion:
			for i := range out {
				out[i][name] = OperatorListState{Mode: ModeUnion, Entries: a.entries}
			}
		case ModeSplit:
			per, extra := len(a.entries)/newP, len(a.entries)%newP
			start := 0
			for i := range out {
				n := per
				if i < extra {
					n++
				}
				out[i][name] = OperatorListState{Mode: ModeSplit, Entries: a.entries[start : start+n]}
				start += n
			}
		default:
			return nil, fmt.Errorf("checkpoint: operator state %q has unknown mode %q", name, a.mode)
		}
	}
	return out, nil
}

// RedistributeBroadcast returns each of newP subtasks' broadcast states: new
// subtask i takes old subtask i's copy when it exists, otherwise the copy of
// old subtask i mod oldP (scale-up takes old copies round-robin). Every copy
// is the same in a consistent checkpoint, so any choice is correct; this
// one spreads the reads.
func RedistributeBroadcast(old []TaskState, newP int) []map[string]json.RawMessage {
	out := make([]map[string]json.RawMessage, newP)
	if len(old) == 0 {
		return out
	}
	for i := range out {
		out[i] = old[i%len(old)].Broadcast
	}
	return out
}
