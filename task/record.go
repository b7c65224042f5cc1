package task

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferq/inferq/tensor"
)

// Status is a result record's status.
type Status string

// The statuses of the adapter's result records.
const (
	StatusPending   Status = "PENDING"
	StatusStarted   Status = "STARTED"
	StatusSuccess   Status = "SUCCESS"
	StatusFailure   Status = "FAILURE"
	StatusCancelled Status = "CANCELLED"
)

// Terminal reports whether s is final: SUCCESS, FAILURE or CANCELLED.
func (s Status) Terminal() bool {
	return s == StatusSuccess || s == StatusFailure || s == StatusCancelled
}

// Valid reports whether s is one of the five statuses.
func (s Status) Valid() bool { return s.Terminal() || s == StatusPending || s == StatusStarted }

// TagStatus carries a record's status on the message that holds it.
const TagStatus = "status"

// Record is a task's result record:
//
//	{"task_id","status","result","created_at","completed_at","error"?}
//
// plus inferq's fields, each omitted when zero: attempts, worker, timings,
// result_ref. Python clients ignore what they do not know.
type Record struct {
	TaskID string
	Status Status
	// Result is the raw JSON of the result (for inference the Open
	// Inference Protocol response, see InferResponse); nil is written as
	// null. It must be valid JSON: it is copied, not checked.
	Result []byte
	// CreatedAt is the task's created_at; CompletedAt when it reached
	// this status. Zero is written as null.
	CreatedAt, CompletedAt time.Time
	// Error is the failure reason; omitted when empty.
	Error string
	// Attempts counts the attempts made, crashes included.
	Attempts int
	// Worker names the inferq process that wrote the record.
	Worker string
	// Timings holds seconds per stage (queue, batch_wait, infer, store),
	// written in key order.
	Timings map[string]float64
	// ResultRef is where to fetch a result too large for the broker (the
	// /v1/tasks/{id} URL); Result is then nil.
	ResultRef string
	// Binary is the raw data of the result's binary outputs, written after
	// the JSON (see the binary form in binary.go's package notes).
	Binary []byte
}

// Reference returns the record the broker gets in place of r when r is
// too large to send (over a model's result.max_result_bytes): r without
// its result and binary outputs, with ResultRef ref (ResultRef builds it)
// naming where the whole record is read. r is not changed.
func (r *Record) Reference(ref string) *Record {
	sub := *r
	sub.Result, sub.Binary, sub.ResultRef = nil, nil, ref
	return &sub
}

// ResultRef is where the whole record of task taskID is read when its
// result is stored by reference: <base>/v1/tasks/<taskID>, base being the
// advertise URL of the replica whose spool holds it (a trailing '/' is not
// doubled), or relative (/v1/tasks/<taskID>) when base is "". Task ids are
// URL-safe (CheckName).
func ResultRef(base, taskID string) string {
	return strings.TrimSuffix(base, "/") + "/v1/tasks/" + taskID
}

// AppendJSON appends the record's JSON (without Binary) to b.
func (r *Record) AppendJSON(b []byte) []byte {
	b = append(b, `{"task_id":`...)
	b = appendString(b, r.TaskID)
	b = appendStringField(b, "status", string(r.Status))
	b = append(b, `,"result":`...)
	if len(r.Result) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, r.Result...)
	}
	b = appendTimeField(b, "created_at", r.CreatedAt)
	b = appendTimeField(b, "completed_at", r.CompletedAt)
	if r.Error != "" {
		b = appendStringField(b, "error", r.Error)
	}
	if r.Attempts != 0 {
		b = appendIntField(b, "attempts", int64(r.Attempts))
	}
	if r.Worker != "" {
		b = appendStringField(b, "worker", r.Worker)
	}
	if len(r.Timings) > 0 {
		b = append(b, `,"timings":{`...)
		for i, k := range slices.Sorted(maps.Keys(r.Timings)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendFloat(b, r.Timings[k], 64, quotedNonFinite)
		}
		b = append(b, '}')
	}
	if r.ResultRef != "" {
		b = appendStringField(b, "result_ref", r.ResultRef)
	}
	return append(b, '}')
}

func appendTimeField(b []byte, key string, t time.Time) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	if t.IsZero() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = AppendTime(b, t)
	return append(b, '"')
}

// MarshalJSON returns AppendJSON(nil); it fails when the record has Binary
// data, which JSON alone cannot carry (use Encode).
func (r *Record) MarshalJSON() ([]byte, error) {
	if len(r.Binary) > 0 {
		return nil, fmt.Errorf("task: record %s has binary outputs: use Encode", r.TaskID)
	}
	return r.AppendJSON(nil), nil
}

