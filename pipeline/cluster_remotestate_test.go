package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClusterRemoteStateStores: in cluster mode every unit gets a remote
// state store of its own next to its namespace of the cluster store:
// <prefix><job>/units/<stage>/<unit>/remote/ of state.remote.s3's
// bucket, or <cluster.store.dir>/<job>/units/<stage>/<unit>/remote/ for
// the filesystem store (an object created through it is a file there);
// outside cluster mode there are none.
func TestClusterRemoteStateStores(t *testing.T) {
	base, err := os.ReadFile("testdata/cluster_remote_state.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	parse := func(remote, store string) *Config {
		t.Helper()
		src := strings.Replace(string(base), "    store: filesystem\n", remote, 1)
		src = strings.Replace(src, "  store:\n    kind: s3\n", store, 1)
		cfg, err := Parse("remote.yaml", []byte(src), nil)
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		return cfg
	}
	cfg := parse("    store: s3\n    s3:\n      endpoint: minio:9000\n      bucket: state\n      prefix: jobs/\n", "  store:\n    kind: s3\n")
	env := map[string]string{EnvS3AccessKey: "a", EnvS3SecretKey: "b"}
	units := cfg.unitRemoteStores(func(k string) string { return env[k] })
	st, err := units(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(st), "s3 state/jobs/ at minio:9000 under colorshape/units/1/0/remote/"; got != want {
		t.Errorf("unit 1/0's store: %s, want %s", got, want)
	}
	cfg = parse("    store: filesystem\n", "  store:\n    kind: filesystem\n    dir: "+dir+"\n")
	if cfg.Settings().UnitRemoteStore == nil {
		t.Fatal("no unit remote stores in the settings")
	}
	st, err = cfg.unitRemoteStores(nil)(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	w, err := st.CreateObject("x.sst")
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "colorshape", "units", "0", "1", "remote", "x.sst")); err != nil {
		t.Errorf("unit 0/1's object: %v", err)
	}
	cfg.Cluster.Enabled = false
	if cfg.Settings().UnitRemoteStore != nil {
		t.Error("unit remote stores outside cluster mode")
	}
}
