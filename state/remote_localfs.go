package state

import (
	"github.com/cockroachdb/pebble/v2/vfs"
)

// unsyncedFS is the local file system of a disaggregated DB's instance
// directory: Pebble's fsyncs there (the WAL, the MANIFEST, the remote
// object catalog, their directory) are no-ops. A remote instance's local
// directory is never reopened: every open and every restore starts a fresh
// directory, and the directories of dead instances are deleted
// (openRemoteDir), so their state comes back from a checkpoint, whose
// tables are durable on the store (dirStore fsyncs each object and its
// rename) before the checkpoint's metadata is written. What an fsync there
// would protect (the local DB surviving a machine crash) is never used.
// Without them a checkpoint's memtable flush and every ingestion of a
// restore write the MANIFEST without waiting for the disk (each restore
// ingestion is one MANIFEST edit, so a restore no longer waits for one
// fsync per level and per L0 table). Like RocksDB's and Flink's
// "disableDataSync" for state that a checkpoint restores; see REMOTE.md.
// A local DB opened with BackendConfig.NoSync uses it too, for the same
// reason (its directory is scratch).
type unsyncedFS struct{ vfs.FS }

// unsyncedFile is a file of unsyncedFS: every sync is a no-op.
type unsyncedFile struct{ vfs.File }

func (unsyncedFile) Sync() error     { return nil }
func (unsyncedFile) SyncData() error { return nil }

// SyncTo reports a full sync: the caller then needs no later Sync.
func (unsyncedFile) SyncTo(int64) (bool, error) { return true, nil }

func unsynced(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return unsyncedFile{f}, nil
}

func (u unsyncedFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return unsynced(u.FS.Create(name, c))
}

func (u unsyncedFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return unsynced(u.FS.Open(name, opts...))
}

func (u unsyncedFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return unsynced(u.FS.OpenReadWrite(name, c, opts...))
}

func (u unsyncedFS) OpenDir(name string) (vfs.File, error) { return unsynced(u.FS.OpenDir(name)) }

func (u unsyncedFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return unsynced(u.FS.ReuseForWrite(oldname, newname, c))
}

// Unwrap implements vfs.FS: the file system underneath.
func (u unsyncedFS) Unwrap() vfs.FS { return u.FS }

// noopWriter is the writer of an object write that is already done: the
// marker Pebble writes after a table it created, which remoteObjects
// wrote before the table (the same name).
type noopWriter struct{}

func (noopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (noopWriter) Close() error                { return nil }
