package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kstreamd/kstreamd/internal/atomicfile"
)

// Store is the shared storage of cluster-mode units (docs/scale-out.md): a
// flat key space of immutable objects, keys '/'-separated like
// "<job>/units/<stage>/<unit>/HEAD-3". Every write is create-only: a
// second write of one key fails, which is what fences a zombie (invariant
// 1). Two kinds implement it: FileStore (a directory every daemon mounts;
// O_EXCL-like hard links) and s3store.Store (an S3-compatible object store;
// PUT with If-None-Match: *). Implementations are safe for concurrent use.
type Store interface {
	// Create writes data under key with a create-only write. It returns
	// an error wrapping fs.ErrExist when key exists; the object is never
	// seen partially written.
	Create(ctx context.Context, key string, data []byte) error
	// Upload writes the local file at path under key, create-only like
	// Create.
	Upload(ctx context.Context, key, path string) error
	// Read returns the content of key, or an error wrapping
	// fs.ErrNotExist.
	Read(ctx context.Context, key string) ([]byte, error)
	// Download writes the content of key into the local file at path
	// (creating its directory; the file appears complete or not at all),
	// or returns an error wrapping fs.ErrNotExist.
	Download(ctx context.Context, key, path string) error
	// List returns every key that starts with prefix, ascending.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes keys; a missing key is no error.
	Delete(ctx context.Context, keys ...string) error
	// String names the store in messages: its kind and where it is.
	String() string
}

// FileStore is a Store in the directory Root (a filesystem every daemon
// mounts: NFS, a shared volume): key k is the file Root/k. Create and
// Upload write a temporary file in the key's directory, fsync it and
// hard-link it to its name (link(2) fails with EEXIST when the name
// exists, atomically, so a reader never sees a partial object).
//
// A key's new directories are created durably (atomicfile.MkdirAll: the
// parent of each is fsynced), so an object's directory cannot vanish in a
// crash while a HEAD names it.
type FileStore struct {
	// Root is the store's directory.
	Root string
	// hooks, if not nil, replaces the directory fsync (tests count
	// fsyncs) or watches List's directory reads; a pointer so FileStore
	// stays comparable.
	hooks *fileStoreHooks
}

// fileStoreHooks are FileStore's test seams.
type fileStoreHooks struct {
	syncDir func(dir string) error
	// listDir, if not nil, is called with each directory List reads.
	listDir func(dir string)
}

// syncDir returns the directory fsync s uses.
func (s FileStore) syncDir() func(string) error {
	if s.hooks != nil && s.hooks.syncDir != nil {
		return s.hooks.syncDir
	}
	return atomicfile.SyncDir
}

// batchStore is a Store that can leave the directory fsyncs of many
// create-only writes to one pass after the last (FileStore): Owner.upload
// writes a checkpoint's files through a FileBatch, syncs it, then writes
// the _metadata with Upload, so every file's entry is durable before the
// _metadata (and the HEAD after it) that names it. A wrapper that embeds
// FileStore to override Upload must override Batch too.
type batchStore interface {
	Store
	Batch() *FileBatch
}

// tmpPrefix starts the names of FileStore's temporary files, which List
// never returns.
const tmpPrefix = ".kstreamd-tmp-"

// String implements Store: "filesystem <root>".
func (s FileStore) String() string { return "filesystem " + s.Root }

func (s FileStore) file(key string) string { return filepath.Join(s.Root, filepath.FromSlash(key)) }

// Create implements Store.
func (s FileStore) Create(_ context.Context, key string, data []byte) error {
	return s.link(key, func(w io.Writer) error { _, err := w.Write(data); return err })
}

// Upload implements Store.
func (s FileStore) Upload(_ context.Context, key, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("checkpoint: upload %s: %w", key, err)
	}
	defer in.Close()
	return s.link(key, func(w io.Writer) error { _, err := io.Copy(w, in); return err })
}

// Batch returns a FileBatch of s: create-only uploads whose directory
// fsyncs wait for its Sync.
func (s FileStore) Batch() *FileBatch { return &FileBatch{s: s} }

// FileBatch writes objects of a FileStore as Upload does, each fsynced,
// but collects the fsyncs of their directories (and of the parents of the
// directories they create) for Sync, which runs each once: a checkpoint of
// many files in few directories costs one fsync per directory, not one per
// file. Until Sync returns, the objects are complete or absent to readers
// but may not survive a crash. Not safe for concurrent use.
type FileBatch struct {
	s    FileStore
	dirs []string // to fsync, in first-seen order, once each
}

func (b *FileBatch) add(dir string) error {
	if !slices.Contains(b.dirs, dir) {
		b.dirs = append(b.dirs, dir)
	}
	return nil
}

