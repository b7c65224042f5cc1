package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/client"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"github.com/inferq/inferq/testcert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The embedded broker with an auth token and mutual TLS: a worker and a
// client with the same token and certificates serve a task to SUCCESS; a
// client with a wrong token is refused.
func TestWorkerServesThroughTokenAndMutualTLS(t *testing.T) {
	ca := testcert.NewCA(t, "broker CA")
	server := ca.Server(t, "broker")
	srv := brokertest.NewServer(t, broker.Options{PollWaitFloor: 20 * time.Millisecond, SecondLength: 20 * time.Millisecond,
		AuthToken: "s3cret", TLS: broker.TLSFiles{Cert: server.CertFile, Key: server.KeyFile, ClientCA: ca.File}})
	conn := func(clientID, token, certName string) mq.Config {
		leaf := ca.Client(t, certName)
		return mq.Config{Address: srv.Addr, ClientID: clientID, AuthToken: token,
			TLS: mq.TLS{CA: ca.File, Cert: leaf.CertFile, Key: leaf.KeyFile}}
	}
	w, err := New(context.Background(), Config{
		Broker:   conn("secure-worker", "s3cret", "worker"),
		Models:   []consumer.Model{mlpModel("mlp", nil)},
		DataDir:  t.TempDir(),
		Consumer: consumer.Config{Worker: "secure", IntakeWorkers: 1, Writers: 4, DrainTimeout: 5 * time.Second},
		HTTP:     models.HTTP{Listen: "127.0.0.1:0"},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after cancel")
		}
	}()
	waitFor(t, 30*time.Second, "ready", w.Ready)

	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	c, err := client.New(cctx, client.Config{Broker: conn("secure-producer", "s3cret", "producer"), Identity: "secure-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in := []tensor.Tensor{tensor.NewTensor("x", []int64{1, 16}, make([]float32, 16))}
	id, err := c.Enqueue(cctx, "mlp", in)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := c.Wait(cctx, id)
	if err != nil || rec.Status != task.StatusSuccess || rec.Worker != "secure" {
		t.Fatalf("record %+v, err %v", rec, err)
	}

	// The client takes the refusal for what it is (mq.ErrUnauthorized)
	// and fails at once; the broker's status stays in its error.
	ictx, icancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer icancel()
	intruder, err := client.New(ictx, client.Config{Broker: conn("intruder", "wrong", "intruder"), Identity: "intruder"})
	if err == nil {
		defer intruder.Close()
		_, err = intruder.Enqueue(ictx, "mlp", in)
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a client with a wrong token: %v; want Unauthenticated", err)
	}
}
