package state

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// MetricsProvider is implemented by the Pebble backend: Metrics returns the
// DB's current metrics (pebble.DB.Metrics), for export by the caller.
type MetricsProvider interface {
	Metrics() *pebble.Metrics
}

// defaultPrivateCacheBytes is the block cache size of a Pebble backend
// opened without BackendConfig.Cache.
const defaultPrivateCacheBytes = 8 << 20

// listMergerName is the name of the Pebble merge operator of ListState,
// recorded by Pebble in the DB: a DB written with it cannot be opened with
// another merger.
const listMergerName = "kstreamd.list_append.v1"

// listMerger concatenates list blobs, oldest first. Every list element is
// length-prefixed, so the concatenation of two lists is a list: a ListState
// Add is a Merge of the new elements and never reads the list.
var listMerger = &pebble.Merger{
	Name: listMergerName,
	Merge: func(_, value []byte) (pebble.ValueMerger, error) {
		return &appendMerger{buf: append([]byte(nil), value...)}, nil
	},
}

// appendMerger is the ValueMerger of listMerger. Reads meet a key's
// operands newest first (MergeOlder), so older operands are collected
// (copied: Pebble may reuse v) in one buffer and put in front once, at
// Finish: a list of n merged elements costs O(its bytes) to read, not
// O(n x its bytes).
type appendMerger struct {
	buf   []byte
	older []byte // the older operands, newest first
	ends  []int  // where each operand in older ends
}

func (m *appendMerger) MergeNewer(v []byte) error { m.buf = append(m.buf, v...); return nil }

func (m *appendMerger) MergeOlder(v []byte) error {
	m.older = append(m.older, v...)
	m.ends = append(m.ends, len(m.older))
	return nil
}

func (m *appendMerger) Finish(bool) ([]byte, io.Closer, error) {
	if len(m.ends) == 0 {
		return m.buf, nil, nil
	}
	out := make([]byte, 0, len(m.older)+len(m.buf))
	for i := len(m.ends) - 1; i >= 0; i-- {
		start := 0
		if i > 0 {
			start = m.ends[i-1]
		}
		out = append(out, m.older[start:m.ends[i]]...)
	}
	return append(out, m.buf...), nil, nil
}

// pebbleBackend is the backend of one keyed subtask on one Pebble DB,
// Flink's EmbeddedRocksDBStateBackend. Its read paths are safe on other
// goroutines (ConcurrentReads is true). Writes use pebble.NoSync: durability
// comes from checkpoints, as with Flink's RocksDB backend (which disables
// the WAL altogether).
type pebbleBackend struct {
	*backend
	st *pebbleStore
	// instanceID names this DB instance's files in a checkpoint's shared
	// directory; set by the first incremental snapshot (checkpointing.go).
	instanceID string
}

// Metrics implements MetricsProvider.
func (p *pebbleBackend) Metrics() *pebble.Metrics { return p.st.db.Metrics() }

// pebbleStore implements store on a Pebble DB, in the layout of keys.go and
// FORMAT.md.
type pebbleStore struct {
	dir string // the DB directory
	db  *pebble.DB
	// mu guards closed against DiskSpaceUsage on other goroutines.
	mu     sync.Mutex
	closed bool
	cur    pebbleCursor // background cleanup position; owner goroutine only
	// compacting is closed when the compaction background cleanup started
	// (compactCleaned) ends; nil when none runs. Owner goroutine only.
	compacting    chan struct{}
	cancelCompact context.CancelFunc
	// cache is the write-back cache of values and map entries; nil when
	// BackendConfig.WriteCacheBytes < 0.
	cache *writeCache
	// noWAL says the DB writes no WAL (BackendConfig.NoSync): its memtable
	// reaches the disk only by a flush.
	noWAL bool
	// remote is the object store of a disaggregated DB (remote.go); nil
	// for a local one.
	remote *remoteObjects
	// delta is the log of commits for delta checkpoints of a
	// disaggregated DB (remote_delta.go); nil for a local one. Every
	// commit goes through commit.
	delta *deltaLog
	// pending is the commit of a delta checkpoint's captured write-cache
	// entries still running (commitLater); nil when none. Every access
	// to db waits for it first (settle).
	pending atomic.Pointer[pendingCommit]
}

