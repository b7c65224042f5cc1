package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/consumer/consumertest"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/results"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"github.com/inferq/inferq/worker"
	pb "github.com/kubemq-io/protobuf/go"
	"github.com/prometheus/client_golang/prometheus"
)

// The fake model (x FP32 [-1,4] -> y = x * 2, steered by x[0], keyed by
// x[1]), its batchers and the HTTP helper are package consumertest's,
// which package oip's tests share.
var (
	fakeInfo       = consumertest.FakeInfo
	newFakeBatcher = consumertest.NewFakeBatcher
	newBatcher     = consumertest.NewBatcher
	runBatcher     = consumertest.RunBatcher
	defaultModel   = consumertest.Model
	do             = consumertest.Do
)

type (
	fakeBatcher = consumertest.FakeBatcher
	gatedRunner = consumertest.GatedRunner
	nopStore    = consumertest.NopStore
)

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
	q       string   // the task queue
	addr    string   // the broker's address
	real    bool     // a real KubeMQ (KUBEMQ_ADDRESS), not the embedded broker
	records sync.Map // task_id -> *task.Record (the first terminal one)
	dupes   atomic.Int64
	cfg     harnessConfig
	// fullChecks counts the consumer's questions to the store's Full.
	fullChecks atomic.Int64
}

// storeFull is the consumer's StoreFull, as the worker wires it, counted.
func (h *harness) storeFull() bool {
	h.fullChecks.Add(1)
	return h.store.Full()
}

type harnessConfig struct {
	model      models.Model
	storeWrap  func(consumer.Store) consumer.Store
	brokerWrap func(results.Broker) results.Broker
	webhook    string
	dataDir    string
	grace      time.Duration
	realAddr   string                 // run against this real KubeMQ instead of the embedded broker
	configure  func(*consumer.Config) // adjusts the consumer's config last
	server     func(*consumer.Server) // adjusts the consumer before it runs
	idleModel  bool                   // also serve model "idle" on queue <q>.idle, which gets no task
	spoolMax   int                    // the store's SpoolEntries (0: its default)
	queueTail  string                 // appended to the task queue's name
	// latency delays every byte between the consumer and the embedded
	// broker this long each way (latencyProxy); the producer's
	// connection is direct.
	latency time.Duration
}

const (
	testQueue = consumertest.Queue
	testModel = consumertest.ModelName
)

// brokerOpt adjusts a harness's config.
type brokerOpt = func(*harnessConfig)

// forBrokers runs f against the embedded broker and, when KUBEMQ_ADDRESS
// is set, against that real KubeMQ as well.
func forBrokers(t *testing.T, f func(t *testing.T, on brokerOpt)) {
	t.Run("embedded", func(t *testing.T) { f(t, func(*harnessConfig) {}) })
	if addr := os.Getenv("KUBEMQ_ADDRESS"); addr != "" {
		t.Run("real", func(t *testing.T) { f(t, func(c *harnessConfig) { c.realAddr = addr }) })
	}
}

