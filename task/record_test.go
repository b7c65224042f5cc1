package task

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/tensor"
)

func TestStatus(t *testing.T) {
	for s, term := range map[Status]bool{StatusPending: false, StatusStarted: false, StatusSuccess: true, StatusFailure: true, StatusCancelled: true} {
		if s.Terminal() != term || !s.Valid() {
			t.Errorf("%s: terminal %v valid %v", s, s.Terminal(), s.Valid())
		}
	}
	if Status("DONE").Valid() || Status("DONE").Terminal() {
		t.Error("unknown status valid")
	}
}

func TestRecordJSON(t *testing.T) {
	created := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	done := created.Add(1500*time.Millisecond + 42*time.Microsecond)
	r := Record{TaskID: "t1", Status: StatusSuccess, Result: []byte(`{"label":"POSITIVE"}`), CreatedAt: created, CompletedAt: done}
	want := `{"task_id":"t1","status":"SUCCESS","result":{"label":"POSITIVE"},"created_at":"2026-06-01T12:00:00.000000+00:00","completed_at":"2026-06-01T12:00:01.500042+00:00"}`
	if got := string(r.AppendJSON(nil)); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	f := Record{TaskID: "t2", Status: StatusFailure, Error: "ValueError: \"bad\"", Attempts: 4, Worker: "w-1",
		Timings: map[string]float64{"queue": 0.25, "infer": 0.001}, ResultRef: "http://h/v1/tasks/t2"}
	want = `{"task_id":"t2","status":"FAILURE","result":null,"created_at":null,"completed_at":null,"error":"ValueError: \"bad\"","attempts":4,"worker":"w-1","timings":{"infer":0.001,"queue":0.25},"result_ref":"http://h/v1/tasks/t2"}`
	if got := string(f.AppendJSON(nil)); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// Python reads it: plain JSON with the adapter's field names.
	var m map[string]any
	if err := json.Unmarshal(f.AppendJSON(nil), &m); err != nil || m["error"] != `ValueError: "bad"` {
		t.Errorf("%v %v", m, err)
	}
	// encoding/json embeds it.
	b, err := json.Marshal(struct{ R *Record }{&r})
	if err != nil || !strings.Contains(string(b), `"task_id":"t1"`) {
		t.Errorf("%s %v", b, err)
	}
	body, tags := r.Encode()
	if string(body) != string(r.AppendJSON(nil)) || tags[TagTaskID] != "t1" || tags[TagStatus] != "SUCCESS" || tags[TagContentType] != ContentTypeJSON {
		t.Errorf("Encode: %s %v", body, tags)
	}
	// Round trip.
	for _, rec := range []Record{r, f} {
		body, _ := rec.Encode()
		got, err := ParseRecord(body)
		if err != nil {
			t.Fatal(err)
		}
		if got.TaskID != rec.TaskID || got.Status != rec.Status || string(got.Result) != string(rec.Result) ||
			!got.CreatedAt.Equal(rec.CreatedAt) || !got.CompletedAt.Equal(rec.CompletedAt) || got.Error != rec.Error ||
			got.Attempts != rec.Attempts || got.Worker != rec.Worker || got.ResultRef != rec.ResultRef || len(got.Timings) != len(rec.Timings) {
			t.Errorf("round trip %+v\nwant %+v", got, rec)
		}
	}
}

