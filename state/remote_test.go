package state

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// remoteCheckpoint takes a checkpoint of a disaggregated backend b into a
// job-like layout under the parent of the remote store: <root>/chk-<id>
// with the shared directory <root>/shared (so objects are referred to as
// "../remote/<object>").
func remoteCheckpoint(t testing.TB, b KeyedStateBackend, cfg BackendConfig, id int) (RestoreHandle, KeyedSnapshot) {
	t.Helper()
	root := filepath.Dir(cfg.Remote.Dir)
	tgt := SnapshotTarget{Dir: filepath.Join(root, fmt.Sprintf("chk-%d", id)), TaskPath: "op/0", SharedDir: filepath.Join(root, "shared")}
	write, err := SnapshotKeyed(b, tgt)
	if err != nil {
		t.Fatalf("SnapshotKeyed: %v", err)
	}
	snap, err := write(context.Background())
	if err != nil {
		t.Fatalf("snapshot async part: %v", err)
	}
	return RestoreHandle{Handle: snap.Handle, Dir: tgt.Dir, SharedDir: tgt.SharedDir}, snap
}

// reopenRemote is reopen for a disaggregated backend: a checkpoint, a
// close and a restore by reference.
func reopenRemote(t *testing.T, b KeyedStateBackend, cfg BackendConfig, mod func(*BackendConfig)) (KeyedStateBackend, error) {
	t.Helper()
	rh, _ := remoteCheckpoint(t, b, cfg, 1)
	must(t, b.Close())
	if mod != nil {
		mod(&cfg)
	}
	nb, err := OpenBackendRestored(cfg, []RestoreHandle{rh})
	if err == nil {
		t.Cleanup(func() { _ = nb.Close() })
	}
	return nb, err
}

