package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/results"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/tensor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
)

const serveHelp = `Serve the configured ONNX models from KubeMQ queues.

Every model consumes its queue (inferq.<name> unless the config says
otherwise): tasks are decoded, batched dynamically, run on the model's
devices, and each result record is stored in KubeMQ (on the task's reply_to
events store channel, else on rayserve-result-<task_id>) before the task's
message is acked. Failures are retried with backoff, then moved to the dead
letter queue; undecodable messages go to the unprocessable queue.

Configuration comes from the YAML file, then the environment (INFERQ_*, and
the adapter's KUBEMQ_ADDRESS, KUBEMQ_AUTH_TOKEN, KUBEMQ_TLS_*_FILE), then these
flags. --print-config shows the result (secrets masked).

HTTP (default 127.0.0.1:8080): /healthz, /readyz (models warm and broker
reachable), /metrics, /v1/models, /v1/tasks/{id}, and the Open Inference
Protocol: /v2, /v2/health/{live,ready}, /v2/models/{m}[/ready|/infer].

Each queue also answers sync inference queries (KubeMQ queries on the queue's
channel, group --query-group). Tracing: OpenTelemetry spans are exported over
OTLP when OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
OTEL_TRACES_EXPORTER=otlp is set (protocol from OTEL_EXPORTER_OTLP_PROTOCOL:
http/protobuf by default, or grpc; the other OTEL_* variables as usual).

SIGINT/SIGTERM stops polling, lets taken tasks finish within
--shutdown-grace, gives back the rest, flushes the result spool and exits 0.
A second signal exits at once.`

// serveFlags are serve's own flags beyond the config layers.
type serveFlags struct {
	cfg            configFlags
	log            logFlags
	ortLib         string
	embedded       string
	printConfig    bool
	shutdownGrace  time.Duration
	alertWebhook   string
	noWarmup       bool
	intakeWorkers  int
	resultWriters  int
	pollMaxItems   int
	sessionThreads int
	queryGroup     string
}

func runServe(ctx context.Context, a *app, args []string) error {
	fs := a.newFlags("serve", "serve --config FILE [flags]", serveHelp)
	var f serveFlags
	f.cfg.register(fs)
	fs.StringVar(&f.embedded, "embedded-broker", "", "start the in-memory embedded broker on ADDR first and use it (default ADDR 127.0.0.1:50000); for demos and tests, not production")
	fs.Lookup("embedded-broker").NoOptDefVal = "127.0.0.1:50000"
	fs.StringVar(&f.ortLib, "ort-lib", "", "onnxruntime shared library (file or directory); default: $INFERQ_ORT_LIB, next to the binary, ./lib")
	fs.BoolVar(&f.printConfig, "print-config", false, "print the merged configuration (secrets masked) and exit")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", 30*time.Second, "on SIGTERM, how long taken tasks may take to finish before they are given back")
	fs.StringVar(&f.alertWebhook, "alert-webhook", "", "URL that receives a JSON POST for each task moved to a dead letter queue (env INFERQ_ALERT_WEBHOOK)")
	fs.BoolVar(&f.noWarmup, "no-warmup", false, "skip the synthetic warm-up batch of each session")
	fs.IntVar(&f.intakeWorkers, "intake-workers", 0, "goroutines decoding tasks (default: number of CPUs)")
	fs.IntVar(&f.resultWriters, "result-writers", 128, "goroutines storing results and settling messages")
	fs.IntVar(&f.pollMaxItems, "poll-max-items", 128, "largest stream poll per queue")
	fs.StringVar(&f.queryGroup, "query-group", consumer.DefaultQueryGroup, "KubeMQ group of the sync query subscriptions: servers in one group share a queue's queries")
	f.log.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	// `--embedded-broker ADDR` (with a space) leaves ADDR as an argument:
	// pflag only binds an optional value written with '='.
	if len(rest) == 1 && fs.Changed("embedded-broker") && f.embedded == fs.Lookup("embedded-broker").NoOptDefVal {
		if _, _, err := net.SplitHostPort(rest[0]); err == nil {
			f.embedded, rest = rest[0], nil
		}
	}
	if len(rest) > 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	log, err := f.log.logger(a)
	if err != nil {
		return err
	}
	c, err := a.loadConfig(f.cfg)
	if err != nil {
		return err
	}
	if f.embedded != "" && f.cfg.broker == "" {
		c.Broker.Address = f.embedded
	}
	if f.alertWebhook == "" {
		f.alertWebhook = a.getenv("INFERQ_ALERT_WEBHOOK")
	}
	if f.printConfig {
		out, err := c.Masked().YAML()
		if err != nil {
			return err
		}
		_, err = a.stdout.Write(out)
		return err
	}
	return serve(ctx, a, log, c, f)
}

