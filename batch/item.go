package batch

import (
	"errors"
	"fmt"
	"strings"

	"github.com/inferq/inferq/tensor"
)

// ErrClosed is wrapped by the error of a request that a closed batcher, or
// a closed runner, will never run.
var ErrClosed = errors.New("batch: closed")

// ErrInvalidInput is wrapped by every *InputError: the request does not fit
// the model, so running it again cannot help.
var ErrInvalidInput = errors.New("batch: invalid input")

// InputError says which input (or requested output) of an item does not
// fit the model and how. Its message names the input, the expected and the
// received datatype and shape, e.g.
//
//	input "x": expected FP32 [-1,16], got FP32 [1,15]
type InputError struct {
	// Kind is "input" or "output".
	Kind string
	Name string
	// Expected is the model's declaration; zero when Name is not the
	// model's.
	Expected tensor.TensorInfo
	// GotDType and GotShape are what the item carried; zero when the input
	// is missing.
	GotDType tensor.DType
	GotShape []int64
	// Problem replaces the expected/got comparison when that is not the
	// issue (missing, unknown); Detail is appended to it.
	Problem string
	Detail  string
}

func (e *InputError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q: ", e.Kind, e.Name)
	if e.Problem != "" {
		b.WriteString(e.Problem)
	} else {
		fmt.Fprintf(&b, "expected %s %s, got %s %s", e.Expected.DType, tensor.FormatShape(e.Expected.Dims), e.GotDType, tensor.FormatShape(e.GotShape))
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap returns ErrInvalidInput.
func (e *InputError) Unwrap() error { return ErrInvalidInput }

// Item is one request in a batch: its inputs by name, and the names of the
// outputs to return (all of them when Outputs is empty). Dim 0 of every
// input is the item's row count. RunBatch reads the inputs' data during the
// call and does not keep it.
type Item struct {
	Inputs  []tensor.Tensor
	Outputs []string
}

// ItemResult is the outcome of one item: its outputs, in the order asked
// for (model order when all), each with the item's rows only, or the error
// that failed this item alone.
type ItemResult struct {
	Outputs []tensor.Tensor
	Err     error
}
