package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferq/inferq/models"
)

// INFERQ_HTTP_AUTH_TOKEN sets http.auth_token over the file's token or
// token file, and serve --print-config masks it.
func TestLoadConfigHTTPToken(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte("from-file"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		file      string
		env       map[string]string
		token     string
		tokenFile string
	}{
		{"none", "", nil, "", ""},
		{"file token", "http: {auth_token: in-file}\n", nil, "in-file", ""},
		{"env token", "", map[string]string{"INFERQ_HTTP_AUTH_TOKEN": "from-env"}, "from-env", ""},
		{"env over the file's token", "http: {auth_token: in-file}\n", map[string]string{"INFERQ_HTTP_AUTH_TOKEN": "from-env"}, "from-env", ""},
		{"env over the file's token file", "http: {auth_token_file: " + tokFile + "}\n", map[string]string{"INFERQ_HTTP_AUTH_TOKEN": "from-env"}, "from-env", ""},
		{"token file", "http: {auth_token_file: " + tokFile + "}\n", nil, "", tokFile},
		{"broker token env is not the http token", "", map[string]string{"INFERQ_AUTH_TOKEN": "broker"}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(p, []byte(tt.file+"models: [{name: m, path: m.onnx}]\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			a, _, _ := testApp(tt.env)
			c, err := a.loadConfig(configFlags{path: p})
			if err != nil {
				t.Fatal(err)
			}
			if c.HTTP.AuthToken != tt.token || c.HTTP.AuthTokenFile != tt.tokenFile {
				t.Errorf("http token %q file %q, want %q %q", c.HTTP.AuthToken, c.HTTP.AuthTokenFile, tt.token, tt.tokenFile)
			}
		})
	}

	p := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(p, []byte("models: [{name: m, path: m.onnx}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, out, errb := testApp(map[string]string{"INFERQ_HTTP_AUTH_TOKEN": "s3cret-http"})
	if code := a.main(context.Background(), []string{"serve", "--config", p, "--print-config"}); code != 0 {
		t.Fatalf("serve --print-config: exit %d: %s", code, errb)
	}
	if strings.Contains(out.String(), "s3cret-http") || !strings.Contains(out.String(), "auth_token: '*****'") {
		t.Errorf("--print-config does not mask http.auth_token:\n%s", out)
	}
}

// TestServeHandsHTTPSettingsToTheWorker: the config's http section (token,
// TLS, timeouts, cap) reaches the worker serve builds, not only its listen
// address: without it a token in the config protects nothing.
func TestServeHandsHTTPSettingsToTheWorker(t *testing.T) {
	c := &models.Config{}
	c.HTTP.Listen = "127.0.0.1:0"
	c.HTTP.AuthToken = "s3cret"
	c.HTTP.MaxConcurrentRequests = 7
	wc := serveFlags{}.workerConfig(c, nil, nil, nil, nil, nil)
	if wc.HTTP.AuthToken != "s3cret" || wc.HTTP.MaxConcurrentRequests != 7 || wc.HTTP.Listen != "127.0.0.1:0" {
		t.Errorf("worker HTTP settings = %+v, want the config's", wc.HTTP)
	}
}
