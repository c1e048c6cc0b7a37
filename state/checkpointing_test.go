package state

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

var ckptValue = ValueStateDescriptor[int64]{Name: "value", Serializer: Int64Serializer{}}

// snapshotOf snapshots b into dir/op/0 (shared files under shared when not
// "") and returns the written snapshot.
func snapshotOf(t *testing.T, b KeyedStateBackend, dir, shared string) KeyedSnapshot {
	t.Helper()
	return snapshotTo(t, b, SnapshotTarget{Dir: dir, TaskPath: "op/0", SharedDir: shared})
}

// snapshotTo snapshots b into target and returns the written snapshot.
func snapshotTo(t *testing.T, b KeyedStateBackend, target SnapshotTarget) KeyedSnapshot {
	t.Helper()
	finish, err := SnapshotKeyed(b, target)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := finish(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// filledBackend opens a backend of kind over every key group with n keys
// in a value state (key i holds i).
func filledBackend(t *testing.T, kind string, n int) KeyedStateBackend {
	t.Helper()
	b := open(t, testConfig(t, kind))
	s := must1(GetValueState(b, ckptValue))(t)
	for i := range n {
		b.SetCurrentKey(u64key(uint64(i)))
		must(t, s.Update(int64(i)))
	}
	return b
}

// TestRestoreRefusesChangedMaxParallelism: restoring a snapshot with
// another max parallelism fails with ErrMaxParallelismChanged and a message
// naming both values.
func TestRestoreRefusesChangedMaxParallelism(t *testing.T) {
	for _, kind := range backendKinds {
		for _, tc := range []struct{ taken, now int }{{128, 256}, {256, 128}, {128, 1}} {
			t.Run(fmt.Sprintf("%s/%d->%d", kind, tc.taken, tc.now), func(t *testing.T) {
				cfg := testConfig(t, kind)
				cfg.MaxParallelism, cfg.KeyGroupRange = tc.taken, keygroup.Range{Start: 0, End: tc.taken - 1}
				b := open(t, cfg)
				dir := t.TempDir()
				ks := snapshotOf(t, b, dir, "")
				restore := testConfig(t, kind)
				restore.MaxParallelism, restore.KeyGroupRange = tc.now, keygroup.Range{Start: 0, End: tc.now - 1}
				got, err := OpenBackendRestored(restore, []RestoreHandle{{Handle: ks.Handle, Dir: dir}})
				if err == nil {
					got.Close()
					t.Fatal("restore with another max parallelism succeeded")
				}
				want := fmt.Sprintf("state: checkpoint was taken with max parallelism %d, the job now has %d: ", tc.taken, tc.now)
				if !errors.Is(err, ErrMaxParallelismChanged) || !strings.HasPrefix(err.Error(), want) {
					t.Fatalf("err = %v, want ErrMaxParallelismChanged starting %q", err, want)
				}
			})
		}
	}
}

func TestRestoreRefusesBadHandles(t *testing.T) {
	hm := open(t, testConfig(t, KindHashmap))
	dir := t.TempDir()
	ks := snapshotOf(t, hm, dir, "")
	for _, tc := range []struct {
		name    string
		kind    string
		handle  json.RawMessage
		is      error
		message string
	}{
		{name: "other backend", kind: KindPebble, handle: ks.Handle,
			message: "state: checkpoint holds hashmap state, the job now uses the pebble backend (switching backends needs a savepoint of the other kind, not supported yet)"},
		{name: "undecodable", kind: KindHashmap, handle: json.RawMessage(`{"backend": 7}`), is: ErrCorrupt},
		{name: "truncated", kind: KindPebble, handle: json.RawMessage(`{`), is: ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := OpenBackendRestored(testConfig(t, tc.kind), []RestoreHandle{{Handle: tc.handle, Dir: dir}})
			if err == nil {
				b.Close()
				t.Fatal("restore succeeded")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			if tc.message != "" && err.Error() != tc.message {
				t.Fatalf("err = %q, want %q", err, tc.message)
			}
		})
	}
}

// stagingDirs returns the snapshot staging directories beside a Pebble DB.
func stagingDirs(t *testing.T, dbDir string) []string {
	t.Helper()
	m, err := filepath.Glob(dbDir + ".snapshot-*")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// handleOf decodes a snapshot handle.
func handleOf(t *testing.T, ks KeyedSnapshot) keyedHandle {
	t.Helper()
	var h keyedHandle
	must(t, json.Unmarshal(ks.Handle, &h))
	return h
}

// TestPebbleSnapshotFiles checks what a Pebble snapshot writes: a full one
// only private files (and no WAL, which the flush before it emptied), an
// incremental one its SSTs under the shared directory, uploaded once: an
// unchanged backend's next incremental snapshot writes only its small
// private files. Bytes is what was written; the staging directory is gone
// afterwards.
func TestPebbleSnapshotFiles(t *testing.T) {
	cfg := testConfig(t, KindPebble)
	b := open(t, cfg)
	s := must1(GetValueState(b, ckptValue))(t)
	for i := range 5000 {
		b.SetCurrentKey(u64key(uint64(i)))
		must(t, s.Update(int64(i)))
	}
	root := t.TempDir()
	shared := filepath.Join(root, "shared")
	sizeOnDisk := func(dir string, f fileRef) int64 {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if f.Shared {
			p = filepath.Join(shared, filepath.FromSlash(f.Path))
		}
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		if st.Size() != f.Size {
			t.Fatalf("%s holds %d bytes, the handle says %d", f.Path, st.Size(), f.Size)
		}
		return st.Size()
	}
	check := func(name string, ks KeyedSnapshot, dir string, wantShared bool, wantBytes func(f fileRef) bool) keyedHandle {
		t.Helper()
		h := handleOf(t, ks)
		if h.Backend != KindPebble || h.MaxParallelism != testMaxP || h.KeyGroups != cfg.KeyGroupRange {
			t.Fatalf("%s: handle %+v", name, h)
		}
		var bytes int64
		var sharedFiles []string
		sst := 0
		for _, f := range h.Files {
			if strings.HasSuffix(f.Name, ".log") {
				t.Fatalf("%s: snapshot holds WAL file %s", name, f.Name)
			}
			if strings.HasSuffix(f.Name, ".sst") {
				sst++
			}
			if f.Shared != (wantShared && strings.HasSuffix(f.Name, ".sst")) {
				t.Fatalf("%s: file %+v shared %v", name, f, f.Shared)
			}
			size := sizeOnDisk(dir, f)
			if f.Shared {
				sharedFiles = append(sharedFiles, f.Path)
			} else if f.Path != "op/0/"+f.Name {
				t.Fatalf("%s: private file at %s", name, f.Path)
			}
			if wantBytes(f) {
				bytes += size
			}
		}
		if sst == 0 {
			t.Fatalf("%s: no SST in the snapshot", name)
		}
		if ks.Bytes != bytes {
			t.Fatalf("%s: Bytes = %d, want %d", name, ks.Bytes, bytes)
		}
		if !slices.Equal(ks.SharedFiles, sharedFiles) {
			t.Fatalf("%s: SharedFiles = %q, want %q", name, ks.SharedFiles, sharedFiles)
		}
		if st := stagingDirs(t, cfg.Dir); len(st) != 0 {
			t.Fatalf("%s: staging dirs left: %q", name, st)
		}
		return h
	}
	all := func(fileRef) bool { return true }
	check("full", snapshotOf(t, b, filepath.Join(root, "full"), ""), filepath.Join(root, "full"), false, all)
	first := check("incremental", snapshotOf(t, b, filepath.Join(root, "1"), shared), filepath.Join(root, "1"), true, all)
	second := check("unchanged", snapshotOf(t, b, filepath.Join(root, "2"), shared), filepath.Join(root, "2"), true, func(f fileRef) bool { return !f.Shared })
	var a, c []string
	for _, f := range first.Files {
		if f.Shared {
			a = append(a, f.Path)
		}
	}
	for _, f := range second.Files {
		if f.Shared {
			c = append(c, f.Path)
		}
	}
	if !slices.Equal(a, c) {
		t.Fatalf("unchanged backend's shared files changed: %q -> %q", a, c)
	}

	// A snapshot whose writing is cancelled fails and leaves no staging.
	finish, err := SnapshotKeyed(b, SnapshotTarget{Dir: filepath.Join(root, "3"), TaskPath: "op/0", SharedDir: shared})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := finish(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled snapshot = %v", err)
	}
	if st := stagingDirs(t, cfg.Dir); len(st) != 0 {
		t.Fatalf("staging dirs left after a cancelled snapshot: %q", st)
	}
	must(t, b.Close())
	if _, err := SnapshotKeyed(b, SnapshotTarget{Dir: filepath.Join(root, "4"), TaskPath: "op/0"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("snapshot of a closed backend = %v, want ErrClosed", err)
	}
}

// TestKeyedSnapshotRoundTrip restores a snapshot at the same key groups (one
// handle: the Pebble files are materialized as the DB) and reads every
// value; for Pebble both self-contained and incremental snapshots.
func TestKeyedSnapshotRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		kind   string
		shared bool
		noSync bool // a cluster unit's staging copy (SnapshotTarget.NoSync)
	}{{KindHashmap, false, false}, {KindPebble, false, false}, {KindPebble, true, false}, {KindPebble, false, true}, {KindPebble, true, true}} {
		t.Run(fmt.Sprintf("%s/shared=%v/nosync=%v", tc.kind, tc.shared, tc.noSync), func(t *testing.T) {
			const n = 2000
			b := filledBackend(t, tc.kind, n)
			root := t.TempDir()
			shared := ""
			if tc.shared {
				shared = filepath.Join(root, "shared")
			}
			ks := snapshotTo(t, b, SnapshotTarget{Dir: filepath.Join(root, "chk"), TaskPath: "op/0", SharedDir: shared, NoSync: tc.noSync})
			// Changes after the snapshot are not in it.
			s := must1(GetValueState(b, ckptValue))(t)
			b.SetCurrentKey(u64key(0))
			must(t, s.Update(-1))
			r, err := OpenBackendRestored(testConfig(t, tc.kind), []RestoreHandle{{Handle: ks.Handle, Dir: filepath.Join(root, "chk"), SharedDir: shared}})
			must(t, err)
			defer r.Close()
			rs := must1(GetValueState(r, ckptValue))(t)
			for i := range n {
				r.SetCurrentKey(u64key(uint64(i)))
				v, ok, err := rs.Value()
				if err != nil || !ok || v != int64(i) {
					t.Fatalf("key %d: %d %v %v", i, v, ok, err)
				}
			}
			if got := storedEntries(t, r); got != n {
				t.Fatalf("restored %d entries, want %d", got, n)
			}
		})
	}
}

// TestHashmapRestoreKeepsOneMetaPerState: restoring a hashmap backend from
// several snapshots keeps one metadata record per state (each snapshot
// carries them all), so they do not multiply across rescales.
func TestHashmapRestoreKeepsOneMetaPerState(t *testing.T) {
	root := t.TempDir()
	other := ValueStateDescriptor[string]{Name: "other", Serializer: StringSerializer{}}
	var handles []RestoreHandle
	for i := range 2 {
		cfg := testConfig(t, KindHashmap)
		cfg.KeyGroupRange = keygroup.RangeFor(testMaxP, 2, i)
		b := open(t, cfg)
		must1(GetValueState(b, ckptValue))(t)
		if i == 1 {
			must1(GetValueState(b, other))(t)
		}
		dir := filepath.Join(root, fmt.Sprint(i))
		handles = append(handles, RestoreHandle{Handle: snapshotOf(t, b, dir, "").Handle, Dir: dir})
	}
	for round := range 3 {
		b, err := OpenBackendRestored(testConfig(t, KindHashmap), handles)
		must(t, err)
		var names []string
		for _, m := range b.(*hashmapBackend).st.metas {
			names = append(names, m.Name)
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"other", "value"}) {
			t.Fatalf("round %d: state metadata records %q, want [other value]", round, names)
		}
		dir := filepath.Join(root, fmt.Sprint("r", round))
		h := RestoreHandle{Handle: snapshotOf(t, b, dir, "").Handle, Dir: dir}
		handles = []RestoreHandle{h, h} // as a scale-down merging copies would
		must(t, b.Close())
	}
}

// TestApplyToAllKeys: fn runs once for every key with state under the
// descriptor (not for keys with only other states), with that key current;
// its changes stick; the previous current key is restored; an error stops
// the walk and is returned.
func TestApplyToAllKeys(t *testing.T) {
	items := MapStateDescriptor[string, string]{Name: "items", KeySerializer: StringSerializer{}, ValueSerializer: StringSerializer{}}
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			b := open(t, testConfig(t, kind))
			m := must1(GetMapState(b, items))(t)
			v := must1(GetValueState(b, ckptValue))(t)
			want := map[string]bool{}
			for i := range 50 {
				k := fmt.Sprintf("k%02d", i)
				want[k] = true
				b.SetCurrentKey([]byte(k))
				must(t, m.Put("r1", "one"))
				must(t, m.Put("r2", "two"))
				must(t, v.Update(int64(i)))
			}
			b.SetCurrentKey([]byte("only-value"))
			must(t, v.Update(7))
			b.SetCurrentKey([]byte("k07"))

			visited := map[string]int{}
			err := ApplyToAllKeys(b, items, func(key []byte, s MapState[string, string]) error {
				visited[string(key)]++
				if string(b.CurrentKey()) != string(key) {
					return fmt.Errorf("current key %s while visiting %s", b.CurrentKey(), key)
				}
				return s.Remove("r1")
			})
			must(t, err)
			if len(visited) != len(want) {
				t.Fatalf("visited %d keys, want %d", len(visited), len(want))
			}
			for k, n := range visited {
				if !want[k] || n != 1 {
					t.Fatalf("visited %s %d times", k, n)
				}
			}
			if string(b.CurrentKey()) != "k07" {
				t.Fatalf("current key after ApplyToAllKeys = %s, want k07", b.CurrentKey())
			}
			for i := range 50 {
				b.SetCurrentKey(fmt.Appendf(nil, "k%02d", i))
				got := map[string]string{}
				for e, err := range m.Entries() {
					must(t, err)
					got[e.Key] = e.Value
				}
				if !maps.Equal(got, map[string]string{"r2": "two"}) {
					t.Fatalf("k%02d holds %v after removing r1 everywhere", i, got)
				}
				if n, ok, err := v.Value(); err != nil || !ok || n != int64(i) {
					t.Fatalf("k%02d value state changed: %d %v %v", i, n, ok, err)
				}
			}

			// Emptied maps have no key left to visit; an error stops the walk.
			must(t, ApplyToAllKeys(b, items, func(_ []byte, s MapState[string, string]) error { return s.Clear() }))
			calls := 0
			must(t, ApplyToAllKeys(b, items, func([]byte, MapState[string, string]) error { calls++; return nil }))
			if calls != 0 {
				t.Fatalf("visited %d keys after clearing every map", calls)
			}
			b.SetCurrentKey([]byte("k01"))
			must(t, m.Put("r1", "again"))
			b.SetCurrentKey([]byte("k02"))
			must(t, m.Put("r1", "again"))
			boom := errors.New("boom")
			calls = 0
			err = ApplyToAllKeys(b, items, func([]byte, MapState[string, string]) error { calls++; return boom })
			if !errors.Is(err, boom) || calls != 1 {
				t.Fatalf("ApplyToAllKeys = %v after %d calls, want boom after 1", err, calls)
			}
		})
	}
}

