package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/results"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/task"
	"github.com/prometheus/client_golang/prometheus"
)

// The fake model: x FP32 [-1,4] -> y FP32 [-1,4], y = x * 2. The first
// value of x steers the fake: >= 1000 fails every attempt, 500..999 fails
// the first (value-500) attempts of that task, NaN panics nowhere but
// counts as a run.
var fakeInfo = runtime.ModelInfo{
	Inputs:  []runtime.TensorInfo{{Name: "x", DType: runtime.FP32, Dims: []int64{-1, 4}}},
	Outputs: []runtime.TensorInfo{{Name: "y", DType: runtime.FP32, Dims: []int64{-1, 4}}},
}

// fakeBatcher runs each item on its own goroutine, like a batcher that
// never batches; it counts runs per task key (x[1]).
type fakeBatcher struct {
	mu    sync.Mutex
	runs  map[float32]int
	total atomic.Int64
	gate  chan struct{} // when set, every run waits for a receive
}

func newFakeBatcher() *fakeBatcher { return &fakeBatcher{runs: map[float32]int{}} }

func (f *fakeBatcher) Enqueue(ctx context.Context, r *runtime.Request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	go func() {
		if f.gate != nil {
			<-f.gate
		}
		if err := ctx.Err(); err != nil {
			r.Done(runtime.ItemResult{Err: err})
			return
		}
		r.Done(f.run(r.Item))
	}()
	return nil
}

func (f *fakeBatcher) run(it runtime.Item) runtime.ItemResult {
	f.total.Add(1)
	x, err := runtime.Values[float32](it.Inputs[0])
	if err != nil {
		return runtime.ItemResult{Err: err}
	}
	f.mu.Lock()
	f.runs[x[1]]++
	n := f.runs[x[1]]
	f.mu.Unlock()
	switch {
	case x[0] >= 1000:
		return runtime.ItemResult{Err: errors.New("boom: the model failed")}
	case x[0] >= 500 && n <= int(x[0]-500):
		return runtime.ItemResult{Err: fmt.Errorf("transient failure %d", n)}
	}
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = 2 * v
	}
	return runtime.ItemResult{Outputs: []runtime.Tensor{runtime.NewTensor("y", it.Inputs[0].Shape, y)}}
}

func (f *fakeBatcher) runsOf(key float32) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[key]
}

// harness is a broker, a consumer of queue "q" serving model "m", and a
// producer connection that sends tasks and collects their records from the
// reply channel.
type harness struct {
	t       *testing.T
	srv     *brokertest.Server
	prod    *mq.Conn
	fake    *fakeBatcher
	cons    *consumer.Server
	store   *results.Store
	reg     *prometheus.Registry
	met     *consumer.Metrics
	cancel  context.CancelFunc
	done    chan error
	reply   string
	records sync.Map // task_id -> *task.Record (the first terminal one)
	dupes   atomic.Int64
	cfg     harnessConfig
}

type harnessConfig struct {
	model      models.Model
	storeWrap  func(consumer.Store) consumer.Store
	brokerWrap func(results.Broker) results.Broker
	webhook    string
	dataDir    string
	grace      time.Duration
}

const (
	testQueue = "q"
	testModel = "m"
)

func defaultModel() models.Model {
	m := models.NewModel(testModel)
	m.Path = "unused.onnx"
	m.Queue = testQueue
	c := models.Config{Models: []models.Model{m}}
	c.SetDefaults()
	m = c.Models[0]
	m.Retries.BackoffInitial = models.Duration(time.Second)
	m.Retries.BackoffMax = models.Duration(4 * time.Second)
	return m
}

