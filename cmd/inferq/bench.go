package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

const benchHelp = `Measure inferq's throughput and latency per model and device, next to the
ceilings it is measured against, all taken in the same run on the same
machine (absolute times on shared machines drift; ratios hold).

Modes (--modes, any combination):
  direct   runtime sessions behind the dynamic batcher, no broker: the
           inference ceiling
  broker   producers send, one worker polls, replies a canned result record
           to each task's reply channel and acks: no inference, the broker
           ceiling
  queue    the full path: producers -> queue -> inferq (in this process) ->
           reply_to events store -> producers
  query    sync queries on the model's queue, answered by inferq
  adapter  the Python adapter's pattern emulated on the same server: one task
           at a time, poll size 1, no batching, results on per-task channels
           (rayserve-result-<id>) that producers poll; each producer keeps one
           task in flight. Capped by --adapter-max-tasks: every task costs a
           KubeMQ channel for 24 h.

The server under test runs in this process (serve's pieces) on the embedded
broker, or on --broker ADDR. Load is closed-loop: --producers clients, each
keeping up to --inflight tasks out, sending --send-batch at a time. Latency
runs from the send to the verified result. Every result is checked (its task
id, SUCCESS, one row of each output's shape, mlp probabilities summing to 1);
results that do not come back within --drain-timeout after the sending stops
are lost: the last line says so and the exit code is 1.

CPU is the process's (server, producers and, when embedded, the broker) in
cores; RSS is sampled from /proc/self/statm. Models come from --config, else
the example models in --models-dir (written there when missing).`

type benchFlags struct {
	config       string
	models       []string
	idle         []string
	modes        string
	tasks        int
	duration     time.Duration
	warmup       time.Duration
	producers    int
	inflight     int
	sendBatch    int
	batchSizes   string
	payload      string
	devices      []string
	broker       string
	repeat       int
	servers      int
	jsonPath     string
	plotPath     string
	modelsDir    string
	adapterMax   int
	drain        time.Duration
	cpuProfile   string
	ortLib       string
	identity     string
	queryTimeout time.Duration
	log          logFlags
}

func runBench(ctx context.Context, a *app, args []string) error {
	fs := a.newFlags("bench", "bench [--model NAME]... [--modes LIST] [flags]", benchHelp)
	var f benchFlags
	fs.StringVarP(&f.config, "config", "c", "", "YAML config with the models (default: the example models in --models-dir, on the CPU)")
	fs.StringArrayVar(&f.models, "model", nil, "model to measure; repeat for several (default mlp)")
	fs.StringArrayVar(&f.idle, "idle-model", nil, "model served on its own queue and sent nothing, beside the busy one (multi-model runs); repeatable")
	fs.StringVar(&f.modes, "modes", "direct,broker,queue,adapter", "modes to run: direct, broker, queue, query, adapter (comma separated)")
	fs.IntVar(&f.tasks, "tasks", 0, "tasks per sample (instead of --duration)")
	fs.DurationVar(&f.duration, "duration", 10*time.Second, "how long each sample sends")
	fs.DurationVar(&f.warmup, "warmup", time.Second, "load applied before each sample, not measured")
	fs.IntVar(&f.producers, "producers", 4, "producer clients (each its own reply channel)")
	fs.IntVar(&f.inflight, "inflight", 256, "tasks each producer keeps in flight (1: one at a time, light load)")
	fs.IntVar(&f.sendBatch, "send-batch", 64, "tasks per send call")
	fs.StringVar(&f.batchSizes, "batch-sizes", "", "max_batch_size values to sweep, e.g. 1,8,32 (default: the model's)")
	fs.StringVar(&f.payload, "payload", "binary", "task payload: json or binary")
	fs.StringArrayVar(&f.devices, "device", nil, "device to run on (cpu, cuda:0, ...); repeat for one row per device (default: the config's placement)")
	fs.StringVar(&f.broker, "broker", "", "KubeMQ gRPC address host:port (default: an embedded broker in this process)")
	fs.IntVar(&f.repeat, "repeat", 1, "samples per row; the table shows the median and the spread")
	fs.IntVar(&f.servers, "servers", 1, "inferq servers consuming the queue (queue and query modes), each with its own connection and poller")
	fs.StringVar(&f.jsonPath, "json", "", "write every sample (with every latency) as JSON to FILE")
	fs.StringVar(&f.plotPath, "plot", "", "draw throughput and p99 latency against batch size per mode into FILE.png")
	fs.StringVar(&f.modelsDir, "models-dir", "data/models", "where the example models are (written when missing) without --config")
	fs.IntVar(&f.adapterMax, "adapter-max-tasks", 0, "cap on adapter-mode tasks per sample (default 2000 embedded, 300 on --broker: each task costs a KubeMQ channel for 24 h)")
	fs.DurationVar(&f.drain, "drain-timeout", 30*time.Second, "after the sending stops, how long results may take before they count as lost")
	fs.DurationVar(&f.queryTimeout, "query-timeout", 10*time.Second, "timeout of one sync query")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a pprof CPU profile of the measured phases to FILE")
	fs.StringVar(&f.identity, "identity", "", "producer identity prefix naming the reply channels (default bench-HOSTNAME)")
	fs.StringVar(&f.ortLib, "ort-lib", "", "onnxruntime shared library (file or directory); default: $INFERQ_ORT_LIB, next to the binary, ./lib")
	f.log.register(fs)
	f.log.level = "warn"
	fs.Lookup("log-level").DefValue = "warn"
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments %q", fs.Args())
	}
	plan, err := f.plan(fs.Changed("tasks"))
	if err != nil {
		return err
	}
	log, err := f.log.logger(a)
	if err != nil {
		return err
	}
	return a.bench(ctx, f, plan, log)
}

