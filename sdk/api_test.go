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

// TestSavepointRequestStrict checks that POST /api/v1/savepoints decodes
// its body as strictly as the config: unknown fields, wrong types and
// trailing values answer 400 naming the problem, before the job is asked.
func TestSavepointRequestStrict(t *testing.T) {
	for _, tc := range []struct {
		body    string
		want    SavepointRequest
		wantErr string
	}{
		{body: ``, want: SavepointRequest{}},
		{body: `{}`, want: SavepointRequest{}},
		{body: `{"dir": "/backups", "stop": true}`, want: SavepointRequest{Dir: "/backups", Stop: true}},
		{body: `{"stop": true}` + "\n", want: SavepointRequest{Stop: true}},
		{body: `{"stpo": true}`, wantErr: `json: unknown field "stpo"`},
		{body: `{"stop": "yes"}`, wantErr: "json: cannot unmarshal string into Go struct field SavepointRequest.stop of type bool"},
		{body: `{"stop": true} {"stop": false}`, wantErr: "more than one JSON value"},
		{body: `{"stop": tru`, wantErr: "unexpected EOF"},
	} {
		got, err := decodeSavepointRequest(strings.NewReader(tc.body))
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("decode %q: error %v, want %q", tc.body, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("decode %q = %+v, %v; want %+v", tc.body, got, err, tc.want)
		}
	}

	s := &server{reg: prometheus.NewRegistry(), logger: slog.New(slog.DiscardHandler)}
	rec := httptest.NewRecorder()
	s.handler().ServeHTTP(rec, httptest.NewRequest("POST", "/api/v1/savepoints", strings.NewReader(`{"stop": true, "drain": true}`)))
	var out SavepointResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != http.StatusBadRequest || out.Error != `bad request body: json: unknown field "drain"` {
		t.Fatalf("POST with an unknown field = %d %q (%v), want 400 naming it", rec.Code, rec.Body.String(), err)
	}
}
