package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inferq/inferq/bench"
	"github.com/inferq/inferq/client"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"github.com/spf13/pflag"
)

// inferBatch is how many tasks one EnqueueMany call builds and sends.
const inferBatch = 256

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
	conc     int
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
		inputs, err = randomInputs(model, f.shapes, f.dtype)
	} else {
		inputs, err = readInputs(f.input)
	}
	if err != nil {
		return err
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
	fs.IntVar(&f.conc, "concurrency", 1, "with --sync: queries in flight at once")
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
	case f.follow && f.n != 1:
		return usageErrorf("--follow follows one task: use --n 1")
	case f.conc < 1:
		return usageErrorf("--concurrency %d: want at least 1", f.conc)
	case fs.Changed("concurrency") && !f.sync:
		return usageErrorf("--concurrency goes with --sync")
	}
	return nil
}

// brokerConfig reads the broker's address, token and TLS files from the
// environment variables serve reads (envVars), then the flag.
func (a *app) brokerConfig(flag string) mq.Config {
	var mc models.Config
	for _, ev := range envVars {
		for _, name := range ev.names {
			if v := a.getenv(name); v != "" {
				ev.set(&mc, v)
				break
			}
		}
	}
	cfg := brokerConn(mc.Broker)
	cfg.ClientID = "" // a producer's own, made by the client
	if flag != "" {
		cfg.Address = flag
	}
	if cfg.Address == "" {
		cfg.Address = "127.0.0.1:50000"
	}
	return cfg
}

// defaultIdentity is cli-HOSTNAME with the characters a channel name may not
// carry replaced: stable per machine, never per run (a reply channel costs
// the broker files for 24 h).
func defaultIdentity() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	return "cli-" + strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '-'
	}, h)
}

func (a *app) infer(ctx context.Context, model string, inputs []tensor.Tensor, f inferFlags) error {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	bcfg := a.brokerConfig(f.broker)
	if f.identity == "" {
		f.identity = defaultIdentity()
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
		Logger:       slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return usageErrorf("%v", err)
	}
	defer c.Close()

	// Progress events are not stored: subscribe before the task is sent
	// (the probe below gives the subscription time to be live).
	var (
		followID string
		progress <-chan task.Progress
	)
	if f.follow {
		followID = task.NewID()
		if progress, err = c.Progress(ctx, queue, followID); err != nil {
			return err
		}
	}

	if err := ready(ctx, c, bcfg.Address, f.timeout); err != nil {
		return err
	}
	switch {
	case f.sync:
		return a.inferSync(ctx, c, model, queue, inputs, f)
	case f.follow:
		return a.inferFollow(ctx, c, model, queue, inputs, followID, progress, f)
	}
	return a.inferQueued(ctx, c, model, queue, inputs, f)
}

// ready waits for the client's probe of its reply channel, made before the
// first send: that is where an absent broker shows.
func ready(ctx context.Context, c *client.Client, addr string, timeout time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, min(timeout, 10*time.Second))
	defer cancel()
	err := c.Ready(rctx)
	if errors.Is(err, mq.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("broker at %s unreachable (start one with 'inferq broker', or set --broker / INFERQ_BROKER_ADDRESS): %w", addr, err)
	}
	return err
}

