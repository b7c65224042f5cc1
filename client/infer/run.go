// Package infer is the producer side of `inferq infer`: it builds a task's
// inputs (random values of a model's signature, or an Open Inference
// Protocol request file), sends tasks or sync queries with a client.Client,
// waits for their results and prints them: one task's outputs, or a
// summary of many (tasks ok and failed, tasks/s, latency percentiles).
// Errors name the command's flags where a flag would fix them.
package infer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/inferq/inferq/client"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// Batch is how many tasks one EnqueueMany call builds and sends.
const Batch = 256

// Config is one run.
type Config struct {
	// Model is the model the tasks name; Queue the queue they go to.
	Model, Queue string
	// Inputs are every task's inputs.
	Inputs []tensor.Tensor
	// N is the number of tasks (or queries) to send, at least 1.
	N int
	// Timeout is the run's limit, which ctx carries: the error for
	// missing results names it, and each query waits up to it.
	Timeout time.Duration
	// Broker is the broker's address, named when it is unreachable.
	Broker string
	// Sync sends KubeMQ queries, Concurrency at a time, instead of tasks.
	Sync        bool
	Concurrency int
	// Follow prints the progress events of the one task (N 1, not Sync).
	Follow bool
	// NoProgress asks for no progress events
	// (kwargs.parameters.progress: false), for runs nobody watches.
	NoProgress bool
	// JSON prints JSON instead of text.
	JSON bool
	// Stdout gets the results; Stderr the progress events when JSON.
	Stdout, Stderr io.Writer
}

// Run sends cfg.N tasks (or queries) with c, waits for their results
// within ctx and prints the result (N 1) or a summary. It fails when a
// task failed or results are missing.
func Run(ctx context.Context, c *client.Client, cfg Config) error {
	r := &run{Config: cfg, c: c, refSlots: make(chan struct{}, refReads)}
	// Progress events are not stored: subscribe before the task is sent
	// (the probe below gives the subscription time to be live).
	var (
		followID string
		progress <-chan task.Progress
		err      error
	)
	if cfg.Follow {
		followID = task.NewID()
		if progress, err = c.Progress(ctx, cfg.Queue, followID); err != nil {
			return err
		}
	}
	if err := r.ready(ctx); err != nil {
		return err
	}
	switch {
	case cfg.Sync:
		return r.sync(ctx)
	case cfg.Follow:
		return r.follow(ctx, followID, progress)
	}
	return r.queued(ctx)
}

// refReads bounds the reads of results stored by reference in flight.
const refReads = 16

// run is one Run's state.
type run struct {
	Config
	c        *client.Client
	refSlots chan struct{} // one per read of a result by reference
}

// ready waits for the client's probe of its reply channel, made before the
// first send: that is where an absent broker shows.
func (r *run) ready(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, min(r.Timeout, 10*time.Second))
	defer cancel()
	err := r.c.Ready(rctx)
	if errors.Is(err, mq.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("broker at %s unreachable (start one with 'inferq broker', or set --broker / INFERQ_BROKER_ADDRESS): %w", r.Broker, err)
	}
	return err
}

