package bench

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/tensor"
)

// The shape of one task's inputs. A model's fixed dims are what they are;
// its dynamic dims are the bench's choice: --shape INPUT=D1,D2,... gives
// them, else each is 1. A dynamic dim 0 is the batch dim: each task carries
// one row there, and the batcher joins tasks into batches of up to
// max_batch_size rows (--batch-sizes sweeps it), as it does in serve; a
// task of several rows would measure something else and fail the check of
// one row per output.

// ErrShape marks a --shape the caller has to fix: its syntax, or a shape
// that does not fit the model. Its text is the flag's, so that the errors
// read "--shape x=1,2: ...".
var ErrShape = errors.New("--shape")

// MaxDynamicDim bounds a dynamic dim given with --shape: sequence lengths
// and image sides sit far below it, and one above it is taken for a typo
// (1,3,224000,224) rather than allocated.
const MaxDynamicDim = 1 << 16

// MaxTaskInputBytes bounds one task's input tensor of a --shape: the
// largest request body serve takes by default (limits.max_body_bytes).
const MaxTaskInputBytes = models.DefaultMaxBodyBytes

// shapeArg is one --shape: an input's name and its dims in one task.
type shapeArg struct {
	text  string // as given
	input string
	dims  []int64
}

// parseShapes parses the --shape values, INPUT=D1,D2,..., each dim a
// positive integer. An input given twice is refused.
func parseShapes(vals []string) ([]shapeArg, error) {
	var out []shapeArg
	for _, v := range vals {
		a, err := parseShape(v)
		if err != nil {
			return nil, err
		}
		if i := slices.IndexFunc(out, func(b shapeArg) bool { return b.input == a.input }); i >= 0 {
			return nil, fmt.Errorf("%w %s: input %q is also given by --shape %s", ErrShape, v, a.input, out[i].text)
		}
		out = append(out, a)
	}
	return out, nil
}

func parseShape(v string) (shapeArg, error) {
	a := shapeArg{text: v}
	eq := strings.LastIndexByte(v, '=')
	if eq < 0 {
		return a, fmt.Errorf("%w %q: want INPUT=D1,D2,... (e.g. input=1,3,224,224)", ErrShape, v)
	}
	a.input = strings.TrimSpace(v[:eq])
	if a.input == "" {
		return a, fmt.Errorf("%w %q: no input name before '=' (want INPUT=D1,D2,...)", ErrShape, v)
	}
	dims := strings.TrimSpace(v[eq+1:])
	if dims == "" {
		return a, fmt.Errorf("%w %s: no dims after '=' (want INPUT=D1,D2,...)", ErrShape, v)
	}
	for j, f := range strings.Split(dims, ",") {
		d, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		switch {
		case err != nil:
			return a, fmt.Errorf("%w %s: dim %d %q is not an integer", ErrShape, v, j, f)
		case d < 1:
			return a, fmt.Errorf("%w %s: dim %d is %d; want a positive size", ErrShape, v, j, d)
		}
		a.dims = append(a.dims, d)
	}
	return a, nil
}

// taskShape is the shape of each of a model's inputs in one task, and how
// each came about, for the report.
type taskShape struct {
	model    string
	declared []tensor.TensorInfo // the model's inputs
	inputs   []tensor.TensorInfo // the same with the task's dims
	given    []bool              // per input: from --shape
}

// resolveShapes returns the task shape of each of the models names, whose
// inputs come from inputs, with the --shape args: each must name an input
// of at least one of them, and fit every one that has it.
func resolveShapes(names []string, inputs func(model string) ([]tensor.TensorInfo, error), args []shapeArg) (map[string]taskShape, error) {
	out := map[string]taskShape{}
	var have []string
	used := make([]bool, len(args))
	for _, name := range names {
		if _, ok := out[name]; ok {
			continue
		}
		info, err := inputs(name)
		if err != nil {
			return nil, err
		}
		if out[name], err = resolveShape(name, info, args); err != nil {
			return nil, err
		}
		ins := make([]string, len(info))
		for i, in := range info {
			ins[i] = in.String()
			for k, a := range args {
				used[k] = used[k] || a.input == in.Name
			}
		}
		have = append(have, fmt.Sprintf("%s (%s)", name, strings.Join(ins, ", ")))
	}
	for k, a := range args {
		if !used[k] {
			return nil, fmt.Errorf("%w %s: no model measured has an input %q; inputs: %s", ErrShape, a.text, a.input, strings.Join(have, "; "))
		}
	}
	return out, nil
}

