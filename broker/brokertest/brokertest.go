// Package brokertest runs an embedded KubeMQ broker for tests, in the
// manner of net/http/httptest: NewServer starts one on 127.0.0.1 and
// registers its Close with the test's cleanup.
//
//	srv := brokertest.NewServer(t, broker.Options{PollWaitFloor: 50 * time.Millisecond})
//	host, port := srv.HostPort()
//	c, err := queues_stream.NewQueuesStreamClient(ctx, queues_stream.WithAddress(host, port))
//
// For inferq's security paths, opts.AuthToken and opts.TLS (certificates
// from package testcert) make the broker demand a token and (mutual) TLS.
//
// Stop and Restart take the broker away and bring it back on the same
// address, for broker-loss tests. The broker's state lives in memory and
// survives a Stop/Restart cycle (like a KubeMQ restart with its store):
// queued messages stay, messages held by streams that the stop cut return
// to their queues as after a client disconnect.
package brokertest

import (
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	pb "github.com/kubemq-io/protobuf/go"
)

// Server is an embedded broker listening on a loopback address. Its methods
// are safe for concurrent use.
type Server struct {
	// Addr is the host:port the broker listens on; it stays the same
	// across Stop and Restart.
	Addr string
	// Broker is the broker itself, for what Server does not wrap.
	Broker *broker.Server

	t       testing.TB
	mu      sync.Mutex
	stopped bool
	closed  bool
}

// NewServer starts a broker with opts (a DataDir too) on 127.0.0.1 and a
// free port and closes it when the test ends. It fails the test if the
// broker cannot start.
func NewServer(t testing.TB, opts broker.Options) *Server {
	t.Helper()
	b, err := broker.Open(opts)
	if err != nil {
		t.Fatalf("brokertest: open: %v", err)
	}
	if err := b.Start("127.0.0.1:0"); err != nil {
		t.Fatalf("brokertest: start: %v", err)
	}
	s := &Server{Addr: b.Addr(), Broker: b, t: t}
	t.Cleanup(s.Close)
	return s
}

// HostPort splits Addr the way the kubemq-go options take it.
func (s *Server) HostPort() (string, int) {
	host, port, _ := net.SplitHostPort(s.Addr)
	p, _ := strconv.Atoi(port)
	return host, p
}

// Close shuts the broker down for good and waits for in-flight calls to
// return. It is safe to call more than once.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	_ = s.Broker.Close()
}

// Stop takes the broker off the network: the listener closes, every call
// and stream ends (clients see the connection drop) and Stop waits for the
// handlers. State stays in memory for Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.stopped {
		return
	}
	s.stopped = true
	s.Broker.Stop()
}

// Restart brings a stopped broker back on the same address, with the state
// it had. It fails the test if the address cannot be bound again within a
// few seconds. Restart on a running broker does nothing.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.t.Fatalf("brokertest: restart after close")
	}
	if !s.stopped {
		return
	}
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = s.Broker.Start(s.Addr); err == nil {
			s.stopped = false
			return
		}
	}
	s.t.Fatalf("brokertest: restart on %s: %v", s.Addr, err)
}

// Queue returns copies of the messages waiting in the queue channel name,
// in delivery order (not the delayed ones, not those held by polls).
func (s *Server) Queue(name string) []*pb.QueueMessage {
	return s.Broker.QueueSnapshot(name).Waiting
}

// InFlight counts the messages of queue channel name that polls hold.
func (s *Server) InFlight(name string) int {
	return s.Broker.QueueSnapshot(name).InFlight
}

// QueueState returns the full snapshot of queue channel name.
func (s *Server) QueueState(name string) broker.QueueState {
	return s.Broker.QueueSnapshot(name)
}
