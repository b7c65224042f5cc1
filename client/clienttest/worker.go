// Package clienttest runs a fake inferq worker for tests of producers: it
// consumes one queue through package mq and answers every task the way
// `inferq serve` does, with one result record on the task's reply_to Events
// Store channel, or on the compat channel "rayserve-result-<task_id>" when
// the task has none. The model is a Go function, so no onnxruntime is
// needed.
//
//	srv := brokertest.NewServer(t, broker.Options{PollWaitFloor: 50 * time.Millisecond})
//	w := clienttest.StartWorker(t, clienttest.Config{Address: srv.Addr, Queue: "inferq.mlp", Model: clienttest.MLP()})
package clienttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// Model is a fake model: its signature (to decode inputs) and its compute.
type Model struct {
	Name    string
	Info    tensor.ModelInfo
	Compute func(inputs []tensor.Tensor) ([]tensor.Tensor, error)
}

// MLP is a stand-in for the example model mlp: input x FP32 [N,16],
// output probs FP32 [N,4], each row 0.1, 0.2, 0.3, 0.4 whatever the input.
// An input row whose first element is negative fails the task.
func MLP() Model {
	return Model{
		Name: "mlp",
		Info: tensor.ModelInfo{
			Inputs:  []tensor.TensorInfo{{Name: "x", DType: tensor.FP32, Dims: []int64{-1, 16}}},
			Outputs: []tensor.TensorInfo{{Name: "probs", DType: tensor.FP32, Dims: []int64{-1, 4}}},
		},
		Compute: func(in []tensor.Tensor) ([]tensor.Tensor, error) {
			x, err := tensor.Values[float32](in[0])
			if err != nil {
				return nil, err
			}
			rows := in[0].Rows()
			out := make([]float32, 0, rows*4)
			for r := range rows {
				if x[r*16] < 0 {
					return nil, errors.New("negative input")
				}
				out = append(out, 0.1, 0.2, 0.3, 0.4)
			}
			return []tensor.Tensor{tensor.NewTensor("probs", []int64{rows, 4}, out)}, nil
		},
	}
}

// Echo is a model with one input x of dtype and per-item dims dims that
// returns it as output y.
func Echo(dtype tensor.DType, dims ...int64) Model {
	d := append([]int64{-1}, dims...)
	return Model{
		Name: "echo",
		Info: tensor.ModelInfo{
			Inputs:  []tensor.TensorInfo{{Name: "x", DType: dtype, Dims: d}},
			Outputs: []tensor.TensorInfo{{Name: "y", DType: dtype, Dims: d}},
		},
		Compute: func(in []tensor.Tensor) ([]tensor.Tensor, error) {
			y := in[0]
			y.Name = "y"
			y.Data = append([]byte(nil), y.Data...)
			return []tensor.Tensor{y}, nil
		},
	}
}

// Config configures a Worker.
type Config struct {
	// Address is the broker's host:port. Required.
	Address string
	// Queue is the queue to consume. Default "inferq." + Model.Name.
	Queue string
	// Model answers the tasks. Required.
	Model Model
	// Duplicate sends every reply_to record twice, as an at-least-once
	// delivery may.
	Duplicate bool
	// ResultPrefix makes the compat channel. Default "rayserve-result-".
	ResultPrefix string
}

// Worker is a running fake worker. Its methods are safe for concurrent use.
type Worker struct {
	cfg     Config
	conn    *mq.Conn
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
	handled atomic.Int64
}