func TestStateIDIsTheNameHash(t *testing.T) {
	for _, name := range []string{"value", "shape-pair-items", ""} {
		if got, want := StateID(name), uint32(keygroup.Hash([]byte(name))); got != want {
			t.Fatalf("StateID(%q) = %d, want %d", name, got, want)
		}
	}
}

// TestConcurrentIncrementalSnapshots: two snapshots of one backend written
// at once (the finisher of a timed-out checkpoint still runs when the next
// one starts) upload the same shared SSTs; both succeed, no temporary file
// is left, and each restores the full state.
func TestConcurrentIncrementalSnapshots(t *testing.T) {
	const n = 100_000
	b := filledBackend(t, KindPebble, n)
	root := t.TempDir()
	for round := range 3 {
		shared := filepath.Join(root, fmt.Sprint("shared-", round))
		var finishers []func(context.Context) (KeyedSnapshot, error)
		var dirs []string
		for k := range 2 {
			dir := filepath.Join(root, fmt.Sprint(round, "-", k))
			f, err := SnapshotKeyed(b, SnapshotTarget{Dir: dir, TaskPath: "op/0", SharedDir: shared})
			must(t, err)
			finishers, dirs = append(finishers, f), append(dirs, dir)
		}
		snaps := make([]KeyedSnapshot, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for k, f := range finishers {
			wg.Go(func() { snaps[k], errs[k] = f(context.Background()) })
		}
		wg.Wait()
		for k, err := range errs {
			if err != nil {
				t.Fatalf("round %d: snapshot %d: %v", round, k, err)
			}
		}
		ents, err := os.ReadDir(shared)
		must(t, err)
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".sst") {
				t.Fatalf("round %d: %s left in the shared dir", round, e.Name())
			}
		}
		for k, ks := range snaps {
			r, err := OpenBackendRestored(testConfig(t, KindPebble), []RestoreHandle{{Handle: ks.Handle, Dir: dirs[k], SharedDir: shared}})
			must(t, err)
			if got := storedEntries(t, r); got != n {
				t.Fatalf("round %d: snapshot %d restores %d entries, want %d", round, k, got, n)
			}
			must(t, r.Close())
		}
	}
}

