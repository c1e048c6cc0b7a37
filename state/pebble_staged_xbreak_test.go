package state

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// TestPebbleStagedSnapshotsOutliveTheirDB attacks the staged snapshot
// that renames its Pebble checkpoint's files into place (placeSnapshotFile:
// a shared SST is then the DB's own file). Two staged snapshots are in
// flight at once (a timed-out checkpoint's finisher still running when the
// next one finishes) and name the same SSTs; the DB then rewrites every
// value, compacts everything (its own names of those SSTs are unlinked),
// closes and its directory is wiped (a unit's restart). Each snapshot
// still restores exactly its own values. A DB restored from the second
// (its SSTs hard links of the shared files) takes a staged snapshot of its
// own, renaming links of those same files under its own instance name,
// and changes and compacts; that snapshot and the first two still restore
// exactly, and the first DB's shared files are untouched.
func TestPebbleStagedSnapshotsOutliveTheirDB(t *testing.T) {
	const n = 1500
	cfg := testConfig(t, KindPebble)
	b, err := OpenBackend(cfg)
	must(t, err)
	s := must1(GetValueState(b, ckptValue))(t)
	set := func(b KeyedStateBackend, s ValueState[int64], f func(i int) int64) {
		t.Helper()
		for i := range n {
			b.SetCurrentKey(u64key(uint64(i)))
			must(t, s.Update(f(i)))
		}
	}
	root := t.TempDir()
	shared := filepath.Join(root, "shared")
	target := func(chk string) SnapshotTarget {
		return SnapshotTarget{Dir: filepath.Join(root, chk), TaskPath: "op/0", SharedDir: shared, NoSync: true}
	}
	set(b, s, func(i int) int64 { return int64(i) })
	finish1, err := SnapshotKeyed(b, target("chk-1"))
	must(t, err)
	set(b, s, func(i int) int64 { return int64(i) + 10_000 }) // only half goes into chk-2
	for i := n / 2; i < n; i++ {
		b.SetCurrentKey(u64key(uint64(i)))
		must(t, s.Update(int64(i)))
	}
	finish2, err := SnapshotKeyed(b, target("chk-2"))
	must(t, err)
	var ks [2]KeyedSnapshot
	var errs [2]error
	var wg sync.WaitGroup
	for i, f := range []func(context.Context) (KeyedSnapshot, error){finish1, finish2} {
		wg.Add(1)
		go func() { defer wg.Done(); ks[i], errs[i] = f(context.Background()) }()
	}
	wg.Wait()
	must(t, errs[0])
	must(t, errs[1])
	common := 0
	for _, f := range ks[0].SharedFiles {
		if slices.Contains(ks[1].SharedFiles, f) {
			common++
		}
	}
	if common == 0 {
		t.Fatalf("the snapshots share no SST (%v, %v): the test proves nothing", ks[0].SharedFiles, ks[1].SharedFiles)
	}
	want1 := func(i int) int64 { return int64(i) }
	want2 := func(i int) int64 {
		if i < n/2 {
			return int64(i) + 10_000
		}
		return int64(i)
	}
	set(b, s, func(i int) int64 { return -1 })
	must(t, b.(*pebbleBackend).st.flushCache())
	must(t, b.(*pebbleBackend).st.db.Compact(context.Background(), []byte{0}, []byte{0xff, 0xff}, true))
	must(t, b.Close())
	must(t, os.RemoveAll(cfg.Dir))

	check := func(name string, ks KeyedSnapshot, chk string, want func(int) int64) KeyedStateBackend {
		t.Helper()
		rcfg := testConfig(t, KindPebble)
		r, err := OpenBackendRestored(rcfg, []RestoreHandle{{Handle: ks.Handle, Dir: filepath.Join(root, chk), SharedDir: shared}})
		must(t, err)
		t.Cleanup(func() { _ = r.Close() })
		rs := must1(GetValueState(r, ckptValue))(t)
		for i := range n {
			r.SetCurrentKey(u64key(uint64(i)))
			v, ok, err := rs.Value()
			if err != nil || !ok || v != want(i) {
				t.Fatalf("%s: key %d: %d %v %v, want %d", name, i, v, ok, err, want(i))
			}
		}
		return r
	}
	check("chk-1 after the DB is gone", ks[0], "chk-1", want1)
	r := check("chk-2 after the DB is gone", ks[1], "chk-2", want2)
	rs := must1(GetValueState(r, ckptValue))(t)
	ks3 := snapshotTo(t, r, target("chk-3"))
	set(r, rs, func(i int) int64 { return -2 })
	must(t, r.(*pebbleBackend).st.flushCache())
	must(t, r.(*pebbleBackend).st.db.Compact(context.Background(), []byte{0}, []byte{0xff, 0xff}, true))
	snapshotTo(t, r, target("chk-4"))
	check("chk-3, the restored DB's", ks3, "chk-3", want2)
	check("chk-1 again", ks[0], "chk-1", want1)
	check("chk-2 again", ks[1], "chk-2", want2)
}
