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

// TestPebbleNoSyncWritesNoWAL: a local Pebble backend opened with
// BackendConfig.NoSync writes no WAL (Pebble's DisableWAL, as Flink's
// RocksDB backend): its commits (the write cache's flushes at snapshots)
// log no byte, the log file Pebble opens in its directory stays empty,
// and a snapshot still restores every value. Closing it flushes the
// memtable, so a reopened directory still sees every write, with and
// without the write cache (which without NoSync the WAL gave). Without
// NoSync the WAL is written (the metric sees it).
func TestPebbleNoSyncWritesNoWAL(t *testing.T) {
	for _, noSync := range []bool{false, true} {
		for _, cacheBytes := range []int{0, -1} {
			t.Run(fmt.Sprintf("nosync=%v/cache=%d", noSync, cacheBytes), func(t *testing.T) {
				cfg := testConfig(t, KindPebble)
				cfg.NoSync, cfg.WriteCacheBytes = noSync, cacheBytes
				b, err := OpenBackend(cfg)
				must(t, err)
				s := must1(GetValueState(b, ckptValue))(t)
				const n = 2000
				for i := range n {
					b.SetCurrentKey(u64key(uint64(i)))
					must(t, s.Update(int64(i)))
				}
				root := t.TempDir()
				ks := snapshotTo(t, b, SnapshotTarget{Dir: filepath.Join(root, "chk-1"), TaskPath: "op/0",
					SharedDir: filepath.Join(root, "shared"), NoSync: true})
				for i := range n { // after the snapshot: only the close keeps these
					b.SetCurrentKey(u64key(uint64(i)))
					must(t, s.Update(int64(i)+n))
				}
				wal := b.(*pebbleBackend).st.db.Metrics().WAL.BytesIn
				if noSync && wal != 0 {
					t.Fatalf("a NoSync DB wrote %d bytes to its WAL, want 0", wal)
				}
				if !noSync && wal == 0 {
					t.Fatal("a DB without NoSync wrote no WAL: the metric sees nothing, the test proves nothing")
				}
				if noSync {
					logs, err := filepath.Glob(filepath.Join(cfg.Dir, "*.log"))
					must(t, err)
					for _, l := range logs { // Pebble opens one log file, and leaves it empty
						if st, err := os.Stat(l); err != nil || st.Size() != 0 {
							t.Fatalf("a NoSync DB's log file %s: %v, %v; want it empty", l, st.Size(), err)
						}
					}
				}
				must(t, b.Close())

				check := func(what string, kb KeyedStateBackend, add int64) {
					t.Helper()
					ks := must1(GetValueState(kb, ckptValue))(t)
					for i := range n {
						kb.SetCurrentKey(u64key(uint64(i)))
						v, ok, err := ks.Value()
						if err != nil || !ok || v != int64(i)+add {
							t.Fatalf("%s key %d: %d %v %v, want %d", what, i, v, ok, err, int64(i)+add)
						}
					}
				}
				rcfg := testConfig(t, KindPebble)
				rcfg.NoSync = noSync
				r, err := OpenBackendRestored(rcfg, []RestoreHandle{{Handle: ks.Handle, Dir: filepath.Join(root, "chk-1"), SharedDir: filepath.Join(root, "shared")}})
				must(t, err)
				check("restored", r, 0)
				must(t, r.Close())

				re, err := OpenBackend(cfg) // the same directory, reopened
				must(t, err)
				defer re.Close()
				check("reopened", re, n)
			})
		}
	}
}