// Encode returns the message body (JSON, then Binary) and its tags:
// task_id, status, content-type, and inference-header-content-length when
// there is binary data.
func (r *Record) Encode() (body []byte, tags map[string]string) {
	body = r.AppendJSON(make([]byte, 0, 256+len(r.Result)+len(r.Binary)))
	tags = map[string]string{TagTaskID: r.TaskID, TagStatus: string(r.Status)}
	return withBinary(body, r.Binary, tags), tags
}

// withBinary appends bin to the JSON body and sets the content tags.
func withBinary(body, bin []byte, tags map[string]string) []byte {
	if len(bin) == 0 {
		tags[TagContentType] = ContentTypeJSON
		return body
	}
	tags[TagContentType] = ContentTypeBinary
	tags[TagHeaderLength] = strconv.Itoa(len(body))
	return append(body, bin...)
}

// ParseRecord reads a record body (JSON, optionally followed by binary
// output data) with encoding/json. Unknown fields are ignored; a null or
// unreadable time is zero. Binary aliases body; Result is a copy. Errors
// wrap ErrMalformed.
func ParseRecord(body []byte) (*Record, error) {
	r := &Record{}
	end, err := readRecord(body, r)
	if err != nil {
		return nil, fmt.Errorf("%w: record: %v", ErrMalformed, err)
	}
	if r.TaskID == "" || r.Status == "" {
		return nil, fmt.Errorf("%w: record: no task_id or status", ErrMalformed)
	}
	if skipWS(body, end) < len(body) {
		r.Binary = body[end:]
	}
	return r, nil
}

// readRecord reads the record's JSON object at the start of body with the
// package's one-pass walk (the one the task envelope uses), not
// encoding/json: a producer reads every result, and encoding/json took 3.6x
// as long for the mlp's record and 3x for a 1x1000 one (BENCHMARKS.md,
// "Reading records"). It returns the offset after the object.
func readRecord(b []byte, r *Record) (int, error) {
	start := skipWS(b, 0)
	if start >= len(b) || b[start] != '{' {
		return start, errors.New("want a JSON object")
	}
	return eachMember(b, start, func(key []byte, v int) (int, error) {
		switch string(key) {
		case "task_id":
			return strField(b, v, &r.TaskID, "task_id")
		case "status":
			var s string
			end, err := strField(b, v, &s, "status")
			r.Status = Status(s)
			return end, err
		case "result":
			end, err := skipValue(b, v, 1)
			if err == nil && !isNull(b, v) {
				r.Result = b[v:end:end]
			}
			return end, err
		case "created_at":
			return timeField(b, v, &r.CreatedAt)
		case "completed_at":
			return timeField(b, v, &r.CompletedAt)
		case "error":
			return strField(b, v, &r.Error, "error")
		case "worker":
			return strField(b, v, &r.Worker, "worker")
		case "result_ref":
			return strField(b, v, &r.ResultRef, "result_ref")
		case "attempts":
			if isNull(b, v) {
				break
			}
			n, end, err := parseInt64(b, v)
			if err != nil || n != int64(int32(n)) {
				return end, errors.New("attempts: want an integer")
			}
			r.Attempts = int(n)
			return end, nil
		case "timings":
			if b[v] != '{' {
				break
			}
			r.Timings = map[string]float64{}
			return eachMember(b, v, func(key []byte, v int) (int, error) {
				f, end, err := parseFloat(b, v)
				if err != nil {
					return end, errors.New("timings: want numbers")
				}
				r.Timings[string(key)] = f
				return end, nil
			})
		}
		return skipValue(b, v, 1)
	})
}

func timeField(b []byte, v int, dst *time.Time) (int, error) {
	if b[v] != '"' {
		return skipValue(b, v, 1)
	}
	s, end, err := parseString(b, v)
	*dst, _ = ParseTime(s)
	return end, err
}

// jsonError says what encoding/json found wrong in this package's words:
// the member and what it should be, or where the syntax breaks.
func jsonError(err error) error {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		want := "a " + te.Type.Kind().String()
		switch te.Type.Kind() {
		case reflect.Int, reflect.Int32, reflect.Int64:
			want = "an integer"
		case reflect.Float64:
			want = "a number"
		case reflect.Map, reflect.Struct:
			want = "an object"
		}
		return fmt.Errorf("%s: want %s", te.Field, want)
	}
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Errorf("invalid JSON at offset %d: %v", se.Offset, se)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return errors.New("invalid JSON: unexpected end")
	}
	return err
}

