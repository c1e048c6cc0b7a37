package state

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// Backend kinds accepted by BackendConfig.Kind (the YAML key
// state.backend).
const (
	KindHashmap = "hashmap" // in memory; Flink's HashMapStateBackend
	KindPebble  = "pebble"  // on disk; Flink's EmbeddedRocksDBStateBackend
)

// DefaultTTLCleanupEntriesPerStep is the default of
// TTLCleanupConfig.EntriesPerStep: with DefaultTTLCleanupInterval, a
// subtask visits up to 100,000 stored entries a second, so a full round
// over 1M entries takes about 10 s.
const DefaultTTLCleanupEntriesPerStep = 1000

// DefaultTTLCleanupInterval is the default of TTLCleanupConfig.Interval as
// the task uses it: the keyed operator runs one CleanupStep every
// DefaultTTLCleanupInterval of processing time from its mailbox (see
// CleanupSchedule).
const DefaultTTLCleanupInterval = 10 * time.Millisecond

// KeyedStateBackend holds the keyed state of one keyed subtask: every state
// obtained from it with GetValueState, GetListState, GetMapState,
// GetReducingState or GetAggregatingState, for the keys of the key groups in
// KeyGroupRange. State handles act on the current key set by SetCurrentKey,
// as in Flink's KeyedStateBackend.
//
// A backend is owned by its subtask's goroutine and is not safe for
// concurrent use, with one exception: when ConcurrentReads reports true (the
// Pebble backend), the key-bound read paths the async state layer uses may
// run on other goroutines concurrently with the owner (see the package
// documentation, "Concurrency"). Close must not run concurrently with any
// other call.
//
// The interface is sealed: only this package implements it.
type KeyedStateBackend interface {
	// SetCurrentKey makes key, a serialized key, the key that state handles
	// act on. The backend copies key and computes its key group with
	// keygroup.Assign(key, MaxParallelism()). A key whose key group is not
	// in KeyGroupRange is accepted here; state operations on it then fail
	// with a *KeyGroupError.
	SetCurrentKey(key []byte)
	// CurrentKey returns the current key, nil before the first
	// SetCurrentKey. The slice is valid until the next SetCurrentKey.
	CurrentKey() []byte
	// CurrentKeyGroup returns the key group of the current key, in
	// [0, MaxParallelism()), or -1 before the first SetCurrentKey.
	CurrentKeyGroup() int
	// KeyGroupRange returns the key groups this backend owns.
	KeyGroupRange() keygroup.Range
	// MaxParallelism returns the number of key groups of the job.
	MaxParallelism() int
	// SetWatermark moves the event-time clock of TTL (StateTtlConfig.EventTime)
	// to the input watermark wm; it never moves back.
	SetWatermark(wm time.Time)
	// SetRecordTimestamp sets the timestamp of the record being processed
	// (the zero time: none, as in OnTimer); the event time of TTL is the
	// later of it and the watermark.
	SetRecordTimestamp(ts time.Time)
	// CleanupStep runs one bounded step of background TTL cleanup and
	// returns the number of expired entries it removed. It visits about
	// TTLCleanupConfig.EntriesPerStep stored entries of the states with TTL
	// obtained from this backend (and not excluded with
	// StateTtlConfig.DisableCleanupInBackground), resuming where the
	// previous step stopped and wrapping around key group by key group. It
	// does nothing when cleanup is disabled or when called sooner than
	// TTLCleanupConfig.Interval after the previous step, so a task may call
	// it between records or from a timer. Pebble has no compaction filter
	// (RocksDB's TTL compaction filter is what Flink uses), hence this scan.
	// Event-time TTL states are judged on the watermark alone (the record
	// timestamp set with SetRecordTimestamp is ignored during the step).
	// The keyed operators call it from their task (CleanupSchedule).
	CleanupStep() (removed int, err error)
	// ConcurrentReads reports whether state reads bound to an explicit key
	// may run on other goroutines (true for Pebble, false for hashmap).
	ConcurrentReads() bool
	// Close releases the backend; a Pebble backend closes its DB and drops
	// its block cache reference. State handles must not be used after
	// Close; calls on them return ErrClosed. Close is idempotent.
	Close() error

	core() *backend
}

