package client_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/client"
	"github.com/inferq/inferq/client/clienttest"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// fastBroker shortens the broker's poll floor and its protocol second
// (legacy receive and peek waits, expiries), so idle watches and empty
// peeks cost milliseconds.
func fastBroker(t testing.TB) *brokertest.Server {
	return brokertest.NewServer(t, broker.Options{PollWaitFloor: 20 * time.Millisecond, SecondLength: 20 * time.Millisecond})
}

// newClient starts a Client on srv and closes it (checking for leaked
// goroutines) when the test ends.
func newClient(t testing.TB, addr, identity string, edit ...func(*client.Config)) *client.Client {
	t.Helper()
	cfg := client.Config{
		Broker:         mq.Config{Address: addr, RetryMin: 20 * time.Millisecond, RetryMax: 300 * time.Millisecond},
		Identity:       identity,
		CursorInterval: 50 * time.Millisecond,
		ReadyRetry:     20 * time.Millisecond,
	}
	for _, f := range edit {
		f(&cfg)
	}
	c, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		checkNoLeaks(t)
	})
	return c
}

// checkNoLeaks waits for the goroutines of package client to end.
func checkNoLeaks(t testing.TB) {
	t.Helper()
	var leaked []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		leaked = leaked[:0]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "inferq/client.(*Client)") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return
		}
	}
	t.Errorf("goroutines left after Close:\n%s", strings.Join(leaked, "\n\n"))
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mlpInput(first float32) []tensor.Tensor {
	x := make([]float32, 16)
	for i := range x {
		x[i] = first + float32(i)
	}
	return []tensor.Tensor{tensor.NewTensor("x", []int64{1, 16}, x)}
}

// checkMLP checks a record of clienttest.MLP.
func checkMLP(t testing.TB, id string, rec *task.Record) {
	t.Helper()
	if rec == nil || rec.TaskID != id || rec.Status != task.StatusSuccess {
		t.Fatalf("record for %s: %+v", id, rec)
	}
	resp, err := rec.Response()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Outputs) != 1 || resp.Outputs[0].Name != "probs" {
		t.Fatalf("outputs %+v", resp.Outputs)
	}
	p, err := tensor.Values[float32](resp.Outputs[0].Tensor)
	if err != nil || fmt.Sprint(p) != "[0.1 0.2 0.3 0.4]" {
		t.Fatalf("probs %v, %v", p, err)
	}
}

