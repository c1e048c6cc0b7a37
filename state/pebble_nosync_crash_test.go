package state

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// keepFS is a vfs.FS over vfs.Default that hard-links every file the DB
// creates (Create, and the new name of ReuseForWrite) into keep, so that
// the test can find every inode the DB wrote, whatever names it has later
// (a Pebble checkpoint's hard links, a rename) and after the DB deleted
// its own names, and no inode number is reused while the test runs.
type keepFS struct {
	vfs.FS
	keep string
	n    *atomic.Int64
}

func (k keepFS) kept(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	if lerr := os.Link(name, filepath.Join(k.keep, strconv.FormatInt(k.n.Add(1), 10))); lerr != nil {
		_ = f.Close()
		return nil, lerr
	}
	return f, nil
}

func (k keepFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := k.FS.Create(name, c)
	return k.kept(name, f, err)
}

func (k keepFS) ReuseForWrite(o, n string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := k.FS.ReuseForWrite(o, n, c)
	return k.kept(n, f, err)
}

// crashUnsynced models an OS crash for the files a NoSync DB wrote: every
// inode in keep (none was ever fsynced: the DB's FS is unsyncedFS) loses
// its data, here overwritten with zeros in place, so every other name of
// the same inode sees the loss too.
func crashUnsynced(t *testing.T, keep string) int {
	t.Helper()
	ents, err := os.ReadDir(keep)
	must(t, err)
	for _, e := range ents {
		p := filepath.Join(keep, e.Name())
		st, err := os.Stat(p)
		must(t, err)
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		must(t, err)
		_, err = f.WriteAt(make([]byte, st.Size()), 0)
		must(t, err)
		must(t, f.Close())
	}
	return len(ents)
}

// aliasesOfUnsynced returns the files under root that share an inode with
// a file the NoSync DB wrote (in keep).
func aliasesOfUnsynced(t *testing.T, keep, root string) []string {
	t.Helper()
	ents, err := os.ReadDir(keep)
	must(t, err)
	var kept []os.FileInfo
	for _, e := range ents {
		st, err := os.Stat(filepath.Join(keep, e.Name()))
		must(t, err)
		kept = append(kept, st)
	}
	var out []string
	must(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		for _, k := range kept {
			if os.SameFile(st, k) {
				out = append(out, p)
				break
			}
		}
		return nil
	}))
	return out
}

// nosyncCheckpoint is one completed checkpoint of the crash test and the
// state it must restore.
type nosyncCheckpoint struct {
	dir  string
	snap KeyedSnapshot
	want map[uint64]int64
}