// pebbleCursor is where background cleanup resumes: target index, key group
// and the last key visited there (nil: the group's start).
type pebbleCursor struct {
	ti, kg int
	after  []byte
	// removed and visited count the entries of the current round (every
	// target's every key group once), uncompacted the entries removed
	// since the last compactCleaned.
	removed, visited, uncompacted int
}

// Background cleanup compacts what it deleted (compactCleaned) after a
// round when the entries removed since the last compaction are at least
// CleanupCompactMinRemoved and 1/CleanupCompactMinShare of the entries the
// round visited, or when the round left no live entry (then the
// compaction rewrites nothing live, however few it drops): a point delete
// only writes a tombstone, and until a compaction drops the deleted values
// with it both stay in the SST files a checkpoint copies (and later
// rounds skip the tombstones).
const (
	CleanupCompactMinRemoved = 1024
	CleanupCompactMinShare   = 10
)

// DefaultL0CompactionThreshold is the default of
// BackendConfig.L0CompactionThreshold: 16 L0 sublevels, not Pebble's 4.
// Every checkpoint flushes the memtable (snapshot), so a backend checkpointed
// every second writes one small L0 table a second whose keys span all its key
// groups; each compaction of L0 into the base level rewrites every base-level
// table those keys overlap, which is all of them, so its cost grows with the
// state. Compacting 16 flushes at once instead of 4 rewrites the base level a
// quarter as often (the rules operator's rules-10 bench at 500k records:
// about 10% less CPU per record, smaller incremental checkpoints). The price
// is up to 16 L0 tables (one bloom filter each) for a point read that misses
// the write cache and the block cache.
const DefaultL0CompactionThreshold = 16

// L0StopWritesFactor times the L0 compaction threshold is Pebble's
// L0StopWritesThreshold: the L0 sublevels at which writes wait for
// compactions (Pebble's defaults: 4 and 12).
const L0StopWritesFactor = 3

// setL0Thresholds sets opts' L0 compaction and stop-writes thresholds from
// BackendConfig.L0CompactionThreshold n (0: the default). A stop-writes
// threshold that would overflow an int is the largest int (a wrapped
// negative would become Pebble's 12, which Pebble then refuses as below
// the compaction threshold: TestL0ThresholdHuge).
func setL0Thresholds(opts *pebble.Options, n int) {
	if n <= 0 {
		n = DefaultL0CompactionThreshold
	}
	opts.L0CompactionThreshold = n
	opts.L0StopWritesThreshold = L0StopWritesFactor * n
	if n > math.MaxInt/L0StopWritesFactor {
		opts.L0StopWritesThreshold = math.MaxInt
	}
}

// MaxManifestBytes is the size past which a local Pebble DB starts a new
// MANIFEST (Pebble's MaxManifestFileSize, default 128 MiB), writing its
// current version there once the edits since the last such start outweigh
// it (Pebble's rule: at most about half of what it writes is for the
// rotation). Every snapshot copies the whole MANIFEST twice (Pebble's
// checkpoint, then into the checkpoint as a private file), and a DB
// checkpointed every second appends about 100 bytes a checkpoint (a flush
// and the compactions' edits): with Pebble's default a day-old job's
// every checkpoint would copy megabytes of old edits; this keeps it under
// about this size.
const MaxManifestBytes = 64 << 10

// maxManifestBytes is MaxManifestBytes; tests lower it.
var maxManifestBytes int64 = MaxManifestBytes

// localFS is the file system of a local (not disaggregated) Pebble DB;
// tests replace it to see the calls that reach the disk.
var localFS = vfs.Default

