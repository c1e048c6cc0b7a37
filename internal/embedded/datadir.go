package embedded

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kstreamd/kstreamd/internal/atomicfile"
)

// The broker's data directory holds kfake's files (meta.json, topics.json,
// pids.log, groups.log, partitions/<topic>-<n>/<base>.dat|.idx|snapshot.json)
// and LockFile and CleanShutdownFile (see the package comment for why).
const (
	// LockFile is the name of the lock file in the data directory.
	LockFile = "broker.lock"
	// CleanShutdownFile is the name of the clean-shutdown marker in the
	// data directory.
	CleanShutdownFile = "clean-shutdown"
	// kfakeMetaFile is the file kfake writes when it first opens a data
	// directory: its presence means a broker has used the directory.
	kfakeMetaFile = "meta.json"
)

// UncleanDataDirError is returned by Start for a data directory that a
// broker used and that was not closed cleanly: it holds kfake's state but
// no clean-shutdown marker. Start has changed nothing in the directory.
type UncleanDataDirError struct {
	// Dir is the data directory, absolute.
	Dir string
}

// Error says what happened, why the broker will not open the directory and
// the two ways on.
func (e *UncleanDataDirError) Error() string {
	return fmt.Sprintf("embedded: data dir %s was not closed cleanly (kill -9, a crash or a power loss; no %s marker): "+
		"the development broker cannot recover transactions exactly: it would abort the transactions open at the crash, "+
		"among them output of completed checkpoints the job has yet to commit, "+
		"so read_committed readers would miss committed records, not always with an error. "+
		"Either remove %s to start with an empty broker (then also remove the job's checkpoints, which point into the old log, "+
		"or start the job with a new job.name), "+
		"or accept the possible loss: run `kstreamd broker --config FILE --force-unclean` once "+
		"(it opens the data dir as it is and marks it clean when stopped with Ctrl-C or SIGTERM)",
		e.Dir, CleanShutdownFile, e.Dir)
}

// DataDirInUseError is returned by Start when another broker (another
// process, or another Broker of this one) holds the data directory's lock.
type DataDirInUseError struct {
	// Dir is the data directory, absolute.
	Dir string
	// PID is the process id the lock file names, 0 if unreadable.
	PID int
}

// Error names the directory and the holder.
func (e *DataDirInUseError) Error() string {
	holder := "another broker"
	if e.PID > 0 {
		holder = fmt.Sprintf("another broker (pid %d)", e.PID)
	}
	return fmt.Sprintf("embedded: data dir %s is in use by %s (%s is locked): stop that broker first, or give this one another kafka.embedded.data_dir",
		e.Dir, holder, LockFile)
}

// dataDir is a data directory opened for one broker: locked, its marker
// removed.
type dataDir struct {
	path string   // absolute
	lock *os.File // holds the flock until release
}

// openDataDir creates path if missing, takes its lock and checks that it
// was closed cleanly. With force, an unclean directory is opened anyway and
// wasUnclean reports it. On success the clean-shutdown marker is gone (the
// removal fsynced) so a crash from here on leaves the directory unclean.
//
// A used directory with neither the marker nor LockFile was last written by
// a kstreamd from before the marker (every broker since creates LockFile,
// fsynced, before it opens the directory): how it stopped cannot be told, so
// it is opened and legacy reports it, for a warning, rather than refusing
// every data dir an upgrade finds.
func openDataDir(path string, force bool) (d *dataDir, wasUnclean, legacy bool, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, false, false, fmt.Errorf("embedded: data dir %s: %w", path, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, false, false, fmt.Errorf("embedded: data dir: %w", err)
	}
	hadLock, err := exists(filepath.Join(abs, LockFile))
	if err != nil {
		return nil, false, false, fmt.Errorf("embedded: data dir %s: %w", abs, err)
	}
	lock, err := os.OpenFile(filepath.Join(abs, LockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, false, fmt.Errorf("embedded: data dir %s: lock: %w", abs, err)
	}
	locked, err := tryLock(lock)
	if err != nil {
		lock.Close()
		return nil, false, false, fmt.Errorf("embedded: data dir %s: lock: %w", abs, err)
	}
	if !locked {
		pid := readPID(lock)
		lock.Close()
		return nil, false, false, &DataDirInUseError{Dir: abs, PID: pid}
	}
	d = &dataDir{path: abs, lock: lock}
	if err := d.writePID(); err != nil {
		d.release()
		return nil, false, false, err
	}
	used, err := exists(filepath.Join(abs, kfakeMetaFile))
	if err == nil {
		var clean bool
		clean, err = exists(filepath.Join(abs, CleanShutdownFile))
		wasUnclean = used && !clean && hadLock
		legacy = used && !clean && !hadLock
	}
	if err == nil && !hadLock {
		err = atomicfile.SyncDir(abs) // LockFile's name is durable before kfake writes
	}
	if err != nil {
		d.release()
		return nil, false, false, fmt.Errorf("embedded: data dir %s: %w", abs, err)
	}
	if wasUnclean && !force {
		d.release()
		return nil, false, false, &UncleanDataDirError{Dir: abs}
	}
	if err := d.unmarkClean(); err != nil {
		d.release()
		return nil, false, false, err
	}
	return d, wasUnclean, legacy, nil
}

// writePID replaces the lock file's content with this process's id.
func (d *dataDir) writePID() error {
	if err := d.lock.Truncate(0); err != nil {
		return fmt.Errorf("embedded: data dir %s: lock: %w", d.path, err)
	}
	if _, err := d.lock.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		return fmt.Errorf("embedded: data dir %s: lock: %w", d.path, err)
	}
	return nil
}

// unmarkClean removes the clean-shutdown marker, if any, durably.
func (d *dataDir) unmarkClean() error {
	err := os.Remove(filepath.Join(d.path, CleanShutdownFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = atomicfile.SyncDir(d.path)
	}
	if err != nil {
		return fmt.Errorf("embedded: data dir %s: remove the clean-shutdown marker: %w", d.path, err)
	}
	return nil
}

// markClean fsyncs every file and directory under the data directory
// (kfake fsyncs its JSON files but, without SyncWrites, not its segments),
// then writes the clean-shutdown marker with atomicfile.WriteFile (temp
// file, fsync, rename, directory fsync).
func (d *dataDir) markClean() error {
	if err := syncTree(d.path); err != nil {
		return fmt.Errorf("embedded: data dir %s: fsync: %w", d.path, err)
	}
	marker := fmt.Sprintf("closed cleanly at %s by pid %d\n", time.Now().UTC().Format(time.RFC3339), os.Getpid())
	if err := atomicfile.WriteFile(filepath.Join(d.path, CleanShutdownFile), []byte(marker), atomicfile.Options{Perm: 0o644}); err != nil {
		return fmt.Errorf("embedded: data dir %s: write the clean-shutdown marker: %w", d.path, err)
	}
	return nil
}

// release unlocks the directory. The lock file stays.
func (d *dataDir) release() {
	_ = unlock(d.lock)
	_ = d.lock.Close()
}

// readPID returns the process id in the lock file f, 0 if none.
func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:n])))
	if err != nil {
		return 0
	}
	return pid
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, err
	}
}

// syncTree fsyncs every regular file and directory under root, root
// included.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() && !e.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	})
}
