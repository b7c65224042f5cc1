package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/client"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"github.com/inferq/inferq/worker"
)

// batchBound reports whether a mode runs through a batcher whose
// max_batch_size --batch-sizes sweeps; the others run once per repeat.
func batchBound(mode string) bool {
	return mode == ModeDirect || mode == ModeQueue || mode == ModeQuery || mode == ModeHTTP || mode == ModeGRPC
}

// errQueryUnavailable: nothing answers sync queries on the model's queue.
var errQueryUnavailable = errors.New("query mode not available: no inferq server answered a probe query (does this build's consumer answer queries?)")

// benchModel is one model loaded for the bench on one device group: its
// sessions are shared by every mode and sample of the group.
type benchModel struct {
	cfg      models.Model
	device   string
	sessions []*runtime.Session
	info     tensor.ModelInfo
	shape    taskShape         // of one task's inputs
	inputs   [][]tensor.Tensor // random inputs of that shape, cycled
	next     atomic.Uint64
	check    outputCheck
	// canned is a real result of the model, sent by the broker mode's
	// worker for every task instead of running the model.
	canned, cannedBin []byte
	// sim, when set, puts each batcher's sessions on simulated
	// accelerators of their own (Config.SimLatency).
	sim batch.Latency
}

func (m *benchModel) input() []tensor.Tensor {
	return m.inputs[int(m.next.Add(1)%uint64(len(m.inputs)))]
}

// outputCheck verifies a result: the model's outputs, one row each where
// dim 0 is dynamic (the batch dim), with the model's static dims, and rows
// of an FP32 output named "probs" (mlp's) summing to 1.
type outputCheck struct {
	outs []tensor.TensorInfo
}

func (c outputCheck) tensors(outs []tensor.Tensor) error {
	if len(outs) != len(c.outs) {
		return fmt.Errorf("check: %d outputs, want %d", len(outs), len(c.outs))
	}
	for i, o := range outs {
		want := c.outs[i]
		if o.Name != want.Name || o.DType != want.DType || len(o.Shape) != len(want.Dims) {
			return fmt.Errorf("check: output %d is %s %s %s, want %s", i, o.Name, o.DType, tensor.FormatShape(o.Shape), want)
		}
		for j, d := range want.Dims {
			if (j == 0 && d < 0 && o.Shape[0] != 1) || (d >= 0 && o.Shape[j] != d) {
				return fmt.Errorf("check: output %s has shape %s, want one row of %s", o.Name, tensor.FormatShape(o.Shape), tensor.FormatShape(want.Dims))
			}
		}
		if isProbs(want) {
			v, err := tensor.Values[float32](o)
			if err != nil {
				return fmt.Errorf("check: output probs: %w", err)
			}
			var sum float64
			for _, p := range v {
				sum += float64(p)
			}
			if math.Abs(sum-1) > 1e-3 {
				return fmt.Errorf("check: probabilities sum to %.5f, want 1", sum)
			}
		}
	}
	return nil
}

// isProbs reports whether o is an output of probabilities the check sums:
// mlp's "probs", FP32.
func isProbs(o tensor.TensorInfo) bool { return o.Name == "probs" && o.DType == tensor.FP32 }

// describe says what the check verifies of each output, for the report:
// `probs FP32 [1,4] summing to 1` (-1: a dynamic dim, not checked).
func (c outputCheck) describe() string {
	parts := make([]string, len(c.outs))
	for i, o := range c.outs {
		dims := slices.Clone(o.Dims)
		if len(dims) > 0 && dims[0] < 0 {
			dims[0] = 1
		}
		parts[i] = fmt.Sprintf("%s %s %s", o.Name, o.Datatype(), tensor.FormatShape(dims))
		if isProbs(o) {
			parts[i] += " summing to 1"
		}
	}
	return strings.Join(parts, ", ")
}

