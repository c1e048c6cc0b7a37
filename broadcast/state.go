package broadcast

import (
	"cmp"
	"iter"
	"slices"
)

// ReadOnlyState is the keyed side's view of a broadcast state (Flink's
// ReadOnlyBroadcastState): it can read but not change the map.
type ReadOnlyState[K cmp.Ordered, V any] interface {
	// Get returns the value of key and whether it is present.
	Get(key K) (V, bool)
	// Contains reports whether key is present.
	Contains(key K) bool
	// Entries yields every entry in ascending key order, so every subtask
	// iterates its copy in the same order.
	Entries() iter.Seq2[K, V]
	// Len returns the number of entries.
	Len() int
}

// State is a broadcast state, a named in-memory map written only by the
// broadcast side (Flink's BroadcastState). Not safe for concurrent use: it
// belongs to its subtask goroutine.
type State[K cmp.Ordered, V any] struct {
	name string
	m    map[K]V
}

// NewState returns an empty broadcast state called name.
func NewState[K cmp.Ordered, V any](name string) *State[K, V] {
	return &State[K, V]{name: name, m: map[K]V{}}
}

// Name returns the state's name.
func (s *State[K, V]) Name() string { return s.name }

// Put sets key to value.
func (s *State[K, V]) Put(key K, value V) { s.m[key] = value }

// Remove deletes key; it reports whether key was present.
func (s *State[K, V]) Remove(key K) bool {
	_, ok := s.m[key]
	delete(s.m, key)
	return ok
}

// Get implements ReadOnlyState.
func (s *State[K, V]) Get(key K) (V, bool) {
	v, ok := s.m[key]
	return v, ok
}

// Contains implements ReadOnlyState.
func (s *State[K, V]) Contains(key K) bool {
	_, ok := s.m[key]
	return ok
}

// Len implements ReadOnlyState.
func (s *State[K, V]) Len() int { return len(s.m) }

// Entries implements ReadOnlyState: ascending key order.
func (s *State[K, V]) Entries() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		keys := make([]K, 0, len(s.m))
		for k := range s.m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !yield(k, s.m[k]) {
				return
			}
		}
	}
}