// openPebbleStore opens the DB of cfg; sched, when not nil, is its
// compaction scheduler (a restore's restoreScheduler), else Pebble's
// default.
func openPebbleStore(cfg BackendConfig, logger *slog.Logger, sched pebble.CompactionScheduler) (*pebbleStore, error) {
	opts := &pebble.Options{
		Merger:             listMerger,
		Logger:             pebbleLogger{logger.With("subsystem", "pebble")},
		FormatMajorVersion: pebble.FormatNewest,
	}
	opts.Experimental.CompactionScheduler = sched
	// Bloom filters on every level: state reads are point gets of one key
	// (Flink's state.backend.rocksdb.use-bloom-filter, 10 bits per key).
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	setL0Thresholds(opts, cfg.L0CompactionThreshold)
	var ro *remoteObjects
	dir := cfg.Dir
	if cfg.Remote != nil {
		var err error
		if ro, dir, err = openRemoteDir(cfg, opts); err != nil {
			return nil, err
		}
	}
	if ro == nil {
		opts.MaxManifestFileSize = maxManifestBytes
		opts.FS = localFS
		if cfg.NoSync {
			// A scratch directory (BackendConfig.NoSync): never reopened,
			// so its writes need no WAL, as Flink's RocksDB backend writes
			// none: durability comes from checkpoints, whose snapshot
			// flushes the memtable first and copies no WAL file. Without
			// it every commit (the write cache's flush and evictions)
			// also went to the log, and every snapshot's Pebble checkpoint
			// copied the fresh (recycled, full-sized) log file only to
			// skip it.
			opts.FS = unsyncedFS{localFS}
			opts.DisableWAL = true
		}
	}
	if cfg.Cache != nil {
		opts.Cache = cfg.Cache.c
	} else {
		c := pebble.NewCache(defaultPrivateCacheBytes)
		defer c.Unref() // the DB holds its own reference
		opts.Cache = c
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("state: open pebble in %s: %w", cfg.Dir, err)
	}
	st := &pebbleStore{dir: dir, db: db, cur: pebbleCursor{kg: cfg.KeyGroupRange.Start}, remote: ro, noWAL: opts.DisableWAL}
	if ro != nil {
		st.delta = newDeltaLog(cfg.Remote)
		if err := db.SetCreatorID(ro.creator); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("state: open pebble in %s: set creator id: %w", cfg.Dir, err)
		}
	}
	switch {
	case cfg.WriteCacheBytes == 0:
		st.cache = newWriteCache(DefaultWriteCacheBytes)
	case cfg.WriteCacheBytes > 0:
		st.cache = newWriteCache(cfg.WriteCacheBytes)
	}
	if st.cache != nil && st.delta != nil {
		st.cache.commit = st.commit
	}
	return st, nil
}

// metaSync is the write option of the format and metadata records: synced,
// but without a WAL (BackendConfig.NoSync, whose syncs are no-ops anyway)
// Pebble refuses a synced write, so they go unsynced as every other write.
func (s *pebbleStore) metaSync() *pebble.WriteOptions {
	if s.noWAL {
		return pebble.NoSync
	}
	return pebble.Sync
}

// getCopy returns a copy of the value of key.
func (s *pebbleStore) getCopy(key []byte) ([]byte, bool, error) {
	if err := s.settle(); err != nil {
		return nil, false, err
	}
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("state: pebble get: %w", err)
	}
	out := append([]byte{}, v...)
	return out, true, closer.Close()
}

func (s *pebbleStore) loadFormat() (formatInfo, bool, error) {
	var f formatInfo
	v, ok, err := s.getCopy(formatKey)
	if err != nil || !ok {
		return f, ok, err
	}
	if err := json.Unmarshal(v, &f); err != nil {
		return f, false, fmt.Errorf("state: format record: %v: %w", err, ErrCorrupt)
	}
	return f, true, nil
}

func (s *pebbleStore) saveFormat(f formatInfo) error {
	v, _ := json.Marshal(f)
	return s.dbSet(formatKey, v, s.metaSync())
}

