package models

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/inferq/inferq/task"
)

// Upper bounds of the numeric fields: what one process can afford, so that
// no value in a config (a repository's config.yaml included) panics or
// runs the process out of memory when the model loads. Each error names
// the field and the bound.
const (
	// maxQueueSizeBound bounds batching.max_queue_size and the batcher's
	// built-in bound: the batcher allocates its queue when the model
	// loads, 16 bytes a request (16 MiB at the bound).
	maxQueueSizeBound = 1 << 20
	// maxBatchSizeBound bounds batching.max_batch_size: the warm-up runs
	// a batch this many rows high on every session.
	maxBatchSizeBound = 1 << 16
	// maxInstancesBound bounds instances (sessions per device, each with
	// the model's weights), maxConcurrencyBound concurrency (runs in
	// flight per session), maxIntraOpThreadsBound intra_op_threads.
	maxInstancesBound      = 64
	maxConcurrencyBound    = 64
	maxIntraOpThreadsBound = 1024
	// maxGPUIndexBound bounds a GPU index of a device list.
	maxGPUIndexBound = 255
	// maxRetriesBound bounds retries.max_retries.
	maxRetriesBound = 1000
	// maxBrokerSeconds bounds a retry's delay (retries.backoff_*) and a
	// result's expiration (result.expiry): KubeMQ refuses a message whose
	// DelaySeconds or ExpirationSeconds is over 43200.
	maxBrokerSeconds = Duration(43200 * time.Second)
	// Bounds of the other durations: a wait past them is a mistake (and
	// a deadline that far off overflows).
	maxQueueDelayBound     = Duration(time.Minute)
	maxQueueTimeoutBound   = Duration(24 * time.Hour)
	maxPriorityAgingBound  = Duration(time.Hour)
	maxTaskTimeoutBound    = Duration(7 * 24 * time.Hour)
	maxHTTPTimeoutBound    = Duration(24 * time.Hour)
	maxRepositoryPollBound = Duration(24 * time.Hour)
	// maxConcurrentRequestsBound bounds http and grpc
	// max_concurrent_requests: each request in progress may hold a body.
	maxConcurrentRequestsBound = 4096
	// maxGPUMemBound bounds cuda.gpu_mem_limit (placement adds it up over
	// a GPU's instances).
	maxGPUMemBound = ByteSize(1 << 40)
	// Bounds of the result spool's and the embedded broker's limits.
	maxSpoolEntriesBound      = 1 << 24
	maxSpoolMemoryBound       = int64(1 << 40)
	maxSpoolDiskBound         = int64(1 << 50)
	maxEventsStoreEventsBound = 1 << 24
	maxEventsStoreBytesBound  = int64(1 << 40)
)

const (
	queueSizeWhy     = "the batcher allocates its queue up front"
	brokerSecondsWhy = "43200 s, the broker's longest"
)

// Bounds of what a reference record carries besides its task id
// (task.MaxNameBytes): the host name, the record's worker (Linux's
// HOST_NAME_MAX), and http.advertise_url, its result_ref's prefix.
const (
	maxHostNameBytes     = 64
	maxAdvertiseURLBytes = 512
)

// MinResultBytes is the least result.max_result_bytes that works: the
// size of the largest reference record (task.Record.Reference), which the
// broker gets instead of a record over the limit, for the longest task id,
// host name and advertise_url and the most attempts. Below it a task
// whose result is large succeeds and its record cannot be sent at all.
var MinResultBytes = referenceBytes()

func referenceBytes() int {
	id := strings.Repeat("i", task.MaxNameBytes)
	at := time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	rec := &task.Record{TaskID: id, Status: task.StatusSuccess, CreatedAt: at, CompletedAt: at,
		Attempts: -1 << 63, Worker: strings.Repeat("h", maxHostNameBytes)}
	base := "https://" + strings.Repeat("a", maxAdvertiseURLBytes-len("https://"))
	body, _ := rec.Reference(task.ResultRef(base, id)).Encode()
	return len(body)
}

// atMost reports v over hi through bad as "must be at most hi (why), got v".
func atMost(bad func(field, format string, args ...any), field string, v, hi int64, why string) {
	if v > hi {
		if why != "" {
			why = " (" + why + ")"
		}
		bad(field, "must be at most %d%s, got %d", hi, why, v)
	}
}

// durAtMost is atMost for durations.
func durAtMost(bad func(field, format string, args ...any), field string, v, hi Duration, why string) {
	if v > hi {
		if why != "" {
			why = " (" + why + ")"
		}
		bad(field, "must be at most %s%s, got %s", hi, why, v)
	}
}