// InferResponse is the Open Inference Protocol response that is an
// inference task's result:
//
//	{"model_name","model_version","outputs":[{"name","shape","datatype","data"}]}
//
// with flat data arrays, or "parameters": {"binary_data_size": n} for the
// outputs sent in the binary form. Encode writes NaN and the infinities as
// the strings "NaN", "Infinity" and "-Infinity" (the protobuf JSON
// mapping), so the response is valid JSON; DecodeInferResponse reads those
// and the bare tokens that Python's json and older versions write.
type InferResponse struct {
	ModelName    string
	ModelVersion string
	Outputs      []OutputTensor
}

// OutputTensor is one output: the tensor, and whether its data travels in
// the binary form.
type OutputTensor struct {
	tensor.Tensor
	Binary bool
}

// NewInferResponse returns the response for outputs, marking those the
// task asked to get in the binary form (t may be nil: all JSON).
func NewInferResponse(model, version string, outputs []tensor.Tensor, t *Task) *InferResponse {
	r := &InferResponse{ModelName: model, ModelVersion: version, Outputs: make([]OutputTensor, len(outputs))}
	for i, o := range outputs {
		r.Outputs[i] = OutputTensor{Tensor: o, Binary: t != nil && t.WantsBinary(o.Name)}
	}
	return r
}

// Encode returns the response's JSON (for Record.Result) and the raw data
// of its binary outputs (for Record.Binary; nil when there are none). An
// invalid output tensor is an error naming it.
func (r *InferResponse) Encode() (result, bin []byte, err error) {
	size := 64
	for _, o := range r.Outputs {
		if o.Binary {
			size += 96
		} else {
			size += 96 + jsonSizeGuess(o.Tensor)
		}
	}
	return r.AppendJSON(make([]byte, 0, size), nil)
}

// jsonSizeGuess estimates the JSON text of a tensor's data: float32 in
// shortest form is up to 15 bytes with its comma, usually about 12.
func jsonSizeGuess(t tensor.Tensor) int {
	switch t.DType {
	case tensor.FP32, tensor.FP16:
		return len(t.Data) / 4 * 14
	case tensor.FP64:
		return len(t.Data) / 8 * 20
	case tensor.BYTES:
		return len(t.Data) * 2
	}
	return len(t.Data) * 4
}

// AppendJSON appends the response's JSON to b and the binary outputs' data
// to bin.
func (r *InferResponse) AppendJSON(b, bin []byte) ([]byte, []byte, error) {
	b = append(b, `{"model_name":`...)
	b = appendString(b, r.ModelName)
	b = appendStringField(b, "model_version", r.ModelVersion)
	b = append(b, `,"outputs":[`...)
	for i, o := range r.Outputs {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendTensor(b, o.Tensor, o.Binary, quotedNonFinite, &bin); err != nil {
			return nil, nil, errTensor("output", o.Tensor, err)
		}
	}
	return append(b, "]}"...), bin, nil
}

// Tensors returns the outputs' tensors.
func (r *InferResponse) Tensors() []tensor.Tensor {
	ts := make([]tensor.Tensor, len(r.Outputs))
	for i, o := range r.Outputs {
		ts[i] = o.Tensor
	}
	return ts
}

// Response decodes the record's result as an InferResponse, its outputs as
// tensors (binary outputs alias the record's Binary). A record whose result
// is stored by reference (ResultRef and no Result) gives a *ResultRefError;
// other errors wrap ErrMalformed.
func (r *Record) Response() (*InferResponse, error) {
	if len(r.Result) == 0 && r.ResultRef != "" {
		return nil, &ResultRefError{TaskID: r.TaskID, Ref: r.ResultRef}
	}
	return DecodeInferResponse(r.Result, r.Binary)
}

// ErrResultByReference is wrapped by the errors of a result stored by
// reference: too large for the broker (the model's
// result.max_result_bytes), it reached the producer as a record with
// result_ref and no result, and the whole record is read from the replica
// that holds it (package client does).
var ErrResultByReference = errors.New("result stored by reference")

// ResultRefError is Record.Response's error for a result stored by
// reference: Ref is where the whole record is read, a replica's
// /v1/tasks/{id} (relative when the server advertises no URL).
type ResultRefError struct {
	TaskID, Ref string
}

func (e *ResultRefError) Error() string {
	return fmt.Sprintf("task: the result of task %s is stored by reference at %s (over the model's max_result_bytes): read the whole record there", e.TaskID, e.Ref)
}

// Unwrap returns ErrResultByReference.
func (e *ResultRefError) Unwrap() error { return ErrResultByReference }