// newHarness starts everything; the broker's second lasts 50 ms so that
// delayed resends and 1 s waits run fast.
func newHarness(t *testing.T, opts ...brokerOpt) *harness {
	t.Helper()
	cfg := harnessConfig{model: defaultModel(), grace: 5 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	h := &harness{t: t, cfg: cfg, fake: newFakeBatcher(), q: testQueue}
	if cfg.realAddr != "" {
		// A real broker keeps channels for a day: names unique to the run.
		h.real, h.addr = true, cfg.realAddr
		h.q = fmt.Sprintf("inferq-test-%d.q", time.Now().UnixNano())
	} else {
		h.srv = brokertest.NewServer(t, broker.Options{SecondLength: 50 * time.Millisecond, PollWaitFloor: 50 * time.Millisecond})
		h.addr = h.srv.Addr
	}
	h.q += cfg.queueTail
	h.reply = h.q + ".replies"
	h.cfg.model.Queue = h.q
	h.cfg.model.DLQQueue, h.cfg.model.UnprocessableQueue = h.q+".dlq", h.q+".unprocessable"
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var err error
	h.prod, err = mq.Dial(ctx, mq.Config{Address: h.addr, ClientID: "producer-" + strings.ReplaceAll(t.Name(), "/", "-")})
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
	addr := h.addr
	if h.cfg.latency > 0 {
		addr = latencyProxy(t, h.addr, h.cfg.latency)
	}
	conn, err := mq.Dial(ctx, mq.Config{Address: addr, ClientID: "inferq-" + strings.ReplaceAll(t.Name(), "/", "-")})
	if err != nil {
		t.Fatal(err)
	}
	rb := worker.ResultsBroker(conn)
	if h.cfg.brokerWrap != nil {
		rb = h.cfg.brokerWrap(rb)
	}
	var log *slog.Logger
	if os.Getenv("INFERQ_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	h.store, err = results.New(results.Config{Broker: rb, Logger: log, RetryBackoff: 20 * time.Millisecond,
		ReplayBackoff: 20 * time.Millisecond, ReplayBackoffMax: 100 * time.Millisecond,
		DataDir: h.cfg.dataDir, MemoryOnly: h.cfg.dataDir == "", SpoolEntries: h.cfg.spoolMax})
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
	ccfg := consumer.Config{
		Broker: consumer.Conn(conn), Store: store, Metrics: h.met, AlertWebhook: h.cfg.webhook, Logger: log,
		Models:       h.models(),
		DrainTimeout: h.cfg.grace, Writers: 16, IntakeWorkers: 2,
		StoreFull: h.storeFull, StoreFullCheck: 10 * time.Millisecond,
	}
	if h.cfg.configure != nil {
		h.cfg.configure(&ccfg)
	}
	h.cons, err = consumer.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	if h.cfg.server != nil {
		h.cfg.server(h.cons)
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

func (h *harness) models() []consumer.Model {
	ms := []consumer.Model{{Config: h.cfg.model, Info: fakeInfo, Batcher: h.fake}}
	if h.cfg.idleModel {
		idle := h.cfg.model
		idle.Name, idle.Queue = "idle", h.q+".idle"
		idle.DLQQueue, idle.UnprocessableQueue = idle.Queue+".dlq", idle.Queue+".unprocessable"
		ms = append(ms, consumer.Model{Config: idle, Info: fakeInfo, Batcher: newFakeBatcher()})
	}
	return ms
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
	x := tensor.NewTensor("x", []int64{1, 4}, []float32{a, key, 0, 0})
	opts = append([]task.Option{task.WithReplyTo(h.reply)}, opts...)
	body, tags, err := task.NewTask(id, model, []tensor.Tensor{x}, opts...)
	if err != nil {
		h.t.Fatal(err)
	}
	return mq.OutMessage{Channel: h.q, Body: body, Tags: tags}
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
	waitFor(h.t, 30*time.Second, "the record of "+id, func() bool {
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
	waitFor(h.t, 15*time.Second, "queue "+queue+" to be empty", func() bool {
		if h.real {
			info, err := h.prod.QueuesInfo(context.Background(), mq.InfoFilter(queue))
			q, _ := mq.LookupInfo(info, queue)
			return err == nil && q.Waiting == 0
		}
		st := h.srv.QueueState(queue)
		return len(st.Waiting) == 0 && len(st.Delayed) == 0 && st.InFlight == 0
	})
}

// queueMsgs returns the messages waiting in a queue: the embedded broker's
// snapshot, or a peek of a real broker.
func (h *harness) queueMsgs(queue string) []*pb.QueueMessage {
	h.t.Helper()
	if !h.real {
		return h.srv.Queue(queue)
	}
	msgs, err := h.prod.Peek(context.Background(), queue, 100, time.Second)
	if err != nil {
		return nil
	}
	out := make([]*pb.QueueMessage, len(msgs))
	for i, m := range msgs {
		out[i] = &pb.QueueMessage{MessageID: m.ID, Channel: m.Channel, Body: m.Body, Tags: m.Tags,
			Attributes: &pb.QueueMessageAttributes{Timestamp: m.Timestamp.UnixNano(), Sequence: m.Sequence}}
	}
	return out
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
	v, err := tensor.Values[float32](resp.Outputs[0].Tensor)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

var _ = math.NaN