// benchPlan is what the flags ask for, checked.
type benchPlan struct {
	modes      []string
	batchSizes []int // nil: each model's own
	binary     bool
	devices    []runtime.Device
}

func (f *benchFlags) plan(tasksSet bool) (*benchPlan, error) {
	p := &benchPlan{}
	for m := range strings.SplitSeq(f.modes, ",") {
		m = strings.TrimSpace(strings.ToLower(m))
		if m == "" {
			continue
		}
		if !slices.Contains(allModes, m) {
			return nil, usageErrorf("--modes: unknown mode %q (want %s)", m, strings.Join(allModes, ", "))
		}
		if !slices.Contains(p.modes, m) {
			p.modes = append(p.modes, m)
		}
	}
	if len(p.modes) == 0 {
		return nil, usageErrorf("--modes: no mode")
	}
	slices.SortFunc(p.modes, func(a, b string) int { return slices.Index(allModes, a) - slices.Index(allModes, b) })
	if f.batchSizes != "" {
		for s := range strings.SplitSeq(f.batchSizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 {
				return nil, usageErrorf("--batch-sizes: %q is not a positive integer", s)
			}
			if !slices.Contains(p.batchSizes, n) {
				p.batchSizes = append(p.batchSizes, n)
			}
		}
		slices.Sort(p.batchSizes)
	}
	switch strings.ToLower(f.payload) {
	case "binary":
		p.binary = true
	case "json":
	default:
		return nil, usageErrorf("--payload %q: want json or binary", f.payload)
	}
	for _, d := range f.devices {
		dev, err := runtime.ParseDevice(d)
		if err != nil {
			return nil, usageErrorf("--device %q: %v", d, err)
		}
		p.devices = append(p.devices, dev)
	}
	switch {
	case tasksSet && f.tasks < 1:
		return nil, usageErrorf("--tasks %d: want at least 1", f.tasks)
	case !tasksSet && f.duration <= 0:
		return nil, usageErrorf("--duration %v: want a positive duration", f.duration)
	case f.warmup < 0:
		return nil, usageErrorf("--warmup %v: negative", f.warmup)
	case f.producers < 1 || f.inflight < 1 || f.sendBatch < 1:
		return nil, usageErrorf("--producers, --inflight and --send-batch must be at least 1")
	case f.repeat < 1:
		return nil, usageErrorf("--repeat %d: want at least 1", f.repeat)
	case f.servers < 1:
		return nil, usageErrorf("--servers %d: want at least 1", f.servers)
	case f.drain <= 0:
		return nil, usageErrorf("--drain-timeout %v: want a positive duration", f.drain)
	case f.plotPath != "" && !strings.HasSuffix(strings.ToLower(f.plotPath), ".png"):
		return nil, usageErrorf("--plot %q: want a .png file", f.plotPath)
	}
	if len(f.models) == 0 {
		f.models = []string{examples.MLPName}
	}
	for _, m := range f.idle {
		if slices.Contains(f.models, m) {
			return nil, usageErrorf("--idle-model %s is also a --model", m)
		}
	}
	return p, nil
}

// bencher holds one bench run's shared pieces.
type bencher struct {
	a         *app
	f         benchFlags
	plan      *benchPlan
	log       *slog.Logger
	addr      string
	embedded  bool
	runID     string
	prod      *producers
	report    *benchReport
	prog      *benchProgress
	completed atomic.Int64
}

