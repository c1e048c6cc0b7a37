package sdk

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/pipeline"
)

// TestStateReaderUsesRemoteS3Store: `kstreamd state --config FILE` reads
// remote state objects on the S3 store the config's state.remote section
// names (credentials from the environment): the reader's store lists an
// object put into the bucket under the prefix. Without --config, or with
// a config whose remote state is on the filesystem, the reader looks on
// the filesystem (no store); a config that does not decode is refused
// with its FILE:LINE:COL error.
func TestStateReaderUsesRemoteS3Store(t *testing.T) {
	addr := testkit.S3Server(t, "state", true)
	t.Setenv(pipeline.EnvS3AccessKey, testkit.S3AccessKey)
	t.Setenv(pipeline.EnvS3SecretKey, testkit.S3SecretKey)
	base, err := os.ReadFile("../pipeline/testdata/remote_state_store.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	write := func(remote string) string {
		p := filepath.Join(t.TempDir(), "job.yaml")
		if err := os.WriteFile(p, []byte(strings.Replace(string(base), "    store: gcs\n", remote, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	r, err := stateReader(write("    store: s3\n    s3:\n      endpoint: "+addr+"\n      bucket: state\n      prefix: job/remote/\n      tls: false\n"), nil)
	if err != nil || r.RemoteStore == nil {
		t.Fatalf("reader %+v, %v: want the S3 store", r, err)
	}
	w, err := r.RemoteStore.CreateObject("000001.sst")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("table")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if names, err := r.RemoteStore.List("", ""); err != nil || !slices.Equal(names, []string{"000001.sst"}) {
		t.Fatalf("store lists %v, %v; want [000001.sst]", names, err)
	}
	for _, path := range []string{"", write("    cache_bytes: 1024\n")} {
		if r, err := stateReader(path, nil); err != nil || r.RemoteStore != nil {
			t.Fatalf("config %q: reader %+v, %v; want the filesystem", path, r, err)
		}
	}
	if _, err := stateReader(write("    store: s3\n    s3:\n      bucket: state\n"), nil); err == nil || !strings.Contains(err.Error(), "job.yaml:") || !strings.Contains(err.Error(), "endpoint") {
		t.Fatalf("bad config: %v, want a FILE:LINE:COL error about the endpoint", err)
	}
}
