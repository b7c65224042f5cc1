package consumer

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// nopEvents takes events and drops them.
type nopEvents struct{}

func (nopEvents) SendEvent(context.Context, string, []byte, map[string]string) error { return nil }

// syncBuffer is a bytes.Buffer safe for the handler's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAlertWebhookErrorsHideTheURL: a failing webhook is logged with its
// host, never with its path or query, which carry the hook's credential.
func TestAlertWebhookErrorsHideTheURL(t *testing.T) {
	const secretPath, secretQuery = "/services/T0/B0/PATHSECRET", "sig=QUERYSECRET"
	closed := func() string { // an address nothing listens on
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return addr
	}
	server := func(h http.HandlerFunc) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	deadAddr := closed()
	for _, tc := range []struct {
		name string
		host string // the webhook's host:port
	}{
		{"refused", closed()},
		{"status 500", server(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusInternalServerError) })},
		{"timeout", server(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(time.Second):
			}
		})},
		{"redirect to a dead host", server(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://"+deadAddr+secretPath+"?"+secretQuery, http.StatusTemporaryRedirect)
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			dropped := 0
			pub := newPublisher(nopEvents{}, 8, func() {}, log)
			a := newAlerter(pub, "http://user:pw@"+tc.host+secretPath+"?"+secretQuery, 200*time.Millisecond, func() { dropped++ }, log)
			a.fire(Alert{TaskID: "t1", Queue: "q"})
			a.wait()
			out := logs.String()
			if !strings.Contains(out, "dlq webhook failed") || dropped != 1 {
				t.Fatalf("no failure logged (dropped %d): %s", dropped, out)
			}
			for _, secret := range []string{"PATHSECRET", "QUERYSECRET", "pw@"} {
				if strings.Contains(out, secret) {
					t.Errorf("log line carries %q: %s", secret, out)
				}
			}
			if !strings.Contains(out, tc.host) {
				t.Errorf("log line does not name the host %s: %s", tc.host, out)
			}
			t.Log(out)
		})
	}
}