func (a *app) bench(ctx context.Context, f benchFlags, plan *benchPlan, log *slog.Logger) error {
	cfgs, err := a.benchModels(f)
	if err != nil {
		return err
	}
	b := &bencher{a: a, f: f, plan: plan, log: log, runID: task.NewID()[:8]}
	if f.identity == "" {
		f.identity = "bench-" + strings.TrimPrefix(defaultIdentity(), "cli-")
		b.f.identity = f.identity
	}
	b.addr = f.broker
	if b.addr == "" {
		srv := broker.New(broker.Options{Logger: log.With("component", "broker")})
		if err := srv.Start("127.0.0.1:0"); err != nil {
			return fmt.Errorf("embedded broker: %w", err)
		}
		defer srv.Close()
		b.addr, b.embedded = srv.Addr(), true
	}
	if b.f.adapterMax <= 0 {
		b.f.adapterMax = 300
		if b.embedded {
			b.f.adapterMax = 2000
		}
	}

	env, err := a.openRuntime(f.ortLib, log.With("component", "runtime"))
	if err != nil {
		return err
	}
	defer env.Close()

	busy, idle, err := b.load(ctx, env, cfgs)
	defer func() {
		for _, ms := range [][]*benchModel{busy, idle} {
			for _, m := range ms {
				for _, s := range m.sessions {
					s.Close()
				}
			}
		}
	}()
	if err != nil {
		return err
	}

	needClients := slices.ContainsFunc(plan.modes, func(m string) bool { return m != modeDirect })
	if needClients {
		pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		b.prod, err = newProducers(pctx, b.addr, f.identity, f.producers, plan.binary, log.With("component", "producer"))
		cancel()
		if err != nil {
			return fmt.Errorf("producers on broker %s: %w", b.addr, err)
		}
		defer b.prod.close()
	}

	b.report = newBenchReport(b, busy, idle)
	total := 0
	for _, m := range busy {
		total += f.repeat * b.samplesPerRepeat(m)
	}
	b.prog = newBenchProgress(a.stderr, total)
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	var runErr error
samples:
	for _, m := range busy {
		for rep := 1; rep <= f.repeat; rep++ {
			for _, mode := range plan.modes {
				for _, bs := range b.sizes(m, mode) {
					if ctx.Err() != nil {
						runErr = ctx.Err()
						break samples
					}
					s := b.sample(ctx, m, idle, mode, bs, rep)
					b.report.add(s)
					b.prog.step()
				}
			}
		}
	}
	b.prog.finish()
	if f.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	return errors.Join(runErr, b.report.write(a.stdout))
}

