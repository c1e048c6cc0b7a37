package sdk

import (
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestControlRefusedWithoutToken checks which requests reach the savepoint
// handler: with no job running, a request let through answers 503 "job not
// running", a refused one 403 (open listener, no token, not allowed) or 401
// (wrong or missing token); GET endpoints and /metrics are never refused
// for want of a token.
func TestControlRefusedWithoutToken(t *testing.T) {
	for _, tc := range []struct {
		name           string
		exposed, allow bool
		token, auth    string
		method, path   string
		want           int
	}{
		{name: "loopback, no token", method: "POST", path: "/api/v1/savepoints", want: 503},
		{name: "exposed, no token", exposed: true, method: "POST", path: "/api/v1/savepoints", want: 403},
		{name: "exposed, no token, allowed", exposed: true, allow: true, method: "POST", path: "/api/v1/savepoints", want: 503},
		{name: "exposed, token sent", exposed: true, token: "t0k", auth: "Bearer t0k", method: "POST", path: "/api/v1/savepoints", want: 503},
		{name: "exposed, token missing", exposed: true, token: "t0k", method: "POST", path: "/api/v1/savepoints", want: 401},
		{name: "exposed, wrong token", exposed: true, token: "t0k", auth: "Bearer nope", method: "POST", path: "/api/v1/savepoints", want: 401},
		{name: "exposed, no token, job status", exposed: true, method: "GET", path: "/api/v1/job", want: 503},
		{name: "exposed, no token, metrics", exposed: true, method: "GET", path: "/metrics", want: 200},
		{name: "exposed, no token, healthz", exposed: true, method: "GET", path: "/healthz", want: 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &server{reg: prometheus.NewRegistry(), logger: slog.New(slog.DiscardHandler), token: tc.token, allowOpenControl: tc.allow, exposed: tc.exposed}
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(`{"stop":true}`))
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			s.handler().ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("%s %s = %d %q, want %d", tc.method, tc.path, rec.Code, rec.Body.String(), tc.want)
			}
			if tc.want == http.StatusForbidden {
				var out SavepointResponse
				if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Error != errOpenControl {
					t.Fatalf("403 body %q (%v), want error %q", rec.Body.String(), err, errOpenControl)
				}
			}
		})
	}
}

// TestIsLoopback checks the listener addresses counted as loopback.
func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9249": true, "127.1.2.3:9249": true, "[::1]:9249": true,
		"0.0.0.0:9249": false, "[::]:9249": false, "10.0.0.7:9249": false, "192.168.1.2:9249": false,
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := isLoopback(a); got != want {
			t.Errorf("isLoopback(%s) = %v, want %v", addr, got, want)
		}
	}
}
