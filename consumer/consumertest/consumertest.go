// Package consumertest is what the tests of package consumer and of the
// front ends over it (package oip) share: a fake model and its batchers, a
// consumer.Server that never runs, and an HTTP helper. It is imported by
// tests only.
//
// The fake model: x FP32 [-1,4] -> y FP32 [-1,4], y = x * 2. The first
// value of x steers the fake: >= 1000 fails every attempt, 500..999 fails
// the first (value-500) attempts of that task, NaN panics nowhere but
// counts as a run. x[1] is the task's key.
package consumertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/results"
	"github.com/inferq/inferq/tensor"
)

// The fake model's queue and name.
const (
	Queue     = "q"
	ModelName = "m"
)

// FakeInfo is the fake model's inputs and outputs.
var FakeInfo = tensor.ModelInfo{
	Inputs:  []tensor.TensorInfo{{Name: "x", DType: tensor.FP32, Dims: []int64{-1, 4}}},
	Outputs: []tensor.TensorInfo{{Name: "y", DType: tensor.FP32, Dims: []int64{-1, 4}}},
}

// Model is the fake model's configuration: model ModelName on Queue, with
// the defaults and quick retries (1 s, at most 4 s).
func Model() models.Model {
	m := models.NewModel(ModelName)
	m.Path = "unused.onnx"
	m.Queue = Queue
	c := models.Config{Models: []models.Model{m}}
	c.SetDefaults()
	m = c.Models[0]
	m.Retries.BackoffInitial = models.Duration(time.Second)
	m.Retries.BackoffMax = models.Duration(4 * time.Second)
	return m
}

// FakeBatcher runs each item on its own goroutine, like a batcher that
// never batches; it counts runs, per task key (x[1]) and in all.
type FakeBatcher struct {
	// Total counts the runs.
	Total atomic.Int64
	// Gate, when set, makes every run wait for a receive.
	Gate chan struct{}
	// AtGate counts the runs waiting at the Gate.
	AtGate atomic.Int64

	mu   sync.Mutex
	runs map[float32]int
}

func NewFakeBatcher() *FakeBatcher { return &FakeBatcher{runs: map[float32]int{}} }

func (f *FakeBatcher) Enqueue(ctx context.Context, r *batch.Request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	go func() {
		if f.Gate != nil {
			f.AtGate.Add(1)
			<-f.Gate
			f.AtGate.Add(-1)
		}
		if err := ctx.Err(); err != nil {
			r.Finish(batch.ItemResult{Err: err})
			return
		}
		r.Start(1)
		r.Finish(f.Run(r.Item))
	}()
	return nil
}

// Run runs the fake model on it, counted.
func (f *FakeBatcher) Run(it batch.Item) batch.ItemResult {
	f.Total.Add(1)
	x, err := tensor.Values[float32](it.Inputs[0])
	if err != nil {
		return batch.ItemResult{Err: err}
	}
	f.mu.Lock()
	f.runs[x[1]]++
	n := f.runs[x[1]]
	f.mu.Unlock()
	switch {
	case x[0] >= 1000:
		return batch.ItemResult{Err: errors.New("boom: the model failed")}
	case x[0] >= 500 && n <= int(x[0]-500):
		return batch.ItemResult{Err: fmt.Errorf("transient failure %d", n)}
	}
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = 2 * v
	}
	return batch.ItemResult{Outputs: []tensor.Tensor{tensor.NewTensor("y", it.Inputs[0].Shape, y)}}
}

// RunsOf is how many times the task of key ran.
func (f *FakeBatcher) RunsOf(key float32) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[key]
}

// GatedRunner is a batch.Runner over the fake model (F's Run), for a real
// batch.Batcher: it records the key (x[1]) of every item it runs, in
// order, and when Gate is set every batch waits for a receive (or its
// close) first.
type GatedRunner struct {
	F    *FakeBatcher
	Gate chan struct{}
	// AtGate counts the batches waiting at Gate.
	AtGate atomic.Int32

	mu      sync.Mutex
	order   []float32
	batches [][]float32
}

func (r *GatedRunner) RunBatch(ctx context.Context, items []batch.Item) []batch.ItemResult {
	if r.Gate != nil {
		r.AtGate.Add(1)
		<-r.Gate
		r.AtGate.Add(-1)
	}
	res := make([]batch.ItemResult, len(items))
	var keys []float32
	for i, it := range items {
		x, _ := tensor.Values[float32](it.Inputs[0])
		keys = append(keys, x[1])
		if len(it.Outputs) > 0 && (len(it.Outputs) != 1 || it.Outputs[0] != "y") {
			res[i].Err = fmt.Errorf("%w: outputs %q: the model has y", batch.ErrInvalidInput, it.Outputs)
			continue
		}
		res[i] = r.F.Run(it)
	}
	r.mu.Lock()
	r.order = append(r.order, keys...)
	r.batches = append(r.batches, keys)
	r.mu.Unlock()
	return res
}

// Ran is the keys of the items run, in order.
func (r *GatedRunner) Ran() []float32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]float32(nil), r.order...)
}

// Batches is the keys of the items run, batch by batch.
func (r *GatedRunner) Batches() [][]float32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]float32(nil), r.batches...)
}

// NewBatcher starts a real batcher of the fake model over r, stopped at
// cleanup (after a consumer created after it).
func NewBatcher(tb testing.TB, r batch.Runner, maxBatch int) *batch.Batcher {
	tb.Helper()
	return RunBatcher(tb, batch.Config{Name: ModelName, Policy: batch.Policy{MaxBatchSize: maxBatch},
		Runners: []batch.Runner{r}, QueueSize: 64})
}

// RunBatcher starts a batcher of cfg, stopped at cleanup.
func RunBatcher(tb testing.TB, cfg batch.Config) *batch.Batcher {
	tb.Helper()
	b, err := batch.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = b.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
	return b
}

// NopStore stores nothing and finds nothing.
type NopStore struct{}

func (NopStore) Put(context.Context, results.Entry) error { return nil }
func (NopStore) Get(string) ([]byte, bool)                { return nil, false }

// Offline returns a consumer.Server of cfg that never runs: its broker is
// a connection to a dead address (unless cfg.Broker is set), its store
// NopStore (unless cfg.Store is set). The Open Inference Protocol needs
// only its models and batchers. cfg.Metrics and cfg.Models are the
// caller's.
func Offline(tb testing.TB, cfg consumer.Config) *consumer.Server {
	tb.Helper()
	if cfg.Broker == nil {
		conn, err := mq.Dial(context.Background(), mq.Config{Address: "127.0.0.1:1", ClientID: "offline"})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { conn.Close() })
		cfg.Broker = consumer.Conn(conn)
	}
	if cfg.Store == nil {
		cfg.Store = NopStore{}
	}
	srv, err := consumer.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return srv
}

// Do sends an HTTP request with header and returns the response and its
// body.
func Do(tb testing.TB, method, url string, body []byte, header map[string]string) (*http.Response, []byte) {
	tb.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp, b
}

// LogBuffer is a log sink (for slog handlers) safe for the concurrent
// writes of a server's goroutines; String is what was written so far.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