// Snapshotter is implemented by backends that can write a full snapshot of
// their keyed state (the hashmap backend, Flink's full snapshot of the
// HashMapStateBackend). Snapshot writes dir/keyed-state.snap (creating dir),
// atomically: temp file, fsync, rename. The file omits entries already
// expired under the TTL of states obtained from the backend. A backend
// opened with BackendConfig.RestoreDir = dir restores it.
type Snapshotter interface {
	Snapshot(dir string) error
}

// TTLCleanupConfig tunes background TTL cleanup (KeyedStateBackend.CleanupStep).
type TTLCleanupConfig struct {
	// Disabled turns background cleanup off: CleanupStep does nothing and
	// expired entries are removed only when read (or snapshotted).
	Disabled bool
	// EntriesPerStep bounds the stored entries one CleanupStep visits.
	// 0 means DefaultTTLCleanupEntriesPerStep (128).
	EntriesPerStep int
	// Interval is the minimum processing time between two steps; calls
	// sooner return at once. 0: every call runs a step. The keyed
	// operators call CleanupStep every Interval, or every
	// DefaultTTLCleanupInterval when Interval is 0 (CleanupSchedule).
	Interval time.Duration
}

// BackendConfig configures OpenBackend.
type BackendConfig struct {
	// Kind is KindHashmap or KindPebble. Required.
	Kind string
	// Dir is the Pebble DB directory of this subtask, created if missing;
	// reopening a directory restores its state. Required for pebble,
	// ignored by hashmap.
	Dir string
	// NoSync makes every fsync of a local Pebble DB a no-op (its memtable
	// flushes, compactions, MANIFEST and the staging directory of its
	// snapshots, SnapshotKeyed) and turns its WAL off (Pebble's
	// DisableWAL: Close flushes the memtable instead; after a crash the
	// writes since the last memtable flush are gone). Set it only when Dir is scratch: never
	// reopened after a crash, every open starting from an empty directory
	// or a checkpoint (OpenBackendRestored), as a job's state directory is
	// (the job clears it at every start and restart). Durability then
	// comes from checkpoints alone, which copy the files they keep and
	// sync the copies themselves (or leave it to the store upload with
	// SnapshotTarget.NoSync), as Flink's RocksDB backend keeps no WAL and
	// restores only from checkpoints. A remote (disaggregated) DB's local
	// directory never syncs, whatever NoSync (REMOTE.md). Ignored by
	// hashmap.
	NoSync bool
	// RestoreDir, hashmap only, is a directory written by Snapshot to
	// restore from; entries of key groups outside KeyGroupRange are
	// skipped. Empty: start empty.
	RestoreDir string
	// MaxParallelism is the job's number of key groups, in [1, 32768]. It
	// cannot change across a restore (ErrMaxParallelismChanged). Required.
	MaxParallelism int
	// KeyGroupRange is the key groups this subtask owns, inside
	// [0, MaxParallelism).
	KeyGroupRange keygroup.Range
	// Cache is the Pebble block cache shared by the process; the backend
	// takes its own reference and drops it on Close. Nil: the backend
	// makes a private 8 MiB cache. Ignored by hashmap.
	Cache *BlockCache
	// Clock is the processing-time clock of TTL. Nil: the wall clock.
	Clock Clock
	// Logger receives lifecycle logs (and Pebble's, at Info/Error). Nil:
	// discard.
	Logger *slog.Logger
	// TTLCleanup tunes background TTL cleanup.
	TTLCleanup TTLCleanupConfig
	// WriteCacheBytes bounds the write-back cache of a Pebble backend
	// (keys, values and 64 bytes per entry): point reads and writes of hot
	// keys are served from memory and reach Pebble in one batch before
	// every snapshot. 0 means DefaultWriteCacheBytes (16 MiB); negative
	// disables the cache. Ignored by hashmap.
	WriteCacheBytes int
	// L0CompactionThreshold is the number of L0 sublevels of a Pebble
	// backend that starts a compaction of L0 into the base level (Pebble's
	// Options.L0CompactionThreshold, RocksDB's
	// level0_file_num_compaction_trigger); writes stop at
	// L0StopWritesFactor times it. 0 means DefaultL0CompactionThreshold.
	// Ignored by hashmap.
	L0CompactionThreshold int
	// RestoreProgressInterval is the least time between two "restoring
	// keyed state" Info lines (bytes_done, bytes_total) while
	// OpenBackendRestored copies or links a Pebble snapshot's files: a
	// long restore shows its progress. 0 means
	// DefaultRestoreProgressInterval.
	RestoreProgressInterval time.Duration
	// Remote, if not nil, makes a Pebble backend disaggregated: its SST
	// files live on a shared object store, the local Dir holds the WAL,
	// the MANIFEST and a bounded cache (RemoteConfig, REMOTE.md). Ignored
	// by hashmap.
	Remote *RemoteConfig
}

