package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	pb "github.com/inferq/inferq/scaler/externalscalerpb"
	kpb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestScalerHelp(t *testing.T) {
	a, out, errb := testApp(nil)
	if code := a.main(context.Background(), []string{"scaler", "--help"}); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, errb)
	}
	help := out.String()
	for _, want := range []string{
		"Usage:\n  inferq scaler", "externalscaler.proto", "scalerAddress", "queue:", "targetDepth", "activationDepth",
		"--listen string", "127.0.0.1:6000", "0.0.0.0:6000", "--broker", "--config", "--client-id", "--poll-interval",
		"--call-timeout", "--shutdown-grace", "KUBEMQ_AUTH_TOKEN", "Waiting", "SIGTERM",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("inferq scaler --help lacks %q:\n%s", want, help)
		}
	}
	a, out, _ = testApp(nil)
	a.main(context.Background(), []string{"help"})
	if !strings.Contains(out.String(), "scaler ") {
		t.Errorf("inferq help does not list scaler:\n%s", out)
	}
}

func TestScalerUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		err  string
	}{
		{[]string{"scaler", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"scaler", "--poll-interval=1ms", "--listen=127.0.0.1:0"}, "PollInterval 1ms is outside"},
	} {
		a, _, errb := testApp(nil)
		if code := a.main(context.Background(), tt.args); code != 2 || !strings.Contains(errb.String(), tt.err) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, code, errb, tt.err)
		}
	}
}

// The scaler's broker comes from the environment and flags as serve's
// does, and needs no config file.
func TestScalerBroker(t *testing.T) {
	a, _, _ := testApp(map[string]string{"KUBEMQ_ADDRESS": "kubemq:50000", "KUBEMQ_AUTH_TOKEN": "tok", "INFERQ_TLS_CA": "/ca.pem"})
	b, err := a.scalerBroker(configFlags{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Address != "kubemq:50000" || b.AuthToken != "tok" || b.TLS.CA != "/ca.pem" || b.ClientID != scalerClientID {
		t.Errorf("broker = %+v", b)
	}
	b, err = a.scalerBroker(configFlags{broker: "other:1", clientID: "me"})
	if err != nil || b.Address != "other:1" || b.ClientID != "me" || b.AuthToken != "tok" {
		t.Errorf("with flags: %+v, %v", b, err)
	}
	a, _, _ = testApp(nil)
	if b, _ := a.scalerBroker(configFlags{}); b.Address != "127.0.0.1:50000" {
		t.Errorf("default address %q", b.Address)
	}
	a, _, _ = testApp(map[string]string{"INFERQ_TLS_CERT": "/c.pem"})
	if _, err := a.scalerBroker(configFlags{}); !errors.Is(err, errUsage) {
		t.Errorf("a certificate without its key: %v, want a usage error", err)
	}
	a, _, _ = testApp(nil)
	if _, err := a.scalerBroker(configFlags{path: "/nonexistent.yaml"}); err == nil || !strings.Contains(err.Error(), "read config") {
		t.Errorf("a missing config file: %v", err)
	}
}

// inferq scaler answers KEDA against a broker given by flag, and exits 0
// when its context ends (SIGTERM in main).
func TestScalerServes(t *testing.T) {
	srv := brokertest.NewServer(t, broker.Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // a port that was free a moment ago
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	a, _, errb := testApp(nil)
	exit := make(chan int, 1)
	go func() {
		exit <- a.main(ctx, []string{"scaler", "--broker", srv.Addr, "--listen", addr, "--log-level", "warn"})
	}()

	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := pb.NewExternalScalerClient(cc)
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := srv.Broker.SendQueueMessage(cctx, &kpb.QueueMessage{Channel: "inferq.mlp", ClientID: "p", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ref := &pb.ScaledObjectRef{Name: "inferq", ScalerMetadata: map[string]string{"queue": "inferq.mlp", "targetDepth": "1"}}
	// WaitForReady: the scaler may not listen yet.
	res, err := c.IsActive(cctx, ref, grpc.WaitForReady(true))
	if err != nil || !res.Result {
		t.Fatalf("IsActive = %v, %v; want true (stderr %q)", res, err, errb)
	}
	stop()
	select {
	case code := <-exit:
		if code != 0 {
			t.Errorf("exit code %d after the stop, want 0 (stderr %q)", code, errb)
		}
	case <-cctx.Done():
		t.Fatal("inferq scaler did not return after its context ended")
	}
}
