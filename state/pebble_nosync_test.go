package state

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// TestPebbleNoSyncDBSyncsNothing: a local Pebble backend opened with
// BackendConfig.NoSync (a job's scratch state directory) sends no fsync to
// the disk, neither for its own writes (memtable flushes, the MANIFEST,
// the WAL) nor for the staging directory of its snapshots, and its
// snapshots still restore whole (into another NoSync backend, whose
// restored DB is again scratch). Without NoSync the same steps fsync (the
// counter sees them).
func TestPebbleNoSyncDBSyncsNothing(t *testing.T) {
	for _, noSync := range []bool{false, true} {
		t.Run(fmt.Sprintf("nosync=%v", noSync), func(t *testing.T) {
			var syncs atomic.Int64
			prev := localFS
			localFS = syncCountFS{vfs.Default, &syncs}
			defer func() { localFS = prev }()

			cfg := testConfig(t, KindPebble)
			cfg.NoSync = noSync
			b := open(t, cfg)
			defer b.Close()
			s := must1(GetValueState(b, ckptValue))(t)
			const n = 3000
			root := t.TempDir()
			var ks KeyedSnapshot
			for round := range 3 { // incremental snapshots of a growing state
				for i := round * n / 3; i < (round+1)*n/3; i++ {
					b.SetCurrentKey(u64key(uint64(i)))
					must(t, s.Update(int64(i)))
				}
				ks = snapshotTo(t, b, SnapshotTarget{Dir: filepath.Join(root, fmt.Sprint("chk-", round)), TaskPath: "op/0",
					SharedDir: filepath.Join(root, "shared"), NoSync: true})
			}
			rcfg := testConfig(t, KindPebble)
			rcfg.NoSync = noSync
			r, err := OpenBackendRestored(rcfg, []RestoreHandle{{Handle: ks.Handle, Dir: filepath.Join(root, "chk-2"), SharedDir: filepath.Join(root, "shared")}})
			must(t, err)
			defer r.Close()
			rs := must1(GetValueState(r, ckptValue))(t)
			for i := range n {
				r.SetCurrentKey(u64key(uint64(i)))
				v, ok, err := rs.Value()
				if err != nil || !ok || v != int64(i) {
					t.Fatalf("restored key %d: %d %v %v", i, v, ok, err)
				}
			}
			got := syncs.Load()
			if noSync && got != 0 {
				t.Fatalf("a NoSync DB sent %d syncs to the disk, want 0", got)
			}
			if !noSync && got == 0 {
				t.Fatal("a DB without NoSync sent no sync to the disk: the counter sees nothing, the test proves nothing")
			}
		})
	}
}

// BenchmarkPebbleUnitSnapshot: one checkpoint of a cluster unit's keyed
// state as the cluster bench's stage-1 units take them (each about once a
// second): 2,000 keys updated out of 10,000, then a staged incremental
// snapshot (SnapshotTarget.NoSync, shared SSTs), with the DB's own fsyncs
// (nosync=false, before BackendConfig.NoSync) and without (nosync=true, a
// job's scratch state directory). cpu-ns/op is the process's CPU time
// (getrusage: user + system, fsyncs included) per checkpoint.
func BenchmarkPebbleUnitSnapshot(b *testing.B) {
	for _, noSync := range []bool{false, true} {
		b.Run(fmt.Sprintf("nosync=%v", noSync), func(b *testing.B) {
			cfg := testConfig(b, KindPebble)
			cfg.NoSync = noSync
			kb, err := OpenBackend(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer kb.Close()
			s, err := GetValueState(kb, ckptValue)
			if err != nil {
				b.Fatal(err)
			}
			root := b.TempDir()
			var spent time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := testkit.CPUTime(b)
				for k := range 2000 {
					kb.SetCurrentKey(u64key(uint64((i*2000 + k) % 10000)))
					if err := s.Update(int64(i)); err != nil {
						b.Fatal(err)
					}
				}
				finish, err := SnapshotKeyed(kb, SnapshotTarget{Dir: filepath.Join(root, fmt.Sprint("chk-", i)), TaskPath: "op/0",
					SharedDir: filepath.Join(root, "shared"), NoSync: true})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := finish(context.Background()); err != nil {
					b.Fatal(err)
				}
				spent += testkit.CPUTime(b) - start
				if i >= 2 { // the unit's staging keeps the last few
					_ = os.RemoveAll(filepath.Join(root, fmt.Sprint("chk-", i-2)))
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(spent)/float64(b.N), "cpu-ns/op")
		})
	}
}
