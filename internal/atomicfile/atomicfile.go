// Package atomicfile writes files so that a reader, and a restart after a
// crash or power loss, sees either the old content or the new one, never a
// part: the temporary-file, fsync, rename, directory-fsync sequence that
// checkpoint metadata, state snapshots, the savepoint pointer, checkpoint
// stores and the embedded broker's data directory all use (Flink's
// FileSystem "write to a temporary name, then rename" commit, and the
// create-only variant its RecoverableWriter and Kafka's log use for
// immutable objects). It is a leaf package: it imports nothing of the
// project, so every layer may use it.
package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Options tunes Write. The zero value is the full contract: a unique
// temporary name, the mode os.CreateTemp gives (0600), replace dst, fsync
// file and directory.
type Options struct {
	// Perm is the mode dst gets, set with chmod(2) (so the umask does not
	// apply). Zero keeps the mode the temporary file was created with:
	// 0600 for a unique name, 0666 less the umask for TempName.
	Perm fs.FileMode
	// TempName, if not empty, is the fixed base name of the temporary
	// file in dst's directory, created or truncated (os.Create). Use it
	// only where one writer at a time writes dst and where readers
	// recognise the name (checkpoint metadata's "_metadata.tmp" marks an
	// incomplete checkpoint). Empty means a unique name from TempPattern.
	TempName string
	// TempPattern is the os.CreateTemp pattern of the unique temporary
	// name in dst's directory (the last "*" becomes a random string).
	// Empty means Base(dst)+".tmp-*". Ignored when TempName is set.
	TempPattern string
	// NoReplace publishes with link(2) instead of rename(2): Write fails
	// with an error wrapping fs.ErrExist when dst exists, atomically, and
	// dst is never replaced (a create-only write, which fences a second
	// writer of one name). Without TempName, where the filesystem has
	// O_TMPFILE (Linux: ext4, XFS, Btrfs, tmpfs), the temporary file is
	// an unnamed inode in dst's directory, published with linkat(2)
	// through /proc/self/fd: no temporary name is created or removed, and
	// a crash before the link leaves nothing in the directory. Elsewhere
	// (NFS, other systems, no /proc) the temporary file has a unique name
	// from TempPattern, removed after the link.
	NoReplace bool
	// NoSync skips both fsyncs: dst still appears complete or not at all
	// to readers of a running system, but a crash may lose it or leave it
	// empty. Only for files a crash makes worthless anyway (downloads
	// into a restore's working directory).
	NoSync bool
	// BeforeRename, if not nil, runs after the temporary file is complete
	// and synced, just before it is published. If it returns an error,
	// Write returns that error and leaves the temporary file in place,
	// exactly as a crash at that point would (tests inject crashes here);
	// an unnamed temporary file of NoReplace is discarded, as a crash
	// discards it.
	BeforeRename func() error
	// NoDirSync skips step 4 of Write (the fsync of dst's directory) but
	// not the file's fsync: the caller writes many files into one
	// directory and fsyncs it once after the last (SyncDir), before
	// anything that names them is published.
	NoDirSync bool
	// SyncDir, if not nil, replaces the package's SyncDir for step 4
	// (tests count directory fsyncs through it).
	SyncDir func(dir string) error
}

// Write writes dst atomically with the bytes write produces:
//
//  1. it creates the temporary file in dst's directory (which must exist)
//     and lets write fill it;
//  2. it fsyncs the temporary file and closes it (sets Perm first);
//  3. it renames the temporary file over dst (or links it to dst, with
//     NoReplace);
//  4. it fsyncs dst's directory, making the rename durable.
//
// When Write returns nil, dst holds exactly the bytes written and both its
// data and its directory entry are on stable storage (without NoSync). A
// crash (or power loss) during steps 1-2 leaves dst untouched (its old
// content or absent) and possibly a partial temporary file, which a later
// Write with the same TempName truncates and which directory scans must
// skip (by the TempName or TempPattern the caller chose); between steps 2
// and 3 the same with a complete temporary file; after 3 and before 4 dst
// holds either the old or the new content, each complete. With NoReplace
// a crash after the link may also leave the temporary name beside dst.
//
// An unnamed temporary file (NoReplace, see Options.NoReplace) is never
// visible: a crash before step 3 leaves the directory as it was (the
// filesystem frees the inode when its last descriptor closes, and at
// mount after a crash), and the link of step 3 is the one directory
// change. Its steps are the same but for the close, which comes after
// the link.
//
// On an error Write removes the temporary file and leaves dst untouched,
// with two exceptions: an error of BeforeRename leaves the temporary file
// (see Options.BeforeRename), and an error of the directory fsync comes
// after dst was replaced, so dst holds the new content but may not
// survive a crash. Errors are the os errors of the failing step, or
// write's error, unwrapped.
func Write(dst string, opts Options, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(dst)
	if opts.NoReplace && opts.TempName == "" {
		f, err := openUnnamed(dir)
		if err == nil {
			return writeUnnamed(f, dst, dir, opts, write)
		}
		// Not supported here: a named temporary file instead.
	}
	var f *os.File
	if opts.TempName != "" {
		f, err = os.Create(filepath.Join(dir, opts.TempName))
	} else {
		pattern := opts.TempPattern
		if pattern == "" {
			pattern = filepath.Base(dst) + ".tmp-*"
		}
		f, err = os.CreateTemp(dir, pattern)
	}
	if err != nil {
		return err
	}
	tmp := f.Name()
	// keep: the temporary file stays (BeforeRename failed, or it was
	// renamed to dst).
	keep := false
	defer func() {
		if f != nil {
			f.Close()
		}
		if !keep && (err != nil || opts.NoReplace) {
			_ = os.Remove(tmp)
		}
	}()
	if err = fill(f, opts, write); err != nil {
		return err
	}
	err = f.Close()
	f = nil
	if err != nil {
		return err
	}
	if err = beforeRename(opts); err != nil {
		keep = true
		return err
	}
	if opts.NoReplace {
		err = os.Link(tmp, dst)
	} else if err = os.Rename(tmp, dst); err == nil {
		keep = true // tmp is dst now: never remove that name again
	}
	if err != nil {
		return err
	}
	return syncDir(dir, opts)
}

