package task

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/inferq/inferq/tensor"
)

// Option sets an optional field of a task or query built by NewTask or
// NewQuery.
type Option func(*buildOptions)

type buildOptions struct {
	createdAt     time.Time
	timeout       time.Duration
	priority      int
	replyTo       string
	traceParent   string
	outputs       []OutputRequest
	binaryOutputs bool // all outputs
	binaryInputs  bool
	noProgress    bool
}

// WithCreatedAt sets created_at (default: now, for tasks; queries carry
// none unless set).
func WithCreatedAt(t time.Time) Option { return func(o *buildOptions) { o.createdAt = t } }

// WithTimeout sets kwargs.timeout_ms: the task expires d after created_at.
func WithTimeout(d time.Duration) Option { return func(o *buildOptions) { o.timeout = d } }

// WithPriority sets kwargs.priority: the priority level, 1 the highest
// (Triton's order), up to the model's batching.priority_levels; 0 is its
// default level.
func WithPriority(p int) Option { return func(o *buildOptions) { o.priority = p } }

// WithReplyTo names the Events Store channel for the result record (tag
// and kwargs.reply_to).
func WithReplyTo(channel string) Option { return func(o *buildOptions) { o.replyTo = channel } }

// WithTraceParent sets the W3C traceparent tag.
func WithTraceParent(tp string) Option { return func(o *buildOptions) { o.traceParent = tp } }

// WithOutputs asks for these outputs only (kwargs.outputs), as JSON data.
func WithOutputs(names ...string) Option {
	return func(o *buildOptions) {
		for _, n := range names {
			o.outputs = append(o.outputs, OutputRequest{Name: n})
		}
	}
}

// WithBinaryOutputs asks for these outputs in the binary form; with no
// names, every output (kwargs.parameters.binary_data_output).
func WithBinaryOutputs(names ...string) Option {
	return func(o *buildOptions) {
		if len(names) == 0 {
			o.binaryOutputs = true
		}
		for _, n := range names {
			o.outputs = append(o.outputs, OutputRequest{Name: n, Binary: true})
		}
	}
}

// WithoutProgress asks for no progress events for the task
// (kwargs.parameters.progress: false), for producers that never watch
// them.
func WithoutProgress() Option { return func(o *buildOptions) { o.noProgress = true } }

// WithBinaryInputs builds the binary form: a JSON header and the inputs'
// raw bytes (the fast path; needed for FP16).
func WithBinaryInputs() Option { return func(o *buildOptions) { o.binaryInputs = true } }

// NewTask builds a task message for model: body and tags. Inputs go in
// kwargs.inputs as Open Inference Protocol tensors with flat data, or raw
// in the binary form (WithBinaryInputs). An empty id gets a random UUID.
// Invalid tensors, and FP16 outside the binary form, are errors wrapping
// ErrBadInput.
func NewTask(id, model string, inputs []tensor.Tensor, opts ...Option) (body []byte, tags map[string]string, err error) {
	o := buildOptions{createdAt: time.Now()}
	for _, f := range opts {
		f(&o)
	}
	if id == "" {
		id = NewID()
	}
	return build(id, model, inputs, &o)
}

// NewQuery builds a sync query request {"task_name","args","kwargs"} like
// NewTask, without task_id (and without created_at unless WithCreatedAt).
func NewQuery(model string, inputs []tensor.Tensor, opts ...Option) (body []byte, tags map[string]string, err error) {
	var o buildOptions
	for _, f := range opts {
		f(&o)
	}
	return build("", model, inputs, &o)
}

