package admit

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// model is a served model as the consumer's is: a configuration, tensors
// and a version.
type model struct {
	Config  models.Model
	Info    tensor.ModelInfo
	Version string
}

func (m *model) ModelConfig() *models.Model  { return &m.Config }
func (m *model) ModelInfo() tensor.ModelInfo { return m.Info }

var admitInfo = tensor.ModelInfo{
	Inputs:  []tensor.TensorInfo{{Name: "x", DType: tensor.FP32, Dims: []int64{-1, 4}}},
	Outputs: []tensor.TensorInfo{{Name: "y", DType: tensor.FP32, Dims: []int64{-1, 4}}},
}

// admitTable is queue "q" serving model "m" (and "small", with tight
// limits and a timeout).
func admitTable(t testing.TB) *Table[*model] {
	t.Helper()
	c := models.Config{Models: []models.Model{models.NewModel("m"), models.NewModel("small")}}
	for i := range c.Models {
		c.Models[i].Path, c.Models[i].Queue = "unused.onnx", "q"
	}
	c.SetDefaults()
	c.Models[1].Limits.MaxBodyBytes = 200
	c.Models[1].Limits.MaxTensorElements = 4
	c.Models[1].Timeout = models.Duration(time.Minute)
	mt := NewTable[*model]("queue q")
	for i := range c.Models {
		if err := mt.Add(&model{Config: c.Models[i], Info: admitInfo, Version: "1"}); err != nil {
			t.Fatal(err)
		}
	}
	return mt
}

// cancelledRecords reads t-cancel as CANCELLED.
type cancelledRecords struct{}

func (cancelledRecords) Get(id string) ([]byte, bool) {
	if id != "t-cancel" {
		return nil, false
	}
	b, _ := (&task.Record{TaskID: id, Status: task.StatusCancelled}).Encode()
	return b, true
}

const (
	x4      = `{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}`
	tpValid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
)

// The same request, as a task, a query and an HTTP request, gets the same
// verdict and the same words.
func TestAdmit(t *testing.T) {
	mt := admitTable(t)
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	big := `{"name":"x","shape":[2,4],"datatype":"FP32","data":[1,2,3,4,5,6,7,8]}`
	pad := strings.Repeat(" ", 300)
	for _, tc := range []struct {
		name    string
		model   string // the task_name, or the URL's model
		kwargs  string // task/query kwargs beyond inputs
		inputs  string // the inputs array
		pad     bool   // 300 bytes of white space in the body
		created time.Time
		verdict Verdict
		want    []string // in the error
	}{
		{name: "runs", model: "m", inputs: "[" + x4 + "]", verdict: Run},
		{name: "unknown model", model: "nope", inputs: "[" + x4 + "]", verdict: UnknownModel, want: []string{`unknown model "nope"`, `"m", "small"`}},
		{name: "bad shape", model: "m", inputs: `[{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]`, verdict: BadInput,
			want: []string{`model "m": `, `input "x": expected FP32 [-1,4], got FP32 [1,3]`}},
		{name: "unknown input", model: "m", inputs: `[{"name":"z","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]`, verdict: BadInput, want: []string{`input "z"`}},
		{name: "too many elements", model: "small", inputs: "[" + big + "]", verdict: TooLarge,
			want: []string{`model "small": `, "max_tensor_elements 4"}},
		{name: "body over the model's limit", model: "small", inputs: "[" + x4 + "]", pad: true, verdict: TooLarge,
			want: []string{`model "small": `, "bytes is over the limit of 200 bytes (limits.max_body_bytes)"}},
		{name: "expired by the model's timeout", model: "small", inputs: "[" + x4 + "]", created: now.Add(-2 * time.Minute), verdict: Expired,
			want: []string{"deadline exceeded: the ", " expired at 2026-06-01T11:59:00.000000+00:00, before inference started"}},
		{name: "expired by timeout_ms", model: "m", inputs: "[" + x4 + "]", kwargs: `"timeout_ms":1000,`, created: now.Add(-time.Minute), verdict: Expired,
			want: []string{"deadline exceeded"}},
	} {
		for _, from := range []Source{FromQueue, FromQuery, FromHTTP} {
			t.Run(tc.name+"/"+from.noun(), func(t *testing.T) {
				in := Input{From: from, Received: now, Tags: map[string]string{"traceparent": tpValid}, Traced: true}
				var body string
				if from == FromHTTP {
					if tc.kwargs != "" || !tc.created.IsZero() {
						t.Skip("HTTP has no timeout_ms or created_at")
					}
					in.Model = tc.model
					body = `{"id":"r1","inputs":` + tc.inputs + `}`
				} else {
					created := ""
					if !tc.created.IsZero() {
						created = `"created_at":"` + task.FormatTime(tc.created) + `",`
					}
					body = `{"task_id":"t1","task_name":"` + tc.model + `",` + created + `"kwargs":{` + tc.kwargs + `"inputs":` + tc.inputs + `}}`
				}
				if tc.pad {
					body += pad
				}
				in.Body = []byte(body)
				a := mt.Admit(in)
				if a.Verdict != tc.verdict {
					t.Fatalf("verdict %d (%v), want %d", a.Verdict, a.Err, tc.verdict)
				}
				for _, w := range tc.want {
					if a.Err == nil || !strings.Contains(a.Err.Error(), w) {
						t.Errorf("error %v does not say %q", a.Err, w)
					}
				}
				if tc.verdict != Run {
					if a.Inputs != nil {
						t.Error("a refused request has inputs")
					}
					return
				}
				if a.Err != nil || len(a.Inputs) != 1 || a.Inputs[0].Name != "x" || a.Model.Config.Name != "m" {
					t.Fatalf("admitted %+v", a)
				}
				if a.Priority != (from != FromQueue) {
					t.Errorf("priority %v for a %s", a.Priority, from.noun())
				}
				if got := a.Remote.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" || !a.Remote.IsRemote() {
					t.Errorf("remote span context %v", a.Remote)
				}
			})
		}
	}
}

