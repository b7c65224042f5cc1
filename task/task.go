// Package task holds inferq's wire formats, kept compatible with the Python
// KubeMQ Ray Serve adapter v1.0.0: the task message a producer enqueues
// (JSON, or JSON header plus raw tensor bytes in the binary form), its
// tensors in the Open Inference Protocol shapes, the result record, the
// progress event and the sync query bodies. It knows no transport: bodies
// are []byte and KubeMQ tags are map[string]string.
//
// Reading a task is two steps so the consumer can pick the failure rule:
// Parse reads the envelope (an error wrapping ErrUndecodable means the body
// goes raw to the unprocessable queue), then Task.Inputs reads the tensors
// against the model (an error wrapping ErrBadInput means a FAILURE record
// and no retries). ParseQuery reads a sync query the same way, and
// ParseInfer an Open Inference Protocol HTTP infer request, whose inputs
// Task.Inputs then reads like kwargs.inputs.
//
// Readers: result records, query responses, progress events and the infer
// request's members are read with encoding/json. The task envelope and
// tensor lists are read by a hand-written walk (jsonscan.go) that decodes
// number arrays during its one pass (jsonnum.go): for one 3x224x224 FP32
// image it takes a third of the time encoding/json needs to read the same
// envelope with json.RawMessage data (BENCHMARKS.md). Records and
// responses are written by hand (jsonenc.go; BenchmarkEncodeRecord
// compares it with encoding/json).
//
// Every function here is safe for concurrent use; a Task, Record or
// InferResponse value is not, and the tensors Inputs returns may alias the
// message body, which must then stay unmodified while they are in use.
package task

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Errors returned by this package wrap one of these sentinels.
var (
	// ErrUndecodable: the body is not a task at all (not a JSON object, no
	// task_id or task_name string, an unknown content-type, a binary
	// header length that does not fit the body). The consumer forwards it
	// raw to the unprocessable queue.
	ErrUndecodable = errors.New("task: undecodable message")
	// ErrTooLarge: the body is over Limits.MaxBodyBytes, or its tensors
	// over Limits.MaxTensorElements. The task's identity is known, so it
	// gets a FAILURE record like ErrBadInput; it is never retried.
	ErrTooLarge = errors.New("task: message too large")
	// ErrBadInput: the task is readable but its arguments do not fit the
	// model or the format (wrong datatype or shape, bad kwargs field, bad
	// binary sizes). The message names the input, the expected and the
	// received shape and datatype. FAILURE record, no retries.
	ErrBadInput = errors.New("task: bad input")
	// ErrMalformed: a result record, progress event or query response that
	// cannot be read (client side).
	ErrMalformed = errors.New("task: malformed body")
)

// KubeMQ message tags read and written by this package.
const (
	TagTaskID      = "task_id"
	TagReplyTo     = "reply_to"
	TagTraceParent = "traceparent"
	TagContentType = "content-type"
	// TagHeaderLength carries the byte length of the JSON header of a
	// binary-form body (Triton's Inference-Header-Content-Length).
	TagHeaderLength = "inference-header-content-length"
	// TagAttempt carries the attempt number of a resent task: 2 on the
	// resend after the first attempt failed, and so on. Absent means 1.
	TagAttempt = "inferq-attempt"
	// TagPct carries a progress event's percentage as an integer string.
	TagPct = "pct"
)

// Content types of task, record and query bodies.
const (
	ContentTypeJSON = "application/json"
	// ContentTypeBinary marks the binary form: a JSON header of
	// TagHeaderLength bytes followed by raw tensor bytes.
	ContentTypeBinary = "application/vnd.inferq.binary"
)

// Default limits (see Limits).
const (
	// DefaultMaxBodyBytes is KubeMQ's gRPC message limit: nothing larger
	// reaches a consumer anyway.
	DefaultMaxBodyBytes = 100 << 20
	// DefaultMaxTensorElements bounds the elements over all inputs of one
	// task (256 MiB of FP32).
	DefaultMaxTensorElements = 1 << 26
)

// Limits bounds what one message may make Parse and Inputs do. A zero field
// takes its default; there is no "unlimited".
type Limits struct {
	// MaxBodyBytes bounds the body, header and binary data together.
	MaxBodyBytes int64
	// MaxTensorElements bounds the elements of all inputs of one task
	// together. Declared shapes are checked against it before any tensor
	// memory is allocated.
	MaxTensorElements int64
}

