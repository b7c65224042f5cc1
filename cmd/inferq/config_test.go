package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inferq/inferq/models"
)

func TestLoadConfigLayers(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(p, []byte("broker: {address: file:1, client_id: from-file}\nmodels: [{name: m, path: m.onnx}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		env       map[string]string
		flags     configFlags
		addr, id  string
		token     string
		http, dir string
	}{
		{"file only", nil, configFlags{}, "file:1", "from-file", "", "127.0.0.1:8080", models.DefaultDataDir},
		{"adapter env", map[string]string{"KUBEMQ_ADDRESS": "kube:2", "KUBEMQ_AUTH_TOKEN": "tok"}, configFlags{}, "kube:2", "from-file", "tok", "127.0.0.1:8080", models.DefaultDataDir},
		{"inferq env wins over adapter env", map[string]string{"KUBEMQ_ADDRESS": "kube:2", "INFERQ_BROKER_ADDRESS": "inf:3"}, configFlags{}, "inf:3", "from-file", "", "127.0.0.1:8080", models.DefaultDataDir},
		{"flags win over env", map[string]string{"INFERQ_BROKER_ADDRESS": "inf:3", "INFERQ_DATA_DIR": "/env"}, configFlags{broker: "flag:4", clientID: "flag-id", http: ":9", dataDir: "/flag"}, "flag:4", "flag-id", "", ":9", "/flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _, _ := testApp(tt.env)
			tt.flags.path = p
			c, err := a.loadConfig(tt.flags)
			if err != nil {
				t.Fatal(err)
			}
			if c.Broker.Address != tt.addr || c.Broker.ClientID != tt.id || c.Broker.AuthToken != tt.token || c.HTTP.Listen != tt.http || c.DataDir != tt.dir {
				t.Errorf("got broker %q id %q token %q http %q dir %q", c.Broker.Address, c.Broker.ClientID, c.Broker.AuthToken, c.HTTP.Listen, c.DataDir)
			}
		})
	}
}

func TestLoadConfigErrors(t *testing.T) {
	a, _, _ := testApp(nil)
	if _, err := a.loadConfig(configFlags{}); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("no config: %v", err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(p, []byte("models: [{name: m}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := a.loadConfig(configFlags{path: p}); err == nil || !strings.Contains(err.Error(), `model "m": path`) {
		t.Errorf("invalid config: %v", err)
	}
	a, _, _ = testApp(map[string]string{"INFERQ_TLS_CERT": "c.pem"})
	if err := os.WriteFile(p, []byte("models: [{name: m, path: m.onnx}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := a.loadConfig(configFlags{path: p}); err == nil || !strings.Contains(err.Error(), "broker.tls") {
		t.Errorf("env that breaks the config: %v", err)
	}
}

// The main config is read like a repository's config.yaml: a named pipe
// is refused at once instead of blocking serve, and a file over 1 MiB is
// refused without being read whole.
func TestLoadConfigFileKinds(t *testing.T) {
	a, _, _ := testApp(nil)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := a.loadConfig(configFlags{path: fifo}); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("a named pipe: %v, want it refused as not a regular file", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a named pipe as the config blocked")
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", 2<<20)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.loadConfig(configFlags{path: big}); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("a 2 MiB config: %v, want it refused over the limit", err)
	}
}
