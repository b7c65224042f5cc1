package chaos

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// gRPC methods of the KubeMQ service the proxy treats apart.
const (
	methodUpstream     = "/kubemq.kubemq/QueuesUpstream"   // stream sends: the messages sent to count
	methodDownstream   = "/kubemq.kubemq/QueuesDownstream" // stream polls: the deliveries to count
	methodEventsStream = "/kubemq.kubemq/SendEventsStream" // events store sends: inferq's result records
)

// proxyMaxMsg is above the broker's 100 MiB gRPC limit, so the proxy never
// refuses what the broker would take.
const proxyMaxMsg = 128 << 20

// tagKey is the tag every message the harness sends carries: the key its
// outcomes (deliveries, records, dead letter and unprocessable copies) are
// counted under. inferq copies tags into its resends and forwards.
const tagKey = "chaos-key"

// proxy stands between inferq and the broker, a gRPC pass-through of the
// KubeMQ service (frames are forwarded as bytes, in order, with their
// metadata and status), so that faults can be made on the wire, the same
// way against the embedded broker and a real KubeMQ:
//
//   - hold(match) stops forwarding the frames of the methods match selects,
//     in both directions, and holds new calls of them, until release: all
//     methods is a frozen broker (like SIGSTOP: connections stay open,
//     nothing answers); SendEventsStream alone is a result store that
//     stops answering while tasks still flow.
//   - restart(down) drops every connection and refuses new ones for down,
//     then listens again on the same address: a broker restart that keeps
//     its store (the embedded broker keeps nothing across a real restart).
//
// It also counts the deliveries of each message to inferq (stream poll
// responses), by tagKey or else the task_id tag: a count above the
// scenario's bound is a redelivery loop, whether the loop NAcks (the
// ReceiveCount grows) or resends (each resend is a new message).
type proxy struct {
	t       testing.TB
	backend *grpc.ClientConn
	creds   credentials.TransportCredentials // nil: plaintext

	mu       sync.Mutex
	addr     string // stable across restarts
	srv      *grpc.Server
	match    func(method string) bool // the current hold; nil: none
	failFast bool                     // the hold refuses instead of waiting
	released chan struct{}            // closed by release
	deliv    map[string]int
	maxRC    int
	maxDeliv int
	sent     map[string]int // messages sent through the proxy, by channel
}

// newProxy listens on 127.0.0.1 (TLS with serverTLS when not nil) and
// forwards to the broker at backend; it closes when the test ends.
func newProxy(t testing.TB, backend string, serverTLS *tls.Config) *proxy {
	t.Helper()
	cc, err := grpc.NewClient(backend,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(proxyMaxMsg), grpc.MaxCallSendMsgSize(proxyMaxMsg)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}))
	if err != nil {
		t.Fatalf("proxy: dial %s: %v", backend, err)
	}
	p := &proxy{t: t, backend: cc, addr: "127.0.0.1:0", deliv: map[string]int{}, sent: map[string]int{}}
	if serverTLS != nil {
		p.creds = credentials.NewTLS(serverTLS)
	}
	if err := p.listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.release()
		p.mu.Lock()
		srv := p.srv
		p.mu.Unlock()
		if srv != nil {
			srv.Stop()
		}
		_ = cc.Close()
	})
	return p
}

// Addr is the address inferq dials.
func (p *proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

func (p *proxy) listen() error {
	p.mu.Lock()
	addr := p.addr
	p.mu.Unlock()
	var lis net.Listener
	var err error
	// The address may take a moment to come free after a restart.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if lis, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("proxy: listen on %s: %w", addr, err)
	}
	opts := []grpc.ServerOption{
		grpc.UnknownServiceHandler(p.handle), grpc.ForceServerCodec(rawCodec{}),
		grpc.MaxRecvMsgSize(proxyMaxMsg), grpc.MaxSendMsgSize(proxyMaxMsg),
	}
	if p.creds != nil {
		opts = append(opts, grpc.Creds(p.creds))
	}
	srv := grpc.NewServer(opts...)
	p.mu.Lock()
	p.addr, p.srv = lis.Addr().String(), srv
	p.mu.Unlock()
	go func() { _ = srv.Serve(lis) }()
	return nil
}

// hold stops the methods match selects until release: their frames wait.
func (p *proxy) hold(match func(method string) bool) { p.block(match, false) }

// refuse fails the calls of the methods match selects, those in progress
// and new ones, with Unavailable until release.
func (p *proxy) refuse(match func(method string) bool) { p.block(match, true) }

func (p *proxy) block(match func(method string) bool, refuse bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.match != nil {
		close(p.released)
	}
	p.match, p.failFast, p.released = match, refuse, make(chan struct{})
}

// release ends the hold.
func (p *proxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.match != nil {
		close(p.released)
		p.match = nil
	}
}