// DefaultRestoreProgressInterval is the default of
// BackendConfig.RestoreProgressInterval.
const DefaultRestoreProgressInterval = 5 * time.Second

// Validate reports every problem of the config, or nil.
func (c *BackendConfig) Validate() error {
	var problems []string
	switch c.Kind {
	case KindHashmap:
	case KindPebble:
		if c.Dir == "" {
			problems = append(problems, "pebble backend needs a dir")
		}
		if c.RestoreDir != "" {
			problems = append(problems, "restore_dir applies to the hashmap backend only (a pebble backend restores by reopening its dir)")
		}
		if c.Remote != nil && c.Remote.Dir == "" {
			problems = append(problems, "remote pebble backend needs a remote store dir")
		}
	default:
		problems = append(problems, fmt.Sprintf("unknown backend kind %q (want %q or %q)", c.Kind, KindHashmap, KindPebble))
	}
	if err := keygroup.ValidateMaxParallelism(c.MaxParallelism, 1); err != nil {
		problems = append(problems, err.Error())
	} else if r := c.KeyGroupRange; r.Len() == 0 || r.Start < 0 || r.End >= c.MaxParallelism {
		problems = append(problems, fmt.Sprintf("key group range %s not a non-empty range inside [0, %d)", r, c.MaxParallelism))
	}
	if c.TTLCleanup.EntriesPerStep < 0 {
		problems = append(problems, fmt.Sprintf("ttl cleanup entries per step %d is negative", c.TTLCleanup.EntriesPerStep))
	}
	if c.TTLCleanup.Interval < 0 {
		problems = append(problems, fmt.Sprintf("ttl cleanup interval %v is negative", c.TTLCleanup.Interval))
	}
	return joinProblems("state: backend config", problems)
}

// OpenBackend opens the keyed state backend cfg describes: an empty or
// restored hashmap backend, or a Pebble DB in cfg.Dir. It returns an error
// wrapping ErrMaxParallelismChanged when the restored state has another max
// parallelism, ErrCorrupt when it cannot be decoded, or the config's
// problems.
//
// The hashmap backend also implements Snapshotter; the Pebble one has a
// Metrics method (see MetricsProvider).
func OpenBackend(cfg BackendConfig) (KeyedStateBackend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "state", "backend", cfg.Kind, "key_groups", cfg.KeyGroupRange.String())
	switch cfg.Kind {
	case KindHashmap:
		st, err := openHashmapStore(cfg)
		if err != nil {
			return nil, err
		}
		b, err := newBackend(cfg, st, logger)
		if err != nil {
			return nil, err
		}
		return &hashmapBackend{backend: b, st: st}, nil
	default:
		st, err := openPebbleStore(cfg, logger, nil)
		if err != nil {
			return nil, err
		}
		b, err := newBackend(cfg, st, logger)
		if err != nil {
			_ = st.close()
			return nil, err
		}
		return &pebbleBackend{backend: b, st: st}, nil
	}
}

