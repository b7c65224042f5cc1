package mq

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/testcert"
	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, as PEM files in a test's temporary directory.
type testPKI struct {
	ca                    string // CA certificate file
	clientCert, clientKey string
	server                testcert.Leaf
	pool                  *x509.CertPool
	otherCA               string // a CA that signed neither
	otherCert, otherKey   string // a client certificate signed by otherCA
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca := testcert.NewCA(t, "inferq test CA")
	cli := ca.Client(t, "inferq")
	other := testcert.NewCA(t, "other CA")
	intruder := other.Client(t, "intruder")
	return &testPKI{ca: ca.File, clientCert: cli.CertFile, clientKey: cli.KeyFile, server: ca.Server(t, "broker"),
		pool: ca.Pool, otherCA: other.File, otherCert: intruder.CertFile, otherKey: intruder.KeyFile}
}

// serveKubemq serves srv (the embedded broker, or a wrapper of it) on
// 127.0.0.1 with opts until the test ends, and returns its address.
func serveKubemq(t *testing.T, srv pb.KubemqServer, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	pb.RegisterKubemqServer(g, srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	t.Cleanup(func() {
		g.Stop()
		<-done
	})
	return lis.Addr().String()
}

// dialCfg dials with cfg and closes the Conn when the test ends. Tests
// check for leaks with a cleanup registered before their servers', so that
// it runs last.
func dialCfg(t *testing.T, cfg Config) *Conn {
	t.Helper()
	cfg.ClientID = "mqtest"
	cfg.RetryMin, cfg.RetryMax = 20*time.Millisecond, 300*time.Millisecond
	c, err := Dial(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c
}

// TestMutualTLS: a broker that requires a client certificate takes the
// Conn's own connection and the SDK's queue streams (through the bridge)
// when TLS.Cert and TLS.Key are set, and refuses the Conn without them.
func TestMutualTLS(t *testing.T) {
	t.Cleanup(func() { checkNoLeaks(t) })
	pki := newTestPKI(t)
	opts := fastBroker()
	opts.TLS = broker.TLSFiles{Cert: pki.server.CertFile, Key: pki.server.KeyFile, ClientCA: pki.ca}
	addr := brokertest.NewServer(t, opts).Addr
	for _, tc := range []struct {
		name string
		tls  TLS
		ok   bool
	}{
		{"client certificate", TLS{CA: pki.ca, Cert: pki.clientCert, Key: pki.clientKey}, true},
		{"no client certificate", TLS{CA: pki.ca}, false},
		{"certificate of another CA", TLS{CA: pki.ca, Cert: pki.otherCert, Key: pki.otherKey}, false},
		{"server not signed by CA", TLS{CA: pki.otherCA, Cert: pki.clientCert, Key: pki.clientKey}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialCfg(t, Config{Address: addr, TLS: tc.tls, SendTimeout: 3 * time.Second, CallTimeout: 3 * time.Second})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := c.Ping(ctx)
			if !tc.ok {
				if err == nil {
					t.Fatal("ping: the broker took the connection")
				}
				if err := c.Sender().Send(ctx, OutMessage{Channel: chanName(t), Body: []byte("x")}); err == nil {
					t.Fatal("send: the broker took the stream")
				}
				return
			}
			if err != nil {
				t.Fatalf("ping: %v", err)
			}
			ch := chanName(t)
			sendN(t, c.Sender(), ch, 3) // the SDK's upstream, through the bridge
			got := make(chan string, 3)
			runPoller(t, c, PollerConfig{ // the SDK's downstream, through the bridge
				Channel: ch,
				Deliver: func(ctx context.Context, batch []*Message) error {
					for _, m := range batch {
						got <- string(m.Body)
						_ = m.Ack()
					}
					return nil
				},
			})
			for range 3 {
				select {
				case <-got:
				case <-time.After(10 * time.Second):
					t.Fatal("message not delivered over mutual TLS")
				}
			}
		})
	}
}

func TestConfigValidateTLS(t *testing.T) {
	pki := newTestPKI(t)
	for _, tc := range []struct {
		name string
		tls  TLS
		want string // "" : valid
	}{
		{"ca only", TLS{CA: pki.ca}, ""},
		{"client certificate", TLS{CA: pki.ca, Cert: pki.clientCert, Key: pki.clientKey}, ""},
		{"client certificate, system roots", TLS{Cert: pki.clientCert, Key: pki.clientKey}, ""},
		{"cert without key", TLS{CA: pki.ca, Cert: pki.clientCert}, "TLS.Cert is set without TLS.Key"},
		{"key without cert", TLS{CA: pki.ca, Key: pki.clientKey}, "TLS.Key is set without TLS.Cert"},
		{"key of another cert", TLS{Cert: pki.clientCert, Key: pki.otherKey}, "TLS.Cert and TLS.Key"},
		{"missing CA", TLS{CA: "/nonexistent"}, "TLS.CA"},
		{"CA not PEM", TLS{CA: pki.clientKey}, "TLS.CA: no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Address: "127.0.0.1:50000", TLS: tc.tls}
			err := cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid config refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// silentBroker is the embedded broker whose Ping and QueuesInfo never
// answer.
type silentBroker struct{ *broker.Server }

func (silentBroker) Ping(ctx context.Context, _ *pb.Empty) (*pb.PingResult, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (silentBroker) QueuesInfo(ctx context.Context, _ *pb.QueuesInfoRequest) (*pb.QueuesInfoResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestCallTimeout: a unary call to a broker that never answers ends after
// Config.CallTimeout with ErrUnavailable; a caller's earlier deadline stays
// the caller's; a receive's wait is not cut by CallTimeout.
func TestCallTimeout(t *testing.T) {
	t.Cleanup(func() { checkNoLeaks(t) })
	b := broker.New(broker.Options{})
	t.Cleanup(func() { _ = b.Close() })
	addr := serveKubemq(t, silentBroker{b})
	c := dialCfg(t, Config{Address: addr, CallTimeout: 200 * time.Millisecond})
	call := func(t *testing.T, name string, f func(context.Context) error) (time.Duration, error) {
		t.Helper()
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- f(context.Background()) }()
		select {
		case err := <-done:
			return time.Since(start), err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no return after 10 s", name)
			return 0, nil
		}
	}
	for _, tc := range []struct {
		name string
		f    func(context.Context) error
	}{
		{"ping", c.Ping},
		{"queues info", func(ctx context.Context) error { _, err := c.QueuesInfo(ctx, ""); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			took, err := call(t, tc.name, tc.f)
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "CallTimeout") {
				t.Fatalf("got %v, want ErrUnavailable naming CallTimeout", err)
			}
			t.Logf("%s failed after %v: %v", tc.name, took, err)
		})
	}
	t.Run("caller deadline", func(t *testing.T) {
		_, err := call(t, "ping", func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			return c.Ping(ctx)
		})
		if status.Code(err) != codes.DeadlineExceeded || errors.Is(err, ErrUnavailable) {
			t.Fatalf("got %v, want the caller's deadline (DeadlineExceeded), not ErrUnavailable", err)
		}
	})
	t.Run("receive wait", func(t *testing.T) {
		// The broker answers a peek of an empty channel after its 1 s
		// wait, five times CallTimeout.
		took, err := call(t, "peek", func(ctx context.Context) error {
			_, err := c.Peek(ctx, chanName(t), 1, time.Second)
			return err
		})
		if err != nil {
			t.Fatalf("peek with a 1 s wait: %v (after %v)", err, took)
		}
	})
}

// freezableProxy forwards TCP connections to addr. After freeze it keeps
// them open and forwards nothing, holding what it read, until thaw: a peer
// that stops answering without a FIN, like a broker stopped with SIGSTOP.
type freezableProxy struct {
	addr  string
	lis   net.Listener
	wg    sync.WaitGroup
	done  chan struct{} // closed at cleanup
	mu    sync.Mutex
	conns []net.Conn
	open  chan struct{} // closed while forwarding
	// refusing closes each new connection at once (see refuseNew).
	refusing atomic.Bool
}

func newFreezableProxy(t *testing.T, addr string) *freezableProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezableProxy{addr: addr, lis: lis, done: make(chan struct{}), open: make(chan struct{})}
	close(p.open)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			if p.refusing.Load() {
				in.Close()
				continue
			}
			out, err := net.Dial("tcp", addr)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			p.wg.Add(2)
			go p.pipe(out, in)
			go p.pipe(in, out)
		}
	}()
	t.Cleanup(func() {
		close(p.done)
		lis.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// proxiedBroker serves an embedded broker with opts behind a
// freezableProxy and dials it through the proxy with cfg (Address set
// here). The goroutines of all three are checked for leaks at the end.
func proxiedBroker(t *testing.T, opts broker.Options, cfg Config) (*freezableProxy, *Conn, *broker.Server) {
	t.Helper()
	t.Cleanup(func() { checkNoLeaks(t) })
	b := broker.New(opts)
	t.Cleanup(func() { _ = b.Close() })
	proxy := newFreezableProxy(t, serveKubemq(t, b))
	cfg.Address = proxy.lis.Addr().String()
	return proxy, dialCfg(t, cfg), b
}

func (p *freezableProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.forwarding() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// forwarding waits while the proxy is frozen; false when it closed.
func (p *freezableProxy) forwarding() bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		return true
	case <-p.done:
		return false
	}
}

func (p *freezableProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

// refuseNew closes every connection made from now on as soon as it is
// accepted; those already open go on.
func (p *freezableProxy) refuseNew() { p.refusing.Store(true) }

func (p *freezableProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// TestKeepaliveNoticesSilentBroker: when the broker stops answering without
// closing the connection, keepalive closes the Conn's connection within
// KeepaliveTime + KeepaliveTimeout (gRPC's floor for KeepaliveTime is 10 s).
func TestKeepaliveNoticesSilentBroker(t *testing.T) {
	t.Parallel()
	proxy, c, _ := proxiedBroker(t, broker.Options{},
		Config{KeepaliveTime: 10 * time.Second, KeepaliveTimeout: time.Second, KeepalivePermitWithoutStream: true})
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	proxy.freeze()
	start := time.Now()
	waitFor(t, 20*time.Second, "the connection to leave Ready", func() bool {
		return c.cc.GetState() != connectivity.Ready
	})
	t.Logf("silent broker noticed after %v", time.Since(start))
}

// A Send whose ctx ends before a frozen broker answers says so, and which
// channel it was sending to; before, it returned the bare context error.
func TestSendNamesAnUnansweredSend(t *testing.T) {
	skipSDKRace(t)
	proxy, c, _ := proxiedBroker(t, fastBroker(), Config{})
	ch := chanName(t)
	if err := c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	proxy.freeze()
	t.Cleanup(proxy.thaw)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := c.Sender().Send(ctx, OutMessage{Channel: ch, Body: []byte("b")})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer") || !strings.Contains(err.Error(), ch) {
		t.Errorf("send to a frozen broker: %v", err)
	}
}