// resolveShape returns the task shape of model's inputs info: the dims of
// the input args names (validated against the model), 1 for every other
// dynamic dim. args naming inputs model lacks are left to the caller.
func resolveShape(model string, info []tensor.TensorInfo, args []shapeArg) (taskShape, error) {
	ts := taskShape{model: model, declared: info, inputs: make([]tensor.TensorInfo, len(info)), given: make([]bool, len(info))}
	for i, in := range info {
		ts.inputs[i] = in
		dims := slices.Clone(in.Dims)
		for j, d := range dims {
			if d < 0 {
				dims[j] = 1
			}
		}
		if k := slices.IndexFunc(args, func(a shapeArg) bool { return a.input == in.Name }); k >= 0 {
			if err := fits(model, in, args[k]); err != nil {
				return ts, err
			}
			dims, ts.given[i] = slices.Clone(args[k].dims), true
		}
		ts.inputs[i].Dims = dims
	}
	return ts, nil
}

// fits checks that a gives in (an input of model) a task's shape: its
// rank, its fixed dims, one row in a dynamic dim 0 (the batch dim), the
// other dynamic dims within MaxDynamicDim, and the whole within
// MaxTaskInputBytes.
func fits(model string, in tensor.TensorInfo, a shapeArg) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %s: model %s input %s: %s", ErrShape, a.text, model, in, fmt.Sprintf(format, args...))
	}
	if len(a.dims) != len(in.Dims) {
		return bad("%d dims given, the input has %d", len(a.dims), len(in.Dims))
	}
	for j, d := range in.Dims {
		g := a.dims[j]
		switch {
		case d >= 0 && g != d:
			return bad("dim %d is %d; the model fixes it at %d", j, g, d)
		case d < 0 && j == 0 && g != 1:
			return bad("dim 0 is %d; it is the batch dim, one row per task (the batcher makes the batches: --batch-sizes sets their size): give 1", g)
		case d < 0 && g > MaxDynamicDim:
			return bad("dim %d is %d, over the bench's cap of %d for a dynamic dim", j, g, MaxDynamicDim)
		}
	}
	size := int64(max(in.DType.Size(), 1))
	if n := tensor.NumElements(a.dims); n < 0 || n > MaxTaskInputBytes/size {
		return bad("one task's input would hold %s elements of %d bytes, over the bench's cap of %d MiB per input (limits.max_body_bytes' default)",
			elements(a.dims), size, MaxTaskInputBytes>>20)
	}
	return nil
}

// elements is the number of elements of dims, in words when it overflows.
func elements(dims []int64) string {
	if n := tensor.NumElements(dims); n >= 0 {
		return strconv.FormatInt(n, 10)
	}
	return "more than 2^62"
}

// dynamicDims lists the dims of in that are dynamic, dim 0 excluded.
func dynamicDims(in tensor.TensorInfo) []int {
	var out []int
	for j, d := range in.Dims {
		if d < 0 && j > 0 {
			out = append(out, j)
		}
	}
	return out
}

// describe is the report's line for ts: each input with its task shape,
// and for dynamic dims set by default, that --shape sets them.
func (ts taskShape) describe() string {
	info := ts.declared
	parts := make([]string, len(ts.inputs))
	for i, in := range ts.inputs {
		parts[i] = fmt.Sprintf("%s %s %s", in.Name, in.Datatype(), tensor.FormatShape(in.Dims))
		dyn := dynamicDims(info[i])
		switch {
		case ts.given[i]:
			parts[i] += " (--shape)"
		case len(dyn) > 0:
			hint := make([]string, len(info[i].Dims))
			for j, d := range info[i].Dims {
				hint[j] = strconv.FormatInt(max(d, 1), 10)
				if slices.Contains(dyn, j) {
					hint[j] = fmt.Sprintf("D%d", j)
				}
			}
			ds := make([]string, len(dyn))
			for k, j := range dyn {
				ds[k] = strconv.Itoa(j)
			}
			parts[i] += fmt.Sprintf(" (dynamic dims %s set to 1: --shape %s=%s sets them)", strings.Join(ds, ","), in.Name, strings.Join(hint, ","))
		}
	}
	return ts.model + ": " + strings.Join(parts, ", ")
}
