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

func (nopEvents) EventStream(func(error)) EventStream { return nopEvents{} }
func (nopEvents) Publish(context.Context, string, []byte, map[string]string) error {
	return nil
}
func (nopEvents) Close(context.Context) {}

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
			pub := newPublisher(nopEvents{}, 8, func() {}, func() {}, log)
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

// The webhook follows no redirect (issue 27 item 4): a webhook that
// answers 307 to another server does not get the alert re-POSTed there,
// nor does a redirect to another path of the same host; the answer is a
// failure that names the host and the status, not the target.
func TestAlertWebhookFollowsNoRedirect(t *testing.T) {
	var elsewhere, samePath sync.Mutex
	elsewhereHits, sameHits := 0, 0
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Lock()
		elsewhereHits++
		elsewhere.Unlock()
	}))
	t.Cleanup(other.Close)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/other-host":
			http.Redirect(w, r, other.URL+"/collect", http.StatusTemporaryRedirect)
		case "/same-host":
			http.Redirect(w, r, "/landing", http.StatusPermanentRedirect)
		case "/landing":
			samePath.Lock()
			sameHits++
			samePath.Unlock()
		}
	}))
	t.Cleanup(hook.Close)
	for _, path := range []string{"/other-host", "/same-host"} {
		t.Run(strings.TrimPrefix(path, "/"), func(t *testing.T) {
			var logs syncBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			dropped := 0
			pub := newPublisher(nopEvents{}, 8, func() {}, func() {}, log)
			a := newAlerter(pub, hook.URL+path, time.Second, func() { dropped++ }, log)
			a.fire(Alert{TaskID: "t1", Queue: "q"})
			a.wait()
			out := logs.String()
			if dropped != 1 || !strings.Contains(out, "dlq webhook failed") || !strings.Contains(out, "redirect") {
				t.Errorf("a redirect is not a failure that says so (dropped %d): %s", dropped, out)
			}
			if strings.Contains(out, strings.TrimPrefix(other.URL, "http://")) {
				t.Errorf("the log names the redirect's target: %s", out)
			}
		})
	}
	elsewhere.Lock()
	defer elsewhere.Unlock()
	samePath.Lock()
	defer samePath.Unlock()
	if elsewhereHits != 0 || sameHits != 0 {
		t.Errorf("the alert was re-POSTed: %d times to another host, %d times to another path", elsewhereHits, sameHits)
	}
}