func (s *pebbleStore) loadMetas() ([]stateMeta, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: metaStatePfx, UpperBound: prefixEnd(metaStatePfx)})
	if err != nil {
		return nil, fmt.Errorf("state: pebble iter: %w", err)
	}
	var metas []stateMeta
	for ok := it.First(); ok; ok = it.Next() {
		var m stateMeta
		v, err := it.ValueAndErr()
		if err == nil {
			err = json.Unmarshal(v, &m)
		}
		if err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("state: state meta %q: %v: %w", it.Key()[len(metaStatePfx):], err, ErrCorrupt)
		}
		metas = append(metas, m)
	}
	return metas, it.Close()
}

func (s *pebbleStore) saveMeta(m stateMeta) error {
	v, _ := json.Marshal(m)
	return s.dbSet(metaKey(m.Name), v, s.metaSync())
}

func (s *pebbleStore) get(k stateKey) ([]byte, bool, error) {
	return s.cachedGet(k.id, appendStateKey(nil, k))
}

func (s *pebbleStore) set(k stateKey, v []byte) error {
	return s.cachedWrite(k.id, appendStateKey(nil, k), v, true)
}

// merge writes Pebble directly (a merge never reads), after taking the key
// out of the cache.
func (s *pebbleStore) merge(k stateKey, v []byte) error {
	key := appendStateKey(nil, k)
	if s.cache != nil {
		if err := s.cache.forget(s.db, key); err != nil {
			return fmt.Errorf("state: pebble write: %w", err)
		}
	}
	return s.dbMerge(key, v, pebble.NoSync)
}

func (s *pebbleStore) del(k stateKey) error {
	return s.cachedWrite(k.id, appendStateKey(nil, k), nil, false)
}

func (s *pebbleStore) getEntry(k stateKey, uk []byte) ([]byte, bool, error) {
	return s.cachedGet(k.id, append(appendStateKey(nil, k), uk...))
}

func (s *pebbleStore) setEntry(k stateKey, uk, v []byte) error {
	return s.cachedWrite(k.id, append(appendStateKey(nil, k), uk...), v, true)
}

// mergeEntry is merge of a map entry: it never reads the entry. When the
// write cache knows the entry's whole value (it was read, written, or
// hinted absent: hintAbsentEntry), v is appended there (writeCache.
// appendTo); otherwise the entry leaves the cache and v is merged in
// Pebble.
func (s *pebbleStore) mergeEntry(k stateKey, uk, v []byte) error {
	key := append(appendStateKey(nil, k), uk...)
	if s.cache != nil {
		done, err := s.cache.appendTo(s.db, k.id, key, v)
		if err != nil {
			return fmt.Errorf("state: pebble write: %w", err)
		}
		if done {
			return nil
		}
		if err := s.cache.forget(s.db, key); err != nil {
			return fmt.Errorf("state: pebble write: %w", err)
		}
	}
	return s.dbMerge(key, v, pebble.NoSync)
}

// hintAbsentEntry tells the write cache that Pebble holds no value for the
// map entry (writeCache.assumeAbsent); without a cache it does nothing.
func (s *pebbleStore) hintAbsentEntry(k stateKey, uk []byte) error {
	if s.cache == nil {
		return nil
	}
	if err := s.cache.assumeAbsent(s.db, k.id, append(appendStateKey(nil, k), uk...)); err != nil {
		return fmt.Errorf("state: pebble write: %w", err)
	}
	return nil
}

// setNewEntry is setEntry of an entry the caller knows Pebble holds no
// value for (a timer its queue does not hold): a new cache entry for it is
// marked absent, so that its delete before the next flush is not written.
func (s *pebbleStore) setNewEntry(k stateKey, uk, v []byte) error {
	key := append(appendStateKey(nil, k), uk...)
	if s.cache != nil {
		done, err := s.cache.putNew(s.db, k.id, key, v)
		if err != nil {
			return fmt.Errorf("state: pebble write: %w", err)
		}
		if done {
			return nil
		}
	}
	return s.dbSet(key, v, pebble.NoSync)
}

// setColdEntry is setEntry of an entry the caller does not expect to
// read soon (writeCache.putCold).
func (s *pebbleStore) setColdEntry(k stateKey, uk, v []byte) error {
	key := append(appendStateKey(nil, k), uk...)
	if s.cache != nil {
		done, err := s.cache.putCold(s.db, k.id, key, v)
		if err != nil {
			return fmt.Errorf("state: pebble write: %w", err)
		}
		if done {
			return nil
		}
	}
	return s.dbSet(key, v, pebble.NoSync)
}

