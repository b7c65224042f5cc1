package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/inferq/inferq/client"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// refServer serves the whole record of task "big" at /v1/tasks/big, as a
// replica's HTTP listener does, behind the bearer token when it is set.
func refServer(t *testing.T, token string) *httptest.Server {
	t.Helper()
	resp := task.NewInferResponse("echo", "1", []tensor.Tensor{tensor.NewTensor("y", []int64{1, 3}, []float32{1, 2, 3})}, nil)
	result, bin, err := resp.Encode()
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := (&task.Record{TaskID: "big", Status: task.StatusSuccess, Result: result, Binary: bin}).Encode()
	other, _ := (&task.Record{TaskID: "other", Status: task.StatusSuccess, Result: result}).Encode()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error": "this server requires a bearer token"}`))
			return
		}
		switch r.URL.Path {
		case "/prefix/v1/tasks/big", "/v1/tasks/big":
			w.Write(whole)
		case "/v1/tasks/mixed":
			w.Write(other)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error": "task is not known to this worker"}`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A record whose result was too large for the broker carries result_ref
// and no result: Response reads the whole record from the replica, a
// relative reference against Config.HTTPURL, with Config.HTTPToken.
func TestResponseFollowsResultRef(t *testing.T) {
	srv := fastBroker(t)
	web := refServer(t, "s3cret")
	byRef := func(ref string) *task.Record {
		return &task.Record{TaskID: "big", Status: task.StatusSuccess, ResultRef: ref}
	}
	full := func(cfg *client.Config) { cfg.HTTPURL, cfg.HTTPToken = web.URL+"/", "s3cret" }
	t.Run("read", func(t *testing.T) {
		c := newClient(t, srv.Addr, "refs", full)
		for _, ref := range []string{"/v1/tasks/big", web.URL + "/prefix/v1/tasks/big"} {
			resp, err := c.Response(t.Context(), byRef(ref))
			if err != nil {
				t.Fatalf("%s: %v", ref, err)
			}
			if len(resp.Outputs) != 1 || resp.Outputs[0].Name != "y" || tensor.FormatValues(resp.Outputs[0].Tensor, 8) != "[1 2 3]" {
				t.Errorf("%s: outputs %+v", ref, resp.Outputs)
			}
		}
		// A record that carries its result is its own.
		inline := &task.Record{TaskID: "t", Status: task.StatusSuccess, Result: []byte(`{"model_name":"m","outputs":[]}`)}
		if got, err := c.FollowRef(t.Context(), inline); got != inline || err != nil {
			t.Errorf("inline result: %v, %v", got, err)
		}
	})

	// Where it cannot read it, the error says that the result is stored
	// by reference, where, and why.
	noBase := func(cfg *client.Config) { cfg.HTTPToken = "s3cret" }
	noToken := func(cfg *client.Config) { cfg.HTTPURL = web.URL }
	for _, tt := range []struct {
		name   string
		cfg    func(*client.Config)
		ref    string
		is     error
		status int
		want   []string
	}{
		{"relative, no base URL", noBase, "/v1/tasks/big", client.ErrRelativeRef, 0, []string{"stored by reference at /v1/tasks/big", "base URL"}},
		{"no token", noToken, "/v1/tasks/big", nil, http.StatusUnauthorized, []string{"at " + web.URL + "/v1/tasks/big", "401", "bearer token"}},
		{"unknown task", full, "/v1/tasks/gone", nil, http.StatusNotFound, []string{"404", "not known to this worker"}},
		{"another task's record", full, "/v1/tasks/mixed", nil, http.StatusOK, []string{`task "other"`}},
		{"not http", full, "ftp://host/v1/tasks/big", nil, 0, []string{"ftp://host/v1/tasks/big", "http"}},
		{"nothing listens", full, "http://127.0.0.1:1/v1/tasks/big", nil, 0, []string{"http://127.0.0.1:1/v1/tasks/big"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, srv.Addr, "refs", tt.cfg)
			_, err := c.Response(t.Context(), byRef(tt.ref))
			re, ok := errors.AsType[*client.RefError](err)
			if !ok || !errors.Is(err, task.ErrResultByReference) || tt.is != nil && !errors.Is(err, tt.is) || re.Status != tt.status || re.TaskID != "big" || re.Ref != tt.ref {
				t.Fatalf("error %#v, want a *client.RefError for big at %s (status %d) wrapping task.ErrResultByReference and %v", err, tt.ref, tt.status, tt.is)
			}
			for _, w := range append(tt.want, "task big", "stored by reference") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// HTTPURL must be an absolute http(s) URL: a relative reference is joined
// to it.
func TestConfigHTTPURL(t *testing.T) {
	for url, ok := range map[string]bool{"": true, "http://h:8080": true, "https://gw.example/inferq-1/": true,
		"h:8080": false, "/v1": false, "ftp://h": false, "http://h/?q=1": false} {
		cfg := client.Config{Identity: "a", HTTPURL: url}
		cfg.Broker.Address = "127.0.0.1:1"
		if err := cfg.Validate(); (err == nil) != ok {
			t.Errorf("HTTPURL %q: %v, want ok=%v", url, err, ok)
		}
	}
}
