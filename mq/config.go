// Package mq is the one place in inferq that speaks to KubeMQ (kubemq-go
// v1.9.0). It turns the broker's traps, measured in KUBEMQ.md, into a small
// API: a Conn with a coalescing Sender, one Poller per queue that watches
// idle queues without a waiting stream poll, unary helpers (peek, receive,
// queue depth, ping), events, events store and queries with reconnection,
// and typed errors (ErrUnavailable, ErrTooLarge, ErrClosed, ErrTimeout).
//
// Contexts: every context passed to a method bounds that call only. The SDK
// stream clients live on a context owned by the Conn (or by a Poller's Run)
// and end with Close, never with a caller's context (trap 4).
//
// The package behaves the same against every broker: the embedded one
// (package broker) strands messages in partly settled polls as KubeMQ does
// (trap 13), so the Poller's one batch at a time and re-count run in tests as in
// production. While the broker is away, pollers and subscriptions retry with
// one backoff (github.com/cenkalti/backoff/v5, Config.RetryMin/RetryMax) and
// log a repeated warning at most once per Config.LogRepeatEvery (package
// lograte). An event handed to a callback (PollerConfig.OnState,
// OnSettleError) is logged by the callback's owner, not here.
//
// TLS: Config.TLS verifies the broker (CA) and presents a client
// certificate (Cert, Key). The SDK's queue stream clients take a CA file
// only, so with a client certificate they reach the broker through the
// Conn's TLS bridge (tlsbridge.go). Every unary call is bounded by
// Config.CallTimeout; the Conn's own connection has gRPC keepalive.
//
// Files: config.go (Config, Conn, stream clients), poller.go (the Poller's
// loop), poller_client.go (its stream clients, polls, deliveries),
// message.go (messages and batch settlement), sender.go, unary.go, events.go,
// eventstream.go (plain events on a stream), queries.go, errors.go,
// tlsbridge.go.
package mq

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	qs "github.com/kubemq-io/kubemq-go/queues_stream"
	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
)

// TLS configures a TLS connection to the broker. Setting any of CA, Cert
// or Key turns TLS on.
type TLS struct {
	// CA is a PEM file with the certificate(s) that sign the broker's
	// certificate. Empty: the system's roots.
	CA string
	// Cert and Key are PEM files with a client certificate and its key,
	// presented to the broker (mutual TLS). Set both or neither.
	Cert, Key string
	// ServerName overrides the name checked in the broker's certificate
	// (default: the host of Address).
	ServerName string
}

func (t TLS) enabled() bool { return t.CA != "" || t.Cert != "" || t.Key != "" }

// sdkCanDial reports whether kubemq-go's queues_stream client can make the
// connection itself: it takes a CA file and a server name only
// (qs.WithCredentials), so a client certificate, or the system roots,
// need the Conn's bridge (tlsbridge.go).
func (t TLS) sdkCanDial() bool { return !t.enabled() || (t.CA != "" && t.Cert == "") }