func TestRoundTrip(t *testing.T) {
	srv := fastBroker(t)
	clienttest.StartWorker(t, clienttest.Config{Address: srv.Addr, Model: clienttest.Echo(tensor.INT64, 3)})
	c := newClient(t, srv.Addr, "roundtrip")
	ctx := ctxT(t, 20*time.Second)
	for _, binary := range []bool{false, true} {
		t.Run(fmt.Sprintf("binary=%v", binary), func(t *testing.T) {
			in := []tensor.Tensor{tensor.NewTensor("x", []int64{2, 3}, []int64{1, -2, 3, 1 << 40, 5, 6})}
			var opts []client.Option
			if binary {
				opts = append(opts, client.WithBinaryInputs(), client.WithTaskOptions(task.WithBinaryOutputs()))
			}
			id, err := c.Enqueue(ctx, "echo", in, opts...)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := c.Wait(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Status != task.StatusSuccess || rec.TaskID != id {
				t.Fatalf("record %+v", rec)
			}
			resp, err := rec.Response()
			if err != nil {
				t.Fatal(err)
			}
			y := resp.Outputs[0]
			got, _ := tensor.Values[int64](y.Tensor)
			if y.Name != "y" || y.Binary != binary || fmt.Sprint(y.Shape, got) != "[2 3] [1 -2 3 1099511627776 5 6]" {
				t.Errorf("output %s binary=%v %v", y.Tensor, y.Binary, got)
			}
			if _, err := c.Wait(ctx, id); !errors.Is(err, client.ErrReturned) {
				t.Errorf("second Wait: %v, want ErrReturned", err)
			}
		})
	}
	// A task the model refuses comes back as a FAILURE record.
	id, err := c.Enqueue(ctx, "echo", []tensor.Tensor{tensor.NewTensor("x", []int64{1, 2}, []int64{1, 2})})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := c.Wait(ctx, id)
	if err != nil || rec.Status != task.StatusFailure || !strings.Contains(rec.Error, "x") {
		t.Errorf("bad input: %+v, %v", rec, err)
	}
	if s := c.Stats(); s.Pending != 0 || s.Unclaimed != 0 {
		t.Errorf("stats after all waits: %+v", s)
	}
}

func TestManyTasksBatched(t *testing.T) {
	srv := fastBroker(t)
	w := clienttest.StartWorker(t, clienttest.Config{Address: srv.Addr, Model: clienttest.MLP(), Queue: "custom.q"})
	c := newClient(t, srv.Addr, "many", func(cfg *client.Config) {
		cfg.MaxReceiveCount, cfg.DeadLetterQueue = 3, "custom.q.dlq"
	})
	ctx := ctxT(t, 30*time.Second)
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 400
	inputs := make([][]tensor.Tensor, n)
	for i := range inputs {
		inputs[i] = mlpInput(float32(i))
	}
	calls := c.Conn().Sender().Calls()
	ids, err := c.EnqueueMany(ctx, "mlp", inputs, client.WithQueue("custom.q"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Conn().Sender().Calls() - calls; got > 4 {
		t.Errorf("%d tasks took %d stream sends", n, got)
	}
	recs, err := c.WaitAll(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, rec := range recs {
		checkMLP(t, ids[i], rec)
	}
	// The worker stores a record before it acks the message, so the
	// last acks may land just after the last record arrived.
	waitFor(t, 5*time.Second, fmt.Sprintf("the worker to ack all %d tasks", n), func() bool { return w.Handled() >= n })
	if w.Handled() != n {
		t.Errorf("worker handled %d", w.Handled())
	}
}

func TestTaskPolicy(t *testing.T) {
	srv := fastBroker(t)
	c := newClient(t, srv.Addr, "policy", func(cfg *client.Config) {
		cfg.MaxReceiveCount, cfg.DeadLetterQueue = 3, "inferq.mlp.dlq"
	})
	ctx := ctxT(t, 10*time.Second)
	a, err := c.Enqueue(ctx, "mlp", mlpInput(0))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Enqueue(ctx, "mlp", mlpInput(0), client.WithRetries(5, "failed"), client.WithID("fixed-id"))
	if err != nil || b != "fixed-id" {
		t.Fatal(b, err)
	}
	q := srv.Queue("inferq.mlp")
	if len(q) != 2 {
		t.Fatalf("%d messages in the queue", len(q))
	}
	for i, want := range []struct {
		id  string
		max int32
		dlq string
	}{{a, 3, "inferq.mlp.dlq"}, {b, 5, "failed"}} {
		m := q[i]
		if m.Tags[task.TagTaskID] != want.id || m.Tags[task.TagReplyTo] != "inferq.reply.policy" ||
			m.Policy.MaxReceiveCount != want.max || m.Policy.MaxReceiveQueue != want.dlq {
			t.Errorf("message %d: tags %v policy %+v", i, m.Tags, m.Policy)
		}
		if m.Policy.ExpirationSeconds != 0 {
			t.Errorf("task with an expiration (trap 8)")
		}
	}
}

func TestDuplicateRecordsWaitReturnsOnce(t *testing.T) {
	srv := fastBroker(t)
	w := clienttest.StartWorker(t, clienttest.Config{Address: srv.Addr, Model: clienttest.MLP(), Duplicate: true})
	c := newClient(t, srv.Addr, "dups")
	ctx := ctxT(t, 20*time.Second)
	const n = 20
	inputs := make([][]tensor.Tensor, n)
	for i := range inputs {
		inputs[i] = mlpInput(1)
	}
	ids, err := c.EnqueueMany(ctx, "mlp", inputs)
	if err != nil {
		t.Fatal(err)
	}
	// Several Waits per id, at once: each gets the one record.
	var wg sync.WaitGroup
	got := make([][3]*task.Record, n)
	for i, id := range ids {
		for k := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec, err := c.Wait(ctx, id)
				if err != nil && !errors.Is(err, client.ErrReturned) {
					t.Errorf("wait %s: %v", id, err)
				}
				got[i][k] = rec
			}()
		}
	}
	wg.Wait()
	for i := range got {
		var first *task.Record
		for _, r := range got[i] {
			if r != nil && first == nil {
				first = r
			} else if r != nil && r != first {
				t.Errorf("task %d: two different records handed out", i)
			}
		}
		checkMLP(t, ids[i], first)
	}
	waitFor(t, 10*time.Second, "both copies sent", func() bool { return w.Handled() == n })
	waitFor(t, 10*time.Second, "duplicates dropped", func() bool { return c.Stats().Duplicates == n })
	if s := c.Stats(); s.Unclaimed != 0 || s.Pending != 0 {
		t.Errorf("a duplicate was kept: %+v", s)
	}
	for _, id := range ids {
		if _, err := c.Wait(ctx, id); !errors.Is(err, client.ErrReturned) {
			t.Fatalf("Wait after the record was handed out: %v", err)
		}
	}
}

func TestResultsBeforeWaitAreKept(t *testing.T) {
	srv := fastBroker(t)
	clienttest.StartWorker(t, clienttest.Config{Address: srv.Addr, Model: clienttest.MLP()})
	c := newClient(t, srv.Addr, "early")
	ctx := ctxT(t, 20*time.Second)
	id, err := c.Enqueue(ctx, "mlp", mlpInput(0))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "record received", func() bool { return c.Stats().Unclaimed == 1 })
	if rec, err := c.Status(ctx, id); err != nil || rec.Status != task.StatusSuccess {
		t.Fatalf("Status of a held record: %+v, %v", rec, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	cancel() // a held record is returned without waiting
	rec, err := c.Wait(wctx, id)
	if err != nil {
		t.Fatal(err)
	}
	checkMLP(t, id, rec)
}

func TestRestartedClientGetsMissedResults(t *testing.T) {
	srv := fastBroker(t)
	cursor := filepath.Join(t.TempDir(), "cursor")
	withCursor := func(cfg *client.Config) { cfg.CursorFile = cursor }
	ctx := ctxT(t, 30*time.Second)

	// First life: one task answered and never waited for, three enqueued
	// and answered while the client is down.
	c1, err := client.New(ctx, client.Config{
		Broker: mq.Config{Address: srv.Addr}, Identity: "restart", CursorFile: cursor, ReadyRetry: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c1.Close() })
	w := clienttest.StartWorker(t, clienttest.Config{Address: srv.Addr, Model: clienttest.MLP()})
	early, err := c1.Enqueue(ctx, "mlp", mlpInput(0))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "record received", func() bool { return c1.Stats().Unclaimed == 1 })
	w.Stop()
	ids, err := c1.EnqueueMany(ctx, "mlp", [][]tensor.Tensor{mlpInput(1), mlpInput(2), mlpInput(3)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	w = clienttest.StartWorker(t, clienttest.Config{Address: srv.Addr, Model: clienttest.MLP()})
	waitFor(t, 10*time.Second, "records written", func() bool { return w.Handled() == 3 })

	// Second life: same identity and cursor.
	c2 := newClient(t, srv.Addr, "restart", withCursor)
	recs, err := c2.WaitAll(ctx, append([]string{early}, ids...))
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range append([]string{early}, ids...) {
		checkMLP(t, id, recs[i])
	}
	// Everything handed out: the cursor passes the last record.
	last := c2.Stats().LastSeq
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	c3 := newClient(t, srv.Addr, "restart", withCursor)
	if s := c3.Stats(); s.LastSeq != last {
		t.Errorf("third life starts at %d, want %d", s.LastSeq, last)
	}
}

func TestBrokerRestartMidWait(t *testing.T) {
	skipSDKRace(t)
	srv := fastBroker(t)
	c := newClient(t, srv.Addr, "brokerloss")
	ctx := ctxT(t, 60*time.Second)
	w := clienttest.StartWorker(t, clienttest.Config{Address: srv.Addr, Model: clienttest.MLP()})
	first := make([][]tensor.Tensor, 10)
	for i := range first {
		first[i] = mlpInput(0)
	}
	ids, err := c.EnqueueMany(ctx, "mlp", first)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "first results", func() bool { return w.Handled() == 10 })
	w.Stop()

	// Tasks queued, the broker goes away while the client waits, the
	// worker answers as soon as it is back: before the client has
	// resubscribed, in the usual case.
	more, err := c.EnqueueMany(ctx, "mlp", first)
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, more...)
	done := make(chan error, 1)
	var recs []*task.Record
	go func() {
		var err error
		recs, err = c.WaitAll(ctx, ids)
		done <- err
	}()
	srv.Stop()
	srv.Restart()
	w = clienttest.StartWorker(t, clienttest.Config{Address: srv.Addr, Model: clienttest.MLP()})
	// And tasks enqueued after the restart, once the sender is back.
	var late []string
	waitFor(t, 20*time.Second, "enqueue after restart", func() bool {
		late, err = c.EnqueueMany(ctx, "mlp", first)
		return err == nil
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, rec := range recs {
		checkMLP(t, ids[i], rec)
	}
	lrecs, err := c.WaitAll(ctx, late)
	if err != nil {
		t.Fatal(err)
	}
	for i, rec := range lrecs {
		checkMLP(t, late[i], rec)
	}
}

func TestStatusCompat(t *testing.T) {
	srv := fastBroker(t)
	c := newClient(t, srv.Addr, "compat")
	ctx := ctxT(t, 20*time.Second)
	id, err := c.Enqueue(ctx, "mlp", mlpInput(0), client.WithCompat())
	if err != nil {
		t.Fatal(err)
	}
	if m := srv.Queue("inferq.mlp"); len(m) != 1 || m[0].Tags[task.TagReplyTo] != "" {
		t.Fatalf("compat task: %+v", m)
	}
	rec, err := c.Status(ctx, id)
	if err != nil || rec.Status != task.StatusPending || rec.TaskID != id {
		t.Fatalf("before the worker: %+v, %v", rec, err)
	}
	if st := srv.QueueState("rayserve-result-" + id); len(st.Waiting) != 1 || st.Waiting[0].Policy.ExpirationSeconds != 3600 {
		t.Fatalf("PENDING record: %+v", st.Waiting)
	}
	clienttest.StartWorker(t, clienttest.Config{Address: srv.Addr, Model: clienttest.MLP()})
	waitFor(t, 10*time.Second, "SUCCESS on the compat channel", func() bool {
		rec, err = c.Status(ctx, id)
		return err == nil && rec.Status != task.StatusPending
	})
	checkMLP(t, id, rec)

	// A task nobody wrote anything for: PENDING after an empty peek.
	rec, err = c.Status(ctx, task.NewID())
	if err != nil || rec.Status != task.StatusPending {
		t.Errorf("unknown task: %+v, %v", rec, err)
	}
}

func TestBrokerUnreachable(t *testing.T) {
	srv := fastBroker(t)
	addr := srv.Addr
	srv.Close()
	c := newClient(t, addr, "nobroker")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Enqueue(ctx, "mlp", mlpInput(0))
	if !errors.Is(err, client.ErrNotReady) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("enqueue with no broker: %v", err)
	}
	if s := c.Stats(); s.Pending != 0 {
		t.Errorf("a task that was not sent is pending: %+v", s)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer wcancel()
	recs, err := c.WaitAll(wctx, []string{"a", "b"})
	var me *client.MissingError
	if !errors.As(err, &me) || me.Missing != 2 || me.Total != 2 || recs[0] != nil {
		t.Errorf("WaitAll: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, cfg := range []client.Config{
		{Broker: mq.Config{Address: "127.0.0.1:1"}},
		{Broker: mq.Config{Address: "127.0.0.1:1"}, Identity: "a b"},
		{Broker: mq.Config{Address: "127.0.0.1:1"}, Identity: "a*"},
		{Broker: mq.Config{Address: "nope"}, Identity: "a"},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
	cfg := client.Config{Broker: mq.Config{Address: "127.0.0.1:1"}, Identity: "svc-1.eu"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.ReplyChannel != "inferq.reply.svc-1.eu" || cfg.Broker.ClientID != "inferq-client-svc-1.eu" {
		t.Errorf("defaults: %+v", cfg)
	}
}

// TestEnqueueRidesThroughBrokerRestart: producers enqueue in a loop (one
// task a call, and batches) while the broker is away for about 1.5 s; no
// call fails while its ctx lives, every task is on the queue after the
// restart, and every result comes back through Wait. The worker starts
// after the restart, so no queue poll is live while the broker is away.
func TestEnqueueRidesThroughBrokerRestart(t *testing.T) {
	skipSDKRace(t)
	srv := fastBroker(t)
	c := newClient(t, srv.Addr, "ridethrough")
	ctx := ctxT(t, 60*time.Second)
	// The first send opens the sender's stream (slow on KubeMQ too).
	warm, err := c.Enqueue(ctx, "mlp", mlpInput(0))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		ids     = []string{warm}
		slow    int // calls that spanned the outage
		stopped = make(chan struct{})
		wg      sync.WaitGroup
	)
	produce := func(batch int) {
		defer wg.Done()
		in := make([][]tensor.Tensor, batch)
		for i := range in {
			in[i] = mlpInput(0)
		}
		for {
			select {
			case <-stopped:
				return
			default:
			}
			t0 := time.Now()
			var got []string
			var err error
			if batch == 1 {
				var id string
				id, err = c.Enqueue(ctx, "mlp", in[0])
				got = []string{id}
			} else {
				got, err = c.EnqueueMany(ctx, "mlp", in)
			}
			if err != nil {
				t.Errorf("enqueue (batch %d) failed while its ctx lives: %v", batch, err)
				return
			}
			mu.Lock()
			ids = append(ids, got...)
			if time.Since(t0) > 500*time.Millisecond {
				slow++
			}
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}
	wg.Add(3)
	go produce(1)
	go produce(1)
	go produce(8)
	time.Sleep(200 * time.Millisecond)
	srv.Stop()
	time.Sleep(1500 * time.Millisecond)
	srv.Restart()
	time.Sleep(500 * time.Millisecond)
	close(stopped)
	wg.Wait()
	if t.Failed() {
		return
	}
	if slow == 0 {
		t.Fatalf("no enqueue spanned the outage (%d tasks): the test did not test", len(ids))
	}
	queued := map[string]int{}
	for _, m := range srv.Queue("inferq.mlp") {
		queued[m.Tags[task.TagTaskID]]++
	}
	for _, id := range ids {
		if queued[id] == 0 {
			t.Errorf("task %s enqueued without error is not on the queue", id)
		}
	}
	if len(queued) != len(ids) {
		t.Errorf("%d distinct tasks on the queue, %d enqueued", len(queued), len(ids))
	}
	w := clienttest.StartWorker(t, clienttest.Config{Address: srv.Addr, Model: clienttest.MLP()})
	recs, err := c.WaitAll(ctx, ids)
	if err != nil {
		t.Fatalf("%v (worker handled %d)", err, w.Handled())
	}
	for i, rec := range recs {
		checkMLP(t, ids[i], rec)
	}
	t.Logf("%d tasks, %d calls spanned the outage, %d handled", len(ids), slow, w.Handled())
}

// TestEnqueueRetryBounds: a broker that stays away makes Enqueue resend
// until its ctx ends or SendRetryFor passes, whichever comes first, and
// the error says why (mq.ErrUnavailable, and ctx's error or the cap).
func TestEnqueueRetryBounds(t *testing.T) {
	tests := []struct {
		name     string
		retryFor time.Duration
		ctxFor   time.Duration
		want     error  // besides mq.ErrUnavailable
		wantText string // in the error
	}{
		// 2 s: the first send may wait a second for the SDK to notice the
		// lost stream; the ctx ends later, during the resends.
		{"ctx ends first", time.Minute, 2 * time.Second, context.DeadlineExceeded, "tries"},
		{"cap ends first", 400 * time.Millisecond, time.Minute, nil, "SendRetryFor 400ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fastBroker(t)
			c := newClient(t, srv.Addr, "bounds", func(cfg *client.Config) { cfg.SendRetryFor = tt.retryFor })
			if _, err := c.Enqueue(ctxT(t, 10*time.Second), "mlp", mlpInput(0)); err != nil {
				t.Fatal(err)
			}
			srv.Stop()
			ctx := ctxT(t, tt.ctxFor)
			t0 := time.Now()
			_, err := c.EnqueueMany(ctx, "mlp", [][]tensor.Tensor{mlpInput(1), mlpInput(2)})
			took := time.Since(t0)
			if !errors.Is(err, mq.ErrUnavailable) || (tt.want != nil && !errors.Is(err, tt.want)) || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("enqueue with the broker away: %v", err)
			}
			if bound := min(tt.retryFor, tt.ctxFor); took < bound-50*time.Millisecond || took > bound+8*time.Second {
				t.Errorf("gave up after %v, want about %v", took, bound)
			}
			if s := c.Stats(); s.Pending != 1 {
				t.Errorf("tasks not sent are pending: %+v", s)
			}
		})
	}
}