// Validate reports a negative limit.
func (l Limits) Validate() error {
	if l.MaxBodyBytes < 0 || l.MaxTensorElements < 0 {
		return fmt.Errorf("task: negative limit in %+v", l)
	}
	return nil
}

func (l Limits) withDefaults() Limits {
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if l.MaxTensorElements <= 0 {
		l.MaxTensorElements = DefaultMaxTensorElements
	}
	return l
}

// OutputRequest is one entry of kwargs.outputs: an output name, and whether
// its data should come back in the binary form. kwargs.outputs entries are
// either names or Open Inference Protocol objects
// {"name": "y", "parameters": {"binary_data_output": true}}.
type OutputRequest struct {
	Name   string
	Binary bool
}

// Task is a parsed task message (or query request). Its raw fields alias
// the body given to Parse.
type Task struct {
	// ID is task_id. Empty only for a query without one.
	ID string
	// Name is task_name: the model.
	Name string
	// Args and Kwargs are the raw JSON of args and kwargs (nil when absent
	// or null).
	Args, Kwargs []byte
	// CreatedAt is created_at in UTC; zero when absent or unreadable.
	CreatedAt time.Time
	// Outputs is kwargs.outputs: the outputs to return (all when empty).
	Outputs []OutputRequest
	// BinaryOutputs is kwargs.parameters.binary_data_output: every output
	// comes back in the binary form.
	BinaryOutputs bool
	// Priority is kwargs.priority (0 when absent): the priority level, 1
	// the highest (Triton's order), 0 the model's default level; the
	// model's batching.priority_levels bounds it (checked at admission).
	Priority int
	// NoProgress is kwargs.parameters.progress set to false: the task
	// wants no progress events. A task can turn its events off, never on
	// (true, or absent, leaves its model's progress setting).
	NoProgress bool
	// Timeout is kwargs.timeout_ms; zero means no deadline.
	Timeout time.Duration
	// ReplyTo is the reply_to tag, else kwargs.reply_to: the Events Store
	// channel for the result record.
	ReplyTo string
	// TraceParent is the W3C traceparent tag.
	TraceParent string
	// ContentType is the content-type tag as sent.
	ContentType string
	// Attempt is the TagAttempt tag: 1 when absent or unreadable.
	Attempt int
	// Binary reports the binary form.
	Binary bool
	// Size is the body length in bytes.
	Size int

	wire  []wireTensor // kwargs.inputs (form 1); nil when absent
	named []kwarg      // other kwargs (form 2)
	bin   []byte       // the binary form's data after the header

	inputsPath string // where wire sits, for errors ("" is kwargs.inputs)
	// infer: an Open Inference Protocol infer request (ParseInfer,
	// NewInfer), whose binary form is the binary tensor extension, named
	// in errors by its header rather than the broker's content type.
	infer bool

	maxElems int64 // Limits.MaxTensorElements while parsing
}

// kwarg is one kwargs member that is not a control field.
type kwarg struct {
	name string
	raw  []byte
}

// Parse reads a task message's envelope: the body and the message tags
// (tags may be nil). It does not read tensors; see Task.Inputs.
//
// Errors: ErrUndecodable with a nil Task when the body is not a task; for
// every other error the returned Task is non-nil with its ID (and ReplyTo)
// set, so a FAILURE record can be stored: ErrTooLarge when the body is over
// lim.MaxBodyBytes (the ID then comes from the task_id tag or the
// envelope), ErrBadInput when a kwargs control field is malformed.
func Parse(body []byte, tags map[string]string, lim Limits) (*Task, error) {
	return parse(body, tags, lim, true)
}

func parse(body []byte, tags map[string]string, lim Limits, requireID bool) (*Task, error) {
	lim = lim.withDefaults()
	t := &Task{
		ContentType: tags[TagContentType],
		TraceParent: tags[TagTraceParent],
		ReplyTo:     tags[TagReplyTo],
		Attempt:     1,
		Size:        len(body),
		maxElems:    lim.MaxTensorElements,
	}
	if a, err := strconv.Atoi(strings.TrimSpace(tags[TagAttempt])); err == nil && a > 0 {
		t.Attempt = a
	}
	header, err := t.split(body, tags)
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > lim.MaxBodyBytes {
		tooLarge := fmt.Errorf("%w: body of %d bytes, limit %d", ErrTooLarge, len(body), lim.MaxBodyBytes)
		id := tags[TagTaskID]
		if id == "" {
			if t.envelope(header, requireID) != nil && t.ID == "" {
				return nil, fmt.Errorf("%w: %w", ErrUndecodable, tooLarge)
			}
			id = t.ID
		}
		t.ID = id
		return t, tooLarge
	}
	if err := t.envelope(header, requireID); err != nil {
		if errors.Is(err, ErrUndecodable) {
			return nil, err
		}
		return t, err
	}
	if t.ID == "" {
		t.ID = tags[TagTaskID] // a query may carry its id as a tag only
	}
	return t, nil
}