// StartWorker starts a worker and stops it when the test ends.
func StartWorker(t testing.TB, cfg Config) *Worker {
	t.Helper()
	if cfg.Queue == "" {
		cfg.Queue = "inferq." + cfg.Model.Name
	}
	if cfg.ResultPrefix == "" {
		cfg.ResultPrefix = "rayserve-result-"
	}
	conn, err := mq.Dial(context.Background(), mq.Config{
		Address: cfg.Address, ClientID: "clienttest-worker",
		RetryMin: 20 * time.Millisecond, RetryMax: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("clienttest: dial: %v", err)
	}
	w := &Worker{cfg: cfg, conn: conn, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	p, err := conn.NewPoller(mq.PollerConfig{
		Channel: cfg.Queue, MaxItems: 64, DrainTimeout: 5 * time.Second,
		Deliver: func(ctx context.Context, batch []*mq.Message) error {
			var wg sync.WaitGroup
			for _, m := range batch {
				wg.Add(1)
				go func() {
					defer wg.Done()
					w.handle(ctx, m)
				}()
			}
			wg.Wait()
			if err := ctx.Err(); err != nil {
				// None runs now: the unsettled ones go back to the queue.
				for _, m := range batch {
					_ = m.GiveBack()
				}
				return err
			}
			return nil
		},
	})
	if err != nil {
		cancel()
		_ = conn.Close()
		t.Fatalf("clienttest: poller: %v", err)
	}
	go func() { w.done <- p.Run(ctx) }()
	t.Cleanup(w.Stop)
	return w
}

// Handled counts the tasks answered (records stored and message acked).
func (w *Worker) Handled() int64 { return w.handled.Load() }

// Stop stops the worker and closes its connection; tasks not answered yet
// go back to the queue. Safe to call more than once.
func (w *Worker) Stop() {
	w.once.Do(func() {
		w.cancel()
		<-w.done
		_ = w.conn.Close()
	})
}

func (w *Worker) handle(ctx context.Context, m *mq.Message) {
	rec, replyTo := w.answer(m)
	body, tags := rec.Encode()
	n := 1
	if w.cfg.Duplicate {
		n = 2
	}
	for i := 0; i < n; i++ {
		if !w.store(ctx, replyTo, rec.TaskID, body, tags) {
			return // stopping: the message comes back to the queue
		}
	}
	if err := m.Ack(); err == nil {
		w.handled.Add(1)
	}
}

// answer runs the model on the task and returns its terminal record and
// where it goes.
func (w *Worker) answer(m *mq.Message) (*task.Record, string) {
	t, err := task.Parse(m.Body, m.Tags, task.Limits{})
	if t == nil {
		return &task.Record{TaskID: m.Tags[task.TagTaskID], Status: task.StatusFailure, Error: err.Error(), CompletedAt: time.Now()}, m.Tags[task.TagReplyTo]
	}
	rec := &task.Record{TaskID: t.ID, CreatedAt: t.CreatedAt, Worker: "clienttest", Attempts: 1}
	outs, err := w.run(t)
	if err == nil {
		rec.Result, rec.Binary, err = task.NewInferResponse(t.Name, "1", outs, t).Encode()
	}
	if err != nil {
		rec.Status, rec.Error = task.StatusFailure, err.Error()
	} else {
		rec.Status = task.StatusSuccess
	}
	rec.CompletedAt = time.Now()
	return rec, t.ReplyTo
}

func (w *Worker) run(t *task.Task) ([]tensor.Tensor, error) {
	if t.Name != w.cfg.Model.Name {
		return nil, fmt.Errorf("unknown model %q", t.Name)
	}
	in, err := t.Inputs(w.cfg.Model.Info, task.Limits{})
	if err != nil {
		return nil, err
	}
	return w.cfg.Model.Compute(in)
}

// store writes rec where the task asked, retrying while the broker is away,
// until ctx ends. It reports whether it was stored.
func (w *Worker) store(ctx context.Context, replyTo, id string, body []byte, tags map[string]string) bool {
	if id == "" {
		return true // nothing to answer to
	}
	for {
		if w.storeOnce(ctx, replyTo, id, body, tags) == nil {
			return true
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

func (w *Worker) storeOnce(ctx context.Context, replyTo, id string, body []byte, tags map[string]string) error {
	if replyTo != "" {
		return w.conn.SendEventStore(ctx, replyTo, body, tags)
	}
	ch := w.cfg.ResultPrefix + id
	// Remove the producer's PENDING, then write the record: simpler than
	// results/compat.go (which sends first and then removes what is
	// older, checked), enough for tests whose producers write a PENDING.
	if _, err := w.conn.ReceiveOne(ctx, ch, time.Second); err != nil {
		return err
	}
	return w.conn.Sender().Send(ctx, mq.OutMessage{Channel: ch, Body: body, Tags: tags, ExpirationSeconds: 3600})
}
