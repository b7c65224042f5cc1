package runtime

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/tensor"
	ort "github.com/yalue/onnxruntime_go"
)

// closedError fails the items given to a closed Session: it is ErrClosed,
// and batch.ErrClosed for the layers above that know only the batcher.
type closedError struct{}

func (closedError) Error() string   { return ErrClosed.Error() }
func (closedError) Unwrap() []error { return []error{ErrClosed, batch.ErrClosed} }

// prepared is an item that passed validation.
type prepared struct {
	in   []*tensor.Tensor // in model input order
	rows int64
	out  []int // output indexes to return
}

// RunBatch runs items and returns one result per item, in order. Items
// whose per-item dims (every dim but dim 0, for every input) are equal are
// concatenated along dim 0 into one tensor per input, run once, and the
// outputs are split back by each item's row count; items with other
// per-item dims go in other runs. An item that does not fit the model gets
// a *batch.InputError and is not run. When a run of several items fails, the
// group is halved until the failing items are isolated, so only they get
// the error. ctx is checked before every onnxruntime run; items not run
// when it ends get ctx.Err().
//
// Every output is computed; batch.Item.Outputs only selects what is returned.
// RunBatch is safe for concurrent use.
func (s *Session) RunBatch(ctx context.Context, items []batch.Item) []batch.ItemResult {
	res := make([]batch.ItemResult, len(items))
	if len(items) == 0 {
		return res
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		for i := range res {
			res[i].Err = fmt.Errorf("runtime: model %q: %w", s.name, closedError{})
		}
		return res
	}

	sc := s.getScratch(len(items))
	defer s.putScratch(sc)
	preps, groups := s.prepareAll(items, res, sc)
	for _, g := range groups {
		s.runGroup(ctx, preps, g, res)
	}
	return res
}

// scratch holds RunBatch's per-item bookkeeping, reused across calls to
// spare the garbage collector: nothing in it outlives the call.
type scratch struct {
	preps []prepared
	slots []*tensor.Tensor
	valid []int
}

// maxPooledItems bounds the scratch kept for reuse.
const maxPooledItems = 4096

func (s *Session) getScratch(n int) *scratch {
	sc, _ := s.scratch.Get().(*scratch)
	if sc == nil {
		sc = new(scratch)
	}
	nIn := len(s.info.Inputs)
	if cap(sc.preps) < n {
		sc.preps = make([]prepared, n)
		sc.valid = make([]int, 0, n)
	}
	if cap(sc.slots) < n*nIn {
		sc.slots = make([]*tensor.Tensor, n*nIn)
	}
	sc.preps, sc.slots, sc.valid = sc.preps[:n], sc.slots[:n*nIn], sc.valid[:0]
	return sc
}

func (s *Session) putScratch(sc *scratch) {
	if cap(sc.preps) > maxPooledItems {
		return
	}
	clear(sc.preps) // drop the references to the callers' tensors
	clear(sc.slots)
	s.scratch.Put(sc)
}

// prepareAll validates every item (storing the errors in res) and groups
// the valid ones into runs.
func (s *Session) prepareAll(items []batch.Item, res []batch.ItemResult, sc *scratch) ([]prepared, [][]int) {
	nIn := len(s.info.Inputs)
	preps, slots, valid := sc.preps, sc.slots, sc.valid
	for i := range items {
		p := &preps[i]
		p.in = slots[i*nIn : (i+1)*nIn : (i+1)*nIn]
		if err := s.prepare(&items[i], p); err != nil {
			res[i].Err = err
			continue
		}
		valid = append(valid, i)
	}
	sc.valid = valid
	return preps, s.group(preps, valid)
}

