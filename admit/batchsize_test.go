package admit

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// rowsOfX is input x of the admit models with n rows of [1,2,3,4].
func rowsOfX(n int) string {
	data := strings.TrimSuffix(strings.Repeat("1,2,3,4,", n), ",")
	return `{"name":"x","shape":[` + strconv.Itoa(n) + `,4],"datatype":"FP32","data":[` + data + `]}`
}

// TestAdmitMaxBatchSize: one rule on every path (issue 25 item 8): a
// request of more rows than batching.max_batch_size is refused at
// admission as bad input, naming the field, the rows and the input, as a
// queued task, a query and an infer request (HTTP and gRPC admit as
// FromHTTP); it never reaches the batcher, which ran it as one run of
// that many rows. Up to max_batch_size rows run.
func TestAdmitMaxBatchSize(t *testing.T) {
	mt := admitTable(t)
	mt.byName["m"].Config.Batching.MaxBatchSize = 4
	now := time.Now()
	for _, rows := range []int{1, 4, 5, 65} {
		for _, from := range []Source{FromQueue, FromQuery, FromHTTP} {
			t.Run(strconv.Itoa(rows)+" rows/"+from.noun(), func(t *testing.T) {
				in := Input{From: from, Received: now}
				if from == FromHTTP {
					in.Model = "m"
					in.Body = []byte(`{"id":"r1","inputs":[` + rowsOfX(rows) + `]}`)
				} else {
					in.Body = []byte(`{"task_id":"t1","task_name":"m","kwargs":{"inputs":[` + rowsOfX(rows) + `]}}`)
				}
				a := mt.Admit(in)
				if rows <= 4 {
					if a.Verdict != Run {
						t.Fatalf("verdict %d (%v), want it run", a.Verdict, a.Err)
					}
					return
				}
				if a.Verdict != BadInput || a.Inputs != nil {
					t.Fatalf("verdict %d (%v), want bad input", a.Verdict, a.Err)
				}
				for _, w := range []string{`model "m": `, `input "x": ` + strconv.Itoa(rows) + ` rows (dim 0)`, "batching.max_batch_size 4"} {
					if !strings.Contains(a.Err.Error(), w) {
						t.Errorf("error %q does not say %q", a.Err, w)
					}
				}
			})
		}
	}
	// A request decoded from gRPC tensors gets the same answer.
	raw := make([]byte, 5*4*4)
	dec := task.NewInfer("r", []task.RawTensor{{Name: "x", Datatype: "FP32", Shape: []int64{5, 4}, Data: raw}}, nil, false, 200, Limits(&mt.byName["m"].Config))
	a := mt.Admit(Input{From: FromHTTP, Model: "m", Decoded: dec, Size: 200, Received: now})
	if a.Verdict != BadInput || !strings.Contains(a.Err.Error(), "batching.max_batch_size 4") {
		t.Errorf("gRPC request of 5 rows: verdict %d (%v), want bad input naming batching.max_batch_size", a.Verdict, a.Err)
	}
}

// MaxBatchSize is what a model advertises as Triton's max_batch_size and
// what admission enforces: batching.max_batch_size for a model whose
// inputs all have a variable dim 0 (the batcher stacks requests on it); 0
// for one that has an input without it (Triton's "no batch dim": its
// requests carry the model's dims as they are, and run one at a time).
func TestMaxBatchSize(t *testing.T) {
	c := models.NewModel("m")
	c.Batching.MaxBatchSize = 8
	for _, tc := range []struct {
		name string
		dims [][]int64
		want int
	}{
		{"variable dim 0", [][]int64{{-1, 4}}, 8},
		{"every input variable", [][]int64{{-1, 4}, {-1}}, 8},
		{"fixed dim 0", [][]int64{{1, 3, 224, 224}}, 0},
		{"one input fixed", [][]int64{{-1, 4}, {2}}, 0},
		{"a scalar input", [][]int64{{-1, 4}, {}}, 0},
	} {
		var info tensor.ModelInfo
		for i, d := range tc.dims {
			info.Inputs = append(info.Inputs, tensor.TensorInfo{Name: "i" + strconv.Itoa(i), DType: tensor.FP32, Dims: d})
		}
		if got := MaxBatchSize(&c, info); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	// A model without a batch dim is not refused for its rows: its dims
	// are checked as they are.
	mt := NewTable[*model]("queue q")
	m := &model{Config: c, Info: tensor.ModelInfo{Inputs: []tensor.TensorInfo{{Name: "x", DType: tensor.FP32, Dims: []int64{16, 4}}}}}
	m.Config.Limits.MaxBodyBytes, m.Config.Limits.MaxTensorElements = 1<<20, 1<<20
	if err := mt.Add(m); err != nil {
		t.Fatal(err)
	}
	a := mt.Admit(Input{From: FromQueue, Received: time.Now(),
		Body: []byte(`{"task_id":"t1","task_name":"m","kwargs":{"inputs":[` + rowsOfX(16) + `]}}`)})
	if a.Verdict != Run {
		t.Errorf("16 rows on a model of fixed dims [16,4]: verdict %d (%v), want it run", a.Verdict, a.Err)
	}
}
