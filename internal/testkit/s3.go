package testkit

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
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
	return S3ServerWith(t, bucket, honourCreateOnly, nil)
}

// S3ServerWith is S3Server with its handler wrapped by wrap (nil: none),
// e.g. an AnswerLoss.
func S3ServerWith(t testing.TB, bucket string, honourCreateOnly bool, wrap func(http.Handler) http.Handler) string {
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
	var handler http.Handler = h
	if wrap != nil {
		handler = wrap(h)
	}
	srv := &http.Server{Handler: handler}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// AnswerLoss makes an S3 server lose the answer of every Every-th PUT that
// Match accepts, after the server wrote the object: alternately a 503
// Service Unavailable (a normal S3 failure after the write) and a
// connection closed without an answer. The client retries the PUT, and a
// create-only PUT (If-None-Match: *) then meets its own object: 412.
type AnswerLoss struct {
	// Every is the period (1 in Every is lost); Match picks the requests
	// counted (nil: every PUT).
	Every int64
	Match func(*http.Request) bool
	seen  atomic.Int64
	lost  atomic.Int64
}

// Lost returns how many answers were lost so far.
func (l *AnswerLoss) Lost() int64 { return l.lost.Load() }

// Wrap returns h losing answers; pass it to S3ServerWith.
func (l *AnswerLoss) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || (l.Match != nil && !l.Match(r)) || l.seen.Add(1)%l.Every != 0 {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code >= 300 { // nothing written: answer as the server did
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return
		}
		if l.lost.Add(1)%2 == 1 {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>answer lost after the write (test)</Message></Error>`))
			return
		}
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})
}