// record verifies that rec is the SUCCESS record of task id with good
// outputs.
func (c outputCheck) record(id string, rec *task.Record) error {
	if rec == nil {
		return errors.New("check: no record")
	}
	if rec.TaskID != id {
		return fmt.Errorf("check: record of task %q came for task %q", rec.TaskID, id)
	}
	if rec.Status != task.StatusSuccess {
		return fmt.Errorf("check: task %s: %s: %s", id, rec.Status, rec.Error)
	}
	resp, err := rec.Response()
	if err != nil {
		return fmt.Errorf("check: task %s: %w", id, err)
	}
	return c.tensors(resp.Tensors())
}

// batchCounter counts a batcher's runs and rows for the mean batch fill,
// and its parent's too (the servers' sum) when it has one.
type batchCounter struct {
	batches, rows atomic.Int64
	parent        *batchCounter
}

func (c *batchCounter) ObserveQueueWait(time.Duration) {}
func (c *batchCounter) ObserveBatch(s batch.Stats) {
	c.batches.Add(1)
	c.rows.Add(int64(s.Rows))
	if c.parent != nil {
		c.parent.ObserveBatch(s)
	}
}

// newBatcher builds a batcher for m with max_batch_size bs and the given
// concurrency over its sessions, counting into bc (nil: not counted).
func newBatcher(m *benchModel, bs, concurrency int, bc *batchCounter, log *slog.Logger) (*batch.Batcher, error) {
	runners := make([]batch.Runner, len(m.sessions))
	for i, s := range m.sessions {
		// Each batcher (one per server) gets devices of its own.
		runners[i] = batch.Simulate(s, m.sim)
	}
	cfg := m.cfg
	cfg.Batching.MaxBatchSize, cfg.Concurrency = bs, concurrency
	var obs batch.Observer
	if bc != nil {
		obs = bc
	}
	return worker.NewBatcher(cfg, runners, obs, log)
}

// sampleRun is one mode set up for one sample.
type sampleRun struct {
	start starter
	// fill returns the runs and rows of the model's batchers so far.
	fill func() (batches, rows int64)
	// shares, when set, returns the rows each server ran so far.
	shares func() []int64
	close  func() error
}