// TestRestoreLogsProgress: a Pebble restore logs "restoring keyed state"
// with bytes done and in all (here after every file, the interval being
// tiny), ending at the total of the handle's files, then one "keyed state
// materialized" line.
func TestRestoreLogsProgress(t *testing.T) {
	b := filledBackend(t, KindPebble, 2000)
	root := t.TempDir()
	ks := snapshotOf(t, b, filepath.Join(root, "chk"), filepath.Join(root, "shared"))
	var h keyedHandle
	must(t, json.Unmarshal(ks.Handle, &h))
	var total int64
	for _, f := range h.Files {
		total += f.Size
	}
	var logs bytes.Buffer
	cfg := testConfig(t, KindPebble)
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	cfg.RestoreProgressInterval = time.Nanosecond
	r, err := OpenBackendRestored(cfg, []RestoreHandle{{Handle: ks.Handle, Dir: filepath.Join(root, "chk"), SharedDir: filepath.Join(root, "shared")}})
	must(t, err)
	defer r.Close()
	var progress []map[string]any
	var finished int
	for _, l := range bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n")) {
		var m map[string]any
		must(t, json.Unmarshal(l, &m))
		switch m["msg"] {
		case "restoring keyed state":
			progress = append(progress, m)
		case "keyed state materialized":
			finished++
			if m["bytes_total"] != float64(total) || m["files_total"] != float64(len(h.Files)) {
				t.Errorf("final line %v, want bytes_total %d files_total %d", m, total, len(h.Files))
			}
		}
	}
	if len(progress) != len(h.Files) || finished != 1 {
		t.Fatalf("%d progress lines and %d final ones, want %d and 1:\n%s", len(progress), finished, len(h.Files), logs.String())
	}
	last := progress[len(progress)-1]
	if last["bytes_done"] != float64(total) || last["bytes_total"] != float64(total) || last["files_done"] != float64(len(h.Files)) {
		t.Fatalf("last progress line %v, want bytes_done = bytes_total = %d, files_done %d", last, total, len(h.Files))
	}
}

