package testkit

import (
	"syscall"
	"testing"
	"time"
)

// CPUTime returns the process's CPU time so far, user + system
// (getrusage RUSAGE_SELF, fsyncs' system time included); it fails tb when
// getrusage does. Benchmarks report the difference per op as cpu-ns/op,
// which load distorts less than ns/op.
func CPUTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
