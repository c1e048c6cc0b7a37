package state

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
)

// Restores across the two kinds of Pebble state (Flink lets a job switch
// state backends through a savepoint; here any checkpoint or savepoint of
// one kind restores into the other):
//
//   - local -> remote (localAsRemote): the local snapshot's tables are
//     listed with their levels, sequence numbers and bounds by opening
//     the snapshot read-only, then restored as a remote snapshot's are:
//     each SST file is copied into the store once (an "import-" object)
//     and ingested by reference, clipped to the owned key groups.
//   - remote -> local (openLocalFromRemote): a scratch disaggregated
//     instance ingests the remote snapshot's tables by reference (no
//     download), and the entries of the owned key groups and the
//     metadata are copied into a fresh local DB.

// localAsRemote returns the local Pebble snapshot h (restore handle rh)
// described as a remote snapshot: one file per table with its level,
// largest sequence number and key bounds, each file's path the SST file's
// in the checkpoint (ingestRemote copies it into the store). The snapshot
// is materialized (hard links) under a scratch directory beside cfg.Dir
// and opened read-only to list its tables.
func localAsRemote(cfg BackendConfig, rh RestoreHandle, h keyedHandle) (keyedHandle, error) {
	tmp, err := os.MkdirTemp(filepath.Dir(cfg.Dir), filepath.Base(cfg.Dir)+".convert-")
	if err != nil {
		return keyedHandle{}, err
	}
	defer os.RemoveAll(tmp)
	if err := materialize(rh, h, tmp, newRestoreProgress(BackendConfig{Logger: slog.New(slog.DiscardHandler)}, nil)); err != nil {
		return keyedHandle{}, err
	}
	db, err := pebble.Open(tmp, rawPebbleOptions(cfg, true))
	if err != nil {
		return keyedHandle{}, fmt.Errorf("state: restore local snapshot into remote state: open %s: %w", tmp, err)
	}
	levels, err := db.SSTables()
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return keyedHandle{}, fmt.Errorf("state: restore local snapshot into remote state: list tables: %w", err)
	}
	byName := map[string]fileRef{}
	for _, f := range h.Files {
		byName[f.Name] = f
	}
	out := keyedHandle{Backend: h.Backend, KeyGroups: h.KeyGroups, MaxParallelism: h.MaxParallelism, Remote: true}
	for lvl, tables := range levels {
		for _, ti := range tables {
			if ti.BackingType != pebble.BackingTypeLocal {
				return keyedHandle{}, fmt.Errorf("state: restore local snapshot into remote state: table %s is not a local file (backing type %d)", ti.FileNum, ti.BackingType)
			}
			name := fmt.Sprintf("%06d.sst", uint64(ti.BackingSSTNum))
			f, ok := byName[name]
			if !ok {
				return keyedHandle{}, fmt.Errorf("state: restore local snapshot into remote state: table %s is not among the snapshot's files: %w", name, ErrCorrupt)
			}
			out.Files = append(out.Files, fileRef{Name: name, Path: f.Path, Shared: f.Shared, Size: f.Size, remoteTable: remoteTable{
				Level: lvl, Seq: uint64(ti.LargestSeqNum),
				Start: ti.Smallest.UserKey, End: ti.Largest.UserKey,
				EndInclusive: !ti.Largest.IsExclusiveSentinel(), RefBytes: ti.Size,
			}})
		}
	}
	return out, nil
}

// openLocalFromRemote is OpenBackendRestored for a local Pebble backend
// from snapshots of which at least one is disaggregated: a scratch
// disaggregated instance (beside cfg.Dir, no cache) restores every
// snapshot by reference for cfg's key groups, and its entries there plus
// the metadata space are copied into a fresh local DB in cfg.Dir. The
// objects are read where the snapshots refer to them: on
// RestoreHandle.RemoteStore when set (an S3 store), else in the
// directory "../remote" of their shared directory.
func openLocalFromRemote(cfg BackendConfig, handles []RestoreHandle, hs []keyedHandle) (KeyedStateBackend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(cfg.Dir), filepath.Base(cfg.Dir)+".from-remote-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	rcfg := cfg
	rcfg.Dir = filepath.Join(tmp, "db")
	rcfg.WriteCacheBytes = -1
	rcfg.TTLCleanup = TTLCleanupConfig{Disabled: true}
	for i, h := range hs {
		if h.Remote {
			rcfg.Remote = inspectRemote(handles[i], h, tmp)
			break
		}
	}
	src, err := openRemoteRestored(rcfg, handles, hs)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if err := os.RemoveAll(cfg.Dir); err != nil {
		return nil, err
	}
	db, err := pebble.Open(cfg.Dir, rawPebbleOptions(cfg, false))
	if err != nil {
		return nil, fmt.Errorf("state: restore: open %s: %w", cfg.Dir, err)
	}
	r := cfg.KeyGroupRange
	sdb := src.(*pebbleBackend).st.db
	err = copySpan(sdb, db, kgBound(r.Start), kgBound(r.End+1))
	if err == nil {
		err = copySpan(sdb, db, keyGroupsEnd, nil) // format and state metadata
	}
	if err == nil {
		err = db.Flush()
	}
	if err = errors.Join(err, db.Close()); err != nil {
		return nil, fmt.Errorf("state: restore remote snapshot into local state: %w", err)
	}
	return OpenBackend(cfg)
}

// copySpan copies the entries of src in [from, to) (to nil: unbounded)
// into dst, in batches of about 4 MiB, unsynced (the caller flushes).
func copySpan(src, dst *pebble.DB, from, to []byte) error {
	it, err := src.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: to})
	if err != nil {
		return err
	}
	batch := dst.NewBatch()
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err == nil {
			err = batch.Set(it.Key(), v, nil)
		}
		if err == nil && batch.Len() > 4<<20 {
			err = batch.Commit(pebble.NoSync)
			batch = dst.NewBatch()
		}
		if err != nil {
			return errors.Join(err, it.Close())
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	return batch.Commit(pebble.NoSync)
}
