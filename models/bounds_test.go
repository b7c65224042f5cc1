package models

import (
	"strconv"
	"strings"
	"testing"
)

// boundCases are configs with a value past its upper bound, with what the
// error says (also FuzzParse's seeds).
var boundCases = func() []struct {
	name, yaml string
	want       []string // substrings of the error, each must appear
} {
	const huge = "9000000000000000000"
	model := func(fields string) string {
		return "models: [{name: a, path: a.onnx, " + fields + "}]"
	}
	return []struct {
		name, yaml string
		want       []string
	}{
		{"max_queue_size", model("batching: {max_queue_size: " + huge + "}"),
			[]string{`model "a": batching.max_queue_size:`, "at most " + strconv.Itoa(maxQueueSizeBound)}},
		{"max_batch_size", model("batching: {max_batch_size: 1099511627776}"),
			[]string{`model "a": batching.max_batch_size:`, "at most " + strconv.Itoa(maxBatchSizeBound)}},
		{"built-in queue bound", model("instances: 64, concurrency: 64, batching: {max_batch_size: 65536}"),
			[]string{`model "a": batching.max_queue_size:`, "4 x max_batch_size x instances x concurrency", strconv.Itoa(maxQueueSizeBound)}},
		{"built-in queue bound over a GPU list", model("device: [0, 1, 2, 3, 4, 5, 6, 7], instances: 8, batching: {max_batch_size: 8192}"),
			[]string{`model "a": batching.max_queue_size:`, "x GPUs", strconv.Itoa(maxQueueSizeBound)}},
		{"instances", model("instances: " + huge), []string{`model "a": instances:`, "at most " + strconv.Itoa(maxInstancesBound)}},
		{"concurrency", model("concurrency: 65"), []string{`model "a": concurrency:`, "at most " + strconv.Itoa(maxConcurrencyBound)}},
		{"intra_op_threads", model("intra_op_threads: 100000"), []string{`model "a": intra_op_threads:`, "at most " + strconv.Itoa(maxIntraOpThreadsBound)}},
		{"max_retries", model("retries: {max_retries: " + huge + "}"), []string{`model "a": retries.max_retries:`, "at most " + strconv.Itoa(maxRetriesBound)}},
		{"backoff_max", model("retries: {backoff_max: 13h}"), []string{`model "a": retries.backoff_max:`, "at most 12h0m0s", "43200"}},
		{"backoff_initial", model("retries: {backoff_initial: 13h, backoff_max: 13h}"), []string{`model "a": retries.backoff_initial:`, "at most 12h0m0s"}},
		{"max_queue_delay", model("batching: {max_queue_delay: 2562047h}"), []string{`model "a": batching.max_queue_delay:`, "at most 1m0s"}},
		{"default_queue_timeout", model("batching: {default_queue_timeout: 25h}"), []string{`model "a": batching.default_queue_timeout:`, "at most 24h0m0s"}},
		{"priority_aging", model("batching: {priority_aging: 2h}"), []string{`model "a": batching.priority_aging:`, "at most 1h0m0s"}},
		{"timeout", model("timeout: 2562047h"), []string{`model "a": timeout:`, "at most 168h0m0s"}},
		{"result.expiry", model("result: {expiry: 13h}"), []string{`model "a": result.expiry:`, "at most 12h0m0s", "43200"}},
		{"max_tensor_elements", model("limits: {max_tensor_elements: " + huge + "}"),
			[]string{`model "a": limits.max_tensor_elements:`, "at most " + strconv.Itoa(maxPayloadBytes)}},
		{"gpu index", model("device: [0, 100000]"), []string{`model "a": device: GPU index 100000`, "at most " + strconv.Itoa(maxGPUIndexBound)}},
		{"gpu_mem_limit", model("cuda: {gpu_mem_limit: 2TiB}"), []string{`model "a": cuda.gpu_mem_limit:`, "at most 1TiB"}},
		{"http.max_concurrent_requests", "http: {max_concurrent_requests: " + huge + "}\n" + minimal,
			[]string{"http.max_concurrent_requests:", "at most " + strconv.Itoa(maxConcurrentRequestsBound)}},
		{"grpc.max_concurrent_requests", "grpc: {max_concurrent_requests: " + huge + "}\n" + minimal,
			[]string{"grpc.max_concurrent_requests:", "at most " + strconv.Itoa(maxConcurrentRequestsBound)}},
		{"http.read_timeout", "http: {read_timeout: 25h}\n" + minimal, []string{"http.read_timeout:", "at most 24h0m0s"}},
		{"http.idle_timeout", "http: {idle_timeout: 2562047h}\n" + minimal, []string{"http.idle_timeout:", "at most 24h0m0s"}},
		{"spool_max_entries", "results: {spool_max_entries: " + huge + "}\n" + minimal,
			[]string{"results.spool_max_entries:", "at most " + strconv.Itoa(maxSpoolEntriesBound)}},
		{"spool_max_memory_bytes", "results: {spool_max_memory_bytes: " + huge + "}\n" + minimal,
			[]string{"results.spool_max_memory_bytes:", "at most " + strconv.FormatInt(maxSpoolMemoryBound, 10)}},
		{"spool_max_disk_bytes", "results: {spool_max_disk_bytes: " + huge + "}\n" + minimal,
			[]string{"results.spool_max_disk_bytes:", "at most " + strconv.FormatInt(maxSpoolDiskBound, 10)}},
		{"events_store_max_events", "broker: {events_store_max_events: " + huge + "}\n" + minimal,
			[]string{"broker.events_store_max_events:", "at most " + strconv.Itoa(maxEventsStoreEventsBound)}},
		{"events_store_max_bytes", "broker: {events_store_max_bytes: " + huge + "}\n" + minimal,
			[]string{"broker.events_store_max_bytes:", "at most " + strconv.FormatInt(maxEventsStoreBytesBound, 10)}},
		{"repository_poll", "model_repository: /m\nrepository_poll: 25h\n", []string{"repository_poll:", "at most 24h0m0s"}},
	}
}()

