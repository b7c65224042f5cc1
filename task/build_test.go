package task

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/tensor"
)

var allDTypes = []tensor.DType{
	tensor.BOOL, tensor.UINT8, tensor.UINT16, tensor.UINT32, tensor.UINT64,
	tensor.INT8, tensor.INT16, tensor.INT32, tensor.INT64,
	tensor.FP16, tensor.FP32, tensor.FP64, tensor.BYTES,
}

// TestRoundTripEveryDType builds each datatype's task in both forms, parses
// it and reads the inputs back byte for byte.
func TestRoundTripEveryDType(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, dt := range allDTypes {
		for _, bin := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/binary=%v", dt, bin), func(t *testing.T) {
				model := tensor.ModelInfo{Inputs: []tensor.TensorInfo{info("a", dt, -1, 3, 2), info("b", dt, -1)}}
				a := randomTensor(r, "a", dt, []int64{4, 3, 2})
				b := randomTensor(r, "b", dt, []int64{5})
				opts := []Option{WithTimeout(2 * time.Second), WithReplyTo("replies"), WithPriority(5)}
				if bin {
					opts = append(opts, WithBinaryInputs())
				}
				body, tags, err := NewTask("id-1", "m", []tensor.Tensor{b, a}, opts...)
				if dt == tensor.FP16 && !bin {
					wantErr(t, err, ErrBadInput, `input "b": FP16 data needs the binary form`)
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				tk, err := Parse(body, tags, Limits{})
				if err != nil {
					t.Fatal(err)
				}
				if tk.ID != "id-1" || tk.Name != "m" || tk.Binary != bin || tk.ReplyTo != "replies" || tk.Priority != 5 || tk.Timeout != 2*time.Second {
					t.Fatalf("envelope %+v", tk)
				}
				if time.Since(tk.CreatedAt) > time.Minute {
					t.Fatalf("created_at %v", tk.CreatedAt)
				}
				got, err := tk.Inputs(model, Limits{})
				if err != nil {
					t.Fatal(err)
				}
				checkTensors(t, got, []tensor.Tensor{a, b})
				if !bin && !json.Valid(body) {
					t.Fatal("JSON form is not valid JSON")
				}
			})
		}
	}
}