// FieldError is a configuration error that names the model (empty for
// top-level fields) and the field at fault.
type FieldError struct {
	Model string // model name, or "models[i]" when the name is missing
	Field string // YAML path below the model, e.g. batching.max_batch_size
	Msg   string
}

// Error formats the error as `model "mlp": batching.max_batch_size: must be at least 1`.
func (e *FieldError) Error() string {
	if e.Model == "" {
		return e.Field + ": " + e.Msg
	}
	return fmt.Sprintf("model %s: %s: %s", e.Model, e.Field, e.Msg)
}

// Validate checks c and returns every problem found, joined; each is a
// *FieldError.
func (c *Config) Validate() error {
	var errs []error
	top := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if c.Broker.Address == "" {
		top("broker.address", "is empty")
	}
	if (c.Broker.TLS.Cert == "") != (c.Broker.TLS.Key == "") {
		top("broker.tls", "cert and key must be set together")
	}
	if c.HTTP.Listen == "" {
		top("http.listen", "is empty")
	}
	c.HTTP.validate(top)
	c.GRPC.validate(top)
	for _, b := range []struct {
		field string
		v     int64
		hi    int64
	}{{"results.spool_max_entries", int64(c.Results.SpoolMaxEntries), maxSpoolEntriesBound},
		{"results.spool_max_memory_bytes", c.Results.SpoolMaxMemoryBytes, maxSpoolMemoryBound},
		{"results.spool_max_disk_bytes", c.Results.SpoolMaxDiskBytes, maxSpoolDiskBound}} {
		if b.v < 0 {
			top(b.field, "must be positive (0: the default), got %d", b.v)
		}
		atMost(top, b.field, b.v, b.hi, "")
	}
	// Negative is "no bound" for the embedded broker's events store.
	atMost(top, "broker.events_store_max_events", int64(c.Broker.EventsStoreMaxEvents), maxEventsStoreEventsBound, "")
	atMost(top, "broker.events_store_max_bytes", c.Broker.EventsStoreMaxBytes, maxEventsStoreBytesBound, "")
	if len(c.Models) == 0 && c.ModelRepository == "" {
		top("models", "no model is configured (and no model_repository)")
	}
	c.Repository.validate(top)
	seen := map[string]int{}
	for i := range c.Models {
		m := &c.Models[i]
		id := fmt.Sprintf("%q", m.Name)
		if m.Name == "" {
			id = fmt.Sprintf("models[%d]", i)
		}
		bad := func(field, format string, args ...any) {
			errs = append(errs, &FieldError{Model: id, Field: field, Msg: fmt.Sprintf(format, args...)})
		}
		if m.Name != "" {
			if j, dup := seen[m.Name]; dup {
				bad("name", "is used by models[%d] too; model names must be unique", j)
			}
			seen[m.Name] = i
		}
		m.validate(bad)
	}
	return errors.Join(errs...)
}

// payloadWhy explains maxPayloadBytes in errors.
const payloadWhy = "the broker's 100 MiB gRPC message limit less 2 MiB for metadata, tags and framing"