// config builds the client side TLS configuration for a broker at host.
// Its errors name the field at fault.
func (t TLS) config(host string) (*tls.Config, error) {
	switch {
	case t.Cert != "" && t.Key == "":
		return nil, errors.New("mq: config: TLS.Cert is set without TLS.Key: a client certificate needs its key")
	case t.Key != "" && t.Cert == "":
		return nil, errors.New("mq: config: TLS.Key is set without TLS.Cert: a client key needs its certificate")
	}
	cfg := &tls.Config{ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fmt.Errorf("mq: config: TLS.CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("mq: config: TLS.CA: no PEM certificate in %s", t.CA)
		}
		cfg.RootCAs = pool
	}
	if t.Cert != "" {
		pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("mq: config: TLS.Cert and TLS.Key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// Config configures a Conn. The zero value of every field but Address gets
// a default from Validate.
type Config struct {
	// Address is the broker's gRPC host:port, e.g. "127.0.0.1:50000".
	Address string
	// ClientID names this process to the broker; stream clients get it with
	// a suffix. Default "inferq".
	ClientID string
	// AuthToken is KubeMQ's JWT, sent as the authorization header.
	AuthToken string
	// TLS turns TLS on when CA, Cert or Key is set.
	TLS TLS
	// Logger receives the package's logs. Default: discard.
	Logger *slog.Logger

	// SendBatchMax is the most messages the Sender puts in one stream send.
	// Default 256.
	SendBatchMax int
	// SendBatchBytes caps the bodies, metadata and tags of one stream
	// send, so that coalescing never builds a batch over the gRPC limit.
	// Default 32 MiB, raised to MaxMessageBytes when that is larger; at
	// most MaxSendBytes.
	SendBatchBytes int
	// MaxMessageBytes is the largest message (body, metadata and tags)
	// Send accepts; bigger messages fail locally with ErrTooLarge instead
	// of tearing the upstream stream down for 1-2 s (trap 10), and
	// SendCopy sends them by reference. Default 16 MiB; at most
	// MaxSendBytes. A consumer sets it to what it accepts, so that it can
	// resend any task it took.
	MaxMessageBytes int
	// SendTimeout bounds one stream send to the broker. Default 10 s.
	SendTimeout time.Duration
	// CallTimeout bounds each unary call on the Conn (peek, receive, queue
	// info, ping, event send, query response) whose context has no earlier
	// deadline; a call that waits at the broker on purpose (a receive's
	// wait, a query's timeout) gets that wait on top. A call that runs out
	// of it fails with ErrUnavailable: a broker that does not answer is as
	// good as away. Default 10 s.
	CallTimeout time.Duration
	// KeepaliveTime and KeepaliveTimeout are the gRPC keepalive of the
	// Conn's own connection: after KeepaliveTime without a frame from the
	// broker, a ping; no answer within KeepaliveTimeout closes the
	// connection, so that a broker gone without a FIN is noticed while
	// streams wait on it. Defaults 5 min and 10 s. KubeMQ's gRPC server
	// keeps gRPC's default enforcement (MinTime 5 min, no pings without a
	// stream): a client that pings more often on a quiet connection gets a
	// GOAWAY "too_many_pings" after three pings, which closes the
	// connection and every stream on it. Lower KeepaliveTime only for a
	// broker that permits it. Idle middleboxes are kept open meanwhile by
	// TCP keepalive (Go's dialer: 15 s).
	KeepaliveTime, KeepaliveTimeout time.Duration
	// KeepalivePermitWithoutStream pings even when no stream is open; off
	// by default, as KubeMQ counts such pings as abuse.
	KeepalivePermitWithoutStream bool
	// ReplaceAfter: a stream client that stays disconnected this long is
	// replaced by a new one (new gRPC connection), so that a long outage
	// does not leave it on gRPC's growing reconnect backoff. Default 10 s.
	ReplaceAfter time.Duration
	// RetryMin and RetryMax bound the backoff between attempts while the
	// broker is away. Defaults 100 ms and 3 s.
	RetryMin, RetryMax time.Duration
	// LogRepeatEvery is the most often one repeated warning (a subscription
	// or a poller retrying while the broker is away) is logged; the record
	// counts the ones dropped in between ("repeated"). Default 1 min.
	LogRepeatEvery time.Duration
}

// The broker's gRPC limits (KUBEMQ.md trap 10).
const (
	// GRPCMessageBytes is the largest gRPC message KubeMQ takes or sends
	// (and the embedded broker, and a Conn): one whole stream send or poll
	// answer, framing included.
	GRPCMessageBytes = 100 << 20
	// MaxSendBytes is the most Config.MaxMessageBytes and SendBatchBytes
	// may be: GRPCMessageBytes less 1 MiB for what they do not count
	// (channels, ids, policies, protobuf framing).
	MaxSendBytes = GRPCMessageBytes - 1<<20
)

// Validate checks cfg and fills in the defaults. Its errors name the field
// at fault.
func (c *Config) Validate() error {
	if _, _, err := splitAddr(c.Address); err != nil {
		return err
	}
	if c.TLS.enabled() {
		host, _, _ := splitAddr(c.Address)
		if _, err := c.TLS.config(host); err != nil {
			return err
		}
	}
	if c.ClientID == "" {
		c.ClientID = "inferq"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	setDefault(&c.SendBatchMax, 256)
	setDefault(&c.SendBatchBytes, 32<<20)
	setDefault(&c.MaxMessageBytes, 16<<20)
	setDefault(&c.SendTimeout, 10*time.Second)
	setDefault(&c.CallTimeout, 10*time.Second)
	setDefault(&c.KeepaliveTime, 5*time.Minute)
	setDefault(&c.KeepaliveTimeout, 10*time.Second)
	setDefault(&c.ReplaceAfter, 10*time.Second)
	setDefault(&c.RetryMin, 100*time.Millisecond)
	setDefault(&c.RetryMax, 3*time.Second)
	setDefault(&c.LogRepeatEvery, time.Minute)
	if c.RetryMax < c.RetryMin {
		c.RetryMax = c.RetryMin
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"MaxMessageBytes", c.MaxMessageBytes}, {"SendBatchBytes", c.SendBatchBytes}} {
		if f.v > MaxSendBytes {
			return fmt.Errorf("mq: config: %s %d is over %d: the broker's %d-byte gRPC message limit less 1 MiB for framing (KUBEMQ.md trap 10)",
				f.name, f.v, MaxSendBytes, GRPCMessageBytes)
		}
	}
	if c.MaxMessageBytes > c.SendBatchBytes {
		c.SendBatchBytes = c.MaxMessageBytes
	}
	return nil
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

func splitAddr(addr string) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("mq: config: address %q: %w", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 {
		return "", 0, fmt.Errorf("mq: config: address %q: bad port", addr)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return host, p, nil
}

// Conn is a connection to one KubeMQ broker: a gRPC connection for unary
// calls, subscriptions and the events store stream, and the Sender's queue
// stream client. Its methods are safe for concurrent use. Dial does not wait
// for the broker: a broker that is away at start is the same case as one
// that goes away later (calls fail with ErrUnavailable, subscriptions and
// pollers retry).
type Conn struct {
	cfg  Config
	log  *slog.Logger
	host string
	port int

	life context.Context // lifetime of every stream (trap 4)
	stop context.CancelFunc
	wg   sync.WaitGroup // background goroutines

	cc  *grpc.ClientConn
	api pb.KubemqClient

	sender *Sender
	events *storeSender
	bridge *tlsBridge // nil unless the SDK cannot dial the broker itself

	clients atomic.Int64 // stream clients made, for unique client ids
	token   string       // random, names this Conn in store client ids
	goMu    sync.Mutex   // orders goroutine starts against Close
	closed  atomic.Bool
}

// Dial validates cfg, opens the gRPC connection (without waiting for the
// broker) and starts the Sender, whose stream client warms up in the
// background (trap 3). ctx bounds Dial only; Close ends the Conn.
func Dial(ctx context.Context, cfg Config) (*Conn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	host, port, _ := splitAddr(cfg.Address)
	c := &Conn{cfg: cfg, log: cfg.Logger, host: host, port: port, token: newID()[:8]}
	creds := insecure.NewCredentials()
	var tlsCfg *tls.Config
	if cfg.TLS.enabled() {
		var err error
		if tlsCfg, err = cfg.TLS.config(host); err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(tlsCfg)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(GRPCMessageBytes), grpc.MaxCallSendMsgSize(GRPCMessageBytes)),
		// Reconnect quickly after a broker restart (trap 9); gRPC's default
		// backoff grows to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout, PermitWithoutStream: cfg.KeepalivePermitWithoutStream,
		}),
		grpc.WithChainUnaryInterceptor(c.callDeadline),
	}
	if cfg.AuthToken != "" {
		tok := cfg.AuthToken
		opts = append(opts,
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, o ...grpc.CallOption) error {
				return inv(metadata.AppendToOutgoingContext(ctx, "authorization", tok), method, req, reply, cc, o...)
			}),
			grpc.WithStreamInterceptor(func(ctx context.Context, d *grpc.StreamDesc, cc *grpc.ClientConn, method string, s grpc.Streamer, o ...grpc.CallOption) (grpc.ClientStream, error) {
				return s(metadata.AppendToOutgoingContext(ctx, "authorization", tok), d, cc, method, o...)
			}))
	}
	cc, err := grpc.NewClient(cfg.Address, opts...)
	if err != nil {
		return nil, fmt.Errorf("mq: dial %s: %w", cfg.Address, err)
	}
	c.cc, c.api = cc, pb.NewKubemqClient(cc)
	c.life, c.stop = context.WithCancel(context.WithoutCancel(ctx))
	if !cfg.TLS.sdkCanDial() {
		if c.bridge, err = newTLSBridge(c.life, cfg.Address, tlsCfg, c.log, cfg.LogRepeatEvery); err != nil {
			c.stop()
			_ = cc.Close()
			return nil, err
		}
	}
	c.events = newStoreSender(c)
	c.sender = newSender(c)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.sender.run()
	}()
	return c, nil
}