// backend is the part of both backends above the store: the current key,
// the registry of states and the cleanup schedule.
type backend struct {
	st      store
	kind    string
	maxP    int
	kgs     keygroup.Range
	clock   Clock
	log     *slog.Logger
	cleanup TTLCleanupConfig

	watermark int64 // event-time clock of TTL, ms; math.MinInt64 before the first
	recordTs  int64 // timestamp of the record being processed, ms; math.MinInt64 for none

	curKey []byte // copy of the current key, reused across SetCurrentKey
	curKG  int    // -1 before the first SetCurrentKey
	keySeq uint64 // SetCurrentKey calls so far: a handle's cached key of the current key is good while it is unchanged

	metas    map[string]stateMeta   // every state ever registered, by name
	states   map[string]*registered // states obtained in this session
	targets  []cleanupTarget        // TTL states with background cleanup, in registration order
	lastStep time.Time              // clock time of the previous cleanup step
	onTarget func()                 // NotifyCleanup's callback, until the first target
	closed   bool
}

// registered is a state obtained in this session.
type registered struct {
	meta    stateMeta
	serType string // the serializers' Go types, to detect conflicts
	ttl     StateTtlConfig
	hasTTL  bool
	handle  any
	core    *stateCore
}

func newBackend(cfg BackendConfig, st store, logger *slog.Logger) (*backend, error) {
	b := &backend{
		st:        st,
		kind:      cfg.Kind,
		maxP:      cfg.MaxParallelism,
		kgs:       cfg.KeyGroupRange,
		clock:     cfg.Clock,
		log:       logger,
		cleanup:   cfg.TTLCleanup,
		curKG:     -1,
		watermark: math.MinInt64,
		recordTs:  math.MinInt64,
		metas:     map[string]stateMeta{},
		states:    map[string]*registered{},
	}
	if b.clock == nil {
		b.clock = wallClock{}
	}
	if b.cleanup.EntriesPerStep == 0 {
		b.cleanup.EntriesPerStep = DefaultTTLCleanupEntriesPerStep
	}
	f, found, err := st.loadFormat()
	if err != nil {
		return nil, err
	}
	if found {
		if f.FormatVersion != currentFormatVersion {
			return nil, fmt.Errorf("state: stored format version %d, this build reads %d: %w", f.FormatVersion, currentFormatVersion, ErrCorrupt)
		}
		if f.MaxParallelism != b.maxP {
			return nil, fmt.Errorf("state: state was written with max parallelism %d, the job now has %d: %w", f.MaxParallelism, b.maxP, ErrMaxParallelismChanged)
		}
	} else if err := st.saveFormat(formatInfo{FormatVersion: currentFormatVersion, MaxParallelism: b.maxP}); err != nil {
		return nil, err
	}
	metas, err := st.loadMetas()
	if err != nil {
		return nil, err
	}
	for _, m := range metas {
		b.metas[m.Name] = m
	}
	b.log.Info("keyed state backend opened", "restored", found, "states", len(metas))
	return b, nil
}

func (b *backend) core() *backend { return b }

// SetCurrentKey implements KeyedStateBackend.
func (b *backend) SetCurrentKey(key []byte) {
	b.curKey = append(b.curKey[:0], key...)
	b.curKG = keygroup.Assign(key, b.maxP)
	b.keySeq++
}

// CurrentKey implements KeyedStateBackend.
func (b *backend) CurrentKey() []byte {
	if b.curKG < 0 {
		return nil
	}
	return b.curKey
}

// CurrentKeyGroup implements KeyedStateBackend.
func (b *backend) CurrentKeyGroup() int { return b.curKG }

// KeyGroupRange implements KeyedStateBackend.
func (b *backend) KeyGroupRange() keygroup.Range { return b.kgs }

// MaxParallelism implements KeyedStateBackend.
func (b *backend) MaxParallelism() int { return b.maxP }

// ConcurrentReads implements KeyedStateBackend.
func (b *backend) ConcurrentReads() bool { return b.st.concurrentReads() }

