package state

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// RemoteConfig makes a Pebble backend disaggregated (Flink 2.0's ForSt
// backend): every SST file Pebble writes (flushes, compactions) is created
// on a shared object store through Pebble's shared storage
// (Options.Experimental.RemoteStorage with CreateOnSharedAll), and the local
// directory holds only the WAL, the MANIFEST, the remote object catalog and
// a bounded cache of remote blocks (Pebble's secondary cache). A checkpoint
// of such a backend records the store's objects by reference
// (SnapshotKeyed) and a restore ingests them by reference (Pebble's external
// file ingestion) instead of downloading them; see REMOTE.md.
type RemoteConfig struct {
	// Dir is where checkpoints refer to the objects: the job's checkpoint
	// directory's "remote" directory (RemoteDirName), so a checkpoint's
	// shared files name them "../remote/<object>". Without Store it is
	// the object store itself, a directory every instance that restores
	// the state mounts. Objects are immutable, named by Pebble
	// (<hash>-<creator id>-<file number>.sst), plus empty reference markers
	// (<object>.ref.<creator id>.<suffix>). Required.
	Dir string
	// Store, if not nil, holds the objects instead of Dir (an
	// S3-compatible store: checkpoint/s3store.Objects). It is shared by
	// every instance of the job and never closed by the backend; its
	// operations must retry transient failures themselves (an error is
	// final: a read or write error fails the task, and the job's restart
	// strategy takes over).
	Store remote.Storage
	// CacheBytes is the size in bytes of the local on-disk cache of remote
	// blocks (Pebble's Experimental.SecondaryCacheSizeBytes). 0 means
	// DefaultRemoteCacheBytes; negative disables the cache (every block
	// the in-memory block cache misses is read from the store).
	CacheBytes int64
	// ReadLatency is added to every read of a remote object (a sleep
	// before each ReadAt): it makes a local directory behave like a slower
	// store so the async state API can be measured on one machine. 0 in
	// production.
	ReadLatency time.Duration
	// MaxDeltaCheckpoints is how many delta checkpoints may follow a base
	// checkpoint (remote_delta.go, REMOTE.md "Delta checkpoints"): a delta
	// checkpoint does not flush Pebble; it refers to the base's tables and
	// writes the batches committed since the last checkpoint as one delta
	// object, which a restore applies after ingesting the base. 0 means
	// DefaultMaxDeltaCheckpoints (8); negative makes every checkpoint a
	// base (flush and list the tables, as before delta checkpoints).
	MaxDeltaCheckpoints int
	// MaxDeltaBytes bounds the delta objects of a chain in bytes: a
	// checkpoint whose chain would pass it is a base. It also bounds the
	// memory the changes since the last checkpoint take (past it, the log
	// stops and the next checkpoint is a base). 0 or negative means
	// DefaultMaxDeltaBytes (64 MiB).
	MaxDeltaBytes int64

	// localFS, when not nil, is the file system under the instance's
	// local directory instead of vfs.Default (tests count its syncs).
	localFS vfs.FS
}

// DefaultRemoteCacheBytes is the default of RemoteConfig.CacheBytes
// (64 MiB).
const DefaultRemoteCacheBytes = 64 << 20

// RemoteDirName is the directory of the remote objects inside a job's
// checkpoint directory (<checkpoint dir>/<job>/remote): checkpoints refer
// to its files from their shared directory as "../remote/<object>".
const RemoteDirName = "remote"

// remoteLocator is the one remote.Locator of a disaggregated backend: the
// locator is stored in Pebble's remote object catalog and in external
// tables, so it names the role (the state object store), not a place.
const remoteLocator remote.Locator = "kstreamd-state"

// refInfix separates an object's name from the rest of a reference
// marker's name, as Pebble names its markers (objstorageprovider's
// sharedObjectRefName): "<object>.ref.<creator id>.<file number>".
const refInfix = ".ref."