func TestNewTaskForm(t *testing.T) {
	x := tensor.NewTensor("x", []int64{1, 2}, []float32{0.5, -1e-7})
	created := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	body, tags, err := NewTask("t1", "mlp", []tensor.Tensor{x}, WithCreatedAt(created),
		WithOutputs("y"), WithBinaryOutputs("z"), WithTraceParent("00-1-2-01"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"task_id":"t1","task_name":"mlp","args":[],"kwargs":{"inputs":[{"name":"x","shape":[1,2],"datatype":"FP32","data":[0.5,-1e-07]}],` +
		`"outputs":["y",{"name":"z","parameters":{"binary_data_output":true}}]},"created_at":"2026-06-01T12:00:00.000000+00:00"}`
	if string(body) != want {
		t.Errorf("body\n%s\nwant\n%s", body, want)
	}
	if tags[TagTaskID] != "t1" || tags[TagContentType] != ContentTypeJSON || tags[TagTraceParent] != "00-1-2-01" {
		t.Errorf("tags %v", tags)
	}
	body, tags, err = NewTask("t1", "mlp", []tensor.Tensor{x}, WithCreatedAt(created), WithBinaryInputs(), WithBinaryOutputs())
	if err != nil {
		t.Fatal(err)
	}
	hl, _ := strconv.Atoi(tags[TagHeaderLength])
	wantHeader := `{"task_id":"t1","task_name":"mlp","args":[],"kwargs":{"inputs":[{"name":"x","shape":[1,2],"datatype":"FP32","parameters":{"binary_data_size":8}}],` +
		`"parameters":{"binary_data_output":true}},"created_at":"2026-06-01T12:00:00.000000+00:00"}`
	if string(body[:hl]) != wantHeader || string(body[hl:]) != string(x.Data) || tags[TagContentType] != ContentTypeBinary {
		t.Errorf("binary body %q tags %v", body, tags)
	}
	// Invalid tensors are refused.
	_, _, err = NewTask("t", "m", []tensor.Tensor{{Name: "x", DType: tensor.FP32, Shape: []int64{2}, Data: []byte{1}}})
	wantErr(t, err, ErrBadInput, `input "x"`)
	// An empty id gets a UUID.
	_, tags, _ = NewTask("", "m", nil)
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(tags[TagTaskID]) {
		t.Errorf("generated id %q", tags[TagTaskID])
	}
}

func TestNewQuery(t *testing.T) {
	x := tensor.NewTensor("x", []int64{16}, make([]float32, 16))
	body, tags, err := NewQuery("mlp", []tensor.Tensor{x}, WithBinaryInputs())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tags[TagTaskID]; ok {
		t.Errorf("query tags %v", tags)
	}
	q, err := ParseQuery(body, tags, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := q.Inputs(mlpModel, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if q.ID != "" || !q.CreatedAt.IsZero() || len(got) != 1 || got[0].Shape[0] != 1 {
		t.Errorf("query %+v inputs %v", q, got)
	}
	if _, err := Parse(body, tags, Limits{}); err == nil {
		t.Error("Parse accepted a task without task_id")
	}
}

// TestMessageAdapterForm: the plain struct writes the adapter's body, and
// args[0] / kwargs by name read back as inputs.
func TestMessageAdapterForm(t *testing.T) {
	m := Message{TaskID: "f47ac10b", TaskName: "mlp", Args: []any{[][]float64{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}},
		CreatedAt: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), ReplyTo: "r"}
	body, tags, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"task_id":"f47ac10b","task_name":"mlp","args":[[[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]]],"kwargs":{},"created_at":"2026-06-01T12:00:00.000000+00:00"}`
	if string(body) != want || tags[TagReplyTo] != "r" || tags[TagTaskID] != "f47ac10b" {
		t.Fatalf("body %s tags %v", body, tags)
	}
	tk, err := Parse(body, tags, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tk.Inputs(mlpModel, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	checkTensors(t, got, []tensor.Tensor{{Name: "x", DType: tensor.FP32, Shape: []int64{1, 16}, Data: seqFloats(16, 0)}})

	m = Message{TaskName: "mlp", Kwargs: map[string]any{"x": []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}}
	body, tags, _ = m.Encode()
	tk, err = Parse(body, tags, Limits{})
	if err != nil || m.TaskID == "" || tk.ID != m.TaskID {
		t.Fatal(err, m.TaskID)
	}
	got, err = tk.Inputs(mlpModel, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	checkTensors(t, got, []tensor.Tensor{{Name: "x", DType: tensor.FP32, Shape: []int64{1, 16}, Data: seqFloats(16, 0)}})
	if _, _, err := (&Message{TaskName: "m", Args: []any{func() {}}}).Encode(); err == nil {
		t.Error("unencodable args accepted")
	}
}

// TestNewTaskNonFiniteInputs: a task's inputs keep the adapter's wire
// format, where Python's json writes NaN and the infinities as bare
// tokens (every inferq consumer, old ones included, reads them); only
// results, which any client reads, carry them as strings.
func TestNewTaskNonFiniteInputs(t *testing.T) {
	x := tensor.NewTensor("x", []int64{1, 3}, []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))})
	body, tags, err := NewTask("t", "m", []tensor.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), `"data":[NaN,Infinity,-Infinity]`) {
		t.Errorf("body %s", body)
	}
	tk, err := Parse(body, tags, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tk.Inputs(tensor.ModelInfo{Inputs: []tensor.TensorInfo{info("x", tensor.FP32, -1, 3)}}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	checkTensors(t, got, []tensor.Tensor{x})
}