func (s *pebbleStore) delEntry(k stateKey, uk []byte) error {
	return s.cachedWrite(k.id, append(appendStateKey(nil, k), uk...), nil, false)
}

// cachedGet reads key of state id through the write cache.
func (s *pebbleStore) cachedGet(id uint32, key []byte) ([]byte, bool, error) {
	return s.cachedGetHint(id, key, nil)
}

// cachedGetHint is cachedGet setting hint (when not nil) to the cached
// entry found (zero when none), for a cachedWriteHint of the same key.
// Owner goroutine only when hint is not nil.
func (s *pebbleStore) cachedGetHint(id uint32, key []byte, hint *cacheHint) ([]byte, bool, error) {
	if hint != nil {
		*hint = cacheHint{}
	}
	if s.cache == nil {
		return s.getCopy(key)
	}
	v, found, cached, gen, err := s.cache.get(id, key, hint)
	if err != nil {
		return nil, false, fmt.Errorf("state: write cache: %w", err)
	}
	if cached {
		return v, found, nil
	}
	v, found, err = s.getCopy(key)
	if err != nil {
		return nil, false, err
	}
	if err := s.cache.fill(s.db, id, key, v, found, gen); err != nil {
		return nil, false, fmt.Errorf("state: pebble write: %w", err)
	}
	return v, found, nil
}

// getObject reads key of state id decoded with codec (a pointer to the
// value): from the write cache (the entry's own, which the caller must
// not modify and must copy the value out of before the next write of
// key), or from Pebble, decoded and then kept decoded by the cache. hint is set to the cached
// entry found, for a putObject of the same key. Owner goroutine only.
func (s *pebbleStore) getObject(id uint32, key []byte, codec *objCodec, hint *cacheHint) (any, bool, error) {
	*hint = cacheHint{}
	obj, found, cached, gen, err := s.cache.getObj(id, key, codec, hint)
	if err != nil {
		return nil, false, err
	}
	if cached {
		return obj, found, nil
	}
	v, found, err := s.getCopy(key)
	if err != nil {
		return nil, false, err
	}
	if found {
		if obj, err = codec.decode(v); err != nil {
			return nil, false, err
		}
	}
	if err := s.cache.fillObj(s.db, id, key, obj, found, codec, gen); err != nil {
		return nil, false, fmt.Errorf("state: pebble write: %w", err)
	}
	return obj, found, nil
}

// putObject writes key of state id as the decoded value obj points to
// (copied: the caller keeps obj): kept decoded by the write cache, or serialized with
// codec to Pebble when the cache bypasses the state. hint is what the
// getObject before it found (or zero).
func (s *pebbleStore) putObject(id uint32, key []byte, obj any, codec *objCodec, hint cacheHint) error {
	done, err := s.cache.putObj(s.db, id, key, obj, codec, hint)
	if err != nil {
		return fmt.Errorf("state: pebble write: %w", err)
	}
	if done {
		return nil
	}
	v, err := codec.encode(nil, obj)
	if err != nil {
		return err
	}
	return s.dbSet(key, v, pebble.NoSync)
}

// removeObject deletes key of state id, with putObject's hint.
func (s *pebbleStore) removeObject(id uint32, key []byte, hint cacheHint) error {
	done, err := s.cache.removeObj(s.db, id, key, hint)
	if err != nil {
		return fmt.Errorf("state: pebble write: %w", err)
	}
	if done {
		return nil
	}
	return s.dbDelete(key, pebble.NoSync)
}

// cachedWrite sets (present) or deletes key of state id through the write
// cache.
func (s *pebbleStore) cachedWrite(id uint32, key, v []byte, present bool) error {
	return s.cachedWriteHint(id, key, v, present, cacheHint{})
}

