package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/inferq/inferq/datadir"
	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc"
)

// Options configure a Server. The zero value gives the real KubeMQ defaults.
type Options struct {
	// PollWaitFloor is the smallest WaitTimeout a queue poll or receive
	// honours; shorter waits are raised to it. Default 1000 ms, like KubeMQ.
	// Tests may shorten it.
	PollWaitFloor time.Duration
	// SecondLength is how long one second lasts in the protocol's
	// whole-second fields: legacy receive, ack-all and StreamQueueMessage
	// WaitTimeSeconds, StreamQueueMessage VisibilitySeconds, DelaySeconds
	// and ExpirationSeconds. Default time.Second, like KubeMQ.
	// Tests may shorten it so that second-granular waits run fast; the times
	// the server reports (DelayedTo, ExpirationAt) follow the shortened clock.
	SecondLength time.Duration
	// InfoLatency delays every QueuesInfo answer, which holds the counts
	// taken when the call came: KubeMQ's costs ~3-10 ms (docs/KUBEMQ.md
	// trap 14), and by the time it answers it may be out of date. Tests
	// set it to see that nothing waits on a count it need not wait on, and
	// that a late count misleads no one. Default 0.
	InfoLatency time.Duration
	// Retention is how long events store messages are kept. Default 24 h.
	Retention time.Duration
	// EventsStoreMaxEvents and EventsStoreMaxBytes bound each events store
	// channel besides Retention: past either, the oldest events are
	// dropped (the newest one is always kept). Bytes count bodies, metadata
	// and tags. Defaults 100000 events and 128 MiB; negative: no bound.
	EventsStoreMaxEvents int
	EventsStoreMaxBytes  int64
	// DataDir, when set, keeps the queues and the events store on disk in
	// that directory (created if missing), so that a broker opened on it
	// again, after a stop or a crash, has them back: see persist.go for
	// the format and the fsync policy. Only Open takes it; without it
	// everything is in memory. One broker at a time may use a directory.
	DataDir string
	// SegmentBytes is the size at which the data dir's log starts a new
	// segment and compacts the full ones into a snapshot. Default 16 MiB.
	SegmentBytes int64
	// MaxMessageBytes is the largest gRPC message accepted; bigger ones
	// are refused with ResourceExhausted. Default 100 MiB.
	MaxMessageBytes int
	// MaxQueueBytes bounds what each queue channel holds: its messages
	// waiting, delayed, and delivered but not yet settled, each counted as
	// its body, metadata, tags and ids plus 256 bytes of the broker's own
	// (so that many small messages are bounded too). A send that would pass
	// it is refused: its result is an error naming the queue and the bound;
	// what the broker moves itself (dead letters, re-queues, a restart's
	// replay) is not refused. Default 256 MiB; negative: no bound.
	MaxQueueBytes int64
	// DefaultMaxReceiveCount applies to queue messages sent without a
	// policy; it is also the largest MaxReceiveCount a message may ask for,
	// like KubeMQ's queue.maxReceiveCount setting. Default 1024.
	DefaultMaxReceiveCount int
	// Logger receives the server's logs. Default: discard.
	Logger *slog.Logger
	// AuthToken, when set, is required of every call, Ping included: the
	// gRPC metadata "authorization" must equal it (where the KubeMQ SDKs
	// send their auth token). Other calls are refused with Unauthenticated
	// and KubeMQ's "Error 421: authentication verification failed".
	AuthToken string
	// TLS, when its Cert and Key are set, serves gRPC over TLS; its
	// ClientCA makes it mutual TLS. The files are read at each Start.
	TLS TLSFiles

	// diskFault, set by tests (export_test.go), fails data dir file
	// operations as a full disk would (faultFunc).
	diskFault faultFunc
}

func (o *Options) setDefaults() {
	if o.PollWaitFloor <= 0 {
		o.PollWaitFloor = time.Second
	}
	if o.SecondLength <= 0 {
		o.SecondLength = time.Second
	}
	if o.Retention <= 0 {
		o.Retention = 24 * time.Hour
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = 100 << 20
	}
	if o.MaxQueueBytes == 0 {
		o.MaxQueueBytes = DefaultMaxQueueBytes
	}
	if o.DefaultMaxReceiveCount <= 0 {
		o.DefaultMaxReceiveCount = 1024
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.EventsStoreMaxEvents == 0 {
		o.EventsStoreMaxEvents = DefaultEventsStoreMaxEvents
	}
	if o.EventsStoreMaxBytes == 0 {
		o.EventsStoreMaxBytes = DefaultEventsStoreMaxBytes
	}
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = 16 << 20
	}
}

// DefaultMaxQueueBytes is the default of Options.MaxQueueBytes.
const DefaultMaxQueueBytes int64 = 256 << 20

// The default events store bounds, per channel.
const (
	DefaultEventsStoreMaxEvents       = 100000
	DefaultEventsStoreMaxBytes  int64 = 128 << 20
)

// ErrClosed is returned by Start on a closed server.
var ErrClosed = errors.New("broker: server closed")

// ErrServing is returned by Start and Serve while the server is already
// serving; Stop it first.
var ErrServing = errors.New("broker: server already serving")

