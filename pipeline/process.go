package pipeline

import (
	"os"
	"runtime/debug"
)

// DefaultGCPercent is process.gc_percent's default: the garbage
// collector's pacing (GOGC) for a kstreamd process, Go's own default.
// BENCHMARKS.md ("The copy path") has the measurement behind it: once the
// copy path stopped allocating per record, 200 bought no CPU clearly above
// the noise and cost 1.3x to 1.7x the peak RSS.
const DefaultGCPercent = 100

// MinMemoryLimitBytes is the least process.memory_limit_bytes other than 0
// (16 MiB): below it the collector would run without pause.
const MinMemoryLimitBytes = 16 << 20

// validateProcess checks the process section.
func (c *Config) validateProcess(v *validator) {
	p := c.Process
	switch {
	case p.GCPercent == -1 && p.MemoryLimitBytes == 0:
		v.errorf("process.gc_percent", "-1 (pacing off) needs process.memory_limit_bytes: without a limit the heap grows without bound")
	case p.GCPercent != -1 && (p.GCPercent < 10 || p.GCPercent > 10000):
		v.errorf("process.gc_percent", "must be in [10, 10000], or -1 with memory_limit_bytes; got %d", p.GCPercent)
	}
	if p.MemoryLimitBytes != 0 && p.MemoryLimitBytes < MinMemoryLimitBytes {
		v.errorf("process.memory_limit_bytes", "must be 0 (no limit) or >= %d (16 MiB), got %d", MinMemoryLimitBytes, p.MemoryLimitBytes)
	}
}

// ApplyProcess sets the Go runtime's garbage collector pacing and soft
// memory limit from c.Process (runtime/debug.SetGCPercent and
// SetMemoryLimit), each unless its environment variable (GOGC,
// GOMEMLIMIT) is set: the environment, which Go applied at start, takes
// precedence. A memory_limit_bytes of 0 leaves the limit as it is. It
// returns a function restoring the settings found, for a caller that runs
// something else in the same process afterwards (the benchmark's pipe).
// The settings are process-wide: one job per process.
func (c *Config) ApplyProcess() (restore func()) {
	prevGC, prevLimit := -2, int64(-1) // -2, -1: not changed
	if _, set := os.LookupEnv("GOGC"); !set {
		prevGC = debug.SetGCPercent(c.Process.GCPercent)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set && c.Process.MemoryLimitBytes > 0 {
		prevLimit = debug.SetMemoryLimit(c.Process.MemoryLimitBytes)
	}
	return func() {
		if prevGC != -2 {
			debug.SetGCPercent(prevGC)
		}
		if prevLimit >= 0 {
			debug.SetMemoryLimit(prevLimit)
		}
	}
}