func (m *Model) validate(bad func(field, format string, args ...any)) {
	switch {
	case m.Name == "":
		bad("name", "is empty")
	case len(m.Name) > maxNameLen:
		bad("name", "is longer than %d characters", maxNameLen)
	default:
		for _, r := range m.Name {
			if unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '*' || r == '>' {
				bad("name", "must not contain whitespace, control characters or wildcards (* or >)")
				break
			}
		}
	}
	if m.Path == "" {
		bad("path", "is empty: set the ONNX file to serve")
	}
	if !m.Progress.Valid() {
		bad("progress", "want true or false")
	}
	for _, q := range []struct{ field, name string }{
		{"queue", m.Queue}, {"dlq_queue", m.DLQQueue}, {"unprocessable_queue", m.UnprocessableQueue},
	} {
		if why := checkChannel(q.name); why != "" {
			bad(q.field, "%s", why)
		}
	}
	if m.Queue != "" && (m.DLQQueue == m.Queue || m.UnprocessableQueue == m.Queue) {
		bad("dlq_queue", "the dead letter and unprocessable queues must differ from the task queue %q", m.Queue)
	}
	switch m.Device.Kind {
	case DeviceAuto, DeviceCPU, DeviceCUDA:
	case DeviceList:
		if len(m.Device.GPUs) == 0 {
			bad("device", "the GPU list is empty")
		}
		dup := map[int]bool{}
		for _, g := range m.Device.GPUs {
			if g < 0 {
				bad("device", "GPU index %d is negative", g)
			}
			if g > maxGPUIndexBound {
				bad("device", "GPU index %d: must be at most %d", g, maxGPUIndexBound)
			}
			if dup[g] {
				bad("device", "GPU %d is listed twice", g)
			}
			dup[g] = true
		}
	default:
		bad("device", "%q is not auto, cpu, cuda or a GPU list", m.Device.Kind)
	}
	if m.Instances < 1 {
		bad("instances", "must be at least 1, got %d", m.Instances)
	}
	atMost(bad, "instances", int64(m.Instances), maxInstancesBound, "sessions per device, each holding the model")
	if m.Concurrency < 1 {
		bad("concurrency", "must be at least 1, got %d", m.Concurrency)
	}
	atMost(bad, "concurrency", int64(m.Concurrency), maxConcurrencyBound, "runs in flight per session")
	b := m.Batching
	if b.MaxBatchSize < 1 {
		bad("batching.max_batch_size", "must be at least 1, got %d", b.MaxBatchSize)
	}
	atMost(bad, "batching.max_batch_size", int64(b.MaxBatchSize), maxBatchSizeBound, "the warm-up runs a batch of this many rows on every session")
	if b.MaxQueueDelay < 0 {
		bad("batching.max_queue_delay", "must not be negative, got %s", b.MaxQueueDelay)
	}
	durAtMost(bad, "batching.max_queue_delay", b.MaxQueueDelay, maxQueueDelayBound, "")
	if !sort.IntsAreSorted(b.PreferredBatchSizes) {
		bad("batching.preferred_batch_sizes", "must be in ascending order, got %v", b.PreferredBatchSizes)
	}
	for i, s := range b.PreferredBatchSizes {
		if s < 1 || s > b.MaxBatchSize {
			bad("batching.preferred_batch_sizes", "%d is outside 1..max_batch_size (%d)", s, b.MaxBatchSize)
		}
		if i > 0 && b.PreferredBatchSizes[i-1] == s {
			bad("batching.preferred_batch_sizes", "%d is listed twice", s)
		}
	}
	validateQueuePolicy(b, bad)
	m.checkBuiltInQueue(bad)
	r := m.Retries
	if r.MaxRetries < 0 {
		bad("retries.max_retries", "must not be negative, got %d", r.MaxRetries)
	}
	atMost(bad, "retries.max_retries", int64(r.MaxRetries), maxRetriesBound, "")
	if r.BackoffInitial < 0 {
		bad("retries.backoff_initial", "must not be negative, got %s", r.BackoffInitial)
	}
	durAtMost(bad, "retries.backoff_initial", r.BackoffInitial, maxBrokerSeconds, brokerSecondsWhy+" delay")
	if r.BackoffMax < r.BackoffInitial {
		bad("retries.backoff_max", "(%s) must be at least backoff_initial (%s)", r.BackoffMax, r.BackoffInitial)
	}
	durAtMost(bad, "retries.backoff_max", r.BackoffMax, maxBrokerSeconds, brokerSecondsWhy+" delay")
	if why := checkChannel(m.Result.ChannelPrefix + "x"); why != "" {
		bad("result.channel_prefix", "%s", why)
	}
	if m.Result.Expiry <= 0 {
		bad("result.expiry", "must be positive, got %s", m.Result.Expiry)
	}
	durAtMost(bad, "result.expiry", m.Result.Expiry, maxBrokerSeconds, brokerSecondsWhy+" expiration")
	switch {
	case m.Result.MaxResultBytes < MinResultBytes:
		bad("result.max_result_bytes", "must be at least %d, the size of the largest reference record (the record with result_ref the broker gets instead of a larger one), got %d",
			MinResultBytes, m.Result.MaxResultBytes)
	case m.Result.MaxResultBytes > maxPayloadBytes:
		bad("result.max_result_bytes", "must be within %d..%d (%s), got %d", MinResultBytes, maxPayloadBytes, payloadWhy, m.Result.MaxResultBytes)
	}
	if m.Timeout < 0 {
		bad("timeout", "must not be negative, got %s", m.Timeout)
	}
	durAtMost(bad, "timeout", m.Timeout, maxTaskTimeoutBound, "")
	if m.IntraOpThreads < 0 {
		bad("intra_op_threads", "must not be negative (0 means automatic), got %d", m.IntraOpThreads)
	}
	atMost(bad, "intra_op_threads", int64(m.IntraOpThreads), maxIntraOpThreadsBound, "")
	if m.Limits.MaxBodyBytes < 1 || m.Limits.MaxBodyBytes > maxPayloadBytes {
		bad("limits.max_body_bytes", "must be within 1..%d (%s), got %d", maxPayloadBytes, payloadWhy, m.Limits.MaxBodyBytes)
	}
	if m.Limits.MaxTensorElements < 1 {
		bad("limits.max_tensor_elements", "must be at least 1, got %d", m.Limits.MaxTensorElements)
	}
	atMost(bad, "limits.max_tensor_elements", m.Limits.MaxTensorElements, maxPayloadBytes,
		"every element takes at least a byte of a body, and "+payloadWhy+" bounds a body")
	m.CUDA.validate(bad)
}