// TestPebbleNoSyncCheckpointsSurviveOSCrash attacks BackendConfig.NoSync
// (a job's keyed subtask DB sends no fsync) with modelled OS crashes: over
// three generations (start, crash, clear the state directory as job.Build
// does, restore from the latest checkpoint, go on), a NoSync DB takes
// incremental checkpoints (SnapshotTarget without NoSync, shared SSTs, as
// a single-process job does), writes more that no checkpoint holds, and
// then "crashes": every byte the DB wrote through its file system (its
// SSTs, WAL, MANIFEST, and the files of its snapshots' staging directory,
// by inode, so under any hard link) is lost. No file of a checkpoint or
// of the shared directory may share an inode with such a file (a hard
// link instead of a synced copy), and every completed checkpoint, of
// every generation, must restore exactly its own values: whole, and split
// in two key-group halves (the rescale path).
func TestPebbleNoSyncCheckpointsSurviveOSCrash(t *testing.T) {
	root := t.TempDir()
	keep := filepath.Join(root, "keep")
	must(t, os.MkdirAll(keep, 0o755))
	var n atomic.Int64
	prev := localFS
	localFS = keepFS{vfs.Default, keep, &n}
	defer func() { localFS = prev }()

	stateRoot := filepath.Join(root, "state", "job") // job.Build's sc.stateRoot
	shared := filepath.Join(root, "checkpoints", "shared")
	cfgFor := func(dir string, r keygroup.Range) BackendConfig {
		return BackendConfig{Kind: KindPebble, Dir: dir, NoSync: true, MaxParallelism: testMaxP, KeyGroupRange: r}
	}
	full := keygroup.Range{Start: 0, End: testMaxP - 1}
	const keys = 1500
	model := map[uint64]int64{}
	var done []nosyncCheckpoint
	var last *nosyncCheckpoint

	for gen := range 3 {
		cfg := cfgFor(filepath.Join(stateRoot, "op", "subtask-0"), full)
		var b KeyedStateBackend
		var err error
		if last == nil {
			b, err = OpenBackend(cfg)
		} else {
			b, err = OpenBackendRestored(cfg, []RestoreHandle{{Handle: last.snap.Handle, Dir: last.dir, SharedDir: shared}})
		}
		must(t, err)
		s := must1(GetValueState(b, ckptValue))(t)
		// The restored DB holds exactly the last checkpoint's state; the
		// model continues from there.
		if last != nil {
			model = clone(last.want)
		}
		for round := range 3 {
			for i := range keys {
				k := uint64(i)
				b.SetCurrentKey(u64key(k))
				switch {
				case (i+gen+round)%7 == 0:
					must(t, s.Clear())
					delete(model, k)
				case (i+round)%3 != 0 || gen+round == 0:
					v := int64(gen*1_000_000 + round*10_000 + i)
					must(t, s.Update(v))
					model[k] = v
				}
			}
			if round == 2 {
				break // written after the last checkpoint: lost by the crash
			}
			dir := filepath.Join(root, "checkpoints", fmt.Sprintf("chk-%d-%d", gen, round))
			ks := snapshotTo(t, b, SnapshotTarget{Dir: dir, TaskPath: "op/0", SharedDir: shared})
			done = append(done, nosyncCheckpoint{dir: dir, snap: ks, want: clone(model)})
			last = &done[len(done)-1]
		}
		must(t, b.Close())
		if got := aliasesOfUnsynced(t, keep, filepath.Join(root, "checkpoints")); len(got) > 0 {
			t.Fatalf("generation %d: checkpoint files share an inode with unsynced DB files (a link, not a synced copy): %v", gen, got)
		}
		if crashUnsynced(t, keep) == 0 {
			t.Fatal("the DB wrote no file through localFS: the crash model sees nothing, the test proves nothing")
		}
		must(t, os.RemoveAll(stateRoot)) // job.Build at the restart
	}

	for _, c := range done {
		// Whole, and rescaled into two halves (rescalePebble).
		for _, r := range []keygroup.Range{full, {Start: 0, End: testMaxP/2 - 1}, {Start: testMaxP / 2, End: testMaxP - 1}} {
			dir := filepath.Join(root, "verify", filepath.Base(c.dir), fmt.Sprint(r.Start))
			rb, err := OpenBackendRestored(cfgFor(dir, r), []RestoreHandle{{Handle: c.snap.Handle, Dir: c.dir, SharedDir: shared}})
			if err != nil {
				t.Fatalf("restore %s into %v after the crash: %v", c.dir, r, err)
			}
			rs := must1(GetValueState(rb, ckptValue))(t)
			seen := 0
			for i := range keys {
				k := uint64(i)
				if !r.Contains(keygroup.Assign(u64key(k), testMaxP)) {
					continue
				}
				rb.SetCurrentKey(u64key(k))
				v, ok, err := rs.Value()
				want, wantOK := c.want[k]
				if err != nil || ok != wantOK || v != want {
					t.Fatalf("%s restored into %v, key %d: %d %v %v, want %d %v", c.dir, r, k, v, ok, err, want, wantOK)
				}
				seen++
			}
			if seen == 0 || (r == full && seen != keys) {
				t.Fatalf("%s into %v: checked %d keys", c.dir, r, seen)
			}
			must(t, rb.Close())
		}
	}
}

func clone(m map[uint64]int64) map[uint64]int64 {
	out := make(map[uint64]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
