package broker_test

// The broker's auth token and TLS: every RPC (unary, stream, Ping) wants
// the token in metadata "authorization"; TLS with a client CA wants a
// client certificate the CA signed.

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/testcert"
	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// dialWith dials addr with creds and closes the connection at the end.
func dialWith(t *testing.T, addr string, creds credentials.TransportCredentials) pb.KubemqClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewKubemqClient(conn)
}

// withToken is ctx carrying tok as the SDKs send it ("" sends none).
func withToken(ctx context.Context, tok string) context.Context {
	if tok == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", tok)
}

// calls makes a unary call (SendQueueMessage), Ping, and a stream call
// (QueuesDownstream: the refusal comes with the first Recv), and returns
// their errors by name.
func calls(ctx context.Context, c pb.KubemqClient) map[string]error {
	errs := map[string]error{}
	_, errs["SendQueueMessage"] = c.SendQueueMessage(ctx, &pb.QueueMessage{MessageID: "m1", ClientID: "auth-test", Channel: "auth", Body: []byte("x")})
	_, errs["Ping"] = c.Ping(ctx, &pb.Empty{})
	st, err := c.QueuesDownstream(ctx)
	if err == nil {
		err = st.Send(&pb.QueuesDownstreamRequest{RequestID: "r1", ClientID: "auth-test", RequestTypeData: pb.QueuesDownstreamRequestType_Get,
			Channel: "auth", MaxItems: 1, WaitTimeout: 50})
	}
	if err == nil || errors.Is(err, io.EOF) {
		// A stream the server already ended fails Send with io.EOF; its
		// status comes with Recv.
		_, err = st.Recv()
	}
	errs["QueuesDownstream"] = err
	return errs
}

func TestAuthTokenEveryRPC(t *testing.T) {
	srv := brokertest.NewServer(t, broker.Options{PollWaitFloor: 50 * time.Millisecond, AuthToken: "s3cret"})
	c := dialWith(t, srv.Addr, insecure.NewCredentials())
	for _, tc := range []struct {
		name, token string
		ok          bool
	}{
		{"right token", "s3cret", true},
		{"wrong token", "s3cret2", false},
		{"no token", "", false},
		{"bearer prefix", "Bearer s3cret", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(withToken(context.Background(), tc.token), 10*time.Second)
			defer cancel()
			for rpc, err := range calls(ctx, c) {
				if tc.ok {
					if err != nil {
						t.Errorf("%s: %v", rpc, err)
					}
					continue
				}
				if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "Error 421") {
					t.Errorf("%s: err %v; want Unauthenticated, Error 421", rpc, err)
				}
			}
		})
	}
	// The right token's message, back from its closed stream; the refused
	// sends left nothing.
	waitQueueLen(t, srv, "auth", 1)
}

func TestNoAuthTokenTakesAnyCall(t *testing.T) {
	srv := brokertest.NewServer(t, broker.Options{PollWaitFloor: 50 * time.Millisecond})
	c := dialWith(t, srv.Addr, insecure.NewCredentials())
	ctx, cancel := context.WithTimeout(withToken(context.Background(), "anything"), 10*time.Second)
	defer cancel()
	for rpc, err := range calls(ctx, c) {
		if err != nil {
			t.Errorf("%s: %v", rpc, err)
		}
	}
}

func TestMutualTLS(t *testing.T) {
	ca := testcert.NewCA(t, "broker CA")
	other := testcert.NewCA(t, "other CA")
	server := ca.Server(t, "broker")
	srv := brokertest.NewServer(t, broker.Options{PollWaitFloor: 50 * time.Millisecond,
		TLS: broker.TLSFiles{Cert: server.CertFile, Key: server.KeyFile, ClientCA: ca.File}})
	for _, tc := range []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{
		{"client certificate", []tls.Certificate{ca.Client(t, "inferq").TLS}, true},
		{"no client certificate", nil, false},
		{"certificate of another CA", []tls.Certificate{other.Client(t, "intruder").TLS}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialWith(t, srv.Addr, credentials.NewTLS(&tls.Config{RootCAs: ca.Pool, Certificates: tc.certs, MinVersion: tls.VersionTLS12}))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := c.Ping(ctx, &pb.Empty{})
			if tc.ok != (err == nil) {
				t.Fatalf("ping over TLS: err %v; want ok %v", err, tc.ok)
			}
		})
	}
	t.Run("plaintext", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := dialWith(t, srv.Addr, insecure.NewCredentials()).Ping(ctx, &pb.Empty{}); err == nil {
			t.Fatal("a plaintext ping reached a TLS broker")
		}
	})
}

