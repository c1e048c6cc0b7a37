package pipeline

import (
	"os"
	"runtime/debug"
	"testing"
)

// unsetenv unsets key for the test, restoring it afterwards.
func unsetenv(t *testing.T, key string) {
	t.Setenv(key, "")
	os.Unsetenv(key)
}

// TestApplyProcess: ApplyProcess sets the GC percent and the soft memory
// limit of process, and the function it returns puts back the values it
// found; a GOGC or GOMEMLIMIT environment variable keeps its setting.
func TestApplyProcess(t *testing.T) {
	gc := func() int { v := debug.SetGCPercent(100); debug.SetGCPercent(v); return v }
	limit := func() int64 { return debug.SetMemoryLimit(-1) }
	origGC, origLimit := gc(), limit()
	defer debug.SetGCPercent(origGC)
	defer debug.SetMemoryLimit(origLimit)

	unsetenv(t, "GOGC")
	unsetenv(t, "GOMEMLIMIT")
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(1 << 40)
	c := Default()
	c.Process = ProcessConfig{GCPercent: 300, MemoryLimitBytes: 512 << 20}
	restore := c.ApplyProcess()
	if gc() != 300 || limit() != 512<<20 {
		t.Fatalf("after ApplyProcess: GC percent %d, memory limit %d; want 300 and %d", gc(), limit(), 512<<20)
	}
	restore()
	if gc() != 100 || limit() != 1<<40 {
		t.Fatalf("after restore: GC percent %d, memory limit %d; want 100 and %d", gc(), limit(), int64(1<<40))
	}

	// The default: gc_percent 100, the memory limit left alone.
	debug.SetGCPercent(150)
	restore = Default().ApplyProcess()
	if gc() != DefaultGCPercent || limit() != 1<<40 {
		t.Fatalf("defaults: GC percent %d, memory limit %d; want %d and %d unchanged", gc(), limit(), DefaultGCPercent, int64(1<<40))
	}
	restore()
	debug.SetGCPercent(100)

	// The environment takes precedence.
	t.Setenv("GOGC", "150")
	t.Setenv("GOMEMLIMIT", "1GiB")
	restore = c.ApplyProcess()
	if gc() != 100 || limit() != 1<<40 {
		t.Fatalf("with GOGC and GOMEMLIMIT set: GC percent %d, memory limit %d; want 100 and %d untouched", gc(), limit(), int64(1<<40))
	}
	restore()
	if gc() != 100 || limit() != 1<<40 {
		t.Fatalf("restore changed the untouched settings: GC percent %d, memory limit %d", gc(), limit())
	}
}