// Server serves the KubeMQ gRPC protocol from memory. Its methods are safe
// for concurrent use. Start it with Start or Serve; Stop takes it off the
// network and keeps its state, so Start may bring it back; Close stops it
// for good and waits for in-flight calls.
type Server struct {
	opts Options
	log  *slog.Logger

	queues  *queueStore // queue*.go
	pubsub  *pubSub     // events*.go, queries.go
	persist *persister  // persist*.go; nil without a data dir
	unlock  func()      // the data dir's lock

	mu      sync.Mutex
	grpc    *grpc.Server
	lis     net.Listener
	addr    string         // last bound address; kept across Stop
	serving sync.WaitGroup // Serve goroutines started by Start
	closed  bool
	done    chan struct{}

	started time.Time // New's time, for Ping
}

var _ pb.KubemqServer = (*Server)(nil)

// New returns a Server with opts applied over the defaults, in memory. It
// does not listen until Start or Serve. A DataDir needs Open: New panics on
// one.
func New(opts Options) *Server {
	if opts.DataDir != "" {
		panic("broker: New with a DataDir; use Open")
	}
	return newServer(opts)
}

func newServer(opts Options) *Server {
	opts.setDefaults()
	s := &Server{opts: opts, log: opts.Logger, done: make(chan struct{})}
	s.queues = newQueueStore(&s.opts)
	s.pubsub = newPubSub(&s.opts)
	s.started = time.Now()
	return s
}

// Open is New, and with opts.DataDir it locks that directory and loads the
// queues and events store kept there; from then on every change is written
// there too. Close releases the directory.
func Open(opts Options) (*Server, error) {
	s := newServer(opts)
	if s.opts.DataDir == "" {
		return s, nil
	}
	// One process per data dir, as for inferq's own (datadir).
	lock, err := datadir.Acquire(s.opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("broker: data dir: %w", err)
	}
	unlock := func() { _ = lock.Release() }
	p, err := openPersister(s)
	if err != nil {
		unlock()
		return nil, err
	}
	s.persist, s.unlock = p, unlock
	s.queues.persist, s.pubsub.persist = p, p
	for _, c := range s.pubsub.stores {
		c.persist = p
	}
	return s, nil
}

// Start listens on addr ("127.0.0.1:0" picks a free port) and serves in a
// goroutine. Addr reports the bound address. After Stop, Start may be called
// again (on Addr() to come back on the same address).
func (s *Server) Start(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("broker: listen on %s: %w", addr, err)
	}
	g, err := s.attach(lis)
	if err != nil {
		lis.Close()
		return err
	}
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		if err := g.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("broker serve failed", "addr", lis.Addr().String(), "err", err)
		}
	}()
	return nil
}

// Serve serves on lis until Stop or Close. It returns nil after either.
func (s *Server) Serve(lis net.Listener) error {
	g, err := s.attach(lis)
	if err != nil {
		lis.Close()
		return err
	}
	if err := g.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("broker: serve: %w", err)
	}
	return nil
}

// attach makes the gRPC server that will serve lis.
func (s *Server) attach(lis net.Listener) (*grpc.Server, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.grpc != nil {
		return nil, ErrServing
	}
	sec, err := securityOptions(&s.opts)
	if err != nil {
		return nil, err
	}
	g := grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.opts.MaxMessageBytes),
		grpc.MaxSendMsgSize(s.opts.MaxMessageBytes + (1 << 20)),
		// Stop and Close wait for handlers, so that held queue messages
		// are back in their queues when they return.
		grpc.WaitForHandlers(true),
	}, sec...)...)
	pb.RegisterKubemqServer(g, s)
	s.grpc, s.lis, s.addr = g, lis, lis.Addr().String()
	s.log.Info("broker listening", "addr", s.addr, "tls", s.opts.TLS.Enabled(), "mtls", s.opts.TLS.ClientCA != "", "auth_token", s.opts.AuthToken != "")
	if s.opts.AuthToken == "" && !loopback(lis.Addr()) {
		s.log.Warn("broker listens beyond loopback without an auth token: whoever reaches it can read, send and remove every queue's messages and events; set --auth-token-file, --auth-token or INFERQ_BROKER_AUTH_TOKEN (serve --embedded-broker: broker.auth_token)",
			"addr", s.addr)
	}
	return g, nil
}

// loopback reports whether a listener's address is reachable from this
// host only.
func loopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// Addr is the address the server listens on, or "" before Start. After
// Stop it still reports the last address, where Start may serve again.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Stop takes the server off the network: it closes the listener, ends every
// call and stream (messages held by a closed stream go back to their queues,
// as when a client disconnects) and waits for the handlers to return. The
// state (queues, and whatever the pub/sub side keeps) stays in memory, so a
// later Start serves it again, like a KubeMQ restart with persistence. Stop
// on a server that is not serving does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	g := s.grpc
	s.grpc, s.lis = nil, nil
	s.mu.Unlock()
	if g != nil {
		g.Stop()
	}
	s.serving.Wait()
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
	s.grpc, s.lis = nil, nil
	s.mu.Unlock()
	s.queues.close()
	s.pubsub.close()
	if g != nil {
		g.Stop()
	}
	s.serving.Wait()
	if s.persist == nil {
		return nil
	}
	err := s.persist.close()
	s.unlock()
	return err
}

// Ping answers the client's health check. Like KubeMQ it reports when the
// server started (Unix seconds; here when New made it, Stop and Start keep
// it) and its uptime in whole seconds.
func (s *Server) Ping(ctx context.Context, _ *pb.Empty) (*pb.PingResult, error) {
	return &pb.PingResult{
		Host:                "inferq-embedded",
		Version:             "inferq-broker",
		ServerStartTime:     s.started.Unix(),
		ServerUpTimeSeconds: int64(time.Since(s.started) / time.Second),
	}, nil
}
