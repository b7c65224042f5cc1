package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/task"
)

// SIGTERM mid-load (DESIGN.md 4.10): the process stops polling, finishes
// or gives back what it took, exits 0, and a restarted process finishes the
// queue: every task gets exactly its result, none is lost.
func TestSIGTERMMidLoadLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	env := ortEnv(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "inferq")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if _, err := examples.Write(dir, false); err != nil {
		t.Fatal(err)
	}
	srv := brokertest.NewServer(t, broker.Options{})
	cfg := fmt.Sprintf(`broker: {address: %q, client_id: sigterm-test}
http: {listen: "127.0.0.1:0"}
data_dir: %q
models:
  - name: mlp
    path: %q
    queue: term.mlp
    device: cpu
    batching: {max_batch_size: 8, max_queue_delay: 1ms}
`, srv.Addr, filepath.Join(dir, "data"), filepath.Join(dir, "mlp.onnx"))
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prod, err := mq.Dial(ctx, mq.Config{Address: srv.Addr, ClientID: "term-producer"})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const reply, n = "term.replies", 3000
	events, err := prod.SubscribeEventsStore(ctx, reply, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	records, dupes := map[string]*task.Record{}, 0
	go func() {
		for e := range events {
			if r, err := task.ParseRecord(e.Body); err == nil {
				mu.Lock()
				if records[r.TaskID] != nil {
					dupes++
				} else {
					records[r.TaskID] = r
				}
				mu.Unlock()
			}
		}
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(records) }
	msgs := make([]mq.OutMessage, n)
	for i := range msgs {
		x := make([]float32, 16)
		x[0] = float32(i)
		body, tags, err := task.NewTask(fmt.Sprintf("t%d", i), "mlp", []runtime.Tensor{runtime.NewTensor("x", []int64{1, 16}, x)}, task.WithReplyTo(reply))
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = mq.OutMessage{Channel: "term.mlp", Body: body, Tags: tags}
	}
	if err := prod.Sender().Send(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	start := func() (*exec.Cmd, *strings.Builder, chan error) {
		cmd := exec.Command(bin, "serve", "--config", cfgPath, "--shutdown-grace", "10s", "--log-level", "warn")
		cmd.Env = append(os.Environ(), "INFERQ_ORT_LIB="+env["INFERQ_ORT_LIB"])
		var logs strings.Builder
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		return cmd, &logs, done
	}
	cmd, logs, done := start()
	deadline := time.Now().Add(60 * time.Second)
	for count() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after SIGTERM the process exited with %v, want 0\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the process did not stop within 30 s of SIGTERM\n%s", logs.String())
	}
	atStop := count()
	t.Logf("%d of %d results stored before the stop", atStop, n)
	if atStop == n {
		t.Log("the first process finished everything before the signal took effect; the restart has nothing to do")
	}
	cmd, logs, done = start()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
	}()
	restartDeadline := time.Now().Add(time.Minute)
	for count() < n {
		select {
		case err := <-done:
			t.Fatalf("second process ended: %v\n%s", err, logs.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(restartDeadline) {
			t.Fatalf("only %d of %d results a minute after the restart\n%s", count(), n, logs.String())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, r := range records {
		if r.Status != task.StatusSuccess {
			t.Errorf("%s: %s %q", id, r.Status, r.Error)
		}
	}
	t.Logf("%d duplicate records (at-least-once delivery)", dupes)
}
