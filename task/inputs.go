package task

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/inferq/inferq/tensor"
)

// wireTensor is one Open Inference Protocol tensor object as read from
// kwargs.inputs or a response's outputs; data is decoded later, once the
// datatype and the model are known.
type wireTensor struct {
	name     string
	dtName   string
	shape    []int64
	hasShape bool
	data     []byte // raw JSON of "data"; nil when absent or null
	binSize  int64  // parameters.binary_data_size; -1 when absent
	binOut   bool   // parameters.binary_data_output
	raw      []byte // a RawTensor's data (NewInfer); used when hasRaw
	hasRaw   bool
	problem  string // the first malformed field, reported with the name

	// When "datatype" comes before "data" (as NewTask writes it), the data
	// is decoded during the one walk over the body: decoded holds the
	// bytes and got the nesting's shape, or decodeErr why it did not fit
	// the datatype.
	dec       bool
	decoded   []byte
	got       []int64
	decodeErr error
}

func (w *wireTensor) fail(format string, args ...any) {
	if w.problem == "" {
		w.problem = fmt.Sprintf(format, args...)
	}
}

// readTensorList reads a JSON array of tensor objects at b[v], decoding
// data of at most max elements each as it goes. Only syntax errors fail
// it; malformed fields are kept in each tensor's problem.
func readTensorList(b []byte, v int, max int64) ([]wireTensor, int, error) {
	var list []wireTensor
	end, err := eachElem(b, v, func(v int) (int, error) {
		w, end, err := readTensor(b, v, max)
		list = append(list, w)
		return end, err
	})
	return list, end, err
}

func readTensor(b []byte, v int, max int64) (wireTensor, int, error) {
	w := wireTensor{binSize: -1}
	if b[v] != '{' {
		w.fail("want a tensor object {\"name\",\"shape\",\"datatype\",\"data\"}")
		end, err := skipValue(b, v, 3)
		return w, end, err
	}
	end, err := eachMember(b, v, func(key []byte, v int) (int, error) {
		switch string(key) {
		case "name":
			if b[v] == '"' {
				s, end, err := parseString(b, v)
				w.name = s
				return end, err
			}
			w.fail("name: want a string")
		case "datatype":
			if b[v] == '"' {
				s, end, err := parseString(b, v)
				w.dtName = s
				return end, err
			}
			w.fail("datatype: want a string")
		case "shape":
			if b[v] != '[' {
				w.fail("shape: want an array of dims")
				break
			}
			w.hasShape, w.shape = true, w.shape[:0]
			return eachElem(b, v, func(v int) (int, error) {
				n, end, err := scanNumber(b, v)
				if err != nil {
					w.fail("shape: want an array of dims")
					return skipValue(b, v, 4)
				}
				d, ierr := n.toInt64()
				switch {
				case ierr != nil || d < 0:
					w.fail("shape: dim %s is not a non-negative integer", clip(b[v:end]))
				case len(w.shape) == maxRank:
					w.fail("shape: more than %d dims", maxRank)
				default:
					w.shape = append(w.shape, d)
				}
				return end, nil
			})
		case "data":
			if end, ok := w.decodeNow(b, v, max); ok {
				return end, nil
			}
			end, err := skipValue(b, v, 3)
			if b[v] != 'n' {
				w.data = b[v:end]
			}
			return end, err
		case "parameters":
			if b[v] != '{' {
				break
			}
			return eachMember(b, v, func(key []byte, v int) (int, error) {
				switch string(key) {
				case "binary_data_size":
					n, end, err := scanNumber(b, v)
					if err != nil {
						w.fail("parameters.binary_data_size: want a byte count")
						return skipValue(b, v, 4)
					}
					if s, ierr := n.toInt64(); ierr == nil && s >= 0 {
						w.binSize = s
					} else {
						w.fail("parameters.binary_data_size: %s is not a byte count", clip(b[v:end]))
					}
					return end, nil
				case "binary_data_output":
					if bo, end, err := parseBool(b, v); err == nil {
						w.binOut = bo
						return end, nil
					}
				}
				return skipValue(b, v, 4)
			})
		}
		return skipValue(b, v, 3)
	})
	return w, end, err
}

