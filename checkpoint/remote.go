package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/kstreamd/kstreamd/state"
)

// RemoteDir returns dir/job/remote, the object store of the job's
// disaggregated Pebble backends (state.RemoteConfig.Dir): checkpoints
// refer to its objects from the shared directory as "../remote/<object>".
func (s *Storage) RemoteDir() string { return filepath.Join(s.jobDir, state.RemoteDirName) }

// SetRemoteStore makes st the object store of the job's disaggregated
// Pebble backends (state.RemoteConfig.Store, e.g. an S3-compatible store)
// instead of RemoteDir: Prune collects the unreferenced objects there.
// Checkpoints still name the objects "../remote/<object>". Call it before
// the first checkpoint.
func (s *Storage) SetRemoteStore(st remote.Storage) { s.remoteStore = st }

// RemoteStore returns the store SetRemoteStore set, nil when the remote
// state objects are in RemoteDir (or there are none).
func (s *Storage) RemoteStore() remote.Storage { return s.remoteStore }

// pruneRemote deletes the objects of the remote store (SetRemoteStore, or
// RemoteDir) that no kept checkpoint refers to (referenced: the kept
// checkpoints' shared files, relative to SharedDir) and no live backend
// instance holds a reference marker on (state.CollectRemoteGarbage).
// Without a remote store or directory it does nothing.
func (s *Storage) pruneRemote(referenced map[string]bool) error {
	st := s.remoteStore
	if st == nil {
		dir := s.RemoteDir()
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		var err error
		if st, err = state.NewRemoteDirStore(dir); err != nil {
			return err
		}
	}
	pfx := "../" + state.RemoteDirName + "/"
	objects := map[string]bool{}
	for f := range referenced {
		if name, ok := strings.CutPrefix(f, pfx); ok {
			objects[name] = true
		}
	}
	deleted, err := state.CollectRemoteGarbage(st, objects)
	if len(deleted) > 0 {
		s.logger.Debug("deleted unreferenced remote state objects", "objects", len(deleted))
	}
	return err
}
