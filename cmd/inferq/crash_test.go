package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/task"
)

// A crash is an attempt (DESIGN.md 4.5): a task that kills the process
// whenever it runs reaches the dead letter queue after max_retries + 1
// crashes with "worker lost during inference", and the tasks that shared its
// batches all succeed. The fault switch is compiled only into a binary
// built with -tags faultinject; this test builds one and restarts it after
// every crash, as a supervisor (Kubernetes) would.
func TestCrashIsAnAttempt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and restarts the binary")
	}
	env := ortEnv(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "inferq-fault")
	build := exec.Command("go", "build", "-tags", "faultinject", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build with -tags faultinject: %v\n%s", err, out)
	}
	if _, err := examples.Write(dir, false); err != nil {
		t.Fatal(err)
	}
	srv := brokertest.NewServer(t, broker.Options{})
	const maxRetries = 2
	cfg := fmt.Sprintf(`broker: {address: %q, client_id: crash-test}
http: {listen: "127.0.0.1:0"}
data_dir: %q
models:
  - name: mlp
    path: %q
    queue: crash.mlp
    device: cpu
    batching: {max_batch_size: 16, max_queue_delay: 50ms}
    retries: {max_retries: %d, backoff_initial: 0}
`, srv.Addr, filepath.Join(dir, "data"), filepath.Join(dir, "mlp.onnx"), maxRetries)
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prod, err := mq.Dial(ctx, mq.Config{Address: srv.Addr, ClientID: "crash-producer"})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const reply = "crash.replies"
	events, err := prod.SubscribeEventsStore(ctx, reply, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	records := map[string]*task.Record{}
	go func() {
		for e := range events {
			if r, err := task.ParseRecord(e.Body); err == nil {
				mu.Lock()
				if records[r.TaskID] == nil {
					records[r.TaskID] = r
				}
				mu.Unlock()
			}
		}
	}()

	// One poison task and seven innocent ones, sent together so that they
	// share the first batch.
	const poison = float32(13.375)
	var msgs []mq.OutMessage
	for i := range 8 {
		x := make([]float32, 16)
		x[0] = float32(i)
		id := fmt.Sprintf("innocent-%d", i)
		if i == 0 {
			x[0], id = poison, "poison"
		}
		body, tags, err := task.NewTask(id, "mlp", []runtime.Tensor{runtime.NewTensor("x", []int64{1, 16}, x)}, task.WithReplyTo(reply))
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, mq.OutMessage{Channel: "crash.mlp", Body: body, Tags: tags})
	}
	if err := prod.Sender().Send(ctx, msgs...); err != nil {
		t.Fatal(err)
	}

	all := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(records) == 8
	}
	crashes := 0
	for run := 0; run < maxRetries+3 && !all(); run++ {
		cmd := exec.Command(bin, "serve", "--config", cfgPath, "--shutdown-grace", "5s", "--log-level", "warn")
		cmd.Env = append(os.Environ(), "INFERQ_ORT_LIB="+env["INFERQ_ORT_LIB"], fmt.Sprintf("INFERQ_FAULT_CRASH_ON=%v", poison))
		var logs strings.Builder
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		deadline := time.After(60 * time.Second)
	wait:
		for {
			select {
			case err := <-exited:
				if err == nil || !strings.Contains(err.Error(), "killed") {
					t.Fatalf("run %d ended without the injected crash: %v\n%s", run, err, logs.String())
				}
				crashes++
				break wait
			case <-deadline:
				cmd.Process.Kill()
				t.Fatalf("run %d: no crash and not all records after 60 s\n%s", run, logs.String())
			case <-time.After(20 * time.Millisecond):
				if all() {
					cmd.Process.Signal(os.Interrupt)
					if err := <-exited; err != nil {
						t.Errorf("graceful stop: %v\n%s", err, logs.String())
					}
					break wait
				}
			}
		}
	}
	if !all() {
		t.Fatalf("after %d crashes only %d of 8 records", crashes, len(records))
	}
	if crashes != maxRetries+1 {
		t.Errorf("the process crashed %d times, want max_retries+1 = %d", crashes, maxRetries+1)
	}
	mu.Lock()
	defer mu.Unlock()
	p := records["poison"]
	if p.Status != task.StatusFailure || !strings.Contains(p.Error, "worker lost during inference") || p.Attempts != maxRetries+1 {
		t.Errorf("poison record: status %s attempts %d error %q", p.Status, p.Attempts, p.Error)
	}
	for i := 1; i < 8; i++ {
		if r := records[fmt.Sprintf("innocent-%d", i)]; r.Status != task.StatusSuccess {
			t.Errorf("innocent task %d: %s %q", i, r.Status, r.Error)
		}
	}
	if dlq := srv.Queue("crash.mlp.dlq"); len(dlq) != 1 || !strings.Contains(dlq[0].Tags[mq.TagError], "worker lost") {
		t.Errorf("dead letter queue holds %d messages", len(dlq))
	}
}
