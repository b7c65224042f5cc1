package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/datadir"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/testcert"
	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Half a TLS configuration, or two tokens, is a usage error naming the flag.
func TestBrokerSecurityFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", "c.pem"}, "--tls-cert needs --tls-key"},
		{[]string{"--tls-key", "k.pem"}, "--tls-key needs --tls-cert"},
		{[]string{"--tls-client-ca", "ca.pem"}, "--tls-client-ca needs --tls-cert and --tls-key"},
		{[]string{"--auth-token", "a", "--auth-token-file", "f"}, "exclusive"},
		{[]string{"--auth-token-file", "/nonexistent/token"}, "--auth-token-file"},
		{[]string{"--events-store-max-events", "0"}, "cannot be 0"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			a, _, errb := testApp(nil)
			code := a.main(context.Background(), append([]string{"broker", "--listen", "127.0.0.1:0"}, tc.args...))
			if code == 0 || !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want an error with %q", code, errb, tc.want)
			}
		})
	}
}

func TestBrokerTokenSources(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("  from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string { return map[string]string{"INFERQ_BROKER_AUTH_TOKEN": "from-env"}[k] }
	for _, tc := range []struct {
		name string
		f    brokerSecurityFlags
		want string
	}{
		{"flag", brokerSecurityFlags{token: "from-flag"}, "from-flag"},
		{"file", brokerSecurityFlags{tokenFile: file}, "from-file"},
		{"env", brokerSecurityFlags{}, "from-env"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := tc.f.resolve(env)
			if err != nil || got != tc.want {
				t.Fatalf("token %q, err %v; want %q", got, err, tc.want)
			}
		})
	}
}

// `inferq broker` with a token and mutual TLS takes inferq's connection
// with the same token and certificates and refuses a wrong token; its start
// line never shows the token.
func TestBrokerCommandTokenAndMutualTLS(t *testing.T) {
	ca := testcert.NewCA(t, "broker CA")
	server, client := ca.Server(t, "broker"), ca.Client(t, "inferq")
	addr := freeAddr(t)
	a, out, errb := testApp(map[string]string{"INFERQ_BROKER_AUTH_TOKEN": "s3cret"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- a.main(ctx, []string{"broker", "--listen", addr, "--tls-cert", server.CertFile, "--tls-key", server.KeyFile, "--tls-client-ca", ca.File})
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("broker exit %d: %s", code, errb)
		}
		if strings.Contains(out.String()+errb.String(), "s3cret") {
			t.Errorf("the token was printed:\n%s%s", out, errb)
		}
		if !strings.Contains(out.String(), "mutual TLS, auth token required") {
			t.Errorf("start line %q does not say mutual TLS and token", out)
		}
	}()
	tls := mq.TLS{CA: ca.File, Cert: client.CertFile, Key: client.KeyFile}
	if err := ping(t, mq.Config{Address: addr, AuthToken: "s3cret", TLS: tls}); err != nil {
		t.Fatalf("ping with the token and a client certificate: %v", err)
	}
	if err := ping(t, mq.Config{Address: addr, AuthToken: "wrong", TLS: tls}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("ping with a wrong token: %v; want Unauthenticated", err)
	}
}

// serve --embedded-broker wants the config's broker.auth_token, and
// refuses broker.tls, which it cannot serve.
func TestEmbeddedBrokerTakesConfigToken(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	srv, err := startEmbeddedBroker("127.0.0.1:0", models.Broker{AuthToken: "s3cret"}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := ping(t, mq.Config{Address: srv.Addr(), AuthToken: "s3cret"}); err != nil {
		t.Fatalf("ping with the config's token: %v", err)
	}
	if err := ping(t, mq.Config{Address: srv.Addr()}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("ping without a token: %v; want Unauthenticated", err)
	}
	_, err = startEmbeddedBroker("127.0.0.1:0", models.Broker{TLS: models.TLS{CA: "ca.pem"}}, log)
	if err == nil || !strings.Contains(err.Error(), "broker.tls") {
		t.Fatalf("embedded broker with broker.tls: %v; want an error naming broker.tls", err)
	}
}

// ping dials cfg, waiting up to 10 s for a broker still starting, and
// returns the last ping's error.
func ping(t *testing.T, cfg mq.Config) error {
	t.Helper()
	cfg.ClientID = "broker-cmd-test"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := mq.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		err = c.Ping(ctx)
		if err == nil || status.Code(err) == codes.Unauthenticated || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freeAddr is a loopback address no one listens on (just now).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// serve --embedded-broker keeps its queues in broker.data_dir (or
// $INFERQ_BROKER_DATA_DIR): a message sent before a restart is there after.
func TestEmbeddedBrokerDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "broker")
	a, _, _ := testApp(map[string]string{"INFERQ_BROKER_DATA_DIR": dir})
	cfgFile := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfgFile, []byte("broker:\n  address: 127.0.0.1:1\nmodels:\n  - name: m\n    path: m.onnx\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := a.loadConfig(configFlags{path: cfgFile})
	if err != nil {
		t.Fatalf("load config: %v", err)
	}
	if c.Broker.DataDir != dir {
		t.Fatalf("broker.data_dir = %q, want %q from INFERQ_BROKER_DATA_DIR", c.Broker.DataDir, dir)
	}
	log := slog.New(slog.DiscardHandler)
	srv, err := startEmbeddedBroker("127.0.0.1:0", c.Broker, log)
	if err != nil {
		t.Fatal(err)
	}
	res, err := srv.SendQueueMessage(context.Background(), &pb.QueueMessage{ClientID: "t", Channel: "kept", Body: []byte("x")})
	if err != nil || res.IsError {
		t.Fatalf("send: %v %v", err, res)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	srv, err = startEmbeddedBroker("127.0.0.1:0", c.Broker, log)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if got := srv.QueueSnapshot("kept").Waiting; len(got) != 1 || string(got[0].Body) != "x" {
		t.Fatalf("after a restart: %v, want the message", got)
	}
}

// `inferq broker --data-dir` (here from $INFERQ_BROKER_DATA_DIR) says where
// it keeps its data and takes the directory's lock.
func TestBrokerCommandDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	a, out, errb := testApp(map[string]string{"INFERQ_BROKER_DATA_DIR": dir})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	addr := freeAddr(t)
	go func() { done <- a.main(ctx, []string{"broker", "--listen", addr}) }()
	err := ping(t, mq.Config{Address: addr})
	_, lockErr := os.Stat(filepath.Join(dir, datadir.LockFile))
	cancel()
	if err != nil {
		t.Errorf("ping: %v", err)
	}
	if code := <-done; code != 0 {
		t.Fatalf("broker exit %d: %s", code, errb)
	}
	if !strings.Contains(out.String(), "data in "+dir) {
		t.Errorf("start line %q does not name the data dir", out)
	}
	if lockErr != nil {
		t.Errorf("data dir lock: %v", lockErr)
	}
}
