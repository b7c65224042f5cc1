package repository_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/client"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/repository"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"github.com/inferq/inferq/worker"
)

// newEnv opens onnxruntime (INFERQ_ORT_LIB, else ../lib), or skips t.
func newEnv(t testing.TB) *runtime.Env {
	t.Helper()
	p, err := runtime.LocateLibrary(runtime.LibrarySearch{Env: os.Getenv("INFERQ_ORT_LIB"), WorkDir: ".."})
	if err != nil {
		t.Skipf("onnxruntime library not available (set INFERQ_ORT_LIB or run `make setup`): %v", err)
	}
	env, err := runtime.NewEnv(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Close() })
	return env
}

// writeModel writes data as dir/name/version/model.onnx the way a
// deployment does: to a temporary name, then renamed into place.
func writeModel(t testing.TB, dir, name string, version int, data []byte) {
	t.Helper()
	vdir := filepath.Join(dir, name, fmt.Sprint(version))
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(vdir, ".model.onnx.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(vdir, repository.ModelFile)); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t testing.TB, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// mlpConfig is the repository's mlp settings: CPU, no retry (a failure
// is final, so any shows), small batches.
const mlpConfig = "device: cpu\nretries: {max_retries: 0}\nbatching: {max_batch_size: 8, max_queue_delay: 2ms}\n"

// rig is a worker serving a model repository through the embedded
// broker, and a producer.
type rig struct {
	repo   *repository.Repository
	w      *worker.Worker
	c      *client.Client
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startRig(t *testing.T, dir string, mode models.ControlMode, httpListen string) *rig {
	t.Helper()
	env := newEnv(t)
	srv := brokertest.NewServer(t, broker.Options{PollWaitFloor: 20 * time.Millisecond, SecondLength: 20 * time.Millisecond})
	r := &rig{logs: &syncBuffer{}, done: make(chan error, 1)}
	log := slog.New(slog.NewTextHandler(r.logs, nil))
	repo, err := repository.Open(context.Background(), repository.Config{
		Dir: dir, Mode: mode, Poll: 50 * time.Millisecond, Logger: log,
		Load: repository.ORTLoader(env, repository.CPUPlacer, worker.LoadOptions{Warm: true, Logger: log}),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.repo = repo
	if len(repo.Models()) == 0 {
		t.Fatalf("no model loaded: %+v", repo.Index(false))
	}
	w, err := worker.New(context.Background(), worker.Config{
		Broker:     mq.Config{Address: srv.Addr, ClientID: "repo-test"},
		Models:     repo.Models(),
		DataDir:    t.TempDir(),
		Consumer:   consumer.Config{Worker: "test", IntakeWorkers: 2, Writers: 16, DrainTimeout: 10 * time.Second},
		HTTP:       models.HTTP{Listen: httpListen, AuthToken: "secret"},
		GRPC:       models.GRPC{Listen: "127.0.0.1:0"},
		Background: []func(context.Context) error{repo.Run},
		Routes:     repository.Routes(repo),
		Repository: repository.Control(repo),
		Logger:     log,
	})
	if err != nil {
		t.Fatal(err)
	}
	repo.Attach(w.Server())
	r.w = w
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(r.stop)
	waitFor(t, 30*time.Second, "worker ready", w.Ready)
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	c, err := client.New(cctx, client.Config{Broker: mq.Config{Address: srv.Addr, ClientID: "repo-test-producer"}, Identity: "repo-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r.c = c
	return r
}

func (r *rig) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mlpInput() []tensor.Tensor {
	x := make([]float32, examples.MLPInputs)
	for i := range x {
		x[i] = float32(i)/8 - 1
	}
	return []tensor.Tensor{tensor.NewTensor("x", []int64{1, examples.MLPInputs}, x)}
}

// outcome is one task's record: its version and outputs, or why not.
type outcome struct {
	version, outputs string
	err              error
}

func wait(ctx context.Context, c *client.Client, id string) outcome {
	rec, err := c.Wait(ctx, id)
	if err != nil {
		return outcome{err: err}
	}
	if rec.Status != task.StatusSuccess {
		return outcome{err: fmt.Errorf("task %s: %s: %s", id, rec.Status, rec.Error)}
	}
	resp, err := rec.Response()
	if err != nil {
		return outcome{err: err}
	}
	return outcome{version: resp.ModelVersion, outputs: fmt.Sprintf("%x", resp.Outputs[0].Tensor.Data)}
}

// A steady stream of mlp tasks while version 2 appears in the
// repository (poll mode): every task succeeds, the first ones on version
// 1, the last ones on version 2, and each version's outputs are its
// model's (one value per version, and the two differ).
func TestPollReloadUnderLoad(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mlp", repository.ConfigFile), mlpConfig)
	writeModel(t, dir, "mlp", 1, examples.MLP())
	r := startRig(t, dir, models.ControlPoll, "")

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var (
		mu       sync.Mutex
		outcomes []outcome
		waits    sync.WaitGroup
	)
	sent := 0
	send := func() {
		id, err := r.c.Enqueue(ctx, "mlp", mlpInput())
		if err != nil {
			t.Fatal(err)
		}
		i := sent
		sent++
		mu.Lock()
		outcomes = append(outcomes, outcome{})
		mu.Unlock()
		waits.Add(1)
		go func() {
			defer waits.Done()
			o := wait(ctx, r.c, id)
			mu.Lock()
			outcomes[i] = o
			mu.Unlock()
		}()
	}
	seen := func(version string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, o := range outcomes {
			if o.version == version {
				return true
			}
		}
		return false
	}
	for !seen("1") || sent < 20 {
		send()
		time.Sleep(2 * time.Millisecond)
	}
	writeModel(t, dir, "mlp", 2, examples.MLPVariant(1))
	for !seen("2") {
		if ctx.Err() != nil {
			t.Fatalf("no task ran on version 2; log:\n%s", r.logs.String())
		}
		send()
		time.Sleep(2 * time.Millisecond)
	}
	for range 20 {
		send()
	}
	waits.Wait()

	byVersion := map[string]map[string]int{}
	for i, o := range outcomes {
		if o.err != nil {
			t.Errorf("task %d: %v", i, o.err)
			continue
		}
		if byVersion[o.version] == nil {
			byVersion[o.version] = map[string]int{}
		}
		byVersion[o.version][o.outputs]++
	}
	if first, last := outcomes[0].version, outcomes[len(outcomes)-1].version; first != "1" || last != "2" {
		t.Errorf("first task on version %q, last on %q; want 1 and 2", first, last)
	}
	if len(byVersion) != 2 || len(byVersion["1"]) != 1 || len(byVersion["2"]) != 1 {
		t.Fatalf("outputs by version: %v", byVersion)
	}
	var v1, v2 string
	for o := range byVersion["1"] {
		v1 = o
	}
	for o := range byVersion["2"] {
		v2 = o
	}
	if v1 == v2 {
		t.Errorf("versions 1 and 2 gave the same outputs %s", v1)
	}
	t.Logf("%d tasks: %d on version 1, %d on version 2", len(outcomes), sum(byVersion["1"]), sum(byVersion["2"]))
	waitFor(t, 30*time.Second, "version 1 unloaded", func() bool {
		idx := r.repo.Index(false)
		return len(idx) == 1 && idx[0].Version == "2" && idx[0].State == repository.StateReady
	})
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
