package state

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// remoteTable is what a remote snapshot records of one table besides its
// object: where it was in the LSM and the part of the object it covers.
type remoteTable struct {
	// Level is the table's LSM level (0-6).
	Level int `json:"level,omitempty"`
	// Seq is the table's largest sequence number: L0 tables are restored
	// oldest first.
	Seq uint64 `json:"seq,omitempty"`
	// Start and End bound the table's keys; End is exclusive unless
	// EndInclusive.
	Start        []byte `json:"start,omitempty"`
	End          []byte `json:"end,omitempty"`
	EndInclusive bool   `json:"end_inclusive,omitempty"`
	// RefBytes is the table's size (of a virtual table: an estimate of
	// the bytes of the object it covers).
	RefBytes uint64 `json:"ref_bytes,omitempty"`
}

// openRemoteDir prepares the local directory of a disaggregated DB and
// sets opts' shared-storage options. Every instance gets a fresh
// directory of its own, cfg.Dir/i-<creator id>: an instance of the same
// subtask still closing (which deletes its directory) never touches the
// new one. Directories of earlier instances whose Pebble LOCK is free
// (closed uncleanly, or crashed) are deleted: their state comes back from
// a checkpoint, and their tables may be gone from the store.
func openRemoteDir(cfg BackendConfig, opts *pebble.Options) (*remoteObjects, string, error) {
	ro, err := newRemoteObjects(cfg.Remote)
	if err != nil {
		return nil, "", err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("state: open remote pebble in %s: %w", cfg.Dir, err)
	}
	if err := releaseDeadInstances(cfg.Dir, ro.st, true); err != nil {
		return nil, "", fmt.Errorf("state: open remote pebble in %s: %w", cfg.Dir, err)
	}
	remotePebbleOptions(opts, cfg.Remote, ro)
	return ro, filepath.Join(cfg.Dir, remoteInstancePrefix+strconv.FormatUint(ro.creator, 16)), nil
}

// ReleaseDeadRemoteInstances releases the store markers of every dead
// disaggregated backend instance under root (a job's local state
// directory, searched at any depth): an instance directory (i-<creator
// id>) whose Pebble LOCK is free belongs to an instance that was killed
// (kill -9) or closed without releasing, and its markers on st would keep
// its objects for good. Call it before deleting the state directory at a
// restart. Live instances (LOCK held, in this process or another) are
// left alone.
func ReleaseDeadRemoteInstances(root string, st remote.Storage) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), remoteInstancePrefix) && p != root {
			dirs = append(dirs, filepath.Dir(p))
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("state: release dead remote instances under %s: %w", root, err)
	}
	slices.Sort(dirs)
	var errs []error
	for _, d := range slices.Compact(dirs) {
		errs = append(errs, releaseDeadInstances(d, st, false))
	}
	return errors.Join(errs...)
}

// releaseDeadInstances releases the markers of the dead instances whose
// directories are in dir (see ReleaseDeadRemoteInstances), and deletes
// the directories when remove is set.
func releaseDeadInstances(dir string, st remote.Storage, remove bool) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), remoteInstancePrefix) {
			continue
		}
		old := filepath.Join(dir, e.Name())
		lock, err := vfs.Default.Lock(filepath.Join(old, "LOCK"))
		if err != nil {
			continue // open in this process or another
		}
		// The instance is gone (Pebble's LOCK, an flock, is free): its
		// markers on the store are released, as its Close would have, so
		// retention can collect what only it referenced.
		if creator, err := strconv.ParseUint(strings.TrimPrefix(e.Name(), remoteInstancePrefix), 16, 64); err == nil {
			if err := releaseDeadMarkers(st, creator); err != nil {
				_ = lock.Close()
				return err
			}
		}
		_ = lock.Close()
		if remove {
			_ = os.RemoveAll(old)
		}
	}
	return nil
}