func TestParseRecordAdapter(t *testing.T) {
	// What the Python adapter writes, nulls and unknown fields included.
	body := `{"task_id": "t", "status": "PENDING", "result": null, "created_at": "2026-06-01T12:00:00.000000+00:00", "completed_at": null, "error": null, "extra": [1, {"a": 2}]}` + "\n"
	r, err := ParseRecord([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != StatusPending || r.Result != nil || r.Error != "" || r.CreatedAt.IsZero() || !r.CompletedAt.IsZero() || r.Binary != nil {
		t.Errorf("%+v", r)
	}
	for _, c := range []struct{ body, msg string }{
		{`[]`, "want a JSON object"},
		{`{"status":"SUCCESS"}`, "no task_id or status"},
		{`{"task_id":"t","status":"SUCCESS","attempts":"x"}`, "attempts"},
		{`{"task_id":"t","status":"SUCCESS","error":5}`, "error: want a string"},
		{`{"task_id":"t","status":"SUCCESS","result":[1,}`, "invalid JSON"},
	} {
		_, err := ParseRecord([]byte(c.body))
		wantErr(t, err, ErrMalformed, c.msg)
	}
}

// TestInferResponseRoundTrip: every datatype as JSON data and as binary
// output, through a record body and back.
func TestInferResponseRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var outs []tensor.Tensor
	for _, dt := range allDTypes {
		outs = append(outs, randomTensor(r, "o_"+dt.String(), dt, []int64{2, 3}))
	}
	for _, mode := range []string{"json", "binary", "mixed"} {
		t.Run(mode, func(t *testing.T) {
			var tk *Task
			switch mode {
			case "binary":
				tk = &Task{BinaryOutputs: true}
			case "mixed":
				tk = &Task{Outputs: []OutputRequest{{Name: "o_FP32", Binary: true}, {Name: "o_BYTES", Binary: true}, {Name: "o_INT8"}}}
			}
			resp := NewInferResponse("mlp", "1", outs, tk)
			result, bin, err := resp.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if mode == "json" && (bin != nil || !json.Valid(result)) {
				t.Fatalf("JSON response: binary %d bytes, valid %v", len(bin), json.Valid(result))
			}
			rec := Record{TaskID: "t", Status: StatusSuccess, Result: result, Binary: bin, CreatedAt: time.Now()}
			body, tags := rec.Encode()
			if (tags[TagContentType] == ContentTypeBinary) != (mode != "json") {
				t.Fatalf("tags %v", tags)
			}
			got, err := ParseRecord(body)
			if err != nil {
				t.Fatal(err)
			}
			dec, err := got.Response()
			if err != nil {
				t.Fatal(err)
			}
			if dec.ModelName != "mlp" || dec.ModelVersion != "1" {
				t.Errorf("model %q %q", dec.ModelName, dec.ModelVersion)
			}
			checkTensors(t, dec.Tensors(), outs)
			for i, o := range dec.Outputs {
				if o.Binary != resp.Outputs[i].Binary {
					t.Errorf("output %s binary %v", o.Name, o.Binary)
				}
				if o.Binary && !within(o.Data, body) {
					t.Errorf("binary output %s copied", o.Name)
				}
			}
		})
	}
}

func TestInferResponseJSON(t *testing.T) {
	y := tensor.NewTensor("y", []int64{1, 5}, []float32{0.1, float32(math.Inf(-1)), float32(math.NaN()), 1e-45, 3.4028235e38})
	result, _, err := NewInferResponse("mlp", "", []tensor.Tensor{y}, nil).Encode()
	if err != nil {
		t.Fatal(err)
	}
	// Non-finite values as the protobuf JSON mapping writes them: strings
	// that every JSON reader takes.
	want := `{"model_name":"mlp","model_version":"","outputs":[{"name":"y","shape":[1,5],"datatype":"FP32","data":[0.1,"-Infinity","NaN",1e-45,3.4028235e+38]}]}`
	if string(result) != want {
		t.Errorf("got\n%s\nwant\n%s", result, want)
	}
	if !json.Valid(result) {
		t.Errorf("not valid JSON: %s", result)
	}
	_, _, err = NewInferResponse("m", "", []tensor.Tensor{{Name: "bad", DType: tensor.FP32, Shape: []int64{3}}}, nil).Encode()
	wantErr(t, err, nil, `output "bad"`)
	// Binary data the JSON does not account for.
	_, err = DecodeInferResponse([]byte(`{"model_name":"m","outputs":[]}`), []byte{1})
	wantErr(t, err, ErrMalformed, "binary outputs take 0 bytes, 1 follow")
	_, err = DecodeInferResponse([]byte(`{"outputs":[{"name":"y","shape":[9999999],"datatype":"FP32","data":[1]}]}`), nil)
	wantErr(t, err, ErrMalformed, `output "y"`, "data holds 2 at most")
	_, err = DecodeInferResponse([]byte(`{"outputs":[{"name":"y","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`), make([]byte, 8))
	wantErr(t, err, ErrMalformed, `output "y"`, "overruns")
	_, err = DecodeInferResponse(nil, nil)
	wantErr(t, err, ErrMalformed, "no result")
}

func TestProgress(t *testing.T) {
	p := Progress{TaskID: "t1", Pct: 40, Detail: "running (batch 8)"}
	body, tags := p.Encode()
	if string(body) != `{"task_id":"t1","pct":40,"detail":"running (batch 8)"}` || tags[TagTaskID] != "t1" || tags[TagPct] != "40" {
		t.Errorf("%s %v", body, tags)
	}
	got, err := ParseProgress(body)
	if err != nil || got != p {
		t.Errorf("%+v %v", got, err)
	}
	got, err = ParseProgress([]byte(`{"task_id":"t1","pct":99.6}`))
	if err != nil || got.Pct != 100 || got.Detail != "" {
		t.Errorf("%+v %v", got, err)
	}
	_, err = ParseProgress([]byte(`{"task_id":"t1","pct":"x"}`))
	wantErr(t, err, ErrMalformed, "pct")
}

func TestQueryResponse(t *testing.T) {
	ok := QueryResponse{Status: StatusSuccess, Result: []byte(`{"model_name":"m","model_version":"","outputs":[]}`)}
	body, tags := ok.Encode()
	if string(body) != `{"status":"SUCCESS","result":{"model_name":"m","model_version":"","outputs":[]},"error":null}` || tags[TagContentType] != ContentTypeJSON {
		t.Errorf("%s %v", body, tags)
	}
	fail := QueryResponse{Status: StatusFailure, Error: `task: bad input: input "x": expected FP32 [-1,16], got FP32 [1,15]`}
	body, _ = fail.Encode()
	if string(body) != `{"status":"FAILURE","result":null,"error":"task: bad input: input \"x\": expected FP32 [-1,16], got FP32 [1,15]"}` {
		t.Errorf("%s", body)
	}
	got, err := ParseQueryResponse(body)
	if err != nil || got.Status != StatusFailure || got.Error != fail.Error || got.Result != nil {
		t.Errorf("%+v %v", got, err)
	}
	// Binary outputs.
	y := tensor.NewTensor("y", []int64{1, 2}, []float32{1, 2})
	result, bin, _ := NewInferResponse("m", "", []tensor.Tensor{y}, &Task{BinaryOutputs: true}).Encode()
	body, tags = (&QueryResponse{Status: StatusSuccess, Result: result, Binary: bin}).Encode()
	if tags[TagContentType] != ContentTypeBinary {
		t.Errorf("tags %v", tags)
	}
	got, err = ParseQueryResponse(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := got.Response()
	if err != nil {
		t.Fatal(err)
	}
	checkTensors(t, resp.Tensors(), []tensor.Tensor{y})
	_, err = ParseQueryResponse([]byte(`{"result":1}`))
	wantErr(t, err, ErrMalformed, "no status")
}

func TestLogValue(t *testing.T) {
	tk := &Task{ID: "t", Name: "m", Attempt: 2}
	if s := tk.LogValue().String(); !strings.Contains(s, "task_id=t") || !strings.Contains(s, "attempt=2") {
		t.Errorf("%s", s)
	}
}

// TestNonFiniteOutputsReadBack: a model that outputs NaN or an infinity
// gets a SUCCESS record whose JSON every client reads (encoding/json
// included: the values are the strings "NaN", "Infinity", "-Infinity");
// the record and the query response that carry it read back with the same
// values, and so do records written before, with Python's bare tokens.
func TestNonFiniteOutputsReadBack(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	outs := []tensor.Tensor{
		tensor.NewTensor("y", []int64{1, 4}, []float32{float32(nan), float32(inf), float32(-inf), 0.5}),
		tensor.NewTensor("d", []int64{1, 4}, []float64{nan, inf, -inf, 0.5}),
		{Name: "h", DType: tensor.FP16, Shape: []int64{1, 4}, Data: []byte{0x00, 0x7e, 0x00, 0x7c, 0x00, 0xfc, 0x00, 0x38}},
	}
	result, _, err := NewInferResponse("m", "1", outs, nil).Encode()
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, resp *InferResponse, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(resp.Outputs) != len(outs) {
			t.Fatalf("%s: %d outputs", what, len(resp.Outputs))
		}
		for i, o := range resp.Outputs {
			var got []float64
			switch o.DType {
			case tensor.FP32:
				v, _ := tensor.Values[float32](o.Tensor)
				for _, x := range v {
					got = append(got, float64(x))
				}
			case tensor.FP64:
				got, _ = tensor.Values[float64](o.Tensor)
			case tensor.FP16:
				for k := 0; k+1 < len(o.Data); k += 2 {
					got = append(got, float64(tensor.HalfToFloat32(uint16(o.Data[k])|uint16(o.Data[k+1])<<8)))
				}
			}
			if o.DType != outs[i].DType || len(got) != 4 || !math.IsNaN(got[0]) || !math.IsInf(got[1], 1) || !math.IsInf(got[2], -1) || got[3] != 0.5 {
				t.Errorf("%s: output %s %s = %v, want NaN +Inf -Inf 0.5", what, o.Name, o.DType, got)
			}
		}
	}
	body, _ := (&Record{TaskID: "t", Status: StatusSuccess, Result: result, Timings: map[string]float64{"infer": nan, "queue": inf}}).Encode()
	var generic map[string]any
	if err := json.Unmarshal(body, &generic); err != nil {
		t.Errorf("encoding/json refuses the record: %v\n%s", err, body)
	}
	rec, err := ParseRecord(body)
	if err != nil {
		t.Fatalf("ParseRecord(%s): %v", body, err)
	}
	if !math.IsNaN(rec.Timings["infer"]) || !math.IsInf(rec.Timings["queue"], 1) {
		t.Errorf("timings %v", rec.Timings)
	}
	resp, err := rec.Response()
	check("record", resp, err)
	qbody, _ := (&QueryResponse{Status: StatusSuccess, Result: result}).Encode()
	if !json.Valid(qbody) {
		t.Errorf("query response is not valid JSON: %s", qbody)
	}
	q, err := ParseQueryResponse(qbody)
	if err != nil {
		t.Fatalf("ParseQueryResponse(%s): %v", qbody, err)
	}
	resp, err = q.Response()
	check("query response", resp, err)
	// A record written before (bare tokens, as Python's json writes them)
	// still reads.
	old := []byte(`{"task_id":"t","status":"SUCCESS","result":{"model_name":"m","model_version":"1","outputs":[` +
		`{"name":"y","shape":[1,4],"datatype":"FP32","data":[NaN,Infinity,-Infinity,0.5]},` +
		`{"name":"d","shape":[1,4],"datatype":"FP64","data":[NaN,Infinity,-Infinity,0.5]},` +
		`{"name":"h","shape":[1,4],"datatype":"FP16","data":[NaN,Infinity,-Infinity,0.5]}]},` +
		`"created_at":null,"completed_at":null,"timings":{"infer":NaN}}`)
	rec, err = ParseRecord(old)
	if err != nil {
		t.Fatalf("ParseRecord(old): %v", err)
	}
	resp, err = rec.Response()
	check("old record", resp, err)
}

// TestHalfOutputRange: FP16 data in JSON (a response's outputs, and what
// `inferq infer --input` reads) is refused when a finite number is beyond
// the half range, not turned into an infinity; the element is named.
func TestHalfOutputRange(t *testing.T) {
	for _, c := range []struct {
		data string
		want []uint16
		err  string
	}{
		{`[1,65504,65519,-65519]`, []uint16{0x3c00, 0x7bff, 0x7bff, 0xfbff}, ""},
		{`[1,2,3,65520]`, nil, "element 3: 65520 is out of range for FP16"},
		{`[[1,2],[-70000,4]]`, nil, "element 2: -70000 is out of range for FP16"},
		{`[1,2,3,1e999]`, nil, "element 3: 1e999 is out of range for FP16"},
		{`[NaN,"Infinity",-Infinity,1e-9]`, []uint16{0x7e00, 0x7c00, 0xfc00, 0}, ""},
	} {
		resp, err := DecodeInferResponse([]byte(`{"outputs":[{"name":"h","datatype":"FP16","data":`+c.data+`}]}`), nil)
		if c.err != "" {
			wantErr(t, err, ErrMalformed, `output "h": `+c.err)
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.data, err)
			continue
		}
		d := resp.Outputs[0].Data
		for k, w := range c.want {
			if g := uint16(d[2*k]) | uint16(d[2*k+1])<<8; g != w {
				t.Errorf("%s: element %d = %#04x, want %#04x", c.data, k, g, w)
			}
		}
	}
}

// A result too large for the broker comes as a record with result_ref and
// no result: Response says so, with the reference, instead of calling the
// record malformed.
func TestResponseByReference(t *testing.T) {
	body := []byte(`{"task_id":"t9","status":"SUCCESS","result":null,"created_at":null,"completed_at":null,"result_ref":"/v1/tasks/t9"}`)
	rec, err := ParseRecord(body)
	if err != nil {
		t.Fatal(err)
	}
	_, err = rec.Response()
	re, ok := errors.AsType[*ResultRefError](err)
	if !errors.Is(err, ErrResultByReference) || errors.Is(err, ErrMalformed) || !ok || re.TaskID != "t9" || re.Ref != "/v1/tasks/t9" {
		t.Fatalf("Response: %v, want a *ResultRefError for t9 at /v1/tasks/t9 wrapping ErrResultByReference", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "stored by reference") || !strings.Contains(msg, "/v1/tasks/t9") {
		t.Errorf("error %q does not say where the result is", msg)
	}
	// A record without a result or a reference is still malformed.
	rec.ResultRef = ""
	if _, err := rec.Response(); !errors.Is(err, ErrMalformed) {
		t.Errorf("no result, no reference: %v, want ErrMalformed", err)
	}
}