// testStore returns the object store of cfg's remote config.
func testStore(t testing.TB, cfg BackendConfig) remote.Storage {
	t.Helper()
	st, err := cfg.Remote.store()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// storeObjects lists the objects (not markers) and the markers of the
// remote store of cfg, sorted.
func storeObjects(t testing.TB, cfg BackendConfig) (objects, markers []string) {
	t.Helper()
	names, err := testStore(t, cfg).List("", "")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	for _, n := range names {
		if _, ok := markedObject(n); ok {
			markers = append(markers, n)
		} else {
			objects = append(objects, n)
		}
	}
	return objects, markers
}

// fillCounts sets count[k] = v(k) for keys k0..k(n-1) of state "count".
func fillCounts(t testing.TB, b KeyedStateBackend, n int, v func(i int) int64) {
	t.Helper()
	s := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
	for i := range n {
		b.SetCurrentKey([]byte(fmt.Sprintf("k%06d", i)))
		must(t, s.Update(v(i)))
	}
}

// checkCounts asserts count[k] for keys k0..k(n-1): want(i), or absent
// when want reports false; keys outside owns are skipped.
func checkCounts(t testing.TB, b KeyedStateBackend, n int, want func(i int) (int64, bool)) {
	t.Helper()
	s := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
	r := b.KeyGroupRange()
	for i := range n {
		k := []byte(fmt.Sprintf("k%06d", i))
		if !r.Contains(keygroup.Assign(k, testMaxP)) {
			continue
		}
		b.SetCurrentKey(k)
		got, ok, err := s.Value()
		w, wok := want(i)
		if err != nil || ok != wok || (ok && got != w) {
			t.Fatalf("count[%s] = %d, %t, %v; want %d, %t", k, got, ok, err, w, wok)
		}
	}
}

// TestRemoteBackendKeepsTablesOffLocalDisk: a disaggregated backend
// writes its SST files to the store only; the local directory holds no
// .sst file after flushes and a compaction, and the state reads back.
func TestRemoteBackendKeepsTablesOffLocalDisk(t *testing.T) {
	forRemoteKinds(t, func(t *testing.T, kind string) {
		cfg := testConfig(t, kind)
		cfg.WriteCacheBytes = -1
		b := open(t, cfg)
		const n = 20000
		fillCounts(t, b, n, func(i int) int64 { return int64(i) })
		pb := b.(*pebbleBackend)
		must(t, pb.st.db.Flush())
		fillCounts(t, b, n/2, func(i int) int64 { return int64(-i) })
		must(t, pb.st.db.Flush())
		must(t, pb.st.db.Compact(context.Background(), keyGroupsStart, keyGroupsEnd, true))
		must(t, filepath.WalkDir(cfg.Dir, func(p string, _ fs.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(p, ".sst") {
				t.Fatalf("local dir holds table %s", p)
			}
			return err
		}))
		objs, markers := storeObjects(t, cfg)
		if len(objs) == 0 || len(markers) == 0 {
			t.Fatalf("store holds %d objects, %d markers; want both > 0", len(objs), len(markers))
		}
		checkCounts(t, b, n, func(i int) (int64, bool) {
			if i < n/2 {
				return int64(-i), true
			}
			return int64(i), true
		})
		if pb.st.remote.readCount() == 0 {
			t.Fatal("no read reached the store")
		}
	})
}

// TestRemoteRestoreByReference: a checkpoint of a disaggregated backend
// writes no object (its handle refers to the store's objects), a restore
// copies none (it ingests them by reference), and the restored state is
// exactly the checkpoint's: writes after it are absent. Restores into
// half the key groups and into all of them from two halves (rescale
// 1 -> 2 -> 1) are exact too.
func TestRemoteRestoreByReference(t *testing.T) {
	forRemoteKinds(t, func(t *testing.T, kind string) {
		cfg := testConfig(t, kind)
		b := open(t, cfg)
		const n = 3000
		fillCounts(t, b, n, func(i int) int64 { return int64(i) })
		ld := ListStateDescriptor[int64]{Name: "l", Serializer: Int64Serializer{}}
		l := must1(GetListState(b, ld))(t)
		b.SetCurrentKey([]byte("list"))
		must(t, l.Add(1))
		must(t, b.(*pebbleBackend).st.db.Flush())
		must(t, l.Add(2)) // a merge operand in a newer table than the first element
		rh, snap := remoteCheckpoint(t, b, cfg, 1)
		if len(snap.SharedFiles) == 0 {
			t.Fatal("checkpoint refers to no shared file")
		}
		for _, f := range snap.SharedFiles {
			if !strings.HasPrefix(f, "../"+RemoteDirName+"/") {
				t.Fatalf("shared file %q not in the remote store", f)
			}
		}
		if ents, _ := os.ReadDir(filepath.Join(rh.Dir, "op", "0")); len(ents) != 0 {
			t.Fatalf("checkpoint wrote %d private files, want 0", len(ents))
		}
		fillCounts(t, b, 10, func(int) int64 { return 999 }) // after the checkpoint
		must(t, b.Close())
		before, _ := storeObjects(t, cfg)

		want := func(i int) (int64, bool) { return int64(i), true }
		nb, err := OpenBackendRestored(cfg, []RestoreHandle{rh})
		must(t, err)
		checkCounts(t, nb, n, want)
		nl := must1(GetListState(nb, ld))(t)
		nb.SetCurrentKey([]byte("list"))
		if got := collect(t, nl.Get()); !slices.Equal(got, []int64{1, 2}) {
			t.Fatalf("restored list = %v, want [1 2]", got)
		}
		after, _ := storeObjects(t, cfg)
		if !slices.Equal(before, after) {
			t.Fatalf("restore changed the store's objects:\nbefore %v\nafter  %v", before, after)
		}
		must(t, nb.Close())

		// Rescale: two halves, then back into one.
		var halves []RestoreHandle
		for i, r := range []keygroup.Range{{Start: 0, End: testMaxP/2 - 1}, {Start: testMaxP / 2, End: testMaxP - 1}} {
			hc := cfg
			hc.Dir = t.TempDir()
			hc.KeyGroupRange = r
			hb, err := OpenBackendRestored(hc, []RestoreHandle{rh})
			must(t, err)
			checkCounts(t, hb, n, want)
			// Keys outside the range are gone, not just unread.
			if got := storedEntriesIn(t, hb, keygroup.Range{Start: 0, End: testMaxP - 1}); got != storedEntriesIn(t, hb, r) {
				t.Fatalf("half %d holds %d entries, %d inside its key groups", i, got, storedEntriesIn(t, hb, r))
			}
			h, _ := remoteCheckpoint(t, hb, hc, 10+i)
			halves = append(halves, h)
			must(t, hb.Close())
		}
		whole := cfg
		whole.Dir = t.TempDir()
		wb, err := OpenBackendRestored(whole, halves)
		must(t, err)
		defer wb.Close()
		checkCounts(t, wb, n, want)
		wl := must1(GetListState(wb, ld))(t)
		wb.SetCurrentKey([]byte("list"))
		if got := collect(t, wl.Get()); !slices.Equal(got, []int64{1, 2}) {
			t.Fatalf("list after rescale = %v, want [1 2]", got)
		}
		if got, want := storedEntriesIn(t, wb, whole.KeyGroupRange), n+1; got != want {
			t.Fatalf("rescaled backend holds %d entries, want %d", got, want)
		}
	})
}

// storedEntriesIn counts the stored entries of b in the key groups r.
func storedEntriesIn(t testing.TB, b KeyedStateBackend, r keygroup.Range) int {
	t.Helper()
	pb := b.(*pebbleBackend)
	must(t, pb.st.flushCache())
	it, err := pb.st.db.NewIter(nil)
	must(t, err)
	defer it.Close()
	lo, hi := kgBound(r.Start), kgBound(r.End+1)
	c := 0
	for it.SeekGE(lo); it.Valid() && string(it.Key()) < string(hi); it.Next() {
		c++
	}
	return c
}

// TestRemoteRetention: 20 checkpoints of a live disaggregated backend
// with compactions in between, retention keeping the newest 3 (and the
// first, as a restore source): after each garbage collection every
// object a retained checkpoint refers to exists; after the instance
// closed, the store holds exactly the objects the retained checkpoints
// refer to, and no marker; restoring the oldest retained checkpoint
// gives exactly its state.
func TestRemoteRetention(t *testing.T) {
	forRemoteKinds(t, func(t *testing.T, kind string) {
		cfg := testConfig(t, kind)
		cfg.WriteCacheBytes = -1
		b := open(t, cfg)
		type kept struct {
			rh    RestoreHandle
			files []string
			round int
		}
		var retained []kept
		var first kept
		refs := func() map[string]bool {
			m := map[string]bool{}
			for _, k := range append([]kept{first}, retained...) {
				for _, f := range k.files {
					m[strings.TrimPrefix(f, "../"+RemoteDirName+"/")] = true
				}
			}
			return m
		}
		const n = 2000
		for round := 1; round <= 20; round++ {
			fillCounts(t, b, n, func(i int) int64 { return int64(i * round) })
			if round%4 == 0 {
				must(t, b.(*pebbleBackend).st.db.Compact(context.Background(), keyGroupsStart, keyGroupsEnd, true))
			}
			rh, snap := remoteCheckpoint(t, b, cfg, round)
			k := kept{rh: rh, files: snap.SharedFiles, round: round}
			if round == 1 {
				first = k
			} else {
				retained = append(retained, k)
				if len(retained) > 3 {
					retained = retained[1:]
				}
			}
			if _, err := CollectRemoteGarbage(testStore(t, cfg), refs()); err != nil {
				t.Fatal(err)
			}
			for name := range refs() {
				if _, err := testStore(t, cfg).Size(name); err != nil {
					t.Fatalf("round %d: referenced object %s: %v", round, name, err)
				}
			}
		}
		// A table written after the last checkpoint is referenced only by
		// the live instance: kept while it lives, collected once it closed.
		objsBefore, _ := storeObjects(t, cfg)
		fillCounts(t, b, 10, func(int) int64 { return -1 })
		must(t, b.(*pebbleBackend).st.db.Flush())
		objsLive, _ := storeObjects(t, cfg)
		var fresh []string
		for _, o := range objsLive {
			if !slices.Contains(objsBefore, o) {
				fresh = append(fresh, o)
			}
		}
		if len(fresh) != 1 {
			t.Fatalf("flush after the last checkpoint made objects %v, want one", fresh)
		}
		if deleted, err := CollectRemoteGarbage(testStore(t, cfg), refs()); err != nil || slices.Contains(deleted, fresh[0]) {
			t.Fatalf("collection while the instance lives deleted %v (%v); the live table %s must stay", deleted, err, fresh[0])
		}
		must(t, b.Close())
		deleted, err := CollectRemoteGarbage(testStore(t, cfg), refs())
		must(t, err)
		if !slices.Contains(deleted, fresh[0]) {
			t.Fatalf("collection after close deleted %v, want it to include %s", deleted, fresh[0])
		}
		objs, markers := storeObjects(t, cfg)
		var want []string
		for name := range refs() {
			want = append(want, name)
		}
		sort.Strings(want)
		if !slices.Equal(objs, want) || len(markers) != 0 {
			t.Fatalf("store after retention:\nobjects %v\nmarkers %v\nwant objects %v and no marker", objs, markers, want)
		}
		for _, k := range []kept{first, retained[0]} {
			rc := cfg
			rc.Dir = t.TempDir()
			rb, err := OpenBackendRestored(rc, []RestoreHandle{k.rh})
			must(t, err)
			checkCounts(t, rb, n, func(i int) (int64, bool) { return int64(i * k.round), true })
			must(t, rb.Close())
		}
	})
}

// TestRemoteSavepointAndInspect: a savepoint of a disaggregated backend
// (no shared dir) copies its objects into its own directory and restores
// from there (the copies go into the store first); ReadKeyedSnapshot
// reads a remote checkpoint and a remote savepoint, both with exactly the
// entries written.
func TestRemoteSavepointAndInspect(t *testing.T) {
	cfg := testConfig(t, kindPebbleRemote)
	b := open(t, cfg)
	const n = 500
	fillCounts(t, b, n, func(i int) int64 { return int64(i) })
	chk, _ := remoteCheckpoint(t, b, cfg, 1)
	spDir := t.TempDir()
	write, err := SnapshotKeyed(b, SnapshotTarget{Dir: spDir, TaskPath: "op/0"})
	must(t, err)
	snap, err := write(context.Background())
	must(t, err)
	if len(snap.SharedFiles) != 0 || snap.Bytes == 0 {
		t.Fatalf("savepoint: %d shared files, %d bytes; want 0 and > 0", len(snap.SharedFiles), snap.Bytes)
	}
	sp := RestoreHandle{Handle: snap.Handle, Dir: spDir}
	must(t, b.Close())
	for name, rh := range map[string]RestoreHandle{"checkpoint": chk, "savepoint": sp} {
		entries := 0
		_, err := ReadKeyedSnapshot(rh, t.TempDir(), func(e KeyedEntry) error {
			if e.State.Name == "count" {
				entries++
			}
			return nil
		})
		must(t, err)
		if entries != n {
			t.Fatalf("%s: read %d entries, want %d", name, entries, n)
		}
	}
	rc := cfg
	rc.Dir = t.TempDir()
	rb, err := OpenBackendRestored(rc, []RestoreHandle{sp})
	must(t, err)
	defer rb.Close()
	checkCounts(t, rb, n, func(i int) (int64, bool) { return int64(i), true })
}

// TestRemoteInstancesOfOneSubtask: two instances of one subtask (a
// restart whose old instance closes late) each use a local directory of
// their own: closing the old one leaves the new one working (a flush and
// a checkpoint after it restore exactly), and a directory an earlier
// instance left behind unlocked is deleted at the next open.
func TestRemoteInstancesOfOneSubtask(t *testing.T) {
	cfg := testConfig(t, kindPebbleRemote)
	stale := filepath.Join(cfg.Dir, remoteInstancePrefix+"dead")
	must(t, os.MkdirAll(stale, 0o755))
	must(t, os.WriteFile(filepath.Join(stale, "000001.log"), []byte("x"), 0o644))
	oldB, err := OpenBackend(cfg)
	must(t, err)
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stale instance dir left: %v", err)
	}
	fillCounts(t, oldB, 100, func(int) int64 { return 1 })
	newB := open(t, cfg)
	must(t, oldB.Close())
	fillCounts(t, newB, 100, func(i int) int64 { return int64(i) })
	must(t, newB.(*pebbleBackend).st.db.Flush())
	rh, _ := remoteCheckpoint(t, newB, cfg, 1)
	rc := cfg
	rc.Dir = t.TempDir()
	rb, err := OpenBackendRestored(rc, []RestoreHandle{rh})
	must(t, err)
	defer rb.Close()
	checkCounts(t, rb, 100, func(i int) (int64, bool) { return int64(i), true })
}