// queued sends N tasks, waits for their results and prints the result
// (N 1) or a summary.
func (r *run) queued(ctx context.Context) error {
	var start time.Time // when the first batch was stored
	var (
		mu   sync.Mutex
		lat  = make([]time.Duration, 0, r.N)
		recs = make(map[string]*task.Record, min(r.N, 1<<16))
		refs = map[string]error{} // results stored by reference: why one was not read
		ids  = make([]string, 0, r.N)
		wg   sync.WaitGroup
	)
	// Tasks per send: up to Batch, and about 32 MiB of tensors.
	size := 1
	for _, t := range r.Inputs {
		size += len(t.Data)
	}
	per := max(1, min(Batch, 32<<20/size))
	opts := []client.Option{client.WithQueue(r.Queue)}
	if r.NoProgress {
		opts = append(opts, client.WithTaskOptions(task.WithoutProgress()))
	}
	batch := make([][]tensor.Tensor, 0, per)
	for sent := 0; sent < r.N; sent += len(batch) {
		batch = batch[:0]
		for range min(per, r.N-sent) {
			batch = append(batch, r.Inputs)
		}
		got, err := r.c.EnqueueMany(ctx, r.Model, batch, opts...)
		if err != nil {
			return fmt.Errorf("enqueue to %s after %d tasks: %w", r.Queue, sent, err)
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
				rec, err := r.c.Wait(ctx, id)
				if err != nil {
					return
				}
				whole, byRef, err := r.followRef(ctx, rec)
				d := time.Since(t0)
				if r.N == 1 {
					rec = whole // printed; a summary keeps the small record
				}
				mu.Lock()
				recs[id], lat = rec, append(lat, d)
				if byRef {
					refs[id] = err
				}
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	if missing := r.N - len(recs); missing > 0 {
		if errors.Is(ctx.Err(), context.Canceled) {
			return fmt.Errorf("interrupted: %d of %d results missing", missing, r.N)
		}
		return fmt.Errorf("timed out after %v: %d of %d results missing (is 'inferq serve' consuming queue %s, with model %s?)",
			r.Timeout, missing, r.N, r.Queue, r.Model)
	}
	if r.N == 1 {
		return r.printRecord(recs[ids[0]], refs[ids[0]], lat[0])
	}
	return r.printSummary(ids, recs, refs, lat, elapsed)
}

// followRef returns the whole record of a result stored by reference,
// read from the replica that holds it (rec itself otherwise), and whether
// it was one. Where the read fails, it returns rec and an error that names
// the flag that would fix it.
func (r *run) followRef(ctx context.Context, rec *task.Record) (*task.Record, bool, error) {
	if len(rec.Result) != 0 || rec.ResultRef == "" {
		return rec, false, nil
	}
	select {
	case r.refSlots <- struct{}{}:
		defer func() { <-r.refSlots }()
	case <-ctx.Done():
		return rec, true, &client.RefError{TaskID: rec.TaskID, Ref: rec.ResultRef, Err: ctx.Err()}
	}
	whole, err := r.c.FollowRef(ctx, rec)
	if err == nil {
		return whole, true, nil
	}
	re, _ := errors.AsType[*client.RefError](err)
	switch {
	case errors.Is(err, client.ErrRelativeRef):
		err = fmt.Errorf("%w: give it with --http URL (serve listens on http://127.0.0.1:8080 by default)", err)
	case re != nil && (re.Status == http.StatusUnauthorized || re.Status == http.StatusForbidden):
		err = fmt.Errorf("%w; give the servers' http.auth_token with --http-token or INFERQ_HTTP_AUTH_TOKEN", err)
	}
	return rec, true, err
}

// sync sends N queries, Concurrency at a time, and prints the result (N
// 1) or a summary.
func (r *run) sync(ctx context.Context) error {
	var (
		mu   sync.Mutex
		lat  = make([]time.Duration, 0, r.N)
		recs = make(map[string]*task.Record, r.N)
		ids  = make([]string, r.N)
		next = make(chan int)
		wg   sync.WaitGroup
		fail error // a query that got no answer
	)
	start := time.Now()
	for range min(r.Concurrency, r.N) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t0 := time.Now()
				resp, err := r.c.Query(ctx, r.Model, r.Inputs, r.Timeout, client.WithQueue(r.Queue))
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
	for i := range r.N {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	if fail != nil {
		return fmt.Errorf("%d of %d queries got no answer; first: %w", r.N-len(recs), r.N, fail)
	}
	if r.N == 1 {
		return r.printRecord(recs[ids[0]], nil, lat[0])
	}
	return r.printSummary(ids, recs, nil, lat, elapsed)
}

// follow sends one task with id, prints its progress events as they
// arrive, then its record.
func (r *run) follow(ctx context.Context, id string, progress <-chan task.Progress) error {
	out := r.Stdout
	if r.JSON {
		out = r.Stderr // stdout carries the JSON record
	}
	printed := make(chan struct{})
	go func() {
		defer close(printed)
		for p := range progress {
			fmt.Fprintf(out, "progress %s: %3d%% %s\n", p.TaskID, p.Pct, p.Detail)
		}
	}()
	t0 := time.Now()
	if _, err := r.c.Enqueue(ctx, r.Model, r.Inputs, client.WithQueue(r.Queue), client.WithID(id)); err != nil {
		return fmt.Errorf("enqueue to %s: %w", r.Queue, err)
	}
	rec, err := r.c.Wait(ctx, id)
	if err != nil {
		return fmt.Errorf("waiting for task %s: %w", id, err)
	}
	rec, _, refErr := r.followRef(ctx, rec)
	lat := time.Since(t0)
	// The last event (stored, failed) is sent after the record: give it a
	// moment.
	select {
	case <-printed:
	case <-time.After(200 * time.Millisecond):
	}
	return r.printRecord(rec, refErr, lat)
}