// TestPebbleSnapshotSyncsEachDirectoryOnce: a Pebble snapshot fsyncs each
// directory it copies files into once, after the last file is in place
// (every file of the handle in that directory is there at the fsync), not
// once per file, and the shared directory even when every SST was there
// already; a staging snapshot (NoSync) fsyncs none. Files outside
// this test's root (other tests' snapshots) are not counted.
func TestPebbleSnapshotSyncsEachDirectoryOnce(t *testing.T) {
	for _, tc := range []struct {
		shared, noSync bool
	}{{false, false}, {true, false}, {true, true}} {
		t.Run(fmt.Sprintf("shared=%v/nosync=%v", tc.shared, tc.noSync), func(t *testing.T) {
			root := t.TempDir()
			var mu sync.Mutex
			synced := map[string][]string{} // directory -> its entries at each fsync
			var order []string
			prev := syncSnapshotDir
			syncSnapshotDir = func(dir string) error {
				if rel, err := filepath.Rel(root, dir); err == nil && !strings.HasPrefix(rel, "..") {
					ents, err := os.ReadDir(dir)
					if err != nil {
						return err
					}
					mu.Lock()
					order = append(order, filepath.ToSlash(rel))
					for _, e := range ents {
						synced[filepath.ToSlash(rel)] = append(synced[filepath.ToSlash(rel)], e.Name())
					}
					mu.Unlock()
				}
				return prev(dir)
			}
			defer func() { syncSnapshotDir = prev }()

			// Several SSTs: three flushes of a third of the keys each (Pebble may
			// compact some together: at least two stay).
			b := open(t, testConfig(t, KindPebble))
			defer b.Close()
			s := must1(GetValueState(b, ckptValue))(t)
			pb := b.(*pebbleBackend)
			for part := range 3 {
				for i := part * 500; i < (part+1)*500; i++ {
					b.SetCurrentKey(u64key(uint64(i)))
					must(t, s.Update(int64(i)))
				}
				must(t, pb.st.flushCache())
				must(t, pb.st.db.Flush())
			}
			shared := ""
			if tc.shared {
				shared = filepath.Join(root, "shared")
			}
			ks := snapshotTo(t, b, SnapshotTarget{Dir: filepath.Join(root, "chk"), TaskPath: "op/0", SharedDir: shared, NoSync: tc.noSync})
			var h keyedHandle
			must(t, json.Unmarshal(ks.Handle, &h))
			want := map[string][]string{} // directory -> the handle's files in it
			ssts := 0
			for _, f := range h.Files {
				dir, p := "chk", f.Path
				if f.Shared {
					dir = "shared"
				}
				if strings.HasSuffix(f.Name, ".sst") {
					ssts++
				}
				full := filepath.ToSlash(filepath.Join(dir, p))
				want[path.Dir(full)] = append(want[path.Dir(full)], path.Base(full))
			}
			if ssts < 2 {
				t.Fatalf("the snapshot has %d SSTs, want at least 2 (the test needs several files per directory)", ssts)
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.noSync {
				if len(order) != 0 {
					t.Fatalf("a staging snapshot fsynced %q, want none", order)
				}
				return
			}
			wantDirs := make([]string, 0, len(want))
			for d := range want {
				wantDirs = append(wantDirs, d)
			}
			slices.Sort(wantDirs)
			got := slices.Clone(order)
			slices.Sort(got)
			if !slices.Equal(got, wantDirs) {
				t.Fatalf("fsynced directories %q, want each of %q once", order, wantDirs)
			}
			for d, files := range want {
				for _, f := range files {
					if !slices.Contains(synced[d], f) {
						t.Errorf("%s/%s was not in place when %s was fsynced (entries then: %q)", d, f, d, synced[d])
					}
				}
			}
			if !tc.shared {
				return
			}
			// A second snapshot that copies no new SST (every one is in
			// the shared directory) still fsyncs the shared directory
			// once: another snapshot may have copied a file it names
			// without having synced the directory yet.
			order = nil
			mu.Unlock()
			snapshotTo(t, b, SnapshotTarget{Dir: filepath.Join(root, "chk2"), TaskPath: "op/0", SharedDir: shared})
			mu.Lock()
			got = slices.Clone(order)
			slices.Sort(got)
			if want := []string{"chk2/op/0", "shared"}; !slices.Equal(got, want) {
				t.Fatalf("second snapshot fsynced %q, want each of %q once", order, want)
			}
		})
	}
}
