package oip_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/inferq/inferq/oip"
)

// With http.auth_token set every route but the health checks asks for the
// bearer token: 401 with WWW-Authenticate: Bearer without it or with
// another, the route's own answer with it. Without a token all is open.
func TestHTTPBearerToken(t *testing.T) {
	const token = "s3cret-token"
	open := bareHandler(t)
	guarded := bareHandlerWith(t, bareOpts{http: func(c *oip.HTTPConfig) { c.AuthToken = token }})
	infer := oipCases[0].body
	routes := []struct {
		method, path, body string
		health             bool
	}{
		{"GET", "/healthz", "", true},
		{"GET", "/readyz", "", true},
		{"GET", "/v2/health/live", "", true},
		{"GET", "/v2/health/ready", "", true},
		{"GET", "/metrics", "", false},
		{"GET", "/v1/models", "", false},
		{"GET", "/v1/tasks/some-task", "", false},
		{"GET", "/v2", "", false},
		{"GET", "/v2/models/m", "", false},
		{"GET", "/v2/models/m/ready", "", false},
		{"POST", "/v2/models/m/infer", infer, false},
		{"POST", "/v2/models/m/versions/1/infer", infer, false},
		{"GET", "/nowhere", "", false},
		{"GET", "/healthz/../v1/tasks/x", "", false},
	}
	serve := func(h http.Handler, method, path, body, auth string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, rt := range routes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			want := serve(open, rt.method, rt.path, rt.body, "").Code
			if want == http.StatusUnauthorized {
				t.Fatalf("without a token configured: 401")
			}
			for _, auth := range []string{"", "Bearer wrong", "Bearer " + token + "x", "Basic " + token, token, "Bearer"} {
				rec := serve(guarded, rt.method, rt.path, rt.body, auth)
				if rt.health {
					if rec.Code != want {
						t.Errorf("Authorization %q: %d, want %d (health checks need no token)", auth, rec.Code, want)
					}
					continue
				}
				if rec.Code != http.StatusUnauthorized || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") ||
					!strings.Contains(rec.Body.String(), "http.auth_token") {
					t.Errorf("Authorization %q: %d %q %s, want 401 with WWW-Authenticate: Bearer", auth, rec.Code, rec.Header().Get("WWW-Authenticate"), rec.Body)
				}
			}
			for _, auth := range []string{"Bearer " + token, "bearer " + token} {
				if rec := serve(guarded, rt.method, rt.path, rt.body, auth); rec.Code != want {
					t.Errorf("Authorization %q: %d %s, want %d", auth, rec.Code, rec.Body, want)
				}
			}
		})
	}
}
