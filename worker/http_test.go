package worker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/testcert"
)

// httpWorker builds a worker whose broker is never reached and serves its
// HTTP listener alone (the routes need only the models).
func httpWorker(t *testing.T, h models.HTTP, logs io.Writer) *Worker {
	t.Helper()
	if logs == nil {
		logs = io.Discard
	}
	if h.Listen == "" {
		h.Listen = "127.0.0.1:0"
	}
	w, err := New(context.Background(), Config{
		Broker:   mq.Config{Address: "127.0.0.1:1", ClientID: "worker-http-test"},
		Models:   []consumer.Model{mlpModel("mlp", nil)},
		Consumer: consumer.Config{Worker: "test", IntakeWorkers: 1, Writers: 1},
		HTTP:     h,
		Results:  models.Results{Spool: models.SpoolMemory},
		Logger:   slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.serveHTTP() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.hs.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("serveHTTP: %v", err)
		}
		w.lis = nil
		w.release()
	})
	return w
}

// The server takes its timeouts and infer cap from the config's http
// section, and the defaults when it leaves them out.
func TestHTTPServerSettings(t *testing.T) {
	w := httpWorker(t, models.HTTP{}, nil)
	hs := w.hs
	if hs.ReadHeaderTimeout != 5*time.Second || hs.ReadTimeout != time.Minute || hs.WriteTimeout != time.Minute || hs.IdleTimeout != 2*time.Minute {
		t.Errorf("default timeouts: header %v read %v write %v idle %v", hs.ReadHeaderTimeout, hs.ReadTimeout, hs.WriteTimeout, hs.IdleTimeout)
	}
	w = httpWorker(t, models.HTTP{ReadHeaderTimeout: models.Duration(time.Second), ReadTimeout: models.Duration(2 * time.Second),
		WriteTimeout: models.Duration(3 * time.Second), IdleTimeout: models.Duration(4 * time.Second)}, nil)
	hs = w.hs
	if hs.ReadHeaderTimeout != time.Second || hs.ReadTimeout != 2*time.Second || hs.WriteTimeout != 3*time.Second || hs.IdleTimeout != 4*time.Second {
		t.Errorf("configured timeouts: header %v read %v write %v idle %v", hs.ReadHeaderTimeout, hs.ReadTimeout, hs.WriteTimeout, hs.IdleTimeout)
	}
}

// Slow clients lose their connection at the configured timeouts: one
// that trickles its headers, one that declared a 60 MB body and sends a
// byte, one idle after its request.
func TestHTTPSlowClientsCut(t *testing.T) {
	short := models.Duration(300 * time.Millisecond)
	w := httpWorker(t, models.HTTP{ReadHeaderTimeout: short, ReadTimeout: short, IdleTimeout: short}, nil)
	addr := w.Addr().String()
	for _, tc := range []struct {
		name, send string
	}{
		{"headers never end", "GET /healthz HTTP/1.1\r\nHost: x\r\n"},
		{"body never ends", "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 60000000\r\n\r\n{"},
		{"idle after a request", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tc.send); err != nil {
				t.Fatal(err)
			}
			// Far above the 300 ms configured, far below a default.
			_ = c.SetReadDeadline(time.Now().Add(4 * time.Second))
			_, err = io.Copy(io.Discard, c) // whatever the server answers, until it closes
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				t.Fatalf("the connection is still open after 4 s")
			}
		})
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 and its key.
func writeCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	ca := testcert.NewCA(t, "inferq test CA")
	srv := ca.Server(t, "inferq-test")
	return srv.CertFile, srv.KeyFile, ca.Pool
}

// With tls_cert and tls_key the listener speaks HTTPS only; with a token
// (here from auth_token_file) it asks for it on all but health.
func TestHTTPTLSAndToken(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := writeCert(t)
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := httpWorker(t, models.HTTP{TLSCert: certFile, TLSKey: keyFile, AuthTokenFile: tokFile}, nil)
	base := "https://" + w.Addr().String()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(path, auth string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path, auth string
		code       int
	}{
		{"/healthz", "", 200},
		{"/v2/health/live", "", 200},
		{"/v1/models", "", 401},
		{"/v1/models", "Bearer wrong", 401},
		{"/v1/models", "Bearer s3cret", 200},
		{"/metrics", "Bearer s3cret", 200},
	} {
		if got := get(tc.path, tc.auth); got != tc.code {
			t.Errorf("GET %s with %q: %d, want %d", tc.path, tc.auth, got, tc.code)
		}
	}
	// Plain HTTP gets no answer from a route.
	resp, err := http.Get("http://" + w.Addr().String() + "/healthz")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP was served")
		}
	}
}

// A key that does not belong to the certificate stops New with the fields
// named; so do an unreadable token file and an address in use (New
// released what it built with a nil worker and panicked).
func TestHTTPConfigErrors(t *testing.T) {
	dir := t.TempDir()
	certFile, _, _ := writeCert(t)
	_, otherKey, _ := writeCert(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tc := range []struct {
		name string
		h    models.HTTP
		want string
	}{
		{"key of another certificate", models.HTTP{TLSCert: certFile, TLSKey: otherKey}, "http.tls_cert"},
		{"token file missing", models.HTTP{AuthTokenFile: filepath.Join(dir, "nope")}, "http.auth_token_file"},
		{"address in use", models.HTTP{Listen: taken.Addr().String()}, "http: listen on " + taken.Addr().String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.h.Listen == "" {
				tc.h.Listen = "127.0.0.1:0"
			}
			_, err := New(context.Background(), Config{
				Broker: mq.Config{Address: "127.0.0.1:1", ClientID: "worker-http-test"},
				Models: []consumer.Model{mlpModel("mlp", nil)}, HTTP: tc.h, Results: models.Results{Spool: models.SpoolMemory},
			})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// Listening beyond loopback without a token is logged as a warning.
func TestHTTPOpenListenerWarns(t *testing.T) {
	for _, tc := range []struct {
		name   string
		h      models.HTTP
		warned bool
	}{
		{"all interfaces, no token", models.HTTP{Listen: "0.0.0.0:0"}, true},
		{"all interfaces, token", models.HTTP{Listen: "0.0.0.0:0", AuthToken: "t"}, false},
		{"loopback, no token", models.HTTP{Listen: "127.0.0.1:0"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &lockedBuffer{}
			httpWorker(t, tc.h, logs)
			warned := false
			sc := bufio.NewScanner(strings.NewReader(logs.String()))
			for sc.Scan() {
				warned = warned || strings.Contains(sc.Text(), "level=WARN") && strings.Contains(sc.Text(), "without a bearer token")
			}
			if warned != tc.warned {
				t.Errorf("warned %v, want %v:\n%s", warned, tc.warned, logs.String())
			}
		})
	}
}

// lockedBuffer is a log sink the worker's goroutines (the broker
// connection's warnings among them) write while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
