package bench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/mq"
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
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "broker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "broker.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
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
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})),
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
