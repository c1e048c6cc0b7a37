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
// exists, atomically, so a reader never sees a partial object). The
// directories they create for a key (chk-<id>/, an operator's and a
// subtask's) are fsynced into their parents too, so an object is durable
// with its whole path before its Create or Upload returns (before the
// HEAD that names its checkpoint is written).
type FileStore struct {
	// Root is the store's directory.
	Root string
	// dirSync, when not nil, replaces atomicfile.SyncDir for the parents
	// of the directories link creates (tests record them).
	dirSync dirSyncer
}

// dirSyncer fsyncs a directory (FileStore.dirSync).
type dirSyncer interface{ syncDir(dir string) error }

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

// link writes key create-only with atomicfile.Write (NoReplace): a
// temporary file filled by write and fsynced, hard-linked to key, the
// directory fsynced.
func (s FileStore) link(key string, write func(io.Writer) error) error {
	name := s.file(key)
	dir := filepath.Dir(name)
	if err := s.mkdirAll(dir); err != nil {
		return fmt.Errorf("checkpoint: create %s in %s: %w", key, s, err)
	}
	if err := atomicfile.Write(name, atomicfile.Options{TempPattern: tmpPrefix + "*", NoReplace: true}, write); err != nil {
		return fmt.Errorf("checkpoint: create %s in %s: %w", key, s, err)
	}
	return nil
}

// mkdirAll creates dir and its missing ancestors, then fsyncs the parent
// of each directory it found missing, deepest first: their entries are
// durable, not only the key's file and its own directory's entry
// (atomicfile.Write).
func (s FileStore) mkdirAll(dir string) error {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		missing = append(missing, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range missing {
		p := filepath.Dir(d)
		var err error
		if s.dirSync != nil {
			err = s.dirSync.syncDir(p)
		} else {
			err = atomicfile.SyncDir(p)
		}
		if err != nil {
			return err
		}
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
		if d.IsDir() || strings.HasPrefix(d.Name(), tmpPrefix) {
			return nil
		}
		rel, err := filepath.Rel(s.Root, p)
		if err != nil {
			return err
		}
		if key := filepath.ToSlash(rel); strings.HasPrefix(key, prefix) {
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
