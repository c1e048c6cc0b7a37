//go:build !linux

package state

import "time"

// blockFor waits d; on Linux it blocks the OS thread in nanosleep(2) instead
// (blockfor_linux_test.go).
func blockFor(d time.Duration) { time.Sleep(d) }