// decodeNow decodes the data at b[v] when the datatype is already known
// and JSON can carry it. ok is false when the caller must skip the value
// instead: not decoded, or not a tensor of that datatype, in which case
// the skip tells a syntax error from an input error.
func (w *wireTensor) decodeNow(b []byte, v int, max int64) (int, bool) {
	dt, err := tensor.ParseDType(w.dtName)
	if err != nil || dt == tensor.FP16 || b[v] != '[' {
		return v, false
	}
	most := int64(len(b)-v)/2 + 1
	hint := capHint(b[v:], dt, max)
	if n := tensor.NumElements(w.shape); w.hasShape && n >= 0 && n <= min(most, max) {
		hint = int(n) * dt.Size()
	}
	data, got, end, err := decodeArray(b, v, dt, hint, min(most, max))
	w.dec, w.decoded, w.got, w.decodeErr = true, data, got, err
	if err != nil {
		end, serr := skipValue(b, v, 3)
		w.data = b[v:end]
		return end, serr == nil
	}
	w.data = b[v:end]
	return end, true
}

// Inputs reads the task's tensors for model, in the model's input order,
// from the first form that applies:
//
//  1. kwargs.inputs, Open Inference Protocol tensors with flat or nested
//     data (or binary data in the binary form);
//  2. kwargs {"<input name>": nested array}, every member that is not a
//     control field (inputs, outputs, parameters, priority, timeout_ms,
//     reply_to) naming an input;
//  3. args[0], the nested array of a single-input model.
//
// Dim 0 is the item's batch dim: data with one dim fewer than the model's
// input is one row, and gets a leading dim of 1. Datatypes must equal the
// model's; every fixed dim must match. Binary tensors alias the body;
// JSON tensors are decoded into new memory. Errors wrap ErrBadInput and
// name the input (those over lim.MaxTensorElements wrap ErrTooLarge too).
func (t *Task) Inputs(model tensor.ModelInfo, lim Limits) ([]tensor.Tensor, error) {
	lim = lim.withDefaults()
	r := inputReader{model: model, budget: lim.MaxTensorElements, out: make([]tensor.Tensor, len(model.Inputs)), path: t.inputsPath, infer: t.infer}
	if r.path == "" {
		r.path = "kwargs.inputs"
	}
	for _, in := range model.Inputs {
		if !in.DType.Valid() {
			return nil, fmt.Errorf("%w: input %q: the model's type %s cannot be carried", ErrBadInput, in.Name, in.ONNXType)
		}
	}
	var err error
	switch {
	case t.wire != nil:
		err = r.oip(t.wire, t.Binary, t.bin)
	case len(t.named) > 0:
		err = r.named(t.named)
	case len(t.Args) > 0:
		err = r.args(t.Args)
	default:
		err = fmt.Errorf("%w: no inputs: want kwargs.inputs, kwargs {\"<input>\": array} or args[0]", ErrBadInput)
	}
	if err != nil {
		return nil, err
	}
	if t.Binary && r.off != len(t.bin) {
		if t.infer {
			return nil, fmt.Errorf("%w: binary tensor extension: the binary_data_size values add up to %d bytes, the body carries %d after the %d bytes of JSON that %s gives",
				ErrBadInput, r.off, len(t.bin), t.Size-len(t.bin), HeaderInferenceLength)
		}
		return nil, fmt.Errorf("%w: binary form: the header's binary_data_size values add up to %d bytes, the body carries %d after the header", ErrBadInput, r.off, len(t.bin))
	}
	for i, tn := range r.out {
		if tn.Name == "" {
			return nil, fmt.Errorf("%w: input %q: missing (model inputs: %s)", ErrBadInput, model.Inputs[i].Name, r.names())
		}
	}
	return r.out, nil
}

// inputReader collects a task's tensors for one model.
type inputReader struct {
	model  tensor.ModelInfo
	budget int64 // elements left under the limit
	out    []tensor.Tensor
	off    int    // binary bytes consumed
	path   string // where form 1's list sits, for errors
	infer  bool   // an infer request: Task.infer
}

// HeaderInferenceLength is the binary tensor extension's header over HTTP:
// the length of the JSON part of an infer request's body (ParseInfer's
// headerLen).
const HeaderInferenceLength = "Inference-Header-Content-Length"

// binaryForm is how errors tell the client to send tensors raw: for a task
// or query the binary form's content type, for an infer request the
// binary tensor extension's header (Triton's, over HTTP).
func (r *inputReader) binaryForm() string {
	if r.infer {
		return "the binary tensor extension (the " + HeaderInferenceLength + " header giving the length of the JSON, the raw data after it)"
	}
	return "the binary form (content-type " + ContentTypeBinary + ")"
}

