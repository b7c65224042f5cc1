package task

import (
	"fmt"
	"mime"
	"strconv"
	"strings"

	"github.com/inferq/inferq/tensor"
)

// The binary form (Triton's binary tensor extension, carried over).
//
// Task and query request: tags content-type: application/vnd.inferq.binary
// and inference-header-content-length: n. The body's first n bytes are the
// task JSON; each tensor in kwargs.inputs with "parameters":
// {"binary_data_size": s} and no "data" takes the next s bytes after the
// header, in list order, as its raw little-endian row-major data (BYTES:
// per element a 4-byte little-endian length and the bytes). The sizes must
// add up to the bytes after the header exactly; fixed-size datatypes must
// match shape x element size exactly. Tensors with "data" may sit in the
// same list. FP16 travels only this way.
//
// Result record and query response: when any output is binary (the task
// asked with "parameters": {"binary_data_output": true} on an output in
// kwargs.outputs, or on kwargs.parameters for all), the body is the JSON
// record followed at once by the raw bytes of the binary outputs, in the
// order of result.outputs; each binary output carries "parameters":
// {"binary_data_size": s} and no "data". A reader finds the end of the JSON
// by parsing it, so the body stands alone (in a spool file, over HTTP); the
// writer also sets the content-type and inference-header-content-length
// tags for transports that keep tags. A Python client that never asks for
// binary outputs never sees this form.

// split returns the JSON part of the body, setting t.bin for the binary
// form.
func (t *Task) split(body []byte, tags map[string]string) ([]byte, error) {
	ct := strings.TrimSpace(t.ContentType)
	if ct == "" {
		return body, nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return nil, fmt.Errorf("%w: content-type %q: %v", ErrUndecodable, ct, err)
	}
	switch mt {
	case ContentTypeJSON, "text/json", "text/plain":
		return body, nil
	case ContentTypeBinary:
		hl := tags[TagHeaderLength]
		n, err := strconv.ParseInt(strings.TrimSpace(hl), 10, 64)
		if err != nil || n < 0 || n > int64(len(body)) {
			return nil, fmt.Errorf("%w: binary form: %s %q does not fit a body of %d bytes", ErrUndecodable, TagHeaderLength, hl, len(body))
		}
		t.Binary = true
		t.bin = body[n:]
		return body[:n], nil
	}
	return nil, fmt.Errorf("%w: content-type %q (want %s or %s)", ErrUndecodable, ct, ContentTypeJSON, ContentTypeBinary)
}

func (r *inputReader) binaryTensor(w wireTensor, info tensor.TensorInfo, binary bool, bin []byte) (tensor.Tensor, error) {
	switch {
	case !binary:
		return tensor.Tensor{}, badInput(w.name, "binary_data_size needs %s", r.binaryForm())
	case w.data != nil:
		return tensor.Tensor{}, badInput(w.name, "both data and binary_data_size")
	case !w.hasShape:
		return tensor.Tensor{}, badInput(w.name, "binary data needs a shape")
	}
	if left := int64(len(bin) - r.off); w.binSize > left {
		return tensor.Tensor{}, badInput(w.name, "binary_data_size %d overruns the binary data (%d bytes left of %d)", w.binSize, left, len(bin))
	}
	end := r.off + int(w.binSize)
	data := bin[r.off:end:end]
	r.off = end
	return r.rawTensor(w, info, data, "binary_data_size")
}

// rawTensor checks raw tensor data (the binary form's, or a RawTensor's)
// against the model's input: the shape, the element budget, the size
// (what names the size in errors), and BYTES elements. The tensor aliases
// data.
func (r *inputReader) rawTensor(w wireTensor, info tensor.TensorInfo, data []byte, what string) (tensor.Tensor, error) {
	shape, err := fitShape(info, w.shape)
	if err != nil {
		return tensor.Tensor{}, err
	}
	n := tensor.NumElements(shape)
	if n < 0 {
		return tensor.Tensor{}, badInput(w.name, "shape %s overflows", tensor.FormatShape(w.shape))
	}
	if err := r.take(w.name, n); err != nil {
		return tensor.Tensor{}, err
	}
	tn := tensor.Tensor{Name: w.name, DType: info.DType, Shape: shape, Data: data}
	if info.DType != tensor.BYTES {
		if want := n * int64(info.DType.Size()); int64(len(data)) != want {
			return tensor.Tensor{}, badInput(w.name, "%s is %d bytes, %s %s needs %d", what, len(data), info.DType, tensor.FormatShape(shape), want)
		}
		return tn, nil
	}
	if err := tn.Validate(); err != nil {
		return tensor.Tensor{}, badInput(w.name, "%w", err)
	}
	return tn, nil
}