// serve runs the whole worker until ctx ends.
func serve(ctx context.Context, a *app, log *slog.Logger, c *models.Config, f serveFlags) error {
	// A second signal after the first exits at once.
	go func() {
		<-ctx.Done()
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		log.Error("second signal: exiting now")
		os.Exit(1)
	}()

	if f.embedded != "" {
		srv := broker.New(broker.Options{Logger: log.With("component", "broker")})
		if err := srv.Start(f.embedded); err != nil {
			return fmt.Errorf("embedded broker: %w", err)
		}
		defer srv.Close()
		log.Info("embedded broker started (in memory, not for production)", "addr", srv.Addr())
	}

	env, err := a.openRuntime(f.ortLib, log.With("component", "runtime"))
	if err != nil {
		return err
	}
	defer env.Close()

	placements, err := place(log, c.Models)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	met, err := consumer.NewMetrics(reg)
	if err != nil {
		return err
	}
	stopGPUMetrics, err := startGPUMetrics(ctx, log.With("component", "gpu"), reg, nvml.New())
	if err != nil {
		return err
	}
	defer stopGPUMetrics()

	loaded, err := loadModels(ctx, env, log, c.Models, placements, met, !f.noWarmup, faultHook(a.getenv))
	if err != nil {
		return err
	}
	defer func() {
		for _, l := range loaded {
			for _, s := range l.sessions {
				s.Close()
			}
		}
	}()

	conn, err := mq.Dial(context.WithoutCancel(ctx), mq.Config{
		Address: c.Broker.Address, ClientID: c.Broker.ClientID, AuthToken: c.Broker.AuthToken,
		TLS:    mq.TLS{CA: c.Broker.TLS.CA, Cert: c.Broker.TLS.Cert, Key: c.Broker.TLS.Key},
		Logger: log.With("component", "mq"),
	})
	if err != nil {
		return fmt.Errorf("broker %s: %w", c.Broker.Address, err)
	}
	defer conn.Close()
	log.Info("broker client started; consuming starts when the broker answers", "addr", c.Broker.Address)

	// One store serves every model: the compat channel prefix and expiry are
	// the first model's; each model's max_result_bytes is applied by the
	// consumer (it gives the store a substitute), the store's is the largest.
	r0 := c.Models[0].Result
	for _, m := range c.Models[1:] {
		if m.Result.ChannelPrefix != r0.ChannelPrefix || m.Result.Expiry != r0.Expiry {
			log.Warn("models differ in result.channel_prefix or result.expiry; the first model's are used for all", "model", m.Name)
		}
		r0.MaxResultBytes = max(r0.MaxResultBytes, m.Result.MaxResultBytes)
	}
	resultsDir, journalDir := "", ""
	if c.DataDir != "" {
		resultsDir, journalDir = filepath.Join(c.DataDir, "results"), filepath.Join(c.DataDir, "journal")
	}
	store, err := results.New(results.Config{
		Broker: consumer.ResultsBroker(conn), Logger: log.With("component", "results"), DataDir: resultsDir,
		ResultPrefix: r0.ChannelPrefix, Expiry: r0.Expiry.D(), MaxResultBytes: r0.MaxResultBytes,
	})
	if err != nil {
		return err
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "inferq_result_store_retries_total", Help: "Broker writes of result records that were retried."},
			func() float64 { return float64(store.Stats().Retries) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "inferq_result_spool_entries", Help: "Result records waiting in the spool for the broker."},
			func() float64 { return float64(store.Stats().Pending) }),
	)
	journal, err := consumer.OpenJournal(journalDir)
	if err != nil {
		return err
	}
	defer journal.Close()

	cms := make([]consumer.Model, len(loaded))
	devices := map[string][]string{}
	for i, l := range loaded {
		cms[i] = consumer.Model{Config: l.cfg, Info: l.info, Batcher: l.batcher, MaxInFlight: l.placement.MaxInFlight()}
		for _, d := range l.placement.Devices {
			devices[l.cfg.Name] = append(devices[l.cfg.Name], d.String())
		}
	}
	tp, stopTracing, err := a.tracerProvider(ctx, log)
	if err != nil {
		return err
	}
	defer stopTracing()

	host, _ := os.Hostname()
	intake := f.intakeWorkers
	if intake <= 0 {
		intake = goruntime.NumCPU()
	}
	srv, err := consumer.New(consumer.Config{
		Broker: conn, Store: store, Models: cms, Journal: journal, Metrics: met,
		Logger: log.With("component", "consumer"), Worker: host, AlertWebhook: f.alertWebhook,
		IntakeWorkers: intake, Writers: f.resultWriters, PollMaxItems: f.pollMaxItems, DrainTimeout: f.shutdownGrace,
		QueryGroup: f.queryGroup, TracerProvider: tp,
	})
	if err != nil {
		return err
	}

	lis, err := net.Listen("tcp", c.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http: listen on %s: %w", c.HTTP.Listen, err)
	}
	hs := &http.Server{Handler: consumer.Handler(consumer.HTTPConfig{Server: srv, Gatherer: reg, Devices: devices}),
		ReadHeaderTimeout: 10 * time.Second}
	log.Info("http listening", "addr", lis.Addr().String())

	// Batchers and the result store outlive the consumer's ctx: what was
	// taken must still run and be stored during the drain.
	back, stopBack := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBack()
	var bg errgroup.Group
	for _, l := range loaded {
		bg.Go(func() error { return l.batcher.Run(back) })
	}
	bg.Go(func() error { return store.Run(back) })
	bg.Go(func() error {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})

	runErr := srv.Run(ctx)
	log.Info("consumer stopped; flushing", "inflight", srv.Inflight())
	stopBack()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = hs.Shutdown(shutdownCtx)
	bgErr := bg.Wait()
	if err := store.Close(shutdownCtx); err != nil {
		log.Error("result spool flush incomplete", "err", err)
		runErr = errors.Join(runErr, err)
	}
	log.Info("stopped")
	return errors.Join(runErr, bgErr)
}

