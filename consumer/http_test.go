package consumer_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/oip"
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
	srv := httptest.NewServer(oip.Handler(h.cons, oip.HTTPConfig{Gatherer: h.reg, Metrics: h.met, Ready: func() bool { return warm }}))
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