// remoteObjects is the remote.Storage of one disaggregated Pebble instance
// over RemoteConfig.Dir. It keeps the store's reference counting sound
// across checkpoints and instances:
//
//   - A live instance holds a reference marker on every object it may
//     read: Pebble's own marker on every table it creates (written here
//     before the object itself, so an object is never unreferenced while
//     it is written), and an "ext" marker on every object it ingested by
//     reference at restore (Pebble never releases those: they are
//     external objects, SharedNoCleanup).
//   - A checkpoint references its objects through its metadata's shared
//     files (checkpoint.Storage.Prune keeps those of retained
//     checkpoints).
//   - Pebble deletes a marker when the table became obsolete; its
//     deletion of the object itself is ignored here: only
//     CollectRemoteGarbage deletes objects, those with no marker and no
//     retained checkpoint referring to them.
//   - Between the synchronous part of a snapshot and the commit of its
//     checkpoint the snapshot's objects are held: Pebble's marker
//     deletions for them wait until the next snapshot (one checkpoint is
//     in flight at a time, so by then the earlier one is committed and
//     its metadata refers to them, or it was aborted).
//
// A clean Close deletes every marker of the instance (the local directory
// is deleted with it: it cannot be reopened). An instance that crashed
// leaves its markers, which keep its objects (never too few objects, at
// worst too many).
type remoteObjects struct {
	// dir is RemoteConfig.Dir (where checkpoints refer to the objects);
	// st holds them.
	dir string
	st  remote.Storage
	// latency is RemoteConfig.ReadLatency in nanoseconds (atomic: a
	// benchmark sets it after its preload while compactions read).
	latency atomic.Int64
	creator uint64

	mu sync.Mutex
	// markers are the marker names this instance wrote and not deleted.
	markers map[string]bool
	// created are the objects this instance created.
	created map[string]bool
	// held counts the holds of each object (snapshots not yet known
	// committed); deferred are the marker deletions waiting for them.
	held     map[string]int
	deferred map[string][]string
	// holding is the names the last snapshot holds.
	holding []string
	// listed are the objects this instance's reference lists name
	// (referenceAll): marked as an ext marker would mark them; lists
	// numbers the lists written.
	listed map[string]bool
	lists  int
	// extNames maps the backing file number of an external table to the
	// object it refers to (Pebble's SSTableInfo does not name it).
	extNames map[uint64]string
	// sizes caches the sizes of objects (immutable once written): a
	// snapshot asks the store only for the objects new since the last
	// one, and a restore seeds it from the checkpoint's handles.
	sizes map[string]int64
	// reads counts ReadAt calls (tests, benchmarks).
	reads int64
	// ingestions counts the IngestExternalFiles calls of this instance's
	// restore (tests: a restore costs one per level and per overlapping
	// L0 table).
	ingestions atomic.Int64
	// deltaCommits counts the batches a restore of this instance
	// committed for the delta objects it applied (deltaReplay; read by
	// tests).
	deltaCommits atomic.Int64
}

var _ remote.Storage = (*remoteObjects)(nil)

