package task

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/inferq/inferq/tensor"
)

// imageTensor is a normalised 3x224x224 image, as a preprocessing step
// writes it (values like -1.7582911).
func imageTensor() tensor.Tensor {
	r := rand.New(rand.NewPCG(7, 8))
	mean, std := [3]float32{0.485, 0.456, 0.406}, [3]float32{0.229, 0.224, 0.225}
	v := make([]float32, 3*224*224)
	for i := range v {
		c := i / (224 * 224)
		v[i] = (float32(r.IntN(256))/255 - mean[c]) / std[c]
	}
	return tensor.NewTensor("images", []int64{1, 3, 224, 224}, v)
}

// nestedJSON writes the tensor's data nested by its shape.
func nestedJSON(t tensor.Tensor, shape []int64) []byte {
	flat := appendData(nil, t, bareNonFinite)
	elems := splitTop(flat[1 : len(flat)-1])
	var b []byte
	var rec func(dims []int64, at int) int
	rec = func(dims []int64, at int) int {
		b = append(b, '[')
		for i := range dims[0] {
			if i > 0 {
				b = append(b, ',')
			}
			if len(dims) == 1 {
				b = append(b, elems[at]...)
				at++
			} else {
				at = rec(dims[1:], at)
			}
		}
		b = append(b, ']')
		return at
	}
	rec(shape, 0)
	return b
}

func splitTop(flat []byte) [][]byte {
	var out [][]byte
	start := 0
	for i, c := range flat {
		if c == ',' {
			out = append(out, flat[start:i])
			start = i + 1
		}
	}
	return append(out, flat[start:])
}