// releaseDeadMarkers deletes every reference marker of the instance with
// creator id creator from st ("<object>.ref.<creator>.<suffix>"): an
// instance whose local directory was found with its LOCK free, so dead
// (killed, or closed without releasing). Its objects then stay only while
// a retained checkpoint refers to them or another instance holds them.
func releaseDeadMarkers(st remote.Storage, creator uint64) error {
	names, err := st.List("", "")
	if err != nil {
		return fmt.Errorf("state: remote store: list: %w", err)
	}
	tag := refInfix + strconv.FormatUint(creator, 10) + "."
	var dead []string
	for _, n := range names {
		if strings.Contains(n, tag) {
			dead = append(dead, n)
		}
	}
	return deleteObjects(st, dead)
}

// remoteInstancePrefix starts the names of the per-instance directories of
// a disaggregated backend inside BackendConfig.Dir.
const remoteInstancePrefix = "i-"

// closeRemote releases the instance's references on the store and
// deletes its local directory, after the DB closed.
func (s *pebbleStore) closeRemote() error {
	return errors.Join(s.remote.release(), os.RemoveAll(s.dir))
}

// snapshotRemote is SnapshotKeyed for a disaggregated backend. The
// synchronous part of a base checkpoint flushes the memtable (a new table
// on the store, the only data it writes) and lists the DB's tables with
// their levels and bounds (one consistent LSM version); that of a delta
// checkpoint (remote_delta.go) does not flush: it names the base's tables
// and cuts the log of commits since the last checkpoint into a new delta
// object, which the asynchronous part writes. Either holds its objects
// until the next snapshot. The asynchronous part writes nothing for a checkpoint
// (SharedDir set): the handle refers to the objects in the store, as
// "<rel>/<object>" relative to SharedDir, and they are the snapshot's
// SharedFiles. A savepoint (no SharedDir) is self-contained: the objects
// are copied into the task directory.
func (p *pebbleBackend) snapshotRemote(t SnapshotTarget, taskDir string) (func(context.Context) (KeyedSnapshot, error), error) {
	if p.closed {
		return nil, ErrClosed
	}
	r, d := p.st.remote, p.st.delta
	// A checkpoint captures the write cache's dirty entries in a batch
	// without committing it: a delta checkpoint puts the batch in its
	// delta and commits it to Pebble after the synchronous part
	// (commitLater); a base commits it before flushing. A savepoint
	// flushes the cache as before.
	var captured *pebble.Batch
	if err := p.st.settle(); err != nil {
		return nil, fmt.Errorf("state: snapshot: %w", err)
	}
	// held is pending from before the capture until the captured entries
	// are in Pebble or bound for it (commitLater): a read on another
	// goroutine (asynchronous state) between the capture, which marks
	// the entries clean, and the commit would otherwise read Pebble
	// without them. This goroutine calls no settle until it is released.
	var held *pendingCommit
	if t.SharedDir != "" && p.st.cache != nil {
		// Stored under the cache's lock: a goroutine holding it (a flush
		// or an eviction on a read goroutine) settles before the store.
		held = &pendingCommit{done: make(chan struct{})}
		c := p.st.cache
		c.mu.Lock()
		p.st.pending.Store(held)
		var err error
		captured, err = c.captureLocked(p.st.db)
		c.mu.Unlock()
		if err != nil {
			p.st.release(held, nil) // nothing was marked clean
			return nil, fmt.Errorf("state: snapshot: %w", err)
		}
	} else if err := p.st.flushCache(); err != nil {
		return nil, fmt.Errorf("state: snapshot: %w", err)
	}
	h := keyedHandle{Backend: KindPebble, KeyGroups: p.kgs, MaxParallelism: p.maxP, Remote: true}
	r.mu.Lock()
	prevHeld := map[string]bool{}
	for _, n := range r.holding {
		prevHeld[n] = true
	}
	r.mu.Unlock()
	var cut deltaCut
	var err error
	if t.SharedDir == "" {
		// A savepoint is a full listing; its hold replaces the chain's,
		// so the next checkpoint is a base.
		d.mu.Lock()
		cut.files, cut.names, err = p.listRemoteTables()
		d.needBase = true
		d.mu.Unlock()
	} else {
		cut, err = d.cutDelta(r.creator, captured, p.listRemoteTables)
		switch {
		case cut.commitLater:
			p.st.commitLater(held, captured)
		case captured != nil:
			if cut.lost {
				p.st.release(held, err)
			} else {
				p.st.release(held, nil)
			}
			_ = captured.Close()
		case held != nil:
			p.st.release(held, nil)
		}
	}
	if err != nil {
		return nil, err
	}
	h.Files = slices.Clone(cut.files)
	names := slices.Clone(cut.names)
	for _, o := range cut.chain {
		h.Deltas = append(h.Deltas, fileRef{Name: o.name})
		names = append(names, o.name)
	}
	if o := cut.created; o != nil {
		// The new delta object's marker is this instance's from now (it
		// is written before the object in the asynchronous part), and it
		// is deleted when no snapshot holds the object any more.
		m := r.ownMarker(o.name)
		r.mu.Lock()
		r.markers[m] = true
		r.deferred[o.name] = append(r.deferred[o.name], m)
		r.mu.Unlock()
	}
	if err := r.hold(names); err != nil {
		return nil, err
	}
	rel := ""
	if t.SharedDir != "" {
		if rel, err = filepath.Rel(t.SharedDir, r.dir); err != nil {
			return nil, fmt.Errorf("state: snapshot: remote store %s relative to %s: %w", r.dir, t.SharedDir, err)
		}
		rel = filepath.ToSlash(rel)
	}
	return func(ctx context.Context) (KeyedSnapshot, error) {
		if o := cut.created; o != nil {
			if err := r.writeDelta(o); err != nil {
				return KeyedSnapshot{}, err
			}
		}
		var snap KeyedSnapshot
		sizes := map[string]int64{}
		refs := make([]*fileRef, 0, len(h.Files)+len(h.Deltas))
		for i := range h.Files {
			refs = append(refs, &h.Files[i])
		}
		for i := range h.Deltas {
			refs = append(refs, &h.Deltas[i])
		}
		for _, f := range refs {
			if err := ctx.Err(); err != nil {
				return KeyedSnapshot{}, err
			}
			size, ok := sizes[f.Name]
			if !ok {
				var err error
				if size, err = r.objectSize(f.Name); err != nil {
					return KeyedSnapshot{}, fmt.Errorf("state: snapshot: remote object %s: %w", f.Name, err)
				}
				sizes[f.Name] = size
				if t.SharedDir != "" && !prevHeld[f.Name] {
					snap.Bytes += size // new since the last snapshot (the flushed memtable, compaction output, a delta)
				}
			}
			f.Size = size
			if t.SharedDir == "" {
				f.Path = filepath.ToSlash(filepath.Join(t.TaskPath, f.Name))
				if !ok {
					if err := downloadObject(r.st, f.Name, filepath.Join(t.Dir, f.Path)); err != nil {
						return KeyedSnapshot{}, err
					}
					snap.Bytes += size
				}
				continue
			}
			f.Shared, f.Path = true, rel+"/"+f.Name
			if !ok {
				snap.SharedFiles = append(snap.SharedFiles, f.Path)
			}
		}
		var err error
		if snap.Handle, err = json.Marshal(h); err != nil {
			return KeyedSnapshot{}, err
		}
		return snap, nil
	}, nil
}

