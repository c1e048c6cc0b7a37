package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// BenchmarkUnitCheckpoint: one checkpoint of a keyed cluster unit into a
// FileStore, as the cluster bench's stage-1 units take twelve a second
// between them: Reserve (the owner marker), the staged Pebble snapshot's
// four small files in op/0/ plus one new shared SST, the _metadata, the
// HEAD, then retention keeping 2 (the four small files go into the
// store's _metadata, InlineFiles, not an object each). cpu-ns/op is the process's CPU time
// (getrusage: user + system, fsyncs included) per checkpoint, which load
// distorts less than ns/op.
func BenchmarkUnitCheckpoint(b *testing.B) {
	ctx := context.Background()
	root := b.TempDir()
	store := FileStore{Root: filepath.Join(root, "store")}
	local := NewStorage(filepath.Join(root, "staging"), "0", 2, nil)
	ns := Namespace{Store: store, Prefix: UnitPrefix("bench", 1, 0), Local: local}
	o, _, err := Claim(ctx, ns, "a", "fp", 1, 2)
	if err != nil {
		b.Fatal(err)
	}
	small := make([]byte, 200)
	sst := make([]byte, 16<<10)
	var spent time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		id := o.NextCheckpointID()
		dir := local.CheckpointDir(id)
		if err := os.MkdirAll(filepath.Join(dir, "op", "0"), 0o755); err != nil {
			b.Fatal(err)
		}
		for _, f := range []string{"MANIFEST-000001", "OPTIONS-000003", "marker.format-version.000001.024", "marker.manifest.000001.MANIFEST-000001"} {
			if err := os.WriteFile(filepath.Join(dir, "op", "0", f), small, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		shared := "inst/" + strconv.Itoa(i) + ".sst"
		if err := os.MkdirAll(filepath.Join(local.SharedDir(), "inst"), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(local.SharedDir(), filepath.FromSlash(shared)), sst, 0o644); err != nil {
			b.Fatal(err)
		}
		if err := writeMetadata(dir, &Metadata{Version: MetadataVersion, Job: "bench", CheckpointID: id, Operators: map[string]OperatorMetadata{}, SharedFiles: []string{shared}}, nil); err != nil {
			b.Fatal(err)
		}
		start := testkit.CPUTime(b)
		b.StartTimer()
		if _, err := o.Reserve(ctx, id); err != nil {
			b.Fatal(err)
		}
		if err := o.Checkpoint(ctx, id, UnitCommit{}); err != nil {
			b.Fatal(err)
		}
		if err := o.Retain(ctx, o.Seq()); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		spent += testkit.CPUTime(b) - start
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(spent)/float64(b.N), "cpu-ns/op")
}
