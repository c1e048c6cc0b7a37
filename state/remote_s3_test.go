package state

import (
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// outage makes an S3 test server answer every request with 503 Service
// Unavailable while down is set (a store that is unreachable or
// overloaded: minio-go retries it), counting the refused requests.
type outage struct {
	down    atomic.Bool
	refused atomic.Int64
}

func (o *outage) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o.down.Load() {
			o.refused.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>store down (test)</Message></Error>`))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// TestRemoteS3StoreUnreachable: while the S3 store answers only 503, a
// restore of a checkpoint whose tables are on it retries each request
// (the client's back-off: the server sees more than one attempt) and then
// fails with an error naming the store and the object, which the job's
// restart strategy handles; once the store is back, the same restore
// succeeds with the checkpoint's exact state.
func TestRemoteS3StoreUnreachable(t *testing.T) {
	var o outage
	addr := testkit.S3ServerWith(t, "state", true, o.wrap)
	const retries = 3
	cl, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(testkit.S3AccessKey, testkit.S3SecretKey, ""),
		BucketLookup: minio.BucketLookupPath, MaxRetries: retries})
	must(t, err)
	cfg := testConfig(t, KindPebble)
	cfg.Remote = &RemoteConfig{Dir: filepath.Join(t.TempDir(), RemoteDirName), CacheBytes: -1, Store: NewRemoteS3Store(cl, "state", "p/")}
	b := open(t, cfg)
	const n = 2000
	fillCounts(t, b, n, func(i int) int64 { return int64(3 * i) })
	rh, _ := remoteCheckpoint(t, b, cfg, 1)
	must(t, b.Close())

	o.down.Store(true)
	rc := cfg
	rc.Dir = t.TempDir()
	_, err = OpenBackendRestored(rc, []RestoreHandle{rh})
	if err == nil {
		t.Fatal("restore with the store down succeeded")
	}
	if msg := err.Error(); !strings.Contains(msg, "remote store s3 state/p/ at "+addr) || !strings.Contains(msg, ".sst") {
		t.Fatalf("error %q does not name the store and the object", msg)
	}
	if got := o.refused.Load(); got < retries {
		t.Fatalf("store refused %d requests, want >= %d (the client's retries)", got, retries)
	}

	o.down.Store(false)
	rc.Dir = t.TempDir()
	nb, err := OpenBackendRestored(rc, []RestoreHandle{rh})
	must(t, err)
	defer nb.Close()
	checkCounts(t, nb, n, func(i int) (int64, bool) { return int64(3 * i), true })
}

// TestRemoteS3VerifyRestoreHandle: a checkpoint whose tables are on an S3
// store verifies against that store (RestoreHandle.RemoteStore): no
// problem while every object is there (on the filesystem, where nothing
// is, each shared file would be missing: what refused the chaos test's
// first restore), and exactly the deleted object once one is gone.
func TestRemoteS3VerifyRestoreHandle(t *testing.T) {
	cfg := testConfig(t, kindPebbleRemoteS3)
	b := open(t, cfg)
	fillCounts(t, b, 500, func(i int) int64 { return int64(i) })
	rh, snap := remoteCheckpoint(t, b, cfg, 1)
	if len(snap.SharedFiles) == 0 {
		t.Fatal("checkpoint refers to no shared file")
	}
	local, err := VerifyRestoreHandle(rh)
	must(t, err)
	if len(local) != len(snap.SharedFiles) {
		t.Fatalf("without the store: %d problems %q, want every one of the %d shared files missing", len(local), local, len(snap.SharedFiles))
	}
	rh.RemoteStore = cfg.Remote.Store
	ps, err := VerifyRestoreHandle(rh)
	if err != nil || len(ps) != 0 {
		t.Fatalf("with the store: %q, %v; want no problem", ps, err)
	}
	gone := strings.TrimPrefix(snap.SharedFiles[0], "../"+RemoteDirName+"/")
	must(t, cfg.Remote.Store.Delete(gone))
	ps, err = VerifyRestoreHandle(rh)
	if err != nil || len(ps) != 1 || !strings.Contains(ps[0], gone) || !strings.Contains(ps[0], "missing from the remote store") {
		t.Fatalf("after deleting %s: %q, %v; want one problem naming it missing", gone, ps, err)
	}
}
