package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/client/clienttest"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/worker"
)

// modelBatcher runs a clienttest model on its own goroutine per item,
// reporting the start of each run like a batch of one.
type modelBatcher struct{ m clienttest.Model }

func (b modelBatcher) Enqueue(ctx context.Context, r *batch.Request) error {
	go func() {
		if err := ctx.Err(); err != nil {
			r.Finish(batch.ItemResult{Err: err})
			return
		}
		r.Start(1)
		out, err := b.m.Compute(r.Item.Inputs)
		r.Finish(batch.ItemResult{Outputs: out, Err: err})
	}()
	return nil
}

// startServer runs a consumer of inferq.mlp (tasks, queries, progress) on
// the broker at addr until the test ends.
func startServer(t *testing.T, addr string) {
	t.Helper()
	c := models.Config{Models: []models.Model{models.NewModel("mlp")}}
	c.Models[0].Path = "unused.onnx"
	c.SetDefaults()
	w, err := worker.New(context.Background(), worker.Config{
		Broker:   mq.Config{Address: addr, ClientID: "inferq-sync-test"},
		Models:   []consumer.Model{{Config: c.Models[0], Info: clienttest.MLP().Info, Batcher: modelBatcher{clienttest.MLP()}}},
		Consumer: consumer.Config{Writers: 4, IntakeWorkers: 1},
		Results:  models.Results{Spool: models.SpoolMemory},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); _ = w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-ran
	})
}

func TestInferSync(t *testing.T) {
	srv := inferBroker(t)
	startServer(t, srv.Addr)
	// The first query may come before the subscription is live: it then
	// waits its whole timeout, so retry short ones.
	var code int
	var out, errs string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		code, out, errs = runInferCmd(t, nil, "mlp", "--random", "--sync", "--timeout", "300ms", "--broker", srv.Addr, "--identity", "sync")
		if code == 0 || !strings.Contains(errs, "no answer") {
			break
		}
	}
	if code != 0 || !strings.Contains(out, "SUCCESS") || !strings.Contains(out, "probs  FP32  [1,4]  [0.1 0.2 0.3 0.4]") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}

	t.Run("many", func(t *testing.T) {
		code, out, errs := runInferCmd(t, nil, "mlp", "--random", "--sync", "--n", "20", "--concurrency", "4", "--broker", srv.Addr, "--identity", "sync")
		if code != 0 || !strings.Contains(out, "20 tasks to inferq.mlp: 20 ok, 0 failed") {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
		}
	})
	t.Run("failure", func(t *testing.T) {
		code, out, errs := runInferCmd(t, nil, "nope", "--random", "--shape", "x:FP32:1,16", "--sync", "--queue", "inferq.mlp", "--broker", srv.Addr, "--identity", "sync")
		if code != 1 || !strings.Contains(out, "FAILURE") || !strings.Contains(out, `unknown model "nope"`) {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
		}
	})
	t.Run("flags", func(t *testing.T) {
		for _, args := range [][]string{{"--sync", "--follow"}, {"--follow", "--n", "2"}, {"--concurrency", "2"}, {"--follow", "--no-progress"}} {
			code, _, errs := runInferCmd(t, nil, append([]string{"mlp", "--random", "--broker", srv.Addr}, args...)...)
			if code != 2 {
				t.Errorf("%v: exit %d, want 2 (usage): %s", args, code, errs)
			}
		}
	})
}

func TestInferFollow(t *testing.T) {
	srv := inferBroker(t)
	startServer(t, srv.Addr)
	code, out, errs := runInferCmd(t, nil, "mlp", "--random", "--follow", "--broker", srv.Addr, "--identity", "follow")
	if code != 0 || !strings.Contains(out, "SUCCESS") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	t.Logf("output:\n%s", out)
	// Events are not stored: the first may come before the subscription
	// is live; the run's comes after it.
	if !regexp.MustCompile(`progress [0-9a-f-]+:  50% running: batch of 1`).MatchString(out) {
		t.Errorf("no running event in:\n%s", out)
	}
}

// --no-progress sends tasks that ask for no progress events; without it
// they ask nothing (the model decides). No server runs: the tasks stay in
// the queue to be read.
func TestInferNoProgress(t *testing.T) {
	srv := inferBroker(t)
	for _, tc := range []struct {
		flag string
		want bool // the tasks carry "progress":false
	}{{"--no-progress", true}, {"", false}} {
		queue := "inferq.np" + strings.TrimPrefix(tc.flag, "--")
		args := []string{"mlp", "--random", "-n", "2", "--queue", queue, "--timeout", "3s", "--broker", srv.Addr}
		if tc.flag != "" {
			args = append(args, tc.flag)
		}
		if code, out, errs := runInferCmd(t, nil, args...); code != 1 {
			t.Fatalf("%v: exit %d, want 1 (no server: results missing)\nstdout:\n%s\nstderr:\n%s", args, code, out, errs)
		}
		msgs := srv.Queue(queue)
		if len(msgs) != 2 {
			t.Fatalf("%v: %d tasks in %s, want 2", args, len(msgs), queue)
		}
		for _, m := range msgs {
			tk, err := task.Parse(m.Body, m.Tags, task.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if tk.NoProgress != tc.want {
				t.Errorf("%v: task NoProgress = %v, want %v", args, tk.NoProgress, tc.want)
			}
		}
	}
}
