package oip_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/oip"
)

// entered counts the requests that reached h.
func entered(h http.Handler, n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h.ServeHTTP(w, r)
	})
}

// slowClient opens a connection to addr and sends an infer request that
// declares declared body bytes and sends first of them; the caller sends
// more or closes it.
func slowClient(t *testing.T, addr string, declared int, first string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", declared, first); err != nil {
		t.Fatal(err)
	}
	return c
}

// Slow clients do not shut out infer requests (issue 25 item 9: 64
// connections trickling bodies held every slot until the read timeout,
// and 500 of 500 ordinary requests got 503): a request takes a slot only
// once its body has arrived, so with http.max_concurrent_requests 2 and
// four connections trickling their bodies, ordinary requests keep getting
// 200; the slow ones are answered when their bodies are complete (one at
// a time here: four arriving at once would meet the cap of 2).
func TestOIPSlowBodiesHoldNoSlot(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(entered(bareHandlerWith(t, bareOpts{http: func(c *oip.HTTPConfig) { c.MaxConcurrentInfer = 2 }}), &n))
	t.Cleanup(srv.Close)
	body := oipCases[0].body
	var slow []net.Conn
	for range 4 {
		slow = append(slow, slowClient(t, srv.Listener.Addr().String(), len(body), body[:1]))
	}
	deadline := time.Now().Add(10 * time.Second)
	for n.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // each slow request has gone as far as it goes without its body
	for i := range 5 {
		resp, out := do(t, "POST", srv.URL+"/v2/models/m/infer", []byte(body), nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("ordinary request %d beside 4 slow ones over a cap of 2: %s %s", i, resp.Status, out)
		}
	}
	for i, c := range slow {
		if _, err := c.Write([]byte(body[1:])); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Errorf("slow request %d, once its body arrived: %q %v", i, line, err)
		}
	}
}

// stall is a request body that delivers data, then signals reached and
// blocks until release is closed, then ends (the client gave up).
type stall struct {
	data    []byte
	reached chan struct{}
	release chan struct{}
}

func (s *stall) Read(p []byte) (int, error) {
	if len(s.data) > 0 {
		n := copy(p, s.data)
		s.data = s.data[n:]
		return n, nil
	}
	if s.reached != nil {
		close(s.reached)
		s.reached = nil
	}
	<-s.release
	return 0, io.EOF
}

// Bodies being read are bounded in memory by HTTPConfig.MaxBodyMemory,
// now that they hold no slot: a request whose body would take memory
// beyond it is answered 503 with Retry-After; the memory comes back when
// the request that held it ends.
func TestOIPBodyMemoryBound(t *testing.T) {
	const budget = 256 << 10
	h := bareHandlerWith(t, bareOpts{http: func(c *oip.HTTPConfig) { c.MaxConcurrentInfer, c.MaxBodyMemory = 2, budget }})
	hog := &stall{data: make([]byte, 200<<10), reached: make(chan struct{}), release: make(chan struct{})}
	reached := hog.reached
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		req := httptest.NewRequest("POST", "/v2/models/m/infer", hog)
		req.ContentLength = 1 << 20
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		done <- rec
	}()
	select {
	case <-reached: // the hog's 200 KiB are in the server's buffer
	case <-time.After(10 * time.Second):
		t.Fatal("the slow body was not read")
	}
	body := []byte(oipCases[0].body)
	rec := serveHTTP(h, "POST", "/v2/models/m/infer", body, nil)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "bytes") {
		t.Errorf("beside a body holding 200 KiB of a %d-byte bound: %d %s, want 503 with Retry-After", budget, rec.Code, rec.Body)
	}
	close(hog.release)
	if rec := <-done; rec.Code != http.StatusBadRequest {
		t.Errorf("the truncated slow body: %d %s, want 400", rec.Code, rec.Body)
	}
	if rec := serveHTTP(h, "POST", "/v2/models/m/infer", body, nil); rec.Code != http.StatusOK {
		t.Errorf("after the slow request ended: %d %s", rec.Code, rec.Body)
	}
}
