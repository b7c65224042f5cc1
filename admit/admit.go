package admit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Source is where a request came from.
type Source uint8

const (
	FromQueue Source = iota // a queued task
	FromQuery               // a KubeMQ sync query
	FromHTTP                // an Open Inference Protocol infer request (HTTP or gRPC)
)

// noun names a request of the source in errors.
func (s Source) noun() string {
	switch s {
	case FromQuery:
		return "query"
	case FromHTTP:
		return "request"
	}
	return "task"
}

// Verdict is admission's decision: run, or why not.
type Verdict uint8

const (
	Run          Verdict = iota
	Undecodable          // not a request at all: nothing to answer it by
	UnknownModel         // task_name (or the URL) names no model served here
	BadInput             // does not fit the model or the format
	TooLarge             // over the model's body or tensor limits
	Expired              // past its deadline before it ran
	Cancelled            // its record reads CANCELLED
	// BadName: its id, reply_to or dead letter queue must not name
	// anything (task.CheckName). Like an undecodable message it has no
	// identity to answer by: no record, the unprocessable queue.
	BadName
)

// RecordReader finds a task's stored record; the consumer's result store
// satisfies it.
type RecordReader interface {
	Get(taskID string) ([]byte, bool)
}

// Input is one request to admit.
type Input struct {
	From Source
	Body []byte
	// Tags are the message's tags (queued tasks, queries): task.Parse
	// reads them, and the caller's trace context (traceparent) is read
	// from them unless Trace is set.
	Tags map[string]string
	// Trace (HTTP, gRPC), when set, is where the caller's trace context
	// is read: the request's headers or metadata.
	Trace propagation.TextMapCarrier
	// HeaderLen (HTTP) is the Inference-Header-Content-Length header.
	HeaderLen string
	// JSONOutputs (HTTP): the answer carries the outputs not asked for
	// in binary as JSON numbers, which cannot carry FP16: a request that
	// would get an FP16 output so is refused before it runs, as Triton
	// refuses it (after running).
	JSONOutputs bool
	// Model (HTTP, gRPC) is the model the URL or model_name names.
	Model string
	// Decoded (gRPC) is an infer request already read into a Task, or
	// DecodeErr why it could not be; Body is then nil and Size the
	// message's size in bytes.
	Decoded   *task.Task
	DecodeErr error
	Size      int64
	// DeadLetter (queued tasks) is the message's MaxReceiveQueue policy:
	// the producer's dead letter queue, a channel name.
	DeadLetter string
	Received   time.Time
	// Records, when set, is asked whether the task was cancelled (queued
	// tasks only: a sync caller cancels by hanging up).
	Records RecordReader
	// Traced asks for the caller's span context (tracing is on).
	Traced bool
}

// Admitted is admission's answer: a runnable request when Verdict is Run,
// else the verdict and Err, which says why in words the caller can store
// or send as they are.
type Admitted[M Model] struct {
	Verdict Verdict
	Err     error
	// Task is nil only when undecodable or its names are refused.
	Task *task.Task
	// Model is the zero M (nil) when undecodable, unknown or its names
	// are refused.
	Model    M
	Inputs   []tensor.Tensor
	Outputs  []string  // nil: every output
	Deadline time.Time // zero: none
	Priority bool      // sync requests run ahead of queued tasks
	Level    int       // the priority level (batching.Level)
	// Remote is the caller's span (traceparent), when traced.
	Remote trace.SpanContext
}