// Every numeric field has an upper bound beside its lower one: a value
// past it is refused when the config loads, with the model, the field and
// the bound named, instead of panicking in makechan or running out of
// memory in the warm-up once the model loads (issue 27, item 1).
func TestUpperBounds(t *testing.T) {
	for _, tc := range boundCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", tc.yaml)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// The bounds themselves are accepted: they are limits, not off by one.
func TestUpperBoundsInclusive(t *testing.T) {
	yaml := `
http: {max_concurrent_requests: ` + strconv.Itoa(maxConcurrentRequestsBound) + `, read_timeout: 24h}
results: {spool_max_entries: ` + strconv.Itoa(maxSpoolEntriesBound) + `}
models:
  - name: a
    path: a.onnx
    instances: 1
    concurrency: 1
    intra_op_threads: ` + strconv.Itoa(maxIntraOpThreadsBound) + `
    timeout: 168h
    batching: {max_batch_size: ` + strconv.Itoa(maxBatchSizeBound) + `, max_queue_size: ` + strconv.Itoa(maxQueueSizeBound) + `, max_queue_delay: 1m}
    retries: {max_retries: ` + strconv.Itoa(maxRetriesBound) + `, backoff_initial: 12h, backoff_max: 12h}
    result: {expiry: 12h}
    limits: {max_tensor_elements: ` + strconv.Itoa(maxPayloadBytes) + `}
    cuda: {gpu_mem_limit: 1TiB}
  - name: b
    path: b.onnx
    device: [` + strconv.Itoa(maxGPUIndexBound) + `]
    instances: ` + strconv.Itoa(maxInstancesBound) + `
    concurrency: 4
`
	if _, err := Parse([]byte(yaml)); err != nil {
		t.Fatalf("Parse refused values at their bounds: %v", err)
	}
}

// A repository model's version policy serves a bounded number of
// versions, each a positive integer.
func TestVersionPolicyBounds(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"version_policy: {latest: 65}", "version_policy.latest must be at most 64"},
		{"version_policy: {specific: [" + strings.Repeat("1, ", 64) + "1]}", "version_policy.specific lists 65 versions; at most 64"},
		{"version_policy: {specific: [0]}", "version_policy.specific: version 0"},
	} {
		if _, _, err := ParseModel([]byte(tc.yaml), "m", "m/1/model.onnx"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.yaml, err, tc.want)
		}
	}
	if _, pol, err := ParseModel([]byte("version_policy: {latest: 64}"), "m", "m/1/model.onnx"); err != nil || pol.Latest != 64 {
		t.Errorf("latest 64: %+v, %v", pol, err)
	}
}
