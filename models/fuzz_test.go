package models

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fuzzSeeds are the configs of the table tests, the shipped configs and a
// few odd documents.
func fuzzSeeds(f *testing.F) {
	for _, s := range []string{
		minimal,
		"models: [{name: a, path: a.onnx, device: [0, 1], batching: {max_queue_delay: 5ms}}]",
		"models: [{name: a, path: a.onnx, device: cuda, retries: {max_retries: 0}}]",
		"models: {name: a}",
		"models: [{device: {a: 1}}]",
		"&a [*a]",
		"version_policy: {latest: 2}\nbatching: {max_batch_size: 8}\n",
	} {
		f.Add([]byte(s))
	}
	for _, tc := range validateErrorCases {
		f.Add([]byte(tc.yaml))
	}
	for _, tc := range boundCases {
		f.Add([]byte(tc.yaml))
	}
	paths, _ := filepath.Glob("../configs/*.yaml")
	for _, p := range paths {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
}

// FuzzParse: any input either is refused or gives a config within every
// bound (checked here field by field, not by Validate), which prints as
// YAML that parses again; nothing panics.
func FuzzParse(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		checkConfigBounds(t, c)
		out, err := c.YAML()
		if err != nil {
			t.Fatalf("render accepted config: %v", err)
		}
		if _, err := Parse(out); err != nil {
			t.Fatalf("printed config does not parse: %v\n%s", err, out)
		}
	})
}

// FuzzParseModel is FuzzParse for a repository model's config.yaml.
func FuzzParseModel(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, pol, err := ParseModel(data, "m", "m/1/model.onnx")
		if err != nil {
			return
		}
		checkModelBounds(t, &m)
		if pol.Latest < 0 || pol.Latest > 64 || len(pol.Specific) > 64 {
			t.Fatalf("accepted version_policy %+v", pol)
		}
	})
}

func checkConfigBounds(t *testing.T, c *Config) {
	t.Helper()
	for _, d := range []Duration{c.HTTP.ReadHeaderTimeout, c.HTTP.ReadTimeout, c.HTTP.WriteTimeout, c.HTTP.IdleTimeout} {
		inDur(t, "http timeout", d, 0, 24*time.Hour)
	}
	inInt(t, "http.max_concurrent_requests", int64(c.HTTP.MaxConcurrentRequests), 0, 4096)
	inInt(t, "grpc.max_concurrent_requests", int64(c.GRPC.MaxConcurrentRequests), 0, 4096)
	inInt(t, "results.spool_max_entries", int64(c.Results.SpoolMaxEntries), 1, 1<<24)
	inInt(t, "results.spool_max_memory_bytes", c.Results.SpoolMaxMemoryBytes, 1, 1<<40)
	inInt(t, "results.spool_max_disk_bytes", c.Results.SpoolMaxDiskBytes, 1, 1<<50)
	inInt(t, "broker.events_store_max_events", int64(c.Broker.EventsStoreMaxEvents), -1<<63, 1<<24)
	inInt(t, "broker.events_store_max_bytes", c.Broker.EventsStoreMaxBytes, -1<<63, 1<<40)
	inDur(t, "repository_poll", c.RepositoryPoll, 1, 24*time.Hour)
	if n := c.MaxMessageBytes(); n > maxMessageBytes {
		t.Fatalf("send limit %d over the broker's %d", n, maxMessageBytes)
	}
	for i := range c.Models {
		checkModelBounds(t, &c.Models[i])
	}
}

func checkModelBounds(t *testing.T, m *Model) {
	t.Helper()
	inInt(t, "instances", int64(m.Instances), 1, 64)
	inInt(t, "concurrency", int64(m.Concurrency), 1, 64)
	inInt(t, "intra_op_threads", int64(m.IntraOpThreads), 0, 1024)
	b := m.Batching
	inInt(t, "batching.max_batch_size", int64(b.MaxBatchSize), 1, 1<<16)
	inInt(t, "batching.max_queue_size", int64(b.MaxQueueSize), 0, 1<<20)
	queue := int64(b.MaxQueueSize)
	if queue == 0 { // the batcher's own bound, as runtime.BatcherConfig sets it
		queue = 4 * int64(b.MaxBatchSize) * int64(m.Instances) * int64(m.Concurrency) * int64(max(len(m.Device.GPUs), 1))
	}
	inInt(t, "the batcher's queue", queue, 1, 1<<20)
	for _, s := range b.PreferredBatchSizes {
		inInt(t, "batching.preferred_batch_sizes", int64(s), 1, int64(b.MaxBatchSize))
	}
	inInt(t, "batching.priority_levels", int64(b.PriorityLevels), 0, 16)
	inDur(t, "batching.max_queue_delay", b.MaxQueueDelay, 0, time.Minute)
	inDur(t, "batching.default_queue_timeout", b.DefaultQueueTimeout, 0, 24*time.Hour)
	inDur(t, "batching.priority_aging", b.PriorityAging, 0, time.Hour)
	inInt(t, "retries.max_retries", int64(m.Retries.MaxRetries), 0, 1000)
	inDur(t, "retries.backoff_initial", m.Retries.BackoffInitial, 0, 12*time.Hour)
	inDur(t, "retries.backoff_max", m.Retries.BackoffMax, 0, 12*time.Hour)
	inDur(t, "result.expiry", m.Result.Expiry, 1, 12*time.Hour)
	inInt(t, "result.max_result_bytes", int64(m.Result.MaxResultBytes), int64(MinResultBytes), maxPayloadBytes)
	inDur(t, "timeout", m.Timeout, 0, 7*24*time.Hour)
	inInt(t, "limits.max_body_bytes", int64(m.Limits.MaxBodyBytes), int64(MinResultBytes), maxPayloadBytes)
	inInt(t, "limits.max_tensor_elements", m.Limits.MaxTensorElements, int64(MinResultBytes), maxPayloadBytes)
	inInt(t, "cuda.gpu_mem_limit", int64(m.CUDA.GPUMemLimit), 0, 1<<40)
	for _, g := range m.Device.GPUs {
		inInt(t, "device", int64(g), 0, 255)
	}
}

func inInt(t *testing.T, field string, v, lo, hi int64) {
	t.Helper()
	if v < lo || v > hi {
		t.Fatalf("accepted %s %d, outside %d..%d", field, v, lo, hi)
	}
}

func inDur(t *testing.T, field string, v Duration, lo, hi time.Duration) {
	t.Helper()
	if v.D() < lo || v.D() > hi {
		t.Fatalf("accepted %s %s, outside %s..%s", field, v, lo, hi)
	}
}