// TestRemoteDeadInstanceMarkersReleased: an instance that died without
// closing (its DB closed, its markers and local directory left, as after
// kill -9) keeps its objects only until the next instance of the subtask
// opens: that one finds the directory's LOCK free, deletes the dead
// instance's markers and its directory, and retention then deletes
// exactly the dead instance's objects no checkpoint refers to; the live
// instance's objects and markers stay.
func TestRemoteDeadInstanceMarkersReleased(t *testing.T) {
	forRemoteKinds(t, func(t *testing.T, kind string) {
		cfg := testConfig(t, kind)
		dead := open(t, cfg).(*pebbleBackend)
		fillCounts(t, dead, 500, func(i int) int64 { return int64(i) })
		must(t, dead.st.db.Flush())
		must(t, dead.st.db.Close()) // the process dies: no release
		dead.closed = true
		deadObjs, deadMarkers := storeObjects(t, cfg)
		if len(deadObjs) == 0 || len(deadMarkers) == 0 {
			t.Fatalf("dead instance left %d objects, %d markers; want both > 0", len(deadObjs), len(deadMarkers))
		}
		if deleted, err := CollectRemoteGarbage(testStore(t, cfg), nil); err != nil || len(deleted) != 0 {
			t.Fatalf("before the next open retention deleted %v (%v); want nothing: the markers hold them", deleted, err)
		}
		live := open(t, cfg)
		if _, err := os.Stat(dead.st.dir); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("dead instance's dir %s left: %v", dead.st.dir, err)
		}
		fillCounts(t, live, 300, func(i int) int64 { return int64(2 * i) })
		must(t, live.(*pebbleBackend).st.db.Flush())
		deleted, err := CollectRemoteGarbage(testStore(t, cfg), nil)
		must(t, err)
		if !slices.Equal(deleted, deadObjs) {
			t.Fatalf("retention deleted %v, want exactly the dead instance's objects %v", deleted, deadObjs)
		}
		objs, markers := storeObjects(t, cfg)
		if len(objs) == 0 || len(markers) == 0 {
			t.Fatalf("live instance has %d objects, %d markers left", len(objs), len(markers))
		}
		for _, m := range markers {
			if slices.Contains(deadMarkers, m) {
				t.Fatalf("dead marker %s left", m)
			}
		}
		checkCounts(t, live, 300, func(i int) (int64, bool) { return int64(2 * i), true })
	})
}
