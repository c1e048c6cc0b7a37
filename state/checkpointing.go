package state

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/kstreamd/kstreamd/state/keygroup"

	"github.com/kstreamd/kstreamd/internal/atomicfile"
)

// SnapshotTarget says where a keyed snapshot writes its files.
type SnapshotTarget struct {
	// Dir is the checkpoint's (or savepoint's) directory; private paths in
	// the handle are relative to it, so a savepoint directory can move.
	Dir string
	// TaskPath is the subtask's directory relative to Dir, e.g. "matcher/0".
	TaskPath string
	// SharedDir, when not empty, makes a Pebble snapshot incremental: SST
	// files go to SharedDir (named by DB instance and file number) and are
	// only uploaded when not already there. Empty: self-contained.
	SharedDir string
	// NoSync writes the Pebble snapshot's files without fsync: Dir and
	// SharedDir are a staging copy that is not the durable one (a cluster
	// unit's, uploaded to the checkpoint store and wiped at the unit's
	// start: runtime.Barrier.Staging). The hashmap backend ignores it.
	NoSync bool
}

// KeyedSnapshot is a written keyed-state snapshot: the handle to restore it
// and what it cost.
type KeyedSnapshot struct {
	// Handle is the JSON description RestoreHandle.Handle takes back.
	Handle json.RawMessage
	// Bytes is the number of bytes written (shared files only referenced
	// not counted).
	Bytes int64
	// SharedFiles are the shared files the snapshot refers to, relative to
	// SnapshotTarget.SharedDir.
	SharedFiles []string
}

// RestoreHandle is one keyed snapshot to restore with OpenBackendRestored.
type RestoreHandle struct {
	// Handle is KeyedSnapshot.Handle as stored in the checkpoint metadata.
	Handle json.RawMessage
	// Dir is the checkpoint or savepoint directory the snapshot was taken
	// into (its private paths are relative to it).
	Dir string
	// SharedDir is the job's shared directory (incremental files).
	SharedDir string
	// RemoteStore, if not nil, holds the objects a disaggregated
	// backend's snapshot refers to as "../remote/<object>" from SharedDir
	// (RemoteConfig.Store, e.g. an S3 store): VerifyRestoreHandle looks
	// them up there instead of on the filesystem. nil: the filesystem.
	RemoteStore remote.Storage
}

// keyedHandle is the JSON shape of a keyed snapshot handle
// (checkpoint/FORMAT.md, "A keyed state handle").
type keyedHandle struct {
	Backend        string         `json:"backend"`
	KeyGroups      keygroup.Range `json:"key_groups"`
	MaxParallelism int            `json:"max_parallelism"`
	Files          []fileRef      `json:"files"`
	// Remote marks a snapshot of a disaggregated Pebble backend: its files
	// are remote objects with their LSM level and key bounds, restored by
	// reference (remote_snapshot.go).
	Remote bool `json:"remote,omitempty"`
	// Deltas are the delta objects of a delta checkpoint of a
	// disaggregated backend (remote_delta.go), oldest first: a restore
	// applies them, each once, after ingesting Files (the tables of the
	// chain's base checkpoint). Empty for a base checkpoint and for every
	// snapshot written before delta checkpoints. In JSON they are not a
	// field of their own: MarshalJSON lists them at the end of "files",
	// each with "delta": true and bounds over the whole key space, so that
	// a binary from before delta checkpoints (which would ignore an
	// unknown field and restore the base without the changes) ingests the
	// delta object as a table and refuses the restore when it reads the
	// state's format record from it ("pebble/table: invalid table"; see
	// REMOTE.md, "Downgrade").
	Deltas []fileRef `json:"-"`
}

// deltaEnd is the inclusive upper bound a delta object's entry in
// "files" gets: above every key (key groups and metadata space), so an
// older binary's clip keeps it in both its data and its metadata
// ingestion.
var deltaEnd = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// keyedHandleJSON is keyedHandle without its JSON methods.
type keyedHandleJSON keyedHandle

