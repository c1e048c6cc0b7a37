//go:build !(linux || darwin || freebsd || openbsd || netbsd || dragonfly)

package embedded

import "os"

// tryLock always succeeds where flock is not available: a second broker on
// the same data directory is not detected there.
func tryLock(*os.File) (bool, error) { return true, nil }

// unlock does nothing.
func unlock(*os.File) error { return nil }
