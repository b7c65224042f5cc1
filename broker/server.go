package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc"
)

// Options configure a Server. The zero value gives the real KubeMQ defaults.
type Options struct {
	// PollWaitFloor is the smallest WaitTimeout a queue poll or receive
	// honours; shorter waits are raised to it. Default 1000 ms, like KubeMQ.
	// Tests may shorten it.
	PollWaitFloor time.Duration
	// Retention is how long events store messages are kept. Default 24 h.
	Retention time.Duration
	// MaxMessageBytes is the largest gRPC message accepted; bigger ones
	// are refused with ResourceExhausted. Default 100 MiB.
	MaxMessageBytes int
	// DefaultMaxReceiveCount applies to queue messages sent without a
	// policy. Default 1024.
	DefaultMaxReceiveCount int
	// Logger receives the server's logs. Default: discard.
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.PollWaitFloor <= 0 {
		o.PollWaitFloor = time.Second
	}
	if o.Retention <= 0 {
		o.Retention = 24 * time.Hour
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = 100 << 20
	}
	if o.DefaultMaxReceiveCount <= 0 {
		o.DefaultMaxReceiveCount = 1024
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// ErrClosed is returned by Start on a closed server.
var ErrClosed = errors.New("broker: server closed")

// Server serves the KubeMQ gRPC protocol from memory. Its methods are safe
// for concurrent use. Start it with Start or Serve; Close stops it and waits
// for in-flight calls.
type Server struct {
	opts Options
	log  *slog.Logger

	queues *queueStore // queue*.go
	pubsub *pubSub     // events*.go, queries.go

	mu     sync.Mutex
	grpc   *grpc.Server
	lis    net.Listener
	closed bool
	done   chan struct{}
}

var _ pb.KubemqServer = (*Server)(nil)

// New returns a Server with opts applied over the defaults. It does not
// listen until Start or Serve.
func New(opts Options) *Server {
	opts.setDefaults()
	s := &Server{opts: opts, log: opts.Logger, done: make(chan struct{})}
	s.queues = newQueueStore(&s.opts)
	s.pubsub = newPubSub(&s.opts)
	return s
}

// Start listens on addr ("127.0.0.1:0" picks a free port) and serves in a
// goroutine. Addr reports the bound address.
func (s *Server) Start(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("broker: listen on %s: %w", addr, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Millisecond):
		return nil
	}
}

// Serve serves on lis until Close. It returns nil after Close.
func (s *Server) Serve(lis net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		lis.Close()
		return ErrClosed
	}
	g := grpc.NewServer(
		grpc.MaxRecvMsgSize(s.opts.MaxMessageBytes),
		grpc.MaxSendMsgSize(s.opts.MaxMessageBytes+(1<<20)),
	)
	pb.RegisterKubemqServer(g, s)
	s.grpc, s.lis = g, lis
	s.mu.Unlock()
	s.log.Info("broker listening", "addr", lis.Addr().String())
	if err := g.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("broker: serve: %w", err)
	}
	return nil
}

// Addr is the address the server listens on, or "" before Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lis == nil {
		return ""
	}
	return s.lis.Addr().String()
}

// Close stops accepting calls, ends open streams and waits for in-flight
// calls to return. It is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	g := s.grpc
	s.mu.Unlock()
	s.queues.close()
	s.pubsub.close()
	if g != nil {
		g.Stop()
	}
	return nil
}

// Ping answers the client's health check.
func (s *Server) Ping(ctx context.Context, _ *pb.Empty) (*pb.PingResult, error) {
	return &pb.PingResult{Host: "inferq-embedded", Version: "inferq-broker", ServerStartTime: 0, ServerUpTimeSeconds: 0}, nil
}