// fp16JSON refuses FP16 data in JSON, naming the way to send it.
func (r *inputReader) fp16JSON(name string) error {
	return badInput(name, "FP16 data needs %s; JSON numbers carry no half floats", r.binaryForm())
}

func (r *inputReader) names() string {
	var b strings.Builder
	for i, in := range r.model.Inputs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(in.String())
	}
	return b.String()
}

// slot returns the model input index for name, or an error for an unknown
// or repeated input.
func (r *inputReader) slot(name string) (int, error) {
	for i, in := range r.model.Inputs {
		if in.Name == name {
			if r.out[i].Name != "" {
				return 0, badInput(name, "given twice")
			}
			return i, nil
		}
	}
	return 0, badInput(name, "not an input of the model (inputs: %s)", r.names())
}

func badInput(name, format string, args ...any) error {
	return fmt.Errorf("%w: input %q: %w", ErrBadInput, name, fmt.Errorf(format, args...))
}

func mismatch(info tensor.TensorInfo, dt tensor.DType, shape []int64) error {
	return fmt.Errorf("%w: input %q: expected %s %s, got %s %s", ErrBadInput, info.Name,
		info.DType, tensor.FormatShape(info.Dims), dt, tensor.FormatShape(shape))
}

// fitShape adds the batch dim to one-row data (one dim fewer than the
// model's) and checks the shape against the model's dims. The error names
// the shape as sent, never the one with the added dim: the client never
// sent that.
func fitShape(info tensor.TensorInfo, sent []int64) ([]int64, error) {
	shape := sent
	if len(info.Dims) > 0 && len(shape) == len(info.Dims)-1 {
		shape = append([]int64{1}, shape...)
	}
	if len(shape) != len(info.Dims) {
		return nil, mismatch(info, info.DType, sent)
	}
	for k, d := range info.Dims {
		if d >= 0 && shape[k] != d {
			return nil, mismatch(info, info.DType, sent)
		}
	}
	return shape, nil
}

// take charges n elements to the budget.
func (r *inputReader) take(name string, n int64) error {
	if n > r.budget {
		return fmt.Errorf("%w: input %q: %w", ErrBadInput, name, errTooManyElements(r.budget))
	}
	r.budget -= n
	return nil
}

// capHint guesses the output size of JSON data of unknown shape: about
// eight bytes of text per element, within the budget.
func capHint(raw []byte, dt tensor.DType, budget int64) int {
	if dt == tensor.BYTES {
		return len(raw)
	}
	return int(min(int64(len(raw)/8+1), budget)) * dt.Size()
}

// oip reads form 1.
func (r *inputReader) oip(list []wireTensor, binary bool, bin []byte) error {
	for k, w := range list {
		name := w.name
		if name == "" {
			if w.problem == "" {
				w.problem = "no name"
			}
			return fmt.Errorf("%w: %s[%d]: %s", ErrBadInput, r.path, k, w.problem)
		}
		if w.problem != "" {
			return badInput(name, "%s", w.problem)
		}
		j, err := r.slot(name)
		if err != nil {
			return err
		}
		info := r.model.Inputs[j]
		dt, err := tensor.ParseDType(w.dtName)
		if err != nil {
			return badInput(name, "datatype: %w", err)
		}
		if dt != info.DType {
			return mismatch(info, dt, w.shape)
		}
		var tn tensor.Tensor
		switch {
		case w.hasRaw:
			tn, err = r.rawTensor(w, info, w.raw, "raw data")
		case w.binSize >= 0:
			tn, err = r.binaryTensor(w, info, binary, bin)
		case w.data != nil:
			tn, err = r.jsonTensor(w, info)
		default:
			err = badInput(name, "no data (want \"data\", or parameters.binary_data_size in the binary form)")
		}
		if err != nil {
			return err
		}
		tn.Name, tn.DType = info.Name, info.DType
		r.out[j] = tn
	}
	return nil
}

