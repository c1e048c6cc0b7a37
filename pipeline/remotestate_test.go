package pipeline

import (
	"os"
	"strings"
	"testing"
)

// TestRemoteStateS3Settings: a state.remote section naming the s3 store
// gets cluster.store.s3's defaults (region us-east-1, tls and path_style
// on) for the keys it leaves out, the filesystem store is the default,
// the delta chain limits reach state.RemoteConfig, and the settings' store without credentials in the environment fails
// every operation with a message naming the variables and the bucket.
func TestRemoteStateS3Settings(t *testing.T) {
	base, err := os.ReadFile("testdata/remote_state_store.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	parse := func(remote string) *Config {
		t.Helper()
		src := strings.Replace(string(base), "    store: gcs\n", remote, 1)
		cfg, err := Parse("remote.yaml", []byte(src), nil)
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		return cfg
	}
	cfg := parse("    cache_bytes: 1024\n")
	if r := cfg.State.Remote; r.Store != RemoteStoreFilesystem || r.CacheBytes != 1024 {
		t.Fatalf("remote = %+v, want the filesystem store and cache_bytes 1024", r)
	}
	if rc := cfg.Settings().RemoteState; rc == nil || rc.Store != nil || rc.CacheBytes != 1024 {
		t.Fatalf("settings' remote state = %+v, want a directory store (Store nil), cache 1024", rc)
	}
	cfg = parse("    max_delta_checkpoints: -1\n    max_delta_bytes: 1048576\n")
	if rc := cfg.Settings().RemoteState; rc == nil || rc.MaxDeltaCheckpoints != -1 || rc.MaxDeltaBytes != 1048576 {
		t.Fatalf("settings' remote state = %+v, want MaxDeltaCheckpoints -1 and MaxDeltaBytes 1048576", rc)
	}
	cfg = parse("    store: s3\n    s3:\n      endpoint: minio:9000\n      bucket: state\n      prefix: jobs/\n")
	want := S3StoreConfig{Endpoint: "minio:9000", Bucket: "state", Prefix: "jobs/", Region: DefaultS3Region, TLS: true, PathStyle: true}
	if got := cfg.State.Remote.S3; got != want {
		t.Fatalf("s3 = %+v, want %+v", got, want)
	}
	st := cfg.State.Remote.s3Store(func(string) string { return "" })
	_, err = st.List("", "")
	if err == nil || !strings.Contains(err.Error(), EnvS3AccessKey) || !strings.Contains(err.Error(), "bucket state at minio:9000") {
		t.Fatalf("store without credentials: %v; want an error naming %s and the bucket", err, EnvS3AccessKey)
	}
	env := map[string]string{EnvS3AccessKey: "a", EnvS3SecretKey: "b"}
	st = cfg.State.Remote.s3Store(func(k string) string { return env[k] })
	if s, ok := st.(interface{ String() string }); !ok || s.String() != "s3 state/jobs/ at minio:9000" {
		t.Fatalf("store = %v, want s3 state/jobs/ at minio:9000", st)
	}
}
