package task

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/tensor"
)

func TestParseEnvelope(t *testing.T) {
	body := `{"task_id": "f47ac10b-58cc-4372-a567-0e02b2c3d479", "task_name": "classify", "args": ["great product"], "kwargs": {}, "created_at": "2026-06-01T12:00:00.000000+00:00"}`
	tk, err := Parse([]byte(body), map[string]string{TagTraceParent: "00-abc-def-01", TagAttempt: "3"}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if tk.ID != "f47ac10b-58cc-4372-a567-0e02b2c3d479" || tk.Name != "classify" {
		t.Errorf("id, name = %q, %q", tk.ID, tk.Name)
	}
	if string(tk.Args) != `["great product"]` || string(tk.Kwargs) != `{}` {
		t.Errorf("args, kwargs = %s, %s", tk.Args, tk.Kwargs)
	}
	if want := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC); !tk.CreatedAt.Equal(want) {
		t.Errorf("created_at = %v", tk.CreatedAt)
	}
	if tk.TraceParent != "00-abc-def-01" || tk.Attempt != 3 || tk.Binary || tk.Size != len(body) {
		t.Errorf("tags: %+v", tk)
	}
	if _, ok := tk.Deadline(time.Now()); ok {
		t.Error("deadline without timeout_ms")
	}
}

func TestParseKwargsControls(t *testing.T) {
	body := `{"task_id":"t1","task_name":"m","args":[],"kwargs":{
		"outputs":["a",{"name":"b","parameters":{"binary_data_output":true}}],
		"parameters":{"binary_data_output":false,"other":1},
		"priority":-3,"timeout_ms":1500,"reply_to":"replies-p1","x":[1,2]},
		"created_at":"2026-06-01T12:00:00Z"}`
	tk, err := Parse([]byte(body), nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.OutputNames(); strings.Join(got, ",") != "a,b" {
		t.Errorf("outputs = %v", got)
	}
	if tk.WantsBinary("a") || !tk.WantsBinary("b") || tk.WantsBinary("c") {
		t.Errorf("binary outputs: %+v", tk.Outputs)
	}
	if tk.Priority != -3 || tk.Timeout != 1500*time.Millisecond || tk.ReplyTo != "replies-p1" {
		t.Errorf("priority %d timeout %v reply_to %q", tk.Priority, tk.Timeout, tk.ReplyTo)
	}
	if len(tk.named) != 1 || tk.named[0].name != "x" || string(tk.named[0].raw) != "[1,2]" {
		t.Errorf("named kwargs = %+v", tk.named)
	}
	dl, ok := tk.Deadline(time.Time{})
	if want := time.Date(2026, 6, 1, 12, 0, 1, 5e8, time.UTC); !ok || !dl.Equal(want) {
		t.Errorf("deadline = %v %v, want %v", dl, ok, want)
	}
	// The tag wins over kwargs.reply_to.
	tk, _ = Parse([]byte(body), map[string]string{TagReplyTo: "tagged"}, Limits{})
	if tk.ReplyTo != "tagged" {
		t.Errorf("reply_to = %q, want the tag's", tk.ReplyTo)
	}
	// All outputs binary.
	tk, _ = Parse([]byte(`{"task_id":"t","task_name":"m","kwargs":{"parameters":{"binary_data_output":true}}}`), nil, Limits{})
	if !tk.WantsBinary("anything") {
		t.Error("parameters.binary_data_output ignored")
	}
	// Without created_at the deadline counts from receipt.
	tk, _ = Parse([]byte(`{"task_id":"t","task_name":"m","kwargs":{"timeout_ms":10}}`), nil, Limits{})
	recv := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if dl, ok := tk.Deadline(recv); !ok || !dl.Equal(recv.Add(10*time.Millisecond)) {
		t.Errorf("deadline = %v %v", dl, ok)
	}
}

func TestParseTime(t *testing.T) {
	want := time.Date(2026, 6, 1, 12, 0, 0, 123456000, time.UTC)
	for _, s := range []string{
		"2026-06-01T12:00:00.123456+00:00",
		"2026-06-01T12:00:00.123456Z",
		"2026-06-01T14:00:00.123456+02:00",
		"2026-06-01 12:00:00.123456+00:00",
		"2026-06-01T12:00:00.123456",
	} {
		got, ok := ParseTime(s)
		if !ok || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("ParseTime(%q) = %v %v", s, got, ok)
		}
	}
	for _, s := range []string{"2026-06-01T12:00:00Z", "2026-06-01T12:00:00+00:00", "2026-06-01T12:00:00"} {
		if got, ok := ParseTime(s); !ok || !got.Equal(want.Truncate(time.Second)) {
			t.Errorf("ParseTime(%q) = %v %v", s, got, ok)
		}
	}
	for _, s := range []string{"", "yesterday", "2026-13-01T00:00:00Z", "1717243200"} {
		if _, ok := ParseTime(s); ok {
			t.Errorf("ParseTime(%q) ok", s)
		}
	}
	if got := FormatTime(time.Date(2026, 6, 1, 14, 0, 0, 0, time.FixedZone("x", 7200))); got != "2026-06-01T12:00:00.000000+00:00" {
		t.Errorf("FormatTime = %q", got)
	}
	// A bad created_at is unset, not an error.
	tk, err := Parse([]byte(`{"task_id":"t","task_name":"m","created_at":"soon"}`), nil, Limits{})
	if err != nil || !tk.CreatedAt.IsZero() {
		t.Errorf("bad created_at: %v %v", tk, err)
	}
	tk, err = Parse([]byte(`{"task_id":"t","task_name":"m","created_at":17}`), nil, Limits{})
	if err != nil || !tk.CreatedAt.IsZero() {
		t.Errorf("numeric created_at: %v %v", tk, err)
	}
}