func newRemoteObjects(cfg *RemoteConfig) (*remoteObjects, error) {
	st, err := cfg.store()
	if err != nil {
		return nil, err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	// A random non-zero 63-bit creator id: Pebble names the objects an
	// instance creates by it, so two instances (a restore of an older
	// checkpoint next to a zombie of the newer one included) never write
	// one name.
	c := binary.BigEndian.Uint64(b[:]) >> 1
	if c == 0 {
		c = 1
	}
	r := &remoteObjects{dir: cfg.Dir, st: st, creator: c,
		markers: map[string]bool{}, created: map[string]bool{}, held: map[string]int{},
		deferred: map[string][]string{}, extNames: map[uint64]string{}, sizes: map[string]int64{},
		listed: map[string]bool{}}
	r.latency.Store(int64(cfg.ReadLatency))
	return r, nil
}

// store returns the object store of c: Store, or a directory store at
// Dir (created if missing).
func (c *RemoteConfig) store() (remote.Storage, error) {
	if c.Store != nil {
		return c.Store, nil
	}
	return NewRemoteDirStore(c.Dir)
}

// CreateStorage implements remote.StorageFactory.
func (r *remoteObjects) CreateStorage(l remote.Locator) (remote.Storage, error) {
	if l != remoteLocator {
		return nil, fmt.Errorf("state: unknown remote locator %q", l)
	}
	return r, nil
}

// Close implements remote.Storage; the instance's markers are released
// by release, after the DB closed.
func (r *remoteObjects) Close() error { return nil }

// ReadObject implements remote.Storage: the store's reader, counting
// reads and adding RemoteConfig.ReadLatency to each.
func (r *remoteObjects) ReadObject(ctx context.Context, name string) (remote.ObjectReader, int64, error) {
	or, size, err := r.st.ReadObject(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	return &remoteReader{or: or, r: r}, size, nil
}

type remoteReader struct {
	or remote.ObjectReader
	r  *remoteObjects
}

func (rr *remoteReader) ReadAt(ctx context.Context, p []byte, off int64) error {
	rr.r.mu.Lock()
	rr.r.reads++
	rr.r.mu.Unlock()
	if d := time.Duration(rr.r.latency.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	return rr.or.ReadAt(ctx, p, off)
}

func (rr *remoteReader) Close() error { return rr.or.Close() }

// CreateObject implements remote.Storage: the object appears complete
// (the store's writer) and, unless it is a marker, only after this
// instance's marker on it.
func (r *remoteObjects) CreateObject(name string) (io.WriteCloser, error) {
	if _, ok := markedObject(name); ok {
		r.mu.Lock()
		have := r.markers[name]
		r.markers[name] = true
		r.mu.Unlock()
		if have {
			// Pebble's marker after a table it created: written before
			// the table, under the same name (ownMarker).
			return noopWriter{}, nil
		}
		return r.st.CreateObject(name)
	}
	marker := r.ownMarker(name)
	if err := r.putEmpty(marker); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.markers[marker] = true
	r.created[name] = true
	r.mu.Unlock()
	return r.st.CreateObject(name)
}

// putEmpty writes the empty object name (a marker).
func (r *remoteObjects) putEmpty(name string) error {
	w, err := r.st.CreateObject(name)
	if err != nil {
		return fmt.Errorf("state: remote store: write %s: %w", name, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("state: remote store: write %s: %w", name, err)
	}
	return nil
}

// ownMarker is the marker Pebble writes for an object this instance
// created ("<object>.ref.<creator>.<file number>"), or, for a name not of
// Pebble's form, "<object>.ref.<creator>.own".
func (r *remoteObjects) ownMarker(name string) string {
	parts := strings.Split(strings.TrimSuffix(name, ".sst"), "-")
	if len(parts) == 3 && parts[1] == strconv.FormatUint(r.creator, 10) {
		return name + refInfix + parts[1] + "." + parts[2]
	}
	return name + refInfix + strconv.FormatUint(r.creator, 10) + ".own"
}

// extMarker is the marker of an object this instance ingested by
// reference.
func (r *remoteObjects) extMarker(name string) string {
	return name + refInfix + strconv.FormatUint(r.creator, 10) + ".ext"
}

// markedObject returns the object a marker name refers to.
func markedObject(name string) (string, bool) {
	i := strings.Index(name, refInfix)
	if i < 0 {
		return "", false
	}
	return name[:i], true
}

// List implements remote.Storage.
func (r *remoteObjects) List(prefix, delimiter string) ([]string, error) {
	return r.st.List(prefix, delimiter)
}

// Delete implements remote.Storage: a marker is deleted (with this
// instance's other markers on the object), unless a snapshot holds its
// object; an object is left to CollectRemoteGarbage.
func (r *remoteObjects) Delete(name string) error {
	obj, ok := markedObject(name)
	if !ok {
		return nil
	}
	r.mu.Lock()
	if r.held[obj] > 0 {
		r.deferred[obj] = append(r.deferred[obj], name)
		r.mu.Unlock()
		return nil
	}
	names := r.unmarkLocked(obj, name)
	r.mu.Unlock()
	return removeAll(r, names)
}

// unmarkLocked forgets this instance's markers on obj (and name) and
// returns them for deletion.
func (r *remoteObjects) unmarkLocked(obj, name string) []string {
	names := []string{name}
	delete(r.markers, name)
	pfx := obj + refInfix
	for m := range r.markers {
		if strings.HasPrefix(m, pfx) {
			names = append(names, m)
			delete(r.markers, m)
		}
	}
	return names
}

func removeAll(r *remoteObjects, names []string) error {
	return deleteObjects(r.st, names)
}

// deleteObjects deletes names from st; a name already gone is no error.
func deleteObjects(st remote.Storage, names []string) error {
	var errs []error
	for _, n := range names {
		if err := st.Delete(n); err != nil && !st.IsNotExistError(err) {
			errs = append(errs, fmt.Errorf("state: remote store: delete %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// objectSize returns the size of object name: from the cache, else from
// the store (then cached).
func (r *remoteObjects) objectSize(name string) (int64, error) {
	r.mu.Lock()
	n, ok := r.sizes[name]
	r.mu.Unlock()
	if ok {
		return n, nil
	}
	n, err := r.st.Size(name)
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	r.sizes[name] = n
	r.mu.Unlock()
	return n, nil
}

// knowSize records the size of object name (a checkpoint recorded it).
func (r *remoteObjects) knowSize(name string, n int64) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	r.sizes[name] = n
	r.mu.Unlock()
}

// Size implements remote.Storage.
func (r *remoteObjects) Size(name string) (int64, error) { return r.st.Size(name) }

// IsNotExistError implements remote.Storage.
func (r *remoteObjects) IsNotExistError(err error) bool { return r.st.IsNotExistError(err) }

// hold makes the objects of a new snapshot held and releases the last
// snapshot's hold (running the marker deletions it deferred). An object
// among names whose markers were already deleted gets this instance's
// marker back, after checking it still exists (it may not be read by
// this instance any more, but the snapshot refers to it).
func (r *remoteObjects) hold(names []string) error {
	r.mu.Lock()
	prev := r.holding
	r.holding = names
	var remark []string
	for _, n := range names {
		r.held[n]++
		if !r.hasMarkerLocked(n) {
			remark = append(remark, n)
		}
	}
	// Sizes of objects the snapshot no longer names are dropped: a table
	// gone from the LSM never comes back.
	keep := make(map[string]bool, len(names))
	for _, n := range names {
		keep[n] = true
	}
	for n := range r.sizes {
		if !keep[n] {
			delete(r.sizes, n)
		}
	}
	var release []string
	for _, n := range prev {
		if r.held[n]--; r.held[n] <= 0 {
			delete(r.held, n)
			for _, m := range r.deferred[n] {
				release = append(release, r.unmarkLocked(n, m)...)
			}
			delete(r.deferred, n)
		}
	}
	r.mu.Unlock()
	for _, n := range remark {
		m := r.extMarker(n)
		if err := r.putEmpty(m); err != nil {
			return err
		}
		r.mu.Lock()
		r.markers[m] = true
		r.mu.Unlock()
		if _, err := r.st.Size(n); err != nil {
			return fmt.Errorf("state: snapshot: remote object %s: %w", n, err)
		}
	}
	return removeAll(r, release)
}

func (r *remoteObjects) hasMarkerLocked(obj string) bool {
	if r.listed[obj] {
		return true
	}
	pfx := obj + refInfix
	for m := range r.markers {
		if strings.HasPrefix(m, pfx) {
			return true
		}
	}
	return false
}

// reference writes this instance's ext marker on obj (an object it is
// about to ingest by reference).
func (r *remoteObjects) reference(obj string) error {
	m := r.extMarker(obj)
	r.mu.Lock()
	have := r.markers[m]
	r.mu.Unlock()
	if have {
		return nil
	}
	if err := r.putEmpty(m); err != nil {
		return err
	}
	r.mu.Lock()
	r.markers[m] = true
	r.mu.Unlock()
	return nil
}

// refListSuffix ends the name of a reference list
// ("refs-<creator>-<n>.ref.<creator>.list"): one marker whose content
// names, one per line, the objects it references.
const refListSuffix = ".list"

// isRefList reports whether marker name is a reference list.
func isRefList(name string) bool {
	_, ok := markedObject(name)
	return ok && strings.HasSuffix(name, refListSuffix)
}

// referenceAll takes this instance's reference on every object of objs
// (objects it is about to ingest by reference at its restore) with one
// reference list, a single marker object naming them all, instead of an
// ext marker per object: a restore of a state of many tables writes one
// object to the store, not one per table. Objects it already marks are
// left out; with none left nothing is written. Retention
// (CollectListedRemoteGarbage) reads the lists it finds, and a list
// goes like any marker: with the instance's Close (release), a dead
// instance's release, or a cluster owner's ReleaseRemoteMarkers.
func (r *remoteObjects) referenceAll(objs []string) error {
	r.mu.Lock()
	var todo []string
	for _, o := range objs {
		if !r.hasMarkerLocked(o) && !slices.Contains(todo, o) {
			todo = append(todo, o)
		}
	}
	c := strconv.FormatUint(r.creator, 10)
	name := "refs-" + c + "-" + strconv.Itoa(r.lists) + refInfix + c + refListSuffix
	r.lists++
	r.mu.Unlock()
	if len(todo) == 0 {
		return nil
	}
	w, err := r.st.CreateObject(name)
	if err == nil {
		_, err = io.WriteString(w, strings.Join(todo, "\n")+"\n")
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("state: remote store: write reference list %s of %d objects (%s): %w",
			name, len(todo), strings.Join(todo[:min(3, len(todo))], ", "), err)
	}
	r.mu.Lock()
	r.markers[name] = true
	for _, o := range todo {
		r.listed[o] = true
	}
	r.mu.Unlock()
	return nil
}

// readRefList returns the objects reference list name on st names;
// false when the list is gone (its instance released it).
func readRefList(st remote.Storage, name string) ([]string, bool, error) {
	rd, n, err := st.ReadObject(context.Background(), name)
	if err != nil {
		if st.IsNotExistError(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("state: remote store: read %s: %w", name, err)
	}
	defer rd.Close()
	buf := make([]byte, n)
	if err := rd.ReadAt(context.Background(), buf, 0); err != nil {
		return nil, false, fmt.Errorf("state: remote store: read %s: %w", name, err)
	}
	return strings.Fields(string(buf)), true, nil
}

// release deletes every marker of this instance: after its DB closed.
func (r *remoteObjects) release() error {
	r.mu.Lock()
	names := make([]string, 0, len(r.markers))
	for m := range r.markers {
		names = append(names, m)
	}
	r.markers = map[string]bool{}
	r.listed = map[string]bool{}
	r.mu.Unlock()
	return removeAll(r, names)
}

// readCount returns how many remote reads this instance made.
func (r *remoteObjects) readCount() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads
}

// sharedObjectName is the name Pebble gives a table this instance created
// with file number fn (objstorageprovider.remoteObjectName).
func (r *remoteObjects) sharedObjectName(fn uint64) string {
	const prime1, prime2 = 7459, 17539
	h := uint16(r.creator*prime1 + fn*prime2)
	return fmt.Sprintf("%04x-%d-%06d.sst", h, r.creator, fn)
}

// remotePebbleOptions sets the shared-storage options of a disaggregated
// DB on opts.
func remotePebbleOptions(opts *pebble.Options, cfg *RemoteConfig, r *remoteObjects) {
	opts.Experimental.RemoteStorage = r
	fs := cfg.localFS
	if fs == nil {
		fs = vfs.Default
	}
	opts.FS = unsyncedFS{fs}
	opts.Experimental.CreateOnShared = remote.CreateOnSharedAll
	opts.Experimental.CreateOnSharedLocator = remoteLocator
	switch {
	case cfg.CacheBytes == 0:
		opts.Experimental.SecondaryCacheSizeBytes = DefaultRemoteCacheBytes
	case cfg.CacheBytes > 0:
		opts.Experimental.SecondaryCacheSizeBytes = cfg.CacheBytes
	}
}

// CollectRemoteGarbage deletes from the remote object store st every
// object no marker refers to (no live instance reads it) and no name in
// referenced refers to (no retained checkpoint needs it), and returns the
// deleted names, sorted. referenced holds object names. It must not run
// while a checkpoint is in flight whose objects are not held (the
// Coordinator runs retention between checkpoints). A marker of an
// instance that crashed keeps its objects.
func CollectRemoteGarbage(st remote.Storage, referenced map[string]bool) ([]string, error) {
	names, err := st.List("", "")
	if err != nil {
		return nil, fmt.Errorf("state: remote store: list: %w", err)
	}
	return CollectListedRemoteGarbage(st, names, referenced)
}