// TLS without a client CA takes any client that trusts the server.
func TestServerTLS(t *testing.T) {
	ca := testcert.NewCA(t, "broker CA")
	server := ca.Server(t, "broker")
	srv := brokertest.NewServer(t, broker.Options{TLS: broker.TLSFiles{Cert: server.CertFile, Key: server.KeyFile}, AuthToken: "tok"})
	c := dialWith(t, srv.Addr, credentials.NewTLS(&tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}))
	ctx, cancel := context.WithTimeout(withToken(context.Background(), "tok"), 10*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx, &pb.Empty{}); err != nil {
		t.Fatalf("ping over TLS with the token: %v", err)
	}
}

func TestTLSHalfConfigured(t *testing.T) {
	ca := testcert.NewCA(t, "broker CA")
	server := ca.Server(t, "broker")
	for _, tc := range []struct {
		name  string
		files broker.TLSFiles
		want  string
	}{
		{"cert only", broker.TLSFiles{Cert: server.CertFile}, "TLS key is not"},
		{"key only", broker.TLSFiles{Key: server.KeyFile}, "TLS cert is not"},
		{"client CA only", broker.TLSFiles{ClientCA: ca.File}, "TLS cert and key are not"},
		{"missing file", broker.TLSFiles{Cert: server.CertFile + ".gone", Key: server.KeyFile}, ".gone"},
		{"CA not PEM", broker.TLSFiles{Cert: server.CertFile, Key: server.KeyFile, ClientCA: server.KeyFile}, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := broker.New(broker.Options{TLS: tc.files})
			defer b.Close()
			err := b.Start("127.0.0.1:0")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v; want an error with %q", err, tc.want)
			}
		})
	}
}

// waitQueueLen waits for queue ch to hold n waiting messages.
func waitQueueLen(t *testing.T, srv *brokertest.Server, ch string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(srv.Queue(ch)) != n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("queue %s holds %d waiting messages; want %d", ch, len(srv.Queue(ch)), n)
		}
	}
}

// TestWarnsBeyondLoopbackWithoutToken (issue 27 item 5): a broker that
// listens beyond loopback without an auth token warns at start (as inferq's
// HTTP and gRPC listeners do), naming the address and how to set one; on
// loopback, or with a token, it does not.
func TestWarnsBeyondLoopbackWithoutToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr, token string
		warn        bool
	}{
		{"0.0.0.0:0", "", true},
		{"127.0.0.1:0", "", false},
		{"[::1]:0", "", false},
		{"0.0.0.0:0", "secret", false},
	} {
		t.Run(tc.addr+" token "+tc.token, func(t *testing.T) {
			t.Parallel()
			var logs strings.Builder
			srv := broker.New(broker.Options{AuthToken: tc.token,
				Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))})
			t.Cleanup(func() { srv.Close() })
			if err := srv.Start(tc.addr); err != nil {
				if strings.Contains(tc.addr, "::1") {
					t.Skipf("no IPv6 loopback here: %v", err)
				}
				t.Fatal(err)
			}
			out := logs.String()
			warned := strings.Contains(out, "level=WARN") && strings.Contains(out, "broker listens beyond loopback without an auth token")
			if warned != tc.warn {
				t.Errorf("warned = %v, want %v; logs:\n%s", warned, tc.warn, out)
			}
			if warned && (!strings.Contains(out, "INFERQ_BROKER_AUTH_TOKEN") || !strings.Contains(out, "addr=")) {
				t.Errorf("the warning names neither how to set a token nor the address:\n%s", out)
			}
		})
	}
}