// parseCases are envelope failures; the fuzz corpus is seeded from them.
var parseCases = []struct {
	name     string
	body     string
	tags     map[string]string
	sentinel error
	msg      string
	hasTask  bool // a Task comes back with the error
}{
	{"not json", `hello`, nil, ErrUndecodable, "not a JSON object", false},
	{"empty", ``, nil, ErrUndecodable, "not a JSON object", false},
	{"array", `[1,2]`, nil, ErrUndecodable, "not a JSON object", false},
	{"truncated", `{"task_id":"t","task_name":"m","args":[1,`, nil, ErrUndecodable, "invalid JSON", false},
	{"trailing", `{"task_id":"t","task_name":"m"} x`, nil, ErrUndecodable, "after the JSON object", false},
	{"no id", `{"task_name":"m"}`, nil, ErrUndecodable, "no task_id", false},
	{"numeric id", `{"task_id":7,"task_name":"m"}`, nil, ErrUndecodable, "no task_id", false},
	{"empty id", `{"task_id":"","task_name":"m"}`, nil, ErrUndecodable, "no task_id", false},
	{"no name", `{"task_id":"t"}`, nil, ErrUndecodable, "no task_name", false},
	{"bad escape", `{"task_id":"t\q","task_name":"m"}`, nil, ErrUndecodable, "invalid escape", false},
	{"deep", `{"task_id":"t","task_name":"m","args":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`, nil, ErrUndecodable, "nested too deeply", false},
	{"unknown content type", `{"task_id":"t","task_name":"m"}`, map[string]string{TagContentType: "application/msgpack"}, ErrUndecodable, "content-type", false},
	{"binary no length", `{"task_id":"t","task_name":"m"}`, map[string]string{TagContentType: ContentTypeBinary}, ErrUndecodable, TagHeaderLength, false},
	{"binary length beyond body", `{"task_id":"t","task_name":"m"}`, map[string]string{TagContentType: ContentTypeBinary, TagHeaderLength: "999"}, ErrUndecodable, "does not fit a body of 31 bytes", false},
	{"binary negative length", `{"task_id":"t","task_name":"m"}`, map[string]string{TagContentType: ContentTypeBinary, TagHeaderLength: "-1"}, ErrUndecodable, TagHeaderLength, false},
	{"binary short header", `{"task_id":"t","task_name":"m"}`, map[string]string{TagContentType: ContentTypeBinary, TagHeaderLength: "10"}, ErrUndecodable, "invalid JSON", false},
	{"kwargs not object", `{"task_id":"t","task_name":"m","kwargs":[1]}`, nil, ErrBadInput, "kwargs: want an object", true},
	{"args not array", `{"task_id":"t","task_name":"m","args":{"a":1}}`, nil, ErrBadInput, "args: want an array", true},
	{"bad priority", `{"task_id":"t","task_name":"m","kwargs":{"priority":"high"}}`, nil, ErrBadInput, "kwargs.priority", true},
	{"fractional priority", `{"task_id":"t","task_name":"m","kwargs":{"priority":1.5}}`, nil, ErrBadInput, "kwargs.priority", true},
	{"negative timeout", `{"task_id":"t","task_name":"m","kwargs":{"timeout_ms":-1}}`, nil, ErrBadInput, "kwargs.timeout_ms", true},
	{"bad outputs", `{"task_id":"t","task_name":"m","kwargs":{"outputs":"y"}}`, nil, ErrBadInput, "kwargs.outputs", true},
	{"output without name", `{"task_id":"t","task_name":"m","kwargs":{"outputs":[{"parameters":{}}]}}`, nil, ErrBadInput, "without a name", true},
	{"bad reply_to", `{"task_id":"t","task_name":"m","kwargs":{"reply_to":5}}`, nil, ErrBadInput, "kwargs.reply_to", true},
	{"bad binary_data_output", `{"task_id":"t","task_name":"m","kwargs":{"parameters":{"binary_data_output":1}}}`, nil, ErrBadInput, "binary_data_output", true},
	{"bad progress", `{"task_id":"t","task_name":"m","kwargs":{"parameters":{"progress":"off"}}}`, nil, ErrBadInput, `kwargs.parameters.progress: want true or false, got "off"`, true},
	{"null progress", `{"task_id":"t","task_name":"m","kwargs":{"parameters":{"progress":null}}}`, nil, ErrBadInput, "kwargs.parameters.progress", true},
	{"inputs not array", `{"task_id":"t","task_name":"m","kwargs":{"inputs":{}}}`, nil, ErrBadInput, "kwargs.inputs", true},
	// A syntax error after a bad control field is still undecodable.
	{"bad field then syntax", `{"task_id":"t","task_name":"m","kwargs":{"priority":"x"},"args":[}`, nil, ErrUndecodable, "invalid JSON", false},
}