// envelope reads the task JSON. Syntax errors and a missing id or name wrap
// ErrUndecodable; a malformed control field wraps ErrBadInput (the first
// one found; the walk goes on so that syntax errors still win).
func (t *Task) envelope(b []byte, requireID bool) error {
	var bad error
	badf := func(format string, args ...any) {
		if bad == nil {
			bad = fmt.Errorf("%w: "+format, append([]any{ErrBadInput}, args...)...)
		}
	}
	start := skipWS(b, 0)
	if start >= len(b) || b[start] != '{' {
		return fmt.Errorf("%w: body is not a JSON object", ErrUndecodable)
	}
	end, err := eachMember(b, start, func(key []byte, v int) (int, error) {
		switch string(key) {
		case "task_id":
			if b[v] == '"' {
				s, end, err := parseString(b, v)
				t.ID = s
				return end, err
			}
		case "task_name":
			if b[v] == '"' {
				s, end, err := parseString(b, v)
				t.Name = s
				return end, err
			}
		case "args":
			end, err := skipValue(b, v, 1)
			if err == nil && b[v] != 'n' {
				if b[v] != '[' {
					badf("args: want an array")
				}
				t.Args = b[v:end]
			}
			return end, err
		case "kwargs":
			if b[v] == '{' {
				end, err := t.kwargs(b, v, badf)
				t.Kwargs = b[v:end]
				return end, err
			}
			if !isNull(b, v) {
				badf("kwargs: want an object")
			}
		case "created_at":
			if b[v] == '"' {
				s, end, err := parseString(b, v)
				t.CreatedAt, _ = ParseTime(s)
				return end, err
			}
		}
		return skipValue(b, v, 1)
	})
	if err == nil {
		if j := skipWS(b, end); j != len(b) {
			err = synErr(j, "data after the JSON object")
		}
	}
	switch {
	case err != nil:
		return fmt.Errorf("%w: %v", ErrUndecodable, err)
	case requireID && t.ID == "":
		return fmt.Errorf("%w: no task_id string", ErrUndecodable)
	case t.Name == "":
		return fmt.Errorf("%w: no task_name string", ErrUndecodable)
	}
	return bad
}

// kwargs walks the kwargs object at b[v], reading the control fields and
// keeping the other members as inputs by name.
func (t *Task) kwargs(b []byte, v int, badf func(string, ...any)) (int, error) {
	var replyTo string
	end, err := eachMember(b, v, func(key []byte, v int) (int, error) {
		if string(key) == "inputs" && b[v] == '[' {
			wire, end, err := readTensorList(b, v, t.maxElems)
			if wire == nil {
				wire = []wireTensor{} // present, empty: form 1 all the same
			}
			t.wire = wire
			return end, err
		}
		end, err := skipValue(b, v, 2)
		if err != nil {
			return end, err
		}
		raw := b[v:end]
		switch string(key) {
		case "inputs":
			if raw[0] != 'n' {
				badf("kwargs.inputs: want an array of tensors")
			}
		case "outputs":
			if err := t.readOutputs(raw); err != nil {
				badf("kwargs.outputs: %v", err)
			}
		case "parameters":
			if raw[0] == '{' {
				_, err := eachMember(raw, 0, func(key []byte, v int) (int, error) {
					switch string(key) {
					case "binary_data_output":
						bo, end, err := parseBool(raw, v)
						t.BinaryOutputs = bo
						return end, err
					case "progress":
						end, err := skipValue(raw, v, 3)
						if err != nil {
							return end, err
						}
						if on, _, err := parseBool(raw, v); err != nil {
							badf("kwargs.parameters.progress: want true or false, got %s", clip(raw[v:end]))
						} else {
							t.NoProgress = !on
						}
						return end, nil
					}
					return skipValue(raw, v, 3)
				})
				if err != nil {
					badf("kwargs.parameters.binary_data_output: want true or false")
				}
			} else if raw[0] != 'n' {
				badf("kwargs.parameters: want an object")
			}
		case "priority":
			p, _, err := parseInt64(raw, 0)
			if err != nil || p != int64(int32(p)) {
				badf("kwargs.priority: want an integer, got %s", clip(raw))
			}
			t.Priority = int(p)
		case "timeout_ms":
			ms, _, err := parseFloat(raw, 0)
			if err != nil || !(ms >= 0 && ms <= float64(365*24*time.Hour/time.Millisecond)) {
				badf("kwargs.timeout_ms: want a number of milliseconds >= 0, got %s", clip(raw))
				break
			}
			t.Timeout = time.Duration(ms * float64(time.Millisecond))
		case "reply_to":
			if raw[0] == '"' {
				replyTo, _, _ = parseString(raw, 0)
			} else if raw[0] != 'n' {
				badf("kwargs.reply_to: want a string")
			}
		default:
			t.named = append(t.named, kwarg{name: string(key), raw: raw})
		}
		return end, nil
	})
	if t.ReplyTo == "" {
		t.ReplyTo = replyTo
	}
	return end, err
}

