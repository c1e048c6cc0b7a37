// Package state is kstreamd's keyed state, modelled on Apache Flink's: state
// descriptors and serializers, the five keyed state types (ValueState,
// ListState, MapState, ReducingState, AggregatingState), state TTL
// (StateTtlConfig), and the two keyed state backends, "hashmap" (in memory)
// and "pebble" (one Pebble DB per keyed subtask). It also holds operator
// state and the async State V2 layer (see ASYNC.md).
//
// # Usage
//
// A keyed subtask opens one backend for the key groups it owns, obtains its
// states once, and sets the current key before each record:
//
//	b, err := state.OpenBackend(state.BackendConfig{
//		Kind:           state.KindPebble,
//		Dir:            dir,
//		MaxParallelism: 128,
//		KeyGroupRange:  keygroup.RangeFor(128, parallelism, subtask),
//		Cache:          sharedCache,
//	})
//	count, err := state.GetValueState(b, state.ValueStateDescriptor[int64]{
//		Name:       "count",
//		Serializer: state.Int64Serializer{},
//		TTL:        &state.StateTtlConfig{TTL: time.Hour},
//	})
//	// per record:
//	b.SetCurrentKey(key)
//	n, _, err := count.Value()
//	err = count.Update(n + 1)
//
// Every state handle acts on the backend's current key: a value written
// under one key is invisible under another. Getting the same descriptor
// twice returns the same handle; the same name with another state type,
// value type, serializer or TTL setting is refused with ErrStateConflict.
// Operations return errors, never panic: ErrNoCurrentKey, a *KeyGroupError
// (the key belongs to another subtask), ErrClosed, serializer and storage
// errors.
//
// # Backends
//
// Both backends store the same bytes (serialized values with their TTL
// timestamps) and pass the same conformance tests. The hashmap backend keeps
// them in Go maps per state and key group; it implements Snapshotter (a full
// snapshot file) and restores from BackendConfig.RestoreDir. The Pebble
// backend keeps them in one DB per subtask, keys prefixed by key group, then
// state id, then the length-prefixed serialized key (FORMAT.md has the
// layout); ListState appends are Pebble merges that never read the list;
// reopening the directory restores its state; the block cache can be shared
// by the process (BlockCache); it implements MetricsProvider.
//
// A state's id, type, TTL on/off and serializer names are stored with the
// state. Restoring a state with a descriptor that disagrees (TTL on one side
// and off on the other, another type or serializer) fails with a
// *StateMigrationError, errors.Is(err, ErrStateMigration), naming the state.
//
// # TTL
//
// A state with a StateTtlConfig stores an 8-byte last-access timestamp (ms
// since the epoch, from BackendConfig.Clock) with each value, list element
// and map entry, so list elements and map entries expire one by one. Reads
// remove the expired entries they meet; OnReadAndWrite makes reads refresh
// timestamps; ReturnExpiredIfNotCleanedUp lets a read return an expired entry
// that is still stored (removing it). Entries nobody reads are removed by
// background cleanup, KeyedStateBackend.CleanupStep: Pebble has no compaction
// filter (Flink uses RocksDB's), so cleanup scans the key groups of the TTL
// states incrementally, a bounded number of entries per step
// (TTLCleanupConfig.EntriesPerStep, default 1,000), resuming where it
// stopped. The keyed operators drive it from their task's goroutine
// (CleanupSchedule, NotifyCleanup): a step every TTLCleanupConfig.Interval
// (default 10ms) of processing time through the task's mailbox, on
// watermarks, and after an async drain; with async state a step runs while
// records are in flight, exclusive of the read workers
// (AsyncExecutionController.ExclusiveOfReads); TTLCleanupConfig.Disabled
// turns it off. On Pebble a round that removed at least CleanupCompactMinRemoved
// entries (and a tenth of those it visited) is followed by a manual
// compaction on a goroutine that only touches the DB, so the deleted values
// and their tombstones leave the files checkpoints copy. Hashmap snapshots
// leave out expired entries.
//
// # Concurrency
//
// A backend and its state handles belong to the subtask's goroutine. The one
// exception serves async state: when ConcurrentReads reports true (Pebble),
// state handles bound to an explicit key (the unexported bind(keyRef)
// methods, keyRefFor) may read on other goroutines while the owner works,
// including the writes the TTL read path makes (removing an expired entry,
// refreshing a timestamp). The caller must not run two operations on the same
// key at once (the async layer serializes each key), and Close must not
// overlap any call. Clocks and serializers must be safe for concurrent use.
package state