// directRun drives the runtime alone: a batcher over the sessions.
func directRun(m *benchModel, bs int, log *slog.Logger) (*sampleRun, error) {
	bc := &batchCounter{}
	b, err := newBatcher(m, bs, m.cfg.Concurrency, bc, log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	start := func(ctx, wctx context.Context, _, n int, fin func(error)) error {
		owner := &directOwner{m: m, fin: fin}
		for range n {
			r := &batch.Request{Item: batch.Item{Inputs: m.input()}, Owner: owner}
			if err := b.Enqueue(ctx, r); err != nil {
				fin(err)
			}
		}
		return nil
	}
	return &sampleRun{
		start: start,
		fill:  func() (int64, int64) { return bc.batches.Load(), bc.rows.Load() },
		close: func() error { cancel(); return <-done },
	}, nil
}

// directOwner checks the outputs of the direct mode's requests and reports
// each to fin.
type directOwner struct {
	m   *benchModel
	fin func(error)
}

func (*directOwner) RunStarting(*batch.Request) {}

func (o *directOwner) Finished(r *batch.Request) {
	if r.Result.Err != nil {
		o.fin(r.Result.Err)
		return
	}
	o.fin(o.m.check.tensors(r.Result.Outputs))
}

// producers are the bench's producer clients, one per --producers, made
// once per run: a Client's reply subscription takes a while to go live.
type producers struct {
	clients []*client.Client
}

// duplicates is how many result records the producers dropped as
// duplicates so far; 0 without producers (direct mode alone).
func (p *producers) duplicates() int64 {
	if p == nil {
		return 0
	}
	var n int64
	for _, c := range p.clients {
		n += c.Stats().Duplicates
	}
	return n
}

func newProducers(ctx context.Context, conn mq.Config, identity string, n int, binary bool, log *slog.Logger) (*producers, error) {
	p := &producers{}
	for i := range n {
		c, err := client.New(ctx, client.Config{
			Broker:       withClientID(conn, fmt.Sprintf("%s-p%d", identity, i)),
			Identity:     fmt.Sprintf("%s-p%d", identity, i),
			BinaryInputs: binary,
			Logger:       log,
		})
		if err != nil {
			p.close()
			return nil, err
		}
		p.clients = append(p.clients, c)
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = c.Ready(rctx)
		cancel()
		if err != nil {
			p.close()
			return nil, fmt.Errorf("producer %d: %w", i, err)
		}
	}
	return p, nil
}

func (p *producers) close() {
	for _, c := range p.clients {
		_ = c.Close()
	}
}

// enqueueStarter sends tasks for m to queue through the producer clients
// and verifies each record that comes back on the reply channel.
func (p *producers) enqueueStarter(m *benchModel, queue string, shards int) starter {
	return p.starter(m, []client.Option{client.WithQueue(queue), client.WithShards(shards)}, func(wctx context.Context, c *client.Client, id string, fin func(error)) {
		rec, err := c.Wait(wctx, id)
		if err != nil {
			if wctx.Err() != nil {
				err = fmt.Errorf("%w: task %s", errLost, id)
			}
			fin(err)
			return
		}
		fin(m.check.record(id, rec))
	})
}

// adapterPoll is how often an adapter-mode producer reads a task's compat
// result channel, like the Python adapter's client polling for a result.
const adapterPoll = 2 * time.Millisecond

// compatStarter sends tasks the Python adapter's way (no reply_to, a
// PENDING record on rayserve-result-<id>) and polls each result channel.
func (p *producers) compatStarter(m *benchModel, queue string) starter {
	return p.starter(m, []client.Option{client.WithQueue(queue), client.WithCompat()}, func(wctx context.Context, c *client.Client, id string, fin func(error)) {
		t := time.NewTicker(adapterPoll)
		defer t.Stop()
		for {
			rec, err := c.Status(wctx, id)
			switch {
			case wctx.Err() != nil:
				fin(fmt.Errorf("%w: task %s", errLost, id))
				return
			case err != nil:
				fin(err)
				return
			case rec.Status.Terminal():
				fin(m.check.record(id, rec))
				return
			}
			select {
			case <-wctx.Done():
			case <-t.C:
			}
		}
	})
}

// starter sends n tasks for m in one EnqueueMany through producer pi's
// client, fails the ones the broker refused, and collects each of the
// others with collect on its own goroutine.
func (p *producers) starter(m *benchModel, opts []client.Option, collect func(wctx context.Context, c *client.Client, id string, fin func(error))) starter {
	return func(ctx, wctx context.Context, pi, n int, fin func(error)) error {
		c := p.clients[pi%len(p.clients)]
		in := make([][]tensor.Tensor, n)
		for i := range in {
			in[i] = m.input()
		}
		ids, err := c.EnqueueMany(ctx, m.cfg.Name, in, opts...)
		var be *mq.BatchError
		if err != nil && !errors.As(err, &be) {
			return err
		}
		for i, id := range ids {
			if be != nil && i < len(be.Errs) && be.Errs[i] != nil {
				fin(fmt.Errorf("send: %w", be.Errs[i]))
				continue
			}
			go collect(wctx, c, id, fin)
		}
		return nil
	}
}

// brokerWorker is the broker mode's zero-work worker: one poller on the
// queue, for each task a canned result record on its reply channel, then
// the ack. It is what inferq does around inference, without inference.
type brokerWorker struct {
	conn   *mq.Conn
	cancel context.CancelFunc
	done   chan error
}

func startBrokerWorker(cfg mq.Config, clientID, queue string, m *benchModel, pollMax int, log *slog.Logger) (*brokerWorker, error) {
	cfg = withClientID(cfg, clientID)
	cfg.Logger = log
	conn, err := mq.Dial(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	w := &brokerWorker{conn: conn, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	sem := make(chan struct{}, 128) // writers, like serve's --result-writers
	p, err := conn.NewPoller(mq.PollerConfig{
		Channel: queue, MaxItems: pollMax, DrainTimeout: 5 * time.Second,
		Deliver: func(ctx context.Context, batch []*mq.Message) error {
			for i, msg := range batch {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					for _, rest := range batch[i:] {
						_ = rest.GiveBack() // never answered: back to the queue uncounted
					}
					return ctx.Err()
				}
				go func() {
					defer func() { <-sem }()
					w.answer(ctx, msg, m)
				}()
			}
			return nil
		},
	})
	if err != nil {
		cancel()
		_ = conn.Close()
		return nil, err
	}
	go func() { w.done <- p.Run(ctx) }()
	// Ready once the poller's stream is warm (trap 3), as a server.
	deadline := time.Now().Add(30 * time.Second)
	for !p.Up() {
		if time.Now().After(deadline) {
			_ = w.close()
			return nil, fmt.Errorf("bench: broker worker not ready after 30s on %s", cfg.Address)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return w, nil
}

func (w *brokerWorker) answer(ctx context.Context, msg *mq.Message, m *benchModel) {
	now := time.Now()
	rec := &task.Record{TaskID: msg.Tags[task.TagTaskID], Status: task.StatusSuccess, Result: m.canned, Binary: m.cannedBin,
		CreatedAt: msg.Timestamp, CompletedAt: now, Worker: "bench-broker", Attempts: 1}
	body, tags := rec.Encode()
	if err := w.conn.SendEventStore(ctx, msg.Tags[task.TagReplyTo], body, tags); err != nil {
		_ = msg.NAck()
		return
	}
	_ = msg.Ack()
}

func (w *brokerWorker) close() error {
	w.cancel()
	err := <-w.done
	return errors.Join(err, w.conn.Close())
}

// serverSpec is an in-process inferq server: worker.Worker (mq, results,
// consumer, runtime batchers) over the bench's sessions.
type serverSpec struct {
	conn     mq.Config // the broker connection, by Config.brokerConn
	clientID string
	busy     *benchModel
	queue    string // the busy model's queue
	bs       int
	idle     []*benchModel // served on their own queues, sent nothing
	// adapter makes the busy model run like the Python adapter: one task
	// at a time, poll size 1, no batching.
	adapter bool
	servers int
	// shards: the queue's shards (Config.QueueShards), each server
	// polling the ones it owns.
	shards   int
	pipeline bool // consumer.Config.Pipeline
	// oip: each server listens for HTTP and gRPC on loopback ports,
	// admitting oipCap infer requests at once on each (oipLimit).
	oip    bool
	oipCap int
	log    *slog.Logger
}

// benchServer is one or more in-process servers on the same queues.
type benchServer struct {
	counter *batchCounter
	// each counts one server's runs (counter counts them all).
	each    []*batchCounter
	stops   []func() error
	workers []*worker.Worker
}

func startServers(ctx context.Context, spec serverSpec) (*benchServer, error) {
	bs := &benchServer{counter: &batchCounter{}}
	for i := range max(spec.servers, 1) {
		if err := bs.startOne(spec, i); err != nil {
			_ = bs.close()
			return nil, err
		}
	}
	// Ready: every poller reached the broker.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready := true
		for _, w := range bs.workers {
			ready = ready && w.Ready()
		}
		if ready {
			return bs, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = bs.close()
			return nil, fmt.Errorf("bench: server not ready after 30s on broker %s", spec.conn.Address)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startOne starts server i of spec: the busy model (counted) and the idle
// ones, each with batchers of its own over the shared sessions.
func (bs *benchServer) startOne(spec serverSpec, i int) error {
	cfg := worker.Config{
		Broker: withClientID(spec.conn, fmt.Sprintf("%s-s%d", spec.clientID, i)),
		Consumer: consumer.Config{Worker: "bench", IntakeWorkers: 2, Writers: 128,
			DrainTimeout: 5 * time.Second, QueueShards: spec.shards, Pipeline: spec.pipeline},
		Results: models.Results{Spool: models.SpoolMemory}, // a benchmark keeps no state across runs
		Logger:  spec.log,
	}
	conc, bsize := spec.busy.cfg.Concurrency, spec.bs
	if spec.adapter {
		conc, bsize = 1, 1
		cfg.Consumer.IntakeWorkers, cfg.Consumer.Writers, cfg.Consumer.PollMaxItems, cfg.Consumer.MaxInFlight = 1, 1, 1, 1
	}
	if spec.oip {
		cfg.HTTP = models.HTTP{Listen: "127.0.0.1:0", MaxConcurrentRequests: spec.oipCap}
		cfg.GRPC = models.GRPC{Listen: "127.0.0.1:0", MaxConcurrentRequests: spec.oipCap}
	}
	own := &batchCounter{parent: bs.counter}
	bs.each = append(bs.each, own)
	if err := addModel(&cfg, spec.busy, spec.queue, bsize, conc, own); err != nil {
		return err
	}
	for _, m := range spec.idle {
		if err := addModel(&cfg, m, spec.queue+".idle."+m.cfg.Name, m.cfg.Batching.MaxBatchSize, m.cfg.Concurrency, nil); err != nil {
			return err
		}
	}
	w, err := worker.New(context.Background(), cfg)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	bs.workers = append(bs.workers, w)
	bs.stops = append(bs.stops, func() error { stop(); return <-done })
	return nil
}

// addModel serves m on queue (and its .dlq and .unprocessable) in cfg,
// with a batcher of max_batch_size bsize and concurrency conc.
func addModel(cfg *worker.Config, m *benchModel, queue string, bsize, conc int, bc *batchCounter) error {
	b, err := newBatcher(m, bsize, conc, bc, cfg.Logger)
	if err != nil {
		return err
	}
	mc := m.cfg
	mc.Queue, mc.DLQQueue, mc.UnprocessableQueue = queue, queue+".dlq", queue+".unprocessable"
	mc.Batching.MaxBatchSize, mc.Concurrency = bsize, conc
	cfg.Models = append(cfg.Models, consumer.Model{Config: mc, Info: m.info, Batcher: b})
	cfg.Batchers = append(cfg.Batchers, b)
	return nil
}

// oipLimit is the max_concurrent_requests of the bench's HTTP and gRPC
// servers for a load of callers requests at once: serve's default, or the
// load where it is more, so that the bench measures its load rather than
// the 503s of a cap below it (a cap is a server's defence, not what the
// bench measures). Each server gets the whole load: the callers spread
// over the servers unevenly at times. The report's header states it.
func oipLimit(callers int) int {
	return max(callers, models.DefaultHTTPMaxConcurrentRequests)
}

func (bs *benchServer) fill() (int64, int64) {
	return bs.counter.batches.Load(), bs.counter.rows.Load()
}

// shares returns the rows each server ran so far.
func (bs *benchServer) shares() []int64 {
	out := make([]int64, len(bs.each))
	for i, c := range bs.each {
		out[i] = c.rows.Load()
	}
	return out
}

func (bs *benchServer) close() error {
	var wg sync.WaitGroup
	errs := make([]error, len(bs.stops))
	for i, stop := range bs.stops {
		wg.Go(func() { errs[i] = stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// queryStarter sends each task as a sync query (client.Query) on queue
// and verifies the response.
func (p *producers) queryStarter(m *benchModel, queue string, timeout time.Duration) starter {
	return func(ctx, wctx context.Context, pi, n int, fin func(error)) error {
		c := p.clients[pi%len(p.clients)]
		for range n {
			go func() { fin(queryOnce(wctx, c, m, queue, timeout)) }()
		}
		return nil
	}
}

func queryOnce(ctx context.Context, c *client.Client, m *benchModel, queue string, timeout time.Duration) error {
	resp, err := c.Query(ctx, m.cfg.Name, m.input(), timeout, client.WithQueue(queue))
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: query: %w", errLost, err)
		}
		return err
	}
	return m.check.tensors(resp.Tensors())
}
