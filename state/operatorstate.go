package state

import (
	"fmt"
	"slices"
)

// Redistribution modes of operator list state (Flink's
// OperatorStateHandle.Mode), as stored in checkpoints.
const (
	// ModeSplit is even-split redistribution: on restore the entries of
	// every old subtask are concatenated in subtask order and cut into
	// contiguous runs whose sizes differ by at most one, one per new
	// subtask (Flink's getListState).
	ModeSplit = "split"
	// ModeUnion is union redistribution: on restore every subtask gets every
	// entry of every old subtask (Flink's getUnionListState).
	ModeUnion = "union"
)

// OperatorListSnapshot is one operator list state of one subtask as a
// checkpoint stores it: the redistribution mode and the serialized entries
// (each encoded by the state's serializer).
type OperatorListSnapshot struct {
	Mode    string   `json:"mode"`
	Entries [][]byte `json:"entries"`
}

// OperatorStateStore holds the operator (non-keyed) list states of one
// subtask, as Flink's OperatorStateStore: named lists that are not scoped to
// a key and are redistributed on restore by their mode. Not safe for
// concurrent use: it belongs to its subtask goroutine.
type OperatorStateStore struct {
	restored map[string]OperatorListSnapshot
	states   map[string]*operatorList
	order    []string
}

type operatorList struct {
	mode    string
	serName string
	entries [][]byte
}

// NewOperatorStateStore returns a store holding what this subtask restores
// (already redistributed), or an empty store when restored is nil.
func NewOperatorStateStore(restored map[string]OperatorListSnapshot) *OperatorStateStore {
	return &OperatorStateStore{restored: restored, states: map[string]*operatorList{}}
}

// IsRestored reports whether the store was created from a checkpoint
// (Flink's FunctionInitializationContext.isRestored).
func (s *OperatorStateStore) IsRestored() bool { return s.restored != nil }

// OperatorListState is an operator list state of element type T: the
// subtask's share of a list redistributed on restore. Not safe for
// concurrent use.
type OperatorListState[T any] struct {
	l   *operatorList
	ser Serializer[T]
}

// GetOperatorListState returns the even-split list state d names (Flink's
// OperatorStateStore.getListState), holding the restored entries if any.
// Asking again for the same name returns the same list; the same name with
// the other mode or another serializer is an error. d.TTL must be nil:
// operator state has no TTL.
func GetOperatorListState[T any](s *OperatorStateStore, d ListStateDescriptor[T]) (*OperatorListState[T], error) {
	return getOperatorList(s, d, ModeSplit)
}

// GetUnionListState returns the union list state d names (Flink's
// OperatorStateStore.getUnionListState): after a restore every subtask holds
// every entry of every old subtask.
func GetUnionListState[T any](s *OperatorStateStore, d ListStateDescriptor[T]) (*OperatorListState[T], error) {
	return getOperatorList(s, d, ModeUnion)
}

func getOperatorList[T any](s *OperatorStateStore, d ListStateDescriptor[T], mode string) (*OperatorListState[T], error) {
	switch {
	case d.Name == "":
		return nil, fmt.Errorf("state: operator list state with an empty name")
	case d.Serializer == nil:
		return nil, fmt.Errorf("state: operator list state %q has no serializer", d.Name)
	case d.TTL != nil:
		return nil, fmt.Errorf("state: operator list state %q: operator state has no TTL", d.Name)
	}
	if l, ok := s.states[d.Name]; ok {
		if l.mode != mode || l.serName != d.Serializer.Name() {
			return nil, fmt.Errorf("state: operator list state %q registered as %s/%s, asked as %s/%s", d.Name, l.mode, l.serName, mode, d.Serializer.Name())
		}
		return &OperatorListState[T]{l: l, ser: d.Serializer}, nil
	}
	l := &operatorList{mode: mode, serName: d.Serializer.Name()}
	if r, ok := s.restored[d.Name]; ok {
		if r.Mode != mode {
			return nil, fmt.Errorf("state: operator list state %q was checkpointed with %s redistribution, asked with %s: %w", d.Name, r.Mode, mode, ErrStateMigration)
		}
		l.entries = slices.Clone(r.Entries)
	}
	s.states[d.Name] = l
	s.order = append(s.order, d.Name)
	return &OperatorListState[T]{l: l, ser: d.Serializer}, nil
}

// Snapshot returns every registered list (and restored lists nobody asked
// for again, so state survives a restore that does not touch it) for a
// checkpoint. The entries are copies.
func (s *OperatorStateStore) Snapshot() map[string]OperatorListSnapshot {
	out := map[string]OperatorListSnapshot{}
	for name, r := range s.restored {
		if _, ok := s.states[name]; !ok {
			out[name] = OperatorListSnapshot{Mode: r.Mode, Entries: slices.Clone(r.Entries)}
		}
	}
	for _, name := range s.order {
		l := s.states[name]
		out[name] = OperatorListSnapshot{Mode: l.mode, Entries: slices.Clone(l.entries)}
	}
	return out
}

// Get returns the list's elements in order.
func (o *OperatorListState[T]) Get() ([]T, error) {
	out := make([]T, 0, len(o.l.entries))
	for _, b := range o.l.entries {
		v, err := o.ser.Decode(b)
		if err != nil {
			return nil, fmt.Errorf("state: operator list state: %w", err)
		}
		out = append(out, v)
	}
	return out, nil
}

// Add appends v.
func (o *OperatorListState[T]) Add(v T) error {
	b, err := o.ser.Append(nil, v)
	if err != nil {
		return err
	}
	o.l.entries = append(o.l.entries, b)
	return nil
}

// AddAll appends every element of vs.
func (o *OperatorListState[T]) AddAll(vs []T) error {
	for _, v := range vs {
		if err := o.Add(v); err != nil {
			return err
		}
	}
	return nil
}

// Update replaces the list with vs.
func (o *OperatorListState[T]) Update(vs []T) error {
	o.l.entries = nil
	return o.AddAll(vs)
}

// Clear empties the list.
func (o *OperatorListState[T]) Clear() { o.l.entries = nil }