// listRemoteTables flushes the memtable and lists the DB's tables with
// their levels and bounds (one LSM version): the files of a base
// checkpoint and their objects. The caller holds the delta log's lock, so
// no commit falls between the flush and the listing.
func (p *pebbleBackend) listRemoteTables() ([]fileRef, []string, error) {
	r := p.st.remote
	if err := p.st.db.Flush(); err != nil {
		return nil, nil, fmt.Errorf("state: snapshot: flush: %w", err)
	}
	levels, err := p.st.db.SSTables()
	if err != nil {
		return nil, nil, fmt.Errorf("state: snapshot: list tables: %w", err)
	}
	var files []fileRef
	var names []string
	r.mu.Lock()
	defer r.mu.Unlock()
	for lvl, tables := range levels {
		for _, ti := range tables {
			var name string
			switch ti.BackingType {
			case pebble.BackingTypeShared:
				name = r.sharedObjectName(uint64(ti.BackingSSTNum))
				if !r.created[name] {
					return nil, nil, fmt.Errorf("state: snapshot: table %s: object %s was not created by this instance (pebble's object naming changed?)", ti.FileNum, name)
				}
			case pebble.BackingTypeExternal:
				var ok bool
				if name, ok = r.extNames[uint64(ti.BackingSSTNum)]; !ok {
					return nil, nil, fmt.Errorf("state: snapshot: external table %s has an unknown object", ti.FileNum)
				}
			default:
				return nil, nil, fmt.Errorf("state: snapshot: table %s is not on the remote store (backing type %d)", ti.FileNum, ti.BackingType)
			}
			files = append(files, fileRef{Name: name, remoteTable: remoteTable{
				Level: lvl, Seq: uint64(ti.LargestSeqNum),
				Start: bytes.Clone(ti.Smallest.UserKey), End: bytes.Clone(ti.Largest.UserKey),
				EndInclusive: !ti.Largest.IsExclusiveSentinel(), RefBytes: ti.Size,
			}})
			names = append(names, name)
		}
	}
	return files, names, nil
}