// Close implements KeyedStateBackend.
func (b *backend) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.st.close()
	b.log.Info("keyed state backend closed")
	return err
}

// CleanupStep implements KeyedStateBackend.
func (b *backend) CleanupStep() (int, error) {
	if b.closed {
		return 0, ErrClosed
	}
	if b.cleanup.Disabled || len(b.targets) == 0 {
		return 0, nil
	}
	now := b.clock.Now()
	if b.cleanup.Interval > 0 && !b.lastStep.IsZero() && now.Sub(b.lastStep) < b.cleanup.Interval {
		return 0, nil
	}
	b.lastStep = now
	rts := b.recordTs
	b.recordTs = math.MinInt64 // event-time TTL: the watermark alone says what expired
	defer func() { b.recordTs = rts }()
	return b.st.cleanup(b.targets, b.kgs, b.cleanup.EntriesPerStep)
}

// CleanupSchedule says how the task owning b drives background TTL cleanup:
// active is true once b has a state with TTL and background cleanup
// (StateTtlConfig.DisableCleanupInBackground unset) and cleanup is not
// disabled (TTLCleanupConfig.Disabled); the task then calls b.CleanupStep
// every interval of processing time (TTLCleanupConfig.Interval, default
// DefaultTTLCleanupInterval), each step visiting at most
// TTLCleanupConfig.EntriesPerStep entries (default
// DefaultTTLCleanupEntriesPerStep).
func CleanupSchedule(b KeyedStateBackend) (interval time.Duration, active bool) {
	c := b.core()
	interval = c.cleanup.Interval
	if interval <= 0 {
		interval = DefaultTTLCleanupInterval
	}
	return interval, !c.closed && !c.cleanup.Disabled && len(c.targets) > 0
}

// NotifyCleanup makes fn run once, on the owner's goroutine, when b's
// background cleanup becomes active (see CleanupSchedule): at once when it
// already is, otherwise when the first state with background cleanup is
// obtained from b. A later call replaces an earlier fn that has not run.
// The keyed operators use it to start their cleanup schedule for states a
// function obtains after Open.
func NotifyCleanup(b KeyedStateBackend, fn func()) {
	if _, active := CleanupSchedule(b); active {
		fn()
		return
	}
	b.core().onTarget = fn
}

// keyRef is a serialized key with its key group: what a state handle bound
// to an explicit key (rather than the current key) acts on.
type keyRef struct {
	kg  int
	key []byte
}

// keyRefFor returns a keyRef for a copy of key.
func (b *backend) keyRefFor(key []byte) keyRef {
	return keyRef{kg: keygroup.Assign(key, b.maxP), key: append([]byte(nil), key...)}
}

// SetWatermark implements KeyedStateBackend.
func (b *backend) SetWatermark(wm time.Time) { b.watermark = max(b.watermark, wm.UnixMilli()) }

// SetRecordTimestamp implements KeyedStateBackend.
func (b *backend) SetRecordTimestamp(ts time.Time) {
	if ts.IsZero() {
		b.recordTs = math.MinInt64
		return
	}
	b.recordTs = ts.UnixMilli()
}

// eventMillis returns the event time of TTL in ms since the epoch.
func (b *backend) eventMillis() int64 { return max(b.watermark, b.recordTs) }

// nowMillis returns the clock's time in ms since the epoch.
func (b *backend) nowMillis() int64 { return b.clock.Now().UnixMilli() }