func TestAdmitRefusals(t *testing.T) {
	mt := admitTable(t)
	now := time.Now()
	for _, tc := range []struct {
		name    string
		in      Input
		verdict Verdict
		want    string
	}{
		{"undecodable task", Input{From: FromQueue, Body: []byte("not json")}, Undecodable, "undecodable task: "},
		{"undecodable query", Input{From: FromQuery, Body: []byte("not json")}, Undecodable, "undecodable query: "},
		{"undecodable request", Input{From: FromHTTP, Model: "m", Body: []byte("not json")}, Undecodable, "undecodable request: "},
		{"trailing data", Input{From: FromHTTP, Model: "m", Body: []byte(`{"inputs":[]} {}`)}, Undecodable, "data after the JSON object"},
		{"no inputs", Input{From: FromHTTP, Model: "m", Body: []byte(`{"id":"x"}`)}, BadInput, `model "m": task: bad input: request body: "inputs": want an array`},
		{"inputs error names inputs", Input{From: FromHTTP, Model: "m", Body: []byte(`{"inputs":[{"shape":[1]}]}`)}, BadInput, `: inputs[0]: no name`},
		{"unknown model over HTTP", Input{From: FromHTTP, Model: "nope", Body: []byte(`{}`)}, UnknownModel, `unknown model "nope": queue q serves "m", "small"`},
		{"cancelled", Input{From: FromQueue, Records: cancelledRecords{},
			Body: []byte(`{"task_id":"t-cancel","task_name":"m","kwargs":{"inputs":[` + x4 + `]}}`)}, Cancelled, "cancelled before inference started"},
		{"newline in task_id", Input{From: FromQueue, Body: []byte(`{"task_id":"x\nC v 50","task_name":"m","kwargs":{"inputs":[` + x4 + `]}}`)},
			BadName, `invalid task: task: invalid name: task_id "x\nC v 50" has "\n" at byte 1`},
		{"space in a query's task_id", Input{From: FromQuery, Body: []byte(`{"task_id":"a b","task_name":"m","kwargs":{"inputs":[` + x4 + `]}}`)},
			BadName, `invalid query: task: invalid name: task_id "a b" has " "`},
		{"query task_id from the tag", Input{From: FromQuery, Tags: map[string]string{task.TagTaskID: "a>b"},
			Body: []byte(`{"task_name":"m","kwargs":{"inputs":[` + x4 + `]}}`)}, BadName, `task_id "a>b" has ">"`},
		{"wildcard in an HTTP id", Input{From: FromHTTP, Model: "m", Body: []byte(`{"id":"r.*","inputs":[` + x4 + `]}`)},
			BadName, `invalid request: task: invalid name: id "r.*" has "*"`},
		{"task_id over the limit", Input{From: FromQueue, Body: []byte(`{"task_id":"` + strings.Repeat("i", 300) + `","task_name":"m"}`)},
			BadName, `is 300 bytes, over the limit of 256`},
		{"reply_to tag", Input{From: FromQueue, Tags: map[string]string{task.TagReplyTo: "replies."},
			Body: []byte(`{"task_id":"t1","task_name":"m","kwargs":{"inputs":[` + x4 + `]}}`)}, BadName, `reply_to "replies." ends with '.'`},
		{"reply_to kwarg", Input{From: FromQueue, Body: []byte(`{"task_id":"t1","task_name":"m","kwargs":{"reply_to":"events_store:x;queues:y","inputs":[` + x4 + `]}}`)},
			BadName, `reply_to "events_store:x;queues:y" has ":"`},
		{"dead letter queue", Input{From: FromQueue, DeadLetter: "dlq/x",
			Body: []byte(`{"task_id":"t1","task_name":"m","kwargs":{"inputs":[` + x4 + `]}}`)}, BadName, `dead letter queue (MaxReceiveQueue) "dlq/x" has "/"`},
		{"bad task_id of a body too large", Input{From: FromQueue, Tags: map[string]string{task.TagTaskID: "t 1"},
			Body: []byte(`{"task_id":"t 1","task_name":"small","args":[` + strings.Repeat("1,", 200) + `1]}`)}, BadName, `task_id "t 1"`},
		{"unknown model named by a huge task_name", Input{From: FromQueue, Body: []byte(`{"task_id":"t1","task_name":"` + strings.Repeat("n", 5000) + `"}`)},
			UnknownModel, `...(5000 bytes)": queue q serves "m", "small"`},
		{"too large to name its model", Input{From: FromQueue, Tags: map[string]string{task.TagTaskID: "t1"},
			Body: []byte(`{"task_id":"t1","task_name":"small","args":[` + strings.Repeat("1,", 200) + `1]}`)}, TooLarge,
			`bytes is over the limit of 200 bytes (limits.max_body_bytes)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Received = now
			table := mt
			if strings.Contains(tc.name, "too large") {
				// Only the small model: its limit is the queue's.
				table = NewTable[*model]("queue q")
				_ = table.Add(mt.byName["small"])
			}
			a := table.Admit(tc.in)
			if a.Verdict != tc.verdict || a.Err == nil || !strings.Contains(a.Err.Error(), tc.want) {
				t.Fatalf("verdict %d, error %v; want %d with %q", a.Verdict, a.Err, tc.verdict, tc.want)
			}
			if tc.in.From != FromHTTP && (a.Verdict == Undecodable || a.Verdict == BadName) != (a.Task == nil) {
				t.Errorf("task %v with verdict %d", a.Task, a.Verdict)
			}
			if a.Verdict == BadName && (a.Task != nil || a.Model != nil || !errors.Is(a.Err, task.ErrBadName) || len(a.Err.Error()) > 300) {
				t.Errorf("refused names, kept task %v, model %v, error %v", a.Task, a.Model, a.Err)
			}
			if len(a.Err.Error()) > 1000 {
				t.Errorf("error of %d bytes", len(a.Err.Error()))
			}
			if a.Verdict == TooLarge && !errors.Is(a.Err, task.ErrTooLarge) {
				t.Errorf("%v does not wrap task.ErrTooLarge", a.Err)
			}
		})
	}
}

// FuzzAdmit feeds arbitrary bodies to every path: a verdict, never a panic;
// a refusal always says why; a runnable request has inputs.
func FuzzAdmit(f *testing.F) {
	f.Add([]byte(`{"task_id":"t1","task_name":"m","kwargs":{"inputs":[`+x4+`]}}`), uint8(0))
	f.Add([]byte(`{"id":"r","inputs":[`+x4+`],"outputs":[{"name":"y","parameters":{"binary_data":true}}]}`), uint8(2))
	f.Add([]byte(`{"task_name":"m","args":[[1,2,3,4]]}`), uint8(1))
	f.Add([]byte(`{"task_id":"a\nb","task_name":"m","kwargs":{"reply_to":"r.*","inputs":[`+x4+`]}}`), uint8(0))
	f.Add([]byte(`{"id":"a b","inputs":[`+x4+`]}`), uint8(2))
	f.Add([]byte(`{"task_id":"t1","task_name":"m","kwargs":{"priority":2,"inputs":[`+x4+`]}}`), uint8(0))
	f.Add([]byte(`{"id":"r","parameters":{"priority":1},"inputs":[`+x4+`]}`), uint8(2))
	mt := admitTable(f)
	mt.byName["m"].Config.Batching.PriorityLevels = 3
	f.Fuzz(func(t *testing.T, body []byte, from uint8) {
		in := Input{From: Source(from % 3), Body: body, Model: "m", Received: time.Now(), Records: cancelledRecords{}, JSONOutputs: from&4 != 0}
		a := mt.Admit(in)
		if a.Verdict != Run && a.Err == nil {
			t.Fatalf("verdict %d without a reason", a.Verdict)
		}
		if a.Verdict == Run && (a.Err != nil || len(a.Inputs) != 1 || a.Model == nil || a.Task == nil) {
			t.Fatalf("runnable %+v", a)
		}
		if a.Verdict == Run && (a.Level < 1 || a.Level > max(a.Model.Config.Batching.PriorityLevels, 1)) {
			t.Fatalf("runnable at level %d, model %q has %d levels", a.Level, a.Model.Config.Name, a.Model.Config.Batching.PriorityLevels)
		}
		if a.Task != nil && a.Verdict != Undecodable {
			for _, name := range []string{a.Task.ID, a.Task.ReplyTo} {
				if name != "" && task.CheckName("name", name) != nil {
					t.Fatalf("verdict %d for a task named %q", a.Verdict, name)
				}
			}
		}
	})
}