// prepare validates one item against the model and fills p.
func (s *Session) prepare(it *batch.Item, p *prepared) error {
	model := s.info.Inputs
	for i := range it.Inputs {
		t := &it.Inputs[i]
		j := i
		if j >= len(model) || model[j].Name != t.Name {
			var ok bool
			if j, ok = s.inputIdx[t.Name]; !ok {
				return &batch.InputError{Kind: "input", Name: t.Name, GotDType: t.DType, GotShape: t.Shape,
					Problem: "unknown; the model takes " + listInfo(model)}
			}
		}
		if p.in[j] != nil {
			return &batch.InputError{Kind: "input", Name: t.Name, Expected: model[j], GotDType: t.DType, GotShape: t.Shape,
				Problem: "given twice"}
		}
		if err := checkInput(t, &model[j]); err != nil {
			return err
		}
		p.in[j] = t
	}
	for j, t := range p.in {
		if t == nil {
			return &batch.InputError{Kind: "input", Name: model[j].Name, Expected: model[j],
				Problem: fmt.Sprintf("missing, expected %s %s", model[j].DType, tensor.FormatShape(model[j].Dims))}
		}
	}
	p.rows = p.in[0].Shape[0]
	for j, t := range p.in[1:] {
		if t.Shape[0] != p.rows {
			return &batch.InputError{Kind: "input", Name: t.Name, Expected: model[j+1], GotDType: t.DType, GotShape: t.Shape,
				Detail: fmt.Sprintf("dim 0 (rows) is %d but input %q has %d; every input of an item has the same rows", t.Shape[0], p.in[0].Name, p.rows)}
		}
	}
	if len(it.Outputs) == 0 {
		p.out = s.allOutputs
		return nil
	}
	p.out = make([]int, len(it.Outputs))
	for i, name := range it.Outputs {
		k, ok := s.outputIdx[name]
		if !ok {
			return &batch.InputError{Kind: "output", Name: name, Problem: "unknown; the model outputs " + listInfo(s.info.Outputs)}
		}
		p.out[i] = k
	}
	return nil
}

// checkInput compares one tensor with the model's declaration.
func checkInput(t *tensor.Tensor, mi *tensor.TensorInfo) *batch.InputError {
	mismatch := func(detail string) *batch.InputError {
		return &batch.InputError{Kind: "input", Name: t.Name, Expected: *mi, GotDType: t.DType, GotShape: t.Shape, Detail: detail}
	}
	if t.DType != mi.DType || len(t.Shape) != len(mi.Dims) {
		return mismatch("")
	}
	for j, d := range mi.Dims {
		if d >= 0 && t.Shape[j] != d {
			return mismatch("")
		}
		if t.Shape[j] < 1 {
			return mismatch("every dim must be at least 1")
		}
	}
	n := tensor.NumElements(t.Shape)
	if n < 0 {
		return mismatch("too many elements")
	}
	if t.DType != tensor.BYTES {
		if want := n * int64(t.DType.Size()); int64(len(t.Data)) != want {
			return mismatch(fmt.Sprintf("data is %d bytes, the shape needs %d", len(t.Data), want))
		}
		return nil
	}
	var k int64
	for b := t.Data; len(b) > 0; k++ {
		e, rest, err := tensor.NextBytesElement(b)
		if err != nil {
			return mismatch(err.Error())
		}
		if bytes.IndexByte(e, 0) >= 0 {
			return mismatch(fmt.Sprintf("BYTES element %d holds a NUL byte; onnxruntime_go v1.35.0 passes strings to onnxruntime as C strings, which end there", k))
		}
		b = rest
	}
	if k != n {
		return mismatch(fmt.Sprintf("data holds %d BYTES elements, the shape needs %d", k, n))
	}
	return nil
}

func listInfo(l []tensor.TensorInfo) string {
	parts := make([]string, len(l))
	for i, t := range l {
		parts[i] = t.String()
	}
	return strings.Join(parts, ", ")
}

// group splits the valid items into runs: items whose per-item dims match,
// in order of first appearance. Each group is a slice of item indexes; all
// groups share one backing array.
func (s *Session) group(preps []prepared, valid []int) [][]int {
	if len(valid) == 0 {
		return nil
	}
	if !s.batchable || s.noBatching.Load() {
		groups := make([][]int, len(valid))
		for i := range valid {
			groups[i] = valid[i : i+1 : i+1]
		}
		return groups
	}
	reps := make([]int, 1, 4) // first item of each group
	reps[0] = valid[0]
	var gid, counts []int // group of each valid item, size of each group; nil while there is one group
	for i, v := range valid[1:] {
		g := 0
		if !samePerItemDims(&preps[reps[0]], &preps[v]) {
			g = -1
			for r, rep := range reps[1:] {
				if samePerItemDims(&preps[rep], &preps[v]) {
					g = r + 1
					break
				}
			}
			if g < 0 {
				g = len(reps)
				reps = append(reps, v)
			}
		}
		if g > 0 && gid == nil {
			gid = make([]int, len(valid)) // items so far are all in group 0
			counts = make([]int, 1, 4)
			counts[0] = i + 1
		}
		if gid != nil {
			gid[i+1] = g
			for len(counts) <= g {
				counts = append(counts, 0)
			}
			counts[g]++
		}
	}
	if len(reps) == 1 {
		return [][]int{valid}
	}
	order := make([]int, len(valid))
	starts := make([]int, len(reps))
	for g := 1; g < len(reps); g++ {
		starts[g] = starts[g-1] + counts[g-1]
	}
	groups := make([][]int, len(reps))
	for g := range reps {
		groups[g] = order[starts[g] : starts[g] : starts[g]+counts[g]]
	}
	for i, v := range valid {
		groups[gid[i]] = append(groups[gid[i]], v)
	}
	return groups
}