// sizes are the max_batch_size values mode runs for m.
func (b *bencher) sizes(m *benchModel, mode string) []int {
	switch {
	case mode == modeBroker:
		return []int{0}
	case mode == modeAdapter:
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

// benchModels returns the configured models: from --config, else the
// example models (written into --models-dir when missing) on the CPU.
func (a *app) benchModels(f benchFlags) (map[string]models.Model, error) {
	want := append(slices.Clone(f.models), f.idle...)
	out := map[string]models.Model{}
	if f.config != "" {
		c, err := a.loadConfig(configFlags{path: f.config})
		if err != nil {
			return nil, err
		}
		for _, m := range c.Models {
			out[m.Name] = m
		}
		for _, name := range want {
			if _, ok := out[name]; !ok {
				return nil, usageErrorf("model %q is not in %s", name, f.config)
			}
		}
		return out, nil
	}
	heavy := false
	for _, name := range want {
		switch name {
		case examples.MLPName, examples.MultiTypeName:
		case examples.ResNet18Name:
			heavy = true
		default:
			return nil, usageErrorf("model %q: without --config only the example models mlp, multitype and resnet18 are known", name)
		}
	}
	missing := false
	for _, name := range want {
		if _, err := os.Stat(filepath.Join(f.modelsDir, name+".onnx")); err != nil {
			missing = true
		}
	}
	if missing {
		if _, err := examples.Write(f.modelsDir, heavy); err != nil {
			return nil, err
		}
	}
	c := &models.Config{}
	for _, name := range want {
		m := models.NewModel(name)
		m.Path = filepath.Join(f.modelsDir, name+".onnx")
		m.Device = models.Device{Kind: models.DeviceCPU}
		if name == examples.MLPName {
			m.Batching.MaxBatchSize = 64 // as configs/embedded.yaml
		}
		c.Models = append(c.Models, m)
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	for _, m := range c.Models {
		out[m.Name] = m
	}
	return out, nil
}

// load creates the sessions: every --model on every device group, the
// idle models once on their own placement.
func (b *bencher) load(ctx context.Context, env *runtime.Env, cfgs map[string]models.Model) (busy, idle []*benchModel, err error) {
	maxBS := func(m models.Model) int {
		n := m.Batching.MaxBatchSize
		for _, s := range b.plan.batchSizes {
			n = max(n, s)
		}
		return n
	}
	groups := func(m models.Model) ([][]runtime.Device, error) {
		if len(b.plan.devices) > 0 {
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
		ps, err := place(b.log, []models.Model{m})
		if err != nil {
			return nil, err
		}
		return [][]runtime.Device{ps[0].Devices}, nil
	}
	for _, name := range b.f.models {
		gs, err := groups(cfgs[name])
		if err != nil {
			return busy, idle, err
		}
		for _, g := range gs {
			m, err := b.loadModel(ctx, env, cfgs[name], g, maxBS(cfgs[name]))
			if m != nil {
				busy = append(busy, m)
			}
			if err != nil {
				return busy, idle, err
			}
		}
	}
	for _, name := range b.f.idle {
		ps, err := place(b.log, []models.Model{cfgs[name]})
		if err != nil {
			return busy, idle, err
		}
		m, err := b.loadModel(ctx, env, cfgs[name], ps[0].Devices, cfgs[name].Batching.MaxBatchSize)
		if m != nil {
			idle = append(idle, m)
		}
		if err != nil {
			return busy, idle, err
		}
	}
	return busy, idle, nil
}

func (b *bencher) loadModel(ctx context.Context, env *runtime.Env, cfg models.Model, devs []runtime.Device, warm int) (*benchModel, error) {
	m := &benchModel{cfg: cfg}
	var labels []string
	for _, d := range devs {
		s, err := runtime.NewSession(env, runtime.SessionConfig{
			Name: cfg.Name, Path: cfg.Path, Device: d, CPUs: goruntime.NumCPU(), ConcurrentSessions: len(devs) * cfg.Concurrency,
			IntraOpThreads: cfg.IntraOpThreads, Logger: b.log,
		})
		if err != nil {
			return m, fmt.Errorf("model %q on %s: %w", cfg.Name, d, err)
		}
		m.sessions = append(m.sessions, s)
		if err := s.Warmup(ctx, warm); err != nil {
			return m, fmt.Errorf("model %q: warm-up on %s: %w", cfg.Name, d, err)
		}
		if !slices.Contains(labels, d.String()) {
			labels = append(labels, d.String())
		}
	}
	m.device = strings.Join(labels, "+")
	m.info = m.sessions[0].Info()
	m.check = outputCheck{outs: m.info.Outputs}
	r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for range 8 {
		in := make([]tensor.Tensor, len(m.info.Inputs))
		for i, ti := range m.info.Inputs {
			dims := slices.Clone(ti.Dims)
			for j := range dims {
				if dims[j] < 0 || j == 0 {
					dims[j] = 1
				}
			}
			t, err := tensor.Random(tensor.TensorInfo{Name: ti.Name, DType: ti.DType, Dims: dims}, r)
			if err != nil {
				return m, fmt.Errorf("model %q: %w", cfg.Name, err)
			}
			in[i] = t
		}
		m.inputs = append(m.inputs, in)
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

// benchSample is one measurement: one mode, batch size and repeat of one
// model on one device group.
type benchSample struct {
	Model     string  `json:"model"`
	Device    string  `json:"device"`
	Mode      string  `json:"mode"`
	BatchSize int     `json:"batch_size"` // 0: no batcher (broker)
	Repeat    int     `json:"repeat"`
	Payload   string  `json:"payload"`
	Sent      int     `json:"sent"`
	OK        int     `json:"ok"`
	Errors    int     `json:"errors"`
	Lost      int     `json:"lost"`
	Seconds   float64 `json:"seconds"`
	TasksPerS float64 `json:"tasks_per_second"`
	// Latency is from the send to the verified result.
	Latency latencyStats `json:"latency_ms"`
	// Batches and MeanBatch: the busy model's inference runs during the
	// measured phase and their mean rows.
	Batches   int64    `json:"batches"`
	MeanBatch float64  `json:"mean_batch_rows"`
	Usage     usage    `json:"usage"`
	Errs      []string `json:"first_errors,omitempty"`
	// Unavailable says why the mode could not run at all.
	Unavailable string `json:"unavailable,omitempty"`
	// LatenciesUS are the sample's latencies in microseconds, in the
	// order they came: all of them up to maxJSONLatencies, else an even
	// subsample (the percentiles above use up to maxLatencies).
	LatenciesUS []int64 `json:"latencies_us"`
}

// maxJSONLatencies bounds the latencies per sample in the --json file.
const maxJSONLatencies = 100000

// sample sets mode up, warms it, measures it and tears it down.
func (b *bencher) sample(ctx context.Context, m *benchModel, idle []*benchModel, mode string, bs, rep int) benchSample {
	s := benchSample{Model: m.cfg.Name, Device: m.device, Mode: mode, BatchSize: bs, Repeat: rep, Payload: b.f.payload}
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
	if b.f.warmup > 0 {
		w := spec
		w.duration, w.tasks, w.progress = b.f.warmup, 0, nil
		if mode == modeAdapter {
			w.tasks = 10
		}
		drive(ctx, w, run.start)
	}
	b0, r0 := int64(0), int64(0)
	if run.fill != nil {
		b0, r0 = run.fill()
	}
	spec.progress = func(n int) { b.prog.add(n) }
	res := startResources()
	lr := drive(ctx, spec, run.start)
	s.Usage = res.stop()
	if run.fill != nil {
		b1, r1 := run.fill()
		s.Batches = b1 - b0
		if s.Batches > 0 {
			s.MeanBatch = float64(r1-r0) / float64(s.Batches)
		}
	}
	s.Sent, s.OK, s.Errors, s.Lost = lr.Sent, lr.OK, lr.Errors, lr.Lost
	s.Seconds, s.TasksPerS, s.Errs = lr.Seconds, lr.TasksPerSec, lr.FirstErrors
	// The JSON gets at most maxJSONLatencies of them, evenly strided.
	stride := max(1, (len(lr.Latencies)+maxJSONLatencies-1)/maxJSONLatencies)
	s.LatenciesUS = make([]int64, 0, len(lr.Latencies)/stride+1)
	for i := 0; i < len(lr.Latencies); i += stride {
		s.LatenciesUS = append(s.LatenciesUS, lr.Latencies[i].Microseconds())
	}
	s.Latency = summarize(lr.Latencies)
	if lr.OK > 0 {
		s.Latency.Mean, s.Latency.Max = ms(lr.LatencySum/time.Duration(lr.OK)), ms(lr.LatencyMax)
	}
	return s
}

// setup starts what mode needs and returns its starter and load.
func (b *bencher) setup(ctx context.Context, m *benchModel, idle []*benchModel, mode string, bs int) (*sampleRun, loadSpec, error) {
	spec := loadSpec{
		producers: b.f.producers, window: b.f.inflight, chunk: b.f.sendBatch,
		duration: b.f.duration, tasks: b.f.tasks, drain: b.f.drain,
	}
	queue := fmt.Sprintf("inferq-bench.%s.%s.%s.%s", b.runID, m.cfg.Name, strings.ReplaceAll(m.device, ":", ""), mode)
	log := b.log.With("mode", mode)
	srvSpec := serverSpec{
		addr: b.addr, clientID: "inferq-bench-" + b.runID, busy: m, queue: queue, bs: bs,
		idle: idle, servers: b.f.servers, log: log,
	}
	switch mode {
	case modeDirect:
		run, err := directRun(m, bs, log)
		return run, spec, err
	case modeBroker:
		w, err := startBrokerWorker(b.addr, "inferq-bench-"+b.runID+"-broker", queue, m, 128, log)
		if err != nil {
			return nil, spec, err
		}
		return &sampleRun{start: b.prod.enqueueStarter(m, queue), close: w.close}, spec, nil
	case modeQueue:
		srv, err := startServers(ctx, srvSpec)
		if err != nil {
			return nil, spec, err
		}
		return &sampleRun{start: b.prod.enqueueStarter(m, queue), fill: srv.fill, close: srv.close}, spec, nil
	case modeQuery:
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
		return &sampleRun{start: b.prod.queryStarter(m, queue, b.f.queryTimeout), fill: srv.fill, close: srv.close}, spec, nil
	case modeAdapter:
		srvSpec.adapter, srvSpec.servers = true, 1
		srv, err := startServers(ctx, srvSpec)
		if err != nil {
			return nil, spec, err
		}
		spec.window, spec.chunk = 1, 1
		spec.maxTasks = b.f.adapterMax
		if spec.tasks > 0 {
			spec.tasks = min(spec.tasks, b.f.adapterMax)
		}
		return &sampleRun{start: b.prod.compatStarter(m, queue), fill: srv.fill, close: srv.close}, spec, nil
	}
	return nil, spec, fmt.Errorf("unknown mode %q", mode)
}
