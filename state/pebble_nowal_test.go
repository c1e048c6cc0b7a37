package state

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

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
