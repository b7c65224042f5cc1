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
// (trap 13), so the Poller's quiesce and re-count run in tests as in
// production. While the broker is away, pollers and subscriptions retry with
// one backoff (github.com/cenkalti/backoff/v5, Config.RetryMin/RetryMax) and
// log a repeated warning at most once per Config.LogRepeatEvery (package
// lograte). An event handed to a callback (PollerConfig.OnState,
// OnSettleError) is logged by the callback's owner, not here.
//
// Files: config.go (Config, Conn, stream clients), poller.go (the Poller's
// loop), poller_client.go (its stream clients, polls, deliveries),
// message.go (messages and batch settlement), sender.go, unary.go, events.go,
// queries.go, errors.go.
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
	"google.golang.org/grpc/metadata"
)

// TLS configures a TLS connection to the broker.
type TLS struct {
	// CA is a PEM file with the certificate(s) that sign the broker's
	// certificate. Setting CA (or Cert) turns TLS on.
	CA string
	// Cert and Key would present a client certificate (mutual TLS).
	// kubemq-go v1.9.0 cannot present one on its queue streams, so
	// Validate refuses Key; Cert alone is taken as the CA, as the SDK does.
	Cert, Key string
	// ServerName overrides the name checked in the broker's certificate.
	ServerName string
}

func (t TLS) enabled() bool { return t.CA != "" || t.Cert != "" }

func (t TLS) caFile() string {
	if t.CA != "" {
		return t.CA
	}
	return t.Cert
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
	// TLS turns TLS on when CA or Cert is set.
	TLS TLS
	// Logger receives the package's logs. Default: discard.
	Logger *slog.Logger

	// SendBatchMax is the most messages the Sender puts in one stream send.
	// Default 256.
	SendBatchMax int
	// SendBatchBytes caps the bodies and metadata of one stream send, so
	// that coalescing never builds a batch over the gRPC limit. Default 32 MiB.
	SendBatchBytes int
	// MaxMessageBytes is the largest body+metadata Send accepts; bigger
	// messages fail locally with ErrTooLarge instead of tearing the upstream
	// stream down for 1-2 s (trap 10). Default 16 MiB.
	MaxMessageBytes int
	// SendTimeout bounds one stream send to the broker. Default 10 s.
	SendTimeout time.Duration
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

// Validate checks cfg and fills in the defaults.
func (c *Config) Validate() error {
	if _, _, err := splitAddr(c.Address); err != nil {
		return err
	}
	if c.TLS.Key != "" {
		return errors.New("mq: config: TLS.Key: client certificates are not supported by kubemq-go v1.9.0 queue streams")
	}
	if c.TLS.enabled() {
		if _, err := os.Stat(c.TLS.caFile()); err != nil {
			return fmt.Errorf("mq: config: TLS CA: %w", err)
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
	setDefault(&c.ReplaceAfter, 10*time.Second)
	setDefault(&c.RetryMin, 100*time.Millisecond)
	setDefault(&c.RetryMax, 3*time.Second)
	setDefault(&c.LogRepeatEvery, time.Minute)
	if c.RetryMax < c.RetryMin {
		c.RetryMax = c.RetryMin
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
	if cfg.TLS.enabled() {
		pem, err := os.ReadFile(cfg.TLS.caFile())
		if err != nil {
			return nil, fmt.Errorf("mq: dial: read CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("mq: dial: no certificate in %s", cfg.TLS.caFile())
		}
		creds = credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: cfg.TLS.ServerName, MinVersion: tls.VersionTLS12})
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(100<<20), grpc.MaxCallSendMsgSize(100<<20)),
		// Reconnect quickly after a broker restart (trap 9); gRPC's default
		// backoff grows to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	if cfg.AuthToken != "" {
		tok := cfg.AuthToken
		opts = append(opts,
			grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, o ...grpc.CallOption) error {
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
	if c.cfg.TLS.enabled() {
		opts = append(opts, qs.WithCredentials(c.cfg.TLS.caFile(), c.cfg.TLS.ServerName))
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
