package pipeline

import (
	"time"

	"github.com/kstreamd/kstreamd/state"
)

// validateRemoteState checks state.remote: pebble only, not in cluster
// mode (units do not share the remote store yet), cache and latency in
// range.
func (c *Config) validateRemoteState(v *validator) {
	r := c.State.Remote
	if r == nil {
		return
	}
	if c.State.Backend != StateBackendPebble {
		v.errorf("state.remote", "applies to the pebble backend only (state.backend is %q)", c.State.Backend)
	}
	if c.Cluster.Enabled {
		v.errorf("state.remote", "not supported in cluster mode yet (the units' checkpoints do not share the remote store)")
	}
	if r.CacheBytes < -1 {
		v.errorf("state.remote.cache_bytes", "must be >= -1 (-1: no cache, 0: the default 64 MiB), got %d", r.CacheBytes)
	}
	if r.ReadLatency < 0 || r.ReadLatency > time.Second {
		v.errorf("state.remote.read_latency", "must be in [0, 1s], got %v", r.ReadLatency)
	}
}

// settings returns the job's state.RemoteConfig (its Dir set by the job),
// nil without a remote section.
func (r *RemoteStateConfig) settings() *state.RemoteConfig {
	if r == nil {
		return nil
	}
	return &state.RemoteConfig{CacheBytes: r.CacheBytes, ReadLatency: r.ReadLatency}
}
