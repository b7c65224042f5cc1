package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/client/clienttest"
	"github.com/inferq/inferq/client/infer"
	"github.com/inferq/inferq/tensor"
)

func inferBroker(t *testing.T) *brokertest.Server {
	return brokertest.NewServer(t, broker.Options{PollWaitFloor: 20 * time.Millisecond, SecondLength: 20 * time.Millisecond})
}

// runInferCmd runs `inferq infer args...` and returns the exit code and
// the output streams.
func runInferCmd(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	a, out, errb := testApp(env)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := a.main(ctx, append([]string{"infer"}, args...))
	return code, out.String(), errb.String()
}

func TestInferOneTask(t *testing.T) {
	srv := inferBroker(t)
	clienttest.StartWorker(t, clienttest.Config{Address: srv.Addr, Model: clienttest.MLP()})
	// The address from the environment, as serve reads it.
	code, out, errs := runInferCmd(t, map[string]string{"KUBEMQ_ADDRESS": srv.Addr}, "mlp", "--random", "--timeout", "20s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	t.Logf("output:\n%s", out)
	if !strings.Contains(out, "SUCCESS") || !strings.Contains(out, "probs  FP32  [1,4]  [0.1 0.2 0.3 0.4]") {
		t.Errorf("output:\n%s", out)
	}
}

func TestInferInputFileJSON(t *testing.T) {
	srv := inferBroker(t)
	clienttest.StartWorker(t, clienttest.Config{Address: srv.Addr, Model: clienttest.Echo(tensor.INT64, 3)})
	file := filepath.Join(t.TempDir(), "in.json")
	if err := os.WriteFile(file, []byte(`{"inputs":[{"name":"x","shape":[2,3],"datatype":"INT64","data":[[1,2,3],[4,5,6]]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runInferCmd(t, nil, "echo", "--input", file, "--binary", "--json", "--broker", srv.Addr, "--identity", "tester")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got struct {
		TaskID string `json:"task_id"`
		Status string `json:"status"`
		Result struct {
			Outputs []struct {
				Name  string  `json:"name"`
				Shape []int   `json:"shape"`
				Data  []int64 `json:"data"`
			} `json:"outputs"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if got.Status != "SUCCESS" || len(got.Result.Outputs) != 1 || got.Result.Outputs[0].Name != "y" ||
		len(got.Result.Outputs[0].Data) != 6 || got.Result.Outputs[0].Data[5] != 6 {
		t.Errorf("output:\n%s", out)
	}
	if n := len(srv.Broker.QueueSnapshot("inferq.echo").Waiting); n != 0 {
		t.Errorf("%d tasks left", n)
	}
}

func TestInferManySummary(t *testing.T) {
	srv := inferBroker(t)
	clienttest.StartWorker(t, clienttest.Config{Address: srv.Addr, Model: clienttest.MLP(), Queue: "q.mlp"})
	code, out, errs := runInferCmd(t, map[string]string{"INFERQ_BROKER_ADDRESS": srv.Addr},
		"mlp", "--random", "--n", "300", "--binary", "--queue", "q.mlp", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var sum map[string]any
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if sum["count"] != 300.0 || sum["ok"] != 300.0 || sum["failed"] != 0.0 || sum["tasks_per_second"].(float64) <= 0 ||
		sum["latency_p99_ms"].(float64) < sum["latency_p50_ms"].(float64) {
		t.Errorf("summary %v", sum)
	}
	// Failed tasks are counted and make the exit code 1.
	code, out, errs = runInferCmd(t, map[string]string{"INFERQ_BROKER_ADDRESS": srv.Addr},
		"mlp", "--random", "--shape", "1,16", "--dtype", "FP64", "--n", "3", "--queue", "q.mlp")
	t.Logf("output:\n%s%s", out, errs)
	if code != 1 || !strings.Contains(out, "0 ok, 3 failed") || !strings.Contains(errs, "3 of 3 tasks failed") {
		t.Errorf("wrong dtype: exit %d\n%s\n%s", code, out, errs)
	}
}

func TestInferErrors(t *testing.T) {
	srv := inferBroker(t)
	addr := srv.Addr // no worker: nothing answers
	dead := inferBroker(t)
	deadAddr := dead.Addr
	dead.Close()
	tests := []struct {
		name string
		args []string
		code int
		out  string
		err  string
	}{
		{"help", []string{"--help"}, 0, "--random", ""},
		{"no model", []string{"--random"}, 2, "", "exactly one MODEL"},
		{"no inputs", []string{"mlp"}, 2, "", "--input FILE or --random"},
		{"both inputs", []string{"mlp", "--random", "--input", "x.json"}, 2, "", "--input FILE or --random"},
		{"unknown signature", []string{"bert", "--random"}, 2, "", `no built-in signature for model "bert"`},
		{"bad shape", []string{"mlp", "--random", "--shape", "x:FP99:1,16"}, 2, "", `datatype "FP99"`},
		{"missing file", []string{"mlp", "--input", "/nonexistent.json"}, 2, "", "nonexistent.json"},
		{"bad http URL", []string{"mlp", "--random", "--http", "localhost:8080", "--broker", addr}, 2, "", `"localhost:8080" is not an absolute http:// or https:// URL`},
		{"broker unreachable", []string{"mlp", "--random", "--broker", deadAddr, "--timeout", "1s"}, 1, "", "broker at " + deadAddr + " unreachable"},
		{"no worker", []string{"mlp", "--random", "--n", "2", "--broker", addr, "--timeout", "2s"}, 1, "", "2 of 2 results missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runInferCmd(t, nil, tt.args...)
			t.Logf("exit %d\n%s%s", code, out, errs)
			if code != tt.code || !strings.Contains(out, tt.out) || !strings.Contains(errs, tt.err) {
				t.Errorf("exit %d (want %d)\nstdout: %s\nstderr: %s", code, tt.code, out, errs)
			}
		})
	}
}

// TestInferRidesThroughBrokerRestart: the broker goes away for 1.5 s while
// `infer -n` is sending; the run waits for it and finishes with every
// result. The worker starts after the restart, so no queue poll is live
// while the broker is away.
func TestInferRidesThroughBrokerRestart(t *testing.T) {
	skipSDKRace(t)
	srv := inferBroker(t)
	const n = 20000
	type result struct {
		code      int
		out, errs string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errs := runInferCmd(t, map[string]string{"INFERQ_BROKER_ADDRESS": srv.Addr},
			"mlp", "--random", "--n", strconv.Itoa(n), "--json", "--timeout", "50s")
		done <- result{code, out, errs}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for len(srv.Broker.QueueSnapshot("inferq.mlp").Waiting) < infer.Batch {
		if time.Now().After(deadline) {
			t.Fatal("infer sent nothing in 20 s")
		}
		time.Sleep(time.Millisecond)
	}
	srv.Stop()
	if sent := len(srv.Broker.QueueSnapshot("inferq.mlp").Waiting); sent >= n {
		t.Fatalf("all %d tasks sent before the broker stopped: the test did not test", sent)
	} else {
		t.Logf("broker stopped after %d tasks", sent)
	}
	time.Sleep(1500 * time.Millisecond)
	srv.Restart()
	clienttest.StartWorker(t, clienttest.Config{Address: srv.Addr, Model: clienttest.MLP()})
	r := <-done
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errs)
	}
	var sum map[string]any
	if err := json.Unmarshal([]byte(r.out), &sum); err != nil {
		t.Fatalf("%v:\n%s", err, r.out)
	}
	if sum["count"] != float64(n) || sum["ok"] != float64(n) {
		t.Errorf("summary %v", sum)
	}
}