// fill is the part both create paths of Write share: chmod f to
// opts.Perm (when set), write its contents, and fsync it unless
// opts.NoSync. The caller closes f.
func fill(f *os.File, opts Options, write func(io.Writer) error) error {
	if opts.Perm != 0 {
		if err := f.Chmod(opts.Perm); err != nil {
			return err
		}
	}
	if err := write(f); err != nil {
		return err
	}
	if opts.NoSync {
		return nil
	}
	return f.Sync()
}

// beforeRename runs opts.BeforeRename, if set, before the file becomes
// visible under dst (the hook both create paths of Write call).
func beforeRename(opts Options) error {
	if opts.BeforeRename == nil {
		return nil
	}
	return opts.BeforeRename()
}

// syncDir is step 4 of Write, after dst got its name: fsync dir (with
// opts.SyncDir when set) unless opts.NoSync or opts.NoDirSync.
func syncDir(dir string, opts Options) error {
	if opts.NoSync || opts.NoDirSync {
		return nil
	}
	if opts.SyncDir != nil {
		return opts.SyncDir(dir)
	}
	return SyncDir(dir)
}

// writeUnnamed is Write's create-only path for f, an unnamed temporary
// file in dir (openUnnamed): fill, chmod, fsync, BeforeRename, link to
// dst, close, directory fsync. Until the link nothing of f is visible, so
// every error before it needs only the close (which frees the inode).
func writeUnnamed(f *os.File, dst, dir string, opts Options, write func(io.Writer) error) (err error) {
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	if err = fill(f, opts, write); err != nil {
		return err
	}
	if err = beforeRename(opts); err != nil {
		return err
	}
	if err = linkUnnamed(f, dst); err != nil {
		return err
	}
	err = f.Close()
	f = nil
	if err != nil {
		return err
	}
	return syncDir(dir, opts)
}

// WriteFile writes data to dst atomically, as Write.
func WriteFile(dst string, data []byte, opts Options) error {
	return Write(dst, opts, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// CopyFile copies the file src to dst atomically, as Write. It returns the
// os error of opening src before it creates anything.
func CopyFile(src, dst string, opts Options) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return Write(dst, opts, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// SyncDir fsyncs the directory dir, making the creations, removals and
// renames of its entries durable. It returns the first error of opening,
// syncing and closing dir.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// MkdirAll is os.MkdirAll made durable: it creates dir and every missing
// parent with mode perm (before the umask) and then fsyncs the parent of
// each directory it created (with syncDir; nil means SyncDir), so that
// after a crash or power loss the new directories, and the files later
// made durable inside them, are still reachable. Without that a file's own
// fsync and its directory's fsync do not save the directory's entry in its
// parent: ext4 and XFS may lose a new directory whose parent was never
// synced. An existing dir costs one stat and no fsync. A component another
// process creates at the same time counts as created (its parent is
// synced too, as its creator may not have yet). Errors are the os errors
// of the failing step, unwrapped.
func MkdirAll(dir string, perm fs.FileMode, syncDir func(string) error) error {
	if syncDir == nil {
		syncDir = SyncDir
	}
	dir = filepath.Clean(dir)
	var missing []string // deepest first
	for d := dir; ; {
		st, err := os.Stat(d)
		if err == nil {
			if !st.IsDir() {
				return &fs.PathError{Op: "mkdir", Path: d, Err: syscall.ENOTDIR}
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], perm); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	// Deepest first: a parent's fsync comes after its new child's entry
	// exists, and each created directory's parent is synced exactly once.
	for _, d := range missing {
		if err := syncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}
