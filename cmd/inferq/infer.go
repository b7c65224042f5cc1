package main

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/inferq/inferq/client"
	"github.com/inferq/inferq/client/infer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/tensor"
	"github.com/spf13/pflag"
)

type inferFlags struct {
	input    string
	random   bool
	shapes   []string
	dtype    string
	binary   bool
	n        int
	broker   string
	queue    string
	identity string
	timeout  time.Duration
	json     bool
	sync     bool
	follow   bool
	noProg   bool
	conc     int
	http     string
	token    string
}

func runInfer(ctx context.Context, a *app, args []string) error {
	fs := a.newFlags("infer", "infer MODEL (--input FILE | --random) [flags]", `Send inference tasks for MODEL to its queue (inferq.MODEL unless --queue) and wait
for the results, the way a producer does: each task names this producer's reply
channel (inferq.reply.IDENTITY, an Events Store channel) and inferq serve pushes
the result record there.

Inputs come from --input FILE, Open Inference Protocol JSON:
  {"inputs": [{"name": "x", "shape": [1,16], "datatype": "FP32", "data": [...]}]}
or --random, random values of the model's input signature: built in for the
example models (mlp: x FP32 [1,16]; multitype: ids INT64 [1,8] and x FP32 [1,4];
resnet18: input FP32 [1,3,224,224]), or given with --shape, once per input.

With --n 1 it prints the task's outputs (name, datatype, shape, data); with more
it prints a summary: tasks ok and failed, tasks/s, latency p50 and p99 (from
the task stored on the broker to its result back here). It exits 1 when a task failed or results are missing.

--sync sends KubeMQ queries instead of tasks: a server of the queue answers
each at once, ahead of queued tasks, and nothing is stored (--concurrency
queries in flight; --timeout is each query's timeout). --follow prints the
task's progress events (received, running, stored, retrying, failed) as they
arrive; progress events are not stored, so some may be missed.

A result over the model's result.max_result_bytes comes back by reference:
infer reads the whole record from the replica's /v1/tasks/ID with
--http-token, else INFERQ_HTTP_AUTH_TOKEN; a relative reference (servers
without http.advertise_url) from the listener at --http URL.

The broker address comes from --broker, else INFERQ_BROKER_ADDRESS, else
KUBEMQ_ADDRESS, else 127.0.0.1:50000 (auth token and TLS from the same
variables as inferq serve).`)
	var f inferFlags
	f.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := f.check(fs); err != nil {
		return err
	}
	model := fs.Arg(0)
	var (
		inputs []tensor.Tensor
		err    error
	)
	if f.random {
		inputs, err = infer.RandomInputs(model, f.shapes, f.dtype)
	} else {
		inputs, err = infer.ReadInputs(f.input)
	}
	if err != nil {
		return usageErrorf("%v", err)
	}
	return a.infer(ctx, model, inputs, f)
}