// DecodeInferResponse decodes an Open Inference Protocol response (result)
// whose binary outputs' data is bin. Errors wrap ErrMalformed.
func DecodeInferResponse(result, bin []byte) (*InferResponse, error) {
	if len(result) == 0 {
		return nil, fmt.Errorf("%w: no result", ErrMalformed)
	}
	resp := &InferResponse{}
	var list []wireTensor
	start := skipWS(result, 0)
	if start >= len(result) || result[start] != '{' {
		return nil, fmt.Errorf("%w: result is not an inference response object", ErrMalformed)
	}
	end, err := eachMember(result, start, func(key []byte, v int) (int, error) {
		switch string(key) {
		case "model_name":
			return strField(result, v, &resp.ModelName, "model_name")
		case "model_version":
			if result[v] == '"' {
				return strField(result, v, &resp.ModelVersion, "model_version")
			}
		case "outputs":
			l, end, err := readTensorList(result, v, int64(len(result)/2+1))
			list = l
			return end, err
		}
		return skipValue(result, v, 1)
	})
	if err == nil && skipWS(result, end) != len(result) {
		err = synErr(end, "data after the response")
	}
	if err != nil {
		return nil, fmt.Errorf("%w: response: %v", ErrMalformed, err)
	}
	off := 0
	resp.Outputs = make([]OutputTensor, len(list))
	for i, w := range list {
		o, err := decodeOutput(w, bin, &off)
		if err != nil {
			return nil, fmt.Errorf("%w: output %q: %w", ErrMalformed, w.name, err)
		}
		resp.Outputs[i] = o
	}
	if off != len(bin) {
		return nil, fmt.Errorf("%w: binary outputs take %d bytes, %d follow the JSON", ErrMalformed, off, len(bin))
	}
	return resp, nil
}

// decodeOutput turns one output object into a tensor.
func decodeOutput(w wireTensor, bin []byte, off *int) (OutputTensor, error) {
	if w.problem != "" {
		return OutputTensor{}, fmt.Errorf("%s", w.problem)
	}
	dt, err := tensor.ParseDType(w.dtName)
	if err != nil {
		return OutputTensor{}, err
	}
	o := OutputTensor{Tensor: tensor.Tensor{Name: w.name, DType: dt, Shape: w.shape}}
	n := tensor.NumElements(w.shape)
	if n < 0 {
		return OutputTensor{}, fmt.Errorf("shape %s overflows", tensor.FormatShape(w.shape))
	}
	if w.binSize >= 0 {
		if !w.hasShape || w.data != nil {
			return OutputTensor{}, fmt.Errorf("binary_data_size needs a shape and no data")
		}
		if w.binSize > int64(len(bin)-*off) {
			return OutputTensor{}, fmt.Errorf("binary_data_size %d overruns the %d bytes left", w.binSize, len(bin)-*off)
		}
		end := *off + int(w.binSize)
		o.Data, o.Binary = bin[*off:end:end], true
		*off = end
		return o, o.Validate()
	}
	if w.data == nil {
		return OutputTensor{}, fmt.Errorf("no data")
	}
	jdt := dt
	if dt == tensor.FP16 {
		jdt = tensor.FP32 // half floats travel as JSON numbers, read as float32
	}
	most := int64(len(w.data)/2 + 1)
	if w.hasShape && n > most {
		return OutputTensor{}, fmt.Errorf("shape %s has %d elements, data holds %d at most", tensor.FormatShape(w.shape), n, most)
	}
	data, got, err := w.decoded, w.got, w.decodeErr
	if !w.dec {
		hint := int(min(n, most)) * jdt.Size()
		if jdt == tensor.BYTES {
			hint = len(w.data)
		}
		if dt == tensor.FP16 {
			data, got, err = decodeHalfArray(w.data, hint, most)
		} else {
			data, got, _, err = decodeArray(w.data, 0, jdt, hint, most)
		}
	}
	if err != nil {
		return OutputTensor{}, err
	}
	switch {
	case !w.hasShape:
		o.Shape = got
	case len(got) <= 1 && tensor.NumElements(got) == n, slices.Equal(got, w.shape):
	default:
		return OutputTensor{}, fmt.Errorf("data has shape %s, the tensor says %s", tensor.FormatShape(got), tensor.FormatShape(w.shape))
	}
	o.Data = data
	return o, nil
}

// strField reads a string member (null is empty) of the hand walk.
func strField(b []byte, v int, dst *string, name string) (int, error) {
	if isNull(b, v) {
		return v + 4, nil
	}
	if b[v] != '"' {
		end, _ := skipValue(b, v, 1)
		return end, fmt.Errorf("%s: want a string", name)
	}
	s, end, err := parseString(b, v)
	*dst = s
	return end, err
}
