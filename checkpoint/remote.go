package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/kstreamd/kstreamd/state"
)

// RemoteDir returns dir/job/remote, the object store of the job's
// disaggregated Pebble backends (state.RemoteConfig.Dir): checkpoints
// refer to its objects from the shared directory as "../remote/<object>".
func (s *Storage) RemoteDir() string { return filepath.Join(s.jobDir, state.RemoteDirName) }

// pruneRemote deletes the objects of RemoteDir that no kept checkpoint
// refers to (referenced: the kept checkpoints' shared files, relative to
// SharedDir) and no live backend instance holds a reference marker on
// (state.CollectRemoteGarbage). Without a remote directory it does
// nothing.
func (s *Storage) pruneRemote(referenced map[string]bool) error {
	dir := s.RemoteDir()
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	pfx := "../" + state.RemoteDirName + "/"
	objects := map[string]bool{}
	for f := range referenced {
		if name, ok := strings.CutPrefix(f, pfx); ok {
			objects[name] = true
		}
	}
	deleted, err := state.CollectRemoteGarbage(dir, objects)
	if len(deleted) > 0 {
		s.logger.Debug("deleted unreferenced remote state objects", "objects", len(deleted))
	}
	return err
}
