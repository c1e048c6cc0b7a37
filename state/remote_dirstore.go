package state

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/kstreamd/kstreamd/internal/atomicfile"
)

// tmpObjPrefix starts the names of objects being written to a directory
// store; listings skip them.
const tmpObjPrefix = ".kstreamd-tmp-"

// dirStore is a remote.Storage over a directory (a local disk or a shared
// file system every instance mounts): an object is a file, written to a
// temporary file and renamed into place, complete, on Close; the rename
// is fsynced (the directory), so an object a checkpoint names is durable
// before the checkpoint's HEAD or _metadata is written.
type dirStore struct {
	dir string
	// syncer, when not nil, replaces atomicfile.SyncDir for the directory
	// fsync after an object's rename (tests record it).
	syncer dirSyncer
}

// dirSyncer fsyncs a directory (dirStore.syncer).
type dirSyncer interface{ syncDir(dir string) error }

// syncDir fsyncs the store's directory.
func (d dirStore) syncDir() error {
	if d.syncer != nil {
		return d.syncer.syncDir(d.dir)
	}
	return atomicfile.SyncDir(d.dir)
}

var _ remote.Storage = dirStore{}

// NewRemoteDirStore returns the remote.Storage (Pebble's shared-storage
// interface) of the directory dir, creating it if missing: the default
// store of RemoteConfig, and the one ReadKeyedSnapshot reads a checkpoint's
// objects from.
func NewRemoteDirStore(dir string) (remote.Storage, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state: remote store %s: %w", dir, err)
	}
	return dirStore{dir: dir}, nil
}

func (d dirStore) path(name string) string { return filepath.Join(d.dir, name) }

// Close implements remote.Storage.
func (d dirStore) Close() error { return nil }

// ReadObject implements remote.Storage.
func (d dirStore) ReadObject(_ context.Context, name string) (remote.ObjectReader, int64, error) {
	f, err := os.Open(d.path(name))
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return fileReader{f}, st.Size(), nil
}

type fileReader struct{ f *os.File }

func (fr fileReader) ReadAt(_ context.Context, p []byte, off int64) error {
	n, err := fr.f.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

func (fr fileReader) Close() error { return fr.f.Close() }

// CreateObject implements remote.Storage: the object appears complete
// (a temporary file fsynced and renamed on Close).
func (d dirStore) CreateObject(name string) (io.WriteCloser, error) {
	return &objWriter{d: d, name: name}, nil
}

type objWriter struct {
	d    dirStore
	name string
	f    *os.File
	err  error
}

func (w *objWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.f == nil {
		w.f, w.err = os.CreateTemp(w.d.dir, tmpObjPrefix+"*")
		if w.err != nil {
			return 0, w.err
		}
	}
	n, err := w.f.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}

func (w *objWriter) Close() error {
	if w.err != nil {
		if w.f != nil {
			w.f.Close()
			os.Remove(w.f.Name())
		}
		return w.err
	}
	if w.f == nil {
		if _, ok := markedObject(w.name); ok {
			return writeMarker(w.d.path(w.name))
		}
		return writeEmpty(w.d.path(w.name))
	}
	// A marker with content (a reference list) appears complete by the
	// rename, without fsyncs: as for an empty marker (writeMarker), its
	// durability matters only across a crash of the machine, which ends
	// its instance too.
	_, marker := markedObject(w.name)
	var err error
	if !marker {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(w.f.Name(), w.d.path(w.name))
	}
	if err != nil {
		os.Remove(w.f.Name())
		return err
	}
	if marker {
		return nil
	}
	return w.d.syncDir() // the rename itself
}

// writeMarker creates the empty file p, a reference marker, without an
// fsync. A marker keeps an object from retention while the live instance
// that wrote it may read the object; retention (in this process or any
// other, on this machine or on a shared file system's other clients) sees
// the file once it is closed. Its durability would matter only across a
// crash of the machine, which ends the instance too: its markers are then
// released anyway (releaseDeadInstances, ReleaseRemoteMarkers). Objects
// stay fsynced (a checkpoint names them).
func writeMarker(p string) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// writeEmpty creates the empty file p durably.
func writeEmpty(p string) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// List implements remote.Storage (without delimiters, which Pebble's
// reference counting does not use).
func (d dirStore) List(prefix, delimiter string) ([]string, error) {
	if delimiter != "" {
		return nil, fmt.Errorf("state: remote store: list with a delimiter is not supported")
	}
	names, err := listObjects(d.dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n[len(prefix):])
		}
	}
	return out, nil
}

func listObjects(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		if e.IsDir() || strings.HasPrefix(e.Name(), tmpObjPrefix) {
			continue
		}
		out = append(out, e.Name())
	}
	return out, nil
}

// Delete implements remote.Storage.
func (d dirStore) Delete(name string) error { return os.Remove(d.path(name)) }

// Size implements remote.Storage.
func (d dirStore) Size(name string) (int64, error) {
	st, err := os.Stat(d.path(name))
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// IsNotExistError implements remote.Storage.
func (d dirStore) IsNotExistError(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// downloadObject copies object name of st to the file dst (creating its
// directory) through a temporary file renamed into place.
func downloadObject(st remote.Storage, name, dst string) error {
	ctx := context.Background()
	or, size, err := st.ReadObject(ctx, name)
	if err != nil {
		return fmt.Errorf("state: remote store: read %s: %w", name, err)
	}
	defer or.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(dst), ".download-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		n := int64(len(buf))
		if size-off < n {
			n = size - off
		}
		if err := or.ReadAt(ctx, buf[:n], off); err != nil {
			f.Close()
			return fmt.Errorf("state: remote store: read %s: %w", name, err)
		}
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return err
		}
		off += n
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), dst)
}
