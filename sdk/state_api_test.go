package sdk

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestStateAPIRefusals checks what GET /api/v1/state/{operator}/{state}
// answers before a subtask is asked: on a listener that is not loopback
// with a token configured, a request without it or with a wrong one is
// refused 401 (the token rule of every /api/v1 endpoint); with no token
// configured it is refused 403 (as savepoints are) unless
// allow_unauthenticated_control; with the token, or on loopback, it is let
// through (503 while no job runs, saying so); a
// request without a key, with both key forms, with a repeated key or bad
// base64 is refused 400 naming the problem.
func TestStateAPIRefusals(t *testing.T) {
	for _, tc := range []struct {
		name          string
		exposed       bool
		allow         bool
		token, auth   string
		query         string
		want          int
		wantError     string
		wantWWWHeader bool
	}{
		{name: "exposed, token missing", exposed: true, token: "t0k", query: "?key=apple", want: 401, wantError: "missing or wrong bearer token", wantWWWHeader: true},
		{name: "exposed, wrong token", exposed: true, token: "t0k", auth: "Bearer nope", query: "?key=apple", want: 401, wantError: "missing or wrong bearer token", wantWWWHeader: true},
		{name: "exposed, token sent", exposed: true, token: "t0k", auth: "Bearer t0k", query: "?key=apple", want: 503, wantError: "job not running"},
		{name: "loopback, token sent", token: "t0k", auth: "Bearer t0k", query: "?key=apple", want: 503, wantError: "job not running"},
		{name: "exposed, no token configured", exposed: true, query: "?key=apple", want: 403, wantError: errOpenState},
		{name: "exposed, no token configured, allowed", exposed: true, allow: true, query: "?key=apple", want: 503, wantError: "job not running"},
		{name: "loopback, no token", query: "?key=apple", want: 503, wantError: "job not running"},
		{name: "no key", query: "", want: 400, wantError: "missing the key: ?key=<the key as key_by selects it> or ?key_base64=<its bytes in base64>"},
		{name: "both key forms", query: "?key=a&key_base64=YQ==", want: 400, wantError: "give the key once, as key or as key_base64"},
		{name: "key twice", query: "?key=a&key=b", want: 400, wantError: "give the key once, as key or as key_base64"},
		{name: "bad base64", query: "?key_base64=*", want: 400, wantError: "key_base64 is not standard base64: illegal base64 data at input byte 0"},
		{name: "token missing before a bad key", exposed: true, token: "t0k", query: "", want: 401, wantError: "missing or wrong bearer token", wantWWWHeader: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &server{reg: prometheus.NewRegistry(), logger: slog.New(slog.DiscardHandler), token: tc.token, exposed: tc.exposed, allowOpenControl: tc.allow}
			req := httptest.NewRequest("GET", "/api/v1/state/counts/count"+tc.query, nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			s.handler().ServeHTTP(rec, req)
			var body struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rec.Body.String(), err)
			}
			if rec.Code != tc.want || body.Error != tc.wantError {
				t.Fatalf("GET = %d %q, want %d with error %q", rec.Code, rec.Body.String(), tc.want, tc.wantError)
			}
			if got := rec.Header().Get("WWW-Authenticate") != ""; got != tc.wantWWWHeader {
				t.Errorf("WWW-Authenticate set %v, want %v", got, tc.wantWWWHeader)
			}
		})
	}
}