// inferQueued sends f.n tasks, waits for their results and prints the
// result (n = 1) or a summary.
func (a *app) inferQueued(ctx context.Context, c *client.Client, model, queue string, inputs []tensor.Tensor, f inferFlags) error {
	var start time.Time // when the first batch was stored
	var (
		mu   sync.Mutex
		lat  = make([]time.Duration, 0, f.n)
		recs = make(map[string]*task.Record, min(f.n, 1<<16))
		ids  = make([]string, 0, f.n)
		wg   sync.WaitGroup
	)
	// Tasks per send: up to inferBatch, and about 32 MiB of tensors.
	size := 1
	for _, t := range inputs {
		size += len(t.Data)
	}
	per := max(1, min(inferBatch, 32<<20/size))
	batch := make([][]tensor.Tensor, 0, per)
	for sent := 0; sent < f.n; sent += len(batch) {
		batch = batch[:0]
		for range min(per, f.n-sent) {
			batch = append(batch, inputs)
		}
		got, err := c.EnqueueMany(ctx, model, batch, client.WithQueue(queue))
		if err != nil {
			return fmt.Errorf("enqueue to %s after %d tasks: %w", queue, sent, err)
		}
		// Latency runs from the task stored on the broker to its result
		// here: the first send of a process also opens the SDK's stream,
		// which takes about a second (KUBEMQ.md trap 3).
		t0 := time.Now()
		if sent == 0 {
			start = t0
		}
		ids = append(ids, got...)
		for _, id := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec, err := c.Wait(ctx, id)
				if err != nil {
					return
				}
				d := time.Since(t0)
				mu.Lock()
				recs[id], lat = rec, append(lat, d)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	if missing := f.n - len(recs); missing > 0 {
		if errors.Is(ctx.Err(), context.Canceled) {
			return fmt.Errorf("interrupted: %d of %d results missing", missing, f.n)
		}
		return fmt.Errorf("timed out after %v: %d of %d results missing (is 'inferq serve' consuming queue %s, with model %s?)",
			f.timeout, missing, f.n, queue, model)
	}
	if f.n == 1 {
		return a.printRecord(recs[ids[0]], lat[0], f.json)
	}
	return a.printSummary(model, queue, ids, recs, lat, elapsed, f.json)
}

// inferSync sends f.n queries, f.conc at a time, and prints the result (n
// = 1) or a summary.
func (a *app) inferSync(ctx context.Context, c *client.Client, model, queue string, inputs []tensor.Tensor, f inferFlags) error {
	var (
		mu   sync.Mutex
		lat  = make([]time.Duration, 0, f.n)
		recs = make(map[string]*task.Record, f.n)
		ids  = make([]string, f.n)
		next = make(chan int)
		wg   sync.WaitGroup
		fail error // a query that got no answer
	)
	start := time.Now()
	for range min(f.conc, f.n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t0 := time.Now()
				resp, err := c.Query(ctx, model, inputs, f.timeout, client.WithQueue(queue))
				d := time.Since(t0)
				rec := &task.Record{TaskID: "query-" + strconv.Itoa(i+1), Status: task.StatusSuccess, CreatedAt: t0, CompletedAt: t0.Add(d)}
				var qe *client.QueryError
				switch {
				case errors.As(err, &qe):
					rec.Status, rec.Error = task.StatusFailure, qe.Message
				case err != nil:
					mu.Lock()
					fail = cmp.Or(fail, err)
					mu.Unlock()
					continue
				default:
					if rec.Result, rec.Binary, err = resp.Encode(); err != nil {
						rec.Status, rec.Error = task.StatusFailure, "decoding the result: "+err.Error()
					}
				}
				mu.Lock()
				ids[i], recs[rec.TaskID], lat = rec.TaskID, rec, append(lat, d)
				mu.Unlock()
			}
		}()
	}
	for i := range f.n {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	if fail != nil {
		return fmt.Errorf("%d of %d queries got no answer; first: %w", f.n-len(recs), f.n, fail)
	}
	if f.n == 1 {
		return a.printRecord(recs[ids[0]], lat[0], f.json)
	}
	return a.printSummary(model, queue, ids, recs, lat, elapsed, f.json)
}

// inferFollow sends one task with id, prints its progress events as they
// arrive, then its record.
func (a *app) inferFollow(ctx context.Context, c *client.Client, model, queue string, inputs []tensor.Tensor, id string, progress <-chan task.Progress, f inferFlags) error {
	out := a.stdout
	if f.json {
		out = a.stderr // stdout carries the JSON record
	}
	printed := make(chan struct{})
	go func() {
		defer close(printed)
		for p := range progress {
			fmt.Fprintf(out, "progress %s: %3d%% %s\n", p.TaskID, p.Pct, p.Detail)
		}
	}()
	t0 := time.Now()
	if _, err := c.Enqueue(ctx, model, inputs, client.WithQueue(queue), client.WithID(id)); err != nil {
		return fmt.Errorf("enqueue to %s: %w", queue, err)
	}
	rec, err := c.Wait(ctx, id)
	if err != nil {
		return fmt.Errorf("waiting for task %s: %w", id, err)
	}
	lat := time.Since(t0)
	// The last event (stored, failed) is sent after the record: give it a
	// moment.
	select {
	case <-printed:
	case <-time.After(200 * time.Millisecond):
	}
	return a.printRecord(rec, lat, f.json)
}

func (a *app) printRecord(rec *task.Record, lat time.Duration, asJSON bool) error {
	var resp *task.InferResponse
	if rec.Status == task.StatusSuccess {
		var err error
		if resp, err = rec.Response(); err != nil {
			return fmt.Errorf("task %s: result: %w", rec.TaskID, err)
		}
	}
	if asJSON {
		out := struct {
			TaskID    string          `json:"task_id"`
			Status    task.Status     `json:"status"`
			LatencyMS float64         `json:"latency_ms"`
			Error     string          `json:"error,omitempty"`
			Result    json.RawMessage `json:"result,omitempty"`
		}{TaskID: rec.TaskID, Status: rec.Status, LatencyMS: bench.Millis(lat), Error: rec.Error}
		if resp != nil {
			// Re-encode with every output as JSON data, binary ones included.
			for i := range resp.Outputs {
				resp.Outputs[i].Binary = false
			}
			b, _, err := resp.Encode()
			if err != nil {
				return err
			}
			out.Result = b
		}
		if err := writeJSON(a.stdout, out); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stdout, "task %s: %s in %.1f ms\n", rec.TaskID, rec.Status, bench.Millis(lat))
		if resp != nil {
			for _, o := range resp.Outputs {
				fmt.Fprintf(a.stdout, "  %s  %s  %s  %s\n", o.Name, o.DType, tensor.FormatShape(o.Shape), tensor.FormatValues(o.Tensor, 16))
			}
		}
		if rec.Error != "" {
			fmt.Fprintf(a.stdout, "  error: %s\n", rec.Error)
		}
	}
	if rec.Status != task.StatusSuccess {
		return fmt.Errorf("task %s: %s: %s", rec.TaskID, rec.Status, rec.Error)
	}
	return nil
}

