package task

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/inferq/inferq/tensor"
)

func TestParseInfer(t *testing.T) {
	x := `{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}`
	model := tensor.ModelInfo{Inputs: []tensor.TensorInfo{{Name: "x", DType: tensor.FP32, Dims: []int64{-1, 4}}}}
	tk, err := ParseInfer([]byte(`{"id":"r1","inputs":[`+x+`],"outputs":[{"name":"y","parameters":{"binary_data":true}},{"name":"z"}]}`), "", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if tk.ID != "r1" || tk.Name != "" || !tk.WantsBinary("y") || tk.WantsBinary("z") || len(tk.OutputNames()) != 2 {
		t.Errorf("task %+v", tk)
	}
	if in, err := tk.Inputs(model, Limits{}); err != nil || len(in) != 1 || in[0].Name != "x" {
		t.Errorf("inputs %v, %v", in, err)
	}
	header := `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}],"parameters":{"binary_data_output":true}}`
	tk, err = ParseInfer(append([]byte(header), make([]byte, 16)...), strconv.Itoa(len(header)), Limits{})
	if err != nil || !tk.Binary || !tk.WantsBinary("anything") {
		t.Fatalf("binary form: %+v, %v", tk, err)
	}
	if _, err := tk.Inputs(model, Limits{}); err != nil {
		t.Errorf("binary inputs: %v", err)
	}
	for _, c := range []struct {
		body, headerLen string
		err             error
		msg             string
	}{
		{`{"inputs":`, "", ErrUndecodable, "request body"},
		{`[]`, "", ErrUndecodable, "request body"},
		{`{"inputs":[]} {}`, "", ErrUndecodable, "data after the JSON object"},
		{`{"id":"x"}`, "", ErrBadInput, `"inputs": want an array`},
		{`{"id":5,"inputs":[]}`, "", ErrBadInput, `"id": want a string`},
		{`{"inputs":[],"outputs":[{}]}`, "", ErrBadInput, "an output without a name"},
		{`{"inputs":[],"parameters":[]}`, "", ErrBadInput, `"parameters"`},
		{`{"inputs":[]}`, "99", ErrUndecodable, "Inference-Header-Content-Length"},
		{`{"inputs":[]}` + strings.Repeat(" ", 64), "", ErrTooLarge, "limit 64"},
	} {
		_, err := ParseInfer([]byte(c.body), c.headerLen, Limits{MaxBodyBytes: 64})
		wantErr(t, err, c.err, c.msg)
	}
	// Errors from the tensors name "inputs", not kwargs.inputs.
	tk, _ = ParseInfer([]byte(`{"inputs":[{"shape":[1]}]}`), "", Limits{})
	if _, err := tk.Inputs(model, Limits{}); err == nil || !strings.Contains(err.Error(), "inputs[0]: ") || strings.Contains(err.Error(), "kwargs") {
		t.Errorf("inputs error %v", err)
	}
}

// FuzzParseQueryResponse: a response reads back the same after
// re-encoding; anything else is ErrMalformed.
func FuzzParseQueryResponse(f *testing.F) {
	for _, q := range []QueryResponse{
		{Status: StatusSuccess, Result: []byte(`{"model_name":"m","outputs":[]}`)},
		{Status: StatusFailure, Error: "boom \u00e9"},
		{Status: StatusSuccess, Result: []byte(`{"model_name":"m","outputs":[{"name":"y","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}}]}`), Binary: []byte{0, 0, 128, 63}},
	} {
		body, _ := q.Encode()
		f.Add(body)
	}
	f.Add([]byte(`{"status":"SUCCESS","result":null,"error":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		q, err := ParseQueryResponse(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatal(err)
			}
			return
		}
		back, _ := q.Encode()
		again, err := ParseQueryResponse(back)
		if err != nil {
			t.Fatalf("re-encoded %q: %v", back, err)
		}
		if again.Status != q.Status || again.Error != q.Error || !bytes.Equal(again.Result, q.Result) || !bytes.Equal(again.Binary, q.Binary) {
			t.Fatalf("round trip\n%+v\n%+v", q, again)
		}
	})
}

// FuzzParseProgress: an event reads back the same after re-encoding.
func FuzzParseProgress(f *testing.F) {
	body, _ := Progress{TaskID: "t", Pct: 50, Detail: "running: batch of 8"}.Encode()
	f.Add(body)
	f.Add([]byte(`{"task_id":"t","pct":99.6}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := ParseProgress(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatal(err)
			}
			return
		}
		back, _ := p.Encode()
		again, err := ParseProgress(back)
		if err != nil || again != p {
			t.Fatalf("round trip %+v -> %q -> %+v, %v", p, back, again, err)
		}
	})
}

// NewInferRequest writes what ParseInfer reads back, JSON and binary.
func TestNewInferRequestRoundTrip(t *testing.T) {
	info := tensor.ModelInfo{Inputs: []tensor.TensorInfo{{Name: "x", DType: tensor.FP32, Dims: []int64{-1, 2}}, {Name: "s", DType: tensor.BYTES, Dims: []int64{-1}}}}
	in := []tensor.Tensor{tensor.NewTensor("x", []int64{2, 2}, []float32{1, 2.5, -3, 4}), tensor.NewBytesTensor("s", []int64{2}, [][]byte{[]byte("a"), nil})}
	for _, binary := range []bool{false, true} {
		body, n, err := NewInferRequest(in, binary, binary)
		if err != nil {
			t.Fatal(err)
		}
		hl := ""
		if binary {
			hl = strconv.Itoa(n)
		} else if n != len(body) {
			t.Errorf("JSON: headerLen %d, body %d", n, len(body))
		}
		tk, err := ParseInfer(body, hl, Limits{})
		if err != nil {
			t.Fatalf("binary %v: %v\n%s", binary, err, body)
		}
		got, err := tk.Inputs(info, Limits{})
		if err != nil {
			t.Fatalf("binary %v: %v", binary, err)
		}
		for i := range in {
			if !bytes.Equal(got[i].Data, in[i].Data) {
				t.Errorf("binary %v: input %s: %x, want %x", binary, in[i].Name, got[i].Data, in[i].Data)
			}
		}
		if tk.BinaryOutputs != binary {
			t.Errorf("binary %v: BinaryOutputs %v", binary, tk.BinaryOutputs)
		}
	}
}
