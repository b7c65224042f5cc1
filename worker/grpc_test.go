package worker

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	pb "github.com/inferq/inferq/oip/inferencepb"
	"github.com/inferq/inferq/testcert"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A worker with grpc.listen serves the Open Inference Protocol over gRPC
// beside HTTP, with HTTP's bearer token, until Run returns; then the
// listener is closed.
func TestWorkerServesGRPC(t *testing.T) {
	srv := brokertest.NewServer(t, broker.Options{PollWaitFloor: 20 * time.Millisecond, SecondLength: 20 * time.Millisecond})
	var logs bytes.Buffer
	w, err := New(context.Background(), Config{
		Broker:   mq.Config{Address: srv.Addr, ClientID: "worker-grpc-test"},
		Models:   []consumer.Model{mlpModel("mlp", nil)},
		Consumer: consumer.Config{Worker: "test", IntakeWorkers: 1, Writers: 1, DrainTimeout: 5 * time.Second},
		HTTP:     models.HTTP{Listen: "127.0.0.1:0", AuthToken: "s3cret"},
		GRPC:     models.GRPC{Listen: "127.0.0.1:0"},
		Results:  models.Results{Spool: models.SpoolMemory},
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := w.GRPCAddr()
	if addr == nil {
		t.Fatal("no gRPC listener")
	}
	if !strings.Contains(logs.String(), "grpc listening") { // New logs it; Run's logs are not read below
		t.Errorf("no grpc listening line:\n%s", logs.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	cc, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := pb.NewGRPCInferenceServiceClient(cc)
	req := &pb.ModelInferRequest{ModelName: "mlp", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{1, 16}, Contents: &pb.InferTensorContents{Fp32Contents: make([]float32, 16)}}}}
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	if _, err := c.ModelInfer(cctx, req); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without the token: %v, want Unauthenticated", err)
	}
	resp, err := c.ModelInfer(metadata.AppendToOutgoingContext(cctx, "authorization", "Bearer s3cret"), req)
	if err != nil || len(resp.Outputs) != 1 {
		t.Fatalf("with the token: %v %v", resp, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if _, err := c.ServerLive(cctx, &pb.ServerLiveRequest{}, grpc.WaitForReady(false)); status.Code(err) != codes.Unavailable {
		t.Errorf("after Run: %v, want Unavailable (nothing listens)", err)
	}
}

// grpc.tls_cert and grpc.tls_key make the listener serve TLS: a client
// that trusts the CA gets answers, a plaintext one none.
func TestWorkerGRPCTLS(t *testing.T) {
	ca := testcert.NewCA(t, "grpc-test-ca")
	leaf := ca.Server(t, "grpc")
	w, err := New(context.Background(), Config{
		Broker:   mq.Config{Address: "127.0.0.1:1", ClientID: "worker-grpc-tls-test"},
		Models:   []consumer.Model{mlpModel("mlp", nil)},
		Consumer: consumer.Config{Worker: "test", IntakeWorkers: 1, Writers: 1},
		GRPC:     models.GRPC{Listen: "127.0.0.1:0", TLSCert: leaf.CertFile, TLSKey: leaf.KeyFile},
		Results:  models.Results{Spool: models.SpoolMemory},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.serveGRPC() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		w.stopGRPC(ctx)
		if err := <-done; err != nil {
			t.Errorf("serveGRPC: %v", err)
		}
		w.release()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tt := range []struct {
		name  string
		creds credentials.TransportCredentials
		ok    bool
	}{
		{"tls", credentials.NewTLS(&tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}), true},
		{"plaintext", insecure.NewCredentials(), false},
	} {
		cc, err := grpc.NewClient(w.GRPCAddr().String(), grpc.WithTransportCredentials(tt.creds))
		if err != nil {
			t.Fatal(err)
		}
		r, err := pb.NewGRPCInferenceServiceClient(cc).ServerLive(ctx, &pb.ServerLiveRequest{})
		cc.Close()
		if got := err == nil && r.Live; got != tt.ok {
			t.Errorf("%s client: %v %v, want ok %v", tt.name, r, err, tt.ok)
		}
	}
}