// Sender returns the Conn's queue message sender.
func (c *Conn) Sender() *Sender { return c.sender }

// Close stops the Sender, the events store stream and every subscription
// started from this Conn, closes the SDK stream clients and waits for their
// goroutines. Calls in flight fail with ErrClosed. Pollers have their own
// stream clients and stop with their Run's context; stop them first. Close
// is safe to call more than once.
func (c *Conn) Close() error {
	c.goMu.Lock()
	if !c.closed.CompareAndSwap(false, true) {
		c.goMu.Unlock()
		return nil
	}
	c.goMu.Unlock()
	c.stop()
	c.wg.Wait()
	if c.bridge != nil {
		c.bridge.close()
	}
	return c.cc.Close()
}

// spawn runs f in a goroutine that Close waits for; it reports false
// (and does not run f) once the Conn is closed.
func (c *Conn) spawn(f func()) bool {
	c.goMu.Lock()
	defer c.goMu.Unlock()
	if c.closed.Load() {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

// ready waits, within ctx, for the gRPC connection to be ready; it fails
// at once with ErrUnavailable while the connection is failing, so that a
// stream is never opened (with a long lifetime context) on a dead one.
func (c *Conn) ready(ctx context.Context) error {
	for {
		switch st := c.cc.GetState(); st {
		case connectivity.Ready:
			return nil
		case connectivity.Shutdown:
			return ErrClosed
		case connectivity.TransientFailure:
			c.cc.Connect()
			return ErrUnavailable
		default:
			if st == connectivity.Idle {
				c.cc.Connect()
			}
			if !c.cc.WaitForStateChange(ctx, st) {
				return ctx.Err()
			}
		}
	}
}

func (c *Conn) isClosed() error {
	if c.closed.Load() {
		return ErrClosed
	}
	return nil
}

// newBackoff returns the backoff between attempts while the broker is away:
// doubling from cfg.RetryMin to cfg.RetryMax, each wait drawn from the upper
// half of its step ([step/2, step]), so that pollers and subscribers that
// lost the broker together do not come back in step, and no wait exceeds
// RetryMax. backoff's jitter is symmetric around the interval (interval x
// [1-r, 1+r]): an interval of 3/4 step with r = 1/3 is that half. Owned by
// one goroutine; Reset it after a success.
func (c *Conn) newBackoff() *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     c.cfg.RetryMin * 3 / 4,
		MaxInterval:         c.cfg.RetryMax * 3 / 4,
		Multiplier:          2,
		RandomizationFactor: 1.0 / 3,
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// streamClient is one kubemq-go queues_stream client with the context its
// streams live on (trap 4): the first Send and Poll of the SDK client make
// their stream with that context, and cancelling it kills the client for
// good, so it is cancelled only by close.
type streamClient struct {
	c      *qs.QueuesStreamClient
	ctx    context.Context
	cancel context.CancelFunc
	id     string
	made   time.Time
	once   sync.Once
}

// newStreamClient makes a stream client on parent (which outlives it).
// It does not touch the network; warm it up before use.
func (c *Conn) newStreamClient(parent context.Context, purpose string) (*streamClient, error) {
	ctx, cancel := context.WithCancel(parent)
	id := fmt.Sprintf("%s-%s-%d", c.cfg.ClientID, purpose, c.clients.Add(1))
	opts := []qs.Option{qs.WithAddress(c.host, c.port), qs.WithClientId(id)}
	if c.cfg.AuthToken != "" {
		opts = append(opts, qs.WithAuthToken(c.cfg.AuthToken))
	}
	switch {
	case c.bridge != nil:
		// The SDK dials "host:port" with at most a CA file; the bridge's
		// host "unix:/dir/s" and port 1 make gRPC's unix resolver dial the
		// bridge's socket "/dir/s:1" in plaintext instead.
		opts = append(opts, qs.WithAddress("unix:"+c.bridge.base, 1))
	case c.cfg.TLS.enabled():
		opts = append(opts, qs.WithCredentials(c.cfg.TLS.CA, c.cfg.TLS.ServerName))
	}
	sc, err := qs.NewQueuesStreamClient(ctx, opts...)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("mq: new stream client: %w", err)
	}
	return &streamClient{c: sc, ctx: ctx, cancel: cancel, id: id, made: time.Now()}, nil
}

// warmSend opens the upstream stream (the SDK sleeps 1 s doing so, trap 3)
// without sending anything: Send with no messages makes the stream, then
// reports either "connection lost" (not ready) or "no messages to send"
// (ready). Later calls cost nothing and tell readiness.
func (s *streamClient) warmSend() error {
	_, err := s.c.Send(s.ctx)
	if err == nil || strings.Contains(err.Error(), "no messages to send") {
		return nil
	}
	return classify("warm up queue upstream", err)
}

// warmPoll opens the downstream stream the same way: an empty PollRequest
// fails validation ("request channel cannot be empty") after the stream
// is made and checked, without reaching the broker.
func (s *streamClient) warmPoll() error {
	_, err := s.c.Poll(s.ctx, &qs.PollRequest{})
	if err == nil || strings.Contains(err.Error(), "channel cannot be empty") {
		return nil
	}
	return classify("warm up queue downstream", err)
}

// close closes the SDK client (which waits 100 ms for settlement requests
// in its queue to go out) and then ends the stream context.
func (s *streamClient) close() {
	s.once.Do(func() {
		_ = s.c.Close()
		s.cancel()
	})
}