// newHarness starts everything; the broker's second lasts 50 ms so that
// delayed resends and 1 s waits run fast.
func newHarness(t *testing.T, opts ...func(*harnessConfig)) *harness {
	t.Helper()
	cfg := harnessConfig{model: defaultModel(), grace: 5 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	h := &harness{t: t, cfg: cfg, fake: newFakeBatcher(), reply: "replies." + t.Name()}
	h.srv = brokertest.NewServer(t, broker.Options{SecondLength: 50 * time.Millisecond, PollWaitFloor: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var err error
	h.prod, err = mq.Dial(ctx, mq.Config{Address: h.srv.Addr, ClientID: "producer-" + t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.prod.Close() })
	events, err := h.prod.SubscribeEventsStore(ctx, h.reply, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for e := range events {
			r, err := task.ParseRecord(e.Body)
			if err != nil {
				t.Errorf("undecodable record on the reply channel: %v", err)
				continue
			}
			if _, loaded := h.records.LoadOrStore(r.TaskID, r); loaded {
				h.dupes.Add(1)
			}
		}
	}()
	h.start()
	return h
}

// start starts a consumer (again, after stop).
func (h *harness) start() {
	t := h.t
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := mq.Dial(ctx, mq.Config{Address: h.srv.Addr, ClientID: "inferq-" + t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	rb := consumer.ResultsBroker(conn)
	if h.cfg.brokerWrap != nil {
		rb = h.cfg.brokerWrap(rb)
	}
	h.store, err = results.New(results.Config{Broker: rb, RetryBackoff: 20 * time.Millisecond,
		ReplayBackoff: 20 * time.Millisecond, ReplayBackoffMax: 100 * time.Millisecond, DataDir: h.cfg.dataDir})
	if err != nil {
		t.Fatal(err)
	}
	var store consumer.Store = h.store
	if h.cfg.storeWrap != nil {
		store = h.cfg.storeWrap(store)
	}
	h.reg = prometheus.NewRegistry()
	h.met, err = consumer.NewMetrics(h.reg)
	if err != nil {
		t.Fatal(err)
	}
	h.cons, err = consumer.New(consumer.Config{
		Broker: conn, Store: store, Metrics: h.met, AlertWebhook: h.cfg.webhook,
		Models:       []consumer.Model{{Config: h.cfg.model, Info: fakeInfo, Batcher: h.fake}},
		DrainTimeout: h.cfg.grace, Writers: 16, IntakeWorkers: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.cancel = cancel
	h.done = make(chan error, 1)
	storeCtx, stopStore := context.WithCancel(context.Background())
	go func() { _ = h.store.Run(storeCtx) }()
	go func() {
		err := h.cons.Run(ctx)
		stopStore()
		_ = h.store.Close(context.Background())
		conn.Close()
		h.done <- err
	}()
	t.Cleanup(h.stop)
}

// stop stops the consumer and waits for it.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("consumer Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		h.t.Fatal("consumer did not stop")
	}
}

// send enqueues a task for model with x = [a, key, 0, 0].
func (h *harness) send(id string, a, key float32, opts ...task.Option) {
	h.t.Helper()
	h.sendMsg(h.taskMsg(id, testModel, a, key, opts...))
}

func (h *harness) taskMsg(id, model string, a, key float32, opts ...task.Option) mq.OutMessage {
	h.t.Helper()
	x := runtime.NewTensor("x", []int64{1, 4}, []float32{a, key, 0, 0})
	opts = append([]task.Option{task.WithReplyTo(h.reply)}, opts...)
	body, tags, err := task.NewTask(id, model, []runtime.Tensor{x}, opts...)
	if err != nil {
		h.t.Fatal(err)
	}
	return mq.OutMessage{Channel: testQueue, Body: body, Tags: tags}
}

// sendMsg sends like a producer does: retrying while the broker is away.
func (h *harness) sendMsg(m ...mq.OutMessage) {
	h.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := h.prod.Sender().Send(context.Background(), m...)
		if err == nil {
			return
		}
		if !errors.Is(err, mq.ErrUnavailable) || time.Now().After(deadline) {
			h.t.Fatalf("send: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// record waits for the terminal record of id.
func (h *harness) record(id string) *task.Record {
	h.t.Helper()
	var r *task.Record
	waitFor(h.t, 10*time.Second, "the record of "+id, func() bool {
		v, ok := h.records.Load(id)
		if ok {
			r = v.(*task.Record)
		}
		return ok
	})
	return r
}

// settled waits until queue holds nothing waiting or in flight.
func (h *harness) settled(queue string) {
	h.t.Helper()
	waitFor(h.t, 10*time.Second, "queue "+queue+" to be empty", func() bool {
		st := h.srv.QueueState(queue)
		return len(st.Waiting) == 0 && len(st.Delayed) == 0 && st.InFlight == 0
	})
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func outputs(t *testing.T, r *task.Record) []float32 {
	t.Helper()
	resp, err := r.Response()
	if err != nil {
		t.Fatalf("record %s: %v", r.TaskID, err)
	}
	if len(resp.Outputs) != 1 {
		t.Fatalf("record %s: %d outputs", r.TaskID, len(resp.Outputs))
	}
	v, err := runtime.Values[float32](resp.Outputs[0].Tensor)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

var _ = math.NaN