// MarshalJSON writes h with its Deltas appended to "files" (oldest
// first), each marked "delta": true, at level 0 with the largest
// sequence number and bounds over every key: an older binary restores
// every entry of "files" as a table by reference and so fails on a delta
// object instead of silently restoring without it.
func (h keyedHandle) MarshalJSON() ([]byte, error) {
	j := keyedHandleJSON(h)
	if len(h.Deltas) > 0 {
		j.Files = slices.Clone(h.Files)
		for _, d := range h.Deltas {
			d.Delta = true
			d.remoteTable = remoteTable{Level: 0, Seq: 1<<56 - 1, End: deltaEnd, EndInclusive: true, RefBytes: uint64(max(d.Size, 1))}
			j.Files = append(j.Files, d)
		}
		j.Deltas = nil
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads a handle written by MarshalJSON (or before delta
// checkpoints): the entries of "files" marked "delta" become Deltas, in
// order, without the bounds MarshalJSON gave them.
func (h *keyedHandle) UnmarshalJSON(b []byte) error {
	var j keyedHandleJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	files := j.Files[:0:0]
	for _, f := range j.Files {
		if f.Delta {
			f.Delta, f.remoteTable = false, remoteTable{}
			j.Deltas = append(j.Deltas, f)
			continue
		}
		files = append(files, f)
	}
	if len(j.Deltas) > 0 {
		j.Files = files
	}
	*h = keyedHandle(j)
	return nil
}

// fileRef is one file of a snapshot.
type fileRef struct {
	// Name is the file's name inside the Pebble directory (or
	// SnapshotFileName for the hashmap backend).
	Name string `json:"name"`
	// Path is relative to the checkpoint directory, or to the shared
	// directory when Shared.
	Path   string `json:"path"`
	Shared bool   `json:"shared,omitempty"`
	Size   int64  `json:"size"`
	// Delta marks, in a handle's JSON only, an entry of "files" that is a
	// delta object of a delta checkpoint (keyedHandle.MarshalJSON).
	Delta bool `json:"delta,omitempty"`
	// The fields below describe a table of a remote snapshot (the table
	// may be virtual: a part of the object within its bounds).
	remoteTable
}

// SnapshotKeyed takes a snapshot of b for a checkpoint, in two parts as
// Flink's snapshot strategies do. The synchronous part runs now on the
// owner's goroutine and freezes a consistent view: the Pebble backend
// flushes its memtable and makes a Pebble checkpoint (hard links) in a
// staging directory beside its own; the hashmap backend copies its tables
// in memory (the maps, sharing the immutable stored bytes; see
// snapshotCopy). The returned function, safe to run on another goroutine
// while the owner goes on, writes the frozen state into the target (Pebble:
// copies the files; hashmap: writes its full snapshot file, the format of
// Snapshot) and returns the handle. Errors from either part fail only this
// checkpoint.
func SnapshotKeyed(b KeyedStateBackend, t SnapshotTarget) (func(context.Context) (KeyedSnapshot, error), error) {
	taskDir := filepath.Join(t.Dir, t.TaskPath)
	if err := os.MkdirAll(taskDir, 0o755); err != nil {
		return nil, fmt.Errorf("state: snapshot: %w", err)
	}
	switch sb := b.(type) {
	case *pebbleBackend:
		if sb.st.remote != nil {
			return sb.snapshotRemote(t, taskDir)
		}
		return sb.snapshot(t)
	case *hashmapBackend:
		return sb.snapshotAsync(t, taskDir)
	}
	return nil, fmt.Errorf("state: snapshot: backend %T cannot be checkpointed", b)
}

func (p *pebbleBackend) snapshot(t SnapshotTarget) (func(context.Context) (KeyedSnapshot, error), error) {
	if p.closed {
		return nil, ErrClosed
	}
	if p.instanceID == "" {
		var id [8]byte
		if _, err := rand.Read(id[:]); err != nil {
			return nil, err
		}
		p.instanceID = hex.EncodeToString(id[:])
	}
	if err := p.st.flushCache(); err != nil {
		return nil, fmt.Errorf("state: snapshot: %w", err)
	}
	if err := p.st.db.Flush(); err != nil {
		return nil, fmt.Errorf("state: snapshot: flush: %w", err)
	}
	staging, err := os.MkdirTemp(filepath.Dir(p.st.dir), filepath.Base(p.st.dir)+".snapshot-")
	if err != nil {
		return nil, fmt.Errorf("state: snapshot: %w", err)
	}
	stagingDB := filepath.Join(staging, "db")
	if err := p.st.db.Checkpoint(stagingDB, pebble.WithFlushedWAL()); err != nil {
		os.RemoveAll(staging)
		return nil, fmt.Errorf("state: snapshot: pebble checkpoint: %w", err)
	}
	h := keyedHandle{Backend: KindPebble, KeyGroups: p.kgs, MaxParallelism: p.maxP}
	instance := p.instanceID
	return func(ctx context.Context) (KeyedSnapshot, error) {
		defer os.RemoveAll(staging)
		ents, err := os.ReadDir(stagingDB)
		if err != nil {
			return KeyedSnapshot{}, err
		}
		var snap KeyedSnapshot
		// Each file is fsynced as it is copied, its directory once after
		// the last copy into it (before the finisher returns, so before
		// any _metadata names the files): one directory fsync per
		// directory and checkpoint instead of one per file. The shared
		// directory is synced whenever the snapshot names a shared file.
		var written []string
		for _, e := range ents {
			if err := ctx.Err(); err != nil {
				return KeyedSnapshot{}, err
			}
			// WAL files hold nothing the SSTs do not: the memtable was
			// flushed right before the Pebble checkpoint, on the only
			// goroutine that writes. Pebble recycles WAL files, so a
			// fresh WAL still has the size of an old one (a memtable's
			// worth of dead bytes); copying it would make every
			// incremental checkpoint megabytes large.
			if e.IsDir() || strings.HasSuffix(e.Name(), ".log") {
				continue
			}
			src := filepath.Join(stagingDB, e.Name())
			st, err := os.Stat(src)
			if err != nil {
				return KeyedSnapshot{}, err
			}
			ref := fileRef{Name: e.Name(), Size: st.Size()}
			if t.SharedDir != "" && strings.HasSuffix(e.Name(), ".sst") {
				ref.Shared, ref.Path = true, instance+"-"+e.Name()
				dst := filepath.Join(t.SharedDir, ref.Path)
				if have, err := os.Stat(dst); err != nil || have.Size() != st.Size() {
					if err := placeSnapshotFile(src, dst, t.NoSync); err != nil {
						return KeyedSnapshot{}, err
					}
					snap.Bytes += st.Size()
				}
				// Synced even when the file was there already: another
				// snapshot of this backend (a timed-out checkpoint's
				// finisher) may have copied it without having synced
				// the directory yet.
				written = appendDir(written, filepath.Dir(dst))
				snap.SharedFiles = append(snap.SharedFiles, ref.Path)
			} else {
				ref.Path = filepath.ToSlash(filepath.Join(t.TaskPath, e.Name()))
				dst := filepath.Join(t.Dir, ref.Path)
				if err := placeSnapshotFile(src, dst, t.NoSync); err != nil {
					return KeyedSnapshot{}, err
				}
				written = appendDir(written, filepath.Dir(dst))
				snap.Bytes += st.Size()
			}
			h.Files = append(h.Files, ref)
		}
		if !t.NoSync {
			for _, dir := range written {
				if err := syncSnapshotDir(dir); err != nil {
					return KeyedSnapshot{}, fmt.Errorf("state: snapshot: sync %s: %w", dir, err)
				}
			}
		}
		if snap.Handle, err = json.Marshal(h); err != nil {
			return KeyedSnapshot{}, err
		}
		return snap, nil
	}, nil
}

// OpenBackendRestored opens the backend cfg describes with the state of the
// given snapshots, keeping only the key groups of cfg.KeyGroupRange (Flink's
// restore with key-group redistribution). With no handles it is
// OpenBackend. For Pebble, a single snapshot of exactly the subtask's range
// is materialized as the DB (SST files hard-linked where possible); otherwise
// the first overlapping snapshot becomes the DB with the key groups outside
// the range deleted, and the entries of the others in the range are copied
// in. State ids derive from state names (StateID), so snapshots of
// different subtasks merge without renumbering. It returns an error
// wrapping ErrMaxParallelismChanged when a snapshot has another max
// parallelism, and ErrCorrupt when a handle cannot be decoded.
func OpenBackendRestored(cfg BackendConfig, handles []RestoreHandle) (KeyedStateBackend, error) {
	if len(handles) == 0 {
		return OpenBackend(cfg)
	}
	hs := make([]keyedHandle, len(handles))
	for i, rh := range handles {
		if err := json.Unmarshal(rh.Handle, &hs[i]); err != nil {
			return nil, fmt.Errorf("state: restore handle %d: %v: %w", i, err, ErrCorrupt)
		}
		if hs[i].MaxParallelism != cfg.MaxParallelism {
			return nil, fmt.Errorf("state: checkpoint was taken with max parallelism %d, the job now has %d: %w", hs[i].MaxParallelism, cfg.MaxParallelism, ErrMaxParallelismChanged)
		}
		if hs[i].Backend != cfg.Kind {
			return nil, fmt.Errorf("state: checkpoint holds %s state, the job now uses the %s backend (switching backends needs a savepoint of the other kind, not supported yet)", hs[i].Backend, cfg.Kind)
		}
	}
	if cfg.Kind == KindHashmap {
		return openHashmapRestored(cfg, handles, hs)
	}
	if cfg.Remote != nil {
		return openRemoteRestored(cfg, handles, hs)
	}
	for _, h := range hs {
		if h.Remote {
			return openLocalFromRemote(cfg, handles, hs)
		}
	}
	if err := os.RemoveAll(cfg.Dir); err != nil {
		return nil, err
	}
	prog := newRestoreProgress(cfg, hs)
	if err := materialize(handles[0], hs[0], cfg.Dir, prog); err != nil {
		return nil, err
	}
	if len(handles) > 1 || hs[0].KeyGroups != cfg.KeyGroupRange {
		if err := rescalePebble(cfg, handles, hs, prog); err != nil {
			return nil, err
		}
	}
	prog.finish()
	return OpenBackend(cfg)
}

// restoreProgress logs the progress of a Pebble restore: at most one
// "restoring keyed state" line per interval with the bytes of snapshot
// files materialized so far and in all (every handle's files: a rescaled
// restore materializes each snapshot it reads), and one "keyed state
// materialized" line at the end when any progress line was logged. Only
// the restoring goroutine uses it.
type restoreProgress struct {
	logger                *slog.Logger
	interval              time.Duration
	start, last           time.Time
	done, total           int64
	filesDone, filesTotal int
	logged                bool
}

func newRestoreProgress(cfg BackendConfig, hs []keyedHandle) *restoreProgress {
	p := &restoreProgress{logger: cfg.Logger, interval: cfg.RestoreProgressInterval, start: time.Now()}
	if p.logger == nil {
		p.logger = slog.New(slog.DiscardHandler)
	}
	if p.interval <= 0 {
		p.interval = DefaultRestoreProgressInterval
	}
	p.last = p.start
	for _, h := range hs {
		for _, f := range h.Files {
			p.total += f.Size
			p.filesTotal++
		}
	}
	return p
}

// file records one more file of size bytes materialized.
func (p *restoreProgress) file(size int64) {
	p.done += size
	p.filesDone++
	if now := time.Now(); now.Sub(p.last) >= p.interval {
		p.last, p.logged = now, true
		p.logger.Info("restoring keyed state", "bytes_done", p.done, "bytes_total", p.total,
			"files_done", p.filesDone, "files_total", p.filesTotal, "elapsed", now.Sub(p.start).Round(time.Millisecond))
	}
}

func (p *restoreProgress) finish() {
	if p.logged {
		p.logger.Info("keyed state materialized", "bytes_total", p.total, "files_total", p.filesTotal,
			"elapsed", time.Since(p.start).Round(time.Millisecond))
	}
}

// materialize lays the files of a Pebble snapshot out as a DB directory,
// reporting each file to prog.
func materialize(rh RestoreHandle, h keyedHandle, dir string, prog *restoreProgress) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range h.Files {
		src := filepath.Join(rh.Dir, filepath.FromSlash(f.Path))
		if f.Shared {
			src = filepath.Join(rh.SharedDir, filepath.FromSlash(f.Path))
		}
		dst := filepath.Join(dir, f.Name)
		// SSTs are immutable: a hard link is safe. Everything else is copied.
		if strings.HasSuffix(f.Name, ".sst") && os.Link(src, dst) == nil {
			prog.file(f.Size)
			continue
		}
		if err := copyFileAtomic(src, dst); err != nil {
			return fmt.Errorf("state: restore %s: %w", f.Path, err)
		}
		prog.file(f.Size)
	}
	return nil
}

// kgBound returns the first key of key group kg (kg == maxP bounds the
// key-group space).
func kgBound(kg int) []byte { return binary.BigEndian.AppendUint16(nil, uint16(kg)) }

// rescalePebble turns the materialized first snapshot in cfg.Dir into the
// subtask's DB: it deletes the key groups outside the range and copies in
// the range's entries of the other snapshots, with their metadata.
func rescalePebble(cfg BackendConfig, handles []RestoreHandle, hs []keyedHandle, prog *restoreProgress) error {
	db, err := pebble.Open(cfg.Dir, rawPebbleOptions(cfg, false))
	if err != nil {
		return fmt.Errorf("state: restore: open %s: %w", cfg.Dir, err)
	}
	r := cfg.KeyGroupRange
	lo, hi := kgBound(r.Start), kgBound(r.End+1)
	if r.Start > 0 {
		err = db.DeleteRange(keyGroupsStart, lo, pebble.NoSync)
	}
	if err == nil {
		err = db.DeleteRange(hi, keyGroupsEnd, pebble.NoSync)
	}
	for i := 1; i < len(handles) && err == nil; i++ {
		err = copyRange(db, handles[i], hs[i], cfg, lo, hi, prog)
	}
	if err == nil {
		err = db.Flush()
	}
	return errors.Join(err, db.Close())
}

// rawPebbleOptions are the options of the DBs a restore opens directly.
func rawPebbleOptions(cfg BackendConfig, readOnly bool) *pebble.Options {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &pebble.Options{Merger: listMerger, FormatMajorVersion: pebble.FormatNewest, ReadOnly: readOnly,
		Logger: pebbleLogger{logger.With("subsystem", "pebble-restore")}}
}

// copyRange copies the metadata and the entries in [lo, hi) of one snapshot
// into db.
func copyRange(db *pebble.DB, rh RestoreHandle, h keyedHandle, cfg BackendConfig, lo, hi []byte, prog *restoreProgress) error {
	tmp, err := os.MkdirTemp(filepath.Dir(cfg.Dir), filepath.Base(cfg.Dir)+".restore-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := materialize(rh, h, tmp, prog); err != nil {
		return err
	}
	src, err := pebble.Open(tmp, rawPebbleOptions(cfg, true))
	if err != nil {
		return fmt.Errorf("state: restore: open snapshot %s: %w", tmp, err)
	}
	defer src.Close()
	if err := copySpan(src, db, lo, hi); err != nil {
		return err
	}
	// Metadata: states only the other snapshot registered.
	return copySpan(src, db, metaStatePfx, prefixEnd(metaStatePfx))
}

func openHashmapRestored(cfg BackendConfig, handles []RestoreHandle, hs []keyedHandle) (KeyedStateBackend, error) {
	cfg.RestoreDir = ""
	st, err := openHashmapStore(cfg)
	if err != nil {
		return nil, err
	}
	for i, h := range hs {
		for _, f := range h.Files {
			if f.Name != SnapshotFileName {
				continue
			}
			dir := filepath.Dir(filepath.Join(handles[i].Dir, filepath.FromSlash(f.Path)))
			if err := st.restore(dir); err != nil {
				return nil, err
			}
		}
	}
	// Every snapshot carries the metadata records of its states; keep one
	// per state, or each restore from several snapshots would multiply them
	// (and every later snapshot would write the copies back).
	seen := map[string]bool{}
	metas := st.metas[:0]
	for _, m := range st.metas {
		if !seen[m.Name] {
			seen[m.Name] = true
			metas = append(metas, m)
		}
	}
	st.metas = metas
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	b, err := newBackend(cfg, st, logger.With("component", "state", "backend", cfg.Kind, "key_groups", cfg.KeyGroupRange.String()))
	if err != nil {
		return nil, err
	}
	return &hashmapBackend{backend: b, st: st}, nil
}

// ApplyToAllKeys calls fn once for every key that has state under d in the
// backend, with the backend's current key set to it and s acting on it
// (Flink's KeyedStateBackend.applyToAllKeys, which
// KeyedBroadcastProcessFunction's applyToKeyedState uses). fn may change or
// clear the state of its key. The keys are collected first, so fn's writes
// do not disturb the walk. The current key is restored afterwards.
func ApplyToAllKeys[K, V any](b KeyedStateBackend, d MapStateDescriptor[K, V], fn func(key []byte, s MapState[K, V]) error) error {
	s, err := GetMapState(b, d)
	if err != nil {
		return err
	}
	return applyToKeys(b, d.Name, func(k []byte) error { return fn(k, s) })
}

// ApplyToAllValueKeys is ApplyToAllKeys for a ValueState: fn is called once
// for every key with a value under d, with the current key set to it and s
// acting on it.
func ApplyToAllValueKeys[T any](b KeyedStateBackend, d ValueStateDescriptor[T], fn func(key []byte, s ValueState[T]) error) error {
	s, err := GetValueState(b, d)
	if err != nil {
		return err
	}
	return applyToKeys(b, d.Name, func(k []byte) error { return fn(k, s) })
}

// HasState reports whether b holds state registered under name: restored
// with a snapshot or registered in this session, empty or not. An operator
// that changed its state layout asks it to find state of the old layout to
// migrate without registering the old name.
func HasState(b KeyedStateBackend, name string) bool {
	if b == nil {
		return false
	}
	_, ok := b.core().metas[name]
	return ok
}

// applyToKeys calls fn for every key with state under the state called
// name, with the current key set to it; see ApplyToAllKeys.
func applyToKeys(b KeyedStateBackend, name string, fn func(key []byte) error) error {
	keys, err := keysOf(b, StateID(name))
	if err != nil {
		return err
	}
	prev := append([]byte(nil), b.CurrentKey()...)
	hadKey := b.CurrentKeyGroup() >= 0
	defer func() {
		if hadKey {
			b.SetCurrentKey(prev)
		}
	}()
	for _, k := range keys {
		b.SetCurrentKey(k)
		if err := fn(k); err != nil {
			return err
		}
	}
	return nil
}

// keysOf returns the distinct serialized keys with state under id.
func keysOf(b KeyedStateBackend, id uint32) ([][]byte, error) {
	var out [][]byte
	switch sb := b.(type) {
	case *pebbleBackend:
		if err := sb.st.flushCache(); err != nil {
			return nil, err
		}
		r := sb.kgs
		for kg := r.Start; kg <= r.End; kg++ {
			pfx := appendGroupPrefix(nil, kg, id)
			it, err := sb.st.db.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
			if err != nil {
				return nil, err
			}
			var last []byte
			for it.First(); it.Valid(); it.Next() {
				k, _, err := parseStateKey(it.Key())
				if err != nil {
					it.Close()
					return nil, err
				}
				if last == nil || string(k.key) != string(last) {
					last = append([]byte(nil), k.key...)
					out = append(out, last)
				}
			}
			if err := it.Close(); err != nil {
				return nil, err
			}
		}
	case *hashmapBackend:
		for _, g := range sb.st.tables[id] {
			for k := range g.values {
				out = append(out, []byte(k))
			}
			for k := range g.maps {
				out = append(out, []byte(k))
			}
		}
	default:
		return nil, fmt.Errorf("state: backend %T cannot list its keys", b)
	}
	return out, nil
}

// StateID is the id of the state called name in the key layout: the low 32
// bits of keygroup.Hash(name). Deriving it from the name (rather than from
// registration order) lets snapshots of different subtasks merge on
// rescale; two names of one backend with the same id are refused at
// registration.
func StateID(name string) uint32 { return uint32(keygroup.Hash([]byte(name))) }

// VerifyRestoreHandle checks, without opening anything, that every file
// the keyed snapshot rh describes is where a restore looks for it (private
// files under rh.Dir, shared ones under rh.SharedDir) with the size the
// handle recorded. It returns one line per problem (a missing file, a
// file of another size: truncated or replaced), nil when there is none,
// and a single problem when the handle cannot be decoded. A file it cannot
// look at (os.Stat failing other than with fs.ErrNotExist: an I/O error,
// a permission, a stale network mount) is no verdict on the checkpoint:
// it is returned as the error (wrapping the stat's), and may pass on a
// retry.
func VerifyRestoreHandle(rh RestoreHandle) ([]string, error) {
	var h keyedHandle
	if err := json.Unmarshal(rh.Handle, &h); err != nil {
		return []string{fmt.Sprintf("keyed state handle cannot be decoded: %v", err)}, nil
	}
	if len(h.Files) == 0 {
		return []string{"keyed state handle lists no file"}, nil
	}
	var out []string
	for _, f := range append(slices.Clip(h.Files), h.Deltas...) { // a delta checkpoint's delta objects as well
		if obj, ok := remoteObjectOf(rh, h, f); ok {
			size, err := rh.RemoteStore.Size(obj)
			switch {
			case err != nil && rh.RemoteStore.IsNotExistError(err):
				out = append(out, fmt.Sprintf("keyed state shared file %s is missing from the remote store (%v)", f.Path, err))
			case err != nil:
				return nil, fmt.Errorf("state: keyed state shared file %s cannot be read: %w", f.Path, err)
			case size != f.Size:
				out = append(out, fmt.Sprintf("keyed state shared file %s has %d bytes on the remote store, the checkpoint recorded %d", f.Path, size, f.Size))
			}
			continue
		}
		where, kind := filepath.Join(rh.Dir, filepath.FromSlash(f.Path)), "file"
		if f.Shared {
			where, kind = filepath.Join(rh.SharedDir, filepath.FromSlash(f.Path)), "shared file"
		}
		st, err := os.Stat(where)
		switch {
		case errors.Is(err, os.ErrNotExist):
			out = append(out, fmt.Sprintf("keyed state %s %s is missing (%s)", kind, f.Path, where))
		case err != nil:
			return nil, fmt.Errorf("state: keyed state %s %s cannot be read: %w", kind, f.Path, err)
		case st.IsDir():
			out = append(out, fmt.Sprintf("keyed state %s %s is a directory (%s)", kind, f.Path, where))
		case st.Size() != f.Size:
			out = append(out, fmt.Sprintf("keyed state %s %s has %d bytes, the checkpoint recorded %d (truncated or replaced; %s)", kind, f.Path, st.Size(), f.Size, where))
		}
	}
	return out, nil
}

// copyFileAtomic copies src to dst (mode 0644, creating dst's directory) with
// atomicfile.CopyFile, so dst is either absent or complete and durable. The
// temporary name is unique: two snapshots of one backend may upload the
// same shared file at once (the finisher of a timed-out checkpoint still
// runs when the next one starts), and a shared temporary name would let
// one truncate the other's copy and fail its rename.
func copyFileAtomic(src, dst string) error { return copySnapshotFile(src, dst, false) }

// copySnapshotFile is copyFileAtomic, without its fsyncs when noSync
// (SnapshotTarget.NoSync): dst is still complete or absent to readers.
func copySnapshotFile(src, dst string, noSync bool) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return atomicfile.CopyFile(src, dst, atomicfile.Options{Perm: 0o644, NoSync: noSync})
}

// copySnapshotFileNoDirSync is copySnapshotFile without the fsync of dst's
// directory (the file itself is fsynced unless noSync): the caller fsyncs
// the directory once after its last copy into it (syncSnapshotDir), before
// anything names the files.
func copySnapshotFileNoDirSync(src, dst string, noSync bool) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return atomicfile.CopyFile(src, dst, atomicfile.Options{Perm: 0o644, NoSync: noSync, NoDirSync: true})
}