// Upload writes the local file at path under key, create-only (an error
// wrapping fs.ErrExist when key exists). The key's directory is synced by
// Sync also then: the object's writer may have died before its own fsync.
func (b *FileBatch) Upload(_ context.Context, key, src string) error {
	name := b.s.file(key)
	dir := filepath.Dir(name)
	if err := b.add(dir); err != nil {
		return err
	}
	if err := atomicfile.MkdirAll(dir, 0o755, b.add); err != nil {
		return fmt.Errorf("checkpoint: create %s in %s: %w", key, b.s, err)
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("checkpoint: upload %s: %w", key, err)
	}
	defer in.Close()
	opts := atomicfile.Options{TempPattern: tmpPrefix + "*", NoReplace: true, NoDirSync: true}
	if err := atomicfile.Write(name, opts, func(w io.Writer) error { _, err := io.Copy(w, in); return err }); err != nil {
		return fmt.Errorf("checkpoint: create %s in %s: %w", key, b.s, err)
	}
	return nil
}

// Sync fsyncs every directory the batch's uploads wrote into or created a
// directory in, once each; after it the batch's objects are durable.
func (b *FileBatch) Sync(context.Context) error {
	sync := b.s.syncDir()
	for _, d := range b.dirs {
		if err := sync(d); err != nil {
			return fmt.Errorf("checkpoint: sync %s in %s: %w", d, b.s, err)
		}
	}
	b.dirs = nil
	return nil
}

// link writes key create-only with atomicfile.Write (NoReplace): a
// temporary file filled by write and fsynced, hard-linked to key, the
// directory fsynced. Missing directories of key are created durably.
func (s FileStore) link(key string, write func(io.Writer) error) error {
	name := s.file(key)
	dir := filepath.Dir(name)
	if err := atomicfile.MkdirAll(dir, 0o755, s.syncDir()); err != nil {
		return fmt.Errorf("checkpoint: create %s in %s: %w", key, s, err)
	}
	opts := atomicfile.Options{TempPattern: tmpPrefix + "*", NoReplace: true, SyncDir: s.syncDir()}
	if err := atomicfile.Write(name, opts, write); err != nil {
		return fmt.Errorf("checkpoint: create %s in %s: %w", key, s, err)
	}
	return nil
}

// Read implements Store.
func (s FileStore) Read(_ context.Context, key string) ([]byte, error) {
	b, err := os.ReadFile(s.file(key))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read %s in %s: %w", key, s, err)
	}
	return b, nil
}

// Download implements Store.
func (s FileStore) Download(_ context.Context, key, dst string) error {
	if _, err := os.Stat(s.file(key)); err != nil {
		return fmt.Errorf("checkpoint: download %s from %s: %w", key, s, err)
	}
	if err := copyFileAtomic(s.file(key), dst); err != nil {
		return fmt.Errorf("checkpoint: download %s from %s: %w", key, s, err)
	}
	return nil
}

// List implements Store.
func (s FileStore) List(_ context.Context, prefix string) ([]string, error) {
	dir := s.Root
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dir = s.file(prefix[:i])
	}
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() && strings.HasPrefix(d.Name(), tmpPrefix) {
			return nil
		}
		rel, err := filepath.Rel(s.Root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			// Every key inside starts with key+"/": a directory whose
			// keys can neither start with prefix nor lead to one is not
			// read (a unit's "HEAD-" listing reads the unit's directory
			// only, not its chk-<id> and shared directories).
			if p != dir && !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return fs.SkipDir
			}
			if s.hooks != nil && s.hooks.listDir != nil {
				s.hooks.listDir(key)
			}
			return nil
		}
		if strings.HasPrefix(key, prefix) {
			out = append(out, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s in %s: %w", prefix, s, err)
	}
	slices.Sort(out)
	return out, nil
}

// Delete implements Store; chk-<id> and shared directories (and those
// inside them) it leaves empty are removed too.
func (s FileStore) Delete(_ context.Context, keys ...string) error {
	var errs []error
	dirs := map[string]bool{}
	for _, k := range keys {
		if err := os.Remove(s.file(k)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("checkpoint: delete %s in %s: %w", k, s, err))
		}
		for d := path.Dir(k); d != "." && d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	// Deepest first; os.Remove fails harmlessly on a directory not empty.
	ds := slices.Collect(func(yield func(string) bool) {
		for d := range dirs {
			if !yield(d) {
				return
			}
		}
	})
	slices.SortFunc(ds, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, d := range ds {
		if inData(d) {
			_ = os.Remove(s.file(d))
		}
	}
	return errors.Join(errs...)
}

// inData reports whether the directory key d is, or is inside, a chk-<id>
// or shared directory (the ones Delete may remove once empty).
func inData(d string) bool {
	for _, e := range strings.Split(d, "/") {
		if _, ok := parseChkName(e); ok || e == "shared" {
			return true
		}
	}
	return false
}

// copyFileAtomic copies src to dst (creating dst's directory) through a
// temporary file and a rename, without fsyncs: a download into a restore's
// working directory, which a crash makes worthless anyway.
func copyFileAtomic(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return atomicfile.CopyFile(src, dst, atomicfile.Options{TempPattern: tmpPrefix + "*", NoSync: true})
}