func samePerItemDims(a, b *prepared) bool {
	for j, t := range a.in {
		u := b.in[j]
		for k := 1; k < len(t.Shape); k++ {
			if t.Shape[k] != u.Shape[k] {
				return false
			}
		}
	}
	return true
}

// runGroup runs one group and stores each member's result.
func (s *Session) runGroup(ctx context.Context, preps []prepared, members []int, res []batch.ItemResult) {
	if err := ctx.Err(); err != nil {
		for _, m := range members {
			res[m].Err = err
		}
		return
	}
	outs, err := s.runOnce(preps, members)
	if err != nil {
		if len(members) > 1 {
			h := len(members) / 2
			s.runGroup(ctx, preps, members[:h], res)
			s.runGroup(ctx, preps, members[h:], res)
			return
		}
		res[members[0]].Err = err
		return
	}
	if len(members) == 1 {
		res[members[0]].Outputs = s.pick(outs, preps[members[0]].out)
		return
	}
	if err := s.split(outs, preps, members, res); err != nil {
		// An output whose dim 0 does not follow the batch: this model
		// cannot be batched. Say so once and run items one by one.
		if s.noBatching.CompareAndSwap(false, true) {
			s.logger.Warn("model outputs do not follow the batch dim; batching off", "model", s.name, "error", err)
		}
		for i := range members {
			s.runGroup(ctx, preps, members[i:i+1], res)
		}
	}
}

// pick returns the selected outputs of a single-item run.
func (s *Session) pick(outs []tensor.Tensor, sel []int) []tensor.Tensor {
	if len(sel) == len(outs) {
		identity := true
		for i, k := range sel {
			identity = identity && i == k
		}
		if identity {
			return outs
		}
	}
	r := make([]tensor.Tensor, len(sel))
	for i, k := range sel {
		r[i] = outs[k]
	}
	return r
}

// runOnce assembles the members' inputs, runs them once and returns every
// output for the whole group.
func (s *Session) runOnce(preps []prepared, members []int) ([]tensor.Tensor, error) {
	var rows int64
	for _, m := range members {
		rows += preps[m].rows
	}
	ins := make([]ort.Value, len(s.info.Inputs))
	defer destroyAll(ins)
	for j := range ins {
		v, err := s.assembleInput(j, preps, members, rows)
		if err != nil {
			return nil, fmt.Errorf("runtime: model %q: input %q: %w", s.name, s.info.Inputs[j].Name, err)
		}
		ins[j] = v
	}

	plan, guessed := s.outputPlan(rows, !s.noPrealloc.Load())
	outs, err := s.runWith(ins, plan)
	if err != nil && guessed && preallocRefused(err) {
		// A pre-allocated [rows, ...] output may not follow the batch (a
		// dynamic dim 0 that counts something else): let onnxruntime
		// allocate, and stop guessing if that works.
		var err2 error
		plan, _ = s.outputPlan(rows, false)
		if outs, err2 = s.runWith(ins, plan); err2 == nil {
			s.noPrealloc.Store(true)
			s.logger.Warn("pre-allocated outputs refused; outputs left to onnxruntime", "model", s.name, "error", err)
			err = nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("runtime: model %q: run %d items (%d rows) on %s: %w", s.name, len(members), rows, s.device, err)
	}
	return outs, nil
}

// preallocRefused reports whether onnxruntime refused a pre-allocated
// output for its shape ("The output OrtValue provided for output ... has
// shape {3,4} but the computed output shape for this run is {6,4}. When
// calling Run() with pre-allocated output OrtValues..." in 1.30; "Shape
// mismatch attempting to re-use buffer" before). Other errors are not
// worth a second run.
func preallocRefused(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "pre-allocated output") || strings.Contains(msg, "re-use buffer")
}