// readOutputs reads kwargs.outputs: names, or objects with a name and
// parameters.binary_data_output.
func (t *Task) readOutputs(raw []byte) error {
	if raw[0] == 'n' {
		return nil
	}
	_, err := eachElem(raw, 0, func(v int) (int, error) {
		if raw[v] == '"' {
			s, end, err := parseString(raw, v)
			t.Outputs = append(t.Outputs, OutputRequest{Name: s})
			return end, err
		}
		var o OutputRequest
		end, err := eachMember(raw, v, func(key []byte, v int) (int, error) {
			switch string(key) {
			case "name":
				s, end, err := parseString(raw, v)
				o.Name = s
				return end, err
			case "parameters":
				return eachMember(raw, v, func(key []byte, v int) (int, error) {
					if string(key) == "binary_data_output" {
						bo, end, err := parseBool(raw, v)
						o.Binary = bo
						return end, err
					}
					return skipValue(raw, v, 4)
				})
			}
			return skipValue(raw, v, 3)
		})
		if err == nil && o.Name == "" {
			err = errors.New("an output object without a name")
		}
		t.Outputs = append(t.Outputs, o)
		return end, err
	})
	if err != nil {
		t.Outputs = nil
		return fmt.Errorf("want an array of names or {\"name\",\"parameters\"} objects: %v", err)
	}
	return nil
}

// Deadline returns when the task expires: created_at (or received, when
// the task carries no created_at) plus timeout_ms. ok is false when the
// task has no timeout.
func (t *Task) Deadline(received time.Time) (deadline time.Time, ok bool) {
	if t.Timeout <= 0 {
		return time.Time{}, false
	}
	base := t.CreatedAt
	if base.IsZero() {
		base = received
	}
	return base.Add(t.Timeout), true
}

// OutputNames returns the names in kwargs.outputs (nil: all outputs).
func (t *Task) OutputNames() []string {
	if len(t.Outputs) == 0 {
		return nil
	}
	names := make([]string, len(t.Outputs))
	for i, o := range t.Outputs {
		names[i] = o.Name
	}
	return names
}

// WantsBinary reports whether output name should come back in the binary
// form.
func (t *Task) WantsBinary(name string) bool {
	if t.BinaryOutputs {
		return true
	}
	for _, o := range t.Outputs {
		if o.Name == name {
			return o.Binary
		}
	}
	return false
}

// LogValue logs the task's identity, not its data.
func (t *Task) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("task_id", t.ID),
		slog.String("model", t.Name),
		slog.Int("attempt", t.Attempt),
		slog.Int("body_bytes", t.Size),
		slog.Bool("binary", t.Binary),
	)
}

// timeLayout is how the adapter writes times: Python's isoformat() of an
// aware UTC datetime, always with microseconds.
const timeLayout = "2006-01-02T15:04:05.000000"

// FormatTime writes t the way the adapter does, in UTC with microseconds:
// 2026-06-01T12:00:00.000000+00:00.
func FormatTime(t time.Time) string { return string(AppendTime(nil, t)) }

// AppendTime appends FormatTime(t) to b.
func AppendTime(b []byte, t time.Time) []byte {
	return append(t.UTC().AppendFormat(b, timeLayout), "+00:00"...)
}

// ParseTime reads an ISO-8601 time: the adapter's
// 2026-06-01T12:00:00.000000+00:00, with Z or any offset, with or without a
// fraction, with a space for the T; without an offset it is taken as UTC.
// The result is in UTC.
func ParseTime(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	if len(s) > 10 && s[10] == ' ' {
		s = s[:10] + "T" + s[11:]
	}
	for _, layout := range [...]string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}
