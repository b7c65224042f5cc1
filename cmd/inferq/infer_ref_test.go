package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/inferq/inferq/client/clienttest"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/tensor"
	"github.com/inferq/inferq/worker"
)

// startRefServer runs a consumer of inferq.echo (x FP32 [-1,256], echoed
// as y) on the broker at addr whose results over 1 KiB go by reference: the
// broker gets a record with result_ref and no result, and the whole record
// stays at /v1/tasks/<id> on its HTTP listener (behind token when set).
// result_ref is absolute when advertise, else relative. It returns the
// listener's base URL.
func startRefServer(t *testing.T, addr, token string, advertise bool) string {
	t.Helper()
	httpAddr := freeAddr(t)
	base := "http://" + httpAddr
	c := models.Config{Models: []models.Model{models.NewModel("echo")}}
	c.Models[0].Path = "unused.onnx"
	c.SetDefaults()
	c.Models[0].Result.MaxResultBytes = 1024
	cc := consumer.Config{Writers: 2, IntakeWorkers: 1}
	if advertise {
		cc.AdvertiseURL = base
	}
	echo := clienttest.Echo(tensor.FP32, 256)
	w, err := worker.New(context.Background(), worker.Config{
		Broker:   mq.Config{Address: addr, ClientID: "inferq-ref-test"},
		Models:   []consumer.Model{{Config: c.Models[0], Info: echo.Info, Batcher: modelBatcher{echo}}},
		Consumer: cc,
		Results:  models.Results{Spool: models.SpoolMemory},
		HTTP:     models.HTTP{Listen: httpAddr, AuthToken: token},
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
	return base
}

// A result over max_result_bytes reaches the producer as a record with
// result_ref and no result: infer reads the whole record from the replica
// (with the HTTP token) and prints the outputs; where it cannot, it says
// that the result is stored by reference, where, and why it could not be
// read, and a summary counts such tasks failed.
func TestInferResultByReference(t *testing.T) {
	args := []string{"echo", "--random", "--shape", "x:FP32:1,256", "--timeout", "20s"}
	const wantOut = "y  FP32  [1,256]  ["
	t.Run("absolute", func(t *testing.T) {
		srv := inferBroker(t)
		startRefServer(t, srv.Addr, "", true)
		code, out, errs := runInferCmd(t, nil, slices.Concat(args, []string{"--broker", srv.Addr})...)
		if code != 0 || !strings.Contains(out, "SUCCESS") || !strings.Contains(out, wantOut) {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
		}
		code, out, errs = runInferCmd(t, nil, slices.Concat(args, []string{"--broker", srv.Addr, "-n", "3"})...)
		if code != 0 || !strings.Contains(out, "3 ok, 0 failed") || !strings.Contains(out, "3 results stored by reference, 3 read") {
			t.Fatalf("-n 3: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
		}
	})
	t.Run("relative with a token", func(t *testing.T) {
		const token = "s3cret"
		srv := inferBroker(t)
		base := startRefServer(t, srv.Addr, token, false)
		with := slices.Concat(args, []string{"--broker", srv.Addr})
		for _, tt := range []struct {
			name string
			env  map[string]string
			args []string
			code int
			out  []string
			err  []string
		}{
			{"no base URL", nil, nil, 1, nil, []string{"stored by reference at /v1/tasks/", "--http URL"}},
			{"no token", nil, []string{"--http", base}, 1, nil, []string{"stored by reference at " + base + "/v1/tasks/", "401", "--http-token"}},
			{"token from the environment", map[string]string{"INFERQ_HTTP_AUTH_TOKEN": token}, []string{"--http", base}, 0, []string{"SUCCESS", wantOut}, nil},
			{"token flag, JSON", nil, []string{"--http", base + "/", "--http-token", token, "--json"}, 0, []string{`"status": "SUCCESS"`, `"name": "y"`}, nil},
			{"summary", nil, []string{"--http", base, "--http-token", token, "-n", "3"}, 0, []string{"3 ok, 0 failed", "3 results stored by reference, 3 read"}, nil},
			{"summary, unreadable", nil, []string{"-n", "2"}, 1, []string{"0 ok, 2 failed", "2 results stored by reference, 0 read"}, []string{"2 of 2 tasks failed", "stored by reference at /v1/tasks/"}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				code, out, errs := runInferCmd(t, tt.env, slices.Concat(with, tt.args)...)
				t.Logf("exit %d\n%s%s", code, out, errs)
				bad := code != tt.code
				for _, w := range tt.out {
					bad = bad || !strings.Contains(out, w)
				}
				for _, w := range tt.err {
					bad = bad || !strings.Contains(errs, w)
				}
				if bad {
					t.Errorf("exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", code, tt.code, out, errs)
				}
				if strings.Contains(tt.name, "JSON") && code == 0 {
					var rec struct {
						Result struct{ Outputs []struct{ Data []float64 } }
					}
					if err := json.Unmarshal([]byte(out), &rec); err != nil || len(rec.Result.Outputs) != 1 || len(rec.Result.Outputs[0].Data) != 256 {
						t.Errorf("JSON output %v:\n%s", err, out)
					}
				}
			})
		}
	})
}