func build(id, model string, inputs []tensor.Tensor, o *buildOptions) ([]byte, map[string]string, error) {
	size := 256
	for _, t := range inputs {
		size += 96 + len(t.Name)
		if !o.binaryInputs {
			size += jsonSizeGuess(t)
		}
	}
	b := make([]byte, 0, size)
	b = append(b, '{')
	if id != "" {
		b = append(b, `"task_id":`...)
		b = appendString(b, id)
		b = append(b, ',')
	}
	b = append(b, `"task_name":`...)
	b = appendString(b, model)
	b = append(b, `,"args":[],"kwargs":{"inputs":[`...)
	var bin []byte
	for i, t := range inputs {
		if i > 0 {
			b = append(b, ',')
		}
		if t.DType == tensor.FP16 && !o.binaryInputs {
			return nil, nil, fmt.Errorf("%w: input %q: %w", ErrBadInput, t.Name, errFP16JSON)
		}
		var err error
		if b, err = appendTensor(b, t, o.binaryInputs, bareNonFinite, &bin); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrBadInput, errTensor("input", t, err))
		}
	}
	b = append(b, ']')
	if len(o.outputs) > 0 {
		b = append(b, `,"outputs":[`...)
		for i, out := range o.outputs {
			if i > 0 {
				b = append(b, ',')
			}
			if !out.Binary {
				b = appendString(b, out.Name)
				continue
			}
			b = append(b, `{"name":`...)
			b = appendString(b, out.Name)
			b = append(b, `,"parameters":{"binary_data_output":true}}`...)
		}
		b = append(b, ']')
	}
	switch {
	case o.binaryOutputs && o.noProgress:
		b = append(b, `,"parameters":{"binary_data_output":true,"progress":false}`...)
	case o.binaryOutputs:
		b = append(b, `,"parameters":{"binary_data_output":true}`...)
	case o.noProgress:
		b = append(b, `,"parameters":{"progress":false}`...)
	}
	if o.priority != 0 {
		b = appendIntField(b, "priority", int64(o.priority))
	}
	if o.timeout > 0 {
		b = appendIntField(b, "timeout_ms", max(1, o.timeout.Milliseconds()))
	}
	if o.replyTo != "" {
		b = appendStringField(b, "reply_to", o.replyTo)
	}
	b = append(b, '}')
	if !o.createdAt.IsZero() {
		b = append(b, `,"created_at":"`...)
		b = AppendTime(b, o.createdAt)
		b = append(b, '"')
	}
	b = append(b, '}')

	tags := map[string]string{}
	if id != "" {
		tags[TagTaskID] = id
	}
	if o.replyTo != "" {
		tags[TagReplyTo] = o.replyTo
	}
	if o.traceParent != "" {
		tags[TagTraceParent] = o.traceParent
	}
	if o.binaryInputs {
		// Set even with no binary data, so the reader expects the form.
		tags[TagContentType] = ContentTypeBinary
		tags[TagHeaderLength] = strconv.Itoa(len(b))
		b = append(b, bin...)
	} else {
		tags[TagContentType] = ContentTypeJSON
	}
	return b, tags, nil
}

// NewID returns a random (version 4) UUID, the adapter's task id form.
func NewID() string {
	var u [16]byte
	rand.Read(u[:]) // never fails (crypto/rand panics instead)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	const hex = "0123456789abcdef"
	var s [36]byte
	j := 0
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			s[j] = '-'
			j++
		}
		s[j], s[j+1] = hex[c>>4], hex[c&0xf]
		j += 2
	}
	return string(s[:])
}

// Message is a task in the adapter's own form, for producers that pass
// plain arguments (args[0] as a nested array, or kwargs by input name)
// instead of tensors. Args and Kwargs are encoded with encoding/json.
type Message struct {
	TaskID   string
	TaskName string
	Args     []any
	Kwargs   map[string]any
	// CreatedAt defaults to now.
	CreatedAt time.Time
	// ReplyTo and TraceParent become tags when set.
	ReplyTo, TraceParent string
}

// Encode returns the body {"task_id","task_name","args","kwargs","created_at"}
// and tags. An empty TaskID gets a random UUID (set on m).
func (m *Message) Encode() (body []byte, tags map[string]string, err error) {
	if m.TaskID == "" {
		m.TaskID = NewID()
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = time.Now()
	}
	args, kwargs := m.Args, m.Kwargs
	if args == nil {
		args = []any{}
	}
	if kwargs == nil {
		kwargs = map[string]any{}
	}
	a, err := json.Marshal(args)
	if err != nil {
		return nil, nil, fmt.Errorf("task: args: %w", err)
	}
	k, err := json.Marshal(kwargs)
	if err != nil {
		return nil, nil, fmt.Errorf("task: kwargs: %w", err)
	}
	body = append(make([]byte, 0, 128+len(a)+len(k)), `{"task_id":`...)
	body = appendString(body, m.TaskID)
	body = appendStringField(body, "task_name", m.TaskName)
	body = append(body, `,"args":`...)
	body = append(body, a...)
	body = append(body, `,"kwargs":`...)
	body = append(body, k...)
	body = append(body, `,"created_at":"`...)
	body = AppendTime(body, m.CreatedAt)
	body = append(body, `"}`...)
	tags = map[string]string{TagTaskID: m.TaskID, TagContentType: ContentTypeJSON}
	if m.ReplyTo != "" {
		tags[TagReplyTo] = m.ReplyTo
	}
	if m.TraceParent != "" {
		tags[TagTraceParent] = m.TraceParent
	}
	return body, tags, nil
}
