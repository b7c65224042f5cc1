package bench

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/testcert"
	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// tlsTokenBroker serves the embedded broker over TLS (a self-signed
// certificate for 127.0.0.1, written to caFile) and refuses every call
// without the token; refused counts the refusals.
func tlsTokenBroker(t *testing.T, token string) (addr, caFile string, refused *atomic.Int64) {
	t.Helper()
	ca := testcert.NewCA(t, "broker CA")
	srv, caFile := ca.Server(t, "broker"), ca.File
	refused = &atomic.Int64{}
	check := func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("authorization"); len(v) == 0 || v[0] != token {
			refused.Add(1)
			return status.Error(codes.Unauthenticated, "no token")
		}
		return nil
	}
	g := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{srv.TLS}})),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := check(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}))
	b := broker.New(broker.Options{PollWaitFloor: 50 * time.Millisecond})
	pb.RegisterKubemqServer(g, b)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(func() {
		g.Stop()
		_ = b.Close()
	})
	return lis.Addr().String(), caFile, refused
}

// TestBenchBrokerConnCarriesTokenAndTLS: the run's clients reach a broker
// that wants TLS and a token with the config's BrokerConn.
func TestBenchBrokerConnCarriesTokenAndTLS(t *testing.T) {
	addr, ca, refused := tlsTokenBroker(t, "s3cret")
	c := Config{BrokerConn: mq.Config{AuthToken: "s3cret", TLS: mq.TLS{CA: ca}}}
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := newProducers(ctx, c.brokerConn(addr, false), "bench-conn-test", 1, false, log)
	if err != nil {
		t.Fatalf("producers over TLS with a token: %v", err)
	}
	defer p.close()
	if err := p.clients[0].Conn().Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if n := refused.Load(); n != 0 {
		t.Errorf("%d calls came without the token", n)
	}
	if got := c.brokerConn("127.0.0.1:1", true); got.AuthToken != "" || got.TLS != (mq.TLS{}) {
		t.Errorf("the embedded broker's connection carries %+v", got)
	}
}