// loadedModel is one model with its sessions and batcher.
type loadedModel struct {
	cfg       models.Model
	placement runtime.Placement
	info      tensor.ModelInfo
	sessions  []*runtime.Session
	batcher   *runtime.Batcher
}

// place discovers the GPUs (NVML) and decides every model's devices.
func place(log *slog.Logger, ms []models.Model) ([]runtime.Placement, error) {
	// CUDA numbers GPUs fastest first unless told otherwise; NVML and
	// placement number them in PCI bus order.
	if _, set := os.LookupEnv("CUDA_DEVICE_ORDER"); !set {
		_ = os.Setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
	}
	visible, set := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	plan, err := planGPUs(nvml.New(), ms, visible, set)
	for _, d := range plan.inv.Devices {
		log.Info("gpu", "device", d)
	}
	if plan.note != "" {
		log.Warn("cuda_visible_devices", "note", plan.note)
	}
	if err != nil {
		return nil, err
	}
	for _, p := range plan.placements {
		if p.Note != "" {
			log.Warn("placement", "model", p.Model, "note", p.Note)
		}
	}
	return plan.placements, nil
}

// loadModels creates every model's sessions on its devices, warms them and
// builds its batcher.
func loadModels(ctx context.Context, env *runtime.Env, log *slog.Logger, ms []models.Model, ps []runtime.Placement, met *consumer.Metrics, warm bool, wrap func(runtime.Runner) runtime.Runner) ([]*loadedModel, error) {
	concurrent := 0
	for i := range ms {
		concurrent += ps[i].Runs()
	}
	var out []*loadedModel
	for i, m := range ms {
		l := &loadedModel{cfg: m, placement: ps[i]}
		for _, d := range ps[i].Devices {
			start := time.Now()
			s, err := runtime.NewSession(env, runtime.SessionConfig{
				Name: m.Name, Path: m.Path, Device: d, CPUs: goruntime.NumCPU(), ConcurrentSessions: concurrent,
				IntraOpThreads: m.IntraOpThreads, Logger: log,
				GPUMemLimit: int64(m.CUDA.GPUMemLimit), ArenaExtendStrategy: m.CUDA.ArenaExtendStrategy,
				CUDNNConvAlgoSearch: m.CUDA.CUDNNConvAlgoSearch, DoCopyInDefaultStream: &m.CUDA.DoCopyInDefaultStream,
				TensorRT: m.CUDA.TensorRT && d.Kind == runtime.KindCUDA,
			})
			if err != nil {
				return out, fmt.Errorf("model %q: %w", m.Name, err)
			}
			l.sessions = append(l.sessions, s)
			if warm {
				if err := s.Warmup(ctx, m.Batching.MaxBatchSize); err != nil {
					return out, fmt.Errorf("model %q: warm-up on %s: %w", m.Name, d, err)
				}
			}
			log.Info("model loaded", "model", m.Name, "device", d.String(), "threads", s.IntraOpThreads(), "took", time.Since(start).Round(time.Millisecond))
		}
		l.info = l.sessions[0].Info()
		runners := make([]runtime.Runner, len(l.sessions))
		for j, s := range l.sessions {
			runners[j] = wrap(s)
		}
		name := m.Name
		b, err := runtime.NewBatcher(runtime.BatcherConfig{
			Name: name,
			Policy: runtime.BatchPolicy{MaxBatchSize: m.Batching.MaxBatchSize, MaxQueueDelay: m.Batching.MaxQueueDelay.D(),
				PreferredBatchSizes: m.Batching.PreferredBatchSizes},
			Runners: runners, Concurrency: m.Concurrency,
			Observer: met.BatchObserver(name),
			Logger:   log.With("model", name),
		})
		if err != nil {
			return out, fmt.Errorf("model %q: batcher: %w", m.Name, err)
		}
		l.batcher = b
		out = append(out, l)
	}
	return out, nil
}

