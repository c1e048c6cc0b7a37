package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// processCPU returns the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkUnitCheckpoint: one cluster unit checkpoint into a FileStore
// per op, as a keyed unit with incremental Pebble state makes them once a
// second: the owner marker (Reserve, at the trigger), the upload of a
// chk-<id> of four small files (MANIFEST, OPTIONS, two markers) in
// <operator>/<subtask>/, one new shared SST and the _metadata, the HEAD,
// then retention (2 kept). It reports cpu-ns/op, the process's user and
// system CPU per checkpoint (getrusage), which load distorts less than
// ns/op (which includes waiting for fsyncs).
func BenchmarkUnitCheckpoint(b *testing.B) {
	ctx := context.Background()
	root := b.TempDir()
	store := FileStore{Root: filepath.Join(root, "store")}
	local := NewStorage(filepath.Join(root, "staging"), "0", 2, nil)
	ns := Namespace{Store: store, Prefix: UnitPrefix("clicks", 1, 0), Local: local}
	o, _, err := Claim(ctx, ns, "a", "fp", 6, 2)
	if err != nil {
		b.Fatal(err)
	}
	write := func(p string, n int) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	var shared []string
	id := o.NextCheckpointID()
	b.ResetTimer()
	cpu0 := processCPU(b)
	for i := 0; i < b.N; i++ {
		got, err := o.Reserve(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		id = got
		dir := local.CheckpointDir(id)
		for _, f := range []string{"MANIFEST-000001", "OPTIONS-000003", "marker.format-version.000001.024", "marker.manifest.000001.MANIFEST-000001"} {
			write(filepath.Join(dir, "out", "0", f), 256)
		}
		sst := fmt.Sprintf("inst/%06d.sst", i)
		write(filepath.Join(local.SharedDir(), filepath.FromSlash(sst)), 4096)
		shared = append(shared, sst)
		if len(shared) > 3 {
			shared = shared[1:]
		}
		m := &Metadata{Version: MetadataVersion, Job: "clicks", CheckpointID: id, Operators: map[string]OperatorMetadata{}, SharedFiles: shared}
		if err := writeMetadata(dir, m, nil); err != nil {
			b.Fatal(err)
		}
		if err := o.Checkpoint(ctx, id, UnitCommit{}); err != nil {
			b.Fatal(err)
		}
		if err := o.Retain(ctx, o.Seq()); err != nil {
			b.Fatal(err)
		}
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		id++
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}
