package main

import (
	"context"
	"errors"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/bench"
	"github.com/inferq/inferq/client"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/runtime"
	"github.com/spf13/pflag"
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
  http     Open Inference Protocol infer requests to the server's HTTP
           listener (POST /v2/models/{m}/infer; --payload json or binary,
           the binary tensor extension), one request per task
  grpc     the same over its gRPC listener (ModelInfer with
           raw_input_contents, as Triton's clients send it)

The server under test runs in this process (serve's pieces) on the embedded
broker, or on --broker ADDR. Load is closed-loop: --producers clients, each
keeping up to --inflight tasks out, sending --send-batch at a time; latency
runs from the send to the verified result (task id, SUCCESS where queued, one
row of each output's static dims, an FP32 "probs" output summing to 1). Results
not back within --drain-timeout of the last send are lost (exit code 1). A task
is one row; other dynamic dims are 1 unless --shape sets them. The http and grpc
servers admit the whole load. CPU (in cores) and RSS are this process's. Models
come from --config, else the examples in --models-dir (written when missing).`

func runBench(ctx context.Context, a *app, args []string) error {
	fs := a.newFlags("bench", "bench [--model NAME]... [--modes LIST] [flags]", benchHelp)
	var (
		c          bench.Config
		configPath string
		ortLib     string
		lf         logFlags
	)
	fs.StringVarP(&configPath, "config", "c", "", "YAML config with the models (default: the example models in --models-dir, on the CPU)")
	registerBenchFlags(fs, &c)
	fs.StringVar(&ortLib, "ort-lib", "", "onnxruntime shared library (file or directory); default: $INFERQ_ORT_LIB, next to the binary, ./lib")
	lf.register(fs)
	lf.level = "warn"
	fs.Lookup("log-level").DefValue = "warn"
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments %q", fs.Args())
	}
	if fs.Changed("tasks") && c.Tasks < 1 {
		return usageErrorf("--tasks %d: want at least 1", c.Tasks)
	}
	if configPath != "" {
		cfg, err := a.loadConfig(configFlags{path: configPath})
		if err != nil {
			return err
		}
		c.Table, c.TableSource = map[string]models.Model{}, configPath
		c.BrokerConn = brokerConn(cfg.Broker)
		for _, m := range cfg.Models {
			c.Table[m.Name] = m
		}
	}
	if err := c.Validate(); err != nil {
		return usageErrorf("%v", err)
	}
	log, err := lf.logger(a)
	if err != nil {
		return err
	}
	if c.Identity == "" {
		c.Identity = client.HostIdentity("bench-")
	}
	env, err := a.openRuntime(ortLib, log.With("component", "runtime"))
	if err != nil {
		return err
	}
	defer env.Close()
	c.Env, c.Stdout, c.Stderr, c.Logger = env, a.stdout, a.stderr, log
	c.Place = func(ms []models.Model) ([]runtime.Placement, error) { return place(log, ms) }
	if err = bench.Run(ctx, c); errors.Is(err, bench.ErrShape) {
		return usageErrorf("%v", err)
	}
	return err
}

// latencyFlag is --sim-latency: a batch.Latency as BASE,PER_ROW.
type latencyFlag struct{ l *batch.Latency }

func (f latencyFlag) String() string {
	if f.l == nil || f.l.IsZero() {
		return ""
	}
	return f.l.String()
}

func (f latencyFlag) Set(s string) (err error) {
	*f.l, err = batch.ParseLatency(s)
	return err
}

func (latencyFlag) Type() string { return "BASE,PER_ROW" }

// registerBenchFlags binds the bench's flags to c's fields.
func registerBenchFlags(fs *pflag.FlagSet, c *bench.Config) {
	fs.StringArrayVar(&c.Models, "model", nil, "model to measure; repeat for several (default mlp)")
	fs.StringArrayVar(&c.Idle, "idle-model", nil, "model served on its own queue and sent nothing, beside the busy one (multi-model runs); repeatable")
	fs.StringVar(&c.Modes, "modes", "direct,broker,queue,adapter", "modes to run: direct, broker, queue, query, adapter, http, grpc (comma separated)")
	fs.IntVar(&c.Tasks, "tasks", 0, "tasks per sample (instead of --duration)")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long each sample sends")
	fs.DurationVar(&c.Warmup, "warmup", time.Second, "load applied before each sample, not measured")
	fs.IntVar(&c.Producers, "producers", 4, "producer clients (each its own reply channel)")
	fs.IntVar(&c.Inflight, "inflight", 256, "tasks each producer keeps in flight (1: one at a time, light load)")
	fs.IntVar(&c.SendBatch, "send-batch", 64, "tasks per send call")
	fs.StringVar(&c.BatchSizes, "batch-sizes", "", "max_batch_size values to sweep, e.g. 1,8,32 (default: the model's)")
	fs.DurationVar(&c.MaxQueueDelay, "max-queue-delay", 0, "every model's batching.max_queue_delay, e.g. 5ms for an accelerator (--sim-latency) whose runs cost a fixed time (0: the model's; 1ns: run at once)")
	fs.StringVar(&c.Payload, "payload", "binary", "task payload: json or binary")
	fs.StringArrayVar(&c.Shapes, "shape", nil, "the dims of one task's input INPUT, as `INPUT=D1,D2,...` (e.g. input=1,3,224,224), for models with dynamic dims; repeatable. Fixed dims must match the model, a dynamic dim 0 (the batch dim) must be 1, other dynamic dims at most 65536, an input at most 64 MiB (default: 1 in every dynamic dim)")
	fs.StringArrayVar(&c.Devices, "device", nil, "device to run on (cpu, cuda:0, ...); repeat for one row per device (default: the config's placement)")
	fs.StringVar(&c.Broker, "broker", "", "KubeMQ gRPC address host:port (default: an embedded broker in this process)")
	fs.IntVar(&c.Repeat, "repeat", 1, "samples per row; the table shows the median and the spread")
	fs.IntVar(&c.QueueShards, "queue-shards", 1, "queue mode: producers hash task ids over this many shards (as inferq's Go client does with the count); 1: they send to the queue's own name, as the Python adapter and kubemq-js do")
	fs.IntVar(&c.ServerShards, "server-shards", 0, "queue mode: the servers' --queue-shards when the producers send to the queue's own name; 0: with --servers above 1 or --pipeline the recommended count (8, or servers + 1), with which a fleet spreads the load and a lone server can poll its next batch while one runs, else 1")
	fs.BoolVar(&c.Pipeline, "pipeline", false, "queue mode: run the servers with serve's --pipeline")
	fs.Var(latencyFlag{&c.SimLatency}, "sim-latency", "BASE,PER_ROW: run every model on a simulated accelerator per server, each run taking at least BASE + PER_ROW x rows, one run at a time per instance (e.g. 40ms,400us: 65.6 ms for 64 rows); the model still runs and is checked, the rest is slept so the CPU stays free for the pipeline. Take BASE and PER_ROW from a real GPU's --modes direct at two batch sizes")
	fs.IntVar(&c.Servers, "servers", 1, "inferq servers consuming the queue (queue, query, http and grpc modes; http and grpc spread requests over them), each with its own connection and poller")
	fs.StringVar(&c.JSONPath, "json", "", "write every sample (with every latency) as JSON to FILE")
	fs.StringVar(&c.PlotPath, "plot", "", "draw throughput and p99 latency against batch size per mode into FILE.png")
	fs.StringVar(&c.ModelsDir, "models-dir", "data/models", "where the example models are (written when missing) without --config")
	fs.IntVar(&c.AdapterMax, "adapter-max-tasks", 0, "cap on adapter-mode tasks per sample (default 2000 embedded, 300 on --broker: each task costs a KubeMQ channel for 24 h)")
	fs.DurationVar(&c.Drain, "drain-timeout", 30*time.Second, "after the sending stops, how long results may take before they count as lost")
	fs.DurationVar(&c.QueryTimeout, "query-timeout", 10*time.Second, "timeout of one sync query")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a pprof CPU profile of the measured phases to FILE")
	fs.StringVar(&c.Identity, "identity", "", "producer identity prefix naming the reply channels (default bench-HOSTNAME)")
}
