package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// http.advertise_url comes from the file, INFERQ_HTTP_ADVERTISE_URL (the
// StatefulSet sets it per pod) or --advertise-url, in that order, is
// validated after all three, and reaches the consumer that builds
// result_ref.
func TestLoadConfigAdvertiseURL(t *testing.T) {
	tests := []struct {
		name, file string
		env        map[string]string
		flag       string
		want       string
		err        string
	}{
		{"unset", "", nil, "", "", ""},
		{"file", "http: {advertise_url: 'http://a:8080'}\n", nil, "", "http://a:8080", ""},
		{"env over file", "http: {advertise_url: 'http://a:8080'}\n", map[string]string{"INFERQ_HTTP_ADVERTISE_URL": "http://inferq-0.inferq-headless.inferq.svc:8080"}, "",
			"http://inferq-0.inferq-headless.inferq.svc:8080", ""},
		{"flag over env", "", map[string]string{"INFERQ_HTTP_ADVERTISE_URL": "http://b:8080"}, "https://c", "https://c", ""},
		{"bad env", "", map[string]string{"INFERQ_HTTP_ADVERTISE_URL": "inferq-0:8080"}, "", "", "http.advertise_url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(p, []byte(tt.file+"models: [{name: m, path: m.onnx}]\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			a, _, _ := testApp(tt.env)
			c, err := a.loadConfig(configFlags{path: p, advertise: tt.flag})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one naming %s", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.HTTP.AdvertiseURL != tt.want {
				t.Errorf("http.advertise_url %q, want %q", c.HTTP.AdvertiseURL, tt.want)
			}
			if wc := (serveFlags{}).workerConfig(c, nil, nil, nil, nil, nil); wc.Consumer.AdvertiseURL != tt.want {
				t.Errorf("consumer AdvertiseURL %q, want %q", wc.Consumer.AdvertiseURL, tt.want)
			}
		})
	}
}