func (f *inferFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.input, "input", "", "Open Inference Protocol JSON file {\"inputs\":[...]} with the task's inputs")
	fs.BoolVar(&f.random, "random", false, "random inputs from the model's signature (built in for mlp, multitype, resnet18; else --shape)")
	fs.StringArrayVar(&f.shapes, "shape", nil, "with --random: an input as NAME:DTYPE:DIMS (x:FP32:1,16), NAME:DIMS or DIMS; repeat per input")
	fs.StringVar(&f.dtype, "dtype", "FP32", "with --shape: the datatype of inputs given without one")
	fs.BoolVar(&f.binary, "binary", false, "send tensors in the binary form (raw bytes after a JSON header; fast for large inputs)")
	fs.IntVarP(&f.n, "n", "n", 1, "number of tasks to send")
	fs.StringVar(&f.broker, "broker", "", "KubeMQ gRPC address host:port (env INFERQ_BROKER_ADDRESS or KUBEMQ_ADDRESS; default 127.0.0.1:50000)")
	fs.StringVar(&f.queue, "queue", "", "queue to send to (default inferq.MODEL)")
	fs.StringVar(&f.identity, "identity", "", "producer identity naming the reply channel inferq.reply.IDENTITY (default cli-HOSTNAME)")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "give up on results not back after this long (from the start)")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of text")
	fs.BoolVar(&f.sync, "sync", false, "synchronous inference: a KubeMQ query on the queue's channel, answered ahead of queued tasks; nothing stored")
	fs.BoolVar(&f.follow, "follow", false, "print the task's progress events as they arrive (with --n 1, not with --sync)")
	fs.BoolVar(&f.noProg, "no-progress", false, "ask for no progress events for the tasks (kwargs.parameters.progress: false), for runs nobody watches")
	fs.IntVar(&f.conc, "concurrency", 1, "with --sync: queries in flight at once")
	fs.StringVar(&f.http, "http", "", "base URL of the replica's HTTP listener (http://127.0.0.1:8080) to read results stored by a relative reference from")
	fs.StringVar(&f.token, "http-token", "", "bearer token of the replicas' HTTP listeners, to read results stored by reference (env INFERQ_HTTP_AUTH_TOKEN)")
}

// check refuses flag combinations that make no sense.
func (f *inferFlags) check(fs *pflag.FlagSet) error {
	switch {
	case fs.NArg() != 1:
		return usageErrorf("want exactly one MODEL, got %d arguments", fs.NArg())
	case (f.input == "") == !f.random:
		return usageErrorf("give one of --input FILE or --random")
	case f.n < 1:
		return usageErrorf("--n %d: want at least 1", f.n)
	case f.timeout <= 0:
		return usageErrorf("--timeout %v: want a positive duration", f.timeout)
	case len(f.shapes) > 0 && !f.random:
		return usageErrorf("--shape goes with --random")
	case f.sync && f.follow:
		return usageErrorf("--follow goes with queued tasks: a --sync query sends no progress events")
	case f.follow && f.noProg:
		return usageErrorf("--follow and --no-progress: a task followed needs its progress events")
	case f.follow && f.n != 1:
		return usageErrorf("--follow follows one task: use --n 1")
	case f.conc < 1:
		return usageErrorf("--concurrency %d: want at least 1", f.conc)
	case fs.Changed("concurrency") && !f.sync:
		return usageErrorf("--concurrency goes with --sync")
	}
	return nil
}

// producerBroker is the broker connection of env (address, token, TLS
// files: the variables serve reads), the --broker flag over it.
func producerBroker(env models.Config, flag string) mq.Config {
	cfg := brokerConn(env.Broker)
	cfg.ClientID = "" // a producer's own, made by the client
	cfg.Address = cmp.Or(flag, cfg.Address, "127.0.0.1:50000")
	return cfg
}

func (a *app) infer(ctx context.Context, model string, inputs []tensor.Tensor, f inferFlags) error {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	env := a.envConfig()
	bcfg := producerBroker(env, f.broker)
	if f.identity == "" {
		f.identity = client.HostIdentity("cli-")
	}
	queue := f.queue
	if queue == "" {
		queue = client.DefaultQueuePrefix + model
	}
	c, err := client.New(ctx, client.Config{
		Broker:       bcfg,
		Identity:     f.identity,
		BinaryInputs: f.binary,
		// A broker restart mid-run: sends wait for it as long as the run may.
		SendRetryFor: f.timeout,
		HTTPURL:      f.http,
		HTTPToken:    cmp.Or(f.token, env.HTTP.AuthToken),
		Logger:       slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return usageErrorf("%v", err)
	}
	defer c.Close()
	return infer.Run(ctx, c, infer.Config{Model: model, Queue: queue, Inputs: inputs, N: f.n, Timeout: f.timeout,
		Broker: bcfg.Address, Sync: f.sync, Concurrency: f.conc, Follow: f.follow, NoProgress: f.noProg, JSON: f.json, Stdout: a.stdout, Stderr: a.stderr})
}