func TestParseErrors(t *testing.T) {
	for _, c := range parseCases {
		t.Run(c.name, func(t *testing.T) {
			tk, err := Parse([]byte(c.body), c.tags, Limits{})
			wantErr(t, err, c.sentinel, c.msg)
			if (tk != nil) != c.hasTask {
				t.Fatalf("task = %v, want one: %v", tk, c.hasTask)
			}
			if tk != nil && tk.ID != "t" {
				t.Fatalf("task id = %q", tk.ID)
			}
			if errors.Is(err, ErrUndecodable) && errors.Is(err, ErrBadInput) {
				t.Fatal("both undecodable and bad input")
			}
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	body := []byte(`{"task_id":"big","task_name":"m","kwargs":{"reply_to":"r"},"args":[` + strings.Repeat("1,", 100) + `1]}`)
	lim := Limits{MaxBodyBytes: 64}
	tk, err := Parse(body, nil, lim)
	wantErr(t, err, ErrTooLarge, "limit 64")
	if tk == nil || tk.ID != "big" || tk.ReplyTo != "r" || errors.Is(err, ErrUndecodable) {
		t.Fatalf("task %+v", tk)
	}
	// The tag names it without reading the body.
	tk, err = Parse([]byte(strings.Repeat("x", 100)), map[string]string{TagTaskID: "tagged"}, lim)
	wantErr(t, err, ErrTooLarge)
	if tk == nil || tk.ID != "tagged" {
		t.Fatalf("task %+v", tk)
	}
	// Nothing names it: undecodable (and too large).
	tk, err = Parse([]byte(strings.Repeat("x", 100)), nil, lim)
	wantErr(t, err, ErrUndecodable)
	if !errors.Is(err, ErrTooLarge) || tk != nil {
		t.Fatalf("err %v task %v", err, tk)
	}
}

func TestParseTags(t *testing.T) {
	for _, c := range []struct {
		attempt string
		want    int
	}{{"", 1}, {"2", 2}, {" 4 ", 4}, {"0", 1}, {"-2", 1}, {"x", 1}} {
		tk, err := Parse([]byte(`{"task_id":"t","task_name":"m"}`), map[string]string{TagAttempt: c.attempt, TagContentType: "application/json; charset=utf-8"}, Limits{})
		if err != nil || tk.Attempt != c.want {
			t.Errorf("attempt tag %q: %v, %v", c.attempt, tk, err)
		}
	}
}

func TestParseQuery(t *testing.T) {
	q, err := ParseQuery([]byte(`{"task_name":"mlp","args":[[1,2]],"kwargs":{}}`), nil, Limits{})
	if err != nil || q.ID != "" || q.Name != "mlp" {
		t.Fatalf("%+v %v", q, err)
	}
	q, err = ParseQuery([]byte(`{"task_name":"mlp"}`), map[string]string{TagTaskID: "q1"}, Limits{})
	if err != nil || q.ID != "q1" {
		t.Fatalf("%+v %v", q, err)
	}
	_, err = ParseQuery([]byte(`{"args":[]}`), nil, Limits{})
	wantErr(t, err, ErrUndecodable, "no task_name")
}

func TestLimitsValidate(t *testing.T) {
	if err := (Limits{}).Validate(); err != nil {
		t.Error(err)
	}
	if err := (Limits{MaxBodyBytes: -1}).Validate(); err == nil {
		t.Error("negative limit accepted")
	}
}

// kwargs.parameters.progress: false turns a task's progress events off;
// true or absent leaves them to the model, in the JSON and the binary form,
// beside binary_data_output.
func TestParseProgressSwitch(t *testing.T) {
	x := tensor.NewTensor("x", []int64{1, 2}, []float32{1, 2})
	for _, tc := range []struct {
		name string
		body string
		opts []Option // or built by NewTask
		want bool     // NoProgress
	}{
		{"absent", `{"task_id":"t","task_name":"m"}`, nil, false},
		{"true", `{"task_id":"t","task_name":"m","kwargs":{"parameters":{"progress":true}}}`, nil, false},
		{"false", `{"task_id":"t","task_name":"m","kwargs":{"parameters":{"progress":false}}}`, nil, true},
		{"false beside binary_data_output", `{"task_id":"t","task_name":"m","kwargs":{"parameters":{"binary_data_output":true,"progress":false}}}`, nil, true},
		{"built", "", []Option{WithoutProgress()}, true},
		{"built with binary outputs", "", []Option{WithoutProgress(), WithBinaryOutputs()}, true},
		{"built binary", "", []Option{WithoutProgress(), WithBinaryInputs()}, true},
		{"built without the option", "", []Option{WithBinaryOutputs()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, tags := []byte(tc.body), map[string]string(nil)
			if tc.body == "" {
				var err error
				if body, tags, err = NewTask("t", "m", []tensor.Tensor{x}, tc.opts...); err != nil {
					t.Fatal(err)
				}
			}
			tk, err := Parse(body, tags, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if tk.NoProgress != tc.want {
				t.Errorf("NoProgress = %v, want %v (body %q)", tk.NoProgress, tc.want, body)
			}
			if tc.body == "" {
				if _, err := tk.Inputs(tensor.ModelInfo{Inputs: []tensor.TensorInfo{{Name: "x", DType: tensor.FP32, Dims: []int64{-1, 2}}}}, Limits{}); err != nil {
					t.Errorf("inputs of the built task: %v", err)
				}
			}
		})
	}
}
