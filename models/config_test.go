package models

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const minimal = `
models:
  - name: mlp
    path: models/mlp.onnx
`

func TestParseDefaults(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if c.Broker.Address != DefaultBrokerAddress || c.HTTP.Listen != DefaultHTTPListen || c.Broker.ClientID != DefaultClientID {
		t.Errorf("top-level defaults not applied: %+v", c)
	}
	m := c.Models[0]
	want := NewModel("mlp")
	want.Path = "models/mlp.onnx"
	want.Queue = "inferq.mlp"
	want.DLQQueue = "inferq.mlp.dlq"
	want.UnprocessableQueue = "inferq.mlp.unprocessable"
	if got, exp := mustYAML(t, m), mustYAML(t, want); got != exp {
		t.Errorf("model defaults:\ngot  %s\nwant %s", got, exp)
	}
}

func TestParseExplicitZeroKept(t *testing.T) {
	c, err := Parse([]byte(`
models:
  - name: a
    path: a.onnx
    retries: {max_retries: 0, backoff_initial: 0, backoff_max: 0}
    batching: {max_batch_size: 4, max_queue_delay: 0}
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	r := c.Models[0].Retries
	if r.MaxRetries != 0 || r.BackoffInitial != 0 || r.BackoffMax != 0 {
		t.Errorf("explicit zeros replaced by defaults: %+v", r)
	}
	if b := c.Models[0].Batching; b.MaxBatchSize != 4 || b.MaxQueueDelay != 0 {
		t.Errorf("batching = %+v", b)
	}
}

func TestParseFull(t *testing.T) {
	c, err := Parse([]byte(`
broker:
  address: kubemq:50000
  client_id: node-1
  auth_token: secret
  tls: {cert: c.pem, key: k.pem, ca: ca.pem}
http: {listen: 0.0.0.0:9090}
data_dir: /var/lib/inferq
models:
  - name: resnet18
    path: /models/resnet18.onnx
    queue: vision
    device: [0, 1]
    instances: 2
    concurrency: 2
    batching: {max_batch_size: 16, max_queue_delay: 5ms, preferred_batch_sizes: [4, 8]}
    retries: {max_retries: 5, backoff_initial: 500ms, backoff_max: 1m}
    dlq_queue: vision-dlq
    unprocessable_queue: vision-bad
    result: {channel_prefix: "res-", expiry: 30m, max_result_bytes: 1048576}
    timeout: 10s
    intra_op_threads: 4
    limits: {max_body_bytes: 1000000, max_tensor_elements: 5000000}
  - name: mlp
    path: mlp.onnx
    queue: vision
    device: cpu
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	m := c.Model("resnet18")
	if m == nil {
		t.Fatal("resnet18 missing")
	}
	if m.Device.Kind != DeviceList || len(m.Device.GPUs) != 2 || m.Device.String() != "[0,1]" {
		t.Errorf("device = %+v", m.Device)
	}
	if m.Batching.MaxQueueDelay.D() != 5*time.Millisecond || m.Result.Expiry.D() != 30*time.Minute || m.Timeout.D() != 10*time.Second {
		t.Errorf("durations = %v %v %v", m.Batching.MaxQueueDelay, m.Result.Expiry, m.Timeout)
	}
	if m.DLQQueue != "vision-dlq" || c.Model("mlp").DLQQueue != "vision.dlq" {
		t.Errorf("dlq queues = %q %q", m.DLQQueue, c.Model("mlp").DLQQueue)
	}
	out, err := c.Masked().YAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "secret") || !strings.Contains(string(out), "*****") {
		t.Errorf("masked config shows the token:\n%s", out)
	}
	// What is printed parses back to the same config.
	back, err := Parse(mustYAMLConfig(t, *c))
	if err != nil {
		t.Fatalf("re-parse printed config: %v", err)
	}
	if mustYAML(t, back) != mustYAML(t, c) {
		t.Errorf("printed config does not round-trip")
	}
}

// validateErrorCases are configs Parse refuses, with what the error says
// (also FuzzParse's seeds).
var validateErrorCases = []struct {
	name string
	yaml string
	want []string // substrings of the error, each must appear
}{
	{"no models", `broker: {address: x:1}`, []string{"models: no model is configured"}},
	{"empty name", "models: [{path: a.onnx}]", []string{"model models[0]: name: is empty"}},
	{"missing path", "models: [{name: a}]", []string{`model "a": path: is empty`}},
	{"duplicate names", "models: [{name: a, path: a.onnx}, {name: a, path: b.onnx}]", []string{`model "a": name: is used by models[0] too`}},
	{"space in name", "models: [{name: 'a b', path: a.onnx}]", []string{`model "a b": name: must not contain whitespace`}},
	{"wildcard queue", "models: [{name: a, path: a.onnx, queue: 'q.*'}]", []string{`model "a": queue: "q.*" contains whitespace or a wildcard`}},
	{"routing in queue", "models: [{name: a, path: a.onnx, queue: 'q;queues:other'}]", []string{`model "a": queue: "q;queues:other" is not a channel name the broker keeps whole`}},
	{"trailing dot in dlq", "models: [{name: a, path: a.onnx, queue: q, dlq_queue: 'q.dlq.'}]", []string{`model "a": dlq_queue: "q.dlq." is not a channel name the broker keeps whole`}},
	{"control character in queue", "models: [{name: a, path: a.onnx, queue: \"q\\x01\"}]", []string{`model "a": queue: "q\x01" is not a channel name the broker keeps whole`}},
	{"dlq equals queue", "models: [{name: a, path: a.onnx, queue: q, dlq_queue: q}]", []string{`model "a": dlq_queue: the dead letter and unprocessable queues must differ`}},
	{"bad device word", "models: [{name: a, path: a.onnx, device: tpu}]", []string{`line 1: device: want auto, cpu, cuda or a list of GPU indexes`}},
	{"negative gpu", "models: [{name: a, path: a.onnx, device: [-1]}]", []string{`model "a": device: GPU index -1 is negative`}},
	{"duplicate gpu", "models: [{name: a, path: a.onnx, device: [1, 1]}]", []string{`model "a": device: GPU 1 is listed twice`}},
	{"empty gpu list", "models: [{name: a, path: a.onnx, device: []}]", []string{`model "a": device: the GPU list is empty`}},
	{"zero instances", "models: [{name: a, path: a.onnx, instances: 0}]", []string{`model "a": instances: must be at least 1, got 0`}},
	{"zero concurrency", "models: [{name: a, path: a.onnx, concurrency: 0}]", []string{`model "a": concurrency: must be at least 1`}},
	{"zero batch", "models: [{name: a, path: a.onnx, batching: {max_batch_size: 0}}]", []string{`model "a": batching.max_batch_size: must be at least 1`}},
	{"negative delay", "models: [{name: a, path: a.onnx, batching: {max_queue_delay: -1ms}}]", []string{`batching.max_queue_delay: must not be negative`}},
	{"preferred too big", "models: [{name: a, path: a.onnx, batching: {max_batch_size: 4, preferred_batch_sizes: [2, 8]}}]", []string{`batching.preferred_batch_sizes: 8 is outside 1..max_batch_size (4)`}},
	{"preferred unsorted", "models: [{name: a, path: a.onnx, batching: {preferred_batch_sizes: [8, 2]}}]", []string{`must be in ascending order`}},
	{"queue size below the batch", "models: [{name: a, path: a.onnx, batching: {max_batch_size: 8, max_queue_size: 4}}]", []string{`batching.max_queue_size: 4 is below max_batch_size (8)`}},
	{"negative queue size", "models: [{name: a, path: a.onnx, batching: {max_queue_size: -1}}]", []string{`batching.max_queue_size: must not be negative`}},
	{"negative queue timeout", "models: [{name: a, path: a.onnx, batching: {default_queue_timeout: -1s}}]", []string{`batching.default_queue_timeout: must not be negative`}},
	{"too many levels", "models: [{name: a, path: a.onnx, batching: {priority_levels: 17}}]", []string{`batching.priority_levels: must be within 0..16, got 17`}},
	{"default level beyond", "models: [{name: a, path: a.onnx, batching: {priority_levels: 2, default_priority_level: 3}}]", []string{`batching.default_priority_level: must be within 1..priority_levels (2)`}},
	{"negative aging", "models: [{name: a, path: a.onnx, batching: {priority_aging: -1s}}]", []string{`batching.priority_aging: must not be negative`}},
	{"negative retries", "models: [{name: a, path: a.onnx, retries: {max_retries: -1}}]", []string{`model "a": retries.max_retries: must not be negative`}},
	{"backoff max below initial", "models: [{name: a, path: a.onnx, retries: {backoff_initial: 10s, backoff_max: 1s}}]", []string{`retries.backoff_max: (1s) must be at least backoff_initial (10s)`}},
	{"bare number duration", "models: [{name: a, path: a.onnx, timeout: 5}]", []string{`line 1: not a duration`}},
	{"zero expiry", "models: [{name: a, path: a.onnx, result: {expiry: 0}}]", []string{`model "a": result.expiry: must be positive`}},
	{"body too big", "models: [{name: a, path: a.onnx, limits: {max_body_bytes: 200000000}}]", []string{`limits.max_body_bytes: must be within`}},
	// A body of the broker's whole gRPC limit could never be received
	// or sent again with its metadata and tags.
	{"body at the gRPC limit", "models: [{name: a, path: a.onnx, limits: {max_body_bytes: 104857600}}]", []string{`model "a": limits.max_body_bytes: must be within 1..102760448 (the broker's 100 MiB gRPC message limit`}},
	{"result at the gRPC limit", "models: [{name: a, path: a.onnx, result: {max_result_bytes: 104857600}}]", []string{`model "a": result.max_result_bytes: must be within `, `..102760448 (the broker's 100 MiB gRPC message limit`}},
	{"unknown top field", "modles: []", []string{"field modles not found"}},
	{"unknown model field", "models: [{name: a, path: a.onnx, batch_size: 3}]", []string{"field batch_size not found"}},
	{"unknown nested field", "models: [{name: a, path: a.onnx, batching: {max_batch: 3}}]", []string{"field max_batch not found"}},
	{"tls half set", "broker: {tls: {cert: c.pem}}\nmodels: [{name: a, path: a.onnx}]", []string{"broker.tls: cert and key must be set together"}},
	{"progress word", "models: [{name: a, path: a.onnx, progress: maybe}]", []string{`model "a": progress: want true or false`}},
	{"progress number", "models: [{name: a, path: a.onnx, progress: 0}]", []string{`model "a": progress: want true or false`}},
	{"progress list", "models: [{name: a, path: a.onnx, progress: [false]}]", []string{`line 1: want true or false`}},
	{"several errors at once", "models: [{name: a, instances: 0}]", []string{`model "a": path: is empty`, `model "a": instances: must be at least 1`}},
}

func TestValidateErrors(t *testing.T) {
	tests := validateErrorCases
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", tt.yaml)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestValidateFieldErrorType(t *testing.T) {
	_, err := Parse([]byte("models: [{name: a}]"))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Model != `"a"` || fe.Field != "path" {
		t.Fatalf("want a *FieldError for a.path, got %#v", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(p, []byte(minimal), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "read config") {
		t.Fatalf("Load of a missing file: %v", err)
	}
	if err := os.WriteFile(p, []byte("models: [{name: a}]"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("Load error should name the file: %v", err)
	}
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	switch x := v.(type) {
	case *Config:
		return string(mustYAMLConfig(t, *x))
	case Model:
		return string(mustYAMLConfig(t, Config{Models: []Model{x}}))
	}
	t.Fatalf("mustYAML: %T", v)
	return ""
}

func mustYAMLConfig(t *testing.T, c Config) []byte {
	t.Helper()
	out, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The result spool is on disk unless the config says memory: data_dir then
// takes a default; memory keeps what data_dir says (none: the journal is in
// memory too); anything else is an error.
func TestResultsSpool(t *testing.T) {
	const model = "models: [{name: m, path: m.onnx}]\n"
	for _, tt := range []struct {
		name, yaml string
		spool      SpoolMode
		dir        string
		err        string
	}{
		{name: "default", spool: SpoolDisk, dir: DefaultDataDir},
		{name: "disk, dir", yaml: "data_dir: /d\nresults: {spool: disk}\n", spool: SpoolDisk, dir: "/d"},
		{name: "memory", yaml: "results: {spool: memory}\n", spool: SpoolMemory},
		{name: "memory, dir for the journal", yaml: "data_dir: /d\nresults: {spool: memory}\n", spool: SpoolMemory, dir: "/d"},
		{name: "unknown", yaml: "results: {spool: tape}\n", err: `line 1: results.spool: want disk or memory`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml + model))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Parse = %v, want an error with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Results.Spool != tt.spool || c.DataDir != tt.dir {
				t.Errorf("spool %q data_dir %q, want %q %q", c.Results.Spool, c.DataDir, tt.spool, tt.dir)
			}
		})
	}
}