// cachedWriteHint is cachedWrite with what the cachedGetHint of key before
// it found (or zero).
func (s *pebbleStore) cachedWriteHint(id uint32, key, v []byte, present bool, hint cacheHint) error {
	if s.cache != nil {
		done, err := s.cache.put(s.db, id, key, v, present, hint)
		if err != nil {
			return fmt.Errorf("state: pebble write: %w", err)
		}
		if done {
			return nil
		}
	}
	if present {
		return s.dbSet(key, v, pebble.NoSync)
	}
	return s.dbDelete(key, pebble.NoSync)
}

// flushCache writes the write cache's dirty entries to Pebble: before
// anything reads Pebble other than by point gets (iterators, snapshots).
func (s *pebbleStore) flushCache() error {
	if err := s.settle(); err != nil {
		return err
	}
	if s.cache == nil {
		return nil
	}
	if err := s.cache.flush(s.db); err != nil {
		return fmt.Errorf("state: pebble write: %w", err)
	}
	return nil
}

// dropCache flushes the write cache and empties it: before Pebble is
// written behind it (a batch of deletes).
func (s *pebbleStore) dropCache() error {
	if err := s.settle(); err != nil {
		return err
	}
	if s.cache == nil {
		return nil
	}
	if err := s.cache.drop(s.db); err != nil {
		return fmt.Errorf("state: pebble write: %w", err)
	}
	return nil
}

// scanEntries iterates a point-in-time view of the map: writes made by fn
// are not seen by the iteration.
func (s *pebbleStore) scanEntries(k stateKey, fn func(uk, v []byte) (bool, error)) error {
	if err := s.flushCache(); err != nil {
		return err
	}
	prefix := appendStateKey(nil, k)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("state: pebble iter: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("state: pebble iter: %w", err)
		}
		more, err := fn(it.Key()[len(prefix):], v)
		if err != nil || !more {
			_ = it.Close()
			return err
		}
	}
	return it.Close()
}

// scanRange is scanEntries bounded to [lo, hi]: the iterator seeks to lo,
// so the cost is one seek plus the entries in range. Unlike scanEntries it
// does not flush the write cache while few entries are dirty
// (rangeDirtyLimit): it merges the dirty versions in range over the
// iterator (a point-in-time view as well), so a range read per record
// (interval_join) does not commit a batch per record.
func (s *pebbleStore) scanRange(k stateKey, lo, hi []byte, fn func(uk, v []byte) (bool, error)) error {
	prefix := appendStateKey(nil, k)
	lower := append(slices.Clip(prefix), lo...)
	upper := append(append(slices.Clip(prefix), hi...), 0) // exclusive: every uk <= hi sorts before it
	var over []dirtyKV
	if s.cache != nil {
		var ok bool
		var err error
		if over, ok, err = s.cache.dirtyIn(lower, upper, rangeDirtyLimit); err != nil {
			return fmt.Errorf("state: write cache: %w", err)
		}
		if !ok {
			if err := s.flushCache(); err != nil {
				return err
			}
		}
	}
	if err := s.settle(); err != nil {
		return err
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("state: pebble iter: %w", err)
	}
	valid := it.First()
	for valid || len(over) > 0 {
		fromIter := false
		switch {
		case !valid: // only the cache's versions are left
		case len(over) == 0:
			fromIter = true
		default:
			switch c := bytes.Compare(it.Key(), []byte(over[0].key)); {
			case c < 0:
				fromIter = true
			case c == 0: // the cache's version replaces Pebble's
				valid = it.Next()
			}
		}
		var key, v []byte
		if fromIter {
			if v, err = it.ValueAndErr(); err != nil {
				_ = it.Close()
				return fmt.Errorf("state: pebble iter: %w", err)
			}
			key = it.Key()
		} else {
			d := over[0]
			over = over[1:]
			if !d.present {
				continue
			}
			key, v = []byte(d.key), d.val
		}
		more, err := fn(key[len(prefix):], v)
		if err != nil || !more {
			_ = it.Close()
			return err
		}
		if fromIter {
			valid = it.Next()
		}
	}
	return it.Close()
}

