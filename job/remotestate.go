package job

import "github.com/kstreamd/kstreamd/state"

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
