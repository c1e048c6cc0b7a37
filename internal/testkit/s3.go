package testkit

import (
	"net"
	"net/http"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// S3 credentials the S3 test server accepts (it checks none); tests put
// them in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
const (
	S3AccessKey = "kstreamd-test"
	S3SecretKey = "kstreamd-test-secret"
)

// S3Server starts an in-memory S3-protocol server (gofakes3) on a free
// 127.0.0.1 port for the life of the test, with bucket created, and
// returns its "host:port" (plain HTTP, path-style). With honourCreateOnly
// false it drops the If-None-Match header of every request, so it
// overwrites on a create-only PUT like an S3 clone without conditional
// writes.
func S3Server(t testing.TB, bucket string, honourCreateOnly bool) string {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	inner := gofakes3.New(backend, gofakes3.WithoutVersioning()).Server()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// gofakes3 refuses a PUT without a Content-Length header, which a
		// streaming-signed (aws-chunked) empty body goes without: its size
		// is in X-Amz-Decoded-Content-Length, which gofakes3 reads then.
		if r.Header.Get("Content-Length") == "" && r.Header.Get("X-Amz-Decoded-Content-Length") != "" {
			r.Header.Set("Content-Length", "0")
		}
		if !honourCreateOnly {
			r.Header.Del("If-None-Match")
		}
		inner.ServeHTTP(w, r)
	})
	// It listens at once, so the kernel picks the port: FreeAddr's ports
	// are unique within one test process, not across the packages that
	// run at the same time.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}