// validateQueuePolicy checks batching's queue policy fields (Triton's
// max_queue_size, default_queue_timeout, priority_levels,
// default_priority_level) and priority_aging.
func validateQueuePolicy(b Batching, bad func(field, format string, args ...any)) {
	if b.MaxQueueSize < 0 {
		bad("batching.max_queue_size", "must not be negative (0 means the built-in bound), got %d", b.MaxQueueSize)
	} else if b.MaxQueueSize > 0 && b.MaxQueueSize < b.MaxBatchSize {
		bad("batching.max_queue_size", "%d is below max_batch_size (%d): a full batch could never gather", b.MaxQueueSize, b.MaxBatchSize)
	}
	atMost(bad, "batching.max_queue_size", int64(b.MaxQueueSize), maxQueueSizeBound, queueSizeWhy)
	if b.DefaultQueueTimeout < 0 {
		bad("batching.default_queue_timeout", "must not be negative (0 means none), got %s", b.DefaultQueueTimeout)
	}
	durAtMost(bad, "batching.default_queue_timeout", b.DefaultQueueTimeout, maxQueueTimeoutBound, "")
	if b.PriorityLevels < 0 || b.PriorityLevels > MaxPriorityLevels {
		bad("batching.priority_levels", "must be within 0..%d, got %d", MaxPriorityLevels, b.PriorityLevels)
	}
	if b.DefaultPriorityLevel < 0 || b.DefaultPriorityLevel > max(b.PriorityLevels, 1) {
		bad("batching.default_priority_level", "must be within 1..priority_levels (%d), or 0 for the lowest, got %d", b.PriorityLevels, b.DefaultPriorityLevel)
	}
	if b.PriorityAging < 0 {
		bad("batching.priority_aging", "must not be negative (0 takes the default %s), got %s", DefaultPriorityAging, b.PriorityAging)
	}
	durAtMost(bad, "batching.priority_aging", b.PriorityAging, maxPriorityAgingBound, "")
}

// checkBuiltInQueue bounds the batcher's own queue bound, used when
// max_queue_size is 0: 4 x max_batch_size x instances x concurrency per
// device, times the GPUs of a GPU list (auto and cuda take every GPU of
// the host, unknown here: the bound is then per GPU).
func (m *Model) checkBuiltInQueue(bad func(field, format string, args ...any)) {
	b := m.Batching
	if b.MaxQueueSize != 0 || b.MaxBatchSize < 1 || b.MaxBatchSize > maxBatchSizeBound ||
		m.Instances < 1 || m.Instances > maxInstancesBound || m.Concurrency < 1 || m.Concurrency > maxConcurrencyBound {
		return // refused above, or bounded by max_queue_size
	}
	n := int64(4 * b.MaxBatchSize * m.Instances * m.Concurrency)
	formula := fmt.Sprintf("4 x max_batch_size x instances x concurrency = 4 x %d x %d x %d", b.MaxBatchSize, m.Instances, m.Concurrency)
	if m.Device.Kind == DeviceList && len(m.Device.GPUs) > 1 {
		n *= int64(len(m.Device.GPUs))
		formula = strings.Replace(formula, "concurrency =", "concurrency x GPUs =", 1) + fmt.Sprintf(" x %d", len(m.Device.GPUs))
	}
	if n > maxQueueSizeBound {
		bad("batching.max_queue_size", "is 0, so the batcher's queue holds %s = %d requests, over the limit of %d (%s): lower those or set max_queue_size",
			formula, n, maxQueueSizeBound, queueSizeWhy)
	}
}

// MaxPriorityLevels bounds batching.priority_levels: each level is a lane
// the batcher looks at for every batch.
const MaxPriorityLevels = 16