// assembleInput builds input j for the group: the members' rows
// concatenated along dim 0 into one new buffer, or the single member's own
// data when there is one.
func (s *Session) assembleInput(j int, preps []prepared, members []int, rows int64) (ort.Value, error) {
	mi := &s.info.Inputs[j]
	first := preps[members[0]].in[j]
	shape := make(ort.Shape, len(first.Shape))
	copy(shape, first.Shape)
	shape[0] = rows
	if mi.DType == tensor.BYTES {
		strs := make([]string, 0, tensor.NumElements(shape))
		for _, m := range members {
			for b := preps[m].in[j].Data; len(b) > 0; {
				e, rest, _ := tensor.NextBytesElement(b) // checked by checkInput
				strs = append(strs, string(e))
				b = rest
			}
		}
		st, err := ort.NewStringTensor(shape)
		if err != nil {
			return nil, err
		}
		if err := st.SetContents(strs); err != nil {
			_ = st.Destroy()
			return nil, err
		}
		return st, nil
	}
	data := first.Data
	if len(members) > 1 {
		n := 0
		for _, m := range members {
			n += len(preps[m].in[j].Data)
		}
		data = make([]byte, n)
		off := 0
		for _, m := range members {
			off += copy(data[off:], preps[m].in[j].Data)
		}
	}
	return ort.NewCustomDataTensor(shape, data, ortType(mi.DType))
}

// outputPlan returns, per output, the shape to pre-allocate for a run of
// rows rows, or nil to let onnxruntime allocate. Outputs whose dims are
// static apart from a dynamic dim 0 (taken to be the batch) are
// pre-allocated; with all unset, only FP16 ones, which onnxruntime_go
// cannot take from onnxruntime (see checkServable). guessed says whether a
// dynamic dim 0 was taken as rows for an output that did not need it.
func (s *Session) outputPlan(rows int64, all bool) (plan [][]int64, guessed bool) {
	plan = make([][]int64, len(s.info.Outputs))
	for k, o := range s.info.Outputs {
		if o.DType == tensor.BYTES || !preallocatable(o.Dims) || (!all && o.DType != tensor.FP16) {
			continue
		}
		shape := append([]int64(nil), o.Dims...)
		if shape[0] < 0 {
			shape[0] = rows
			guessed = guessed || o.DType != tensor.FP16
		}
		if tensor.NumElements(shape) > 0 {
			plan[k] = shape
		}
	}
	return plan, guessed
}

// runWith runs the session once, writing into pre-allocated buffers where
// plan has a shape and letting onnxruntime allocate elsewhere; it returns
// every output as a Tensor whose data is Go memory.
func (s *Session) runWith(ins []ort.Value, plan [][]int64) ([]tensor.Tensor, error) {
	vals := make([]ort.Value, len(s.info.Outputs))
	defer destroyAll(vals)
	outs := make([]tensor.Tensor, len(vals))
	for k, o := range s.info.Outputs {
		outs[k] = tensor.Tensor{Name: o.Name, DType: o.DType}
		if k >= len(plan) || plan[k] == nil {
			continue
		}
		buf := make([]byte, tensor.NumElements(plan[k])*int64(o.DType.Size()))
		v, err := ort.NewCustomDataTensor(plan[k], buf, ortType(o.DType))
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", o.Name, err)
		}
		vals[k] = v
		outs[k].Shape, outs[k].Data = plan[k], buf
	}
	if err := s.sess.Run(ins, vals); err != nil {
		return nil, err
	}
	for k := range vals {
		if outs[k].Data != nil {
			continue // pre-allocated
		}
		v := vals[k]
		if isNil(v) {
			return nil, fmt.Errorf("output %q: onnxruntime returned nothing", outs[k].Name)
		}
		outs[k].Shape = v.GetShape()
		data, err := valueBytes(v)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", outs[k].Name, err)
		}
		outs[k].Data = data
	}
	return outs, nil
}

