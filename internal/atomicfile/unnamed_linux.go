package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// errNoUnnamed is openUnnamed's answer where unnamed temporary files are
// off (tests) or /proc/self/fd, which linkUnnamed needs, is missing.
var errNoUnnamed = errors.New("atomicfile: no unnamed temporary files here")

// unnamedOff, when set, makes openUnnamed fail: tests use it to run the
// named path on a filesystem that has O_TMPFILE.
var unnamedOff bool

// procFD reports, once per process, whether /proc/self/fd exists: the
// unprivileged way to link an O_TMPFILE inode (open(2), "O_TMPFILE";
// linkat with AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH).
var procFD = sync.OnceValue(func() bool {
	st, err := os.Stat("/proc/self/fd")
	return err == nil && st.IsDir()
})

// openUnnamed opens an unnamed regular file in dir for writing, mode 0600
// before the umask as os.CreateTemp's (open(2) with O_TMPFILE). It fails
// where the filesystem lacks O_TMPFILE (EOPNOTSUPP; EISDIR on kernels
// before 3.11, which read it as O_DIRECTORY), where dir cannot be opened,
// or without /proc/self/fd; the caller then makes a named temporary file.
func openUnnamed(dir string) (*os.File, error) {
	if unnamedOff || !procFD() {
		return nil, errNoUnnamed
	}
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir, "(unnamed)")), nil
}

// linkUnnamed gives f, an openUnnamed file, the name dst: linkat(2) of
// /proc/self/fd/<fd> with AT_SYMLINK_FOLLOW. It fails atomically with
// EEXIST (an *os.LinkError wrapping fs.ErrExist) when dst exists.
func linkUnnamed(f *os.File, dst string) error {
	var lerr error
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	err = rc.Control(func(fd uintptr) {
		lerr = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(fd)), unix.AT_FDCWD, dst, unix.AT_SYMLINK_FOLLOW)
	})
	if err == nil {
		err = lerr
	}
	if err != nil {
		return &os.LinkError{Op: "link", Old: f.Name(), New: dst, Err: err}
	}
	return nil
}
