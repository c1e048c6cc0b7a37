package state

import (
	"syscall"
	"time"
)

// blockFor blocks the calling OS thread for d in nanosleep(2), as a
// blocking read does in pread(2); the Go runtime hands the thread's P to
// other goroutines meanwhile.
func blockFor(d time.Duration) {
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