func allMethods(string) bool         { return true }
func resultStore(method string) bool { return method == methodEventsStream }

// restart drops every connection, refuses new ones for down, then listens
// again on the same address.
func (p *proxy) restart(ctx context.Context, down time.Duration) error {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	srv.Stop()
	select {
	case <-time.After(down):
	case <-ctx.Done():
	}
	return p.listen()
}

// errRefused is what a refused call gets.
var errRefused = status.Error(codes.Unavailable, "chaos proxy: refused")

// refusing reports whether calls of method are refused now.
func (p *proxy) refusing(method string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.match != nil && p.failFast && p.match(method)
}

// gate returns when method may pass, errRefused, or ctx's error.
func (p *proxy) gate(ctx context.Context, method string) error {
	for {
		p.mu.Lock()
		match, refuse, released := p.match, p.failFast, p.released
		p.mu.Unlock()
		if match == nil || !match(method) {
			return nil
		}
		if refuse {
			return errRefused
		}
		select {
		case <-released:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// handle forwards one call of any method to the backend.
func (p *proxy) handle(_ any, ss grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "chaos proxy: no method")
	}
	ctx := ss.Context()
	if err := p.gate(ctx, method); err != nil {
		if err == errRefused {
			return err
		}
		return status.FromContextError(err).Err()
	}
	in, _ := metadata.FromIncomingContext(ctx)
	out := metadata.MD{}
	for k, v := range in {
		if strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") || k == "content-type" || k == "user-agent" || k == "te" {
			continue
		}
		out[k] = v
	}
	bctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, out))
	defer cancel()
	cs, err := p.backend.NewStream(bctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}
	go p.up(bctx, cancel, method, ss, cs)
	return p.down(bctx, method, ss, cs)
}

// up forwards the client's frames to the broker.
func (p *proxy) up(ctx context.Context, cancel context.CancelFunc, method string, ss grpc.ServerStream, cs grpc.ClientStream) {
	for {
		var b []byte
		if err := ss.RecvMsg(&b); err != nil {
			if errors.Is(err, io.EOF) {
				_ = cs.CloseSend()
			} else {
				cancel()
			}
			return
		}
		if p.gate(ctx, method) != nil {
			cancel() // ends down, which answers the client
			return
		}
		if method == methodUpstream {
			p.countSent(b)
		}
		if cs.SendMsg(&b) != nil {
			return // the broker side's error ends down
		}
	}
}

// down forwards the broker's header, frames and trailer to the client and
// returns the broker's status.
func (p *proxy) down(ctx context.Context, method string, ss grpc.ServerStream, cs grpc.ClientStream) error {
	header := false
	for {
		var b []byte
		err := cs.RecvMsg(&b)
		if !header {
			header = true
			if h, herr := cs.Header(); herr == nil && len(h) > 0 {
				_ = ss.SendHeader(h)
			}
		}
		if err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			if ctx.Err() != nil && p.refusing(method) {
				return errRefused
			}
			return err
		}
		if p.gate(ctx, method) != nil {
			return status.Error(codes.Unavailable, "chaos proxy: call ended while held or refused")
		}
		if method == methodDownstream {
			p.count(b)
		}
		if err := ss.SendMsg(&b); err != nil {
			return err
		}
	}
}

// count records the deliveries of a stream poll response.
func (p *proxy) count(b []byte) {
	var r pb.QueuesDownstreamResponse
	if r.Unmarshal(b) != nil || len(r.Messages) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range r.Messages {
		key := m.Tags[tagKey]
		if key == "" {
			key = m.Tags["task_id"]
		}
		if key == "" || len(key) > 256 {
			continue
		}
		p.deliv[key]++
		p.maxDeliv = max(p.maxDeliv, p.deliv[key])
		if a := m.Attributes; a != nil && int(a.ReceiveCount) > p.maxRC {
			p.maxRC = int(a.ReceiveCount)
		}
	}
}

// countSent records the messages of a stream send request.
func (p *proxy) countSent(b []byte) {
	var r pb.QueuesUpstreamRequest
	if r.Unmarshal(b) != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range r.Messages {
		p.sent[m.Channel]++
	}
}

// sentTo is the number of messages sent to channel through the proxy
// (resends included).
func (p *proxy) sentTo(channel string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent[channel]
}

// deliveries returns the delivery count of key.
func (p *proxy) deliveries(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deliv[key]
}

// maxDeliveries is the most deliveries of one message so far.
func (p *proxy) maxDeliveries() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxDeliv
}

// maxReceiveCount is the largest ReceiveCount delivered.
func (p *proxy) maxReceiveCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxRC
}

// rawCodec passes messages through as bytes. It calls itself "proto" so
// that the broker sees the content-subtype it expects.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = bytes.Clone(data) // gRPC may reuse its receive buffers
	return nil
}
func (rawCodec) Name() string { return "proto" }
