package job

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/state"
)

// Remote state in cluster mode (docs/scale-out.md "Remote state in
// cluster mode"). Each unit has a remote state store of its own
// (Settings.UnitRemoteStore: <store>/<job>/units/<stage>/<unit>/remote/),
// reached by every daemon, which only the unit's current owner writes:
//
//   - Its Pebble instances create their tables there; its checkpoints
//     name them as shared files "../remote/<object>", which the Owner
//     neither uploads nor downloads (checkpoint.Namespace.Remote).
//   - A takeover claims the unit's next HEAD (fencing every earlier owner:
//     none of them can create a HEAD any more), then releases every
//     reference marker in the store (releaseEarlierOwners): they belong to
//     earlier owners' instances, killed, paused or on a machine that is
//     gone. Then it restores the HEAD's checkpoint by reference: its
//     instance ingests the objects where they are, with markers of its
//     own. The lease is thus the HEAD chain itself: a marker is good while
//     its instance's claim is the unit's newest.
//   - Retention (checkpoint.Owner.Retain) lists the store, then checks
//     the HEAD chain (a fenced owner collects nothing), then deletes the
//     listed objects no listed marker and no kept checkpoint of the unit
//     refers to. Since no other unit refers to the store's objects (a
//     restore from a savepoint copies what it needs into the unit's own
//     store), no unit's retention deletes an object another unit uses.

// unitRemoteState returns set with, for a cluster-mode unit on remote
// state, RemoteState.Store replaced by the unit's own store
// (Settings.UnitRemoteStore). Other settings are returned as they are.
func unitRemoteState(set Settings) (Settings, error) {
	u := set.Unit
	if u == nil || set.RemoteState == nil || set.StateBackend != state.KindPebble {
		return set, nil
	}
	if set.UnitRemoteStore == nil {
		return set, fmt.Errorf("job: stage %d unit %d: remote state in cluster mode needs the units' remote state stores (Settings.UnitRemoteStore)", u.Stage, u.Index)
	}
	st, err := set.UnitRemoteStore(u.Stage, u.Index)
	if err != nil {
		return set, fmt.Errorf("job: stage %d unit %d: remote state store: %w", u.Stage, u.Index, err)
	}
	rc := *set.RemoteState
	rc.Store = st
	set.RemoteState = &rc
	return set, nil
}

// unitRemoteStore returns the remote state store of the unit set builds
// (after unitRemoteState), nil for a job or a unit without remote state.
func unitRemoteStore(set Settings) remote.Storage {
	if set.Unit == nil || set.RemoteState == nil || set.StateBackend != state.KindPebble {
		return nil
	}
	return set.RemoteState.Store
}

// releaseEarlierOwners releases, right after a unit's claim, every
// reference marker in its remote state store st (nil: nothing): the
// markers of the instances of earlier owners, which the claim fenced
// (state.ReleaseRemoteMarkers). Without it a killed owner's markers, whose
// local directory may be on a machine that is gone, would keep their
// objects for good.
func releaseEarlierOwners(st remote.Storage, logger *slog.Logger) error {
	if st == nil {
		return nil
	}
	n, err := state.ReleaseRemoteMarkers(st)
	if err != nil {
		return err
	}
	if n > 0 {
		logger.Info("released the remote state markers of the unit's earlier owners", "markers", n)
	}
	return nil
}

// remoteSavepointDir is the directory of a unit's part of a cluster
// savepoint (units/<stage>/<unit>/) that holds the copies of the remote
// state objects its checkpoint referred to.
const remoteSavepointDir = "remote"

// unitRemoteOf returns the remote state store of unit (stage, index); nil
// for a job without remote state.
type unitRemoteOf func(stage, index int) (remote.Storage, error)

// unitRemoteStores returns set's unit remote state stores, nil without
// remote state.
func unitRemoteStores(set Settings) unitRemoteOf {
	if set.RemoteState == nil || set.StateBackend != state.KindPebble || set.UnitRemoteStore == nil {
		return nil
	}
	return set.UnitRemoteStore
}

// of returns the store lookup of one unit (nil f: none).
func (f unitRemoteOf) of(stage, index int) func() (remote.Storage, error) {
	if f == nil {
		return nil
	}
	return func() (remote.Storage, error) { return f(stage, index) }
}

// remoteObjectName returns the object of a remote state store that the
// shared file path of a checkpoint refers to ("../remote/<object>").
func remoteObjectName(path string) (string, bool) {
	return strings.CutPrefix(path, "../"+state.RemoteDirName+"/")
}

// isRemoteObject reports whether shared file path is an object of a
// remote state store.
func isRemoteObject(path string) bool {
	_, ok := remoteObjectName(path)
	return ok
}

// copyRemoteObjects copies every remote state object checkpoint m of a
// unit refers to from the unit's store (remoteOf) into base/remote/, so
// the cluster savepoint holds them (self-contained: the job's retention
// and `cluster gc` never touch it). A checkpoint that refers to remote
// objects while the settings name no remote state store is refused,
// naming the object.
func copyRemoteObjects(m *checkpoint.Metadata, base string, remoteOf func() (remote.Storage, error)) error {
	var st remote.Storage
	for _, f := range m.SharedFiles {
		obj, ok := remoteObjectName(f)
		if !ok {
			continue
		}
		if st == nil {
			if remoteOf == nil {
				return fmt.Errorf("the checkpoint refers to remote state object %s, but state.remote is not configured: configure it as the job that wrote the checkpoint did", obj)
			}
			var err error
			if st, err = remoteOf(); err != nil {
				return fmt.Errorf("remote state store: %w", err)
			}
		}
		if err := state.DownloadRemoteObject(st, obj, filepath.Join(base, remoteSavepointDir, obj)); err != nil {
			return fmt.Errorf("copy remote state object %s into the savepoint: %w", obj, err)
		}
	}
	return nil
}
