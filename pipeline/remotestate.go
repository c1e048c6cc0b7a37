package pipeline

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/kstreamd/kstreamd/checkpoint/s3store"
	"github.com/kstreamd/kstreamd/state"
)

// setDefaults sets the defaults of a state.remote section before it is
// decoded: the filesystem store, and cluster.store.s3's defaults for s3.
func (r *RemoteStateConfig) setDefaults() {
	r.Store = RemoteStoreFilesystem
	r.S3 = S3StoreConfig{Region: DefaultS3Region, TLS: true, PathStyle: true}
}

// validateRemoteState checks state.remote: pebble only, cache, latency
// and delta chain limits in range, a known store with its s3 settings, and in cluster
// mode a store every daemon reaches (validateClusterRemoteState).
func (c *Config) validateRemoteState(v *validator) {
	r := c.State.Remote
	if r == nil {
		return
	}
	if c.State.Backend != StateBackendPebble {
		v.errorf("state.remote", "applies to the pebble backend only (state.backend is %q)", c.State.Backend)
	}
	c.validateClusterRemoteState(v)
	if r.CacheBytes < -1 {
		v.errorf("state.remote.cache_bytes", "must be >= -1 (-1: no cache, 0: the default 64 MiB), got %d", r.CacheBytes)
	}
	if r.ReadLatency < 0 || r.ReadLatency > time.Second {
		v.errorf("state.remote.read_latency", "must be in [0, 1s], got %v", r.ReadLatency)
	}
	if r.MaxDeltaCheckpoints < -1 {
		v.errorf("state.remote.max_delta_checkpoints", "must be >= -1 (-1: every checkpoint a base, 0: the default %d), got %d", state.DefaultMaxDeltaCheckpoints, r.MaxDeltaCheckpoints)
	}
	if r.MaxDeltaBytes < 0 {
		v.errorf("state.remote.max_delta_bytes", "must be >= 0 (0: the default %d), got %d", state.DefaultMaxDeltaBytes, r.MaxDeltaBytes)
	}
	v.oneOf("state.remote.store", r.Store, RemoteStoreFilesystem, RemoteStoreS3)
	if r.Store == RemoteStoreS3 {
		validateS3Store(v, "state.remote.s3", r.Store, r.S3)
	}
}

// validateS3Store checks the S3 store settings s at path (of a store of
// kind "s3"): endpoint host:port, bucket and region set.
func validateS3Store(v *validator, path, kind string, s S3StoreConfig) {
	if s.Endpoint == "" {
		v.errorf(path+".endpoint", "required for an %s store (host:port)", kind)
	} else if strings.Contains(s.Endpoint, "://") || strings.Contains(s.Endpoint, "/") {
		v.errorf(path+".endpoint", "must be host:port without scheme or path (use %s.tls), got %q", path, s.Endpoint)
	}
	if s.Bucket == "" {
		v.errorf(path+".bucket", "required for an %s store", kind)
	}
	if s.Region == "" {
		v.errorf(path+".region", "must not be empty (default %s)", DefaultS3Region)
	}
}

// settings returns the job's state.RemoteConfig (its Dir set by the job),
// nil without a remote section. For the s3 store it builds the store's
// client (credentials from the environment); one that cannot be built
// (credentials missing) is a store failing every operation with the
// reason, so the job's first state access reports it.
func (r *RemoteStateConfig) settings() *state.RemoteConfig {
	if r == nil {
		return nil
	}
	rc := &state.RemoteConfig{CacheBytes: r.CacheBytes, ReadLatency: r.ReadLatency,
		MaxDeltaCheckpoints: r.MaxDeltaCheckpoints, MaxDeltaBytes: r.MaxDeltaBytes}
	if r.Store == RemoteStoreS3 {
		rc.Store = r.s3Store(os.Getenv)
	}
	return rc
}

// s3Store returns the remote store of state.remote.s3.
func (r *RemoteStateConfig) s3Store(getenv func(string) string) remote.Storage {
	s := r.S3
	ak, sk := getenv(EnvS3AccessKey), getenv(EnvS3SecretKey)
	if ak == "" || sk == "" {
		return failedStore{fmt.Errorf("state.remote.store is s3 but the environment does not set %s and %s: the credentials of bucket %s at %s come from them",
			EnvS3AccessKey, EnvS3SecretKey, s.Bucket, s.Endpoint)}
	}
	cl, err := s3store.NewClient(s3store.Config{Endpoint: s.Endpoint, Bucket: s.Bucket, Prefix: s.Prefix, Region: s.Region,
		TLS: s.TLS, PathStyle: s.PathStyle, AccessKey: ak, SecretKey: sk})
	if err != nil {
		return failedStore{fmt.Errorf("state.remote.s3: %w", err)}
	}
	return state.NewRemoteS3Store(cl, s.Bucket, s.Prefix)
}

// failedStore is a remote.Storage whose every operation fails with err.
type failedStore struct{ err error }

func (f failedStore) Close() error { return nil }
func (f failedStore) ReadObject(context.Context, string) (remote.ObjectReader, int64, error) {
	return nil, 0, f.err
}
func (f failedStore) CreateObject(string) (io.WriteCloser, error) { return nil, f.err }
func (f failedStore) List(string, string) ([]string, error)       { return nil, f.err }
func (f failedStore) Delete(string) error                         { return f.err }
func (f failedStore) Size(string) (int64, error)                  { return 0, f.err }
func (f failedStore) IsNotExistError(error) bool                  { return false }