// tracerProvider returns the OTLP trace exporter's provider when the
// standard OTEL_* variables ask for one, else nil (tracing off, no cost).
// On: OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint set, unless
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. The protocol is
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL
// (http/protobuf by default, grpc); the exporter, the batch processor and
// the sampler read their other OTEL_* settings themselves. stop flushes
// the spans.
func (a *app) tracerProvider(ctx context.Context, log *slog.Logger) (tp trace.TracerProvider, stop func(), err error) {
	stop = func() {}
	exporter := strings.ToLower(strings.TrimSpace(a.getenv("OTEL_TRACES_EXPORTER")))
	endpoint := cmp.Or(a.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), a.getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	switch {
	case strings.EqualFold(strings.TrimSpace(a.getenv("OTEL_SDK_DISABLED")), "true"), exporter == "none":
		return nil, stop, nil
	case exporter == "" && endpoint == "":
		return nil, stop, nil
	case exporter != "" && exporter != "otlp":
		return nil, stop, usageErrorf("OTEL_TRACES_EXPORTER=%q: inferq exports traces with otlp (or none)", exporter)
	}
	proto := strings.ToLower(strings.TrimSpace(cmp.Or(a.getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), a.getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf")))
	var exp sdktrace.SpanExporter
	switch proto {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, stop, usageErrorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: want http/protobuf or grpc", proto)
	}
	if err != nil {
		return nil, stop, fmt.Errorf("tracing: otlp exporter: %w", err)
	}
	res := resource.Default()
	if a.getenv("OTEL_SERVICE_NAME") == "" {
		res, _ = resource.Merge(res, resource.NewSchemaless(attribute.String("service.name", "inferq")))
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	log.Info("tracing: exporting spans over otlp", "protocol", proto, "endpoint", cmp.Or(endpoint, "default"))
	return sdk, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := sdk.Shutdown(sctx); err != nil {
			log.Warn("tracing: flushing spans failed", "err", err)
		}
	}, nil
}