func (a *app) printSummary(model, queue string, ids []string, recs map[string]*task.Record, lat []time.Duration, elapsed time.Duration, asJSON bool) error {
	ok, failed := 0, 0
	var firstErr string
	for _, id := range ids {
		if recs[id].Status == task.StatusSuccess {
			ok++
			continue
		}
		failed++
		if firstErr == "" {
			firstErr = fmt.Sprintf("%s: %s", recs[id].Status, recs[id].Error)
		}
	}
	slices.Sort(lat)
	rate := float64(len(ids)) / elapsed.Seconds()
	if asJSON {
		err := writeJSON(a.stdout, map[string]any{
			"model": model, "queue": queue, "count": len(ids), "ok": ok, "failed": failed,
			"seconds": elapsed.Seconds(), "tasks_per_second": rate,
			"latency_p50_ms": bench.Millis(bench.Quantile(lat, 0.50)), "latency_p99_ms": bench.Millis(bench.Quantile(lat, 0.99)),
		})
		if err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stdout, "%d tasks to %s: %d ok, %d failed in %.2fs (%.1f tasks/s)\nlatency p50 %.1f ms, p99 %.1f ms\n",
			len(ids), queue, ok, failed, elapsed.Seconds(), rate, bench.Millis(bench.Quantile(lat, 0.50)), bench.Millis(bench.Quantile(lat, 0.99)))
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d tasks failed; first: %s", failed, len(ids), firstErr)
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// randomInputs builds random tensors for model from --shape specs, else
// from the built-in table.
func randomInputs(model string, specs []string, dtype string) ([]tensor.Tensor, error) {
	sig, _ := examples.Inputs(model)
	if len(specs) > 0 {
		defName := "x"
		if len(sig) == 1 {
			defName = sig[0].Name
		}
		sig = nil
		for _, s := range specs {
			ti, err := parseShapeSpec(s, defName, dtype)
			if err != nil {
				return nil, err
			}
			sig = append(sig, ti)
		}
	}
	if len(sig) == 0 {
		return nil, usageErrorf("no built-in signature for model %q (known: %s): give its inputs with --shape NAME:DTYPE:DIMS", model, strings.Join(examples.Names(), ", "))
	}
	r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	out := make([]tensor.Tensor, len(sig))
	for i, ti := range sig {
		t, err := tensor.Random(ti, r)
		if err != nil {
			return nil, usageErrorf("%v; use --input", err)
		}
		out[i] = t
	}
	return out, nil
}

// parseShapeSpec reads a --shape value (see tensor.ParseSpec).
func parseShapeSpec(s, defName, defDType string) (tensor.TensorInfo, error) {
	ti, err := tensor.ParseSpec(s, defName, defDType)
	if err != nil {
		return ti, usageErrorf("--shape %q: %v", s, err)
	}
	return ti, nil
}

// readInputs reads an Open Inference Protocol request file: {"inputs":
// [...]} or the bare list. The tensor objects are those of a response's
// outputs, so task's decoder reads them (nested or flat data, every
// datatype, shape checks).
func readInputs(path string) ([]tensor.Tensor, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageErrorf("--input: %v", err)
	}
	list := bytes.TrimSpace(b)
	if !bytes.HasPrefix(list, []byte("[")) {
		var req struct {
			Inputs json.RawMessage `json:"inputs"`
		}
		if err := json.Unmarshal(b, &req); err != nil {
			return nil, usageErrorf("--input %s: %v", path, err)
		}
		if len(req.Inputs) == 0 {
			return nil, usageErrorf(`--input %s: no "inputs" list`, path)
		}
		list = req.Inputs
	}
	resp, err := task.DecodeInferResponse(append(append([]byte(`{"outputs":`), list...), '}'), nil)
	if err != nil {
		msg := strings.ReplaceAll(err.Error(), "output ", "input ")
		return nil, usageErrorf("--input %s: %s", path, msg)
	}
	if len(resp.Outputs) == 0 {
		return nil, usageErrorf("--input %s: the inputs list is empty", path)
	}
	return resp.Tensors(), nil
}