// register returns the state the spec names, creating it with build on first
// use. It refuses a spec that conflicts with the state obtained earlier in
// this session (ErrStateConflict) or with the state's stored metadata
// (*StateMigrationError).
func (b *backend) register(spec descriptorSpec, serType string, build func(c *stateCore) any) (any, error) {
	if b.closed {
		return nil, ErrClosed
	}
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if r, ok := b.states[spec.name]; ok {
		same := r.meta.Kind == spec.kind && r.serType == serType && r.hasTTL == (spec.ttl != nil) &&
			(spec.ttl == nil || r.ttl == *spec.ttl)
		if !same {
			return nil, fmt.Errorf("state: state %q already obtained as %s state with serializer %s (ttl %t), now requested as %s state with serializer %s (ttl %t): %w",
				spec.name, r.meta.Kind, r.serType, r.hasTTL, spec.kind, serType, spec.ttl != nil, ErrStateConflict)
		}
		return r.handle, nil
	}
	meta := stateMeta{Name: spec.name, Kind: spec.kind, TTL: spec.ttl != nil, Serializer: spec.serializer}
	if stored, ok := b.metas[spec.name]; ok {
		if err := checkCompatible(stored, meta); err != nil {
			return nil, err
		}
		meta.ID = stored.ID
	} else {
		meta.ID = StateID(spec.name)
		for _, other := range b.metas {
			if other.ID == meta.ID {
				return nil, fmt.Errorf("state: states %q and %q hash to the same state id %d; rename one", other.Name, spec.name, meta.ID)
			}
		}
		if err := b.st.saveMeta(meta); err != nil {
			return nil, err
		}
		b.metas[spec.name] = meta
	}
	c := &stateCore{b: b, st: b.st, id: meta.ID, name: spec.name, kind: spec.kind, ttl: newTTLPolicy(spec.ttl)}
	r := &registered{meta: meta, serType: serType, hasTTL: spec.ttl != nil, core: c}
	if spec.ttl != nil {
		r.ttl = *spec.ttl
		if c.ttl.background {
			b.targets = append(b.targets, cleanupTarget{id: meta.ID, kind: spec.kind, visit: c.cleanupVisitor()})
		}
	}
	r.handle = build(c)
	b.states[spec.name] = r
	if fn := b.onTarget; fn != nil && len(b.targets) > 0 && !b.cleanup.Disabled {
		b.onTarget = nil
		fn()
	}
	return r.handle, nil
}

// checkCompatible compares a state's stored metadata with the requested one.
func checkCompatible(stored, req stateMeta) error {
	onOff := func(b bool) string {
		if b {
			return "enabled"
		}
		return "disabled"
	}
	switch {
	case stored.TTL != req.TTL:
		return &StateMigrationError{State: req.Name, Property: "ttl", Stored: onOff(stored.TTL), Requested: onOff(req.TTL)}
	case stored.Kind != req.Kind:
		return &StateMigrationError{State: req.Name, Property: "type", Stored: string(stored.Kind), Requested: string(req.Kind)}
	case stored.Serializer != req.Serializer:
		return &StateMigrationError{State: req.Name, Property: "serializer", Stored: stored.Serializer, Requested: req.Serializer}
	}
	return nil
}

// stateCore is what every typed state handle shares: its backend, id and
// TTL policy.
type stateCore struct {
	b    *backend
	st   store
	id   uint32
	name string
	kind stateKind
	ttl  *ttlPolicy // nil: no TTL
}

// stateKey returns the address of this state under the bound key, or the
// backend's current key when bound is nil.
func (c *stateCore) stateKey(bound *keyRef) (stateKey, error) {
	if c.b.closed {
		return stateKey{}, ErrClosed
	}
	if bound != nil {
		if !c.b.kgs.Contains(bound.kg) {
			return stateKey{}, &KeyGroupError{KeyGroup: bound.kg, Range: c.b.kgs}
		}
		return stateKey{id: c.id, kg: bound.kg, key: bound.key}, nil
	}
	if c.b.curKG < 0 {
		return stateKey{}, ErrNoCurrentKey
	}
	if !c.b.kgs.Contains(c.b.curKG) {
		return stateKey{}, &KeyGroupError{KeyGroup: c.b.curKG, Range: c.b.kgs}
	}
	return stateKey{id: c.id, kg: c.b.curKG, key: c.b.curKey}, nil
}

// wrapErr prefixes an error with the state's name.
func (c *stateCore) wrapErr(op string, err error) error {
	return fmt.Errorf("state: %s %q: %w", op, c.name, err)
}
