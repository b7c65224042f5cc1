package consumer

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

var admitInfo = tensor.ModelInfo{
	Inputs:  []tensor.TensorInfo{{Name: "x", DType: tensor.FP32, Dims: []int64{-1, 4}}},
	Outputs: []tensor.TensorInfo{{Name: "y", DType: tensor.FP32, Dims: []int64{-1, 4}}},
}

// admitTable is queue "q" serving model "m" (and "small", with tight
// limits and a timeout).
func admitTable(t testing.TB) *modelTable {
	t.Helper()
	c := models.Config{Models: []models.Model{models.NewModel("m"), models.NewModel("small")}}
	for i := range c.Models {
		c.Models[i].Path, c.Models[i].Queue = "unused.onnx", "q"
	}
	c.SetDefaults()
	c.Models[1].Limits.MaxBodyBytes = 200
	c.Models[1].Limits.MaxTensorElements = 4
	c.Models[1].Timeout = models.Duration(time.Minute)
	mt := newModelTable("queue q")
	for i := range c.Models {
		if err := mt.add(&Model{Config: c.Models[i], Info: admitInfo, Version: "1"}); err != nil {
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
		verdict verdict
		want    []string // in the error
	}{
		{name: "runs", model: "m", inputs: "[" + x4 + "]", verdict: admitRun},
		{name: "unknown model", model: "nope", inputs: "[" + x4 + "]", verdict: admitUnknownModel, want: []string{`unknown model "nope"`, `"m", "small"`}},
		{name: "bad shape", model: "m", inputs: `[{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]`, verdict: admitBadInput,
			want: []string{`model "m": `, `input "x": expected FP32 [-1,4], got FP32 [1,3]`}},
		{name: "unknown input", model: "m", inputs: `[{"name":"z","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]`, verdict: admitBadInput, want: []string{`input "z"`}},
		{name: "too many elements", model: "small", inputs: "[" + big + "]", verdict: admitTooLarge,
			want: []string{`model "small": `, "max_tensor_elements 4"}},
		{name: "body over the model's limit", model: "small", inputs: "[" + x4 + "]", pad: true, verdict: admitTooLarge,
			want: []string{`model "small": `, "bytes is over the limit of 200 bytes (limits.max_body_bytes)"}},
		{name: "expired by the model's timeout", model: "small", inputs: "[" + x4 + "]", created: now.Add(-2 * time.Minute), verdict: admitExpired,
			want: []string{"deadline exceeded: the ", " expired at 2026-06-01T11:59:00.000000+00:00, before inference started"}},
		{name: "expired by timeout_ms", model: "m", inputs: "[" + x4 + "]", kwargs: `"timeout_ms":1000,`, created: now.Add(-time.Minute), verdict: admitExpired,
			want: []string{"deadline exceeded"}},
	} {
		for _, from := range []source{fromQueue, fromQuery, fromHTTP} {
			t.Run(tc.name+"/"+from.noun(), func(t *testing.T) {
				in := admission{from: from, received: now, tags: map[string]string{"traceparent": tpValid}, traced: true}
				var body string
				if from == fromHTTP {
					if tc.kwargs != "" || !tc.created.IsZero() {
						t.Skip("HTTP has no timeout_ms or created_at")
					}
					in.model = tc.model
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
				in.body = []byte(body)
				a := admit(in, mt)
				if a.verdict != tc.verdict {
					t.Fatalf("verdict %d (%v), want %d", a.verdict, a.err, tc.verdict)
				}
				for _, w := range tc.want {
					if a.err == nil || !strings.Contains(a.err.Error(), w) {
						t.Errorf("error %v does not say %q", a.err, w)
					}
				}
				if tc.verdict != admitRun {
					if a.inputs != nil {
						t.Error("a refused request has inputs")
					}
					return
				}
				if a.err != nil || len(a.inputs) != 1 || a.inputs[0].Name != "x" || a.model.Config.Name != "m" {
					t.Fatalf("admitted %+v", a)
				}
				if a.priority != (from != fromQueue) {
					t.Errorf("priority %v for a %s", a.priority, from.noun())
				}
				if got := a.remote.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" || !a.remote.IsRemote() {
					t.Errorf("remote span context %v", a.remote)
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
		in      admission
		verdict verdict
		want    string
	}{
		{"undecodable task", admission{from: fromQueue, body: []byte("not json")}, admitUndecodable, "undecodable task: "},
		{"undecodable query", admission{from: fromQuery, body: []byte("not json")}, admitUndecodable, "undecodable query: "},
		{"undecodable request", admission{from: fromHTTP, model: "m", body: []byte("not json")}, admitUndecodable, "undecodable request: "},
		{"trailing data", admission{from: fromHTTP, model: "m", body: []byte(`{"inputs":[]} {}`)}, admitUndecodable, "data after the JSON object"},
		{"no inputs", admission{from: fromHTTP, model: "m", body: []byte(`{"id":"x"}`)}, admitBadInput, `model "m": task: bad input: request body: "inputs": want an array`},
		{"inputs error names inputs", admission{from: fromHTTP, model: "m", body: []byte(`{"inputs":[{"shape":[1]}]}`)}, admitBadInput, `: inputs[0]: no name`},
		{"unknown model over HTTP", admission{from: fromHTTP, model: "nope", body: []byte(`{}`)}, admitUnknownModel, `unknown model "nope": queue q serves "m", "small"`},
		{"cancelled", admission{from: fromQueue, records: cancelledRecords{},
			body: []byte(`{"task_id":"t-cancel","task_name":"m","kwargs":{"inputs":[` + x4 + `]}}`)}, admitCancelled, "cancelled before inference started"},
		{"newline in task_id", admission{from: fromQueue, body: []byte(`{"task_id":"x\nC v 50","task_name":"m","kwargs":{"inputs":[` + x4 + `]}}`)},
			admitBadName, `invalid task: task: invalid name: task_id "x\nC v 50" has "\n" at byte 1`},
		{"space in a query's task_id", admission{from: fromQuery, body: []byte(`{"task_id":"a b","task_name":"m","kwargs":{"inputs":[` + x4 + `]}}`)},
			admitBadName, `invalid query: task: invalid name: task_id "a b" has " "`},
		{"query task_id from the tag", admission{from: fromQuery, tags: map[string]string{task.TagTaskID: "a>b"},
			body: []byte(`{"task_name":"m","kwargs":{"inputs":[` + x4 + `]}}`)}, admitBadName, `task_id "a>b" has ">"`},
		{"wildcard in an HTTP id", admission{from: fromHTTP, model: "m", body: []byte(`{"id":"r.*","inputs":[` + x4 + `]}`)},
			admitBadName, `invalid request: task: invalid name: id "r.*" has "*"`},
		{"task_id over the limit", admission{from: fromQueue, body: []byte(`{"task_id":"` + strings.Repeat("i", 300) + `","task_name":"m"}`)},
			admitBadName, `is 300 bytes, over the limit of 256`},
		{"reply_to tag", admission{from: fromQueue, tags: map[string]string{task.TagReplyTo: "replies."},
			body: []byte(`{"task_id":"t1","task_name":"m","kwargs":{"inputs":[` + x4 + `]}}`)}, admitBadName, `reply_to "replies." ends with '.'`},
		{"reply_to kwarg", admission{from: fromQueue, body: []byte(`{"task_id":"t1","task_name":"m","kwargs":{"reply_to":"events_store:x;queues:y","inputs":[` + x4 + `]}}`)},
			admitBadName, `reply_to "events_store:x;queues:y" has ":"`},
		{"dead letter queue", admission{from: fromQueue, deadLetter: "dlq/x",
			body: []byte(`{"task_id":"t1","task_name":"m","kwargs":{"inputs":[` + x4 + `]}}`)}, admitBadName, `dead letter queue (MaxReceiveQueue) "dlq/x" has "/"`},
		{"bad task_id of a body too large", admission{from: fromQueue, tags: map[string]string{task.TagTaskID: "t 1"},
			body: []byte(`{"task_id":"t 1","task_name":"small","args":[` + strings.Repeat("1,", 200) + `1]}`)}, admitBadName, `task_id "t 1"`},
		{"unknown model named by a huge task_name", admission{from: fromQueue, body: []byte(`{"task_id":"t1","task_name":"` + strings.Repeat("n", 5000) + `"}`)},
			admitUnknownModel, `...(5000 bytes)": queue q serves "m", "small"`},
		{"too large to name its model", admission{from: fromQueue, tags: map[string]string{task.TagTaskID: "t1"},
			body: []byte(`{"task_id":"t1","task_name":"small","args":[` + strings.Repeat("1,", 200) + `1]}`)}, admitTooLarge,
			`bytes is over the limit of 200 bytes (limits.max_body_bytes)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.received = now
			table := mt
			if strings.Contains(tc.name, "too large") {
				// Only the small model: its limit is the queue's.
				table = newModelTable("queue q")
				_ = table.add(mt.byName["small"])
			}
			a := admit(tc.in, table)
			if a.verdict != tc.verdict || a.err == nil || !strings.Contains(a.err.Error(), tc.want) {
				t.Fatalf("verdict %d, error %v; want %d with %q", a.verdict, a.err, tc.verdict, tc.want)
			}
			if tc.in.from != fromHTTP && (a.verdict == admitUndecodable || a.verdict == admitBadName) != (a.task == nil) {
				t.Errorf("task %v with verdict %d", a.task, a.verdict)
			}
			if a.verdict == admitBadName && (a.task != nil || a.model != nil || !errors.Is(a.err, task.ErrBadName) || len(a.err.Error()) > 300) {
				t.Errorf("refused names, kept task %v, model %v, error %v", a.task, a.model, a.err)
			}
			if len(a.err.Error()) > 1000 {
				t.Errorf("error of %d bytes", len(a.err.Error()))
			}
			if a.verdict == admitTooLarge && !errors.Is(a.err, task.ErrTooLarge) {
				t.Errorf("%v does not wrap task.ErrTooLarge", a.err)
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
		in := admission{from: source(from % 3), body: body, model: "m", received: time.Now(), records: cancelledRecords{}}
		a := admit(in, mt)
		if a.verdict != admitRun && a.err == nil {
			t.Fatalf("verdict %d without a reason", a.verdict)
		}
		if a.verdict == admitRun && (a.err != nil || len(a.inputs) != 1 || a.model == nil || a.task == nil) {
			t.Fatalf("runnable %+v", a)
		}
		if a.verdict == admitRun && (a.level < 1 || a.level > max(a.model.Config.Batching.PriorityLevels, 1)) {
			t.Fatalf("runnable at level %d, model %q has %d levels", a.level, a.model.Config.Name, a.model.Config.Batching.PriorityLevels)
		}
		if a.task != nil && a.verdict != admitUndecodable {
			for _, name := range []string{a.task.ID, a.task.ReplyTo} {
				if name != "" && task.CheckName("name", name) != nil {
					t.Fatalf("verdict %d for a task named %q", a.verdict, name)
				}
			}
		}
	})
}