func (r *inputReader) jsonTensor(w wireTensor, info tensor.TensorInfo) (tensor.Tensor, error) {
	if info.DType == tensor.FP16 {
		return tensor.Tensor{}, r.fp16JSON(w.name)
	}
	if !w.hasShape { // shape from the nesting
		if !w.dec {
			tn, _, err := r.nested(w.name, info, w.data, 0)
			return tn, err
		}
		if w.decodeErr != nil {
			return tensor.Tensor{}, badInput(w.name, "%w", w.decodeErr)
		}
		return r.fit(w.name, info, w.decoded, w.got)
	}
	shape, err := fitShape(info, w.shape)
	if err != nil {
		return tensor.Tensor{}, err
	}
	n := tensor.NumElements(shape)
	if n < 0 {
		return tensor.Tensor{}, badInput(w.name, "shape %s overflows", tensor.FormatShape(w.shape))
	}
	// Every JSON element takes two bytes of text or more ("0,"), so a
	// shape the data cannot fill is refused before anything is allocated.
	if most := int64(len(w.data)/2 + 1); n > most {
		return tensor.Tensor{}, badInput(w.name, "shape %s has %d elements, data holds %d at most", tensor.FormatShape(w.shape), n, most)
	}
	if err := r.take(w.name, n); err != nil {
		return tensor.Tensor{}, err
	}
	data, got, err := w.decoded, w.got, w.decodeErr
	if !w.dec {
		hint := int(n) * info.DType.Size()
		if info.DType == tensor.BYTES {
			hint = int(n)*4 + len(w.data)
		}
		data, got, _, err = decodeArray(w.data, 0, info.DType, hint, n)
	} else if err == nil && tensor.NumElements(got) > n {
		err = errTooManyElements(n)
	}
	if err != nil {
		if errors.Is(err, ErrTooLarge) { // more elements than the shape says
			return tensor.Tensor{}, badInput(w.name, "data holds more than the %d elements of shape %s", n, tensor.FormatShape(w.shape))
		}
		return tensor.Tensor{}, badInput(w.name, "%w", err)
	}
	flat := len(got) <= 1 && tensor.NumElements(got) == n
	if !flat && !slices.Equal(got, w.shape) {
		return tensor.Tensor{}, badInput(w.name, "data has shape %s, the tensor says %s", tensor.FormatShape(got), tensor.FormatShape(w.shape))
	}
	return tensor.Tensor{Shape: shape, Data: data}, nil
}

// nested decodes the nested array at b[i], whose shape comes from the
// nesting, as the model's input info, and returns the offset past it.
func (r *inputReader) nested(name string, info tensor.TensorInfo, b []byte, i int) (tensor.Tensor, int, error) {
	if info.DType == tensor.FP16 {
		return tensor.Tensor{}, i, r.fp16JSON(name)
	}
	data, got, end, err := decodeArray(b, i, info.DType, capHint(b[i:], info.DType, r.budget), r.budget)
	if err != nil {
		return tensor.Tensor{}, end, badInput(name, "%w", err)
	}
	tn, err := r.fit(name, info, data, got)
	return tn, end, err
}

// fit checks decoded data of shape got against the model's input and
// charges it to the budget.
func (r *inputReader) fit(name string, info tensor.TensorInfo, data []byte, got []int64) (tensor.Tensor, error) {
	shape, err := fitShape(info, got)
	if err != nil {
		return tensor.Tensor{}, err
	}
	if err := r.take(name, tensor.NumElements(shape)); err != nil {
		return tensor.Tensor{}, err
	}
	return tensor.Tensor{Name: info.Name, DType: info.DType, Shape: shape, Data: data}, nil
}

// named reads form 2.
func (r *inputReader) named(kw []kwarg) error {
	for _, a := range kw {
		j, err := r.slot(a.name)
		if err != nil {
			return err
		}
		tn, _, err := r.nested(a.name, r.model.Inputs[j], a.raw, 0)
		if err != nil {
			return err
		}
		r.out[j] = tn
	}
	return nil
}

// args reads form 3: args holds exactly one element, the input's data,
// decoded in place (Parse validated the array).
func (r *inputReader) args(args []byte) error {
	i := skipWS(args, skipWS(args, 0)+1)
	switch {
	case i >= len(args) || args[i] == ']':
		return fmt.Errorf("%w: no inputs: want kwargs.inputs, kwargs {\"<input>\": array} or args[0]", ErrBadInput)
	case len(r.model.Inputs) != 1:
		return fmt.Errorf("%w: args: the model has %d inputs (%s); pass them by name in kwargs", ErrBadInput, len(r.model.Inputs), r.names())
	}
	tn, end, err := r.nested(r.model.Inputs[0].Name, r.model.Inputs[0], args, i)
	if err != nil {
		return err
	}
	if j := skipWS(args, end); j < len(args) && args[j] == ',' {
		n := 0
		eachElem(args, 0, func(v int) (int, error) { n++; return skipValue(args, v, 2) })
		return fmt.Errorf("%w: args: want one argument, the input's data, got %d", ErrBadInput, n)
	}
	r.out[0] = tn
	return nil
}