func benchTask(b *testing.B, body []byte, tags map[string]string, model tensor.ModelInfo) {
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		tk, err := Parse(body, tags, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tk.Inputs(model, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeImage reads one 3x224x224 FP32 image task, end to end
// (Parse + Inputs), in each form, against encoding/json decoding the bare
// array into []float32 (flat) or [][][]float32 (nested).
func BenchmarkDecodeImage(b *testing.B) {
	img := imageTensor()
	nested := nestedJSON(img, []int64{3, 224, 224})
	flat := appendData(nil, img, bareNonFinite)
	b.Run("args-nested", func(b *testing.B) {
		body := []byte(`{"task_id":"t","task_name":"resnet","args":[` + string(nested) + `],"kwargs":{},"created_at":"2026-06-01T12:00:00.000000+00:00"}`)
		benchTask(b, body, nil, imageModel)
	})
	b.Run("oip-nested", func(b *testing.B) {
		body := []byte(`{"task_id":"t","task_name":"resnet","args":[],"kwargs":{"inputs":[{"name":"images","shape":[3,224,224],"datatype":"FP32","data":` + string(nested) + `}]}}`)
		benchTask(b, body, nil, imageModel)
	})
	b.Run("oip-flat", func(b *testing.B) {
		body, tags, _ := NewTask("t", "resnet", []tensor.Tensor{img})
		benchTask(b, body, tags, imageModel)
	})
	b.Run("binary", func(b *testing.B) {
		body, tags, _ := NewTask("t", "resnet", []tensor.Tensor{img}, WithBinaryInputs())
		benchTask(b, body, tags, imageModel)
	})
	b.Run("encoding-json-flat", func(b *testing.B) {
		b.SetBytes(int64(len(flat)))
		b.ReportAllocs()
		for b.Loop() {
			var v []float32
			if err := json.Unmarshal(flat, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json-nested", func(b *testing.B) {
		b.SetBytes(int64(len(nested)))
		b.ReportAllocs()
		for b.Loop() {
			var v [][][]float32
			if err := json.Unmarshal(nested, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json-envelope", func(b *testing.B) {
		// The alternative to the hand walk: encoding/json reads the
		// envelope, json.RawMessage holds the data, the number decoder
		// decodes it.
		body, _, _ := NewTask("t", "resnet", []tensor.Tensor{img})
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var env struct {
				TaskID   string `json:"task_id"`
				TaskName string `json:"task_name"`
				Kwargs   struct {
					Inputs []struct {
						Name     string          `json:"name"`
						Shape    []int64         `json:"shape"`
						Datatype string          `json:"datatype"`
						Data     json.RawMessage `json:"data"`
					} `json:"inputs"`
				} `json:"kwargs"`
			}
			if err := json.Unmarshal(body, &env); err != nil {
				b.Fatal(err)
			}
			data := env.Kwargs.Inputs[0].Data
			if _, _, _, err := decodeArray(data, 0, tensor.FP32, 3*224*224*4, 1<<30); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoder-only", func(b *testing.B) {
		b.SetBytes(int64(len(nested)))
		b.ReportAllocs()
		for b.Loop() {
			if _, _, _, err := decodeArray(nested, 0, tensor.FP32, len(nested)/2, 1<<30); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("skip-only", func(b *testing.B) {
		b.SetBytes(int64(len(nested)))
		for b.Loop() {
			if _, err := skipValue(nested, 0, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodeMLP reads a 16-float task: the per-message overhead.
func BenchmarkDecodeMLP(b *testing.B) {
	x := tensor.NewTensor("x", []int64{1, 16}, []float32{0.1, -0.2, 0.3, 0.45, 1.5, -2.25, 3.125, 0, 1e-3, 7, 8.5, -9, 10.75, 0.0625, 12, 13.5})
	b.Run("oip-flat", func(b *testing.B) {
		body, tags, _ := NewTask("f47ac10b-58cc-4372-a567-0e02b2c3d479", "mlp", []tensor.Tensor{x}, WithReplyTo("replies"))
		benchTask(b, body, tags, mlpModel)
	})
	b.Run("args-nested", func(b *testing.B) {
		body, tags, _ := (&Message{TaskID: "f47ac10b-58cc-4372-a567-0e02b2c3d479", TaskName: "mlp",
			Args: []any{[][]float32{{0.1, -0.2, 0.3, 0.45, 1.5, -2.25, 3.125, 0, 1e-3, 7, 8.5, -9, 10.75, 0.0625, 12, 13.5}}}}).Encode()
		benchTask(b, body, tags, mlpModel)
	})
	b.Run("binary", func(b *testing.B) {
		body, tags, _ := NewTask("f47ac10b-58cc-4372-a567-0e02b2c3d479", "mlp", []tensor.Tensor{x}, WithBinaryInputs())
		benchTask(b, body, tags, mlpModel)
	})
	b.Run("encoding-json", func(b *testing.B) {
		body, _, _ := NewTask("f47ac10b-58cc-4372-a567-0e02b2c3d479", "mlp", []tensor.Tensor{x}, WithReplyTo("replies"))
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var v struct {
				TaskID    string `json:"task_id"`
				TaskName  string `json:"task_name"`
				Args      []any  `json:"args"`
				CreatedAt string `json:"created_at"`
				Kwargs    struct {
					ReplyTo string `json:"reply_to"`
					Inputs  []struct {
						Name     string    `json:"name"`
						Shape    []int64   `json:"shape"`
						Datatype string    `json:"datatype"`
						Data     []float32 `json:"data"`
					} `json:"inputs"`
				} `json:"kwargs"`
			}
			if err := json.Unmarshal(body, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEncodeRecord writes a SUCCESS record whose result holds the
// given FP32 output, against encoding/json of the same shape.
func BenchmarkEncodeRecord(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct {
		name  string
		shape []int64
	}{{"logits-1x1000", []int64{1, 1000}}, {"mlp-1x4", []int64{1, 4}}, {"image-1x3x224x224", []int64{1, 3, 224, 224}}} {
		v := make([]float32, tensor.NumElements(c.shape))
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		y := tensor.NewTensor("y", c.shape, v)
		now := time.Now()
		b.Run(c.name+"/inferq", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				result, bin, err := NewInferResponse("m", "1", []tensor.Tensor{y}, nil).Encode()
				if err != nil {
					b.Fatal(err)
				}
				rec := Record{TaskID: "f47ac10b-58cc-4372-a567-0e02b2c3d479", Status: StatusSuccess, Result: result, Binary: bin, CreatedAt: now, CompletedAt: now, Attempts: 1}
				body, _ := rec.Encode()
				b.SetBytes(int64(len(body)))
			}
		})
		b.Run(c.name+"/inferq-binary", func(b *testing.B) {
			b.ReportAllocs()
			tk := &Task{BinaryOutputs: true}
			for b.Loop() {
				result, bin, _ := NewInferResponse("m", "1", []tensor.Tensor{y}, tk).Encode()
				rec := Record{TaskID: "f47ac10b-58cc-4372-a567-0e02b2c3d479", Status: StatusSuccess, Result: result, Binary: bin, CreatedAt: now, CompletedAt: now}
				rec.Encode()
			}
		})
		b.Run(c.name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			type out struct {
				Name     string    `json:"name"`
				Shape    []int64   `json:"shape"`
				Datatype string    `json:"datatype"`
				Data     []float32 `json:"data"`
			}
			type resp struct {
				ModelName    string `json:"model_name"`
				ModelVersion string `json:"model_version"`
				Outputs      []out  `json:"outputs"`
			}
			type record struct {
				TaskID      string `json:"task_id"`
				Status      string `json:"status"`
				Result      resp   `json:"result"`
				CreatedAt   string `json:"created_at"`
				CompletedAt string `json:"completed_at"`
				Attempts    int    `json:"attempts"`
			}
			for b.Loop() {
				body, err := json.Marshal(record{TaskID: "f47ac10b-58cc-4372-a567-0e02b2c3d479", Status: "SUCCESS",
					Result:    resp{ModelName: "m", ModelVersion: "1", Outputs: []out{{Name: "y", Shape: c.shape, Datatype: "FP32", Data: v}}},
					CreatedAt: FormatTime(now), CompletedAt: FormatTime(now), Attempts: 1})
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(body)))
			}
		})
	}
}

// BenchmarkParseRecord decodes a 1x1000 logits record back to tensors.
// BenchmarkParseRecord reads a SUCCESS record and its response, as a
// producer does for every result: a 1x1000 output (logits), and the mlp's
// 1x4 (the bench's queue mode, thousands a second).
func BenchmarkParseRecord(b *testing.B) {
	for _, n := range []int64{1000, 4} {
		b.Run(fmt.Sprintf("outputs=1x%d", n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(11, 12))
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(r.NormFloat64())
			}
			result, _, _ := NewInferResponse("m", "1", []tensor.Tensor{tensor.NewTensor("y", []int64{1, n}, v)}, nil).Encode()
			body, _ := (&Record{TaskID: "0b9d3c1e-6f1a-4c55-9a43-1b0f7d2e8a11", Status: StatusSuccess, Result: result,
				CreatedAt: time.Now(), CompletedAt: time.Now(), Attempts: 1, Worker: "inferq-0"}).Encode()
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				rec, err := ParseRecord(body)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := rec.Response(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