// rangeDirtyLimit is how many dirty write-cache entries scanRange merges
// over its iterator at most; with more it flushes the cache first.
const rangeDirtyLimit = 256

func (s *pebbleStore) scanGroup(id uint32, kg int, fn func(key, uk, v []byte) error) error {
	if err := s.flushCache(); err != nil {
		return err
	}
	prefix := appendGroupPrefix(nil, kg, id)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("state: pebble iter: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		k, uk, err := parseStateKey(it.Key())
		if err == nil {
			var v []byte
			if v, err = it.ValueAndErr(); err == nil {
				err = fn(k.key, uk, v)
			}
		}
		if err != nil {
			_ = it.Close()
			return err
		}
	}
	return it.Close()
}

// clearEntries deletes the entries one by one in a batch, as Flink's RocksDB
// MapState.clear does, rather than with a range tombstone per cleared key.
func (s *pebbleStore) clearEntries(k stateKey) error {
	if err := s.dropCache(); err != nil { // the cached entries under k would outlive the clear
		return err
	}
	prefix := appendStateKey(nil, k)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix), KeyTypes: pebble.IterKeyTypePointsOnly})
	if err != nil {
		return fmt.Errorf("state: pebble iter: %w", err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	for ok := it.First(); ok; ok = it.Next() {
		_ = b.Delete(it.Key(), nil) // Batch.Delete copies the key; it fails only on a closed batch
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("state: pebble iter: %w", err)
	}
	return s.commit(b, pebble.NoSync)
}

func (s *pebbleStore) countEntries() (int, error) {
	if err := s.flushCache(); err != nil {
		return 0, err
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: keyGroupsStart, UpperBound: keyGroupsEnd})
	if err != nil {
		return 0, err
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n, it.Close()
}

func (s *pebbleStore) concurrentReads() bool { return true }

func (s *pebbleStore) close() error {
	s.waitCompaction(true)
	ferr := s.flushCache() // a reopened directory sees every write
	if ferr == nil && s.noWAL {
		ferr = s.db.Flush() // the memtable, which no WAL holds
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if err := s.db.Close(); err != nil {
		return err
	}
	if s.remote != nil {
		return errors.Join(ferr, s.closeRemote())
	}
	return ferr
}

// DiskSpaceUsage returns the bytes the DB occupies on disk (SSTs, WAL,
// manifest), and false once the backend is closed. Safe for concurrent use
// (a metrics scrape calls it).
func (p *pebbleBackend) DiskSpaceUsage() (uint64, bool) {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	if p.st.closed {
		return 0, false
	}
	return p.st.db.Metrics().DiskSpaceUsage(), true
}

// DiskUser is implemented by backends that can report their disk usage
// concurrently with their owner (the Pebble backend).
type DiskUser interface {
	DiskSpaceUsage() (bytes uint64, open bool)
}

// cleanup implements store: it scans the (key group, state id) prefixes of
// the targets in turn with one iterator whose bounds move from prefix to
// prefix, resuming after the last key
// visited, and deletes or rewrites what the target's visit says in one
// batch. Each seek and each visited entry costs one unit of budget.
func (s *pebbleStore) cleanup(targets []cleanupTarget, kgs keygroup.Range, budget int) (int, error) {
	if err := s.settle(); err != nil {
		return 0, err
	}
	if s.cache != nil {
		ids := make([]uint32, len(targets))
		for i, t := range targets {
			ids[i] = t.id
		}
		if err := s.cache.bypassIDs(s.db, ids); err != nil { // cleanup rewrites Pebble behind the cache
			return 0, fmt.Errorf("state: pebble write: %w", err)
		}
	}
	c := &s.cur
	if c.ti >= len(targets) || !kgs.Contains(c.kg) {
		*c = pebbleCursor{kg: kgs.Start}
	}
	startTI, startKG := c.ti, c.kg
	b := s.db.NewBatch()
	defer b.Close()
	// One iterator serves the whole pass: each (key group, target) step
	// moves its bounds with SetBounds (which copies them and leaves the
	// iterator to be repositioned, here by First), instead of opening an
	// iterator per step. Like the per-step iterators it sees the DB as of
	// its creation: the batch commits after the pass.
	it, err := s.db.NewIter(nil)
	if err != nil {
		return 0, fmt.Errorf("state: pebble iter: %w", err)
	}
	defer func() {
		if it != nil {
			_ = it.Close()
		}
	}()
	var prefix, lower, upper []byte
	removed := 0
	roundDone := false
	for budget > 0 {
		t := targets[c.ti]
		prefix = appendGroupPrefix(prefix[:0], c.kg, t.id)
		lower = append(lower[:0], prefix...)
		if c.after != nil {
			lower = append(append(lower[:0], c.after...), 0)
		}
		upper = appendPrefixEnd(upper, prefix)
		it.SetBounds(lower, upper)
		budget--
		done := true
		for ok := it.First(); ok; ok = it.Next() {
			if budget <= 0 {
				done = false
				break
			}
			budget--
			v, err := it.ValueAndErr()
			if err != nil {
				return removed, fmt.Errorf("state: pebble iter: %w", err)
			}
			repl, keep, err := t.visit(v)
			if err != nil {
				return removed, fmt.Errorf("state: ttl cleanup of key %x: %w", it.Key(), err)
			}
			c.visited++
			switch {
			case !keep:
				_ = b.Delete(it.Key(), nil)
				removed++
				c.removed++
			case repl != nil:
				_ = b.Set(it.Key(), repl, nil)
			}
			c.after = append(c.after[:0], it.Key()...)
		}
		if err := it.Error(); err != nil {
			return removed, fmt.Errorf("state: pebble iter: %w", err)
		}
		if !done {
			break
		}
		c.after = nil
		if c.kg++; c.kg > kgs.End {
			c.kg = kgs.Start
			if c.ti++; c.ti >= len(targets) {
				c.ti = 0
				roundDone = true
			}
		}
		if c.ti == startTI && c.kg == startKG {
			break // a full round in one step
		}
	}
	err = it.Close()
	it = nil
	if err != nil {
		return removed, fmt.Errorf("state: pebble iter: %w", err)
	}
	if !b.Empty() {
		if err := s.commit(b, pebble.NoSync); err != nil {
			return removed, err
		}
	}
	if roundDone {
		c.uncompacted += c.removed
		if c.uncompacted > 0 && (c.removed == c.visited ||
			c.uncompacted >= CleanupCompactMinRemoved && c.uncompacted*CleanupCompactMinShare >= c.visited) && s.compactCleaned() {
			c.uncompacted = 0
		}
		c.removed, c.visited = 0, 0
	}
	return removed, nil
}

// compactCleaned starts a manual compaction of the key-group key space on
// a goroutine of its own and reports true, unless one still runs (false): it rewrites the SST files
// without the values background cleanup deleted and their tombstones, so
// the disk usage and the next checkpoint shrink. The goroutine touches
// only the Pebble DB (safe for concurrent use; Pebble compacts on its own
// goroutines too), never the backend's state; close cancels and awaits it.
func (s *pebbleStore) compactCleaned() bool {
	if !s.waitCompaction(false) {
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.compacting, s.cancelCompact = done, cancel
	go func() {
		defer close(done)
		_ = s.db.Compact(ctx, keyGroupsStart, keyGroupsEnd, false) // a failed compaction only leaves the space for later
	}()
	return true
}

// waitCompaction reports whether no compaction runs; with stop it first
// cancels and awaits a running one.
func (s *pebbleStore) waitCompaction(stop bool) bool {
	if s.compacting == nil {
		return true
	}
	if stop {
		s.cancelCompact()
		<-s.compacting
	}
	select {
	case <-s.compacting:
		s.compacting, s.cancelCompact = nil, nil
		return true
	default:
		return false
	}
}

// pebbleLogger routes Pebble's logs to slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug("pebble", "msg", fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble", "msg", fmt.Sprintf(format, args...))
}

// Fatalf logs and panics: Pebble calls it on broken invariants and expects
// it not to return.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error("pebble fatal", "msg", msg)
	panic("state: pebble: " + msg)
}