// restoreHeldHook, when set (tests), sees a restored DB after its
// ingestions and replay, before its compactions are released, and
// whether they were still held.
var restoreHeldHook func(db *pebble.DB, held bool)

// restoreSchedulerHook, when set (tests), sees each restore's compaction
// scheduler before the restored DB opens.
var restoreSchedulerHook func(*restoreScheduler)

// openRemoteRestored is OpenBackendRestored for a disaggregated backend:
// it opens a fresh DB (a new creator id) and ingests every table of the
// snapshots by reference (Pebble's external file ingestion: no download;
// a local Pebble snapshot's tables are listed by localAsRemote and copied
// into the store first),
// each clipped to the key groups cfg owns plus the metadata space, one
// table per ingestion, deepest level first and L0 oldest first, so every
// ingestion's sequence number orders it above the data it shadows. A
// snapshot file outside cfg.Remote.Dir (a savepoint, another job's
// checkpoint) is first copied into the store.
func openRemoteRestored(cfg BackendConfig, handles []RestoreHandle, hs []keyedHandle) (KeyedStateBackend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	hs = slices.Clone(hs)
	for i := range hs {
		if !hs[i].Remote {
			var err error
			if hs[i], err = localAsRemote(cfg, handles[i], hs[i]); err != nil {
				return nil, err
			}
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "state", "backend", cfg.Kind, "key_groups", cfg.KeyGroupRange.String())
	start := time.Now()
	// Compactions wait until the tables are ingested and the deltas
	// replayed (restoreScheduler).
	sched := newRestoreScheduler()
	if h := restoreSchedulerHook; h != nil {
		h(sched)
	}
	st, err := openPebbleStore(cfg, logger, sched)
	if err != nil {
		sched.Unregister() // stops its ticker if Pebble registered it and failed later
		return nil, err
	}
	opened := time.Since(start)
	ph, err := ingestRemote(st, cfg, handles, hs, sched)
	if h := restoreHeldHook; h != nil && err == nil {
		h(st.db, sched.isHeld())
	}
	if err != nil {
		// Closed while still held: a compaction released now could start
		// before the close and write objects for an instance nobody keeps.
		_ = st.close()
		sched.release()
		return nil, err
	}
	sched.release()
	t := time.Now()
	b, err := newBackend(cfg, st, logger)
	if err != nil {
		_ = st.close()
		return nil, err
	}
	logger.Info("remote state restored", "ms", logMs(time.Since(start)), "open_ms", logMs(opened), "markers_ms", logMs(ph.markers),
		"ingest_ms", logMs(ph.ingest), "ingestions", ph.ingestions, "tables", ph.tables,
		"ingest_levels_ms", logMs(ph.ingestLevels), "ingest_l0_ms", logMs(ph.ingestL0), "ingest_meta_ms", logMs(ph.ingestMeta),
		"learn_ms", logMs(ph.learn), "slowest_ingest_ms", logMs(ph.slowest), "slowest_ingest_level", ph.slowestLevel, "slowest_ingest_pieces", ph.slowestPieces,
		"replay_ms", logMs(ph.replay), "deltas", ph.deltas, "delta_bytes", ph.deltaBytes, "backend_ms", logMs(time.Since(t)))
	return &pebbleBackend{backend: b, st: st}, nil
}

// objectFor returns the object of the snapshot file at src: its name when
// src is in the store (after taking this instance's reference on it), or
// the name of a copy made into the store.
func (r *remoteObjects) objectFor(src, storeDir string, imported map[string]string) (string, error) {
	abs, err := filepath.Abs(src)
	if err != nil {
		return "", err
	}
	if filepath.Dir(abs) == storeDir {
		// No Size (a stat, or a HEAD on S3) per object: a job's restore
		// checked every object's existence and size before
		// (checkpoint.Verify), and the table's size is in the handle.
		name := filepath.Base(abs)
		if err := r.reference(name); err != nil {
			return "", err
		}
		return name, nil
	}
	if name, ok := imported[abs]; ok {
		return name, nil
	}
	name := "import-" + strconv.FormatUint(r.creator, 10) + "-" + strconv.Itoa(len(imported)) + ".sst"
	if err := r.reference(name); err != nil {
		return "", err
	}
	w, err := r.CreateObject(name)
	if err != nil {
		return "", err
	}
	in, err := os.Open(abs)
	if err != nil {
		_ = w.Close()
		return "", err
	}
	_, err = io.Copy(w, in)
	in.Close()
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	imported[abs] = name
	return name, nil
}

// clipExternal returns the external file of table f restricted to
// [lo, hi) (hi nil: unbounded), and false when they do not overlap.
func clipExternal(f fileRef, lo, hi []byte) (pebble.ExternalFile, bool) {
	start, end, incl := f.Start, f.End, f.EndInclusive
	if bytes.Compare(start, lo) < 0 {
		start = lo
	}
	if hi != nil {
		if c := bytes.Compare(end, hi); c > 0 || c == 0 {
			end, incl = hi, false
		}
	}
	if c := bytes.Compare(start, end); c > 0 || (c == 0 && !incl) {
		return pebble.ExternalFile{}, false
	}
	size := f.RefBytes
	if size == 0 {
		size = 1
	}
	return pebble.ExternalFile{Locator: remoteLocator, Size: size,
		StartKey: bytes.Clone(start), EndKey: bytes.Clone(end), EndKeyIsInclusive: incl, HasPointKey: true}, true
}

// inspectRemote is the remote config ReadKeyedSnapshot (and a local
// backend restoring a remote snapshot) opens a remote snapshot with: the
// store its objects are in, rh.RemoteStore when set (ingested by reference;
// the reading instance's markers keep them while it reads), or, for a
// self-contained snapshot (a savepoint), a scratch store under tmp they
// are copied into.
func inspectRemote(rh RestoreHandle, h keyedHandle, tmp string) *RemoteConfig {
	for _, f := range h.Files {
		if f.Shared {
			dir := filepath.Dir(filepath.Join(rh.SharedDir, filepath.FromSlash(f.Path)))
			return &RemoteConfig{Dir: dir, CacheBytes: -1, Store: rh.RemoteStore}
		}
	}
	return &RemoteConfig{Dir: filepath.Join(tmp, RemoteDirName), CacheBytes: -1}
}

// remoteObjectOf returns the object of the remote store that file f of a
// disaggregated snapshot refers to ("../remote/<object>" from SharedDir),
// when rh names a remote store; false for a file to look up on the
// filesystem.
func remoteObjectOf(rh RestoreHandle, h keyedHandle, f fileRef) (string, bool) {
	if rh.RemoteStore == nil || !h.Remote || !f.Shared {
		return "", false
	}
	return strings.CutPrefix(f.Path, "../"+RemoteDirName+"/")
}
