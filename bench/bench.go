package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"github.com/inferq/inferq/worker"
)

// bencher holds one bench run's shared pieces.
type bencher struct {
	cfg      Config
	plan     *plan
	log      *slog.Logger
	addr     string
	conn     mq.Config // the clients' connection to addr, by brokerConn
	embedded bool
	runID    string
	prod     *producers
	report   *benchReport
	prog     *benchProgress
	// shapes are the busy models' task shapes, by model name.
	shapes map[string]taskShape
}

// Run measures every busy model in every mode c asks for, prints the
// report to c.Stdout and writes the JSON and the plot. It returns an error
// when the config is invalid, when a task was lost or failed its check, or
// when a mode could not run. ctx ends the run early.
func Run(ctx context.Context, c Config) error {
	p, err := c.validate()
	if err != nil {
		return err
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Table == nil {
		if c.Table, err = exampleModels(c.ModelsDir, append(slices.Clone(c.Models), c.Idle...)); err != nil {
			return err
		}
	}
	// The shapes are checked before anything starts: a --shape that does
	// not fit is the caller's to fix (ErrShape).
	shapes, err := resolveShapes(c.Models, func(name string) ([]tensor.TensorInfo, error) {
		info, err := c.Env.Inspect(c.Table[name].Path)
		if err != nil {
			return nil, fmt.Errorf("model %q: %w", name, err)
		}
		return info.Inputs, nil
	}, p.shapes)
	if err != nil {
		return err
	}
	b := &bencher{cfg: c, plan: p, log: c.Logger, runID: task.NewID()[:8], addr: c.Broker, shapes: shapes}
	if b.addr == "" {
		srv := broker.New(broker.Options{Logger: b.log.With("component", "broker")})
		if err := srv.Start("127.0.0.1:0"); err != nil {
			return fmt.Errorf("embedded broker: %w", err)
		}
		defer srv.Close()
		b.addr, b.embedded = srv.Addr(), true
	}
	b.conn = c.brokerConn(b.addr, b.embedded)
	if b.cfg.AdapterMax <= 0 {
		b.cfg.AdapterMax = 300
		if b.embedded {
			b.cfg.AdapterMax = 2000
		}
	}
	busy, idle, err := b.load(ctx)
	defer closeModels(busy, idle)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(p.modes, func(m string) bool { return m != ModeDirect }) {
		pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		b.prod, err = newProducers(pctx, b.conn, c.Identity, c.Producers, p.binary, b.log.With("component", "producer"))
		cancel()
		if err != nil {
			return fmt.Errorf("producers on broker %s: %w", b.addr, err)
		}
		defer b.prod.close()
	}
	return b.measure(ctx, busy, idle)
}

func closeModels(groups ...[]*benchModel) {
	for _, ms := range groups {
		for _, m := range ms {
			for _, s := range m.sessions {
				s.Close()
			}
		}
	}
}

// measure takes every sample, then writes the report.
func (b *bencher) measure(ctx context.Context, busy, idle []*benchModel) error {
	b.report = newBenchReport(b, busy, idle)
	total := 0
	for _, m := range busy {
		total += b.cfg.Repeat * b.samplesPerRepeat(m)
	}
	b.prog = newBenchProgress(b.cfg.Stderr, total)
	if b.cfg.CPUProfile != "" {
		pf, err := os.Create(b.cfg.CPUProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	runErr := b.samples(ctx, busy, idle)
	b.prog.finish()
	if b.cfg.CPUProfile != "" {
		pprof.StopCPUProfile()
	}
	return errors.Join(runErr, b.report.write(b.cfg.Stdout))
}

// samples runs every model, repeat, mode and batch size, in that order.
func (b *bencher) samples(ctx context.Context, busy, idle []*benchModel) error {
	for _, m := range busy {
		for rep := 1; rep <= b.cfg.Repeat; rep++ {
			for _, mode := range b.plan.modes {
				for _, bs := range b.sizes(m, mode) {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					b.report.add(b.sample(ctx, m, idle, mode, bs, rep))
					b.prog.step()
				}
			}
		}
	}
	return nil
}

// sizes are the max_batch_size values mode runs for m.
func (b *bencher) sizes(m *benchModel, mode string) []int {
	switch {
	case mode == ModeBroker:
		return []int{0}
	case mode == ModeAdapter:
		return []int{1}
	case b.plan.batchSizes != nil:
		return b.plan.batchSizes
	}
	return []int{m.cfg.Batching.MaxBatchSize}
}

func (b *bencher) samplesPerRepeat(m *benchModel) int {
	n := 0
	for _, mode := range b.plan.modes {
		n += len(b.sizes(m, mode))
	}
	return n
}

// exampleModels returns the example models names on the CPU, written into
// dir when missing.
func exampleModels(dir string, names []string) (map[string]models.Model, error) {
	heavy, missing := false, false
	for _, name := range names {
		heavy = heavy || name == examples.ResNet18Name
		if _, err := os.Stat(filepath.Join(dir, name+".onnx")); err != nil {
			missing = true
		}
	}
	if missing {
		if _, err := examples.Write(dir, heavy); err != nil {
			return nil, fmt.Errorf("example models: %w", err)
		}
	}
	c := &models.Config{}
	for _, name := range names {
		m := models.NewModel(name)
		m.Path = filepath.Join(dir, name+".onnx")
		m.Device = models.Device{Kind: models.DeviceCPU}
		if name == examples.MLPName {
			m.Batching.MaxBatchSize = 64 // as configs/embedded.yaml
		}
		c.Models = append(c.Models, m)
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("example models: %w", err)
	}
	out := map[string]models.Model{}
	for _, m := range c.Models {
		out[m.Name] = m
	}
	return out, nil
}

// load creates the sessions: every busy model on every device group, the
// idle models once on their own placement. On error it returns what it
// loaded with the error.
func (b *bencher) load(ctx context.Context) (busy, idle []*benchModel, err error) {
	for _, name := range b.cfg.Models {
		cfg := b.cfg.Table[name]
		gs, err := b.deviceGroups(cfg)
		if err != nil {
			return busy, idle, err
		}
		warm := cfg.Batching.MaxBatchSize
		for _, s := range b.plan.batchSizes {
			warm = max(warm, s)
		}
		shape := b.shapes[name]
		for _, g := range gs {
			m, err := b.loadModel(ctx, cfg, g, warm, &shape)
			if m != nil {
				busy = append(busy, m)
			}
			if err != nil {
				return busy, idle, err
			}
		}
	}
	for _, name := range b.cfg.Idle {
		cfg := b.cfg.Table[name]
		ps, err := b.cfg.Place([]models.Model{cfg})
		if err != nil {
			return busy, idle, err
		}
		m, err := b.loadModel(ctx, cfg, ps[0].Devices, cfg.Batching.MaxBatchSize, nil)
		if m != nil {
			idle = append(idle, m)
		}
		if err != nil {
			return busy, idle, err
		}
	}
	return busy, idle, nil
}

// deviceGroups are the device groups a busy model is measured on: one per
// --device (the model's instances on it), else its placement.
func (b *bencher) deviceGroups(m models.Model) ([][]runtime.Device, error) {
	if len(b.plan.devices) == 0 {
		ps, err := b.cfg.Place([]models.Model{m})
		if err != nil {
			return nil, err
		}
		return [][]runtime.Device{ps[0].Devices}, nil
	}
	var gs [][]runtime.Device
	for _, d := range b.plan.devices {
		g := make([]runtime.Device, max(m.Instances, 1))
		for i := range g {
			g[i] = d
		}
		gs = append(gs, g)
	}
	return gs, nil
}

// loadModel opens cfg's sessions on devs (as serve does, warmed with warm
// rows), makes its random inputs of shape (nil: the defaults) and runs it
// once to check the outputs and keep a canned result for the broker mode.
func (b *bencher) loadModel(ctx context.Context, cfg models.Model, devs []runtime.Device, warm int, shape *taskShape) (*benchModel, error) {
	if b.cfg.MaxQueueDelay > 0 {
		cfg.Batching.MaxQueueDelay = models.Duration(b.cfg.MaxQueueDelay)
	}
	m := &benchModel{cfg: cfg, sim: b.cfg.SimLatency}
	var err error
	m.sessions, err = worker.OpenSessions(ctx, b.cfg.Env, cfg, devs,
		worker.SessionOptions{Concurrent: len(devs) * cfg.Concurrency, WarmRows: warm, Logger: b.log})
	if err != nil {
		return m, err
	}
	var labels []string
	for _, d := range devs {
		if !slices.Contains(labels, d.String()) {
			labels = append(labels, d.String())
		}
	}
	m.device = strings.Join(labels, "+")
	m.info = m.sessions[0].Info()
	m.check = outputCheck{outs: m.info.Outputs}
	if shape == nil {
		s, err := resolveShape(cfg.Name, m.info.Inputs, nil)
		if err != nil {
			return m, err
		}
		shape = &s
	}
	m.shape = *shape
	if m.inputs, err = randomInputs(shape.inputs, 8); err != nil {
		return m, fmt.Errorf("model %q: %w", cfg.Name, err)
	}
	outs, err := m.sessions[0].Run(ctx, m.inputs[0])
	if err == nil {
		err = m.check.tensors(outs)
	}
	if err != nil {
		return m, fmt.Errorf("model %q: first run: %w", cfg.Name, err)
	}
	m.canned, m.cannedBin, err = task.NewInferResponse(cfg.Name, "1", outs, nil).Encode()
	return m, err
}

// randomInputs makes n sets of random inputs of one task's shape (see
// taskShape).
func randomInputs(inputs []tensor.TensorInfo, n int) ([][]tensor.Tensor, error) {
	r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	out := make([][]tensor.Tensor, n)
	for k := range out {
		out[k] = make([]tensor.Tensor, len(inputs))
		for i, ti := range inputs {
			t, err := tensor.Random(ti, r)
			if err != nil {
				return nil, err
			}
			out[k][i] = t
		}
	}
	return out, nil
}

// Sample is one measurement: one mode, batch size and repeat of one
// model on one device group.
type Sample struct {
	Model     string `json:"model"`
	Device    string `json:"device"`
	Mode      string `json:"mode"`
	BatchSize int    `json:"batch_size"` // 0: no batcher (broker)
	Repeat    int    `json:"repeat"`
	Payload   string `json:"payload"`
	Sent      int    `json:"sent"`
	OK        int    `json:"ok"`
	Errors    int    `json:"errors"`
	Lost      int    `json:"lost"`
	// Duplicates are result records that came again for a task already
	// answered (at-least-once delivery: a task run twice), dropped by
	// the producers' clients during the sample.
	Duplicates int     `json:"duplicates"`
	Seconds    float64 `json:"seconds"`
	TasksPerS  float64 `json:"tasks_per_second"`
	// Latency is from the send to the verified result.
	Latency LatencyStats `json:"latency_ms"`
	// Batches and MeanBatch: the busy model's inference runs during the
	// measured phase and their mean rows.
	Batches   int64   `json:"batches"`
	MeanBatch float64 `json:"mean_batch_rows"`
	// ServerRows are the rows each server ran during the measured phase
	// (with --servers above 1): the servers' shares of the load.
	ServerRows []int64  `json:"server_rows,omitempty"`
	Usage      Usage    `json:"usage"`
	Errs       []string `json:"first_errors,omitempty"`
	// Unavailable says why the mode could not run at all.
	Unavailable string `json:"unavailable,omitempty"`
	// LatenciesUS are the sample's latencies in microseconds, in the
	// order they came: all of them up to MaxJSONLatencies, else an even
	// subsample (the percentiles above use up to maxLatencies).
	LatenciesUS []int64 `json:"latencies_us"`
}

// MaxJSONLatencies bounds the latencies per sample in the --json file.
const MaxJSONLatencies = 100000

// sample sets mode up, warms it, measures it and tears it down.
func (b *bencher) sample(ctx context.Context, m *benchModel, idle []*benchModel, mode string, bs, rep int) Sample {
	s := Sample{Model: m.cfg.Name, Device: m.device, Mode: mode, BatchSize: bs, Repeat: rep, Payload: b.cfg.Payload}
	b.prog.describe(fmt.Sprintf("%s/%s %s b=%d #%d", s.Model, s.Device, mode, bs, rep))
	run, spec, err := b.setup(ctx, m, idle, mode, bs)
	if err != nil {
		s.Unavailable = err.Error()
		if !errors.Is(err, errQueryUnavailable) {
			s.Unavailable = "setup: " + err.Error()
		}
		return s
	}
	defer func() {
		if err := run.close(); err != nil {
			b.log.Warn("bench: teardown", "mode", mode, "err", err)
		}
	}()
	// One task through the whole path first: the first poll of a stream
	// client takes about a second (trap 3), which no sample should carry.
	drive(ctx, loadSpec{producers: 1, window: 1, chunk: 1, tasks: 1, drain: 30 * time.Second}, run.start)
	if b.cfg.Warmup > 0 {
		w := spec
		w.duration, w.tasks, w.progress = b.cfg.Warmup, 0, nil
		if mode == ModeAdapter {
			w.tasks = 10
		}
		drive(ctx, w, run.start)
	}
	b0, r0 := int64(0), int64(0)
	if run.fill != nil {
		b0, r0 = run.fill()
	}
	var sh0 []int64
	if run.shares != nil {
		sh0 = run.shares()
	}
	spec.progress = func(n int) { b.prog.add(n) }
	dup0 := b.prod.duplicates()
	res := startResources()
	lr := drive(ctx, spec, run.start)
	s.Usage = res.stop()
	s.Duplicates = int(b.prod.duplicates() - dup0)
	if run.fill != nil {
		b1, r1 := run.fill()
		s.Batches = b1 - b0
		if s.Batches > 0 {
			s.MeanBatch = float64(r1-r0) / float64(s.Batches)
		}
	}
	if run.shares != nil {
		if sh := run.shares(); len(sh) > 1 && len(sh) == len(sh0) {
			s.ServerRows = make([]int64, len(sh))
			for i := range sh {
				s.ServerRows[i] = sh[i] - sh0[i]
			}
		}
	}
	s.Sent, s.OK, s.Errors, s.Lost = lr.Sent, lr.OK, lr.Errors, lr.Lost
	s.Seconds, s.TasksPerS, s.Errs = lr.Seconds, lr.TasksPerSec, lr.FirstErrors
	// The JSON gets at most MaxJSONLatencies of them, evenly strided.
	stride := max(1, (len(lr.Latencies)+MaxJSONLatencies-1)/MaxJSONLatencies)
	s.LatenciesUS = make([]int64, 0, len(lr.Latencies)/stride+1)
	for i := 0; i < len(lr.Latencies); i += stride {
		s.LatenciesUS = append(s.LatenciesUS, lr.Latencies[i].Microseconds())
	}
	s.Latency = summarize(lr.Latencies)
	if lr.OK > 0 {
		s.Latency.Mean, s.Latency.Max = Millis(lr.LatencySum/time.Duration(lr.OK)), Millis(lr.LatencyMax)
	}
	return s
}

// setup starts what mode needs and returns its starter and load.
func (b *bencher) setup(ctx context.Context, m *benchModel, idle []*benchModel, mode string, bs int) (*sampleRun, loadSpec, error) {
	spec := loadSpec{
		producers: b.cfg.Producers, window: b.cfg.Inflight, chunk: b.cfg.SendBatch,
		duration: b.cfg.Duration, tasks: b.cfg.Tasks, drain: b.cfg.Drain,
	}
	queue := fmt.Sprintf("inferq-bench.%s.%s.%s.%s", b.runID, m.cfg.Name, strings.ReplaceAll(m.device, ":", ""), mode)
	log := b.log.With("mode", mode)
	srvSpec := serverSpec{
		conn: b.conn, clientID: "inferq-bench-" + b.runID, busy: m, queue: queue, bs: bs,
		idle: idle, servers: b.cfg.Servers, shards: b.cfg.ServerShardCount(), pipeline: b.cfg.Pipeline, log: log,
	}
	switch mode {
	case ModeDirect:
		run, err := directRun(m, bs, log)
		return run, spec, err
	case ModeBroker:
		w, err := startBrokerWorker(b.conn, "inferq-bench-"+b.runID+"-broker", queue, m, 128, log)
		if err != nil {
			return nil, spec, err
		}
		return &sampleRun{start: b.prod.enqueueStarter(m, queue, 1), close: w.close}, spec, nil
	case ModeQueue:
		srv, err := startServers(ctx, srvSpec)
		if err != nil {
			return nil, spec, err
		}
		return &sampleRun{start: b.prod.enqueueStarter(m, queue, b.cfg.QueueShards), fill: srv.fill, shares: srv.shares, close: srv.close}, spec, nil
	case ModeQuery:
		srv, err := startServers(ctx, srvSpec)
		if err != nil {
			return nil, spec, err
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = queryOnce(pctx, b.prod.clients[0], m, queue, 3*time.Second)
		cancel()
		if err != nil {
			_ = srv.close()
			if errors.Is(err, mq.ErrTimeout) || errors.Is(err, errLost) {
				return nil, spec, fmt.Errorf("%w (no answer on %s within 3s)", errQueryUnavailable, queue)
			}
			return nil, spec, fmt.Errorf("probe query: %w", err)
		}
		return &sampleRun{start: b.prod.queryStarter(m, queue, b.cfg.QueryTimeout), fill: srv.fill, shares: srv.shares, close: srv.close}, spec, nil
	case ModeAdapter:
		srvSpec.adapter, srvSpec.servers = true, 1
		srv, err := startServers(ctx, srvSpec)
		if err != nil {
			return nil, spec, err
		}
		spec.window, spec.chunk = 1, 1
		spec.maxTasks = b.cfg.AdapterMax
		if spec.tasks > 0 {
			spec.tasks = min(spec.tasks, b.cfg.AdapterMax)
		}
		return &sampleRun{start: b.prod.compatStarter(m, queue), fill: srv.fill, shares: srv.shares, close: srv.close}, spec, nil
	case ModeHTTP, ModeGRPC:
		srvSpec.oip, srvSpec.oipCap = true, oipLimit(spec.producers*spec.window)
		srv, err := startServers(ctx, srvSpec)
		if err != nil {
			return nil, spec, err
		}
		oc, err := newOIPClients(srv, spec.producers*spec.window)
		if err != nil {
			_ = srv.close()
			return nil, spec, err
		}
		return &sampleRun{start: oc.starter(m, mode, b.plan.binary), fill: srv.fill,
			close: func() error { oc.close(); return srv.close() }}, spec, nil
	}
	return nil, spec, fmt.Errorf("unknown mode %q", mode)
}