// valueBytes returns an onnxruntime_go output's data as bytes. onnxruntime_go
// has already copied onnxruntime's memory into a Go slice (it releases the
// original), so numeric data is viewed, not copied again; strings are
// encoded as BYTES.
func valueBytes(v ort.Value) ([]byte, error) {
	switch t := v.(type) {
	case *ort.Tensor[float32]:
		return tensor.AsBytes(t.GetData()), nil
	case *ort.Tensor[float64]:
		return tensor.AsBytes(t.GetData()), nil
	case *ort.Tensor[int64]:
		return tensor.AsBytes(t.GetData()), nil
	case *ort.Tensor[int32]:
		return tensor.AsBytes(t.GetData()), nil
	case *ort.Tensor[int16]:
		return tensor.AsBytes(t.GetData()), nil
	case *ort.Tensor[int8]:
		return tensor.AsBytes(t.GetData()), nil
	case *ort.Tensor[uint64]:
		return tensor.AsBytes(t.GetData()), nil
	case *ort.Tensor[uint32]:
		return tensor.AsBytes(t.GetData()), nil
	case *ort.Tensor[uint16]:
		return tensor.AsBytes(t.GetData()), nil
	case *ort.Tensor[uint8]:
		return tensor.AsBytes(t.GetData()), nil
	case *ort.Tensor[bool]:
		return tensor.AsBytes(t.GetData()), nil
	case *ort.CustomDataTensor:
		return t.GetData(), nil
	case *ort.StringTensor:
		strs, err := t.GetContents()
		if err != nil {
			return nil, err
		}
		n := 0
		for _, s := range strs {
			n += 4 + len(s)
		}
		b := make([]byte, 0, n)
		for _, s := range strs {
			b = tensor.AppendBytesElement(b, s)
		}
		return b, nil
	}
	return nil, fmt.Errorf("unexpected onnxruntime_go value %T", v)
}

func destroyAll(vals []ort.Value) {
	for _, v := range vals {
		if !isNil(v) {
			_ = v.Destroy()
		}
	}
}

// isNil also catches the typed nil pointers onnxruntime_go leaves in a
// Run's outputs when converting one fails.
func isNil(v ort.Value) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// split hands each member its rows of every output it asked for. The
// members' outputs are capped sub-slices of the group's buffers.
func (s *Session) split(outs []tensor.Tensor, preps []prepared, members []int, res []batch.ItemResult) error {
	var rows int64
	for _, m := range members {
		rows += preps[m].rows
	}
	nm := len(members)
	var rowBytesArr [8]int
	rowBytes := rowBytesArr[:0]
	if len(outs) > len(rowBytesArr) {
		rowBytes = make([]int, 0, len(outs))
	}
	// For BYTES outputs, whose rows vary in size: the byte offset of each
	// member's first row, and the end, at bounds[k*(nm+1):].
	var bounds []int
	for k, o := range outs {
		if len(o.Shape) == 0 || o.Shape[0] != rows {
			return fmt.Errorf("output %q has shape %s for a batch of %d rows", o.Name, tensor.FormatShape(o.Shape), rows)
		}
		perRow := tensor.NumElements(o.Shape[1:])
		rowBytes = append(rowBytes, int(perRow)*o.DType.Size())
		if o.DType != tensor.BYTES {
			continue
		}
		if bounds == nil {
			bounds = make([]int, len(outs)*(nm+1))
		}
		b := bounds[k*(nm+1) : (k+1)*(nm+1)]
		data, off := o.Data, 0
		for i, m := range members {
			b[i] = off
			for e := int64(0); e < preps[m].rows*perRow; e++ {
				_, rest, err := tensor.NextBytesElement(data)
				if err != nil {
					return fmt.Errorf("output %q: %w", o.Name, err)
				}
				off += len(data) - len(rest)
				data = rest
			}
		}
		b[nm] = off
	}
	nOut, nShape := 0, 0
	for _, m := range members {
		nOut += len(preps[m].out)
		for _, k := range preps[m].out {
			nShape += len(outs[k].Shape)
		}
	}
	tensors := make([]tensor.Tensor, nOut)
	shapes := make([]int64, nShape)
	t, at, row := 0, 0, 0
	for i, m := range members {
		r := int(preps[m].rows)
		start := t
		for _, k := range preps[m].out {
			o := &outs[k]
			lo, hi := row*rowBytes[k], (row+r)*rowBytes[k]
			if o.DType == tensor.BYTES {
				lo, hi = bounds[k*(nm+1)+i], bounds[k*(nm+1)+i+1]
			}
			rank := len(o.Shape)
			sh := shapes[at : at+rank : at+rank]
			sh[0] = int64(r)
			copy(sh[1:], o.Shape[1:])
			at += rank
			tensors[t] = tensor.Tensor{Name: o.Name, DType: o.DType, Shape: sh, Data: o.Data[lo:hi:hi]}
			t++
		}
		res[m].Outputs = tensors[start:t:t]
		row += r
	}
	return nil
}
