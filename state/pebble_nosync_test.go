package state

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestPebbleStagedSnapshotSharesFiles: a staged snapshot
// (SnapshotTarget.NoSync, a cluster unit's) moves the files of its Pebble
// checkpoint into place instead of copying their bytes: each shared SST is
// the DB's own immutable file (os.SameFile), and the private files are
// there with exactly the staging checkpoint's bytes, which restore whole.
// A durable snapshot (no NoSync) still writes copies of its own.
func TestPebbleStagedSnapshotSharesFiles(t *testing.T) {
	for _, staged := range []bool{false, true} {
		t.Run(fmt.Sprintf("staged=%v", staged), func(t *testing.T) {
			cfg := testConfig(t, KindPebble)
			b := open(t, cfg)
			defer b.Close()
			s := must1(GetValueState(b, ckptValue))(t)
			const n = 2000
			for i := range n {
				b.SetCurrentKey(u64key(uint64(i)))
				must(t, s.Update(int64(3*i)))
			}
			root := t.TempDir()
			shared := filepath.Join(root, "shared")
			ks := snapshotTo(t, b, SnapshotTarget{Dir: filepath.Join(root, "chk-1"), TaskPath: "op/0", SharedDir: shared, NoSync: staged})
			if len(ks.SharedFiles) == 0 {
				t.Fatal("the snapshot names no shared SST: the test proves nothing")
			}
			for _, f := range ks.SharedFiles {
				got, err := os.Stat(filepath.Join(shared, f))
				must(t, err)
				_, name, _ := strings.Cut(f, "-")
				own, err := os.Stat(filepath.Join(cfg.Dir, name))
				must(t, err)
				if os.SameFile(got, own) != staged {
					t.Fatalf("shared %s is the DB's own file: %v, want %v", f, os.SameFile(got, own), staged)
				}
			}
			private, err := os.ReadDir(filepath.Join(root, "chk-1", "op", "0"))
			must(t, err)
			var names []string
			for _, e := range private {
				names = append(names, e.Name())
			}
			if !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "MANIFEST-") }) ||
				!slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "OPTIONS-") }) {
				t.Fatalf("private files %v lack the MANIFEST or OPTIONS", names)
			}
			left, err := filepath.Glob(filepath.Join(filepath.Dir(cfg.Dir), filepath.Base(cfg.Dir)+".snapshot-*"))
			must(t, err)
			if len(left) != 0 {
				t.Fatalf("the snapshot's staging checkpoint is still there: %v", left)
			}
			for i := range n { // the DB goes on; the snapshot must not change
				b.SetCurrentKey(u64key(uint64(i)))
				must(t, s.Update(-1))
			}
			snapshotTo(t, b, SnapshotTarget{Dir: filepath.Join(root, "chk-2"), TaskPath: "op/0", SharedDir: shared, NoSync: staged})
			r, err := OpenBackendRestored(testConfig(t, KindPebble), []RestoreHandle{{Handle: ks.Handle, Dir: filepath.Join(root, "chk-1"), SharedDir: shared}})
			must(t, err)
			defer r.Close()
			rs := must1(GetValueState(r, ckptValue))(t)
			for i := range n {
				r.SetCurrentKey(u64key(uint64(i)))
				v, ok, err := rs.Value()
				if err != nil || !ok || v != int64(3*i) {
					t.Fatalf("restored key %d: %d %v %v, want %d", i, v, ok, err, 3*i)
				}
			}
		})
	}
}
