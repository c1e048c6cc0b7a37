package pipeline

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/kstreamd/kstreamd/state"
)

// validateClusterRemoteState checks state.remote in cluster mode: the
// units' remote state must be on a store every daemon reaches, so the
// filesystem store needs the cluster's shared directory (cluster.store.kind
// filesystem); with an s3 cluster store, state.remote.store must be s3.
func (c *Config) validateClusterRemoteState(v *validator) {
	r := c.State.Remote
	if r == nil || !c.Cluster.Enabled {
		return
	}
	if r.Store == RemoteStoreFilesystem && c.Cluster.Store.Kind != StoreFilesystem {
		v.errorf("state.remote.store", "is filesystem, which in cluster mode is cluster.store.dir (the shared directory), but cluster.store.kind is %q: set state.remote.store: s3 (and state.remote.s3)", c.Cluster.Store.Kind)
	}
}

// unitRemoteStores returns job.Settings.UnitRemoteStore of a cluster-mode
// job on remote state: unit (stage, index)'s objects are in
// <cluster.store.dir>/<job>/units/<stage>/<index>/remote/ (store
// filesystem) or under the key prefix
// <state.remote.s3.prefix><job>/units/<stage>/<index>/remote/ (store
// s3), next to the unit's namespace of the cluster store (so `cluster gc`
// of a namespace removes its objects too when they share the store). nil
// outside cluster mode.
func (c *Config) unitRemoteStores(getenv func(string) string) func(stage, index int) (remote.Storage, error) {
	r := c.State.Remote
	if r == nil || !c.Cluster.Enabled {
		return nil
	}
	unit := func(stage, index int) []string {
		return []string{c.Job.Name, "units", strconv.Itoa(stage), strconv.Itoa(index), state.RemoteDirName}
	}
	if r.Store == RemoteStoreS3 {
		base := r.s3Store(getenv) // one client for every unit
		return func(stage, index int) (remote.Storage, error) {
			return state.NewRemotePrefixStore(base, strings.Join(unit(stage, index), "/")+"/"), nil
		}
	}
	root := c.Cluster.Store.Dir
	return func(stage, index int) (remote.Storage, error) {
		return state.NewRemoteDirStore(filepath.Join(append([]string{root}, unit(stage, index)...)...))
	}
}
