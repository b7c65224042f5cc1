package infer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// RandomInputs builds random tensors for model from --shape specs (see
// tensor.ParseSpec; an input without a datatype gets dtype), else from the
// example models' signatures. Every error is the caller's to fix.
func RandomInputs(model string, specs []string, dtype string) ([]tensor.Tensor, error) {
	sig, _ := examples.Inputs(model)
	if len(specs) > 0 {
		defName := "x"
		if len(sig) == 1 {
			defName = sig[0].Name
		}
		sig = nil
		for _, s := range specs {
			ti, err := parseShapeSpec(s, defName, dtype)
			if err != nil {
				return nil, err
			}
			sig = append(sig, ti)
		}
	}
	if len(sig) == 0 {
		return nil, fmt.Errorf("no built-in signature for model %q (known: %s): give its inputs with --shape NAME:DTYPE:DIMS", model, strings.Join(examples.Names(), ", "))
	}
	r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	out := make([]tensor.Tensor, len(sig))
	for i, ti := range sig {
		t, err := tensor.Random(ti, r)
		if err != nil {
			return nil, fmt.Errorf("%v; use --input", err)
		}
		out[i] = t
	}
	return out, nil
}

// parseShapeSpec reads a --shape value (see tensor.ParseSpec).
func parseShapeSpec(s, defName, defDType string) (tensor.TensorInfo, error) {
	ti, err := tensor.ParseSpec(s, defName, defDType)
	if err != nil {
		return ti, fmt.Errorf("--shape %q: %v", s, err)
	}
	return ti, nil
}

// ReadInputs reads an Open Inference Protocol request file: {"inputs":
// [...]} or the bare list. The tensor objects are those of a response's
// outputs, so task's decoder reads them (nested or flat data, every
// datatype, shape checks). Every error is the caller's to fix.
func ReadInputs(path string) ([]tensor.Tensor, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--input: %v", err)
	}
	list := bytes.TrimSpace(b)
	if !bytes.HasPrefix(list, []byte("[")) {
		var req struct {
			Inputs json.RawMessage `json:"inputs"`
		}
		if err := json.Unmarshal(b, &req); err != nil {
			return nil, fmt.Errorf("--input %s: %v", path, err)
		}
		if len(req.Inputs) == 0 {
			return nil, fmt.Errorf(`--input %s: no "inputs" list`, path)
		}
		list = req.Inputs
	}
	resp, err := task.DecodeInferResponse(append(append([]byte(`{"outputs":`), list...), '}'), nil)
	if err != nil {
		msg := strings.ReplaceAll(err.Error(), "output ", "input ")
		return nil, fmt.Errorf("--input %s: %s", path, msg)
	}
	if len(resp.Outputs) == 0 {
		return nil, fmt.Errorf("--input %s: the inputs list is empty", path)
	}
	return resp.Tensors(), nil
}
