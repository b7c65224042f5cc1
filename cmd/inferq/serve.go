package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	goruntime "runtime"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/crash"
	"github.com/inferq/inferq/faultinject"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/repository"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/worker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
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
Protocol: /v2, /v2/health/{live,ready}, /v2/models/{m}[/ready|/infer]; with
model_repository, Triton's repository extension: POST /v2/repository/index,
/v2/repository/models/{m}/load and /unload (model_control_mode explicit).

model_repository: DIR serves DIR/<model>/<version>/model.onnx (settings in
DIR/<model>/config.yaml) beside models:; model_control_mode poll reloads
what changes there every repository_poll, without a restart.

Each queue also answers sync inference queries (KubeMQ queries on the queue's
channel, group --query-group). Tracing: OpenTelemetry spans are exported over
OTLP when OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
OTEL_TRACES_EXPORTER=otlp is set (or printed with OTEL_TRACES_EXPORTER=console;
protocol from OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf by default, or grpc;
the other OTEL_* variables as usual).

SIGINT/SIGTERM stops polling, lets taken tasks finish within
--shutdown-grace, gives back the rest, waits up to --spool-flush-timeout for
spooled results to reach the broker, and exits 0; results the broker has
still not taken stay in data_dir for the next start (logged with counts).
It exits 1 only when results would be lost (results.spool memory). A second
signal exits at once.`

// serveFlags are serve's own flags beyond the config layers.
type serveFlags struct {
	cfg           configFlags
	log           logFlags
	ortLib        string
	embedded      string
	printConfig   bool
	shutdownGrace time.Duration
	flushTimeout  time.Duration
	alertWebhook  string
	noWarmup      bool
	intakeWorkers int
	resultWriters int
	pollMaxItems  int
	pollFollow    time.Duration
	queryGroup    string
	localCrashes  bool
	queueShards   int
	pipeline      bool
	crashHold     time.Duration
	crashWindow   time.Duration
	crashKeyFile  string
	crashKey      []byte // from crashKeyFile or the environment (crashKey)
}

func runServe(ctx context.Context, a *app, args []string) error {
	fs := a.newFlags("serve", "serve --config FILE [flags]", serveHelp)
	var f serveFlags
	f.cfg.register(fs)
	fs.StringVar(&f.embedded, "embedded-broker", "", "start the embedded broker on ADDR first and use it (default ADDR 127.0.0.1:50000), requiring broker.auth_token when set (plaintext: broker.tls is refused), in memory or kept in broker.data_dir; for demos and tests, not production")
	fs.Lookup("embedded-broker").NoOptDefVal = "127.0.0.1:50000"
	fs.StringVar(&f.ortLib, "ort-lib", "", "onnxruntime shared library (file or directory); default: $INFERQ_ORT_LIB, next to the binary, ./lib")
	fs.BoolVar(&f.printConfig, "print-config", false, "print the merged configuration (secrets masked) and exit")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", 30*time.Second, "on SIGTERM, how long taken tasks may take to finish before they are given back")
	fs.DurationVar(&f.flushTimeout, "spool-flush-timeout", worker.DefaultSpoolFlushTimeout, "on SIGTERM, after the tasks, how long spooled results may take to reach the broker; the rest stays in data_dir for the next start (0: no wait)")
	fs.StringVar(&f.alertWebhook, "alert-webhook", "", "URL that receives a JSON POST for each task moved to a dead letter queue (env INFERQ_ALERT_WEBHOOK)")
	fs.BoolVar(&f.noWarmup, "no-warmup", false, "skip the synthetic warm-up batch of each session")
	fs.IntVar(&f.intakeWorkers, "intake-workers", 0, "goroutines decoding tasks (default: number of CPUs)")
	fs.IntVar(&f.resultWriters, "result-writers", 128, "goroutines storing results and settling messages")
	fs.IntVar(&f.pollMaxItems, "poll-max-items", 256, "largest stream poll per queue (a busy queue's polls are serial: larger ones idle the devices less); on a sharded queue at most half of its in-flight cap")
	fs.DurationVar(&f.pollFollow, "poll-follow-within", 10*time.Millisecond, "follow a live queue: when its lone tasks come within this of the last one's completion, poll for the next at once after each completion instead of peeking (one call per task instead of two, and no task caught by the last batch's close); when the queue goes quiet, one stream poll waits its 1 s, holding one of the broker's poll slots that other consumers' polls may wait on (KUBEMQ.md trap 11). 0: never follow, peek for every lone task")
	fs.StringVar(&f.queryGroup, "query-group", consumer.DefaultQueryGroup, "KubeMQ group of the sync query subscriptions: servers in one group share a queue's queries")
	fs.IntVar(&f.queueShards, "queue-shards", 1, "spread every queue over this many KubeMQ channels (<queue>, <queue>.shard-1, ...), each polled by one replica at a time: the replicas find each other on the events channel <queue>.members and split the shards; producers that know the count (inferq's client, WithShards) spread tasks over them, the others send to <queue> (shard 0). Several replicas on one channel strand each other's messages on KubeMQ; give every replica the same count, at least the number of replicas")
	fs.BoolVar(&f.pipeline, "pipeline", false, "with --queue-shards above 1, a replica alone on a queue moves polls of the queue's own channel into its shards while a measured trial shows that keeps its devices busier (the next batch polled while one runs; docs/operating.md); off by default: on KubeMQ v2.4.0 moved copies are often stranded for a second, and were now and then left unpolled for good")
	fs.BoolVar(&f.localCrashes, "local-crash-counts", false, "count crashes with this process's journal only: no crash reports on the events store channel <queue>.crashes, so each replica spends max_retries+1 crashes of its own")
	fs.DurationVar(&f.crashHold, "crash-hold", crash.DefaultHold, "how long a task that crashed a replica of the fleet waits before it runs again, so that the replica that died has time to restart and report its crash (0: no wait); set it above a replica's restart time")
	fs.DurationVar(&f.crashWindow, "crash-window", time.Hour, "how long a fleet crash report counts; at most the broker's events store retention")
	fs.StringVar(&f.crashKeyFile, "crash-key-file", "", "file holding the fleet key (surrounding white space trimmed; at least 16 bytes, the same on every replica) that signs crash reports: replicas then refuse unsigned, forged and replayed ones (env INFERQ_CRASH_KEY_FILE, or the key itself in INFERQ_CRASH_KEY); without one, anyone who can publish on <queue>.crashes can spend a task's crash budget")
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
	if f.pollFollow < 0 {
		return usageErrorf("--poll-follow-within %v: must be 0 (never follow) or more", f.pollFollow)
	}
	key, err := crashKey(a, f.crashKeyFile)
	if err != nil {
		return err
	}
	f.crashKey = key
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
	go exitOnSecondSignal(ctx, log)
	if f.embedded != "" {
		srv, err := startEmbeddedBroker(f.embedded, c.Broker, log)
		if err != nil {
			return err
		}
		defer srv.Close()
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
	stopGPUMetrics, err := worker.StartGPUMetrics(ctx, log.With("component", "gpu"), reg, nvml.New())
	if err != nil {
		return err
	}
	defer stopGPUMetrics()
	lo := worker.LoadOptions{Warm: !f.noWarmup, Wrap: faultinject.Hook(a.getenv), Observer: met.BatchObserver, Logger: log}
	loaded, err := worker.LoadModels(ctx, env, c.Models, placements, lo)
	defer loaded.Close() // on error too: it holds the sessions opened before the failure
	if err != nil {
		return err
	}
	repo, err := openRepository(ctx, log, c, env, lo)
	if err != nil {
		return err
	}
	tp, stopTracing, err := worker.TracerProvider(ctx, a.getenv, log)
	var envErr *worker.EnvError
	if errors.As(err, &envErr) {
		return usageErrorf("%v", err)
	}
	if err != nil {
		return err
	}
	defer stopTracing()
	w, err := worker.New(ctx, repository.AddTo(f.workerConfig(c, loaded, reg, met, tp, log), repo))
	if err != nil {
		if repo != nil {
			repo.Close()
		}
		return err
	}
	if repo != nil {
		repo.Attach(w.Server())
	}
	return w.Run(ctx)
}

// startEmbeddedBroker starts the embedded broker on addr for serve
// --embedded-broker. It wants the config's broker.auth_token, the token
// inferq itself sends, so one config turns the token on for both, and
// broker.data_dir and the events store bounds. It serves plaintext only:
// broker.tls would need a server certificate, which 'inferq broker
// --tls-cert' takes.
func startEmbeddedBroker(addr string, b models.Broker, log *slog.Logger) (*broker.Server, error) {
	if b.TLS.Enabled() {
		return nil, usageErrorf("--embedded-broker serves plaintext gRPC but broker.tls is set; for TLS run 'inferq broker --tls-cert FILE --tls-key FILE [--tls-client-ca FILE]' and point broker.address at it")
	}
	srv, err := broker.Open(broker.Options{Logger: log.With("component", "broker"), AuthToken: b.AuthToken,
		DataDir: b.DataDir, EventsStoreMaxEvents: b.EventsStoreMaxEvents, EventsStoreMaxBytes: b.EventsStoreMaxBytes})
	if err != nil {
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	if err := srv.Start(addr); err != nil {
		srv.Close()
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	log.Info("embedded broker started (not for production)", "addr", srv.Addr(), "auth_token", b.AuthToken != "", "data_dir", dataDirOrMemory(b.DataDir))
	return srv, nil
}

// workerConfig is the worker serve runs: the config's broker, data dir and
// HTTP address, and the consumer flags.
func (f serveFlags) workerConfig(c *models.Config, loaded worker.Loaded, reg *prometheus.Registry, met *consumer.Metrics, tp trace.TracerProvider, log *slog.Logger) worker.Config {
	host, _ := os.Hostname()
	intake := f.intakeWorkers
	if intake <= 0 {
		intake = goruntime.NumCPU()
	}
	conn := brokerConn(c.Broker)
	// The consumer can resend whole whatever its models accept.
	conn.MaxMessageBytes = c.MaxMessageBytes()
	return worker.Config{
		Broker: conn,
		Models: loaded.ConsumerModels(), Batchers: loaded.Batchers(), DataDir: c.DataDir,
		Results: c.Results,
		Consumer: consumer.Config{Metrics: met, Worker: host, AlertWebhook: f.alertWebhook, AdvertiseURL: c.HTTP.AdvertiseURL,
			IntakeWorkers: intake, Writers: f.resultWriters, PollMaxItems: f.pollMaxItems, PollFollowWithin: followWithin(f.pollFollow), DrainTimeout: f.shutdownGrace,
			QueryGroup: f.queryGroup, TracerProvider: tp, Crash: crash.FleetConfig{Hold: crashHold(f.crashHold), Window: f.crashWindow, Key: f.crashKey},
			QueueShards: f.queueShards, Pipeline: f.pipeline},
		LocalCrashCounts: f.localCrashes,
		Registry:         reg, HTTP: c.HTTP, GRPC: c.GRPC, Devices: loaded.Devices(), Logger: log,
		SpoolFlushTimeout: spoolFlushTimeout(f.flushTimeout),
	}
}

// crashHold is crash.FleetConfig.Hold for the flag: its 0 (no wait) is
// the fleet's negative.
func crashHold(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// spoolFlushTimeout is worker.Config.SpoolFlushTimeout for the flag: its
// 0 (no wait) is the worker's negative.
func spoolFlushTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// exitOnSecondSignal exits the process at once on a signal after ctx ended
// (the first signal).
func exitOnSecondSignal(ctx context.Context, log *slog.Logger) {
	<-ctx.Done()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	log.Error("second signal: exiting now")
	os.Exit(1)
}

// place discovers the GPUs (NVML) and decides every model's devices.
func place(log *slog.Logger, ms []models.Model) ([]runtime.Placement, error) {
	// CUDA numbers GPUs fastest first unless told otherwise; NVML and
	// placement number them in PCI bus order.
	if _, set := os.LookupEnv("CUDA_DEVICE_ORDER"); !set {
		_ = os.Setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
	}
	visible, set := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	plan, err := worker.PlanGPUs(nvml.New(), ms, visible, set)
	for _, d := range plan.Inventory.Devices {
		log.Info("gpu", "device", d)
	}
	if plan.Note != "" {
		log.Warn("cuda_visible_devices", "note", plan.Note)
	}
	if err != nil {
		return nil, err
	}
	for _, p := range plan.Placements {
		if p.Note != "" {
			log.Warn("placement", "model", p.Model, "note", p.Note)
		}
	}
	return plan.Placements, nil
}

// followWithin maps --poll-follow-within to mq.PollerConfig.FollowWithin,
// where 0 is the default and a negative value turns following off.
func followWithin(flag time.Duration) time.Duration {
	if flag == 0 {
		return -1
	}
	return flag
}
