package models

import (
	"errors"
	"fmt"
	"sort"
	"unicode"
)

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
	}{{"results.spool_max_entries", int64(c.Results.SpoolMaxEntries)},
		{"results.spool_max_memory_bytes", c.Results.SpoolMaxMemoryBytes},
		{"results.spool_max_disk_bytes", c.Results.SpoolMaxDiskBytes}} {
		if b.v < 0 {
			top(b.field, "must be positive (0: the default), got %d", b.v)
		}
	}
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
	if m.Concurrency < 1 {
		bad("concurrency", "must be at least 1, got %d", m.Concurrency)
	}
	b := m.Batching
	if b.MaxBatchSize < 1 {
		bad("batching.max_batch_size", "must be at least 1, got %d", b.MaxBatchSize)
	}
	if b.MaxQueueDelay < 0 {
		bad("batching.max_queue_delay", "must not be negative, got %s", b.MaxQueueDelay)
	}
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
	r := m.Retries
	if r.MaxRetries < 0 {
		bad("retries.max_retries", "must not be negative, got %d", r.MaxRetries)
	}
	if r.BackoffInitial < 0 {
		bad("retries.backoff_initial", "must not be negative, got %s", r.BackoffInitial)
	}
	if r.BackoffMax < r.BackoffInitial {
		bad("retries.backoff_max", "(%s) must be at least backoff_initial (%s)", r.BackoffMax, r.BackoffInitial)
	}
	if why := checkChannel(m.Result.ChannelPrefix + "x"); why != "" {
		bad("result.channel_prefix", "%s", why)
	}
	if m.Result.Expiry <= 0 {
		bad("result.expiry", "must be positive, got %s", m.Result.Expiry)
	}
	if m.Result.MaxResultBytes < 1 || m.Result.MaxResultBytes > maxPayloadBytes {
		bad("result.max_result_bytes", "must be within 1..%d (%s), got %d", maxPayloadBytes, payloadWhy, m.Result.MaxResultBytes)
	}
	if m.Timeout < 0 {
		bad("timeout", "must not be negative, got %s", m.Timeout)
	}
	if m.IntraOpThreads < 0 {
		bad("intra_op_threads", "must not be negative (0 means automatic), got %d", m.IntraOpThreads)
	}
	if m.Limits.MaxBodyBytes < 1 || m.Limits.MaxBodyBytes > maxPayloadBytes {
		bad("limits.max_body_bytes", "must be within 1..%d (%s), got %d", maxPayloadBytes, payloadWhy, m.Limits.MaxBodyBytes)
	}
	if m.Limits.MaxTensorElements < 1 {
		bad("limits.max_tensor_elements", "must be at least 1, got %d", m.Limits.MaxTensorElements)
	}
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
	if b.DefaultQueueTimeout < 0 {
		bad("batching.default_queue_timeout", "must not be negative (0 means none), got %s", b.DefaultQueueTimeout)
	}
	if b.PriorityLevels < 0 || b.PriorityLevels > MaxPriorityLevels {
		bad("batching.priority_levels", "must be within 0..%d, got %d", MaxPriorityLevels, b.PriorityLevels)
	}
	if b.DefaultPriorityLevel < 0 || b.DefaultPriorityLevel > max(b.PriorityLevels, 1) {
		bad("batching.default_priority_level", "must be within 1..priority_levels (%d), or 0 for the lowest, got %d", b.PriorityLevels, b.DefaultPriorityLevel)
	}
	if b.PriorityAging < 0 {
		bad("batching.priority_aging", "must not be negative (0 takes the default %s), got %s", DefaultPriorityAging, b.PriorityAging)
	}
}

// MaxPriorityLevels bounds batching.priority_levels: each level is a lane
// the batcher looks at for every batch.
const MaxPriorityLevels = 16
