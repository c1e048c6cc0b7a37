package job

import (
	"fmt"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/state"
)

// remoteState returns the remote config of the job's pebble backends, its
// store the checkpoint storage's remote directory, or nil when the state
// is local (or not pebble).
func (j *Job) remoteState() *state.RemoteConfig {
	if j.settings.RemoteState == nil || j.settings.StateBackend != state.KindPebble {
		return nil
	}
	rc := *j.settings.RemoteState
	rc.Dir = j.storage.RemoteDir()
	return &rc
}

// releaseDeadRemoteState releases, before the local state directory root
// is deleted at start, the store markers of the disaggregated backend
// instances a killed run left there (state.ReleaseDeadRemoteInstances):
// without it their objects would never be collected. Nothing without
// remote state.
func releaseDeadRemoteState(set Settings, storage *checkpoint.Storage, root string) error {
	if set.RemoteState == nil || set.StateBackend != state.KindPebble {
		return nil
	}
	st := set.RemoteState.Store
	if st == nil {
		var err error
		if st, err = state.NewRemoteDirStore(storage.RemoteDir()); err != nil {
			return err
		}
	}
	if err := state.ReleaseDeadRemoteInstances(root, st); err != nil {
		return fmt.Errorf("job: %w", err)
	}
	return nil
}
