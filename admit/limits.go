package admit

import (
	"errors"
	"fmt"
	"time"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// Limits are the limits of the model configured c for reading a request
// (limits.max_body_bytes, limits.max_tensor_elements; zero: the defaults).
func Limits(c *models.Model) task.Limits {
	return task.Limits{MaxBodyBytes: int64(c.Limits.MaxBodyBytes), MaxTensorElements: c.Limits.MaxTensorElements}
}

// BodyLimit is the most bytes a request body for the model configured c
// may hold.
func BodyLimit(c *models.Model) int64 {
	if n := int64(c.Limits.MaxBodyBytes); n > 0 {
		return n
	}
	return task.DefaultMaxBodyBytes
}

// CheckBody is the one body-size rule of every path: n bytes (-1 when the
// size is not known, only that it is over) against the limit of the model
// configured c. Its error wraps task.ErrTooLarge and names the field.
func CheckBody(c *models.Model, n int64) error {
	limit := BodyLimit(c)
	switch {
	case n < 0:
		return fmt.Errorf("model %q: %w: body over the limit of %d bytes (limits.max_body_bytes)", c.Name, task.ErrTooLarge, limit)
	case n > limit:
		return fmt.Errorf("model %q: %w: body of %d bytes is over the limit of %d bytes (limits.max_body_bytes)", c.Name, task.ErrTooLarge, n, limit)
	}
	return nil
}

// limitHint names the config fields behind a size error.
func limitHint(c *models.Model, err error) error {
	if !errors.Is(err, task.ErrTooLarge) {
		return err
	}
	return fmt.Errorf("%w (model %q: limits.max_body_bytes %d, limits.max_tensor_elements %d)",
		err, c.Name, c.Limits.MaxBodyBytes, c.Limits.MaxTensorElements)
}

// deadline is when t expires: its own timeout_ms, else the model's
// timeout, from created_at (or receipt); zero when neither is set.
func deadline(t *task.Task, c *models.Model, received time.Time) time.Time {
	if d, ok := t.Deadline(received); ok {
		return d
	}
	if c.Timeout <= 0 {
		return time.Time{}
	}
	base := t.CreatedAt
	if base.IsZero() {
		base = received
	}
	return base.Add(c.Timeout.D())
}

// MaxBatchSize is the most rows (dim 0) one request for the model
// configured c with tensors info may carry, as Triton's max_batch_size
// says it: batching.max_batch_size when every input has a variable dim 0,
// the dim the batcher stacks requests along (the runtime's batchable
// model); 0 when an input lacks one, Triton's "no batch dim": a request
// then carries the model's dims as they are and runs on its own. The
// metadata advertises it and admission enforces it (checkRows): one
// number on every path.
func MaxBatchSize(c *models.Model, info tensor.ModelInfo) int {
	for _, in := range info.Inputs {
		if len(in.Dims) == 0 || in.Dims[0] != -1 {
			return 0
		}
	}
	return c.Batching.MaxBatchSize
}

// checkRows refuses inputs of more rows than the model's MaxBatchSize:
// a batch never holds more than batching.max_batch_size rows, and a
// request over it is the client's to split (Triton refuses it too:
// "inference request batch-size must be <= N"). The error wraps
// task.ErrBadInput and names the input, its rows and the field.
func checkRows(c *models.Model, info tensor.ModelInfo, inputs []tensor.Tensor) error {
	most := MaxBatchSize(c, info)
	if most <= 0 {
		return nil
	}
	for _, t := range inputs {
		if len(t.Shape) > 0 && t.Shape[0] > int64(most) {
			return fmt.Errorf("%w: input %q: %d rows (dim 0) are over the model's batching.max_batch_size %d; split the request",
				task.ErrBadInput, t.Name, t.Shape[0], most)
		}
	}
	return nil
}

// checkJSONOutputs refuses a request that would get an FP16 output as
// JSON: the outputs it names (every output when none) that it does not ask
// for in binary. Triton refuses the same ("sending FP16 data via JSON is
// not supported"), after the run; this is before it. The error wraps
// task.ErrBadInput and names the output and how to ask for it.
func checkJSONOutputs(info tensor.ModelInfo, t *task.Task) error {
	names := t.OutputNames()
	if names == nil {
		for _, o := range info.Outputs {
			names = append(names, o.Name)
		}
	}
	for _, name := range names {
		for _, o := range info.Outputs {
			if o.Name == name && o.DType == tensor.FP16 && !t.WantsBinary(name) {
				return fmt.Errorf(`%w: output %q: FP16 data cannot go out as JSON numbers (Triton refuses it too); ask for it in binary: "parameters": {"binary_data": true} on the output, or {"binary_data_output": true} on the request`,
					task.ErrBadInput, name)
			}
		}
	}
	return nil
}
