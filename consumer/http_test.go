package consumer_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/task"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The operations endpoints, and a result too big for the broker: the reply
// channel gets a SUCCESS record with result null and result_ref, and
// /v1/tasks/{id} answers the whole record from the spool.
func TestHTTPEndpointsAndOversizeResult(t *testing.T) {
	h := newHarness(t, func(c *harnessConfig) { c.model.Result.MaxResultBytes = 120 })
	warm := false
	srv := httptest.NewServer(consumer.Handler(consumer.HTTPConfig{Server: h.cons, Gatherer: h.reg, Ready: func() bool { return warm }}))
	defer srv.Close()

	if code, body := get(t, srv.URL+"/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Errorf("/healthz: %d %s", code, body)
	}
	waitFor(t, 10*time.Second, "the broker", h.cons.Ready)
	if code, body := get(t, srv.URL+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"models_warm": false`) {
		t.Errorf("/readyz with models cold: %d %s", code, body)
	}
	warm = true
	if code, body := get(t, srv.URL+"/readyz"); code != 200 {
		t.Errorf("/readyz: %d %s", code, body)
	}
	code, body := get(t, srv.URL+"/v1/models")
	var models struct {
		Models []struct {
			Name, Queue string
			Inputs      []struct{ Name, Datatype string }
		}
	}
	if err := json.Unmarshal([]byte(body), &models); code != 200 || err != nil || len(models.Models) != 1 ||
		models.Models[0].Name != testModel || models.Models[0].Queue != h.q || models.Models[0].Inputs[0].Datatype != "FP32" {
		t.Errorf("/v1/models: %d %s", code, body)
	}
	if code, _ := get(t, srv.URL+"/v1/tasks/nope"); code != 404 {
		t.Errorf("/v1/tasks of an unknown task: %d", code)
	}

	h.send("big", 3, 1)
	r := h.record("big")
	if r.Status != task.StatusSuccess || string(r.Result) != "null" && len(r.Result) != 0 || r.ResultRef != "/v1/tasks/big" {
		t.Fatalf("reply record %+v, want SUCCESS with result null and result_ref", r)
	}
	code, body = get(t, srv.URL+"/v1/tasks/big")
	whole, err := task.ParseRecord([]byte(body))
	if code != 200 || err != nil || whole.Status != task.StatusSuccess {
		t.Fatalf("/v1/tasks/big: %d %s (%v)", code, body, err)
	}
	if got := outputs(t, whole); got[0] != 6 {
		t.Errorf("whole record outputs %v", got)
	}
	if code, body := get(t, srv.URL+"/metrics"); code != 200 || !strings.Contains(body, "inferq_tasks_total") {
		t.Errorf("/metrics: %d", code)
	}
}

// With http.auth_token set every route but the health checks asks for the
// bearer token: 401 with WWW-Authenticate: Bearer without it or with
// another, the route's own answer with it. Without a token all is open.
func TestHTTPBearerToken(t *testing.T) {
	const token = "s3cret-token"
	open := bareHandler(t)
	guarded := bareHandlerWith(t, bareOpts{http: func(c *consumer.HTTPConfig) { c.AuthToken = token }})
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
