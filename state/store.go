package state

import "github.com/kstreamd/kstreamd/state/keygroup"

// store is the byte-level storage a backend delegates to: the hashmap and the
// Pebble implementations. It knows nothing of serializers or TTL; the typed
// states above it encode values (with their TTL timestamps) and list
// elements, so both stores hold byte-identical values and behave alike.
//
// Every returned []byte is owned by the caller, except the slices passed to
// scanEntries' callback, which are valid only during the call. Methods that
// take a stateKey do not retain it.
type store interface {
	// loadFormat returns the stored format record; found is false for an
	// empty store.
	loadFormat() (f formatInfo, found bool, err error)
	saveFormat(f formatInfo) error
	// loadMetas returns the metadata of every state ever registered.
	loadMetas() ([]stateMeta, error)
	saveMeta(m stateMeta) error

	// get, set, merge and del address the one blob of a value, list,
	// reducing or aggregating state under a key. merge appends v to the
	// blob (a Pebble merge: it never reads the blob).
	get(k stateKey) ([]byte, bool, error)
	set(k stateKey, v []byte) error
	merge(k stateKey, v []byte) error
	del(k stateKey) error

	// getEntry, setEntry, delEntry, scanEntries and clearEntries address the
	// entries of a map state under a key. scanEntries calls fn for each
	// entry until fn returns false or an error (returned as is); fn may
	// write to the store, and entries fn adds or removes other than the
	// current one may or may not be visited.
	getEntry(k stateKey, uk []byte) ([]byte, bool, error)
	setEntry(k stateKey, uk, v []byte) error
	// mergeEntry appends v to the entry's bytes (absent: v) without
	// reading them (a Pebble merge, as merge).
	mergeEntry(k stateKey, uk, v []byte) error
	delEntry(k stateKey, uk []byte) error
	scanEntries(k stateKey, fn func(uk, v []byte) (bool, error)) error
	// scanRange is scanEntries over the entries whose user key uk lies in
	// [lo, hi] in byte order, visited in that order; fn as in scanEntries.
	scanRange(k stateKey, lo, hi []byte, fn func(uk, v []byte) (bool, error)) error
	clearEntries(k stateKey) error
	// scanGroup calls fn for every map entry of state id in key group kg
	// (every key's), until fn returns an error (returned as is); fn must
	// not write to the store.
	scanGroup(id uint32, kg int, fn func(key, uk, v []byte) error) error

	// cleanup runs one bounded step of background TTL cleanup over the
	// targets, in the key groups kgs, visiting about budget stored entries
	// (values, lists or map entries) from where the previous step stopped.
	// It returns the number of entries removed.
	cleanup(targets []cleanupTarget, kgs keygroup.Range, budget int) (int, error)
	// countEntries returns the number of stored entries in the key-group
	// key space: one per value, list or reducing/aggregating state of a
	// key, one per map entry.
	countEntries() (int, error)
	// concurrentReads reports whether get, getEntry and scanEntries (and
	// the writes the TTL read path makes) may run on other goroutines
	// than the owner's, concurrently with the owner.
	concurrentReads() bool
	close() error
}

// stateKey addresses the state of one key: the state id, the key group of
// the key and the serialized key.
type stateKey struct {
	id  uint32
	kg  int
	key []byte
}

// cleanupTarget is one state background cleanup visits. visit inspects a
// stored blob (a value, a whole list, or one map entry's value) and says
// whether to keep it and, for lists, its replacement (nil: unchanged).
type cleanupTarget struct {
	id    uint32
	kind  stateKind
	visit func(v []byte) (replacement []byte, keep bool, err error)
}

// formatInfo is the store-wide format record.
type formatInfo struct {
	FormatVersion  int `json:"format_version"`
	MaxParallelism int `json:"max_parallelism"`
}

// currentFormatVersion is the version of the layout FORMAT.md describes.
const currentFormatVersion = 1

// stateMeta is the persisted description of one state: its name, stable id,
// type, whether it has TTL, and its serializer names.
type stateMeta struct {
	Name       string    `json:"name"`
	ID         uint32    `json:"id"`
	Kind       stateKind `json:"kind"`
	TTL        bool      `json:"ttl"`
	Serializer string    `json:"serializer"`
}
