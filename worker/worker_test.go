package worker

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/client"
	"github.com/inferq/inferq/client/clienttest"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// mlpBatcher runs clienttest.MLP on its own goroutine per item.
type mlpBatcher struct{}

func (mlpBatcher) Enqueue(ctx context.Context, r *batch.Request) error {
	go func() {
		r.Start(1)
		out, err := clienttest.MLP().Compute(r.Item.Inputs)
		r.Finish(batch.ItemResult{Outputs: out, Err: err})
	}()
	return nil
}

func mlpModel(name string, mutate func(*models.Model)) consumer.Model {
	c := models.Config{Models: []models.Model{models.NewModel(name)}}
	c.Models[0].Path = "unused.onnx"
	if mutate != nil {
		mutate(&c.Models[0])
	}
	c.SetDefaults()
	return consumer.Model{Config: c.Models[0], Info: clienttest.MLP().Info, Batcher: mlpBatcher{}}
}

// waitFor polls cond until it holds, for d at most.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A worker consumes its queue, serves HTTP, and on cancel drains, flushes
// and returns nil.
func TestWorkerServesAndStops(t *testing.T) {
	srv := brokertest.NewServer(t, broker.Options{PollWaitFloor: 20 * time.Millisecond, SecondLength: 20 * time.Millisecond})
	var logs bytes.Buffer
	w, err := New(context.Background(), Config{
		Broker:   mq.Config{Address: srv.Addr, ClientID: "worker-test"},
		Models:   []consumer.Model{mlpModel("mlp", nil)},
		DataDir:  t.TempDir(),
		Consumer: consumer.Config{Worker: "test", IntakeWorkers: 1, Writers: 4, DrainTimeout: 5 * time.Second},
		HTTP:     models.HTTP{Listen: "127.0.0.1:0"},
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	waitFor(t, 30*time.Second, "ready", w.Ready)

	resp, err := http.Get("http://" + w.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"inferq_result_spool_entries", "inferq_result_spool_full", "inferq_result_spool_undeliverable", "inferq_tasks"} {
		if !strings.Contains(string(body), name) {
			t.Errorf("/metrics lacks %s:\n%.2000s", name, body)
		}
	}

	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	c, err := client.New(cctx, client.Config{Broker: mq.Config{Address: srv.Addr, ClientID: "worker-test-producer"}, Identity: "worker-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id, err := c.Enqueue(cctx, "mlp", []tensor.Tensor{tensor.NewTensor("x", []int64{1, 16}, make([]float32, 16))})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := c.Wait(cctx, id)
	if err != nil || rec.Status != task.StatusSuccess || rec.Worker != "test" {
		t.Fatalf("record %+v, err %v", rec, err)
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
	if !strings.Contains(logs.String(), "msg=stopped") {
		t.Errorf("no stopped line in the log:\n%s", logs.String())
	}
}

// One store serves every model: the first model's prefix and expiry win,
// with a warning naming the model that differs; the largest
// max_result_bytes is the store's.
func TestResultSettingsFirstModelWins(t *testing.T) {
	a := mlpModel("a", func(m *models.Model) { m.Result.ChannelPrefix, m.Result.MaxResultBytes = "first-", 100 })
	b := mlpModel("b", func(m *models.Model) { m.Result.ChannelPrefix, m.Result.MaxResultBytes = "second-", 300 })
	var logs bytes.Buffer
	r := resultSettings([]consumer.Model{a, b}, slog.New(slog.NewTextHandler(&logs, nil)))
	if r.ChannelPrefix != "first-" || r.MaxResultBytes != 300 {
		t.Errorf("settings %+v", r)
	}
	if !strings.Contains(logs.String(), "model=b") {
		t.Errorf("no warning naming b: %s", logs.String())
	}
}

func TestNewRefusesNoModels(t *testing.T) {
	if _, err := New(context.Background(), Config{}); err == nil {
		t.Error("a worker without models was built")
	}
}

// A worker without a data dir must choose the memory spool explicitly.
func TestWorkerMemorySpoolIsExplicit(t *testing.T) {
	srv := brokertest.NewServer(t, broker.Options{})
	_, err := New(context.Background(), Config{
		Broker: mq.Config{Address: srv.Addr, ClientID: "worker-spool-test"},
		Models: []consumer.Model{mlpModel("mlp", nil)},
	})
	if err == nil || !strings.Contains(err.Error(), "memory-only") {
		t.Fatalf("New without data dir or memory spool = %v, want an error asking for the choice", err)
	}
	var logs bytes.Buffer
	w, err := New(context.Background(), Config{
		Broker:  mq.Config{Address: srv.Addr, ClientID: "worker-spool-test"},
		Models:  []consumer.Model{mlpModel("mlp", nil)},
		Results: models.Results{Spool: models.SpoolMemory},
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Run(ctx); err != nil {
		t.Errorf("Run: %v", err)
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"result spool in memory only") {
		t.Errorf("no startup warning of the memory spool:\n%s", logs.String())
	}
}