// placeSnapshotFile puts src, a file of a Pebble snapshot's own staging
// checkpoint (which the snapshot's finisher deletes when it returns), at
// dst without a directory fsync (the caller syncs the directory once,
// syncSnapshotDir). With noSync (SnapshotTarget.NoSync: a cluster unit's
// staging copy, neither fsynced nor the durable copy) it renames src to
// dst instead of copying its bytes: an SST in the staging checkpoint is a
// hard link to the DB's own file, which Pebble never writes into again
// (it only unlinks it once compacted), so dst shares that immutable file
// as the staging checkpoint did; any other file there (MANIFEST, OPTIONS,
// markers) is the staging checkpoint's own copy. The rename is atomic, so
// dst is complete or absent to readers as with the copy, and it replaces
// a dst of the same name (the same shared SST, which the caller copies
// only when its size differs). When the rename fails (dst on another
// filesystem), or without noSync (a durable checkpoint copies and fsyncs
// its own bytes), it copies with copySnapshotFileNoDirSync.
func placeSnapshotFile(src, dst string, noSync bool) error {
	if noSync {
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if os.Rename(src, dst) == nil {
			return nil
		}
	}
	return copySnapshotFileNoDirSync(src, dst, noSync)
}

// syncSnapshotDir fsyncs a directory a Pebble snapshot copied files into
// (atomicfile.SyncDir; tests replace it to count and order the fsyncs).
var syncSnapshotDir = atomicfile.SyncDir

// appendDir appends dir to dirs unless it is there already (a snapshot
// writes into at most two directories: the shared one and its task's).
func appendDir(dirs []string, dir string) []string {
	for _, d := range dirs {
		if d == dir {
			return dirs
		}
	}
	return append(dirs, dir)
}
