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
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// binaryRig runs the real inferq binary against an embedded broker, as a
// supervisor would: build it, write a config serving mlp on queue, send
// tasks, start and restart `inferq serve`, and collect the result records
// from a reply channel.
type binaryRig struct {
	t       *testing.T
	dir     string
	bin     string
	cfgPath string
	lib     string
	queue   string
	reply   string
	addr    string             // the broker's address
	srv     *brokertest.Server // the embedded broker; nil with KUBEMQ_ADDRESS
	prod    *mq.Conn

	mu      sync.Mutex
	records map[string]*task.Record // the first record per task
	dupes   int
}

// newBinaryRig builds inferq (with build tags) and writes a config whose
// mlp model has the given YAML lines (batching, retries...) added. With
// KUBEMQ_ADDRESS (and KUBEMQ_AUTH_TOKEN) set, the rig and the binary (which
// reads the same variables) use that broker, on channels named for this
// run; else an embedded broker.
func newBinaryRig(t *testing.T, name string, tags []string, modelYAML string) *binaryRig {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	r := &binaryRig{t: t, dir: t.TempDir(), lib: ortEnv(t)["INFERQ_ORT_LIB"], queue: name + ".mlp", reply: name + ".replies",
		records: map[string]*task.Record{}}
	r.bin = filepath.Join(r.dir, "inferq")
	args := []string{"build", "-o", r.bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if _, err := examples.Write(r.dir, false); err != nil {
		t.Fatal(err)
	}
	token := ""
	if r.addr = os.Getenv("KUBEMQ_ADDRESS"); r.addr != "" {
		token = os.Getenv("KUBEMQ_AUTH_TOKEN")
		run := fmt.Sprintf("%s-%d", name, time.Now().UnixNano()%1e9)
		r.queue, r.reply = run+".mlp", run+".replies"
	} else {
		r.srv = brokertest.NewServer(t, broker.Options{})
		r.addr = r.srv.Addr
	}
	cfg := fmt.Sprintf(`broker: {address: %q, client_id: %s-test}
http: {listen: "127.0.0.1:0"}
grpc: {listen: ""}
data_dir: %q
models:
  - name: mlp
    path: %q
    queue: %s
    device: cpu
%s`, r.addr, name, filepath.Join(r.dir, "data"), filepath.Join(r.dir, "mlp.onnx"), r.queue, modelYAML)
	r.cfgPath = filepath.Join(r.dir, "config.yaml")
	if err := os.WriteFile(r.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var err error
	if r.prod, err = mq.Dial(ctx, mq.Config{Address: r.addr, AuthToken: token, ClientID: name + "-producer"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.prod.Close() })
	events, err := r.prod.SubscribeEventsStore(ctx, r.reply, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for e := range events {
			if rec, err := task.ParseRecord(e.Body); err == nil {
				r.mu.Lock()
				if r.records[rec.TaskID] != nil {
					r.dupes++
				} else {
					r.records[rec.TaskID] = rec
				}
				r.mu.Unlock()
			}
		}
	}()
	return r
}

// send enqueues one mlp task per id, x[0] taken from x0 of the same index.
func (r *binaryRig) send(ids []string, x0 []float32) {
	r.t.Helper()
	msgs := make([]mq.OutMessage, len(ids))
	for i, id := range ids {
		x := make([]float32, 16)
		x[0] = x0[i]
		body, tags, err := task.NewTask(id, "mlp", []tensor.Tensor{tensor.NewTensor("x", []int64{1, 16}, x)}, task.WithReplyTo(r.reply))
		if err != nil {
			r.t.Fatal(err)
		}
		msgs[i] = mq.OutMessage{Channel: r.queue, Body: body, Tags: tags}
	}
	if err := r.prod.Sender().Send(context.Background(), msgs...); err != nil {
		r.t.Fatal(err)
	}
}

// serve starts `inferq serve` with extra environment; done receives its
// exit.
func (r *binaryRig) serve(env ...string) (cmd *exec.Cmd, logs *strings.Builder, done chan error) {
	r.t.Helper()
	cmd = exec.Command(r.bin, "serve", "--config", r.cfgPath, "--shutdown-grace", "10s", "--log-level", "warn")
	cmd.Env = append(append(os.Environ(), "INFERQ_ORT_LIB="+r.lib), env...)
	logs = &strings.Builder{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	done = make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return cmd, logs, done
}

// peek returns up to 10 messages waiting on channel, on either broker.
func (r *binaryRig) peek(channel string) []*mq.Message {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs, err := r.prod.Peek(ctx, channel, 10, time.Second)
	if err != nil {
		r.t.Fatalf("peek %s: %v", channel, err)
	}
	return msgs
}

// count is the number of tasks with a record.
func (r *binaryRig) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.records)
}

// record returns the first record of id, or nil.
func (r *binaryRig) record(id string) *task.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.records[id]
}