// Admit reads in against the table's models. Safe for concurrent use; it
// changes nothing but what it returns.
func (t *Table[M]) Admit(in Input) (a Admitted[M]) {
	a.Priority = in.From != FromQueue
	var err error
	var found bool
	if in.From == FromHTTP {
		if a.Model, found = t.byName[in.Model]; !found {
			return refuse(a, UnknownModel, t.Unknown(in.Model))
		}
		if err := CheckBody(a.Model.ModelConfig(), in.bodySize()); err != nil {
			return refuse(a, TooLarge, err)
		}
		if in.Decoded != nil || in.DecodeErr != nil {
			a.Task, err = in.Decoded, in.DecodeErr
		} else {
			a.Task, err = task.ParseInfer(in.Body, in.HeaderLen, Limits(a.Model.ModelConfig()))
		}
		if e := checkNames(in, a.Task); e != nil {
			return refuseNames(a, e)
		}
		if a.Task == nil {
			if errors.Is(err, task.ErrUndecodable) {
				return refuse(a, Undecodable, fmt.Errorf("undecodable %s: %w", in.From.noun(), err))
			}
			return refuse(a, inputVerdict(err), fmt.Errorf("model %q: %w", a.Model.ModelConfig().Name, err))
		}
	} else {
		parse := task.Parse
		if in.From == FromQuery {
			parse = task.ParseQuery
		}
		if a.Task, err = parse(in.Body, in.Tags, t.limits); a.Task == nil {
			return refuse(a, Undecodable, fmt.Errorf("undecodable %s: %w", in.From.noun(), err))
		}
		if e := checkNames(in, a.Task); e != nil {
			return refuseNames(a, e)
		}
		a.Model, found = t.byName[a.Task.Name]
		if !found && errors.Is(err, task.ErrTooLarge) && len(t.order) > 0 {
			// Too large to read its task_name: the table's first model
			// answers for it, with the size error.
			a.Model, found = t.First(), true
		}
		if !found {
			return refuse(a, UnknownModel, t.Unknown(a.Task.Name))
		}
	}
	c := a.Model.ModelConfig()
	if in.Traced {
		carrier := in.Trace
		if carrier == nil {
			carrier = propagation.MapCarrier(in.Tags)
		}
		ctx := propagation.TraceContext{}.Extract(context.Background(), carrier)
		a.Remote = trace.SpanContextFromContext(ctx)
	}
	if errors.Is(err, task.ErrTooLarge) {
		if e := CheckBody(c, in.bodySize()); e != nil {
			return refuse(a, TooLarge, e)
		}
	}
	if err != nil {
		return refuse(a, inputVerdict(err), limitHint(c, fmt.Errorf("model %q: %w", c.Name, err)))
	}
	a.Deadline = deadline(a.Task, c, in.Received)
	if !a.Deadline.IsZero() && !in.Received.Before(a.Deadline) {
		return refuse(a, Expired, fmt.Errorf("deadline exceeded: the %s expired at %s, before inference started", in.From.noun(), task.FormatTime(a.Deadline)))
	}
	if in.Records != nil && cancelled(in.Records, a.Task.ID) {
		return refuse(a, Cancelled, errors.New("cancelled before inference started"))
	}
	if err := CheckBody(c, in.bodySize()); err != nil {
		return refuse(a, TooLarge, err)
	}
	if a.Inputs, err = a.Task.Inputs(a.Model.ModelInfo(), Limits(c)); err != nil {
		return refuse(a, inputVerdict(err), limitHint(c, fmt.Errorf("model %q: %w", c.Name, err)))
	}
	if err := checkRows(c, a.Model.ModelInfo(), a.Inputs); err != nil {
		return refuse(a, BadInput, fmt.Errorf("model %q: %w", c.Name, err))
	}
	a.Outputs = a.Task.OutputNames()
	if in.JSONOutputs {
		if err := checkJSONOutputs(a.Model.ModelInfo(), a.Task); err != nil {
			return refuse(a, BadInput, fmt.Errorf("model %q: %w", c.Name, err))
		}
	}
	field := "kwargs.priority"
	if in.From == FromHTTP {
		field = "parameters.priority"
	}
	b := c.Batching
	if err := b.CheckPriority(field, a.Task.Priority); err != nil {
		return refuse(a, BadInput, fmt.Errorf("model %q: %w: %w", c.Name, task.ErrBadInput, err))
	}
	a.Level = b.Level(a.Task.Priority)
	return a
}

// bodySize is the size of what arrived: the body, or a decoded request's
// message.
func (in Input) bodySize() int64 {
	if in.Decoded != nil || in.DecodeErr != nil {
		return in.Size
	}
	return int64(len(in.Body))
}

// checkNames checks what t (nil: nothing parsed) and in carry that names
// things (the id, reply_to, the dead letter queue) before anything uses
// them: the one place producer data is checked before it names a channel,
// a record, a journal line or a log field (task.CheckName, KUBEMQ.md trap
// 19).
func checkNames(in Input, t *task.Task) error {
	var id, replyTo string
	if t != nil {
		id, replyTo = t.ID, t.ReplyTo
	}
	idField := task.TagTaskID
	if in.From == FromHTTP {
		idField = "id"
	}
	for _, n := range []struct{ field, value string }{
		{idField, id},
		{task.TagReplyTo, replyTo},
		{"dead letter queue (MaxReceiveQueue)", in.DeadLetter},
	} {
		if n.value == "" {
			continue // absent: an empty task_id is undecodable already
		}
		if err := task.CheckName(n.field, n.value); err != nil {
			return fmt.Errorf("invalid %s: %w", in.From.noun(), err)
		}
	}
	return nil
}

// refuseNames refuses a request whose names cannot be trusted: nothing of
// it (its task, its model) is kept for the caller to use.
func refuseNames[M Model](a Admitted[M], err error) Admitted[M] {
	var none M
	a.Task, a.Model = nil, none
	return refuse(a, BadName, err)
}

func refuse[M Model](a Admitted[M], v Verdict, err error) Admitted[M] {
	a.Verdict, a.Err, a.Inputs = v, err, nil
	return a
}

func inputVerdict(err error) Verdict {
	if errors.Is(err, task.ErrTooLarge) {
		return TooLarge
	}
	return BadInput
}

// cancelled reports whether the task's stored record reads CANCELLED.
func cancelled(records RecordReader, taskID string) bool {
	body, ok := records.Get(taskID)
	if !ok {
		return false
	}
	r, err := task.ParseRecord(body)
	return err == nil && r.Status == task.StatusCancelled
}
