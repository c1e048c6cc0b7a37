package state

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// syncCountFS is a vfs.FS over vfs.Default counting the syncs that reach
// it (Sync, SyncData, SyncTo of files and directories).
type syncCountFS struct {
	vfs.FS
	syncs *atomic.Int64
}

type syncCountFile struct {
	vfs.File
	syncs *atomic.Int64
}

func (f syncCountFile) Sync() error     { f.syncs.Add(1); return f.File.Sync() }
func (f syncCountFile) SyncData() error { f.syncs.Add(1); return f.File.SyncData() }
func (f syncCountFile) SyncTo(n int64) (bool, error) {
	f.syncs.Add(1)
	return f.File.SyncTo(n)
}

func (c syncCountFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return syncCountFile{f, c.syncs}, nil
}

func (c syncCountFS) Create(name string, k vfs.DiskWriteCategory) (vfs.File, error) {
	return c.wrap(c.FS.Create(name, k))
}

func (c syncCountFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return c.wrap(c.FS.Open(name, opts...))
}

func (c syncCountFS) OpenReadWrite(name string, k vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return c.wrap(c.FS.OpenReadWrite(name, k, opts...))
}

func (c syncCountFS) OpenDir(name string) (vfs.File, error) { return c.wrap(c.FS.OpenDir(name)) }

func (c syncCountFS) ReuseForWrite(o, n string, k vfs.DiskWriteCategory) (vfs.File, error) {
	return c.wrap(c.FS.ReuseForWrite(o, n, k))
}

// opCountStore is a remote.Storage counting the operations on the store
// under it: object opens (ReadObject), reads (ReadAt) and bytes read,
// Size, List, CreateObject of objects and of markers, Delete.
type opCountStore struct {
	remote.Storage
	opens, reads, readBytes, sizes, lists, objects, markers, deletes atomic.Int64
}

// storeOps is a snapshot of an opCountStore's counts.
type storeOps struct{ Opens, Reads, ReadBytes, Sizes, Lists, Objects, Markers, Deletes int64 }

func (c *opCountStore) take() storeOps {
	return storeOps{c.opens.Swap(0), c.reads.Swap(0), c.readBytes.Swap(0), c.sizes.Swap(0),
		c.lists.Swap(0), c.objects.Swap(0), c.markers.Swap(0), c.deletes.Swap(0)}
}

func (c *opCountStore) ReadObject(ctx context.Context, name string) (remote.ObjectReader, int64, error) {
	c.opens.Add(1)
	or, n, err := c.Storage.ReadObject(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	return opCountReader{or, c}, n, nil
}

type opCountReader struct {
	remote.ObjectReader
	c *opCountStore
}

func (r opCountReader) ReadAt(ctx context.Context, p []byte, off int64) error {
	r.c.reads.Add(1)
	r.c.readBytes.Add(int64(len(p)))
	return r.ObjectReader.ReadAt(ctx, p, off)
}

func (c *opCountStore) Size(n string) (int64, error) { c.sizes.Add(1); return c.Storage.Size(n) }

func (c *opCountStore) List(p, d string) ([]string, error) {
	c.lists.Add(1)
	return c.Storage.List(p, d)
}

func (c *opCountStore) CreateObject(n string) (io.WriteCloser, error) {
	if _, ok := markedObject(n); ok {
		c.markers.Add(1)
	} else {
		c.objects.Add(1)
	}
	return c.Storage.CreateObject(n)
}

func (c *opCountStore) Delete(n string) error { c.deletes.Add(1); return c.Storage.Delete(n) }

// TestRemoteRestoreAndCheckpointStoreOps counts what a restore and a
// checkpoint of a disaggregated backend ask of the store and of the local
// disk, for a state of 1 table and of 8: a restore writes one marker, a
// reference list naming every object, and nothing else (no Size or List per object: the handle holds
// each table's bounds and size, and a job's restore verified the objects
// before), and neither a restore nor a checkpoint fsyncs the local
// directory (it is never reopened); a checkpoint asks the store for the
// size of its new table only and writes its marker once (Pebble's marker
// after the table is the one written before it).
func TestRemoteRestoreAndCheckpointStoreOps(t *testing.T) {
	for _, tables := range []int{1, 8} {
		t.Run(fmt.Sprintf("tables=%d", tables), func(t *testing.T) {
			root := t.TempDir()
			ds := must1(NewRemoteDirStore(filepath.Join(root, RemoteDirName)))(t)
			cs := &opCountStore{Storage: ds}
			syncs := &atomic.Int64{}
			cfg := BackendConfig{Kind: KindPebble, Dir: filepath.Join(root, "a"), MaxParallelism: testMaxP,
				KeyGroupRange: keygroup.Range{Start: 0, End: testMaxP - 1}, WriteCacheBytes: -1,
				L0CompactionThreshold: 1000, // the flushes stay tables of their own
				Remote: &RemoteConfig{Dir: filepath.Join(root, RemoteDirName), CacheBytes: 1 << 20, Store: cs,
					localFS: syncCountFS{vfs.Default, syncs}}}
			b := open(t, cfg)
			const per = 500
			for f := range tables {
				s := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
				for i := f * per; i < (f+1)*per; i++ {
					b.SetCurrentKey([]byte(fmt.Sprintf("k%06d", i)))
					must(t, s.Update(int64(i)))
				}
				must(t, b.(*pebbleBackend).st.db.Flush())
			}
			rh, _ := remoteCheckpoint(t, b, cfg, 1)
			var h keyedHandle
			must(t, json.Unmarshal(rh.Handle, &h))
			objs := map[string]bool{}
			for _, f := range h.Files {
				objs[path.Base(f.Path)] = true
			}
			if len(objs) < tables {
				t.Fatalf("checkpoint names %d objects, want at least %d", len(objs), tables)
			}
			must(t, b.Close())

			cs.take()
			syncs.Store(0)
			rcfg := cfg
			rcfg.Dir = filepath.Join(root, "b")
			nb := must1(OpenBackendRestored(rcfg, []RestoreHandle{rh}))(t)
			t.Cleanup(func() { _ = nb.Close() })
			ops := cs.take()
			if ops.Sizes != 0 || ops.Lists != 0 || ops.Objects != 0 || ops.Deletes != 0 || ops.Markers != 1 {
				t.Errorf("restore of %d objects: %+v; want one marker (a reference list of them all) and no Size, List, object or Delete", len(objs), ops)
			}
			if n := syncs.Load(); n != 0 {
				t.Errorf("restore fsynced the local directory %d times, want 0", n)
			}
			checkCounts(t, nb, tables*per, func(i int) (int64, bool) { return int64(i), true })
			if tables > 1 {
				return // compactions of the restored tables may run during a checkpoint
			}

			s := must1(GetValueState(nb, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
			nb.SetCurrentKey([]byte("k999999"))
			must(t, s.Update(7))
			cs.take()
			syncs.Store(0)
			remoteCheckpoint(t, nb, rcfg, 2)
			ops = cs.take()
			// The flushed memtable: one object, one marker, one Size (the
			// restored objects' sizes came with the handle).
			if ops.Objects != 1 || ops.Markers != 1 || ops.Sizes != 1 || ops.Lists != 0 {
				t.Errorf("checkpoint after restore: %+v; want 1 object, 1 marker, 1 Size, no List", ops)
			}
			if n := syncs.Load(); n != 0 {
				t.Errorf("checkpoint fsynced the local directory %d times, want 0", n)
			}
		})
	}
}
